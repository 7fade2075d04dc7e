"""The room's half of the WebSocket exit acknowledgement (issue 30, row 2; docs/protocol.md §3.1).

The reference room (real hypercorn, in this process) advertises ``exit_ack``
in its ``open`` frame; after it records an exit frame under R5's rule it
answers ``{"event":"exit_recorded",…}`` and closes (1000). Before, an exit
frame got no answer: a client whose room crashed between the frame and its
record could not tell, and 939 of 1,000 such exits were lost. An exit the
store cannot write is not acknowledged (close 1011), so the client's POST
fallback gets the store's answer. The client is a raw wsproto connection, so
the test sees every frame the room sends.
"""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Final

import pytest
import trio
import trio.testing
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    CloseConnection,
    Event,
    Ping,
    Request,
    TextMessage,
)

from letagents_trio.room_server import Room, SQLiteStore

from ..room_server.helpers import OWNER_TOKEN, ROOM, UUID4, registration, session_headers
from ..room_server.paths import process_path
from .room_process import served_room

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX sockets")

BUDGET: Final = 20


class RawSocket:
    """A WebSocket client that shows every event the room sends."""

    def __init__(self, stream: trio.SocketStream) -> None:
        self.stream = stream
        self.ws = WSConnection(ConnectionType.CLIENT)
        self.pending: list[Event] = []

    @classmethod
    async def open(cls, port: int, session: dict[str, Any]) -> RawSocket:
        socket = cls(await trio.open_tcp_stream("127.0.0.1", port))
        headers = [(k.encode(), v.encode()) for k, v in session_headers(session).items()]
        request = Request(host="127.0.0.1", target=process_path(session), extra_headers=headers)
        await socket.stream.send_all(socket.ws.send(request))
        assert isinstance(await socket.next(), AcceptConnection)
        return socket

    async def next(self) -> Event | None:
        """The room's next event but pings (answered); None when the connection ended."""
        while True:
            while not self.pending:
                data = await self.stream.receive_some(65536)
                self.ws.receive_data(data or None)
                self.pending.extend(self.ws.events())
                if not data and not self.pending:
                    return None
            event = self.pending.pop(0)
            if not isinstance(event, Ping):
                return event
            await self.stream.send_all(self.ws.send(event.response()))

    async def text(self) -> str:
        event = await self.next()
        assert isinstance(event, TextMessage), event
        return event.data

    async def send_text(self, text: str) -> None:
        await self.stream.send_all(self.ws.send(TextMessage(data=text)))


async def a_session(room: Room) -> dict[str, Any]:
    reply = await room.register(OWNER_TOKEN, ROOM, registration())
    assert reply.status == 201, reply.body
    return dict(reply.body)


def exit_frame(connection_id: str | None) -> str:
    return json.dumps({"event": "exit", "process_connection_id": connection_id})


@asynccontextmanager
async def opened(port: int, session: dict[str, Any]) -> AsyncIterator[tuple[RawSocket, str]]:
    socket = await RawSocket.open(port, session)
    async with socket.stream:
        opening = await socket.text()
        found = UUID4.search(opening)
        assert found is not None, opening
        # Exactly this text: compact, the same order as the SSE open event's data.
        assert opening == f'{{"event":"open","connection_id":"{found[0]}","exit_ack":true}}'
        yield socket, found[0]


@pytest.mark.parametrize(
    ("named", "recorded"),
    [("current", True), ("stale", False), (None, False)],
)
async def test_an_exit_frame_is_acknowledged_with_r5s_answer_then_closed(
    named: str | None, recorded: bool
) -> None:
    with trio.fail_after(BUDGET):
        async with served_room() as (room, port):
            session = await a_session(room)
            async with opened(port, session) as (socket, connection_id):
                said = {"current": connection_id, "stale": "0" * 8 + connection_id[8:]}.get(
                    named or ""
                )
                await socket.send_text(exit_frame(said))
                ack = json.loads(await socket.text())
                assert ack == {
                    "event": "exit_recorded",
                    "process_connection_id": said,
                    "recorded": recorded,
                }
                close = await socket.next()
                assert isinstance(close, CloseConnection)
                assert close.code == 1000
            await trio.testing.wait_all_tasks_blocked(0.05)
            row = room.session(session["session_id"])
            assert row is not None
            if recorded:
                assert row.process_connection_id == "exited"
            else:  # the client left: a drop of the current connection, no exit
                assert row.process_connection_id == connection_id
                assert row.process_disconnected_at is not None
            assert room.statistics().open_process_streams == 0


async def test_the_ack_text_is_compact_and_in_order() -> None:
    with trio.fail_after(BUDGET):
        async with served_room() as (room, port):
            async with opened(port, await a_session(room)) as (socket, connection_id):
                await socket.send_text(exit_frame(connection_id))
                assert await socket.text() == (
                    f'{{"event":"exit_recorded","process_connection_id":"{connection_id}",'
                    '"recorded":true}'
                )


async def test_other_frames_get_no_answer_and_keep_the_stream() -> None:
    with trio.fail_after(BUDGET):
        async with served_room() as (room, port):
            async with opened(port, await a_session(room)) as (socket, _):
                await socket.send_text('{"event":"hello"}')
                await socket.send_text("not json")
                with trio.move_on_after(0.3) as quiet:
                    await socket.next()
                assert quiet.cancelled_caught
                assert room.statistics().open_process_streams == 1


async def test_an_exit_the_store_cannot_write_is_not_acknowledged(tmp_path: Path) -> None:
    """Closed 1011 without an ack: the client falls back to ``POST …/process/exit``."""
    store = SQLiteStore(tmp_path / "room.sqlite3")
    with trio.fail_after(BUDGET):
        async with served_room(store) as (room, port):
            session = await a_session(room)
            async with opened(port, session) as (socket, connection_id):
                store._db.execute("PRAGMA query_only = 1")  # every write fails from here
                await socket.send_text(exit_frame(connection_id))
                close = await socket.next()
                assert isinstance(close, CloseConnection), close
                assert close.code == 1011
            store._db.execute("PRAGMA query_only = 0")
            row = room.session(session["session_id"])
            assert row is not None
            assert row.process_connection_id == connection_id  # nothing half-written
    store.close()
