"""The real server as a subprocess over stdio, against the reference room on loopback.

Real clock throughout (subprocesses and sockets), every test bounded by
``trio.fail_after``. The room is :class:`~letagents_trio.room_server.Room`
behind a thin ASGI layer (served by hypercorn on 127.0.0.1, port 0) that
records registrations, process streams and exit announcements, and can
black-hole exits: accept the POST, never answer.

Two drivers: the SDK's stdio client (what hosts use) and, where the process
itself must be signalled and timed, a raw JSON-RPC driver over the pipes.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any, Final

import attrs
import pytest
import trio
import trio.testing
from hypercorn.config import Config
from hypercorn.trio import serve
from mcp import Client, StdioServerParameters
from mcp_types import CallToolResult, TextContent

from letagents_trio import LocalStateStore
from letagents_trio.room_server import MemoryStore, Room, create_app

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and pipes")

OWNER_TOKEN: Final = "owner-stdio-token-0123456789"
ROOM: Final = "room_shared"
# PROTOCOL §4.5: one shared deadline for every exit POST.
EXIT_DEADLINE: Final = 1.5
# The bound: the process is gone within the deadline plus this.
EXIT_SLACK: Final = 0.5
# Budget for anything else a test waits on (process start, registration).
BUDGET: Final = 30

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


@attrs.define(eq=False)
class LoopbackRoom:
    """The reference room served on loopback, with a recording, faulty front."""

    room: Room
    url: str = ""
    black_hole_exits: bool = False
    registrations: list[dict[str, Any]] = attrs.field(factory=list)
    process_gets: list[tuple[str, bool]] = attrs.field(factory=list)  # (session, had token)
    exits: list[tuple[float, str, dict[str, Any]]] = attrs.field(factory=list)
    polls_started: int = 0
    _changed: trio.lowlevel.ParkingLot = attrs.field(factory=trio.lowlevel.ParkingLot)

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        """Wait (no polling) until ``condition()`` holds; re-checked after each request."""
        while not condition():
            await self._changed.park()

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        inner = create_app(self.room)
        if scope["type"] != "http":
            await inner(scope, receive, send)
            return
        path: str = scope["path"]
        headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
        try:
            if path.endswith("/process/exit"):
                body = json.loads((await receive()).get("body", b"") or b"{}")
                self.exits.append((trio.current_time(), path.split("/")[-3], body))
                self._changed.unpark_all()
                if self.black_hole_exits:
                    while (await receive())["type"] != "http.disconnect":
                        pass
                    return
                replayed = False

                async def replay() -> Message:
                    nonlocal replayed
                    if not replayed:
                        replayed = True
                        return {"type": "http.request", "body": json.dumps(body).encode()}
                    return await receive()

                await inner(scope, replay, send)
                return
            if path.endswith("/messages/poll"):
                self.polls_started += 1
                self._changed.unpark_all()
            if path.endswith("/process") and scope["method"] == "GET":
                session_id = path.split("/")[-2]
                token = headers.get("x-letagents-agent-session-token", "")
                self.process_gets.append((session_id, bool(token)))
                self._changed.unpark_all()
            if path == f"/rooms/{ROOM}/agent-sessions" and scope["method"] == "POST":
                message = await receive()
                self.registrations.append(json.loads(message.get("body", b"") or b"{}"))
                self._changed.unpark_all()
                sent = False

                async def again() -> Message:
                    nonlocal sent
                    if not sent:
                        sent = True
                        return message
                    return await receive()

                await inner(scope, again, send)
                return
            await inner(scope, receive, send)
        finally:
            self._changed.unpark_all()


@asynccontextmanager
async def open_loopback_room() -> AsyncIterator[LoopbackRoom]:
    room = LoopbackRoom(Room(store=MemoryStore(), owner_tokens={OWNER_TOKEN: "owner"}))
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.graceful_timeout = 0.2
    config.accesslog = None
    async with trio.open_nursery() as nursery:
        binds: list[str] = await nursery.start(
            partial(serve, room.app, config, mode="asgi")  # type: ignore[arg-type]
        )
        room.url = binds[0]
        try:
            yield room
        finally:
            room.room.close_all_process_streams()
            nursery.cancel_scope.cancel(reason="test over")


def server_env(room: LoopbackRoom, tmp_path: Path) -> dict[str, str]:
    return {
        "LETAGENTS_API_URL": room.url + "/",
        "LETAGENTS_TOKEN": OWNER_TOKEN,
        "LETAGENTS_STATE_PATH": str(tmp_path / "mcp-state.json"),
        "LETAGENTS_CHAT_STORAGE_SETTINGS_PATH": str(tmp_path / "chat-storage.json"),
        "LETAGENTS_EXECUTION_PROFILE": "autonomous_mcp_worker",
        "LETAGENTS_LOG_LEVEL": "DEBUG",
    }


def text_of(result: CallToolResult) -> str:
    (block,) = result.content
    assert isinstance(block, TextContent)
    return block.text


async def call_ok(client: Client, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    result = await client.call_tool(name, arguments)
    assert not result.is_error, text_of(result)
    value: dict[str, Any] = json.loads(text_of(result))
    return value


# --- the raw driver: a process we can signal and time ---------------------------------


@attrs.define(eq=False)
class RawServer:
    """The MCP server process, spoken to in JSON-RPC lines over its pipes."""

    process: trio.Process
    _buffer: bytearray = attrs.field(factory=bytearray)
    _next_id: int = 0

    async def send(self, message: dict[str, Any]) -> None:
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
        self._next_id += 1
        await self.send({"jsonrpc": "2.0", "id": self._next_id, "method": method, "params": params})
        while True:
            message = await self._line()
            if message.get("id") == self._next_id:
                assert "error" not in message, message
                result: dict[str, Any] = message["result"]
                return result

    async def initialize(self) -> None:
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
        result = await self.request("tools/call", {"name": name, "arguments": arguments})
        assert not result.get("isError"), result
        value: dict[str, Any] = json.loads(result["content"][0]["text"])
        return value


@asynccontextmanager
async def open_raw_server(env: dict[str, str], stderr_path: Path) -> AsyncIterator[RawServer]:
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


async def register_held_worker(server: RawServer, room: LoopbackRoom) -> str:
    """Register a worker and wait until its process stream is open at the room."""
    registered = await server.call_tool(
        "register_agent_session",
        {"room_id": ROOM, "registration_key": "k-raw", "display_name": "Juniper"},
    )
    session_id: str = registered["agent_session"]["session_id"]
    await room.wait_until(lambda: len(room.room.process_streams(session_id)) == 1)
    # One more round trip, so the holder has read the stream's open event (the
    # connection id its exit names) before the test stops the process.
    await server.call_tool("read_messages", {"worker_id": registered["worker_id"]})
    return session_id


@pytest.mark.parametrize("black_hole", [False, True], ids=["healthy", "black-holed"])
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
async def test_signal_announces_and_exits_within_the_deadline(
    tmp_path: Path, black_hole: bool, signum: signal.Signals
) -> None:
    """§8.1.10: a signal stops the server: the exit is POSTed, the process is gone (rc 0)
    within 1.5 + 0.5 s, even when the room never answers the exit."""
    with trio.fail_after(BUDGET):
        async with open_loopback_room() as room:
            room.black_hole_exits = black_hole
            env = server_env(room, tmp_path)
            async with open_raw_server(env, tmp_path / "stderr.log") as server:
                await server.initialize()
                session_id = await register_held_worker(server, room)
                (stream,) = room.room.process_streams(session_id)
                sent_at = trio.current_time()
                server.process.send_signal(signum)
                await server.process.wait()
                elapsed = trio.current_time() - sent_at
    stderr = (tmp_path / "stderr.log").read_text()
    print(f"{signum.name} {'black-holed' if black_hole else 'healthy'}: exit in {elapsed:.3f} s")
    assert server.process.returncode == 0, stderr
    assert elapsed < EXIT_DEADLINE + EXIT_SLACK, stderr
    if black_hole:
        assert elapsed >= EXIT_DEADLINE - 0.1  # it did wait for the room, up to the deadline
    ((_, exited, body),) = room.exits
    assert exited == session_id
    assert body["process_connection_id"] == stream.connection_id
    assert body["agent_session_id"] == session_id


@pytest.mark.parametrize("black_hole", [False, True], ids=["healthy", "black-holed"])
async def test_stdin_eof_announces_and_exits_within_the_deadline(
    tmp_path: Path, black_hole: bool
) -> None:
    """§8.1.5: the host closes stdin: exactly one exit POST naming the open stream's id,
    and the process is gone within 1.5 + 0.5 s."""
    with trio.fail_after(BUDGET):
        async with open_loopback_room() as room:
            room.black_hole_exits = black_hole
            env = server_env(room, tmp_path)
            async with open_raw_server(env, tmp_path / "stderr.log") as server:
                await server.initialize()
                session_id = await register_held_worker(server, room)
                (stream,) = room.room.process_streams(session_id)
                closed_at = trio.current_time()
                assert server.process.stdin is not None
                await server.process.stdin.aclose()
                await server.process.wait()
                elapsed = trio.current_time() - closed_at
    stderr = (tmp_path / "stderr.log").read_text()
    print(f"stdin EOF {'black-holed' if black_hole else 'healthy'}: exit in {elapsed:.3f} s")
    assert server.process.returncode == 0, stderr
    assert elapsed < EXIT_DEADLINE + EXIT_SLACK, stderr
    assert [(sid, body["process_connection_id"]) for _, sid, body in room.exits] == [
        (session_id, stream.connection_id)
    ]


async def test_end_to_end_with_the_sdk_stdio_client(tmp_path: Path) -> None:
    """§8.1.1, §8.1.3-5 and §8.3.5-6 through the SDK's stdio client, as a host runs it."""
    store = LocalStateStore(tmp_path / "mcp-state.json")
    with trio.fail_after(BUDGET):
        async with open_loopback_room() as room:
            params = StdioServerParameters(
                command=sys.executable,
                args=["-m", "letagents_trio.mcp_server"],
                env=server_env(room, tmp_path),
            )
            async with Client(params, mode="legacy") as client:
                a = await call_ok(
                    client,
                    "register_agent_session",
                    {"room_id": ROOM, "registration_key": "k1", "display_name": "Juniper"},
                )
                sid = a["agent_session"]["session_id"]
                # §8.1.1: exactly one process GET, for that session, with a token.
                await room.wait_until(lambda: len(room.room.process_streams(sid)) == 1)
                assert room.process_gets == [(sid, True)]
                b = await call_ok(
                    client,
                    "register_agent_session",
                    {"room_id": ROOM, "registration_key": "k2", "display_name": "Cedar"},
                )
                # §8.3.5: two workers send by worker_id alone, as two sessions.
                sent_a = await call_ok(
                    client, "send_message", {"worker_id": a["worker_id"], "text": "from a"}
                )
                sent_b = await call_ok(
                    client, "send_message", {"worker_id": b["worker_id"], "text": "from b"}
                )
                assert sent_a["message"]["agent_session_id"] == sid
                assert sent_b["message"]["agent_session_id"] != sid
                waited = await call_ok(
                    client,
                    "wait_for_messages",
                    {"worker_id": a["worker_id"], "after_message_id": "0"},
                )
                assert [m["text"] for m in waited["messages"]] == ["from a", "from b"]
                # §8.1.3: the room ends the session; the next call learns it, and a
                # reconnect by worker_id registers again and keeps the session id.
                room.room.end_session(sid)
                await room.wait_until(lambda: not room.room.process_streams(sid))
                await client.call_tool(
                    "send_message", {"worker_id": a["worker_id"], "text": "late"}
                )
                stored = store.stored_session(sid)
                assert stored is not None
                assert stored.ended_at
                count = len(room.registrations)
                again = await call_ok(
                    client,
                    "register_agent_session",
                    {"room_id": ROOM, "worker_id": a["worker_id"]},
                )
                assert len(room.registrations) == count + 1
                assert again["agent_session"]["session_id"] == sid
                await room.wait_until(lambda: len(room.room.process_streams(sid)) == 1)
                (stream,) = room.room.process_streams(sid)
                texts = [json.dumps(x) for x in (a, b, sent_a, sent_b, waited, again)]
            exits_seen = {sid: body for _, sid, body in room.exits}
    # §8.1.4: every registration carried the same well-formed process_host_id.
    host_ids = {r["process_host_id"] for r in room.registrations}
    assert len(host_ids) == 1
    assert re.fullmatch(r"phost_[0-9a-f]{32}", host_ids.pop())
    # §8.1.5: closing stdin announced the exit of the held stream, by its id.
    assert exits_seen[sid]["process_connection_id"] == stream.connection_id
    # §8.3.6: no token or bearer in any result; none in the state file either.
    state_text = (tmp_path / "mcp-state.json").read_text()
    stored = store.stored_session(sid)
    assert stored is not None
    for text in texts:
        assert OWNER_TOKEN not in text
        assert stored.session_token not in text
        assert "session_token" not in text
        assert "worker_bearer" not in text
    assert "worker_bearer" not in state_text
    assert oct((tmp_path / "mcp-state.json").stat().st_mode & 0o777) == "0o600"


async def test_cancelled_wait_over_stdio_closes_the_rooms_poll(tmp_path: Path) -> None:
    """A wait the host cancels returns at once, and the room's poll closes with it."""
    with trio.fail_after(BUDGET):
        async with open_loopback_room() as room:
            params = StdioServerParameters(
                command=sys.executable,
                args=["-m", "letagents_trio.mcp_server"],
                env=server_env(room, tmp_path),
            )
            async with Client(params, mode="legacy") as client:
                a = await call_ok(
                    client,
                    "register_agent_session",
                    {"room_id": ROOM, "registration_key": "k1", "display_name": "Juniper"},
                )
                with trio.move_on_after(30) as outer:
                    async with trio.open_nursery() as nursery:

                        async def wait() -> None:
                            await client.call_tool(
                                "wait_for_messages",
                                {
                                    "worker_id": a["worker_id"],
                                    "after_message_id": "0",
                                    "timeout": 60_000,
                                },
                            )

                        nursery.start_soon(wait)
                        await room.wait_until(lambda: room.polls_started == 1)
                        await trio.testing.wait_all_tasks_blocked()
                        assert room.room.statistics().open_polls == 1
                        cancelled_at = trio.current_time()
                        nursery.cancel_scope.cancel(reason="the host cancels the call")
                    returned = trio.current_time() - cancelled_at
                    await room.wait_until(lambda: room.room.statistics().open_polls == 0)
                    closed = trio.current_time() - cancelled_at
                assert not outer.cancelled_caught
                # The server still serves.
                await call_ok(client, "read_messages", {"worker_id": a["worker_id"]})
    print(f"cancelled wait: call returned in {returned:.3f} s, room poll closed in {closed:.3f} s")
    assert returned < 0.5
    assert closed < 1.0
