"""The reference room on loopback with faults, and the real MCP server as a subprocess.

The room is a :class:`~letagents_trio.testing.FakeRoom` (the reference room
with its faults: process modes, drops, black-holed exits, rules, a request and
exit log) whose ASGI app hypercorn serves on 127.0.0.1, port 0, exactly as
``room_server`` serves :func:`~letagents_trio.room_server.create_app`.
:class:`LoopbackRoom` names the faults of PROTOCOL §8's fake rooms on *other*
routes. Those a FakeRoom rule can say are rules on the FakeRoom: registrations
answered 503 busy, ``GET /agents/me`` failing with a status or an empty
account, disconnect answers held. Its thin ASGI front adds only what a rule
cannot say (an account answer cut short inside its body, message sends refused
for one session) and re-checks :meth:`LoopbackRoom.wait_until` whenever an
answer goes out. Everything else is the room's own rule.

Two drivers for the server: the SDK's stdio client (what hosts use), and
:class:`RawServer`, JSON-RPC lines over the pipes of a process the test can
signal and time.

Real clock throughout (subprocesses and sockets); callers bound every test
with ``trio.fail_after``.
"""

from __future__ import annotations

import enum
import json
import os
import re
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, Final

import attrs
import trio
from hypercorn.config import Config
from hypercorn.trio import serve
from mcp import StdioServerParameters

from letagents_trio import _protocol
from letagents_trio._util import Notifier
from letagents_trio.room_server import MemoryStore, Room, RoomConfig
from letagents_trio.testing import FakeRoom

from ..mcp_server.helpers import ROOM

if TYPE_CHECKING:
    from pathlib import Path

    from letagents_trio.testing import Hold, Rule

OWNER_TOKEN: Final = "owner-stdio-token-0123456789"
# The same owner signed in as a person: the room's admin.
PERSON_TOKEN: Final = "person-stdio-token-0123456789"
OWNER_LOGIN: Final = "owner"
# PROTOCOL §4.5: one shared deadline for every exit POST.
EXIT_DEADLINE: Final = 1.5
# The bound: the process is gone within the deadline plus this.
EXIT_SLACK: Final = 0.5
# Budget for anything else a test waits on (process start, registration).
BUDGET: Final = 30
# R3's busy answer (PROTOCOL §2.1).
BUSY_TEXT: Final = _protocol.BUSY_TEXT
# The routes the faults are on, as FakeRoom rules match paths.
REGISTRATION_PATH: Final = f"/rooms/{ROOM}/agent-sessions"
ACCOUNT_PATH: Final = "/agents/me"
DISCONNECT_PATH: Final = re.compile(r".*/disconnect")

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


class AccountFault(enum.Enum):
    """How ``GET /agents/me`` fails (PROTOCOL §8.3.7)."""

    BUSY = "busy"
    """503."""
    DROPPED = "dropped"
    """The connection ends inside the response: headers promise a body never sent."""
    EMPTY = "empty"
    """200 ``{}``: no account."""


@attrs.define(eq=False)
class LoopbackRoom:
    """The FakeRoom served on loopback, with the route faults of PROTOCOL §8.

    Attributes:
        fake: the FakeRoom (process modes, drops, black-holed exits, rules, logs).
        url: the base URL, once served.
        message_refusals: session id -> (status, body) its sends are answered with.
    """

    fake: FakeRoom
    url: str = ""
    message_refusals: dict[str, tuple[int, dict[str, str]]] = attrs.field(factory=dict)
    _account_fault: AccountFault | None = attrs.field(default=None, init=False)
    _account_rule: Rule | None = attrs.field(default=None, init=False)
    _busy_rule: Rule | None = attrs.field(default=None, init=False)
    _disconnect_hold: Hold | None = attrs.field(default=None, init=False)
    _changed: Notifier = attrs.field(factory=Notifier, init=False)

    @property
    def room(self) -> Room:
        """The reference room."""
        return self.fake.room

    @property
    def registrations(self) -> list[dict[str, Any]]:
        """The body of every ``POST /rooms/{room}/agent-sessions``, from the FakeRoom's log."""
        return [
            r.body if isinstance(r.body, dict) else {}
            for r in self.fake.requests_to("POST", REGISTRATION_PATH)
        ]

    @property
    def busy_registrations(self) -> int:
        """How many next registrations are answered 503 busy (a FakeRoom rule)."""
        rule = self._busy_rule
        return rule.times_left or 0 if rule is not None and rule.active else 0

    @busy_registrations.setter
    def busy_registrations(self, count: int) -> None:
        if self._busy_rule is not None:
            self._busy_rule.remove()
        self._busy_rule = None
        if count > 0:
            self._busy_rule = self.fake.on("POST", REGISTRATION_PATH).respond(
                503, {"error": BUSY_TEXT}, headers={"Retry-After": "1"}, times=count
            )

    @property
    def account_fault(self) -> AccountFault | None:
        """How ``GET /agents/me`` fails, or None (a FakeRoom rule, but for ``DROPPED``)."""
        return self._account_fault

    @account_fault.setter
    def account_fault(self, fault: AccountFault | None) -> None:
        if self._account_rule is not None:
            self._account_rule.remove()
        self._account_rule = None
        self._account_fault = fault
        on_account = self.fake.on("GET", ACCOUNT_PATH)
        if fault is AccountFault.BUSY:
            failing = {"error": "The room is failing for a moment."}
            self._account_rule = on_account.respond(503, failing, times=None)
        elif fault is AccountFault.EMPTY:
            self._account_rule = on_account.respond(200, {}, times=None)

    @property
    def hold_disconnects(self) -> bool:
        """While true, a disconnect reaches the room but its answer is held (a FakeRoom rule)."""
        hold = self._disconnect_hold
        return hold is not None and hold.rule.active

    @hold_disconnects.setter
    def hold_disconnects(self, hold: bool) -> None:
        if hold and not self.hold_disconnects:
            self._disconnect_hold = self.fake.on("POST", DISCONNECT_PATH).hold(times=None)
        elif not hold and self._disconnect_hold is not None:
            self._disconnect_hold.rule.remove()

    @property
    def held_disconnects(self) -> int:
        """How many disconnect answers are held now."""
        hold = self._disconnect_hold
        return 0 if hold is None or hold.released else hold.held

    def release_disconnects(self) -> None:
        """Send every held disconnect answer, and hold no more."""
        self.hold_disconnects = False
        if self._disconnect_hold is not None:
            self._disconnect_hold.release()

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        """Wait until ``condition()`` holds.

        Re-checked whenever the front is asked or sends, *and* whenever the
        FakeRoom behind it records a request, an exit or a held answer: the
        front notes a request before the FakeRoom has logged it, so a
        condition on the FakeRoom's log (say, "a poll was asked for") would
        otherwise wait for the next unrelated event (a heartbeat, 15 s later).

        Cancellation:
            A checkpoint; bound it with ``trio.fail_after``.
        """
        if condition():
            await trio.lowlevel.checkpoint()
            return
        async with trio.open_nursery() as nursery:

            async def until(wait: Callable[[Callable[[], bool]], Awaitable[None]]) -> None:
                await wait(condition)
                nursery.cancel_scope.cancel(reason="the condition holds")

            nursery.start_soon(until, self._changed.wait_until)
            nursery.start_soon(until, self.fake.wait_until)

    def process_gets(self, session_id: str) -> list[float]:
        """When each ``GET …/process`` for ``session_id`` arrived (trio time)."""
        return [r.time for r in self.fake.process_requests(session_id)]

    def open_streams(self, session_id: str) -> int:
        """How many process streams the room holds open for ``session_id``."""
        return len(self.room.process_streams(session_id))

    async def app(self, scope: Message, receive: Receive, send: Send) -> None:
        """The ASGI app hypercorn serves: the front's faults, then the FakeRoom."""
        if scope["type"] != "http":
            await self.fake.app(scope, receive, send)
            return

        async def noting(message: Message) -> None:
            await send(message)
            self._changed.notify()

        self._changed.notify()
        try:
            await self._route(scope, receive, noting)
        finally:
            self._changed.notify()

    async def _route(self, scope: Message, receive: Receive, send: Send) -> None:
        method: str = scope["method"]
        path: str = scope["path"]
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        if method == "GET" and path == ACCOUNT_PATH and self.account_fault is AccountFault.DROPPED:
            # A body cut short is no FakeRoom rule: promise 100 bytes, send one.
            headers_out = [(b"content-type", b"application/json"), (b"content-length", b"100")]
            await send({"type": "http.response.start", "status": 200, "headers": headers_out})
            await send({"type": "http.response.body", "body": b"{", "more_body": False})
            return
        session_id = headers.get(_protocol.SESSION_ID_HEADER.lower(), "")
        if method == "POST" and path.endswith("/messages") and session_id in self.message_refusals:
            # Rules match method and path, not the session: this fault is the front's.
            await _answer(send, *self.message_refusals[session_id])
            return
        await self.fake.app(scope, receive, send)


async def _answer(send: Send, status: int, body: dict[str, str]) -> None:
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": json.dumps(body).encode()})


@asynccontextmanager
async def open_loopback_room(*, heartbeat_interval: float = 15.0) -> AsyncIterator[LoopbackRoom]:
    """Serve a fresh reference room, behind the faults, on 127.0.0.1 (port 0).

    Cancellation:
        Leaving the block closes every process stream and stops serving.
    """
    room = Room(
        store=MemoryStore(),
        owner_tokens={OWNER_TOKEN: OWNER_LOGIN},
        person_tokens={PERSON_TOKEN: OWNER_LOGIN},
        config=RoomConfig(heartbeat_interval=heartbeat_interval),
    )
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.graceful_timeout = 0.2
    config.accesslog = None
    async with trio.open_nursery() as nursery:
        fake = FakeRoom(
            room,
            nursery=nursery,
            owner_token=OWNER_TOKEN,
            owner_login=OWNER_LOGIN,
            person_token=PERSON_TOKEN,
        )
        front = LoopbackRoom(fake)
        binds: list[str] = await nursery.start(
            partial(serve, front.app, config, mode="asgi")  # type: ignore[arg-type]
        )
        front.url = fake.api_url = binds[0]
        try:
            yield front
        finally:
            front.release_disconnects()
            room.close_all_process_streams()
            nursery.cancel_scope.cancel(reason="test over")


def server_env(room: LoopbackRoom, tmp_path: Path, *, token: bool = True) -> dict[str, str]:
    """The MCP server's environment for ``room``; state files under ``tmp_path``.

    With ``token=False`` the owner token comes from the state file (see
    :func:`seed_owner_auth`), as after a sign-in.
    """
    env = {
        "LETAGENTS_API_URL": room.url + "/",
        "LETAGENTS_STATE_PATH": str(tmp_path / "mcp-state.json"),
        "LETAGENTS_CHAT_STORAGE_SETTINGS_PATH": str(tmp_path / "chat-storage.json"),
        "LETAGENTS_LOCAL_CHAT_DB": str(tmp_path / "local-chat.sqlite"),
        "LETAGENTS_EXECUTION_PROFILE": "autonomous_mcp_worker",
        "LETAGENTS_LOG_LEVEL": "DEBUG",
    }
    if token:
        env["LETAGENTS_TOKEN"] = OWNER_TOKEN
    return env


def seed_owner_auth(tmp_path: Path) -> None:
    """Write the state file PROTOCOL §8 starts from: the owner's sign-in only."""
    path = tmp_path / "mcp-state.json"
    state = {
        "auth": {
            "token": OWNER_TOKEN,
            "source": "device_flow",
            "stored_at": "2026-01-01T00:00:00.000Z",
        }
    }
    path.write_text(json.dumps(state, indent=2) + "\n")
    path.chmod(0o600)


def stdio_params(env: dict[str, str]) -> StdioServerParameters:
    """How the SDK's stdio client starts the real server."""
    return StdioServerParameters(
        command=sys.executable, args=["-m", "letagents_trio.mcp_server"], env=env
    )


# --- the raw driver: a process we can signal and time ---------------------------------


@attrs.define(eq=False)
class RawServer:
    """The MCP server process, spoken to in JSON-RPC lines over its pipes."""

    process: trio.Process
    _buffer: bytearray = attrs.field(factory=bytearray)
    _next_id: int = 0

    async def send(self, message: dict[str, Any]) -> None:
        """Write one JSON-RPC message.

        Cancellation:
            A checkpoint.
        """
        assert self.process.stdin is not None
        await self.process.stdin.send_all(json.dumps(message).encode() + b"\n")

    async def _line(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        while b"\n" not in self._buffer:
            chunk = await self.process.stdout.receive_some(65536)
            assert chunk, "the server closed stdout"
            self._buffer += chunk
        line, _, rest = bytes(self._buffer).partition(b"\n")
        self._buffer = bytearray(rest)
        value: dict[str, Any] = json.loads(line)
        return value

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send a request and return its result (notifications in between are skipped).

        Cancellation:
            A checkpoint; the answer, if it comes later, is skipped as unrelated.
        """
        self._next_id += 1
        await self.send({"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params})
        while True:
            message = await self._line()
            if message.get("id") == self._next_id:
                assert "error" not in message, message
                result: dict[str, Any] = message["result"]
                return result

    async def initialize(self) -> None:
        """The MCP handshake.

        Cancellation:
            A checkpoint.
        """
        await self.request(
            "initialize",
            {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "raw-test-host", "version": "0"},
            },
        )
        await self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    async def call_tool(self, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
        """Call a tool that must succeed; return its JSON result.

        Cancellation:
            A checkpoint.
        """
        result = await self.request("tools/call", {"name": name, "arguments": arguments})
        assert not result.get("isError"), result
        value: dict[str, Any] = json.loads(result["content"][0]["text"])
        return value


@asynccontextmanager
async def open_raw_server(env: dict[str, str], stderr_path: Path) -> AsyncIterator[RawServer]:
    """Start the server as a subprocess; kill it on leaving if it still runs.

    Cancellation:
        Leaving the block waits (shielded, at most 5 s) for the process to be gone.
    """
    with stderr_path.open("wb") as stderr:
        process = await trio.lowlevel.open_process(
            [sys.executable, "-m", "letagents_trio.mcp_server"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=stderr,
            env={**os.environ, **env},
        )
        try:
            yield RawServer(process)
        finally:
            if process.returncode is None:
                process.kill()
            with trio.move_on_after(5, shield=True):
                await process.wait()
