"""Supervision of the demo's actors: the room server and the client "processes".

**The room.** :func:`open_venue` either serves the reference
:class:`~letagents_trio.room_server.Room` over a memory (or SQLite) store on a
free loopback port, or, given another room's URL, learns the account its owner
token names (``GET /agents/me``). The embedded room is served by
:func:`serve_room` inside a cancel scope of the venue's nursery
(:class:`RoomRunner`), so that it can be stopped and served again on the same
port with the same room and store: a restart.

**The processes.** Each demo "process" is one :class:`RoomClient` and one
connection manager, run as a task of the cast's nursery
(:meth:`Cast.running`); the holders are the library's own, untouched. The
:class:`Cast` registers durable workers the way a client does
(``call_when_free`` on ``POST …/agent-sessions``), keeps the demo's record of
each session's current token (the local state file of a real client:
:class:`Tokens` tells a holder whether its session is still ours), tracks
every session held (:class:`Tracked`) and watches each manager's timeline
(:meth:`ConnectionManager.subscribe`), noting each event and waking every
waiter. A process keeps going until asked to exit; then its manager announces
its exits and the task ends. Leaving :meth:`Cast.running` asks every process
still running to exit at the same moment, so all exits are announced
concurrently, each manager within its own ``exit_deadline``.

Waits on holders (:meth:`Cast.wait_until`) are woken by events, never polled,
and unbounded here: the story bounds each.
"""

from __future__ import annotations

import math
import secrets
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Mapping
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Final, final

import attrs
import trio

from .._client import RoomClient, encode_room_path
from .._events import EventKind, HolderEvent
from .._holder import HolderStatus, ProcessHolder
from .._manager import ConnectionManager, open_connection_manager
from .._session import AgentSession
from ..room_server import MemoryStore, Room, RoomStore, SQLiteStore, serve_room
from ..workers._wire import (
    durable_registration_body,
    new_connection_token,
    new_worker_id,
    worker_agent_name,
)
from ._values import DemoOptions, SessionSummary
from ._view import Row, event_line, exit_line

if TYPE_CHECKING:
    from .._goodbye import ExitAnnouncement

__all__ = [
    "DEMO_LOGIN",
    "LOOPBACK",
    "Cast",
    "DemoProcess",
    "RoomRunner",
    "Tokens",
    "Tracked",
    "Venue",
    "all_connected",
    "open_venue",
]

# The embedded room binds loopback only: nothing leaves the machine.
LOOPBACK: Final = "127.0.0.1"
# The embedded room's one account, as `letagents-trio room` names its dev account.
DEMO_LOGIN: Final = "dev"


# --- the room ---------------------------------------------------------------------------


@final
class RoomRunner:
    """Serves one Room in a cancel scope of ``nursery``, restartable on the same port."""

    def __init__(self, room: Room, nursery: trio.Nursery) -> None:
        self.room = room
        self._nursery = nursery
        self._port = 0
        self._scope = trio.CancelScope()
        self._stopped = trio.Event()
        self.url = ""

    async def start(self) -> str:
        """Serve the room (on the port it had before, if any); returns its URL."""
        self._scope = trio.CancelScope()
        self._stopped = trio.Event()
        self.url = await self._nursery.start(self._serve, self._port)
        self._port = int(self.url.rsplit(":", 1)[1])
        return self.url

    async def _serve(self, port: int, *, task_status: trio.TaskStatus[str]) -> None:
        try:
            with self._scope:
                async with trio.open_nursery() as nursery:
                    url: str = await nursery.start(
                        partial(serve_room, self.room, host=LOOPBACK, port=port)
                    )
                    task_status.started(url)
        finally:
            self._stopped.set()

    async def stop(self) -> None:
        """Stop serving (held streams close silently) and wait until it has stopped."""
        self._scope.cancel(reason="the demo restarts the room")
        await self._stopped.wait()


@final
@attrs.frozen(kw_only=True)
class Venue:
    """Where the demo plays.

    Attributes:
        api_url: the room's base URL.
        owner_token: the owner bearer token every process uses.
        login: the account the token names (workers are ``{login}/worker-…``).
        room_id: the room played in.
        runner: the embedded room's runner; None for another room (no room internals).
    """

    api_url: str
    owner_token: str = attrs.field(repr=False)
    login: str
    room_id: str
    runner: RoomRunner | None


@asynccontextmanager
async def open_venue(options: DemoOptions) -> AsyncIterator[Venue]:
    """Serve the embedded room (or reach ``options.api_url``) for as long as inside.

    Raises:
        LetAgentsError: the other room refused the token or could not be reached.

    Cancellation:
        On leaving, the embedded room stops serving and its SQLite store is closed.
    """
    owner_token = options.owner_token or secrets.token_urlsafe(24)
    room_id = options.room_id or (
        "demo" if options.api_url is None else f"demo-{secrets.token_hex(4)}"
    )
    if options.api_url is not None:
        async with RoomClient(options.api_url, owner_token=owner_token) as client:
            me = await client.call("GET", "/agents/me")
        yield Venue(
            api_url=options.api_url,
            owner_token=owner_token,
            login=str(me["account"]["login"]),
            room_id=room_id,
            runner=None,
        )
        return
    async with trio.open_nursery() as room_nursery:
        store: RoomStore = MemoryStore() if options.db is None else SQLiteStore(options.db)
        try:
            runner = RoomRunner(
                Room(store=store, owner_tokens={owner_token: DEMO_LOGIN}), room_nursery
            )
            api_url = await runner.start()
            yield Venue(
                api_url=api_url,
                owner_token=owner_token,
                login=DEMO_LOGIN,
                room_id=room_id,
                runner=runner,
            )
            room_nursery.cancel_scope.cancel(reason="the demo is over")
        finally:
            if isinstance(store, SQLiteStore):
                store.close()


# --- the processes ------------------------------------------------------------------------


@final
@attrs.frozen
class Tokens:
    """The demo's state hooks: a session is still ours while we hold its latest token."""

    tokens: dict[str, str]

    async def mark_ended(self, session: AgentSession) -> None:
        await trio.lowlevel.checkpoint()

    async def is_still_ours(self, session: AgentSession) -> bool:
        await trio.lowlevel.checkpoint()
        return self.tokens.get(session.session_id) == session.session_token


@final
@attrs.define(eq=False)
class Tracked:
    """A session held by one demo process, and what became of it."""

    name: str
    process: str
    worker_id: str
    session: AgentSession = attrs.field(repr=False)
    holder: ProcessHolder
    how_it_ended: str = "held"
    announcement: ExitAnnouncement | None = None
    shutdown_started: float | None = None

    @property
    def running(self) -> bool:
        return self.holder.status not in (HolderStatus.ENDED, HolderStatus.STOPPED)

    def row(self) -> Row:
        """This session as the live table shows it now."""
        return Row(
            name=self.name,
            process=self.process,
            how_it_ended=self.how_it_ended,
            stats=self.holder.statistics(),
        )

    def summary(self) -> SessionSummary:
        """This session as the summary reports it."""
        stats = self.holder.statistics()
        announcement = self.announcement
        after = None
        if announcement is not None and self.shutdown_started is not None:
            after = announcement.finished_at - self.shutdown_started
        return SessionSummary(
            name=self.name,
            process=self.process,
            session_id=self.session.session_id,
            attempts={o.value: n for o, n in stats.attempts.items() if n},
            reconnects=max(stats.opens - 1, 0),
            how_it_ended=self.how_it_ended,
            announce_after=after,
            recorded=None if announcement is None else announcement.recorded,
        )


def all_connected(entries: Iterable[Tracked], other_than: Mapping[str, str]) -> bool:
    """Whether each entry's holder has a named connection (not the one ``other_than`` gives)."""
    for entry in entries:
        cid = entry.holder.connection_id
        if cid is None or other_than.get(entry.session.session_id) == cid:
            return False
    return True


@final
@attrs.define(eq=False)
class DemoProcess:
    """One demo "process": a room client and a connection manager, run as a task."""

    label: str
    client: RoomClient
    manager: ConnectionManager
    exit_requested: trio.Event = attrs.field(factory=trio.Event)
    done: trio.Event = attrs.field(factory=trio.Event)
    shutdown_started: float | None = None
    announcements: tuple[ExitAnnouncement, ...] = ()

    def request_exit(self, at: float) -> None:
        if not self.exit_requested.is_set():
            self.shutdown_started = at
            self.exit_requested.set()


@final
class Cast:
    """Every demo process, every session held, and the demo's record of tokens.

    Args:
        venue: where the processes play.
        log: takes each event line (a holder event, an exit announcement).
        refresh: called after each change, so the view can redraw.
    """

    def __init__(
        self, venue: Venue, *, log: Callable[[str], None], refresh: Callable[[], None]
    ) -> None:
        self.venue = venue
        self._log = log
        self._refresh = refresh
        # One machine plays every process: one host id, as the state file would give.
        self.host_id = "phost_" + uuid.uuid4().hex
        self.processes: dict[str, DemoProcess] = {}
        self.tracked: list[Tracked] = []
        # The demo's record of each session's current token: the local state
        # file of the real client. Tokens.is_still_ours compares a holder's token with it.
        self.tokens: dict[str, str] = {}
        self._changed = trio.lowlevel.ParkingLot()
        self._nursery: trio.Nursery | None = None

    def rows(self) -> list[Row]:
        """Every session held so far, as the live table shows them now."""
        return [entry.row() for entry in self.tracked]

    def summaries(self) -> tuple[SessionSummary, ...]:
        """Every session held so far, as the summary reports them."""
        return tuple(entry.summary() for entry in self.tracked)

    # --- running the processes -----------------------------------------------------------

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        """Run the processes started inside; on leaving, every one exits at the same moment.

        Cancellation:
            Cancelled (or left by an exception), the processes are cancelled:
            each manager still announces its exits, shielded, within its exit deadline.
        """
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            yield
            shutdown_at = trio.current_time()
            for process in self.processes.values():
                process.request_exit(shutdown_at)
            for process in self.processes.values():
                await process.done.wait()
            nursery.cancel_scope.cancel(reason="the story is over")

    async def start_process(self, label: str) -> DemoProcess:
        """Start a process named ``label``; returns once its manager is open."""
        assert self._nursery is not None, "start processes inside Cast.running()"
        process: DemoProcess = await self._nursery.start(self._run_process, label)
        self.processes[label] = process
        return process

    async def _run_process(self, label: str, *, task_status: trio.TaskStatus[DemoProcess]) -> None:
        venue = self.venue
        async with (
            RoomClient(venue.api_url, owner_token=venue.owner_token) as client,
            open_connection_manager(client, state=Tokens(self.tokens)) as manager,
        ):
            process = DemoProcess(label=label, client=client, manager=manager)
            try:
                with manager.subscribe(math.inf) as events:
                    async with trio.open_nursery() as watchers:
                        watchers.start_soon(self._watch, label, events)
                        task_status.started(process)
                        await process.exit_requested.wait()
                        process.announcements = await manager.announce_exits()
                        watchers.cancel_scope.cancel(reason="process exited")
            finally:
                if process.shutdown_started is None:  # cancelled from outside
                    process.shutdown_started = trio.current_time()
                # Told before "done": whoever waits for it may end the story at once.
                self._record_exits(process)
                process.done.set()

    async def _watch(self, label: str, events: trio.MemoryReceiveChannel[HolderEvent]) -> None:
        async for event in events:
            self._note_event(label, event)

    def _note_event(self, label: str, event: HolderEvent) -> None:
        entry = self.entry(label, event.session_id)
        name = entry.name if entry is not None else event.session_id[:8]
        if event.kind is EventKind.STOPPED and entry is not None:
            # The holder's own stop may be told after its exit was: keep the exit.
            if entry.announcement is None:
                entry.how_it_ended = event.detail or "stopped"
        elif event.kind is EventKind.ENDED and entry is not None:
            entry.how_it_ended = "ended by the room"
        elif event.kind is EventKind.EXIT:
            return  # told with its timing by _record_exits
        self._log(event_line(label, name, event))
        self._changed.unpark_all()
        self._refresh()

    def _record_exits(self, process: DemoProcess) -> None:
        for announcement in process.announcements:
            entry = self.entry(process.label, announcement.session_id)
            if entry is None:
                continue
            entry.announcement = announcement
            entry.shutdown_started = process.shutdown_started
            entry.how_it_ended = "exit announced"
            self._log(exit_line(process.label, entry.name, announcement, process.shutdown_started))
        self._changed.unpark_all()
        self._refresh()

    async def stop_process(self, process: DemoProcess) -> None:
        """Ask ``process`` to exit and wait until its exits are announced."""
        process.request_exit(trio.current_time())
        await process.done.wait()

    def entry(self, label: str, session_id: str) -> Tracked | None:
        """The latest session ``session_id`` held by process ``label``, if any."""
        for entry in reversed(self.tracked):
            if entry.process == label and entry.session.session_id == session_id:
                return entry
        return None

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        """Wait, woken by every holder event, until ``condition()`` holds (unbounded)."""
        while not condition():
            await self._changed.park()

    # --- registering and holding ---------------------------------------------------------

    async def register(
        self,
        process: DemoProcess,
        name: str,
        *,
        worker_id: str | None = None,
        replacing: AgentSession | None = None,
    ) -> tuple[AgentSession, str]:
        """Register a durable worker as a client does; returns (session, worker id)."""
        worker_id = worker_id or new_worker_id()
        body = durable_registration_body(
            actor_key=f"{self.venue.login}/{worker_agent_name(worker_id)}",
            worker_id=worker_id,
            display_name=name,
            connection_token=new_connection_token(),
            process_host_id=self.host_id,
            predecessor=(replacing.session_id, replacing.session_token) if replacing else None,
        )
        answer = await process.client.call_when_free(
            "POST", f"/rooms/{encode_room_path(self.venue.room_id)}/agent-sessions", json=body
        )
        session = AgentSession.from_json(answer)
        self.tokens[session.session_id] = session.session_token
        return session, worker_id

    def hold(self, process: DemoProcess, session: AgentSession, worker_id: str) -> Tracked:
        """Have ``process``'s manager hold ``session``'s process connection, and track it."""
        holder = process.manager.hold(session)
        entry = Tracked(
            name=session.display_name,
            process=process.label,
            worker_id=worker_id,
            session=session,
            holder=holder,
        )
        self.tracked.append(entry)
        self._refresh()
        return entry
