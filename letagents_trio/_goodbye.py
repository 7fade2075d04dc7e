"""The goodbye: every held session's exit, in its transport's order, under one deadline.

:meth:`ConnectionManager.announce_exits <letagents_trio.ConnectionManager.announce_exits>`
runs one :class:`Goodbye` when the manager's block is left, however it is
left (normal exit, an exception, the embedder cancelling its own scope,
Ctrl-C), with every holder, taken at once and forgotten by the manager (so a
second announcement sends nothing). Each holder knows how to leave
(:meth:`~letagents_trio.ProcessHolder.leave`); the goodbye only orders them:

1. first, in one loop over the holders (a checkpoint every
   :data:`_GOODBYES_PER_CHECKPOINT`), each whose transport can write its exit
   at once does so (:meth:`~letagents_trio.ProcessHolder.leave_now`: a
   WebSocket on a plain socket), with no task and no checkpoint of its own;
   every other holder gets a task that runs its
   :meth:`~letagents_trio.ProcessHolder.leave` (at most
   ``policy.exit_concurrency`` at a time, when set): over SSE, close the
   stream, then ``POST …/process/exit`` naming the connection it held;
2. only once every exit that could go at once is written are those holders
   stopped, so that their unwinding never runs between two exits;
3. exits sent at once to a room that answers them (it said so as the stream
   opened) are waited for until :data:`ANSWER_SHARE` of the deadline, or
   earlier when the holders still waiting need the rest to unwind; those
   holders are stopped then, and their exits POSTed while one more still
   unwinds by the deadline (an exit with no answer either way was sent:
   reported unconfirmed);
4. the whole runs under the manager's ONE shielded deadline,
   ``policy.exit_deadline``. Inside it, the exits still waiting for an answer
   are cancelled early enough for their own unwinding to end by that
   deadline (:mod:`letagents_trio._unwind`: each costs a task woken, frames
   unwound and a socket closed, and a black-holed room leaves thousands in
   flight);
5. one :class:`ExitAnnouncement` per session is reported; failures are
   logged and reported, never raised.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Final, TypeVar, final

import attrs
import trio

from ._errors import ApiError, RoomUnreachable
from ._events import EventKind, HolderEvent
from ._holder import HolderStatus
from ._unwind import UnwindBudget

if TYPE_CHECKING:
    from ._holder import ProcessHolder
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
        recorded: the room's answer, which confirms the exit: to the POST, or
            to an exit frame over a WebSocket whose room acknowledges exits.
            None when no answer came: an error, the deadline, or an exit over
            a socket whose room does not acknowledge exits (sent, unconfirmed).
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
        holders: every holder held when the goodbye began.
        policy: the manager's policy (``exit_deadline``, ``exit_concurrency``).
        emit: where each session's ``EXIT`` event goes.
    """

    def __init__(
        self,
        holders: Sequence[ProcessHolder],
        *,
        policy: HoldPolicy,
        emit: Callable[[HolderEvent], None],
    ) -> None:
        # Each with the connection it held as the goodbye began, for the report.
        self._held = [(holder, holder.held_connection_id) for holder in holders]
        self._sessions = len(holders)
        self._policy = policy
        self._emit = emit
        self._limiter = (
            None
            if policy.exit_concurrency is None
            else trio.CapacityLimiter(policy.exit_concurrency)
        )
        self._results: dict[str, ExitAnnouncement] = {}
        # The sessions whose exit went over their socket unanswered and is POSTed as
        # well: cut by the deadline, such an exit is still reported as sent.
        self._sent: set[str] = set()
        # Until when the room's answer to an exit over a stream is awaited.
        self._answer_by = math.inf
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
        budget = UnwindBudget(deadline)
        self._answer_by = deadline - self._policy.exit_deadline * (1 - ANSWER_SHARE)
        try:
            with budget.scope:
                async with trio.open_nursery() as nursery:
                    left, answering = await self._leave_now(nursery, budget)
                    # Only then are the holders stopped: their unwinding (each closes
                    # its stream) never delays an exit still to be written.
                    await _for_each(left, _stop)
                    await self._answers(answering, nursery, budget)
        finally:
            now = trio.current_time()
            self.report = tuple(
                self._results.get(holder.session.session_id)
                or ExitAnnouncement(
                    session_id=holder.session.session_id,
                    connection_id=connection_id,
                    recorded=None,
                    error=None if holder.session.session_id in self._sent else "deadline",
                    finished_at=now,
                )
                for holder, connection_id in self._held
            )
            # The report is all that is kept: a holder refers to its manager
            # (its callbacks), so keeping the holders here would leave the two
            # in a cycle for the collector's next full pass.
            self._held = []

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

    async def _leave_now(
        self, nursery: trio.Nursery, budget: UnwindBudget
    ) -> tuple[list[ProcessHolder], list[tuple[ProcessHolder, str | None]]]:
        """Write every exit that can go at once; start a leaving task for each other holder.

        Returns the holders whose exit went at once (over their open sockets),
        apart from those whose room answers such an exit (with the connection
        each named), whose answer is still to come.
        """
        left: list[ProcessHolder] = []
        answering: list[tuple[ProcessHolder, str | None]] = []

        def leave(item: tuple[ProcessHolder, str | None]) -> None:
            holder, connection_id = item
            if not holder.leave_now():
                budget.exit_started()
                nursery.start_soon(self._leave, holder, connection_id, budget)
            elif holder.exit_answer_expected:
                answering.append(item)
            else:
                left.append(holder)
                self._finished(holder.session, connection_id, None, None)

        await _for_each(self._held, leave)
        return left, answering

    async def _answers(
        self,
        answering: list[tuple[ProcessHolder, str | None]],
        nursery: trio.Nursery,
        budget: UnwindBudget,
    ) -> None:
        """Wait for the rooms' answers to exits sent at once; POST those not answered.

        The wait ends at ``_answer_by``, or earlier when the holders waiting
        need more than what is left after it to unwind. Each answered holder
        has stopped by itself; every other is stopped then, its unwinding kept
        time for, and its exit POSTed as well (its holder's :meth:`leave`)
        while one more exit still unwinds by the deadline. An exit with no
        answer from either went over its socket: it is reported as sent,
        unconfirmed (``recorded`` None), not as cut by the deadline.
        """
        # One deadline for the whole wait: past it, one wait is cancelled, not
        # one for each holder still waiting.
        with trio.move_on_at(min(self._answer_by, budget.unwind_by(len(answering)))):
            for holder, _ in answering:
                if holder.status not in _DONE:
                    await holder.wait_status(*_DONE)
        unanswered: list[tuple[ProcessHolder, str | None]] = []
        for holder, connection_id in answering:
            recorded = holder.exit_recorded
            if recorded is None:
                holder.stop("process exit")
                unanswered.append((holder, connection_id))
            else:
                self._finished(holder.session, connection_id, recorded, None)
        budget.reserve(len(unanswered))
        posted = 0
        while posted < len(unanswered) and budget.has_time():
            holder, connection_id = unanswered[posted]
            self._sent.add(holder.session.session_id)
            budget.exit_started()
            nursery.start_soon(self._leave, holder, connection_id, budget)
            posted += 1
        for holder, connection_id in unanswered[posted:]:
            self._finished(holder.session, connection_id, None, None)

    async def _leave(
        self, holder: ProcessHolder, connection_id: str | None, budget: UnwindBudget
    ) -> None:
        """One holder's :meth:`~letagents_trio.ProcessHolder.leave`, reported."""
        try:
            if self._limiter is None:
                recorded, error = await holder.leave(answer_by=self._answer_by), None
            else:
                async with self._limiter:
                    recorded, error = await holder.leave(answer_by=self._answer_by), None
        except ApiError as exc:
            recorded, error = None, f"HTTP {exc.status}"
        except RoomUnreachable:
            recorded, error = None, "unreachable"
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


# The part of the exit deadline spent waiting for the rooms' answers to exits
# sent over open streams; the rest is for POSTing those not answered by then.
ANSWER_SHARE: Final = 0.5

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


# A holder in one of these has closed its stream: its exit has its answer, or none comes.
_DONE = (HolderStatus.ENDED, HolderStatus.STOPPED)


def _stop(holder: ProcessHolder) -> None:
    holder.stop("process exit")
