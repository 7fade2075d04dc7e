"""The room's connections over real loopback (issue 13, row 6): the cap on silent ones,
closing at once what the client closed, and one connection's failure stopping nothing.

The room runs in this process (``serve_room``, real hypercorn) with a cap of
two silent connections; every connection is a raw socket, so the test knows
exactly which are silent. Sessions are registered through the room object, so
no HTTP client's kept-alive connection counts. Real clock: after each step
``wait_all_tasks_blocked`` lets the room act on it. The flood of thousands is
``tests/e2e/test_room_floods.py``.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from functools import partial
from pathlib import Path
from typing import Any, Final

import attrs
import pytest
import trio
import trio.testing

from letagents_trio.room_server import MemoryStore, Room, RoomConfig, serve_room
from letagents_trio.room_server._connections import _CountedTCPServer

from ..room_server.helpers import OWNER_TOKEN, ROOM, registration, session_headers
from ..room_server.paths import process_path

# Long enough for the room to act on what just arrived on loopback.
SETTLE: Final = 0.05
# The room's cap in these tests.
CAP: Final = 2


async def settle() -> None:
    await trio.testing.wait_all_tasks_blocked(SETTLE)


@attrs.define
class Served:
    """The served room, and the client sockets a test opened (closed at the end)."""

    room: Room
    port: int
    sockets: list[trio.SocketStream] = attrs.field(factory=list)

    async def connect(self) -> trio.SocketStream:
        """A connection that sends nothing (yet), once the room has accepted it."""
        stream = await trio.open_tcp_stream("127.0.0.1", self.port)
        self.sockets.append(stream)
        await settle()
        return stream

    async def open_stream(self, session: Mapping[str, Any]) -> trio.SocketStream:
        """A session's process stream, read up to its ``open`` event."""
        stream = await trio.open_tcp_stream("127.0.0.1", self.port)
        self.sockets.append(stream)
        head = f"GET {process_path(dict(session))} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in session_headers(dict(session)).items())
        await stream.send_all(f"{head}\r\n".encode())
        data = b""
        while b"event: open" not in data:
            chunk = await stream.receive_some(65536)
            assert chunk, data
            data += chunk
        return stream


@asynccontextmanager
async def served_room(cap: int = CAP) -> AsyncIterator[Served]:
    room = Room(
        store=MemoryStore(),
        owner_tokens={OWNER_TOKEN: "owner"},
        config=RoomConfig(max_silent_connections=cap),
    )
    async with trio.open_nursery() as nursery:
        url = await nursery.start(partial(serve_room, room, port=0))
        served = Served(room, int(url.rsplit(":", 1)[1]))
        try:
            yield served
        finally:
            for stream in served.sockets:
                await stream.aclose()
            nursery.cancel_scope.cancel(reason="test over")


async def is_closed(stream: trio.SocketStream) -> bool:
    """Whether the room closed ``stream`` (it sends nothing on a silent connection)."""
    with trio.move_on_after(SETTLE):
        try:
            return await stream.receive_some(1024) == b""
        except trio.BrokenResourceError:
            return True
    return False


async def test_the_oldest_silent_connection_is_closed_and_held_streams_never_are() -> None:
    with trio.fail_after(20):
        async with served_room() as served:
            sessions = [
                (await served.room.register(OWNER_TOKEN, ROOM, registration(name=f"Held{i}"))).body
                for i in range(2 * CAP)
            ]
            streams = [await served.open_stream(session) for session in sessions]
            a = await served.connect()
            b = await served.connect()
            assert not await is_closed(a)
            c = await served.connect()  # one more than the cap: the oldest goes
            assert await is_closed(a)
            assert not await is_closed(b)
            assert not await is_closed(c)
            for stream in streams:  # twice the cap, never counted
                assert not await is_closed(stream)


async def test_a_kept_alive_connection_counts_again_once_answered() -> None:
    with trio.fail_after(20):
        async with served_room() as served:
            a = await served.connect()
            b = await served.connect()
            await b.send_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            answer = b""
            while not answer.endswith(b"}"):
                answer += await b.receive_some(4096)
            assert answer.startswith(b"HTTP/1.1 200 ")
            await settle()
            # b was answered and kept alive: silent again, and now the newest.
            c = await served.connect()
            assert await is_closed(a)
            assert not await is_closed(b)
            d = await served.connect()
            assert await is_closed(b)
            assert not await is_closed(c)
            assert not await is_closed(d)


async def test_a_slow_request_head_counts_as_silent() -> None:
    with trio.fail_after(20):
        async with served_room() as served:
            a = await served.connect()
            await a.send_all(b"GET /health HTTP/1.1\r\nHost: 1")  # and never the rest
            await settle()
            b = await served.connect()
            await served.connect()
            assert await is_closed(a)
            assert not await is_closed(b)


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts /proc/self/fd")
async def test_a_silent_connection_its_client_closed_frees_its_descriptor_at_once() -> None:
    """Hypercorn alone kept it until its keep-alive timer fired, 5 s later."""
    with trio.fail_after(20):
        async with served_room(cap=100) as served:
            before = len(os.listdir("/proc/self/fd"))
            for _ in range(20):
                await served.connect()
            assert len(os.listdir("/proc/self/fd")) == before + 40  # both ends
            for stream in served.sockets:
                await stream.aclose()
            await settle()
            assert len(os.listdir("/proc/self/fd")) == before


async def test_a_connection_that_fails_is_logged_and_closed_and_the_room_goes_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A connection's failure used to leave hypercorn's connection handler and
    stop the whole server (a send racing the close did, under a slow-body flood)."""
    serve = _CountedTCPServer.run
    failures = 0

    async def run_or_fail(self: _CountedTCPServer) -> None:
        nonlocal failures
        if failures == 0:
            failures += 1
            raise RuntimeError("a bug in one connection")
        await serve(self)

    monkeypatch.setattr(_CountedTCPServer, "run", run_or_fail)
    with trio.fail_after(20):
        async with served_room() as served:
            failed = await served.connect()
            assert await is_closed(failed)
            healthy = await served.connect()
            await healthy.send_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
            answer = b""
            while not answer.endswith(b"}"):
                answer += await healthy.receive_some(4096)
            assert answer.startswith(b"HTTP/1.1 200 ")
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == [
        "connection failed; closing it"
    ]


pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX sockets")
