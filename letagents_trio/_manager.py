"""The connection manager: a root nursery of holders, and a bounded goodbye.

:func:`open_connection_manager` owns one nursery. Each :meth:`~ConnectionManager.hold`
starts a :class:`~letagents_trio.ProcessHolder` in it, one per worker session;
holders for thousands of sessions cost one task and a few objects each.

Shutdown is the reason this module exists. However the block is left (normal
exit, an exception, the embedder cancelling its own scope, Ctrl-C), the manager:

1. takes a snapshot of every holder and its current connection id, and forgets
   them all, so a second announcement sends nothing;
2. says goodbye for every session at once (or at most
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
   at once
   (:meth:`~letagents_trio.ProcessConnector.leave_now`) it does so in one
   loop, with no task per session, before any of those holders is stopped;
3. does all of step 2 under ONE shielded deadline,
   ``trio.move_on_after(policy.exit_deadline, shield=True)``. A slow or
   black-holed room never holds the process past it: the exits still waiting
   for their answers are cancelled ``policy.unwind_allowance`` before it per
   exit, so that their unwinding (each task cancelled, each socket closed)
   ends by the deadline too (:mod:`letagents_trio._unwind`). Failures are
   logged and reported, never raised.

Then the nursery is cancelled and every remaining task unwinds.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from types import MappingProxyType
from typing import TYPE_CHECKING, Final, NoReturn, Protocol, TypeVar, final

import attrs
import trio

from ._collector import CollectorPause, collector_paused
from ._errors import ApiError, IneligibleSession, RoomUnreachable
from ._events import EventKind, HolderEvent
from ._holder import HolderStatus, ProcessHolder, ineligibility
from ._policy import HoldPolicy
from ._unwind import UnwindBudget
from ._websocket import connector_for

if TYPE_CHECKING:
    from ._client import RoomClient
    from ._connector import ProcessConnector
    from ._session import AgentSession

__all__ = [
    "ConnectionManager",
    "ExitAnnouncement",
    "HolderStateHooks",
    "ManagerStatistics",
    "open_connection_manager",
    "serve_connection_manager",
]

logger = logging.getLogger("letagents_trio.manager")

_T = TypeVar("_T")


class HolderStateHooks(Protocol):
    """What ``state=`` must offer: the holders' two hooks into local state.

    :class:`letagents_trio.workers.LocalStateStore` offers both. Without ``state=``
    the manager records nothing and treats every session as its own.
    """

    async def mark_ended(self, session: AgentSession) -> object:
        """Record that the room ended ``session`` (the holder's ``on_ended``).

        Cancellation:
            Called from the holder's task; cancelled with it when the manager
            shuts down, so it must leave the state consistent at any checkpoint.
        """
        ...

    async def is_still_ours(self, session: AgentSession) -> bool:
        """Whether ``session`` still belongs to this process (the holder's ``still_ours``).

        Cancellation:
            Called from the holder's task after a refusal; cancelled with it.
        """
        ...


@final
class _NoState:
    """The hooks when no state is given: nothing recorded, every session ours."""

    async def mark_ended(self, session: AgentSession) -> None:
        await trio.lowlevel.checkpoint()

    async def is_still_ours(self, session: AgentSession) -> bool:
        await trio.lowlevel.checkpoint()
        return True


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
@attrs.frozen(kw_only=True)
class ManagerStatistics:
    """A snapshot of a :class:`ConnectionManager`.

    Attributes:
        holders: sessions held now.
        by_status: how many holders are in each status.
        events_dropped: events not delivered because a subscriber's buffer was full.
        closing: whether shutdown (the exit announcement) has begun.
    """

    holders: int
    by_status: Mapping[HolderStatus, int]
    events_dropped: int
    closing: bool


@final
class ConnectionManager:
    """Holds the process connections of many worker sessions.

    Made by :func:`open_connection_manager` or :func:`serve_connection_manager`,
    which own its nursery; there is no public constructor contract.
    """

    def __init__(
        self,
        nursery: trio.Nursery,
        *,
        connector: ProcessConnector,
        policy: HoldPolicy,
        state: HolderStateHooks,
        owner_mode: bool,
    ) -> None:
        self._nursery = nursery
        self._connector = connector
        self.policy = policy
        self._owner_mode = owner_mode
        self._holders: dict[str, ProcessHolder] = {}
        self._subscribers: list[trio.MemorySendChannel[HolderEvent]] = []
        self._events_dropped = 0
        # None until the goodbye begins; the report once it has.
        self._announced: tuple[ExitAnnouncement, ...] | None = None
        self._exit_limiter = (
            None
            if policy.exit_concurrency is None
            else trio.CapacityLimiter(policy.exit_concurrency)
        )
        # Every holder's hooks, bound once: thousands of holders share them
        # rather than each keeping four bound methods for the collector to walk.
        self._hooks = (self._emit, state.mark_ended, state.is_still_ours, self._forget)

    @property
    def _closing(self) -> bool:
        return self._announced is not None

    @property
    def exit_report(self) -> tuple[ExitAnnouncement, ...] | None:
        """How the goodbye went, one :class:`ExitAnnouncement` per session held.

        ``None`` until the goodbye has begun; readable after the manager's
        block (or task) has ended, which is when an embedder wants it.
        """
        return self._announced

    def __repr__(self) -> str:
        return f"<ConnectionManager holders={len(self._holders)} closing={self._closing}>"

    # --- holding ---------------------------------------------------------------------

    @property
    def holders(self) -> Mapping[str, ProcessHolder]:
        """The holders now running, by session id (a read-only live view)."""
        return MappingProxyType(self._holders)

    def is_eligible(self, session: AgentSession) -> bool:
        """Whether :meth:`hold` would hold ``session`` (PROTOCOL §4.1).

        Only live worker sessions of hosted rooms, with a token, are held, and
        only when the manager acts for the owner (``owner_mode``).
        """
        return ineligibility(session, owner_mode=self._owner_mode) is None

    def hold(self, session: AgentSession) -> ProcessHolder:
        """Hold ``session``'s process connection from now on.

        Non-blocking. Returns the holder. Holding the same session id with the
        same token again returns the running holder; with another token, the
        old holder is stopped and a new one started.

        Raises:
            IneligibleSession: the session is not held at all (PROTOCOL §4.1),
                naming the rule; check :meth:`is_eligible` first to avoid it.
            trio.ClosedResourceError: the manager is shutting down.
        """
        if self._closing:
            raise trio.ClosedResourceError("the connection manager is shutting down")
        refusal = ineligibility(session, owner_mode=self._owner_mode)
        if refusal is not None:
            raise IneligibleSession(session.session_id, *refusal)
        current = self._holders.get(session.session_id)
        if current is not None:
            if current.session.session_token == session.session_token:
                return current
            current.stop("replaced by a new token")
        emit, on_ended, still_ours, forget = self._hooks
        holder = ProcessHolder(
            session,
            connector=self._connector,
            policy=self.policy,
            emit=emit,
            on_ended=on_ended,
            still_ours=still_ours,
            forget=forget,
        )
        self._holders[session.session_id] = holder
        self._nursery.start_soon(holder.run, name=f"process holder {session.session_id}")
        return holder

    def release(self, session_id: str) -> bool:
        """Stop holding ``session_id`` without announcing an exit.

        Non-blocking: the holder's stream closes as its task unwinds. Returns
        whether a holder was running.
        """
        holder = self._holders.pop(session_id, None)
        if holder is None:
            return False
        holder.stop("released")
        return True

    def _forget(self, holder: ProcessHolder) -> None:
        if self._holders.get(holder.session.session_id) is holder:
            del self._holders[holder.session.session_id]

    # --- the timeline ----------------------------------------------------------------

    @contextmanager
    def subscribe(
        self, max_buffer_size: float = 1000
    ) -> Iterator[trio.MemoryReceiveChannel[HolderEvent]]:
        """Receive every :class:`HolderEvent` from now on, while the block runs.

        Events are never waited for: a subscriber whose buffer is full misses
        events (counted in :meth:`statistics`). Pass ``math.inf`` to miss none.
        """
        send, receive = trio.open_memory_channel[HolderEvent](max_buffer_size)
        self._subscribers.append(send)
        try:
            yield receive
        finally:
            self._subscribers.remove(send)
            send.close()

    def _emit(self, event: HolderEvent) -> None:
        for channel in self._subscribers:
            try:
                channel.send_nowait(event)
            except (trio.WouldBlock, trio.BrokenResourceError):
                self._events_dropped += 1

    def statistics(self) -> ManagerStatistics:
        """A frozen snapshot: holders by status, events dropped, closing or not."""
        by_status = dict.fromkeys(HolderStatus, 0)
        for holder in self._holders.values():
            by_status[holder.status] += 1
        return ManagerStatistics(
            holders=len(self._holders),
            by_status=MappingProxyType(by_status),
            events_dropped=self._events_dropped,
            closing=self._closing,
        )

    # --- the goodbye -----------------------------------------------------------------

    async def announce_exits(self) -> tuple[ExitAnnouncement, ...]:
        """Close every held stream, then announce every exit, within the exit deadline.

        The manager stops taking new sessions. A second call sends nothing and
        returns the first call's report.

        Returns:
            One :class:`ExitAnnouncement` per session that was held.

        Cancellation:
            Shielded: it runs to the end of ``policy.exit_deadline`` even when the
            caller is cancelled, then returns. Announcements still in flight are
            abandoned early enough to unwind by the deadline
            (``policy.unwind_allowance`` each) and reported with ``error="deadline"``.
        """
        first = self._announced is None
        started = trio.current_time()
        with (
            collector_paused(),
            trio.move_on_after(self.policy.exit_deadline, shield=True),
        ):
            await self._announce_all(started + self.policy.exit_deadline)
        report = self._announced or ()
        if first:
            late = sum(1 for item in report if item.error == "deadline")
            if late:
                logger.warning(
                    "exit deadline of %.1f s passed before %d of %d exits were announced",
                    self.policy.exit_deadline,
                    late,
                    len(report),
                )
            logger.info(
                "announced %d exits in %.0f ms: %s",
                len(report),
                (trio.current_time() - started) * 1000,
                _summary(report),
            )
        return report

    async def _announce_all(self, deadline: float) -> None:
        """The goodbye; the exits in flight are cancelled early enough to unwind by ``deadline``."""
        if self._announced is not None:
            await trio.lowlevel.checkpoint()
            return
        snapshot = [(holder, holder.held_connection_id) for holder in self._holders.values()]
        self._holders.clear()
        results: dict[str, ExitAnnouncement] = {}
        self._announced = ()
        budget = UnwindBudget(deadline, self.policy.unwind_allowance)
        try:
            with budget.scope:
                async with trio.open_nursery() as nursery:
                    left = await self._leave_now(snapshot, nursery, budget, results)
                    # Only then are the holders stopped: their unwinding (each closes
                    # its stream) never delays an exit still to be written.
                    await _for_each(left, partial(ProcessHolder.stop, reason="process exit"))
        finally:
            now = trio.current_time()
            self._announced = tuple(
                results.get(holder.session.session_id)
                or ExitAnnouncement(
                    session_id=holder.session.session_id,
                    connection_id=connection_id,
                    recorded=None,
                    error="deadline",
                    finished_at=now,
                )
                for holder, connection_id in snapshot
            )

    async def _leave_now(
        self,
        snapshot: list[tuple[ProcessHolder, str | None]],
        nursery: trio.Nursery,
        budget: UnwindBudget,
        results: dict[str, ExitAnnouncement],
    ) -> list[ProcessHolder]:
        """Announce every exit the connector can at once; start a goodbye task for the rest.

        Returns the holders whose exit went at once (over their open sockets).
        """
        left: list[ProcessHolder] = []
        leave_now = self._connector.leave_now

        def leave(item: tuple[ProcessHolder, str | None]) -> None:
            holder, connection_id = item
            if leave_now(holder.session, connection_id):
                left.append(holder)
                self._finished(holder.session, connection_id, None, None, results)
            else:
                budget.exit_started()
                nursery.start_soon(self._announce_one, holder, connection_id, budget, results)

        await _for_each(snapshot, leave)
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
        self,
        holder: ProcessHolder,
        connection_id: str | None,
        budget: UnwindBudget,
        results: dict[str, ExitAnnouncement],
    ) -> None:
        if self._exit_limiter is None:
            recorded, error = await self._goodbye(holder, connection_id)
        else:
            async with self._exit_limiter:
                recorded, error = await self._goodbye(holder, connection_id)
        # A connector may close the stream itself rather than wait for the holder.
        holder.stop("process exit")
        self._finished(holder.session, connection_id, recorded, error, results)
        budget.exit_ended()

    def _finished(
        self,
        session: AgentSession,
        connection_id: str | None,
        recorded: bool | None,
        error: str | None,
        results: dict[str, ExitAnnouncement],
    ) -> None:
        """Report one session's goodbye: its :class:`ExitAnnouncement` and its exit event."""
        if error is not None:
            logger.warning("exit of %s not announced: %s", session.session_id, error)
        result = ExitAnnouncement(
            session_id=session.session_id,
            connection_id=connection_id,
            recorded=recorded,
            error=error,
            finished_at=trio.current_time(),
        )
        results[session.session_id] = result
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


def _sole_exception(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The one exception inside ``group`` (however nested), or None when there are several."""
    leaves = group.exceptions
    while len(leaves) == 1 and isinstance(leaves[0], BaseExceptionGroup):
        leaves = leaves[0].exceptions
    return leaves[0] if len(leaves) == 1 else None


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


@asynccontextmanager
async def open_connection_manager(
    client: RoomClient,
    *,
    policy: HoldPolicy | None = None,
    state: HolderStateHooks | None = None,
    connector: ProcessConnector | None = None,
    owner_mode: bool = True,
) -> AsyncIterator[ConnectionManager]:
    """Open a :class:`ConnectionManager` whose holders live as long as the block.

    Args:
        client: the room client the holders use.
        policy: timing; the Node client's defaults when omitted.
        state: the holders' hooks into local state (:class:`HolderStateHooks`):
            ``mark_ended`` is called with a session the room ended, and
            ``is_still_ours`` is asked, after a refusal, whether the session still
            belongs to this process. A :class:`letagents_trio.workers.LocalStateStore`
            is one. Default: nothing recorded, every session ours.
        connector: how process connections are made (default: the one
            ``policy.transport`` names; :class:`SSEConnector` unless told).
        owner_mode: whether this process acts for the owner. False under a
            supervisor's worker bearer (PROTOCOL §4.1): then nothing is held and
            :meth:`ConnectionManager.hold` refuses every session. The library
            never reads the environment; the MCP server decides this from
            ``LETAGENTS_AGENT_SESSION_BEARER`` at start-up.

    Leaving the block, for any reason, closes every held stream and announces
    every exit within ``policy.exit_deadline`` (see :meth:`ConnectionManager.announce_exits`).
    An exception raised in the block leaves it as itself, not inside an
    exception group (the manager's nursery is an implementation detail), so
    ``except ValueError`` or ``pytest.raises`` see it. Only when several fail
    at once (the block and a holder with a bug) does a ``BaseExceptionGroup``
    leave; ``except*`` catches both forms. The report of the goodbye is
    :attr:`ConnectionManager.exit_report` afterwards.

    Cancellation:
        The embedder may cancel the block from outside: the exits are still
        announced, shielded, within the deadline; then the cancellation goes on.
    """
    policy = policy or HoldPolicy()
    if connector is None:
        connector = connector_for(client, policy)
    # From the goodbye until every holder has unwound: thousands of tasks
    # unwinding are garbage too, and the process is usually about to exit.
    pause = CollectorPause()
    try:
        async with trio.open_nursery() as nursery:
            holders, holders_scope = await nursery.start(_holders_nursery)
            manager = ConnectionManager(
                holders,
                connector=connector,
                policy=policy,
                state=_NoState() if state is None else state,
                owner_mode=owner_mode,
            )
            try:
                yield manager
            finally:
                pause.pause()
                try:
                    with trio.move_on_after(policy.exit_deadline, shield=True):
                        await manager.announce_exits()
                finally:
                    # However the goodbye went: only this ends the shielded holders.
                    holders_scope.cancel(reason="connection manager closed")
                    nursery.cancel_scope.cancel(reason="connection manager closed")
    except BaseExceptionGroup as group:
        sole = _sole_exception(group)
        if sole is None:
            raise
        raise sole from None
    finally:
        pause.resume()


async def _holders_nursery(
    *, task_status: trio.TaskStatus[tuple[trio.Nursery, trio.CancelScope]]
) -> None:
    """The holders' nursery, shielded: only the manager cancels it, after the goodbye.

    An embedder cancelling the block would otherwise cancel every holder at
    once, before the goodbye: thousands of streams unwinding together, and
    each session's goodbye no longer in its transport's order (a WebSocket
    could no longer send its exit over its own socket).
    """
    with trio.CancelScope(shield=True) as scope:
        async with trio.open_nursery() as holders:
            task_status.started((holders, scope))
            await trio.sleep_forever()


async def serve_connection_manager(
    client: RoomClient,
    *,
    policy: HoldPolicy | None = None,
    state: HolderStateHooks | None = None,
    connector: ProcessConnector | None = None,
    owner_mode: bool = True,
    task_status: trio.TaskStatus[ConnectionManager] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Run a connection manager as a task of the embedder's nursery.

    ``manager = await nursery.start(serve_connection_manager, client)``. Takes
    the keyword options of :func:`open_connection_manager`. Reports the
    manager through ``task_status.started`` at once (no network wait), then runs
    until cancelled.

    Cancellation:
        Cancelling the task (for example the embedder's nursery) closes every
        stream and announces every exit within ``policy.exit_deadline``, then
        the task ends.
    """
    async with open_connection_manager(
        client,
        policy=policy,
        state=state,
        connector=connector,
        owner_mode=owner_mode,
    ) as manager:
        task_status.started(manager)
        await trio.sleep_forever()
    raise AssertionError("unreachable")  # pragma: no cover
