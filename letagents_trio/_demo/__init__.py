"""``letagents-trio demo``: the process connection's story, told on a real room.

The demo is a small play with real actors: the reference room served by
hypercorn on a free loopback port (or another room, ``--api-url``), real HTTP,
trio's real clock. Each "process" of the story is one :class:`RoomClient` and
one connection manager, run as a task of the demo's process nursery; the
holders are the library's own, untouched. The demo only steers the room and
watches the managers' timelines (:meth:`ConnectionManager.subscribe`).

How it runs:

1. **Room.** A :class:`~letagents_trio.room_server.Room` over a memory (or
   SQLite, ``--db``) store, served by :func:`serve_room` inside a cancel scope
   of the room nursery, so that it can be stopped and served again on the same
   port with the same room and store (a restart).
2. **Processes.** Process 1 registers N durable workers the way a client does
   (``call_when_free`` on ``POST …/agent-sessions``) and holds them. A rival
   process and, later, process 2 are further tasks. Each process keeps going
   until asked to exit; then its manager announces its exits and the task ends.
3. **Story**, inside one cancel scope (Ctrl-C cancels it): a dropped stream
   reopened after 1 s; a room restart with every holder coming back; a
   refusal (the rival re-registers a worker with the predecessor proof, the
   room rotates the token, process 1's next attempt is refused and, since the
   demo's record of tokens says the session is no longer ours, its holder
   stops); a session ended by the room (``event: ended``); a name passing:
   "Juniper" is held by process 2, so a new worker asking for it gets a
   codename; process 2 exits (exit announced) and the next worker asking for
   "Juniper" gets it. Every wait for a holder is bounded by
   :data:`STEP_TIMEOUT` and woken by events, never polled.
4. **Shutdown.** Whatever ended the story, every remaining process is asked to
   exit at the same moment, so all exits are announced concurrently, each
   manager within its own ``exit_deadline``; only then does the room stop.
   The summary lists every session ever held, with the time from shutdown
   start to its announcement.

This module is a command-line program, not library code: it writes to the
terminal through a rich :class:`~rich.console.Console` and leaves logging
configuration alone.
"""

from __future__ import annotations

import argparse
import math
import os
import secrets
import signal
import uuid
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Final, final

import attrs
import trio
from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .._client import RoomClient, encode_room_path
from .._errors import LetAgentsError
from .._events import EventKind, HolderEvent
from .._holder import HolderStatus, ProcessHolder
from .._manager import ConnectionManager, ExitAnnouncement, open_connection_manager
from .._policy import Outcome
from .._session import AgentSession
from ..room_server import MemoryStore, Room, RoomStore, SQLiteStore, serve_room
from ..workers._wire import (
    durable_registration_body,
    new_connection_token,
    new_worker_id,
    worker_agent_name,
)

__all__ = [
    "DemoOptions",
    "DemoReport",
    "SessionSummary",
    "StepResult",
    "build_parser",
    "main",
    "run_demo",
]

# Workers held by process 1 unless --workers says otherwise: enough for a
# drop, a refusal and an ending to each happen to a different worker.
DEFAULT_WORKERS: Final = 3
# Process 1's workers, in order: distinct, non-generic names (none is "Juniper").
WORKER_NAMES: Final = (
    "Aspen", "Birch", "Cedar", "Dogwood", "Elm", "Fir", "Ginkgo", "Hazel", "Larch", "Rowan",
)  # fmt: skip
# The live table stays readable, and each worker gets a distinct name.
MAX_WORKERS: Final = len(WORKER_NAMES)
# The name that passes from process 2 to a new worker in the last step.
PASSED_NAME: Final = "Juniper"
# Pause between story steps at --speed 1, in seconds: time to read a step.
# Eight pauses plus about four seconds of reconnects: about 27 s in all.
BEAT: Final = 2.8
# The longest a step waits for the holders to do what it shows, in seconds.
# Reconnects after a drop take 1 s (2 s, 5 s if the room is still down).
STEP_TIMEOUT: Final = 20.0
# The embedded room binds loopback only: nothing leaves the machine.
LOOPBACK: Final = "127.0.0.1"
# The embedded room's one account, as `letagents-trio room` names its dev account.
DEMO_LOGIN: Final = "dev"
# Environment variable holding an owner token for --api-url (as the MCP server reads it).
OWNER_TOKEN_ENV: Final = "LETAGENTS_TOKEN"
# Events kept for the live view's "latest events" panel.
RECENT_EVENTS: Final = 8
# The live view redraws this often, so "next attempt in" counts down smoothly.
REFRESH_INTERVAL: Final = 0.25
# Columns given to output that goes to a pipe or file, so the summary fits on one line per row.
SUMMARY_WIDTH: Final = 120
# Exit status of a run that ended on a signal: the shell's 128 + signal number.
SIGNAL_EXIT_BASE: Final = 128

PROCESS_1: Final = "process 1"
RIVAL: Final = "rival"
PROCESS_2: Final = "process 2"


# --- options and results ------------------------------------------------------------


def _positive_speed(value: str) -> float:
    speed = float(value)
    if not (math.isfinite(speed) and speed > 0):
        raise argparse.ArgumentTypeError("speed must be a finite number > 0")
    return speed


def _worker_count(value: str) -> int:
    count = int(value)
    if not 1 <= count <= MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"workers must be between 1 and {MAX_WORKERS}")
    return count


@final
@attrs.frozen
class _Tokens:
    """The demo's state hooks: a session is still ours while we hold its latest token."""

    tokens: dict[str, str]

    async def mark_ended(self, session: AgentSession) -> None:
        await trio.lowlevel.checkpoint()

    async def is_still_ours(self, session: AgentSession) -> bool:
        await trio.lowlevel.checkpoint()
        return self.tokens.get(session.session_id) == session.session_token


@final
@attrs.frozen(kw_only=True)
class DemoOptions:
    """What to play, and where.

    Attributes:
        workers: workers process 1 registers and holds.
        speed: pauses between steps are divided by this.
        api_url: run against this room instead of an embedded one.
        owner_token: the owner bearer token for ``api_url``.
        room_id: the room to play in (default: ``demo`` embedded, a fresh id elsewhere).
        live: show the live view (otherwise plain log lines).
        db: the embedded room's SQLite file (default: memory).
    """

    workers: int = DEFAULT_WORKERS
    speed: float = 1.0
    api_url: str | None = None
    owner_token: str | None = attrs.field(default=None, repr=False)
    room_id: str | None = None
    live: bool = True
    db: Path | None = None


@final
@attrs.frozen(kw_only=True)
class StepResult:
    """How one step of the story went.

    Attributes:
        number: the step's number (1 to 5).
        title: what the step shows.
        status: ``"ok"``, ``"failed"`` (it did not happen in time) or ``"skipped"``.
        detail: what was seen, in a sentence.
    """

    number: int
    title: str
    status: str
    detail: str


@final
@attrs.frozen(kw_only=True)
class SessionSummary:
    """One held session, at the end of the demo.

    Attributes:
        name: the worker's display name.
        process: the demo process that held it.
        session_id: the room's session id.
        attempts: finished attempts, by outcome.
        reconnects: streams opened after the first one.
        how_it_ended: why the holder stopped (``"exit announced"``, ``"ended by the room"``…).
        announce_after: seconds from the process's shutdown start to the
            announcement's end; None when no exit was announced for it.
        recorded: whether the room recorded the exit; None without an answer.
    """

    name: str
    process: str
    session_id: str
    attempts: Mapping[str, int]
    reconnects: int
    how_it_ended: str
    announce_after: float | None
    recorded: bool | None


@final
@attrs.frozen(kw_only=True)
class DemoReport:
    """What happened, for the summary and for tests.

    Attributes:
        steps: the story's steps, in order, as far as they were played.
        sessions: every session held during the demo.
        interrupted: whether the story was cut short (Ctrl-C).
        codename: the name a new worker asking for "Juniper" got while process 2 lived.
        passed_name: the name the next worker asking for "Juniper" got after process 2 exited.
    """

    steps: tuple[StepResult, ...]
    sessions: tuple[SessionSummary, ...]
    interrupted: bool
    codename: str | None
    passed_name: str | None

    @property
    def ok(self) -> bool:
        """Whether no step failed."""
        return all(step.status != "failed" for step in self.steps)


# --- the actors ------------------------------------------------------------------------


@final
@attrs.define(eq=False)
class _Tracked:
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


@final
@attrs.define(eq=False)
class _Process:
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
class _RoomRunner:
    """Serves one Room in a cancel scope of ``nursery``, restartable on the same port."""

    def __init__(self, room: Room, nursery: trio.Nursery) -> None:
        self.room = room
        self._nursery = nursery
        self._port = 0
        self._scope = trio.CancelScope()
        self._stopped = trio.Event()
        self.url = ""

    async def start(self) -> str:
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
        self._scope.cancel(reason="the demo restarts the room")
        await self._stopped.wait()


# --- the demo ----------------------------------------------------------------------------


@final
class _Demo:
    def __init__(
        self,
        options: DemoOptions,
        console: Console,
        *,
        on_step: Callable[[StepResult], object] | None,
    ) -> None:
        self.options = options
        self.console = console
        self.live_view = options.live and console.is_terminal
        self.on_step = on_step
        self.owner_token = options.owner_token or secrets.token_urlsafe(24)
        self.login = DEMO_LOGIN
        self.room_id = options.room_id or (
            "demo" if options.api_url is None else f"demo-{secrets.token_hex(4)}"
        )
        # One machine plays every process: one host id, as the state file would give.
        self.host_id = "phost_" + uuid.uuid4().hex
        self.runner: _RoomRunner | None = None
        self.api_url = options.api_url or ""
        self.processes: dict[str, _Process] = {}
        self.tracked: list[_Tracked] = []
        # The demo's record of each session's current token: the local state
        # file of the real client. still_ours compares a holder's token with it.
        self.tokens: dict[str, str] = {}
        self.steps: list[StepResult] = []
        self.narration = "Starting the room…"
        self.recent: list[str] = []
        self.codename: str | None = None
        self.passed_name: str | None = None
        self.interrupted = False
        self.t0 = trio.current_time()
        self._changed = trio.lowlevel.ParkingLot()
        self._live: Live | None = None
        self._process_nursery: trio.Nursery | None = None
        # The story runs in this scope; an interrupt cancels it (then exits are announced).
        self._story_scope = trio.CancelScope()

    # --- output ----------------------------------------------------------------

    def clock(self) -> str:
        return f"{trio.current_time() - self.t0:6.2f}s"

    def say(self, text: str) -> None:
        self.narration = text
        if self._live is None:
            self.console.print(
                f"[dim]{self.clock()}[/] [bold]{text}[/]", highlight=False, soft_wrap=True
            )
        self.refresh()

    def log(self, line: str) -> None:
        stamped = f"{self.clock()} {line}"
        if self._live is None:
            self.console.print(Text(stamped, style="dim"), soft_wrap=True)
        else:
            self.recent = [*self.recent[-(RECENT_EVENTS - 1) :], stamped]

    def refresh(self) -> None:
        if self._live is not None:
            self._live.update(self.render(), refresh=True)

    def render(self) -> RenderableType:
        table = Table(title=f"Process connections in room {self.room_id!r}", expand=False)
        for column in ("worker", "process", "state", "connection", "attempts", "next attempt"):
            table.add_column(column)
        now = trio.current_time()
        for entry in self.tracked:
            stats = entry.holder.statistics()
            state = stats.status.value
            if not entry.running:
                state = f"{state} ({entry.how_it_ended})"
            next_at = (
                "" if stats.next_attempt_at is None else f"in {stats.next_attempt_at - now:.1f} s"
            )
            table.add_row(
                entry.name,
                entry.process,
                Text(state, style=_STATUS_STYLE[stats.status]),
                (stats.connection_id or "")[:8],
                _attempts_text(stats.attempts),
                next_at,
            )
        events = Text("\n".join(self.recent) or "(no events yet)", style="dim")
        story = Text()
        for step in self.steps:
            style = _STEP_STYLE[step.status]
            story.append(f"step {step.number} {step.title}: {step.status}\n", style=style)
        story.append(Text.from_markup(self.narration, style="bold"))
        return Group(
            Panel(story, title="story", border_style="cyan"),
            table,
            Panel(events, title="latest events", border_style="dim"),
        )

    # --- waiting on holders ----------------------------------------------------------

    def _note_event(self, label: str, event: HolderEvent) -> None:
        entry = self._entry(label, event.session_id)
        name = entry.name if entry is not None else event.session_id[:8]
        if event.kind is EventKind.STOPPED and entry is not None:
            entry.how_it_ended = event.detail or "stopped"
        elif event.kind is EventKind.ENDED and entry is not None:
            entry.how_it_ended = "ended by the room"
        elif event.kind is EventKind.EXIT:
            return  # told with its timing by _record_exits
        self.log(f"{label:>9} {name:<16} {_describe(event)}")
        self._changed.unpark_all()
        self.refresh()

    def _entry(self, label: str, session_id: str) -> _Tracked | None:
        for entry in reversed(self.tracked):
            if entry.process == label and entry.session.session_id == session_id:
                return entry
        return None

    async def until(self, condition: Callable[[], bool]) -> bool:
        """Wait (woken by events, bounded by STEP_TIMEOUT) until ``condition()``."""
        with trio.move_on_after(STEP_TIMEOUT):
            while not condition():
                await self._changed.park()
            return True
        return False

    async def pause(self) -> None:
        await trio.sleep(BEAT / self.options.speed)

    # --- processes ---------------------------------------------------------------------

    async def start_process(self, label: str) -> _Process:
        assert self._process_nursery is not None
        process: _Process = await self._process_nursery.start(self._run_process, label)
        self.processes[label] = process
        return process

    async def _run_process(self, label: str, *, task_status: trio.TaskStatus[_Process]) -> None:
        async with (
            RoomClient(self.api_url, owner_token=self.owner_token) as client,
            open_connection_manager(client, state=_Tokens(self.tokens)) as manager,
        ):
            process = _Process(label=label, client=client, manager=manager)
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
                process.done.set()
        self._record_exits(process)

    async def _watch(self, label: str, events: trio.MemoryReceiveChannel[HolderEvent]) -> None:
        async for event in events:
            self._note_event(label, event)

    def _record_exits(self, process: _Process) -> None:
        for announcement in process.announcements:
            entry = self._entry(process.label, announcement.session_id)
            if entry is None:
                continue
            entry.announcement = announcement
            entry.shutdown_started = process.shutdown_started
            entry.how_it_ended = "exit announced"
            taken = announcement.finished_at - (process.shutdown_started or 0.0)
            verdict = (
                "recorded" if announcement.recorded else (announcement.error or "not recorded")
            )
            self.log(
                f"{process.label:>9} {entry.name:<16} exit announced in "
                f"{taken * 1000:.0f} ms: {verdict}"
            )
        self._changed.unpark_all()
        self.refresh()

    async def stop_process(self, process: _Process) -> None:
        process.request_exit(trio.current_time())
        await process.done.wait()

    # --- registering -------------------------------------------------------------------

    async def register(
        self,
        process: _Process,
        name: str,
        *,
        worker_id: str | None = None,
        replacing: AgentSession | None = None,
    ) -> tuple[AgentSession, str]:
        """Register a durable worker as a client does; returns (session, worker id)."""
        worker_id = worker_id or new_worker_id()
        body = durable_registration_body(
            actor_key=f"{self.login}/{worker_agent_name(worker_id)}",
            worker_id=worker_id,
            display_name=name,
            connection_token=new_connection_token(),
            process_host_id=self.host_id,
            predecessor=(replacing.session_id, replacing.session_token) if replacing else None,
        )
        answer = await process.client.call_when_free(
            "POST", f"/rooms/{encode_room_path(self.room_id)}/agent-sessions", json=body
        )
        session = AgentSession.from_json(answer)
        self.tokens[session.session_id] = session.session_token
        return session, worker_id

    def hold(self, process: _Process, session: AgentSession, worker_id: str) -> _Tracked:
        holder = process.manager.hold(session)
        entry = _Tracked(
            name=session.display_name,
            process=process.label,
            worker_id=worker_id,
            session=session,
            holder=holder,
        )
        self.tracked.append(entry)
        self.refresh()
        return entry

    async def connected(self, *entries: _Tracked, other_than: Mapping[str, str] = {}) -> bool:
        """Wait until each entry's holder has a named connection (not the one given)."""

        def ready() -> bool:
            for entry in entries:
                cid = entry.holder.connection_id
                if cid is None or other_than.get(entry.session.session_id) == cid:
                    return False
            return True

        return await self.until(ready)

    # --- the story ---------------------------------------------------------------------

    def step(self, number: int, title: str, status: str, detail: str) -> None:
        result = StepResult(number=number, title=title, status=status, detail=detail)
        self.steps.append(result)
        style = _STEP_STYLE[status]
        self.say(f"Step {number} ({title}): [{style}]{status}[/]. {detail}")
        if self.on_step is not None:
            self.on_step(result)

    def target(self, index: int) -> _Tracked:
        """Process 1's worker ``index`` (the last one with fewer workers), held now."""
        first = [e for e in self.tracked if e.process == PROCESS_1][: self.options.workers]
        worker = first[min(index, len(first) - 1)]
        for entry in reversed(self.tracked):
            if entry.session.session_id == worker.session.session_id and entry.running:
                return entry
        return worker

    async def story(self) -> None:
        p1 = await self.start_process(PROCESS_1)
        await self.start_process(RIVAL)
        self.say(f"Process 1 registers {self.options.workers} workers and holds their connections.")
        for name in WORKER_NAMES[: self.options.workers]:
            session, worker_id = await self.register(p1, name)
            self.hold(p1, session, worker_id)
        workers = list(self.tracked)
        if not await self.connected(*workers):
            self.say("[red]Not every worker got a connection; the story cannot go on.[/]")
            self.steps.append(StepResult(number=0, title="start", status="failed", detail=""))
            return
        self.say("Every worker holds an open process connection: the room sees process 1.")
        await self.pause()
        await self.step_drop()
        await self.pause()
        await self.step_restart()
        await self.pause()
        await self.step_refusal()
        await self.pause()
        await self.step_ended()
        await self.pause()
        await self.step_name_passes()
        await self.pause()
        self.say("The story is over: process 1 and the rival exit and announce it.")

    async def step_drop(self) -> None:
        title = "a dropped stream"
        if self.runner is None:
            self.step(1, title, "skipped", "Cutting a stream needs the embedded room.")
            return
        entry = self.target(0)
        before = entry.holder.connection_id or ""
        self.say(f"Step 1: the network drops {entry.name}'s stream. The holder waits 1 s, reopens.")
        for stream in self.runner.room.process_streams(entry.session.session_id):
            stream.close("dropped")
        cut_at = trio.current_time()
        if await self.connected(entry, other_than={entry.session.session_id: before}):
            took = trio.current_time() - cut_at
            self.step(1, title, "ok", f"{entry.name} reopened {took:.1f} s after the drop.")
        else:
            self.step(1, title, "failed", f"{entry.name} did not reopen.")

    async def step_restart(self) -> None:
        title = "a room restart"
        if self.runner is None:
            self.step(2, title, "skipped", "Restarting needs the embedded room.")
            return
        held = [e for e in self.tracked if e.running]
        before = {e.session.session_id: e.holder.connection_id or "" for e in held}
        self.say("Step 2: the room restarts. Its streams close silently; holders see a drop.")
        await self.runner.stop()
        self.say("Step 2: the room is down. It comes back on the same port, same store.")
        await self.runner.start()
        restarted_at = trio.current_time()
        if await self.connected(*held, other_than=before):
            took = trio.current_time() - restarted_at
            self.step(
                2, title, "ok", f"All {len(held)} holders came back {took:.1f} s after the restart."
            )
        else:
            self.step(2, title, "failed", "Not every holder came back.")

    async def step_refusal(self) -> None:
        title = "a refusal"
        entry = self.target(1)
        rival = self.processes[RIVAL]
        self.say(
            f"Step 3: another process re-registers {entry.name} (same instance, with the "
            "predecessor proof). The room rotates the token."
        )
        session, worker_id = await self.register(
            rival, entry.name, worker_id=entry.worker_id, replacing=entry.session
        )
        taken = self.hold(rival, session, worker_id)

        def refused_and_stopped() -> bool:
            return entry.holder.status is HolderStatus.STOPPED

        stopped = await self.until(refused_and_stopped)
        refusals = entry.holder.statistics().attempts[Outcome.REFUSED]
        if stopped and refusals and await self.connected(taken):
            self.step(
                3,
                title,
                "ok",
                f"Process 1's next attempt for {entry.name} was refused; the token is no "
                "longer ours, so its holder stopped. The rival holds it now.",
            )
        else:
            self.step(3, title, "failed", f"Process 1's holder of {entry.name} did not stop.")

    async def step_ended(self) -> None:
        title = "a session ended by the room"
        entry = self.target(2)
        owner = self.processes[entry.process]
        if self.runner is not None:
            self.say(f"Step 4: the room ends {entry.name}'s session.")
            self.runner.room.end_session(entry.session.session_id, reason="room_admin")
        else:
            self.say(
                f"Step 4: {entry.name}'s session is ended through the room's disconnect "
                "route (another room: no room internals)."
            )
            await owner.client.call(
                "POST",
                owner.client.session_url(entry.session, "/disconnect"),
                json={
                    "agent_session_id": entry.session.session_id,
                    "agent_session_token": entry.session.session_token,
                },
                session=entry.session,
            )

        def ended() -> bool:
            return entry.holder.status is HolderStatus.ENDED

        if await self.until(ended):
            self.step(
                4, title, "ok", f"{entry.name}'s holder saw `event: ended` and stopped for good."
            )
        else:
            self.step(4, title, "failed", f"{entry.name}'s holder did not see the end.")

    async def step_name_passes(self) -> None:
        title = "a name passing"
        p1 = self.processes[PROCESS_1]
        self.say(f"Step 5: process 2 starts and holds a worker named {PASSED_NAME!r}.")
        p2 = await self.start_process(PROCESS_2)
        session, worker_id = await self.register(p2, PASSED_NAME)
        first = self.hold(p2, session, worker_id)
        if not await self.connected(first):
            self.step(5, title, "failed", f"Process 2 could not hold {PASSED_NAME!r}.")
            return
        await self.pause()
        session, worker_id = await self.register(p1, PASSED_NAME)
        self.codename = session.display_name
        self.hold(p1, session, worker_id)
        self.say(
            f"Step 5: a new worker asks for {PASSED_NAME!r} while process 2 lives: "
            f"it gets the codename {self.codename!r}."
        )
        await self.pause()
        self.say("Step 5: process 2 exits; its manager announces the exit within the deadline.")
        await self.stop_process(p2)
        session, worker_id = await self.register(p1, PASSED_NAME)
        self.passed_name = session.display_name
        latest = self.hold(p1, session, worker_id)
        await self.connected(latest)
        if self.passed_name == PASSED_NAME and self.codename != PASSED_NAME:
            self.step(
                5,
                title,
                "ok",
                f"After process 2 announced its exit, the next worker asking for "
                f"{PASSED_NAME!r} got {self.passed_name!r}.",
            )
        else:
            self.step(
                5,
                title,
                "failed",
                f"Expected a codename then {PASSED_NAME!r}; got {self.codename!r} then "
                f"{self.passed_name!r}.",
            )

    # --- running it all ------------------------------------------------------------------

    async def run(self, interrupt: trio.Event | None) -> DemoReport:
        async with trio.open_nursery() as room_nursery:
            if self.options.api_url is None:
                store: RoomStore = (
                    MemoryStore() if self.options.db is None else SQLiteStore(self.options.db)
                )
                try:
                    self.runner = _RoomRunner(
                        Room(store=store, owner_tokens={self.owner_token: self.login}),
                        room_nursery,
                    )
                    self.api_url = await self.runner.start()
                    await self._play(interrupt)
                    room_nursery.cancel_scope.cancel(reason="the demo is over")
                finally:
                    if isinstance(store, SQLiteStore):
                        store.close()
            else:
                await self._learn_login()
                await self._play(interrupt)
        return self.report()

    async def _learn_login(self) -> None:
        async with RoomClient(self.api_url, owner_token=self.owner_token) as client:
            me = await client.call("GET", "/agents/me")
        self.login = str(me["account"]["login"])

    async def _play(self, interrupt: trio.Event | None) -> None:
        where = "embedded" if self.runner is not None else "external"
        self.say(f"The {where} room listens on {self.api_url}.")
        with self._live_view():
            async with trio.open_nursery() as processes:
                self._process_nursery = processes
                ticker = trio.CancelScope()
                processes.start_soon(self._tick, ticker)
                if interrupt is not None:
                    processes.start_soon(self._on_interrupt, interrupt)
                with self._story_scope:
                    await self.story()
                if self._story_scope.cancelled_caught:
                    self.say("Interrupted: every process exits and announces it.")
                shutdown_at = trio.current_time()
                for process in self.processes.values():
                    process.request_exit(shutdown_at)
                for process in self.processes.values():
                    await process.done.wait()
                ticker.cancel(reason="the story is over")
                processes.cancel_scope.cancel(reason="the story is over")
        self.print_summary()

    async def _on_interrupt(self, interrupt: trio.Event) -> None:
        await interrupt.wait()
        self.interrupted = True
        self._story_scope.cancel(reason="interrupted")

    async def _tick(self, scope: trio.CancelScope) -> None:
        with scope:
            while self._live is not None:
                self.refresh()
                await trio.sleep(REFRESH_INTERVAL)

    @contextmanager
    def _live_view(self) -> Iterator[None]:
        if not self.live_view:
            yield
            return
        live = Live(self.render(), console=self.console, auto_refresh=False)
        live.start()
        self._live = live
        try:
            yield
        finally:
            self._live = None
            live.update(self.render(), refresh=True)
            live.stop()

    # --- the end ---------------------------------------------------------------------------

    def report(self) -> DemoReport:
        sessions = []
        for entry in self.tracked:
            stats = entry.holder.statistics()
            announcement = entry.announcement
            after = None
            if announcement is not None and entry.shutdown_started is not None:
                after = announcement.finished_at - entry.shutdown_started
            sessions.append(
                SessionSummary(
                    name=entry.name,
                    process=entry.process,
                    session_id=entry.session.session_id,
                    attempts={o.value: n for o, n in stats.attempts.items() if n},
                    reconnects=max(stats.opens - 1, 0),
                    how_it_ended=entry.how_it_ended,
                    announce_after=after,
                    recorded=None if announcement is None else announcement.recorded,
                )
            )
        return DemoReport(
            steps=tuple(self.steps),
            sessions=tuple(sessions),
            interrupted=self.interrupted,
            codename=self.codename,
            passed_name=self.passed_name,
        )

    def print_summary(self) -> None:
        report = self.report()
        table = Table(title="Summary: every session held", box=box.SIMPLE_HEAD)
        table.add_column("worker", no_wrap=True)
        table.add_column("process", no_wrap=True)
        table.add_column("session", no_wrap=True)
        table.add_column("attempts")
        table.add_column("reconnects", justify="right")
        table.add_column("how it ended")
        table.add_column("exit announced in", justify="right")
        table.add_column("recorded", no_wrap=True)
        for s in report.sessions:
            table.add_row(
                s.name,
                s.process,
                s.session_id[:8],
                ", ".join(f"{k} {v}" for k, v in s.attempts.items()) or "none",
                str(s.reconnects),
                s.how_it_ended,
                "—" if s.announce_after is None else f"{s.announce_after * 1000:.0f} ms",
                {True: "yes", False: "no", None: "—"}[s.recorded],
            )
        self.console.print(table)
        for step in report.steps:
            self.console.print(f"  step {step.number} {step.title}: {step.status}", highlight=False)
        if report.interrupted:
            self.console.print("Interrupted; every held session announced its exit.")


_STEP_STYLE: Final = {"ok": "green", "failed": "red", "skipped": "yellow"}
_STATUS_STYLE: Final = {
    HolderStatus.CONNECTING: "yellow",
    HolderStatus.OPEN: "green",
    HolderStatus.WAITING: "magenta",
    HolderStatus.ENDED: "red",
    HolderStatus.STOPPED: "dim",
}


def _attempts_text(attempts: Mapping[Outcome, int]) -> str:
    return ", ".join(f"{o.value} {n}" for o, n in attempts.items() if n) or "-"


def _describe(event: HolderEvent) -> str:
    short = (event.connection_id or "")[:8]
    if event.kind is EventKind.CONNECTION:
        return f"connection {short}"
    if event.kind is EventKind.CLOSED:
        outcome = event.outcome.value if event.outcome else "?"
        return f"closed: {outcome} ({event.detail})"
    if event.kind is EventKind.BACKOFF:
        return f"next attempt in {event.delay or 0:.1f} s"
    if event.kind is EventKind.STOPPED:
        return f"stopped: {event.detail}"
    if event.kind is EventKind.EXIT:
        return f"exit: {event.detail}"
    return str(event.kind.value)


# --- entry points --------------------------------------------------------------------------


async def run_demo(
    options: DemoOptions,
    *,
    console: Console | None = None,
    interrupt: trio.Event | None = None,
    on_step: Callable[[StepResult], object] | None = None,
) -> DemoReport:
    """Play the demo's story to its end (or until ``interrupt`` is set).

    Args:
        options: what to play, and where.
        console: where to write (default: a new rich Console on stdout).
        interrupt: setting it stops the story; every exit is then announced.
        on_step: called with each finished step, as it finishes.

    Returns:
        What happened, step by step and session by session.

    Raises:
        LetAgentsError: the room (``--api-url``) refused or could not be reached.

    Cancellation:
        Cancelled from outside, every process still announces its exits
        (shielded, within each manager's exit deadline) before the
        cancellation goes on; the summary is then not printed.
    """
    demo = _Demo(options, console or Console(), on_step=on_step)
    return await demo.run(interrupt)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``letagents-trio demo``."""
    parser = argparse.ArgumentParser(
        prog="letagents-trio demo",
        description=(
            "Play the process-connection story (a drop, a room restart, a refusal, "
            "an ended session, a name passing) against an embedded reference room."
        ),
    )
    parser.add_argument(
        "--workers",
        type=_worker_count,
        default=DEFAULT_WORKERS,
        help=f"workers to register and hold (1 to {MAX_WORKERS}; default {DEFAULT_WORKERS})",
    )
    parser.add_argument(
        "--speed",
        type=_positive_speed,
        default=1.0,
        help="divide the pauses between steps by this (default 1)",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--api-url",
        default=None,
        help="play against another room (only the steps that need no room internals)",
    )
    where.add_argument(
        "--db", type=Path, default=None, help="the embedded room's SQLite file (default: memory)"
    )
    parser.add_argument(
        "--owner-token",
        default=None,
        help=f"owner bearer token for --api-url (default: ${OWNER_TOKEN_ENV})",
    )
    parser.add_argument("--room", default=None, help="room id (default: a fresh one)")
    parser.add_argument(
        "--no-live",
        action="store_true",
        help="plain log lines instead of the live view (automatic when stdout is no terminal)",
    )
    return parser


def _options(argv: Sequence[str] | None) -> DemoOptions:
    parser = build_parser()
    args = parser.parse_args(argv)
    token = args.owner_token or os.environ.get(OWNER_TOKEN_ENV) or None
    if args.api_url is not None and token is None:
        parser.error(f"--api-url needs --owner-token or ${OWNER_TOKEN_ENV}")
    return DemoOptions(
        workers=args.workers,
        speed=args.speed,
        api_url=args.api_url,
        owner_token=token if args.api_url is not None else None,
        room_id=args.room,
        live=not args.no_live,
        db=args.db,
    )


async def _main(options: DemoOptions, console: Console) -> tuple[DemoReport, int | None]:
    interrupt = trio.Event()
    received: list[int] = []

    async def watch(signals: AsyncIterator[int]) -> None:
        async for signum in signals:
            received.append(signum)
            interrupt.set()

    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch, signals)
            report = await run_demo(options, console=console, interrupt=interrupt)
            nursery.cancel_scope.cancel(reason="the demo is over")
    return report, (received[0] if received else None)


def _leaves(group: BaseExceptionGroup[BaseException]) -> Iterator[BaseException]:
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            yield from _leaves(exc)
        else:
            yield exc


def main(argv: list[str] | None = None) -> int:
    """Run ``letagents-trio demo``; returns the exit status.

    0 when the story played to its end, 1 when a step failed or the room could
    not be used, 128 + the signal number (130 for Ctrl-C) when a signal cut it
    short, after every exit was announced.
    """
    options = _options(argv)
    console = Console()
    if not console.is_terminal:  # a log or a pipe: no terminal width to respect
        console = Console(width=max(console.width, SUMMARY_WIDTH))
    failures: list[BaseException] = []
    try:
        report, signum = trio.run(_main, options, console)
    except* (LetAgentsError, OSError) as group:  # the room could not be used: say so, briefly
        failures.extend(_leaves(group))
    if failures:
        for exc in failures:
            console.print(f"[red]letagents-trio demo: {type(exc).__name__}: {exc}[/]")
        return 1
    if signum is not None:
        return SIGNAL_EXIT_BASE + signum
    return 0 if report.ok else 1
