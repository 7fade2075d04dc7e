"""The rows of what agents keep in a room beyond chat: wake rules, reasoning, work captures.

Each kind names itself (``KIND``), its key (``key``) and, where the room looks
rows up by it, a ``status``; :mod:`._agent_tables` stores every kind the same
way in both stores. Times are integer epoch milliseconds, as in :mod:`._rows`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar, Final, final

import attrs

__all__ = [
    "RULE_ACTIVE",
    "AgentRecord",
    "AgentWorkRow",
    "ReasoningRow",
    "ReasoningUpdateRow",
    "WakeRuleRow",
    "WorkPageRow",
]


def _ints(values: Iterable[int]) -> tuple[int, ...]:
    """A stored list (JSON has no tuples) as the row's tuple."""
    return tuple(values)


# The status of a wake rule still waiting (the others: fired, expired,
# cancelled, retired).
RULE_ACTIVE: Final = "active"


@final
@attrs.frozen(kw_only=True)
class WakeRuleRow:
    """A wake rule: what one agent waits for in a room, and how the wait went.

    Attributes:
        rule_id: ``wake_`` and 20 hex digits.
        arguments: the canonical arguments (``_wake._rules.parse_rule``).
        baseline_status: for ``task.status_changed``, the task's status the
            rule compares against (the status at its last wake, or when made).
        next_check_at: when the room must look at the rule next (a timer's
            time, the end of a repeat's quiet minute, else its expiry).
        cancelled_by: ``{kind, id, label}`` of whoever cancelled it.
    """

    KIND: ClassVar[str] = "wake_rule"

    rule_id: str
    room_id: str
    agent_key: str
    agent_name: str
    session_id: str | None = None
    event: str
    arguments: dict[str, Any]
    identity_key: str
    note: str | None = None
    repeat: bool = False
    status: str = RULE_ACTIVE
    baseline_status: str | None = None
    next_check_at: int
    expires_at: int
    created_at: int
    updated_at: int
    fire_count: int = 0
    last_fired_at: int | None = None
    wake_message_id: int | None = None
    ended_at: int | None = None
    ended_reason: str | None = None
    cancelled_by: dict[str, str] | None = None

    @property
    def key(self) -> str:
        """The rule's id."""
        return self.rule_id


@final
@attrs.frozen(kw_only=True)
class ReasoningRow:
    """One agent's reasoning session in a room: its latest snapshot, replaced in place."""

    KIND: ClassVar[str] = "reasoning"

    reasoning_id: str
    room_id: str
    actor_label: str
    agent_key: str | None = None
    task_id: str | None = None
    anchor_message_id: str | None = None
    status: str | None = None
    summary: str
    latest_payload: dict[str, Any]
    update_count: int = 0
    created_at: int
    updated_at: int
    closed_at: int | None = None

    @property
    def key(self) -> str:
        """The session's id."""
        return self.reasoning_id


@final
@attrs.frozen(kw_only=True)
class ReasoningUpdateRow:
    """One snapshot posted to a reasoning session (its history)."""

    KIND: ClassVar[str] = "reasoning_update"

    update_id: str
    reasoning_id: str
    room_id: str
    actor_label: str | None = None
    payload: dict[str, Any]
    created_at: int
    status: str | None = None

    @property
    def key(self) -> str:
        """The update's id."""
        return self.update_id


@final
@attrs.frozen(kw_only=True)
class AgentWorkRow:
    """A published workspace capture: the summary an agent posted, and its review's pages.

    Attributes:
        attempt_id: a UUID, one per (agent, source message).
        source_message_id: the room message holding the capture's short summary.
        summary: the capture's bounded preview (``version`` 3).
        review_digest: the SHA-256 of the whole review's base64 text, once a
            page named it.
        review_total: how many pages the review has (0: no review).
        review_pages: the indexes received so far.
    """

    KIND: ClassVar[str] = "agent_work"

    attempt_id: str
    room_id: str
    agent_key: str
    actor_label: str
    session_id: str | None = None
    source_message_id: str
    summary: dict[str, Any]
    review_digest: str | None = None
    review_total: int = 0
    review_pages: tuple[int, ...] = attrs.field(default=(), converter=_ints)
    created_at: int
    updated_at: int
    status: str | None = None

    @property
    def key(self) -> str:
        """The attempt's id."""
        return self.attempt_id

    @property
    def review_complete(self) -> bool:
        """Whether every page of the review arrived (true when there is none)."""
        return len(self.review_pages) == self.review_total


@final
@attrs.frozen(kw_only=True)
class WorkPageRow:
    """One 64 KiB page of a capture's review (base64 of its gzipped JSON)."""

    KIND: ClassVar[str] = "work_page"

    attempt_id: str
    index: int
    room_id: str
    data: str
    status: str | None = None

    @property
    def key(self) -> str:
        """The attempt's id and the page's index."""
        return f"{self.attempt_id}:{self.index}"


AgentRecord = WakeRuleRow | ReasoningRow | ReasoningUpdateRow | AgentWorkRow | WorkPageRow
