"""The rows the reference room keeps: frozen values, changed by building new ones.

Every kind of row the room stores is here, with the few facts that belong to a
row itself (whether a session is live, whether a lease is active at a time, a
task's id). Times are integer epoch milliseconds; ``None`` when unset. Session
tokens are never kept: only their SHA-256 (``token_hash``).

The stores (:mod:`._store`, :mod:`._sqlite`) keep these rows; the rules beside
:class:`~.._room.Room` read them and decide the next ones (``attrs.evolve``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Final, final

import attrs

__all__ = [
    "END_REASON_DISCONNECT",
    "END_REASON_NAME_HANDOVER",
    "END_REASON_REPLACED",
    "END_REASON_ROOM_ADMIN",
    "LEASE_ACTIVE",
    "Account",
    "GuidelinesRow",
    "KnowledgeRow",
    "LeaseRow",
    "MessageRow",
    "RoomRow",
    "SessionRow",
    "TaskRow",
    "task_id_of",
]


@final
@attrs.frozen(kw_only=True)
class Account:
    """An owner account (dev auth: an owner token maps to a login)."""

    account_id: str
    login: str


def _strings(values: Iterable[str]) -> tuple[str, ...]:
    """A stored list (JSON has no tuples) as the row's tuple."""
    return tuple(values)


@final
@attrs.frozen(kw_only=True)
class RoomRow:
    """A room; rooms exist from their first registration (or an admin grant) on.

    Attributes:
        created_by: the account id whose registration made the room (its
            first admin); None for a room made by a grant, or stored before
            rooms recorded it.
        admins: account ids granted admin explicitly, besides the creator.
    """

    room_id: str
    created_at: int
    created_by: str | None = None
    admins: tuple[str, ...] = attrs.field(default=(), converter=_strings)


# How a session was ended, stored in its end_reason: it left itself, a newer
# registration of its instance replaced it, another took its name over, or the
# room's admin ended it (then its leases pass to no one).
END_REASON_DISCONNECT: Final = "disconnect"
END_REASON_REPLACED: Final = "replaced"
END_REASON_NAME_HANDOVER: Final = "name_handover"
END_REASON_ROOM_ADMIN: Final = "room_admin"


@final
@attrs.frozen(kw_only=True)
class SessionRow:
    """One agent session with the evidence columns of PROTOCOL.md §7.1.

    Times are epoch milliseconds (``None`` when unset). ``token_hash`` is the
    SHA-256 hex of the session token; the token itself is never stored.
    """

    session_id: str
    room_id: str
    token_hash: str = attrs.field(repr=False)
    session_kind: str = "worker"
    runtime: str | None = None
    host_id: str | None = None
    host_kind: str | None = None
    host_label: str | None = None
    liveness_capability: str | None = None
    tool_bridge_id: str | None = None
    actor_label: str = ""
    agent_key: str = ""
    agent_instance_id: str | None = None
    display_name: str = ""
    assigned_base_display_name: str | None = None
    owner_account_id: str = ""
    owner_label: str = ""
    supervisor_grant_id: str | None = None
    ide_label: str | None = None
    repo_branch: str | None = None
    created_at: int = 0
    updated_at: int = 0
    last_seen_at: int | None = None
    ended_at: int | None = None
    end_reason: str | None = None
    agent_heard_at: int | None = None
    process_seen_at: int | None = None
    process_connection_id: str | None = None
    process_disconnected_at: int | None = None
    process_host_id: str | None = None
    # Liveness notices (§7.5): the outage epoch last announced offline, when,
    # and when the recovery that followed it was announced.
    offline_epoch_announced: int | None = None
    offline_announced_at: int | None = None
    recovery_announced_at: int | None = None

    @property
    def live(self) -> bool:
        """True while the session has not ended."""
        return self.ended_at is None


@final
@attrs.frozen(kw_only=True)
class MessageRow:
    """A room chat message; ``message_id`` is assigned by the store (1, 2, ...).

    ``reply_to_id`` is the message it answers, ``thread_root_id`` the root of
    the thread it belongs to (``None``: it is no reply, or a root itself).
    """

    message_id: int = 0
    room_id: str
    sender: str
    text: str
    created_at: int
    agent_session_id: str | None = None
    source: str | None = None
    prompt_kind: str | None = None
    dedupe_id: str | None = None
    reply_to_id: int | None = None
    thread_root_id: int | None = None
    # Whom the room addresses the message to (``{agent_key, reason}``, a wake
    # notice's), and the one line people see instead of ``text``.
    addressed_to: dict[str, str] | None = None
    display_text: str | None = None


def task_id_of(number: int) -> str:
    """A task's id: ``task_<n>``, its number in its room (the letagents API's form)."""
    return f"task_{number}"


@final
@attrs.frozen(kw_only=True)
class TaskRow:
    """A task on a room's board; ``number`` is assigned by the store (1, 2, ... per room)."""

    room_id: str
    number: int = 0
    title: str
    status: str = "proposed"
    description: str | None = None
    assignee: str | None = None
    assignee_agent_key: str | None = None
    created_by: str | None = None
    source_message_id: str | None = None
    pr_url: str | None = None
    created_at: int
    updated_at: int

    @property
    def task_id(self) -> str:
        """The task's id in its room, ``task_<number>``."""
        return task_id_of(self.number)


# The status of a lease that still binds (the others: released, revoked, expired).
LEASE_ACTIVE: Final = "active"


@final
@attrs.frozen(kw_only=True)
class LeaseRow:
    """A session's hold on a task, of a kind (``work``), until released, revoked or expired.

    The identity fields say whom it binds: the agent key and instance, the
    session, and the label the room shows. ``epoch`` moves on when a work lease
    passes to a successor session (adoption, §7.3).
    """

    lease_id: str
    room_id: str
    task_id: str
    kind: str
    agent_session_id: str | None
    agent_key: str
    agent_instance_id: str | None = None
    actor_label: str = ""
    epoch: int = 1
    status: str = LEASE_ACTIVE
    branch_ref: str | None = None
    pr_url: str | None = None
    output_intent: str | None = None
    created_by: str | None = None
    revoked_reason: str | None = None
    created_at: int
    updated_at: int
    expires_at: int | None = None

    def active(self, now_ms: int) -> bool:
        """True when its status is active and it has not expired at ``now_ms``."""
        return self.status == LEASE_ACTIVE and (self.expires_at is None or self.expires_at > now_ms)


@final
@attrs.frozen(kw_only=True)
class GuidelinesRow:
    """A room's guidelines, as normalized and stored, and who set them when.

    ``guidelines`` is None once cleared (an empty text is stored as none).
    """

    room_id: str
    guidelines: str | None
    updated_by: str
    updated_at: int


@final
@attrs.frozen(kw_only=True)
class KnowledgeRow:
    """A room memory entry (``memory``) or a request for a person's input (``attention``).

    ``record_id`` is the client's own id, stable across retries; ``author`` and
    ``updated_by`` are ``{id, label, kind}`` (kind ``agent`` or ``human``);
    ``response`` is a person's answer to a request, once given.
    """

    room_id: str
    record_id: str
    type: str
    category: str
    title: str
    body: str
    recommendation: str = ""
    unblocks: str = ""
    source_url: str = ""
    source_message_id: str = ""
    version: int = 1
    author: dict[str, str]
    updated_by: dict[str, str]
    created_at: int
    updated_at: int
    archived: bool = False
    response: dict[str, Any] | None = None
