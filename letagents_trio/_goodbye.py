"""The goodbye: every held session's exit, in its transport's order, within one deadline.

:meth:`ConnectionManager.announce_exits <letagents_trio.ConnectionManager.announce_exits>`
sets the goodbye's one deadline (a shielded scope around :meth:`Goodbye.run`)
and gives the :class:`Goodbye` that time, with every holder, taken at once
and forgotten by the manager (so a second announcement sends nothing). Each
holder knows how to leave (:meth:`~letagents_trio.ProcessHolder.leave`, its
stream's own exit); the goodbye orders them and writes the report:

1. first, in one loop over the holders with no checkpoint, each begins to
   leave (:meth:`~letagents_trio.ProcessHolder.leave_nowait`); a WebSocket
   on a plain socket, or on the lean path's TLS over one, writes its exit
   frame there, with no task and no checkpoint of its own. Over SSE the
   stream makes its exit's POST ready (a
   :class:`~letagents_trio._exits.HandedExit`) and the goodbye hands it to
   its carrier, the room client, with no task of its own (unless
   ``exit_concurrency`` is set); once every exit is handed over, one task
   per carrier delivers them (:meth:`~letagents_trio.RoomClient.deliver_exits`:
   over the lean path a task per kept-alive connection writes them, closes
   each stream once its exit is written, and settles each exit as its
   answer is read, reported there). Every holder whose exit did not go at
   once, nor was handed over, gets a task that runs its
   :meth:`~letagents_trio.ProcessHolder.leave` and reports what it returns
   (at most ``exit_concurrency`` at a time, when set): over SSE, ``POST
   …/process/exit``, the stream closed once it is written; over a WebSocket,
   the exit frame, and the answer of a room that acknowledges exits. Every
   exit's task is started before any of them runs, so the first round of the
   run loop writes every exit that can be written at once, and the holders
   their closed streams wake unwind only after it (a checkpoint part way
   would let the holders of the first exits unwind before the last exits
   start, and the deadline cut those);
2. only once every exit that could go at once is written are those holders
   stopped, so that their unwinding never runs between two exits;
3. the answers to the exits written at once to a room that acknowledges
   them are read in the goodbye's own task (``leave`` again: no task each),
   until :data:`ANSWER_SHARE` of the time, the rest being for POSTs; the
   holders still waiting then (those leaving in tasks too) are stopped, which
   closes their sockets, and an exit whose answer never came is POSTed as
   well while one more still unwinds by the deadline (else it is reported
   sent, unconfirmed);
4. everything runs in one nursery whose cancel scope is the goodbye's one
   bound: the deadline, less the time what it would cancel needs to unwind
   (:func:`exits_deadline`): each exit's task (a task woken, frames
   unwound; a carrier's delivery is one), each exit handed over and not
   settled (given up where it waits), and each holder it would stop, stopped late or still awaiting
   its answer (a socket closed too); a black-holed room leaves thousands in
   flight. Each exit that ends, and each answer read, gives its share back.
   Cut by it, an exit that went over its socket is reported sent,
   unconfirmed, and its holder stopped;
5. one :class:`ExitAnnouncement` per session is reported; failures are
   logged and reported, never raised.

The wait for the answers (3) ends the goodbye's own reading and cancels no
exit: the bound (4) is the only one that does, and the only one that keeps
time for unwinding.

The time kept per task is measured, not looked up: :data:`UNWIND_ALLOWANCE`
and :data:`EXIT_ALLOWANCE` are seconds of real time, and the goodbye keeps
them at the rate its clock moved, in trio seconds per real second, over its
own first loop (:func:`measured_allowance`): 1 on the system clock; 0 on a
``trio.testing.MockClock`` whose time stands still while tasks run, where a
goodbye therefore ends at its deadline exactly.
"""

from __future__ import annotations

import functools
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from contextlib import AbstractAsyncContextManager, nullcontext
from typing import TYPE_CHECKING, Final, TypeVar, final

import attrs
import trio

from ._errors import ApiError, RoomUnreachable
from ._events import EventKind, HolderEvent
from ._exits import HandedExit
from ._holder import HolderStatus

if TYPE_CHECKING:
    from ._exits import ExitCarrier
    from ._holder import ProcessHolder

__all__ = [
    "EXIT_ALLOWANCE",
    "HANDED_ALLOWANCE",
    "UNWIND_ALLOWANCE",
    "Allowance",
    "ExitAnnouncement",
    "Goodbye",
    "exits_deadline",
    "measured_allowance",
]

# The manager's log: the goodbye is what the manager is for, and one logger
# name is what an embedder configures.
logger = logging.getLogger("letagents_trio.manager")

_T = TypeVar("_T")

# What one holder stopped late costs to unwind, in seconds of real time: its
# task woken with Cancelled, its frames' finally blocks run, its socket closed.
UNWIND_ALLOWANCE: Final = 100e-6
# What one exit still running at the deadline costs to unwind: its task woken
# with Cancelled and its frames' finally blocks run; its request waits on a
# connection shared with others, which it leaves open.
EXIT_ALLOWANCE: Final = 30e-6
# What one exit handed to its carrier and not settled at the deadline costs:
# given up where it waits (no task of its own), reported cut, its holder let go.
HANDED_ALLOWANCE: Final = 15e-6

# The part of the goodbye's time given to the rooms' answers to exits over
# sockets; the rest is for POSTing those not answered by then.
ANSWER_SHARE: Final = 0.5

# Sessions stopped between two checkpoints by the goodbye's later loops: over
# ten thousand sessions, neither holds the run loop for more than a few milliseconds.
_GOODBYES_PER_CHECKPOINT: Final = 256


@final
@attrs.frozen(kw_only=True)
class Allowance:
    """The time kept for each task the goodbye's deadline would cancel, in seconds on trio's clock.

    Attributes:
        holder: for each holder stopped late (its task, and its socket closed).
        exit: for each exit still running (its task only).
        handed: for each exit handed to its carrier and not settled (no task).
    """

    holder: float
    exit: float
    handed: float


def measured_allowance(trio_elapsed: float, real_elapsed: float) -> Allowance:
    """The allowances on a clock that moved ``trio_elapsed`` while ``real_elapsed`` really passed.

    :data:`UNWIND_ALLOWANCE` and :data:`EXIT_ALLOWANCE` are real time; kept on
    trio's clock, they scale with its rate: the whole of them on the system
    clock, none on a clock that stood still (a ``MockClock``, whose time does
    not pass while tasks unwind). A measure too short to tell keeps them whole.
    """
    rate = trio_elapsed / real_elapsed if real_elapsed > 0 else 1.0
    return Allowance(
        holder=UNWIND_ALLOWANCE * rate, exit=EXIT_ALLOWANCE * rate, handed=HANDED_ALLOWANCE * rate
    )


def exits_deadline(
    deadline: float, allowance: Allowance, *, holders: int, exits: int, handed: int = 0
) -> float:
    """When the exits still running are cancelled.

    Early enough for them, ``holders`` stopped late and ``handed`` exits
    given up, to unwind by ``deadline``.
    """
    return (
        deadline - allowance.holder * holders - allowance.exit * exits - allowance.handed * handed
    )


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
        deadline: when every exit, the unwinding of their tasks included,
            must be done (trio's clock): the manager's shielded bound.
        concurrency: at most this many exits announced at once (None: no limit).
        emit: where each session's ``EXIT`` event goes.
        allowance: the time kept for each task the deadline would cancel;
            measured on the run's clock (:func:`measured_allowance`) unless given.
    """

    def __init__(
        self,
        holders: Sequence[ProcessHolder],
        *,
        deadline: float,
        concurrency: int | None,
        emit: Callable[[HolderEvent], None],
        allowance: Allowance | None = None,
    ) -> None:
        self._holders = list(holders)
        self._sessions = len(self._holders)
        self._deadline = deadline
        self._emit = emit
        self._allowance = allowance
        self._concurrency = concurrency
        # Each exit's turn: at most ``concurrency`` leaving at once, when set.
        self._turn: AbstractAsyncContextManager[object] = (
            nullcontext() if concurrency is None else trio.CapacityLimiter(concurrency)
        )
        self._started = trio.current_time()
        # The exits' nursery's scope: the goodbye's one bound on its exits (see _update).
        self._exits = trio.CancelScope()
        # The exits' tasks running, their turn taken or not, and the carriers'
        # deliveries; told when none is left.
        self._running = 0
        # The exits handed to their carriers and not settled yet.
        self._handed = 0
        self._task_ended = trio.lowlevel.ParkingLot()
        # The holders whose leave() runs in a task (their turn taken), and those
        # the goodbye stopped late, when their answers were due.
        self._leaving: set[ProcessHolder] = set()
        self._late: set[ProcessHolder] = set()
        # The holders whose exit went at once and whose answer is still awaited,
        # in the goodbye's own task: the bound would stop each of them too.
        self._awaited: deque[ProcessHolder] = deque()
        # The sessions whose exit went over their socket unanswered and is POSTed as
        # well: cut by the deadline, such an exit is still reported as sent.
        self._sent: set[str] = set()
        self._results: dict[str, ExitAnnouncement] = {}
        # Empty until the goodbye has ended; then one announcement per session held.
        self.report: tuple[ExitAnnouncement, ...] = ()

    def __repr__(self) -> str:
        return f"<Goodbye sessions={self._sessions} announced={len(self._results)}>"

    async def run(self) -> None:
        """Say every goodbye; exits in flight are cancelled early enough to unwind by the deadline.

        Once only. :attr:`report` is made however it ends: an exit that did
        not finish is reported with ``error="deadline"``. From then on the
        report is all the goodbye keeps (not the holders).

        Cancellation:
            Runs under its caller's deadline (the manager's shielded
            ``exit_deadline``); cancelled, it still makes its report, and
            stops the holders whose answers it was still awaiting.
        """
        # Real time first, and last at the end: the rate measured is never above the clock's.
        real_started = time.perf_counter()
        self._started = trio.current_time()
        try:
            async with trio.open_nursery() as exits:
                self._exits = exits.cancel_scope
                self._exits.deadline = self._deadline
                left, answering = self._leave_nowait(exits)
                self._awaited = deque(answering)
                if self._allowance is None:
                    self._allowance = measured_allowance(
                        trio.current_time() - self._started, time.perf_counter() - real_started
                    )
                self._update()
                # Only then are the holders stopped: their unwinding (each closes
                # its stream) never delays an exit still to be written.
                await _for_each(left, _stop)
                unanswered = await self._answers()
                await self._stop_late(unanswered, exits)
        finally:
            # Cut by the bound while their answers were awaited: each exit went
            # over its socket (sent, unconfirmed), and its holder is stopped now,
            # as the bound kept time for.
            for holder in self._awaited:
                self._sent.add(holder.session.session_id)
                holder.stop("process exit")
            now = trio.current_time()
            self.report = tuple(
                self._results.get(holder.session.session_id)
                or ExitAnnouncement(
                    session_id=holder.session.session_id,
                    connection_id=holder.held_connection_id,
                    recorded=None,
                    error=None if holder.session.session_id in self._sent else "deadline",
                    finished_at=now,
                )
                for holder in self._holders
            )
            # The report is all that is kept: a holder refers to its manager
            # (its callbacks), so keeping the holders here would leave the two
            # in a cycle for the collector's next full pass.
            self._holders = []
            self._leaving.clear()
            self._late.clear()

    def log(self) -> None:
        """Log the report: a warning when the deadline cut some exits, then its summary."""
        late = sum(1 for item in self.report if item.error == "deadline")
        if late:
            logger.warning(
                "exit deadline of %.1f s passed before %d of %d exits were announced",
                self._deadline - self._started,
                late,
                len(self.report),
            )
        # One line for the whole goodbye: a warning when some exit failed (an
        # unconfigured logging shows warnings), never one line per session.
        logger.log(
            logging.WARNING if any(item.error for item in self.report) else logging.INFO,
            "announced %d exits in %.0f ms: %s",
            len(self.report),
            (trio.current_time() - self._started) * 1000,
            _summary(self.report),
        )

    def _leave_nowait(self, exits: trio.Nursery) -> tuple[list[ProcessHolder], list[ProcessHolder]]:
        """Write every exit that can go at once; start a leaving task for each other holder.

        With no checkpoint: every exit's task starts before any runs (see the
        module docstring). Returns the holders whose exit is done (written
        over their open sockets, no answer to come), and those whose exit is
        written and whose answer is to come.
        """
        left: list[ProcessHolder] = []
        answering: list[ProcessHolder] = []
        carriers: dict[int, ExitCarrier] = {}
        for holder in self._holders:
            written = holder.leave_nowait()
            if isinstance(written, HandedExit):
                if self._hand(holder, written):
                    carriers[id(written.carrier)] = written.carrier
                else:
                    self._start(exits, self._leave, holder)
            elif written is None:
                left.append(holder)
                self._finished(holder, None, None)
            elif written:
                answering.append(holder)
            else:
                self._start(exits, self._leave, holder)
        for carrier in carriers.values():
            self._running += 1
            exits.start_soon(self._deliver, carrier)
        return left, answering

    def _hand(self, holder: ProcessHolder, exit: HandedExit) -> bool:
        """Send ``holder``'s exit by its carrier, unless turns are counted; whether it went."""
        if self._concurrency is not None:
            return False  # a task each, in turns: leave() sends it
        self._handed += 1
        if exit.send(functools.partial(self._settled, holder)):
            return True
        self._handed -= 1
        return False

    async def _deliver(self, carrier: ExitCarrier) -> None:
        """The carrier's delivery of the exits handed to it: they settle as their answers come.

        Cancellation:
            A checkpoint; the goodbye's deadline cancels it, and the exits not
            settled then are given up (see ``ExitCarrier.deliver_exits``).
        """
        await carrier.deliver_exits()
        self._task_done()

    def _settled(self, holder: ProcessHolder, exit: HandedExit) -> None:
        """Report an exit its carrier settled (no task of its own)."""
        self._handed -= 1
        failure = exit.failure
        if failure is None:
            recorded, error = exit.recorded, None
        else:
            recorded, error = None, _error_of(failure)
        holder.stop("process exit")
        self._finished(holder, recorded, error)
        self._update()

    async def _answers(self) -> list[ProcessHolder]:
        """The rooms' answers to the exits written at once, read in this task (no task each).

        Awaited until :data:`ANSWER_SHARE` of the time (the rest is for
        POSTing those not answered by then), and also until every exit's task
        has ended, if that comes first. The goodbye's bound keeps time for
        each holder whose answer is still awaited: cut by it, the exits are
        reported sent (:meth:`run`). Returns the holders whose answer did not
        come.
        """
        share = self._started + (self._deadline - self._started) * ANSWER_SHARE
        unanswered: list[ProcessHolder] = []
        with trio.move_on_at(share):
            while self._awaited:
                holder = self._awaited[0]
                try:
                    recorded, error = await holder.leave(), None
                except (ApiError, RoomUnreachable) as exc:
                    # The room hung up unanswered; its POST refused or failed.
                    recorded, error = None, _error_of(exc)
                self._awaited.popleft()
                if recorded is None and error is None:
                    unanswered.append(holder)
                else:
                    # Answered, the holder's reader has ended: it stops by itself.
                    self._finished(holder, recorded, error)
                self._update()
            while self._running:
                await self._task_ended.park()
        unanswered += self._awaited
        self._awaited.clear()
        return unanswered

    async def _stop_late(self, unanswered: list[ProcessHolder], exits: trio.Nursery) -> None:
        """Stop every holder whose exit still waits for its answer, and POST its exit as well.

        Time to unwind is kept for each one still holding its socket; an exit
        is POSTed while one more still unwinds by the deadline, and reported
        sent over its socket, unconfirmed, until its POST's answer comes.
        Holders still waiting for their turn are not stopped, nor counted:
        cutting the goodbye short for them would leave exits unsent, which is
        worse than a late end.
        """

        def stop(holder: ProcessHolder) -> None:
            if holder.status not in _DONE:
                self._late.add(holder)
                holder.stop("process exit")

        await _for_each([*unanswered, *self._leaving], stop)
        self._update()
        for holder in unanswered:
            if self._has_time():
                self._sent.add(holder.session.session_id)
                self._start(exits, self._post, holder)
            else:
                # Its exit went over its socket: sent, unconfirmed.
                self._finished(holder, None, None)

    def _start(
        self,
        exits: trio.Nursery,
        leave: Callable[[ProcessHolder], Awaitable[None]],
        holder: ProcessHolder,
    ) -> None:
        self._running += 1
        self._update()
        exits.start_soon(leave, holder)

    async def _leave(self, holder: ProcessHolder) -> None:
        """One holder's :meth:`~letagents_trio.ProcessHolder.leave`, reported.

        An exit over a socket whose answer had not come when the holder was
        stopped late is reported sent, and POSTed as well.
        """
        try:
            async with self._turn:
                self._leaving.add(holder)
                recorded, error = await holder.leave(), None
            if recorded is None and holder in self._late and self._has_time():
                self._sent.add(holder.session.session_id)
                recorded = await holder.leave()
        except (ApiError, RoomUnreachable) as exc:
            recorded, error = None, _error_of(exc)
        self._ended(holder, recorded, error)

    async def _post(self, holder: ProcessHolder) -> None:
        """The POST that follows an exit whose answer never came (its holder stopped)."""
        try:
            async with self._turn:
                recorded, error = await holder.leave(), None
        except (ApiError, RoomUnreachable) as exc:
            recorded, error = None, _error_of(exc)
        self._ended(holder, recorded, error)

    def _ended(self, holder: ProcessHolder, recorded: bool | None, error: str | None) -> None:
        holder.stop("process exit")
        self._finished(holder, recorded, error)
        self._leaving.discard(holder)
        self._task_done()

    def _task_done(self) -> None:
        self._running -= 1
        if not self._running:
            # The goodbye's own task waits for the last one only (one wake-up, not one each).
            self._task_ended.unpark_all()
        self._update()

    def _has_time(self) -> bool:
        """Whether one more exit's task could still unwind by the deadline."""
        assert self._allowance is not None
        one_more = exits_deadline(
            self._deadline,
            self._allowance,
            holders=self._stopped_by_cut(),
            exits=self._running + 1,
            handed=self._handed,
        )
        return one_more > trio.current_time()

    def _update(self) -> None:
        """Keep the exits' bound where what it would cancel unwinds by the deadline."""
        if self._allowance is not None:
            self._exits.deadline = exits_deadline(
                self._deadline,
                self._allowance,
                holders=self._stopped_by_cut(),
                exits=self._running,
                handed=self._handed,
            )

    def _stopped_by_cut(self) -> int:
        """The holders the bound would stop: stopped late, or still awaiting their answer."""
        return len(self._late) + len(self._awaited)

    def _finished(self, holder: ProcessHolder, recorded: bool | None, error: str | None) -> None:
        """Report one session's goodbye: its :class:`ExitAnnouncement` and its exit event."""
        session_id = holder.session.session_id
        if error is not None:
            logger.debug("exit of %s not announced: %s", session_id, error)
        result = ExitAnnouncement(
            session_id=session_id,
            connection_id=holder.held_connection_id,
            recorded=recorded,
            error=error,
            finished_at=trio.current_time(),
        )
        self._results[session_id] = result
        self._emit(
            HolderEvent(
                time=result.finished_at,
                session_id=session_id,
                kind=EventKind.EXIT,
                connection_id=result.connection_id,
                detail=error or _EXIT_DETAILS[recorded],
            )
        )


def _error_of(failure: ApiError | RoomUnreachable) -> str:
    """How a failed exit is reported: ``HTTP 503``, ``unreachable``."""
    return f"HTTP {failure.status}" if isinstance(failure, ApiError) else "unreachable"


def _summary(report: tuple[ExitAnnouncement, ...]) -> str:
    """``3 recorded``, ``2 recorded, 1 HTTP 401``: how many answers of each kind."""
    counts: dict[str, int] = {}
    for item in report:
        kind = item.error or _EXIT_DETAILS[item.recorded]
        counts[kind] = counts.get(kind, 0) + 1
    return ", ".join(f"{n} {kind}" for kind, n in counts.items()) or "none held"


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


# A holder in one of these has closed its stream.
_DONE = (HolderStatus.ENDED, HolderStatus.STOPPED)


def _stop(holder: ProcessHolder) -> None:
    holder.stop("process exit")
