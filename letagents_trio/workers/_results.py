"""What :class:`~letagents_trio.workers.WorkerHandles` gives back: frozen values.

A registration (:class:`WorkerRegistration`: the handle, the session, and what
the room said about it once) and a snapshot of the handles' memory
(:class:`WorkerHandlesStatistics`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, final

import attrs

from ._wire import public_session

if TYPE_CHECKING:
    from .._session import AgentSession

__all__ = ["WorkerHandlesStatistics", "WorkerRegistration"]


def _freeze_leases(
    value: tuple[Mapping[str, str], ...] | list[Mapping[str, str]],
) -> tuple[Mapping[str, str], ...]:
    return tuple(dict(lease) for lease in value)


@final
@attrs.frozen(kw_only=True)
class WorkerRegistration:
    """What :meth:`WorkerHandles.register` gives back.

    Attributes:
        worker_id: the handle the chat keeps (``worker_`` + 32 hex).
        session: the stored session (its token is hidden from ``repr``).
        name_held_here: on a create with a new key, the display name of a live
            worker this process already holds under the same name in the room
            (§5.5), else ``None``. Never the other worker's handle.
        adopted_task_leases: ``{lease_id, task_id, kind}`` of leases the room
            moved to this session, returned once and never stored.
    """

    worker_id: str
    session: AgentSession
    name_held_here: str | None = None
    adopted_task_leases: tuple[Mapping[str, str], ...] = attrs.field(
        default=(), converter=_freeze_leases
    )

    def public_session(self) -> dict[str, Any]:
        """The session's public projection (§5.3): never a token or a bearer."""
        return public_session(self.session)


@final
@attrs.frozen(kw_only=True)
class WorkerHandlesStatistics:
    """A snapshot of a :class:`WorkerHandles`.

    Attributes:
        pinned_sessions: sessions this process pinned (the fast path and
            ``acting_as`` work for these only).
        registrations_in_flight: (worker, room) registrations running now.
        account_cached: whether the account login is cached.
    """

    pinned_sessions: int
    registrations_in_flight: int
    account_cached: bool
