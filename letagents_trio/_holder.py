"""One worker session's process connection, held for as long as the process runs.

The room learns that this process still exists from one long-lived connection
per worker session (PROTOCOL §4). A :class:`ProcessHolder` is the task that
holds it. Its loop, one pass per attempt:

1. **Attempt**, inside a fresh ``CancelScope`` of its own. Its deadline
   is first the *answer timeout* (10 s) until the room accepts the connection;
   from then on it is a *sliding silence deadline* (45 s), re-armed
   each time a chunk of bytes arrives, comment-only heartbeats included, to
   45 s after those bytes arrived (the stream's ``heard_at``: a quiet read
   takes heartbeats the kernel kept, some time after they came). Opening
   resets every backoff counter.
   The ``open`` event names the connection; an ``ended`` event ends the attempt
   at once. The attempt's outcome:

   =====================================================  ==============
   what happened                                          outcome
   =====================================================  ==============
   410, or an ``ended`` event                             ``ended``
   404 or 405                                             ``unsupported``
   5xx, network error, either timeout, the stream ending  ``dropped``
   any other answer, or a body that is no event stream    ``refused``
   =====================================================  ==============

2. **After** an attempt that ended by itself the connection id is cleared (a
   stop keeps it: it is what the exit names). ``ended``: the holder
   leaves the manager, runs the ``on_ended`` hook and stops for good.
   ``refused`` / ``unsupported``: the ``still_ours`` hook is asked whether the
   session still belongs to this process (another process may have taken it
   over); if not, the holder stops.
3. **Backoff**: the policy's delay for that outcome and its counter, slept in
   its own ``CancelScope`` (``_backoff_scope``) so that :meth:`reconnect_now`
   can cut it short; then that outcome's counter goes up by one.

Stopping (release, replacement, shutdown) cancels the holder's outer scope:
whatever it is doing, attempt or backoff, ends at the next checkpoint, and the
stream is closed on the way out. Nothing here polls, and every wait is on
trio's clock, so ``MockClock`` drives it exactly.

**Leaving** (the manager's goodbye) is the holder's too, since it owns its
stream and knows the connection it holds: :meth:`ProcessHolder.leave` hands
that connection to the stream's own exit (:meth:`ProcessStream.leave
<letagents_trio.ProcessStream.leave>`: a frame over a WebSocket, a POST after
the close over SSE) and returns what it returns;
:meth:`ProcessHolder.leave_nowait` is the stream's exit at once, without a
checkpoint, where the transport can. With no stream named, the holder stops
and POSTs the exit itself (the connector's ``announce_exit``). Either way the
holder, once leaving, ends its attempt as a stop however the stream ends, and
never retries.
"""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, final

import attrs
import trio

from ._connector import AttemptRejected, ProcessConnector, ProcessStream
from ._errors import RoomUnreachable, StreamProtocolError
from ._events import EventKind, HolderEvent
from ._policy import HoldPolicy, Outcome
from ._session import AgentSession

if TYPE_CHECKING:
    from ._collector import OpeningBurst
    from ._exits import HandedExit
    from ._unknown import UnknownSessions

__all__ = ["HolderStatistics", "HolderStatus", "ProcessHolder"]

logger = logging.getLogger("letagents_trio.holder")

SessionHook = Callable[[AgentSession], Awaitable[object]]
StillOurs = Callable[[AgentSession], Awaitable[bool]]
Emit = Callable[[HolderEvent], None]

_RETRIED = (Outcome.DROPPED, Outcome.REFUSED, Outcome.UNSUPPORTED)


# Said once per run of ``unsupported`` outcomes (the counter resets when a stream
# opens): the protocol retries a 404 slowly and for ever, so without a word the
# holder would just wait. Where this room served the session before, the route
# exists, so the room no longer knows the session; otherwise the address, or the
# room's version, is the likelier cause.
class HolderStatus(enum.Enum):
    """Where a :class:`ProcessHolder` is in its life."""

    CONNECTING = "connecting"
    """An attempt is under way: waiting for its turn, or for the room to answer."""
    OPEN = "open"
    """The stream is open, so the room sees this process."""
    WAITING = "waiting"
    """Between attempts, in a backoff wait."""
    ENDED = "ended"
    """The room ended the session; the holder is done."""
    STOPPED = "stopped"
    """The holder was stopped (released, replaced, shut down, or no longer ours)."""

    def __repr__(self) -> str:
        return f"HolderStatus.{self.name}"


# A holder in one of these is done: its stream is closed and it never attempts again.
_DONE = (HolderStatus.ENDED, HolderStatus.STOPPED)


@final
@attrs.frozen(kw_only=True)
class HolderStatistics:
    """A snapshot of one holder.

    Attributes:
        session_id: the session held.
        status: the holder's status when the snapshot was taken.
        connection_id: the open connection's id, if the room named it.
        attempts: finished attempts, by outcome.
        opens: how many attempts opened a stream.
        last_outcome: the outcome of the latest finished attempt.
        opened_at: when the latest stream opened (trio time), if one did.
        next_attempt_at: when the next attempt starts (trio time), while waiting.
    """

    session_id: str
    status: HolderStatus
    connection_id: str | None
    attempts: Mapping[Outcome, int]
    opens: int
    last_outcome: Outcome | None
    opened_at: float | None
    next_attempt_at: float | None


async def _ours(still_ours: StillOurs, session: AgentSession) -> bool:
    """The ``still_ours`` hook's answer for ``session``; a hook that fails says no."""
    try:
        return bool(await still_ours(session))
    except Exception:
        logger.warning(
            "still_ours hook failed for %s; treating it as not ours",
            session.session_id,
            exc_info=True,
        )
        return False


@final
@attrs.define(eq=False)
class _Tally:
    """What a holder counts: attempts by outcome, opens, each outcome's retries since an open."""

    retries: dict[Outcome, int] = attrs.Factory(lambda: dict.fromkeys(_RETRIED, 0))
    attempts: dict[Outcome, int] = attrs.Factory(lambda: dict.fromkeys(Outcome, 0))
    opens: int = 0
    last_outcome: Outcome | None = None
    opened_at: float | None = None
    next_attempt_at: float | None = None

    def opened(self) -> None:
        """A stream opened: every backoff counter starts again."""
        self.retries = dict.fromkeys(_RETRIED, 0)
        self.opens += 1
        self.opened_at = trio.current_time()

    def closed(self, outcome: Outcome) -> None:
        """An attempt ended with ``outcome``."""
        self.attempts[outcome] += 1
        self.last_outcome = outcome

    def snapshot(
        self, session_id: str, status: HolderStatus, connection_id: str | None
    ) -> HolderStatistics:
        """The holder's :class:`HolderStatistics`, frozen."""
        return HolderStatistics(
            session_id=session_id,
            status=status,
            connection_id=connection_id,
            attempts=MappingProxyType(dict(self.attempts)),
            opens=self.opens,
            last_outcome=self.last_outcome,
            opened_at=self.opened_at,
            next_attempt_at=self.next_attempt_at,
        )


@final
class ProcessHolder:
    """Holds the process connection of one worker session.

    Holders are made by :meth:`ConnectionManager.hold`, which runs each in the
    manager's nursery; there is no public constructor contract.
    """

    def __init__(
        self,
        session: AgentSession,
        *,
        connector: ProcessConnector,
        policy: HoldPolicy,
        emit: Emit,
        on_ended: SessionHook,
        still_ours: StillOurs,
        forget: Callable[[ProcessHolder], None],
        opening: OpeningBurst,
        turns: trio.CapacityLimiter,
        unknown: UnknownSessions,
    ) -> None:
        self._session = session
        self._connector = connector
        self._policy = policy
        self._emit = emit
        self._on_ended = on_ended
        self._still_ours = still_ours
        self._forget = forget
        # Told the first 404 of each run, for one summary line per outcome (_unknown.py).
        self._unknown = unknown.note
        # Told when an attempt starts waiting for the room's answer, and when it stops.
        self._opening = opening
        # The manager's turns to wait for the room's answer (policy.open_concurrency).
        self._turns = turns
        self._scope = trio.CancelScope()
        self._backoff_scope: trio.CancelScope | None = None
        # The open stream, while an attempt holds one.
        self._stream: ProcessStream | None = None
        # Set once the goodbye began this holder's leaving: it never retries.
        self._leaving = False
        self._status = HolderStatus.CONNECTING
        opening.started()
        self._status_lot = trio.lowlevel.ParkingLot()
        # The connection the room named, which this process holds (or held when
        # it was stopped): cleared only when an attempt ends by itself, never
        # by a stop, so that the exit names it however the holder was stopped.
        self._connection_id: str | None = None
        self._tally = _Tally()
        self._stop_reason = "stopped"
        # Set by stop(); and once run() has returned, when stopping cancels nothing.
        self._stopped = False
        self._unwound = False

    def __repr__(self) -> str:
        return (
            f"<ProcessHolder session_id={self._session.session_id!r} "
            f"status={self._status.value} connection_id={self.connection_id!r}>"
        )

    # --- observing ---------------------------------------------------------------

    @property
    def session(self) -> AgentSession:
        """The session held."""
        return self._session

    @property
    def status(self) -> HolderStatus:
        """The holder's current status."""
        return self._status

    @property
    def connection_id(self) -> str | None:
        """The id the room gave the open connection; None between attempts and once done."""
        return None if self._status in _DONE else self._connection_id

    def statistics(self) -> HolderStatistics:
        """A frozen snapshot of the holder's state and counts."""
        return self._tally.snapshot(self._session.session_id, self._status, self.connection_id)

    async def wait_status(self, *statuses: HolderStatus) -> HolderStatus:
        """Wait until the holder's status is one of ``statuses``; return it.

        ``wait_status(HolderStatus.ENDED, HolderStatus.STOPPED)`` returns once the
        holder is done and its stream is closed.

        Cancellation:
            A checkpoint, even when the status already matches; cancelling it
            changes nothing about the holder.
        """
        if not statuses:
            raise ValueError("wait_status needs at least one status")
        while self._status not in statuses:
            await self._status_lot.park()
        await trio.lowlevel.checkpoint()
        return self._status

    @property
    def held_connection_id(self) -> str | None:
        """The connection an exit announcement names.

        The id of the stream that was open when the holder stopped, even when
        it was stopped by cancellation from outside (:attr:`connection_id`
        is None once the holder is done); None when no stream was open.
        """
        return self._connection_id

    # --- steering ------------------------------------------------------------------

    def stop(self, reason: str = "stopped") -> None:
        """Stop holding: cancel the attempt or the backoff under way, close the stream.

        Idempotent. The holder's status becomes ``STOPPED`` once its task has
        unwound; :meth:`wait_status` tells when.
        """
        if self._stopped:
            return
        self._stopped = True
        self._stop_reason = reason
        if not self._unwound:
            # Its task still runs (or is yet to): whatever it does is cancelled. A
            # goodbye stops thousands of holders whose tasks its closes ended.
            self._scope.cancel(reason=f"process holder: {reason}")

    def reconnect_now(self) -> bool:
        """Cut a backoff wait short and attempt at once.

        Returns:
            Whether the holder was waiting (and so was woken).
        """
        if self._status is HolderStatus.WAITING and self._backoff_scope is not None:
            self._backoff_scope.cancel(reason="reconnect requested")
            return True
        return False

    # --- leaving -------------------------------------------------------------------

    def leave_nowait(self) -> bool | HandedExit | None:
        """Begin leaving; the stream's exit at once, with no checkpoint, if the transport can.

        From here on the holder never retries, and its exit names the
        connection it holds now.

        Returns:
            As :meth:`ProcessStream.leave_nowait
            <letagents_trio.ProcessStream.leave_nowait>`: None when the exit is
            done (written, no answer comes: the goodbye then only stops the
            holder); True when it is written and its answer is to come
            (:meth:`leave` waits for it); the exit made ready for its carrier
            (SSE's POST, sent by the goodbye; if not, :meth:`leave` sends
            it); False when :meth:`leave` must send it (no stream open on a
            named connection, or a socket that cannot write it at once).
        """
        self._begin_leaving()
        stream, connection_id = self._stream, self._connection_id
        if stream is None or connection_id is None:
            return False
        return stream.leave_nowait(connection_id)

    async def leave(self) -> bool | None:
        """The exit naming the connection this holder holds, by its stream's own way out.

        The stream carries it (:meth:`ProcessStream.leave
        <letagents_trio.ProcessStream.leave>`). With no stream open on a
        named connection, or once the holder is stopped, the holder stops
        (its stream closes) and then POSTs the exit itself: the room records
        an exit naming no connection only once it has seen the stream close
        (PROTOCOL §2.2). So a second call, after an exit over a socket whose
        answer never came and the holder's stop, POSTs it as well. The holder
        stops either way.

        Returns:
            Whether the room recorded the exit; None when it went over the
            stream and no answer came.

        Raises:
            ApiError: the room refused the POSTed exit.
            RoomUnreachable: it could not be sent.

        Cancellation:
            A checkpoint; cancelled (the goodbye's deadline), the room may or
            may not have the exit.
        """
        self._begin_leaving()
        stream, connection_id = self._stream, self._connection_id
        if stream is not None and connection_id is not None and not self._stopped:
            return await stream.leave(connection_id)
        self.stop("process exit")
        await self.wait_status(*_DONE)
        return await self._connector.announce_exit(self._session, connection_id)

    def _begin_leaving(self) -> None:
        """From now on the holder never retries, and its manager no longer holds it."""
        self._leaving = True
        self._forget(self)

    # --- the loop ----------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Hold the connection until stopped, ended, or no longer ours.

        Calls ``task_status.started()`` before the first attempt: startup never
        waits on the network.

        Cancellation:
            Cancelling the task (or :meth:`stop`) ends the attempt or backoff
            under way and closes the stream; the status becomes ``STOPPED``.
            No exit is announced by stopping: the goodbye asks for it
            (:meth:`leave`).
        """
        try:
            with self._scope:
                task_status.started()
                await self._loop()
        finally:
            self._tally.next_attempt_at = None
            if self._status is not HolderStatus.ENDED:
                self._set_status(HolderStatus.STOPPED)
                self._event(EventKind.STOPPED, detail=self._stop_reason)
            self._unwound = True

    async def _loop(self) -> None:
        while True:
            self._set_status(HolderStatus.CONNECTING)
            self._event(EventKind.ATTEMPT)
            outcome, detail = await self._attempt()
            if self._leaving and outcome is not Outcome.ENDED:
                # The goodbye closed the stream for the exit: a stop, not an outcome.
                if not self._stopped:
                    self._stop_reason = "process exit"
                return
            closed_id = self._connection_id
            if not self._leaving:
                # Leaving, the exit still names the connection (the room ended
                # the session as the goodbye began).
                self._connection_id = None
            self._tally.closed(outcome)
            self._event(EventKind.CLOSED, outcome=outcome, connection_id=closed_id, detail=detail)
            logger.info(
                "process connection of %s: %s (%s)",
                self._session.session_id,
                outcome.value,
                detail,
            )
            if outcome is Outcome.UNSUPPORTED and not self._tally.retries[outcome]:
                self._unknown(self._session, detail, served_before=bool(self._tally.opens))
            if outcome is Outcome.ENDED:
                await self._end()
                return
            refused = outcome in (Outcome.REFUSED, Outcome.UNSUPPORTED)
            if refused and not await _ours(self._still_ours, self._session):
                self._stop_reason = "no longer ours"
                self._forget(self)
                return
            delay = self._policy.delay(outcome, self._tally.retries[outcome])
            await self._backoff(outcome, delay)
            self._tally.retries[outcome] += 1

    async def _attempt(self) -> tuple[Outcome, str]:
        # At most policy.open_concurrency of the manager's attempts wait for the
        # room's answer at once: the answer timeout starts with this one's turn,
        # and the turn ends as the stream opens (_opened) or the attempt ends.
        await self._turns.acquire_on_behalf_of(self)
        try:
            return await self._ask()
        finally:
            if self._status is HolderStatus.CONNECTING:
                self._turns.release_on_behalf_of(self)

    async def _ask(self) -> tuple[Outcome, str]:
        opened = False
        with trio.CancelScope() as scope:
            scope.relative_deadline = self._policy.answer_timeout
            try:
                async with self._connector.open(self._session) as stream:
                    opened = True
                    self._opened(stream)
                    scope.relative_deadline = self._policy.silence_timeout
                    try:
                        async for news in stream:
                            scope.deadline = stream.heard_at + self._policy.silence_timeout
                            if news.connection_id is not None:
                                self._connection_id = news.connection_id
                                self._event(EventKind.CONNECTION, connection_id=news.connection_id)
                            if news.ended:
                                return Outcome.ENDED, "ended event"
                    finally:
                        if not self._leaving:
                            # Leaving, the stream is still what leave() asks for its exit's answer.
                            self._stream = None
                    return Outcome.DROPPED, "stream end"
            except AttemptRejected as exc:
                return exc.outcome, exc.detail
            except RoomUnreachable:
                return Outcome.DROPPED, "unreachable"
            except StreamProtocolError as exc:
                if not self._leaving:
                    logger.warning("process stream of %s broke: %s", self._session.session_id, exc)
                return Outcome.DROPPED, "protocol error"
        # Only this scope's own deadline gets here: a stop cancels the outer scope.
        return Outcome.DROPPED, "silence" if opened else "answer timeout"

    def _opened(self, stream: ProcessStream) -> None:
        self._stream = stream
        self._turns.release_on_behalf_of(self)
        self._tally.opened()
        self._set_status(HolderStatus.OPEN)
        self._event(EventKind.OPEN)

    async def _backoff(self, outcome: Outcome, delay: float) -> None:
        self._tally.next_attempt_at = trio.current_time() + delay
        self._set_status(HolderStatus.WAITING)
        self._event(EventKind.BACKOFF, outcome=outcome, delay=delay)
        with trio.CancelScope(deadline=self._tally.next_attempt_at) as scope:
            self._backoff_scope = scope
            try:
                await trio.sleep_forever()
            finally:
                self._backoff_scope = None
        self._tally.next_attempt_at = None

    async def _end(self) -> None:
        self._forget(self)
        self._set_status(HolderStatus.ENDED)
        self._event(EventKind.ENDED)
        try:
            await self._on_ended(self._session)
        except Exception:
            logger.exception("on_ended hook failed for %s", self._session.session_id)

    # --- bookkeeping --------------------------------------------------------------------

    def _set_status(self, status: HolderStatus) -> None:
        if status is not self._status:
            # CONNECTING is waiting for the room's answer: the burst counts those.
            if self._status is HolderStatus.CONNECTING:
                self._opening.settled()
            elif status is HolderStatus.CONNECTING:
                self._opening.started()
            self._status = status
            self._status_lot.unpark_all()

    def _event(
        self,
        kind: EventKind,
        *,
        outcome: Outcome | None = None,
        delay: float | None = None,
        connection_id: str | None = None,
        detail: str = "",
    ) -> None:
        self._emit(
            HolderEvent(
                time=trio.current_time(),
                session_id=self._session.session_id,
                kind=kind,
                outcome=outcome,
                delay=delay,
                connection_id=connection_id,
                detail=detail,
            )
        )
