"""The goodbye: every held session's exit, in its transport's order, under one deadline.

:meth:`ConnectionManager.announce_exits <letagents_trio.ConnectionManager.announce_exits>`
runs one :class:`Goodbye` when the manager's block is left, however it is
left (normal exit, an exception, the embedder cancelling its own scope,
Ctrl-C). With every holder and the connection each held, taken at once and
forgotten by the manager (so a second announcement sends nothing), it:

1. says goodbye for every session at once (or at most
   ``policy.exit_concurrency`` at a time, when set), in its connector's
   order (:meth:`~letagents_trio.ProcessConnector.goodbye`): over SSE its
   stream is closed (a socket close: so nothing the room sends back is read
   as news), then it POSTs ``…/process/exit`` with
   ``{agent_session_id, agent_session_token, process_connection_id}`` (the id
   of the stream that was open, or null) on a connection of its own while
   it waits for its answer. All at once is what a slow room needs (every
   exit waits one round trip, not one per turn); what keeps thousands of
   them cheap is the lean HTTP/1.1 path: each exit made when the room named
   the connection, and written on a connection an earlier exit was
   answered on when one is free (:mod:`letagents_trio._pool`), with no
   transport and no timeout scope per request. Over a WebSocket the exit
   goes over the open socket instead, and where the connector can write it
   at once (:meth:`~letagents_trio.ProcessConnector.leave_now`) it does so
   in one loop, with no task per session, before any of those holders is
   stopped;
2. runs under the manager's ONE shielded deadline,
   ``trio.move_on_after(policy.exit_deadline, shield=True)``. A slow or
   black-holed room never holds the process past it: the exits still waiting
   for their answers are cancelled ``policy.unwind_allowance`` before it per
   exit, so that their unwinding (each task cancelled, each socket closed)
   ends by the deadline too (:mod:`letagents_trio._unwind`);
3. reports one :class:`ExitAnnouncement` per session; failures are logged
   and reported, never raised.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from functools import partial
from typing import TYPE_CHECKING, Final, TypeVar, final

import attrs
import trio

from ._errors import ApiError, RoomUnreachable
from ._events import EventKind, HolderEvent
from ._holder import HolderStatus, ProcessHolder
from ._unwind import UnwindBudget

if TYPE_CHECKING:
    from ._connector import ProcessConnector
    from ._policy import HoldPolicy
    from ._session import AgentSession

__all__ = ["ExitAnnouncement", "Goodbye"]

# The manager's log: the goodbye is what the manager is for, and one logger
# name is what an embedder configures.
logger = logging.getLogger("letagents_trio.manager")

_T = TypeVar("_T")


@final
@attrs.frozen(kw_only=True)
class ExitAnnouncement:
    """How the exit announcement for one session went.

    Attributes:
        session_id: the session announced.
        connection_id: the ``process_connection_id`` sent (None when no stream was open).
        recorded: the room's answer; None when no answer came.
        error: why no answer came (``"deadline"``, ``"HTTP 503"``, ``"unreachable"``), if so.
        finished_at: when it finished, in seconds on trio's clock.
    """

    session_id: str
    connection_id: str | None
    recorded: bool | None
    error: str | None
    finished_at: float


@final
class Goodbye:
    """One goodbye of a connection manager: its sessions, its exits, its report.

    Args:
        held: every holder held when the goodbye began, with the connection it
            held (None when no stream was open).
        connector: how the holders' connections were made, and so how each says goodbye.
        policy: the manager's policy (``exit_concurrency``, ``unwind_allowance``).
        emit: where each session's ``EXIT`` event goes.
    """

    def __init__(
        self,
        held: Sequence[tuple[ProcessHolder, str | None]],
        *,
        connector: ProcessConnector,
        policy: HoldPolicy,
        emit: Callable[[HolderEvent], None],
    ) -> None:
        self._held = held
        self._sessions = len(held)
        self._connector = connector
        self._policy = policy
        self._emit = emit
        self._limiter = (
            None
            if policy.exit_concurrency is None
            else trio.CapacityLimiter(policy.exit_concurrency)
        )
        self._results: dict[str, ExitAnnouncement] = {}
        # Empty until the goodbye has ended; then one announcement per session held.
        self.report: tuple[ExitAnnouncement, ...] = ()

    def __repr__(self) -> str:
        return f"<Goodbye sessions={self._sessions} announced={len(self._results)}>"

    async def run(self, deadline: float) -> None:
        """Say every goodbye; exits in flight are cancelled early enough to unwind by ``deadline``.

        Once only. :attr:`report` is made however it ends: an exit that did
        not finish is reported with ``error="deadline"``. From then on the
        report is all the goodbye keeps (not the holders).

        Cancellation:
            Runs under its caller's deadline (the manager's shielded
            ``exit_deadline``); cancelled, it still makes its report.
        """
        budget = UnwindBudget(deadline, self._policy.unwind_allowance)
        try:
            with budget.scope:
                async with trio.open_nursery() as nursery:
                    left = await self._leave_now(nursery, budget)
                    # Only then are the holders stopped: their unwinding (each closes
                    # its stream) never delays an exit still to be written.
                    await _for_each(left, partial(ProcessHolder.stop, reason="process exit"))
        finally:
            now = trio.current_time()
            self.report = tuple(
                self._results.get(holder.session.session_id)
                or ExitAnnouncement(
                    session_id=holder.session.session_id,
                    connection_id=connection_id,
                    recorded=None,
                    error="deadline",
                    finished_at=now,
                )
                for holder, connection_id in self._held
            )
            # The report is all that is kept: a holder refers to its manager
            # (its callbacks), so keeping the holders here would leave the two
            # in a cycle for the collector's next full pass.
            self._held = ()

    def log(self, took: float) -> None:
        """Log the report: a warning when the deadline cut some exits, then its summary."""
        late = sum(1 for item in self.report if item.error == "deadline")
        if late:
            logger.warning(
                "exit deadline of %.1f s passed before %d of %d exits were announced",
                self._policy.exit_deadline,
                late,
                len(self.report),
            )
        # One line for the whole goodbye: a warning when some exit failed (an
        # unconfigured logging shows warnings), never one line per session.
        logger.log(
            logging.WARNING if any(item.error for item in self.report) else logging.INFO,
            "announced %d exits in %.0f ms: %s",
            len(self.report),
            took * 1000,
            _summary(self.report),
        )

    async def _leave_now(self, nursery: trio.Nursery, budget: UnwindBudget) -> list[ProcessHolder]:
        """Announce every exit the connector can at once; start a goodbye task for the rest.

        Returns the holders whose exit went at once (over their open sockets).
        """
        left: list[ProcessHolder] = []
        leave_now = self._connector.leave_now

        def leave(item: tuple[ProcessHolder, str | None]) -> None:
            holder, connection_id = item
            if leave_now(holder.session, connection_id):
                left.append(holder)
                self._finished(holder.session, connection_id, None, None)
            else:
                budget.exit_started()
                nursery.start_soon(self._announce_one, holder, connection_id, budget)

        await _for_each(self._held, leave)
        return left

    async def _goodbye(
        self, holder: ProcessHolder, connection_id: str | None
    ) -> tuple[bool | None, str | None]:
        """One session's goodbye, in its transport's order (the connector's ``goodbye``).

        SSE closes the stream, then announces the exit; a WebSocket sends the
        exit over its open socket, then closes it.
        """
        try:
            recorded = await self._connector.goodbye(
                holder.session, connection_id, partial(_stop_holder, holder)
            )
            return recorded, None
        except ApiError as exc:
            return None, f"HTTP {exc.status}"
        except RoomUnreachable:
            return None, "unreachable"

    async def _announce_one(
        self, holder: ProcessHolder, connection_id: str | None, budget: UnwindBudget
    ) -> None:
        if self._limiter is None:
            recorded, error = await self._goodbye(holder, connection_id)
        else:
            async with self._limiter:
                recorded, error = await self._goodbye(holder, connection_id)
        # A connector may close the stream itself rather than wait for the holder.
        holder.stop("process exit")
        self._finished(holder.session, connection_id, recorded, error)
        budget.exit_ended()

    def _finished(
        self,
        session: AgentSession,
        connection_id: str | None,
        recorded: bool | None,
        error: str | None,
    ) -> None:
        """Report one session's goodbye: its :class:`ExitAnnouncement` and its exit event."""
        if error is not None:
            logger.debug("exit of %s not announced: %s", session.session_id, error)
        result = ExitAnnouncement(
            session_id=session.session_id,
            connection_id=connection_id,
            recorded=recorded,
            error=error,
            finished_at=trio.current_time(),
        )
        self._results[session.session_id] = result
        self._emit(
            HolderEvent(
                time=result.finished_at,
                session_id=session.session_id,
                kind=EventKind.EXIT,
                connection_id=connection_id,
                detail=error or _EXIT_DETAILS[recorded],
            )
        )


def _summary(report: tuple[ExitAnnouncement, ...]) -> str:
    """``3 recorded``, ``2 recorded, 1 HTTP 401``: how many answers of each kind."""
    counts: dict[str, int] = {}
    for item in report:
        kind = item.error or _EXIT_DETAILS[item.recorded]
        counts[kind] = counts.get(kind, 0) + 1
    return ", ".join(f"{n} {kind}" for kind, n in counts.items()) or "none held"


# Sessions taken between two checkpoints by the goodbye's loops: over ten
# thousand sessions, neither holds the run loop for more than a few milliseconds.
_GOODBYES_PER_CHECKPOINT: Final = 256


async def _for_each(items: Iterable[_T], action: Callable[[_T], object]) -> None:
    """``action(item)`` for each item, with a checkpoint after every ``_GOODBYES_PER_CHECKPOINT``.

    The goodbye's loops are synchronous work per session (no task, no
    checkpoint each: that is what keeps ten thousand cheap), so this is where
    they let the rest of the program run.
    """
    for count, item in enumerate(items, 1):
        action(item)
        if count % _GOODBYES_PER_CHECKPOINT == 0:
            await trio.lowlevel.checkpoint()


# How an exit event reads when the goodbye finished without error.
_EXIT_DETAILS: dict[bool | None, str] = {
    True: "recorded",
    False: "not recorded",
    None: "sent over the socket",
}


async def _stop_holder(holder: ProcessHolder) -> None:
    holder.stop("process exit")
    await holder.wait_status(HolderStatus.ENDED, HolderStatus.STOPPED)
