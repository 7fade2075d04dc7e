"""Clients that stop reading, over real loopback (issue 43, row 1): cut, and never hold the stop.

The room runs in this process (``serve_room``, real hypercorn). The client is a
raw socket with a small receive buffer that upgrades the process route to a
WebSocket, then sends pings as fast as the room takes them and never reads a
byte: the room's pongs fill the client's buffer, then the room's. Before, the
room's write of a pong waited for ever, shielded: the connection's reader with
it, so no disconnect reached the app (the session kept its connection id, no
drop recorded), and the room's stop, whose cancellation the shield kept out,
never ended. Every write to a client shares that one path (a process stream's
frame, an answer, a pong), so a stalled SSE client is cut the same way.
"""

from __future__ import annotations

import os
import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, Final

import pytest
import trio

from letagents_trio.room_server import MemoryStore, Room, RoomConfig, serve_room
from letagents_trio.room_server._serve import GRACEFUL_TIMEOUT, SHUTDOWN_TIMEOUT

from ..room_server.helpers import OWNER_TOKEN, ROOM, registration, session_headers
from ..room_server.paths import process_path
from .test_room_upgrades import GOOD_KEY, upgrade

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX sockets")

# The client's receive buffer: small, so the room's pongs fill it at once.
CLIENT_BUFFER: Final = 4096
# A client ping with the largest control payload (125 bytes), masked as a client's must be.
MASK: Final = os.urandom(4)
PING: Final = (
    bytes([0x89, 0x80 | 125]) + MASK + bytes(b ^ MASK[i % 4] for i, b in enumerate(bytes(125)))
)
# What the room may take beyond its own bounds on a loaded machine (filling the buffers first).
MARGIN: Final = 10.0


@asynccontextmanager
async def served(config: RoomConfig) -> AsyncIterator[tuple[Room, int, trio.CancelScope]]:
    """A room served on a free loopback port: the room, the port, and the scope that stops it."""
    room = Room(store=MemoryStore(), owner_tokens={OWNER_TOKEN: "owner"}, config=config)
    async with trio.open_nursery() as nursery:
        url = await nursery.start(partial(serve_room, room, port=0))
        yield room, int(url.rsplit(":", 1)[1]), nursery.cancel_scope
        nursery.cancel_scope.cancel(reason="test over")


async def stuck_client(room: Room, port: int) -> tuple[dict[str, Any], trio.SocketStream]:
    """A session, and its process socket upgraded by a client that will never read again."""
    reply = await room.register(OWNER_TOKEN, ROOM, registration())
    assert reply.status == 201, reply.body
    session = dict(reply.body)
    sock = trio.socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, CLIENT_BUFFER)
    await sock.connect(("127.0.0.1", port))
    stream = trio.SocketStream(sock)
    path = process_path(session, ROOM)
    await stream.send_all(upgrade(path, key=GOOD_KEY, headers=session_headers(session)))
    head = b""
    while b"\r\n\r\n" not in head:
        head += await stream.receive_some(1)
    assert head.startswith(b"HTTP/1.1 101"), head
    return session, stream


async def ping_until_cut(stream: trio.SocketStream) -> None:
    """Ping as fast as the room takes it, reading nothing, until the room cuts the connection."""
    flood = PING * 64
    try:
        while True:
            await stream.send_all(flood)
    except (trio.BrokenResourceError, trio.ClosedResourceError):
        return


async def test_a_client_that_pings_and_never_reads_is_cut_and_its_session_dropped() -> None:
    async with served(RoomConfig(send_timeout=1.0)) as (room, port, _):
        session, stream = await stuck_client(room, port)
        async with stream:
            start = trio.current_time()
            with trio.fail_after(1.0 + MARGIN):
                await ping_until_cut(stream)
            took = trio.current_time() - start
        await trio.testing.wait_all_tasks_blocked(cushion=0.1)
        row = room.store.get_session(session["session_id"])
        assert row is not None
        assert row.process_disconnected_at is not None  # recorded as a drop
        assert room.process_statistics(ROOM, OWNER_TOKEN).body["held"] == 0
    print(f"cut after {took:.2f} s (send timeout 1 s)")


async def fill(stream: trio.SocketStream) -> None:
    """Ping until a send waits half a second: the room has stopped reading this client."""
    flood = PING * 64
    while True:
        with trio.move_on_after(0.5) as waited:
            await stream.send_all(flood)
        if waited.cancelled_caught:
            return


@pytest.mark.parametrize("clients", [1, 4])
async def test_the_rooms_stop_cuts_clients_that_never_read(clients: int) -> None:
    """With the default 10 s send timeout, the stop still ends at its deadline."""
    room = Room(store=MemoryStore(), owner_tokens={OWNER_TOKEN: "owner"}, config=RoomConfig())
    with trio.fail_after(SHUTDOWN_TIMEOUT + 2 * MARGIN):
        async with trio.open_nursery() as serving:
            url = await serving.start(partial(serve_room, room, port=0))
            port = int(url.rsplit(":", 1)[1])
            streams = [(await stuck_client(room, port))[1] for _ in range(clients)]
            async with trio.open_nursery() as filling:
                for stream in streams:
                    filling.start_soon(fill, stream)
            start = trio.current_time()
            serving.cancel_scope.cancel(reason="stopping")
        took = trio.current_time() - start
    for stream in streams:
        await stream.aclose()
    print(f"{clients} stuck clients: the stop took {took:.2f} s")
    assert GRACEFUL_TIMEOUT - 0.1 <= took < SHUTDOWN_TIMEOUT
