"""The rows of a governed board: settings, managers, intents, artifacts, review effects, events.

Frozen values, as :mod:`._rows`; the rules in ``_board/_governance``,
``_board/_intents``, ``_board/_reviews`` and ``_board/_record`` decide them.
Times are epoch milliseconds. An intent keeps only the SHA-256 of its approval
token (``approval_token_hash``), never the token.

Where they live (:class:`BoardRecords`, the seam both stores implement): the
keyed rows (:data:`KEYED_ROWS`) by ``(kind, room, key)`` in the order they were
first stored, and a room's events numbered across the store (1, 2, ...), read
in pages with a filter (:class:`EventFilter`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final, Protocol, TypeVar, final

import attrs

__all__ = [
    "KEYED_ROWS",
    "ArtifactRow",
    "BoardIntentRow",
    "BoardManagerRow",
    "BoardRecords",
    "BoardSettingsRow",
    "EventFilter",
    "ReviewEffectRow",
    "RoomEventRow",
    "kind_of",
]


def _strings(values: Iterable[str]) -> tuple[str, ...]:
    return tuple(values)


@final
@attrs.frozen(kw_only=True)
class BoardSettingsRow:
    """A room's Board Manager mode and failover, and who set them (absent: the defaults)."""

    room_id: str
    manager_mode: str
    manager_failover: str
    updated_by: str | None
    created_at: int
    updated_at: int

    @property
    def key(self) -> str:
        """Its key in its room: a room has one."""
        return "settings"


@final
@attrs.frozen(kw_only=True)
class BoardManagerRow:
    """A Board Manager assignment: a live worker session promoted by an admin, until released."""

    manager_id: str
    room_id: str
    agent_session_id: str
    agent_key: str
    actor_label: str
    runtime_source: str
    assigned_by: str
    status: str = "active"
    last_heartbeat_at: int | None = None
    released_by: str | None = None
    release_reason: str | None = None
    released_at: int | None = None
    created_at: int
    updated_at: int

    @property
    def key(self) -> str:
        """Its key in its room."""
        return self.manager_id


@final
@attrs.frozen(kw_only=True)
class BoardIntentRow:
    """A proposed high-impact board action, its exact payload, and its decision.

    ``proposer_worker`` records that the proposer called with its own worker
    session (so its session, not a token, may carry the approval out).
    ``approved_task_status`` / ``approved_task_assignee_agent_key`` are the
    task as it stood at approval; ``approved_manager_id`` the approving Board
    Manager's assignment (``None`` when a person approved).
    """

    intent_id: str
    room_id: str
    task_id: str | None
    action_type: str
    payload: dict[str, Any]
    payload_hash: str
    status: str = "pending"
    proposer_actor_label: str | None = None
    proposer_actor_key: str | None = None
    proposer_actor_instance_id: str | None = None
    proposer_agent_session_id: str | None = None
    proposer_worker: bool = False
    decision_by: str | None = None
    decision_reason: str | None = None
    approval_token_hash: str | None = attrs.field(default=None, repr=False)
    decided_at: int | None = None
    expires_at: int | None = None
    approved_task_status: str | None = None
    approved_task_assignee_agent_key: str | None = None
    approved_manager_id: str | None = None
    created_at: int
    updated_at: int

    @property
    def key(self) -> str:
        """Its key in its room."""
        return self.intent_id


@final
@attrs.frozen(kw_only=True)
class ArtifactRow:
    """A shared workflow artifact (a PR, a branch, a review...) and the tasks it is linked to.

    ``identity_key`` is derived from its stable identity (url, else provider,
    kind and id/number/ref), so publishing it again updates the same row.
    """

    room_id: str
    identity_key: str
    provider: str
    kind: str
    artifact_id: str | None = None
    number: int | None = None
    title: str | None = None
    url: str | None = None
    ref: str | None = None
    state: str | None = None
    source: str = "manual"
    published_by: str | None = None
    linked_task_ids: tuple[str, ...] = attrs.field(default=(), converter=_strings)
    created_at: int
    updated_at: int

    @property
    def key(self) -> str:
        """Its key in its room."""
        return self.identity_key


@final
@attrs.frozen(kw_only=True)
class ReviewEffectRow:
    """A submitted review verdict, keyed by its task and idempotency key (a replay finds it)."""

    effect_id: str
    room_id: str
    task_id: str
    idempotency_key: str
    lease_id: str
    verdict: str
    body: str
    expected_head_sha: str
    pull_request_url: str
    agent_key: str
    agent_session_id: str
    actor_label: str
    state: str = "succeeded"
    created_at: int
    updated_at: int

    @property
    def key(self) -> str:
        """Its key in its room: the task and the idempotency key."""
        return f"{self.task_id}\n{self.idempotency_key}"


@final
@attrs.frozen(kw_only=True)
class RoomEventRow:
    """One entry of a room's event record; ``event_id`` is assigned by the store."""

    event_id: int = 0
    room_id: str
    event_type: str
    action: str
    object_id: str | None = None
    object_url: str | None = None
    title: str | None = None
    state: str | None = None
    actor: str | None = None
    metadata: dict[str, Any] = attrs.field(factory=dict)
    linked_task_id: str | None = None
    created_at: int


@final
@attrs.frozen(kw_only=True)
class EventFilter:
    """Which events a page holds: every field given must match (times inclusive)."""

    event_type: str | None = None
    object_id: str | None = None
    actor: str | None = None
    since: int | None = None
    until: int | None = None

    def matches(self, event: RoomEventRow) -> bool:
        """Whether ``event`` passes the filter."""
        return (
            (self.event_type is None or event.event_type == self.event_type)
            and (self.object_id is None or event.object_id == self.object_id)
            and (self.actor is None or event.actor == self.actor)
            and (self.since is None or event.created_at >= self.since)
            and (self.until is None or event.created_at <= self.until)
        )


KeyedRow = BoardSettingsRow | BoardManagerRow | BoardIntentRow | ArtifactRow | ReviewEffectRow
_Keyed = TypeVar(
    "_Keyed", BoardSettingsRow, BoardManagerRow, BoardIntentRow, ArtifactRow, ReviewEffectRow
)
# Each keyed row's kind, as the stores name it.
KEYED_ROWS: Final[dict[type[Any], str]] = {
    BoardSettingsRow: "board_settings",
    BoardManagerRow: "board_manager",
    BoardIntentRow: "board_intent",
    ArtifactRow: "artifact",
    ReviewEffectRow: "review_effect",
}


def kind_of(cls: type[Any]) -> str:
    """The stores' name for a keyed row class."""
    return KEYED_ROWS[cls]


class BoardRecords(Protocol):
    """The governed board's rows, as a store keeps them. Every call is synchronous and short;
    writes join the store's :meth:`~._store.RoomStore.atomic` block."""

    def get_row(self, cls: type[_Keyed], room_id: str, key: str) -> _Keyed | None:
        """The room's row of that class with that key, if any."""
        ...

    def put_row(self, row: KeyedRow) -> None:
        """Insert or replace a keyed row (a new key goes last in its room's order)."""
        ...

    def room_rows(self, cls: type[_Keyed], room_id: str) -> list[_Keyed]:
        """Every row of that class in the room, in the order their keys were first stored."""
        ...

    def add_event(self, event: RoomEventRow) -> RoomEventRow:
        """Store an event and return it with its new ``event_id``."""
        ...

    def events_page(
        self, room_id: str, *, after: int, limit: int, match: EventFilter
    ) -> list[RoomEventRow]:
        """Up to ``limit`` of the room's events numbered above ``after`` that pass ``match``,
        oldest first."""
        ...
