"""The WebSocket exit over the lean path's TLS stream: written at once, and whole before the close.

A hosted room is HTTPS, so a goodbye of thousands of WebSocket sessions
writes thousands of exit frames through :class:`~letagents_trio._http._tls.TLSStream`.
Each goes in the goodbye's own loop (``leave_nowait``: its record made and
written at once, no task and no checkpoint), and when the kernel takes only
part of that record, the rest goes before the socket closes. Over socketpairs
and loopback TCP, trio's ``SSLStream`` on the room's side with a certificate
made for the test (:func:`.tiny_room.self_signed`); the real clock, bounded
by ``trio.fail_after``.
"""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING

import trio
import trio.testing
from wsproto import WSConnection
from wsproto.connection import Connection, ConnectionType
from wsproto.events import AcceptConnection, CloseConnection, Request, TextMessage

from letagents_trio import (
    AgentSession,
    EventKind,
    RoomClient,
    WebSocketConnector,
    open_connection_manager,
)
from letagents_trio._errors import RoomUnreachable
from letagents_trio._http import NetworkOpener
from letagents_trio._http._sockio import unsent_size
from letagents_trio._http._socknow import SocketNow, socket_now
from letagents_trio._http._tls import TLSStream, open_tls
from letagents_trio._ws_socket import ProcessSocket

from ..proxy_env import clear_proxy_environment
from .tiny_room import self_signed

if TYPE_CHECKING:
    import ssl
    from pathlib import Path

    import pytest

EXIT_EVENTS = [
    TextMessage(data='{"event":"exit","process_connection_id":"conn-1"}'),
    CloseConnection(code=1000, reason=""),
]


async def no_post(connection_id: str | None) -> bool:
    """The POSTed exit of a socket whose test sends every exit over the socket."""
    await trio.lowlevel.checkpoint()
    raise AssertionError(f"an exit POSTed: {connection_id}")


@asynccontextmanager
async def socket_over_tls(
    tmp_path: Path,
) -> AsyncIterator[tuple[ProcessSocket, trio.SSLStream[trio.SocketStream]]]:
    """A process socket over our TLS stream on a socketpair, and the room's end (trio's)."""
    server_tls, client_tls = self_signed(tmp_path)
    a, b = trio.socket.socketpair()
    room = trio.SSLStream(trio.SocketStream(b), server_tls, server_side=True, https_compatible=True)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(room.do_handshake)
        ours = await open_tls(trio.SocketStream(a), client_tls, "127.0.0.1")
    socket = ProcessSocket(
        ours,
        Connection(ConnectionType.CLIENT),
        ping_interval=10.0,
        pong_timeout=5.0,
        max_event_bytes=1024,
        announce_exit=no_post,
    )
    try:
        yield socket, room
    finally:
        await socket.aclose()
        await trio.aclose_forcefully(room)


async def heard_to_the_end(room: trio.SSLStream[trio.SocketStream]) -> list[object]:
    """Every frame the client wrote until its socket closed."""
    ws = Connection(ConnectionType.SERVER)
    while data := await room.receive_some():
        ws.receive_data(bytes(data))
    return list(ws.events())


def socket_of(socket: ProcessSocket) -> trio.socket.SocketType:
    stream = socket._stream
    assert isinstance(stream, TLSStream)
    transport = stream.transport_stream
    assert isinstance(transport, trio.SocketStream)
    return transport.socket


async def test_the_exit_over_tls_goes_at_once_with_its_close(tmp_path: Path) -> None:
    """Its record is written in the goodbye's loop, and the socket closed right after."""
    with trio.fail_after(10):
        async with socket_over_tls(tmp_path) as (socket, room):
            with trio.testing.assert_no_checkpoints():
                assert socket.leave_nowait("conn-1") is None  # done: no task needed
                await socket.aclose()  # closed already: nothing more, no checkpoint
            assert socket.leaving
            assert socket_of(socket).fileno() == -1
            assert await heard_to_the_end(room) == EXIT_EVENTS
            assert socket.leave_nowait("conn-1") is False  # once


async def test_a_reader_woken_by_the_exits_close_ends_without_an_error_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The goodbye closed the socket after its exit: the held read ends as the end it is.

    No :class:`RoomUnreachable` is made for it (thousands of readers wake so at once).
    """
    made: list[tuple[object, ...]] = []
    real_init = RoomUnreachable.__init__

    def counted(error: RoomUnreachable, *args: object) -> None:
        made.append(args)
        real_init(error, *args)

    monkeypatch.setattr(RoomUnreachable, "__init__", counted)
    with trio.fail_after(10):
        async with socket_over_tls(tmp_path) as (socket, _room):
            news: list[object] = []

            async def hold() -> None:
                news.extend([item async for item in socket])

            async with trio.open_nursery() as nursery:
                nursery.start_soon(hold)
                await trio.testing.wait_all_tasks_blocked()
                assert socket.leave_nowait("conn-1") is None
            assert news == []
    assert made == []


async def test_socket_now_writes_the_lean_tls_streams_records_and_not_trios(
    tmp_path: Path,
) -> None:
    """The lean path's TLS over a plain socket is written at once; trio's TLS is not."""
    with trio.fail_after(10):
        async with socket_over_tls(tmp_path) as (socket, room):
            now = socket_now(socket._stream)
            assert now is not None
            assert now.send(b"hello") == 5
            assert now.unsent_size() == 0
            assert await room.receive_some() == b"hello"
            tls = socket._stream
            assert isinstance(tls, TLSStream)
            async with tls._send_lock:
                assert now.send(b"waits") == 0  # another writer is under way
            assert socket_now(room) is None


async def test_an_exit_record_the_kernel_took_part_of_goes_whole_before_the_close(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel takes 10 bytes of the exit's record: the socket stays open for ``leave``,
    which sends the rest, and only then closes it."""
    real_write = os.write

    def ten_bytes(fd: int, data: bytes) -> int:
        return real_write(fd, data[:10])

    with trio.fail_after(10):
        async with socket_over_tls(tmp_path) as (socket, room):
            with monkeypatch.context() as patched:
                patched.setattr(os, "write", ten_bytes)
                assert socket.leave_nowait("conn-1") is False  # leave() must finish it
            assert socket.leaving
            assert unsent_size(socket._stream)  # the rest of the record waits
            assert socket_of(socket).fileno() != -1
            assert await socket.leave("conn-1") is None
            assert socket_of(socket).fileno() == -1
            assert await heard_to_the_end(room) == EXIT_EVENTS


async def test_an_exit_the_kernel_takes_none_of_goes_whole_through_leave(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing taken (the kernel's buffer is full): ``leave`` writes the exit in turn."""
    real_write = os.write

    def full(fd: int, data: bytes) -> int:
        raise BlockingIOError

    with trio.fail_after(10):
        async with socket_over_tls(tmp_path) as (socket, room):
            with monkeypatch.context() as patched:
                patched.setattr(os, "write", full)
                assert socket.leave_nowait("conn-1") is False
            assert os.write is real_write
            assert socket.leaving
            assert await socket.leave("conn-1") is None
            assert await heard_to_the_end(room) == EXIT_EVENTS


class TLSWebSocketRoom:
    """A room of process sockets over TLS: each named on upgrade, its exit frame recorded."""

    def __init__(self, tls: ssl.SSLContext) -> None:
        self.tls = tls
        self.opened = 0
        self.expected = 0
        self.exits: list[str | None] = []
        self.all_exits = trio.Event()

    async def serve(self, *, task_status: trio.TaskStatus[int]) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        task_status.started(listeners[0].socket.getsockname()[1])
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, raw: trio.SocketStream) -> None:
        stream = trio.SSLStream(raw, self.tls, server_side=True, https_compatible=True)
        ws = WSConnection(ConnectionType.SERVER)
        try:
            while data := await stream.receive_some():
                ws.receive_data(bytes(data))
                for event in ws.events():
                    if isinstance(event, Request):
                        self.opened += 1
                        opened = json.dumps({"event": "open", "connection_id": f"pc_{self.opened}"})
                        await stream.send_all(
                            ws.send(AcceptConnection()) + ws.send(TextMessage(data=opened))
                        )
                    elif isinstance(event, TextMessage):
                        frame = json.loads(event.data)
                        if frame.get("event") == "exit":
                            self.exits.append(frame.get("process_connection_id"))
                            if len(self.exits) == self.expected:
                                self.all_exits.set()
        except trio.BrokenResourceError:
            pass
        finally:
            await trio.aclose_forcefully(stream)


class SpawnCount(trio.abc.Instrument):
    """How many tasks of each function were spawned while it was installed."""

    def __init__(self) -> None:
        self.spawned: list[str] = []

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.spawned.append(task.name)


async def test_a_goodbye_over_tls_starts_no_task_per_exit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every session's exit over TLS goes in the goodbye's own loop, and the room has each.

    Each socket is drained and closed once: the holder's block, unwinding, finds it closed.
    """
    clear_proxy_environment(monkeypatch)
    steps: list[str] = []
    for step in ("discard_unread", "close"):
        real = getattr(SocketNow, step)

        def counted(now: SocketNow, real: Callable[[SocketNow], None] = real) -> None:
            steps.append(real.__name__)
            real(now)

        monkeypatch.setattr(SocketNow, step, counted)
    sessions = 20
    server_tls, client_tls = self_signed(tmp_path)
    room = TLSWebSocketRoom(server_tls)
    room.expected = sessions
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(room.serve)
            opener = NetworkOpener(ssl_context=client_tls)
            async with RoomClient(f"https://127.0.0.1:{port}", opener=opener) as client:
                connector = WebSocketConnector(client)
                async with open_connection_manager(client, connector=connector) as manager:
                    with manager.subscribe(2 * sessions) as events:
                        holders = [
                            manager.hold(
                                AgentSession(
                                    session_id=f"wsess_{n}",
                                    session_token="secret",
                                    room_id="room_e",
                                )
                            )
                            for n in range(sessions)
                        ]
                        connected = 0
                        async for event in events:
                            connected += event.kind is EventKind.CONNECTION
                            if connected == sessions:
                                break
                    named = {holder.connection_id for holder in holders}
                    count = SpawnCount()
                    trio.lowlevel.add_instrument(count)
                    try:
                        report = await manager.announce_exits()
                    finally:
                        trio.lowlevel.remove_instrument(count)
            await room.all_exits.wait()
            nursery.cancel_scope.cancel()
    assert [name for name in count.spawned if "Goodbye" in name] == []
    assert sorted(steps) == ["close"] * sessions + ["discard_unread"] * sessions
    assert [(item.recorded, item.error) for item in report] == [(None, None)] * sessions
    assert sorted(map(str, room.exits)) == sorted(map(str, named))


async def test_to_a_room_that_answers_exits_the_close_goes_as_the_socket_closes(
    tmp_path: Path,
) -> None:
    """Over TLS too: the exit frame at once alone, its close written by the socket's close."""
    with trio.fail_after(10):
        async with socket_over_tls(tmp_path) as (socket, room):
            socket.exit_ack = True
            with trio.testing.assert_no_checkpoints():
                assert socket.leave_nowait("conn-1") is True  # its answer is to come
            assert socket_of(socket).fileno() != -1
            assert socket.close()
            assert await heard_to_the_end(room) == EXIT_EVENTS


async def test_an_exit_whose_record_tls_cannot_make_is_posted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """TLS failed as the exit was written at once: nothing of it went, so ``leave`` POSTs it."""
    posted: list[str | None] = []

    async def post(connection_id: str | None) -> bool:
        await trio.lowlevel.checkpoint()
        posted.append(connection_id)
        return True

    def tls_failed(self: TLSStream, data: bytes) -> int:
        raise trio.BrokenResourceError("TLS failed: SSLError")

    with trio.fail_after(10):
        async with socket_over_tls(tmp_path) as (socket, _room):
            socket._announce_exit = post
            with monkeypatch.context() as patched:
                patched.setattr(TLSStream, "send_now", tls_failed)
                assert socket.leave_nowait("conn-1") is False
            assert socket.leaving
            assert await socket.leave("conn-1") is True
            assert posted == ["conn-1"]
