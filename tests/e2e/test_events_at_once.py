"""Every event on a held process stream is acted on at once, whatever the stream's framing.

A held stream may let the kernel keep the room's heartbeats unread
(``QuietReads``), but nothing else: ``event: ended`` (or the WebSocket
``ended`` frame) after kept heartbeats wakes the reader at once, whether the
body is chunked, sized by ``Content-Length`` or delimited by the connection's
close, whether the room closes the connection with the stream or keeps it
alive, over plain TCP and over TLS.

A raw room on 127.0.0.1 writes each byte itself, so the framing is exactly
the one named. The real clock, bounded: the holder must report the session
ended within :data:`ACTED_WITHIN` of the room writing it; a read that kept
the event would report it only when its silence deadline (45 s) drew near.
"""

from __future__ import annotations

import base64
import hashlib
import ssl
from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing

from letagents_trio import (
    EventKind,
    RoomClient,
    SSEConnector,
    WebSocketConnector,
    open_connection_manager,
)
from letagents_trio._http import NetworkOpener, Origin
from letagents_trio._http._request import start_request

from ..proxy_env import clear_proxy_environment
from .tiny_room import SESSION, self_signed

if TYPE_CHECKING:
    from pathlib import Path

    from letagents_trio import ProcessConnector

# How soon the holder must act on an event the room wrote: generous for a
# loaded host, far below the 44 s after which a kept event would be read.
ACTED_WITHIN = 3.0
# What the letagents API writes (PROTOCOL §3).
CONNECTED = b": connected\n\n"
OPENED = b'event: open\ndata: {"connection_id":"pc_e2e"}\n\n'
HEARTBEAT = b": heartbeat\n\n"
ENDED = b"event: ended\ndata: {}\n\n"


@pytest.fixture(autouse=True)
def no_proxy_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_proxy_environment(monkeypatch)


class RawRoom:
    """One process stream, each byte written by the test in the framing it names."""

    def __init__(self, framing: str, connection: str, tls: ssl.SSLContext | None) -> None:
        self.framing = framing
        self.connection = connection
        self.tls = tls
        self.stream: trio.abc.Stream | None = None
        self.accepted = trio.Event()

    async def serve(self, *, task_status: trio.TaskStatus[int]) -> None:
        listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
        task_status.started(listeners[0].socket.getsockname()[1])
        await trio.serve_listeners(self._handle, listeners)

    async def _handle(self, stream: trio.abc.Stream) -> None:
        if self.tls is not None:
            stream = trio.SSLStream(stream, self.tls, server_side=True)
        head = b""
        while b"\r\n\r\n" not in head:
            head += await stream.receive_some(4096)
        if self.framing == "websocket":
            key = next(
                line.split(b":", 1)[1].strip()
                for line in head.split(b"\r\n")
                if line.lower().startswith(b"sec-websocket-key:")
            )
            accept = base64.b64encode(
                hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest()
            )
            await stream.send_all(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                b"Connection: Upgrade\r\nSec-WebSocket-Accept: " + accept + b"\r\n\r\n"
            )
        else:
            fields = [b"HTTP/1.1 200 OK", b"Content-Type: text/event-stream"]
            fields.append(b"Connection: " + self.connection.encode())
            if self.framing == "chunked":
                fields.append(b"Transfer-Encoding: chunked")
            elif self.framing == "sized":
                fields.append(b"Content-Length: 100000000")
            await stream.send_all(b"\r\n".join(fields) + b"\r\n\r\n")
        self.stream = stream
        self.accepted.set()
        await trio.sleep_forever()

    async def write(self, body: bytes) -> None:
        """Write ``body`` as one piece of the stream, in its framing."""
        assert self.stream is not None
        if self.framing == "chunked":
            body = b"%x\r\n%s\r\n" % (len(body), body)
        await self.stream.send_all(body)


def _ws_text(text: bytes) -> bytes:
    return bytes([0x81, len(text)]) + text


async def _acted_on_at_once(tmp_path: Path, framing: str, connection: str, tls: bool) -> None:
    """Open, name, heartbeat twice (the second kept), then end: the holder ends at once."""
    server_tls, client_tls = self_signed(tmp_path) if tls else (None, None)
    room = RawRoom(framing, connection, server_tls)
    websocket = framing == "websocket"
    opener = NetworkOpener(ssl_context=client_tls) if tls else None
    if websocket:
        opened, heartbeat = _ws_text(b'{"event":"open","connection_id":"pc_e2e"}'), b"\x89\x00"
        ended = _ws_text(b'{"event":"ended"}')
    else:
        opened, heartbeat, ended = CONNECTED + OPENED, HEARTBEAT, ENDED
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(room.serve)
            api = f"{'https' if tls else 'http'}://127.0.0.1:{port}"
            async with RoomClient(api, opener=opener) as client:
                connector: ProcessConnector = (
                    WebSocketConnector(client) if websocket else SSEConnector(client)
                )
                async with open_connection_manager(client, connector=connector) as manager:
                    with manager.subscribe(100) as events:
                        manager.hold(SESSION)
                        await room.accepted.wait()
                        await room.write(opened)
                        async for event in events:
                            if event.kind is EventKind.CONNECTION:
                                break
                        for _ in range(2):
                            await room.write(heartbeat)
                            await trio.testing.wait_all_tasks_blocked(0.05)
                        await room.write(ended)
                        with trio.fail_after(ACTED_WITHIN):
                            async for event in events:
                                if event.kind is EventKind.ENDED:
                                    break
            nursery.cancel_scope.cancel()


@pytest.mark.parametrize("tls", [False, True], ids=["tcp", "tls"])
@pytest.mark.parametrize(
    ("framing", "connection"),
    [
        ("chunked", "close"),
        ("chunked", "keep-alive"),
        ("sized", "close"),
        ("sized", "keep-alive"),
        ("close-delimited", "close"),
    ],
)
async def test_an_ended_event_after_kept_heartbeats_is_acted_on_at_once(
    tmp_path: Path, framing: str, connection: str, tls: bool
) -> None:
    await _acted_on_at_once(tmp_path, framing, connection, tls)


@pytest.mark.parametrize("tls", [False, True], ids=["tcp", "tls"])
async def test_an_ended_frame_after_a_kept_ping_is_acted_on_at_once(
    tmp_path: Path, tls: bool
) -> None:
    await _acted_on_at_once(tmp_path, "websocket", "upgrade", tls)


@pytest.mark.parametrize("tls", [False, True], ids=["tcp", "tls"])
@pytest.mark.parametrize(
    ("framing", "connection"),
    [
        ("chunked", "close"),
        ("chunked", "keep-alive"),
        ("sized", "keep-alive"),
        ("close-delimited", "close"),
    ],
)
async def test_a_lone_heartbeat_waits_in_the_kernel_and_anything_heavier_wakes_the_read(
    tmp_path: Path, framing: str, connection: str, tls: bool
) -> None:
    """What the tests above rely on: the second heartbeat really is kept, on every framing."""
    server_tls, client_tls = self_signed(tmp_path) if tls else (None, None)
    room = RawRoom(framing, connection, server_tls)
    got: list[bytes] = []
    done = trio.Event()
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(room.serve)
            opener = NetworkOpener(ssl_context=client_tls)
            origin = Origin("https" if tls else "http", "127.0.0.1", port)
            response = await start_request(opener, origin, "/process", "GET", [])
            try:
                await room.accepted.wait()
                await room.write(HEARTBEAT)
                assert await response.next_chunk() == HEARTBEAT
                keep = response.wire_size(len(HEARTBEAT))
                assert keep == len(HEARTBEAT) + 5 * (framing == "chunked") + 22 * tls

                async def reader() -> None:
                    with trio.move_on_after(60):
                        got.append(await response.next_chunk(keep=keep))
                        # Under TLS a read gives one record: the rest at once.
                        while b"".join(got) != HEARTBEAT + ENDED:
                            got.append(await response.next_chunk(keep=keep))
                        done.set()

                nursery.start_soon(reader)
                await trio.testing.wait_all_tasks_blocked(0.05)  # waiting, as a holder is
                await room.write(HEARTBEAT)
                await trio.testing.wait_all_tasks_blocked(0.1)
                assert got == []  # kept by the kernel
                await room.write(ENDED)
                with trio.fail_after(ACTED_WITHIN):
                    await done.wait()
            finally:
                await response.aclose()
            nursery.cancel_scope.cancel()
    assert b"".join(got) == HEARTBEAT + ENDED


async def test_a_quiet_read_under_tls_takes_a_kept_heartbeat_at_its_check(tmp_path: Path) -> None:
    """Nothing followed the heartbeat: read at the check, with the time it came."""
    server_tls, client_tls = self_signed(tmp_path)
    room = RawRoom("sized", "keep-alive", server_tls)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            port = await nursery.start(room.serve)
            opener = NetworkOpener(ssl_context=client_tls)
            origin = Origin("https", "127.0.0.1", port)
            response = await start_request(opener, origin, "/process", "GET", [])
            try:
                await room.accepted.wait()
                keep = response.wire_size(len(HEARTBEAT))
                with trio.move_on_after(1.5):
                    async with trio.open_nursery() as writer:

                        async def heartbeat() -> None:
                            await trio.testing.wait_all_tasks_blocked(0.05)
                            sent.append(trio.current_time())
                            await room.write(HEARTBEAT)

                        sent: list[float] = []
                        writer.start_soon(heartbeat)
                        assert await response.next_chunk(keep=keep) == HEARTBEAT
                        read_at = trio.current_time()
                assert read_at - sent[0] >= 0.4  # at the check, 1 s before the deadline
                assert response.heard_at is not None
                assert sent[0] - 0.05 <= response.heard_at <= sent[0] + 0.1
            finally:
                await response.aclose()
            nursery.cancel_scope.cancel()
