"""The connection manager: a root nursery of holders, and a bounded goodbye.

:func:`open_connection_manager` owns one nursery. Each :meth:`~ConnectionManager.hold`
starts a :class:`~letagents_trio.ProcessHolder` in it, one per worker session;
holders for thousands of sessions cost one task and a few objects each.

Shutdown is the reason this module exists. However the block is left (normal
exit, an exception, the embedder cancelling its own scope, Ctrl-C), the manager
takes every holder, forgets them all, and lets each leave (its exit, naming
the connection it held, carried by its stream's own way out) within ONE
shielded deadline, ``policy.exit_deadline``, set in one place:
:meth:`ConnectionManager.announce_exits`, which gives that time to the
:class:`~letagents_trio._goodbye.Goodbye` (the order of the exits and the
report are its). Then the holders' nursery is cancelled and every remaining
task unwinds.

The library changes no process-wide state by default. An operator of
thousands of sessions may opt in to pausing the cyclic garbage collector
during bursts of opening and during the goodbye (``pause_collector=True``,
:mod:`letagents_trio._collector`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from types import MappingProxyType
from typing import TYPE_CHECKING, NoReturn, Protocol, final

import attrs
import trio

from ._collector import CollectorPause, OpeningBurst
from ._errors import IneligibleSession
from ._events import HolderEvent
from ._goodbye import ExitAnnouncement, Goodbye
from ._holder import HolderStatus, ProcessHolder
from ._policy import HoldPolicy
from ._sse_connector import SSEConnector
from ._unknown import UnknownSessions

if TYPE_CHECKING:
    from ._client import RoomClient
    from ._connector import ProcessConnector
    from ._session import AgentSession

__all__ = [
    "ConnectionManager",
    "HolderStateHooks",
    "ManagerStatistics",
    "open_connection_manager",
    "serve_connection_manager",
]

logger = logging.getLogger("letagents_trio.manager")


def ineligibility(session: AgentSession, *, owner_mode: bool) -> tuple[str, str] | None:
    """Why no process connection is held for ``session`` (PROTOCOL §4.1), or None.

    Only live worker sessions of hosted rooms with a token are held, and only
    by a process acting for the owner (not under a worker bearer or supervisor).
    Returns the rule's short code and a sentence naming it.
    """
    if not owner_mode:
        return "not-owner", "this process does not act for the owner (a worker bearer is set)"
    if session.session_kind != "worker":
        return "not-a-worker", f"only worker sessions are held, not {session.session_kind!r}"
    if session.ended_at:
        return "ended", "the room ended the session"
    if not session.session_token:
        return "no-token", "the session has no token"
    if session.is_local:
        return "local-room", "local rooms have no process connection"
    return None


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
class ManagerStatistics:
    """A snapshot of a :class:`ConnectionManager`.

    Attributes:
        holders: sessions held now.
        by_status: how many holders are in each status.
        waiting_for_turn: how many of the ``CONNECTING`` holders wait for their
            turn to ask the room (``HoldPolicy.open_concurrency``).
        events_dropped: events not delivered because a subscriber's buffer was full.
        closing: whether shutdown (the exit announcement) has begun.
    """

    holders: int
    by_status: Mapping[HolderStatus, int]
    waiting_for_turn: int
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
        opening: OpeningBurst,
        goodbye_pause: CollectorPause | None,
    ) -> None:
        self._nursery = nursery
        self._connector = connector
        self.policy = policy
        self._state = state
        self._owner_mode = owner_mode
        self._holders: dict[str, ProcessHolder] = {}
        self._subscribers: list[trio.MemorySendChannel[HolderEvent]] = []
        self._events_dropped = 0
        # None until the goodbye begins.
        self._goodbye: Goodbye | None = None
        # The holders' attempts waiting for the room (a burst pauses the
        # collector, when the embedder opted in), and the goodbye's own pause.
        self._opening = opening
        self._goodbye_pause = goodbye_pause
        # ... and at most policy.open_concurrency of them at once.
        cap = policy.open_concurrency
        self._turns = trio.CapacityLimiter(math.inf if cap is None else cap)
        # The holders' 404s, summed up in one warning per outcome.
        self._unknown = UnknownSessions(nursery, policy)

    @property
    def _closing(self) -> bool:
        return self._goodbye is not None

    @property
    def exit_report(self) -> tuple[ExitAnnouncement, ...] | None:
        """How the goodbye went, one :class:`ExitAnnouncement` per session held.

        ``None`` until the goodbye has begun; readable after the manager's
        block (or task) has ended, which is when an embedder wants it.
        """
        return None if self._goodbye is None else self._goodbye.report

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
        holder = ProcessHolder(
            session,
            connector=self._connector,
            policy=self.policy,
            emit=self._emit,
            on_ended=self._state.mark_ended,
            still_ours=self._state.is_still_ours,
            forget=self._forget,
            opening=self._opening,
            turns=self._turns,
            unknown=self._unknown,
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
        """A frozen snapshot: holders by status, turns waited for, events dropped, closing."""
        by_status = dict.fromkeys(HolderStatus, 0)
        for holder in self._holders.values():
            by_status[holder.status] += 1
        return ManagerStatistics(
            holders=len(self._holders),
            by_status=MappingProxyType(by_status),
            waiting_for_turn=self._turns.statistics().tasks_waiting,
            events_dropped=self._events_dropped,
            closing=self._closing,
        )

    # --- the goodbye -----------------------------------------------------------------

    async def announce_exits(self) -> tuple[ExitAnnouncement, ...]:
        """Let every holder leave: close every held stream and announce every exit, in one deadline.

        The manager stops taking new sessions. A second call sends nothing and
        returns the first call's report.

        Returns:
            One :class:`ExitAnnouncement` per session that was held.

        Cancellation:
            Shielded: it runs to the end of ``policy.exit_deadline`` even when the
            caller is cancelled, then returns. Announcements still in flight are
            abandoned early enough to unwind by the deadline and reported with
            ``error="deadline"``.
        """
        if self._goodbye is not None:
            await trio.lowlevel.checkpoint()
            return self._goodbye.report
        # The one deadline of the goodbye, set here and given to it.
        deadline = trio.current_time() + self.policy.exit_deadline
        self._goodbye = goodbye = Goodbye(
            list(self._holders.values()),
            deadline=deadline,
            concurrency=self.policy.exit_concurrency,
            emit=self._emit,
        )
        self._holders.clear()
        if self._goodbye_pause is not None:
            self._goodbye_pause.pause()
        with trio.move_on_at(deadline, shield=True):
            await goodbye.run()
        goodbye.log()
        return goodbye.report


def _sole_exception(group: BaseExceptionGroup[BaseException]) -> BaseException | None:
    """The one exception inside ``group`` (however nested), or None when there are several."""
    leaves = group.exceptions
    while len(leaves) == 1 and isinstance(leaves[0], BaseExceptionGroup):
        leaves = leaves[0].exceptions
    return leaves[0] if len(leaves) == 1 else None


@asynccontextmanager
async def open_connection_manager(
    client: RoomClient,
    *,
    policy: HoldPolicy | None = None,
    state: HolderStateHooks | None = None,
    connector: ProcessConnector | None = None,
    owner_mode: bool = True,
    pause_collector: bool = False,
) -> AsyncIterator[ConnectionManager]:
    """Open a :class:`ConnectionManager` whose holders live as long as the block.

    Args:
        client: the room client the holders use.
        policy: timing and limits; ``HoldPolicy()`` (the Node client's timing) when omitted.
        state: the holders' hooks into local state (:class:`HolderStateHooks`):
            ``mark_ended`` is called with a session the room ended, and
            ``is_still_ours`` is asked, after a refusal, whether the session still
            belongs to this process. A :class:`letagents_trio.workers.LocalStateStore`
            is one. Default: nothing recorded, every session ours.
        connector: how process connections are made: :class:`SSEConnector`
            over ``client`` by default (every letagents room has the route);
            :class:`WebSocketConnector` or :class:`AutoConnector` for the
            WebSocket form.
        owner_mode: whether this process acts for the owner. False under a
            supervisor's worker bearer (PROTOCOL §4.1): then nothing is held and
            :meth:`ConnectionManager.hold` refuses every session. The library
            never reads the environment; the MCP server decides this from
            ``LETAGENTS_AGENT_SESSION_BEARER`` at start-up.
        pause_collector: opt in to pausing the process's cyclic garbage
            collector while many holders wait for the room at once and during
            the goodbye, until every holder has unwound (for processes holding
            thousands of sessions: ``docs/performance.md``). Off by default:
            the collector is the whole process's, not the library's.

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
        connector = SSEConnector(client)
    # Opted in: from the goodbye until every holder has unwound (thousands of
    # tasks unwinding are garbage too, and the process is usually about to exit).
    goodbye_pause = CollectorPause() if pause_collector else None
    opening = OpeningBurst(pause=pause_collector)
    try:
        async with trio.open_nursery() as nursery:
            holders, holders_scope = await nursery.start(_holders_nursery)
            manager = ConnectionManager(
                holders,
                connector=connector,
                policy=policy,
                state=_NoState() if state is None else state,
                owner_mode=owner_mode,
                opening=opening,
                goodbye_pause=goodbye_pause,
            )
            try:
                yield manager
            finally:
                try:
                    # Shielded, and bounded by the goodbye's one deadline, inside.
                    await manager.announce_exits()  # noqa: ASYNC102
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
        opening.close()
        if goodbye_pause is not None:
            goodbye_pause.resume()


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
    state: HolderStateHooks | None = None,
    *,
    policy: HoldPolicy | None = None,
    connector: ProcessConnector | None = None,
    owner_mode: bool = True,
    pause_collector: bool = False,
    task_status: trio.TaskStatus[ConnectionManager] = trio.TASK_STATUS_IGNORED,
) -> NoReturn:
    """Run a connection manager as a task of the embedder's nursery.

    ``manager = await nursery.start(serve_connection_manager, client, store)``:
    ``nursery.start`` passes positional arguments only, so ``state`` (a
    :class:`letagents_trio.workers.LocalStateStore`, or None) may be given
    second; the other options of :func:`open_connection_manager` need
    ``functools.partial(serve_connection_manager, client, policy=...)``.
    Reports the manager through ``task_status.started`` at once (no network
    wait), then runs until cancelled.

    Cancellation:
        Cancelling the task closes every stream and announces every exit
        within ``policy.exit_deadline``, then the task ends. The task is
        cancelled by a scope that encloses the nursery it runs in (the
        nursery's own ``cancel_scope``, or a ``trio.CancelScope`` of yours
        around the nursery); a scope opened *inside* that nursery's block
        does not reach it.
    """
    async with open_connection_manager(
        client,
        policy=policy,
        state=state,
        connector=connector,
        owner_mode=owner_mode,
        pause_collector=pause_collector,
    ) as manager:
        task_status.started(manager)
        await trio.sleep_forever()
    raise AssertionError("unreachable")  # pragma: no cover
