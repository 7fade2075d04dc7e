"""An in-memory WebSocket server for an ASGI app: the testing kit's side of PROTOCOL §3.1.

:func:`serve_websocket` speaks the server side of one WebSocket connection
over any ``trio.abc.Stream`` (in tests, one end of an in-memory stream pair)
and runs the app's ``websocket`` scope on it, as hypercorn does over a
socket: the upgrade request becomes ``websocket.connect``; ``websocket.accept``
answers 101; ``websocket.http.response.*`` answers any HTTP status (the ASGI
extension hypercorn also offers); ``websocket.close`` before accepting answers
403. The kit's own message ``testing.websocket.mute`` makes the server a dead
peer from then on (no frames, no pings, no pongs: a half-open connection).
Client text frames become ``websocket.receive``, a client close or EOF
``websocket.disconnect``; client pings are answered, and the server pings every
``ping_interval`` seconds (hypercorn's ``websocket_ping_interval``). Nothing
here touches a socket or a thread, so ``MockClock`` drives every wait.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any, Final

import trio
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    CloseConnection,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)
from wsproto.utilities import LocalProtocolError, RemoteProtocolError

if TYPE_CHECKING:
    from ._asgi import ASGIApp

__all__ = ["serve_websocket"]

logger = logging.getLogger("letagents_trio.testing")

Message = MutableMapping[str, Any]
# Bytes read at once; the frames of the process socket are tiny.
RECEIVE_BYTES: Final = 16 * 1024
# Messages from the client the app has not taken yet: bounded, like a socket buffer.
INBOX_MESSAGES: Final = 16
# Writes queued for the peer: a small send buffer, so that the reader's pongs
# never wait on a peer that is itself writing (two unbuffered writers would
# deadlock, which two sockets with buffers never do).
OUTBOX_WRITES: Final = 16
_ABNORMAL_CLOSURE: Final = 1006


async def serve_websocket(
    app: ASGIApp,
    stream: trio.abc.Stream,
    *,
    ping_interval: float | None = None,
    client: tuple[str, int] = ("127.0.0.1", 50000),
    initial: bytes = b"",
) -> None:
    """Serve one WebSocket connection on ``stream`` with ``app`` until it closes.

    Args:
        app: the ASGI application (its ``websocket`` scope).
        stream: the server's end of the byte stream.
        ping_interval: seconds between the server's pings; None for none.
        client: the peer address the app sees.
        initial: bytes of the request already read from ``stream``.

    Cancellation:
        A checkpoint; cancelled, the stream is closed without a close frame.
    """
    ws = WSConnection(ConnectionType.SERVER)
    try:
        request = await _read_request(ws, stream, initial)
        if request is None:
            return
        await _Session(app, stream, ws, request, ping_interval, client).run()
    finally:
        await trio.aclose_forcefully(stream)


async def _read_request(ws: WSConnection, stream: trio.abc.Stream, data: bytes) -> Request | None:
    while True:
        if data:
            try:
                ws.receive_data(data)
            except RemoteProtocolError:
                await _send_quietly(
                    stream, b"HTTP/1.1 400 Bad Request\r\ncontent-length: 0\r\n\r\n"
                )
                return None
            for event in ws.events():
                if isinstance(event, Request):
                    return event
        try:
            data = bytes(await stream.receive_some(RECEIVE_BYTES))
        except trio.BrokenResourceError:
            return None
        if not data:
            return None


async def _send_quietly(stream: trio.abc.Stream, data: bytes) -> None:
    with contextlib.suppress(trio.BrokenResourceError, trio.ClosedResourceError):
        await stream.send_all(data)


class _Session:
    """One served connection: the app's task, the reader and the pinger."""

    def __init__(
        self,
        app: ASGIApp,
        stream: trio.abc.Stream,
        ws: WSConnection,
        request: Request,
        ping_interval: float | None,
        client: tuple[str, int],
    ) -> None:
        self._app = app
        self._stream = stream
        self._ws = ws
        self._ping_interval = ping_interval
        self._client = client
        self._inbox_send, self._inbox = trio.open_memory_channel[Message](INBOX_MESSAGES)
        self._connected = False
        self._accepted = False
        self._closed = False
        self._muted = False
        self._response: Message | None = None
        self._nursery: trio.Nursery | None = None
        # The app, the reader's pongs and the pinger all write through one
        # queue, in order; one task writes it out.
        self._outbox_send, self._outbox = trio.open_memory_channel[bytes](OUTBOX_WRITES)
        self._written = trio.Event()
        path, _, query = request.target.partition("?")
        self._scope: dict[str, Any] = {
            "type": "websocket",
            "asgi": {"version": "3.0", "spec_version": "2.4"},
            "http_version": "1.1",
            "scheme": "ws",
            "path": path,
            "raw_path": path.encode("latin-1"),
            "query_string": query.encode("latin-1"),
            "root_path": "",
            "headers": [
                (bytes(k).lower(), bytes(v))
                for k, v in [(b"host", request.host.encode("latin-1")), *request.extra_headers]
            ],
            "client": client,
            "server": (request.host, 80),
            "subprotocols": list(request.subprotocols),
            "extensions": {"websocket.http.response": {}},
        }

    async def run(self) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            nursery.start_soon(self._write_out)
            try:
                await self._app(self._scope, self._receive, self._send)
            except Exception:
                logger.exception("in-process socket app failed on %s", self._scope["path"])
            if not self._accepted and not self._closed:
                await self._reject(500, [], b"")
            elif self._accepted and not self._closed:
                await self._write(CloseConnection(code=1011))
            # What is queued reaches the peer before the stream closes, as a
            # socket's buffer is flushed when it is closed.
            self._outbox_send.close()
            await self._written.wait()
            nursery.cancel_scope.cancel(reason="socket app returned")

    async def _receive(self) -> Message:
        if not self._connected:
            self._connected = True
            await trio.lowlevel.checkpoint()
            return {"type": "websocket.connect"}
        try:
            return await self._inbox.receive()
        except trio.EndOfChannel:
            return {"type": "websocket.disconnect", "code": _ABNORMAL_CLOSURE}

    async def _send(self, message: Message) -> None:
        kind = message["type"]
        if self._closed:
            await trio.lowlevel.checkpoint()
            return
        if kind == "websocket.accept" and not self._accepted:
            self._accepted = True
            await self._write(AcceptConnection())
            assert self._nursery is not None
            self._nursery.start_soon(self._read)
            if self._ping_interval is not None:
                self._nursery.start_soon(self._ping)
        elif kind == "websocket.http.response.start" and not self._accepted:
            self._response = message
            await trio.lowlevel.checkpoint()
        elif kind == "websocket.http.response.body" and self._response is not None:
            await self._reject(
                int(self._response["status"]),
                list(self._response.get("headers", [])),
                bytes(message.get("body", b"")),
            )
        elif kind == "websocket.close" and not self._accepted:
            await self._reject(403, [], b"")
        elif kind == "websocket.send" and self._accepted:
            await self._write(TextMessage(data=str(message["text"])))
        elif kind == "websocket.close":
            await self._write(CloseConnection(code=int(message.get("code", 1000))))
        elif kind == "testing.websocket.mute":
            self._muted = True
            await trio.lowlevel.checkpoint()
        else:
            raise RuntimeError(f"unexpected ASGI message {kind!r}")

    async def _reject(self, status: int, headers: list[Any], body: bytes) -> None:
        self._closed = True
        data = self._ws.send(
            RejectConnection(
                status_code=status,
                headers=[(bytes(k), bytes(v)) for k, v in headers],
                has_body=True,
            )
        )
        data += self._ws.send(RejectData(data=body, body_finished=True))
        await self._queue(data)

    async def _write(self, event: Any) -> None:
        if self._muted:
            await trio.lowlevel.checkpoint()
            return
        try:
            data = self._ws.send(event)
        except LocalProtocolError:
            await trio.lowlevel.checkpoint()
            return
        await self._queue(data)

    async def _queue(self, data: bytes) -> None:
        try:
            await self._outbox_send.send(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            # The connection is closing or gone: nothing more reaches the peer.
            await trio.lowlevel.checkpoint()

    async def _write_out(self) -> None:
        """Write the queued bytes in order; close the stream when the queue closes.

        The queue closes when the app is done or the peer has gone; a peer
        gone mid-write ends it early (later writes are dropped).
        """
        try:
            async with self._outbox:
                async for data in self._outbox:
                    await self._stream.send_all(data)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass
        finally:
            self._written.set()
            await trio.aclose_forcefully(self._stream)

    async def _read(self) -> None:
        code = _ABNORMAL_CLOSURE
        try:
            while True:
                try:
                    data = bytes(await self._stream.receive_some(RECEIVE_BYTES))
                except (trio.BrokenResourceError, trio.ClosedResourceError):
                    data = b""
                if self._muted and data:
                    continue
                self._ws.receive_data(data or None)
                for event in self._ws.events():
                    if isinstance(event, TextMessage) and event.message_finished:
                        await self._inbox_send.send(
                            {"type": "websocket.receive", "text": event.data}
                        )
                    elif isinstance(event, Ping):
                        await self._write(event.response())
                    elif isinstance(event, CloseConnection):
                        code = event.code
                        with contextlib.suppress(LocalProtocolError):
                            await self._write(event.response())
                        return
                if not data:
                    return
        finally:
            self._closed = True
            with contextlib.suppress(trio.WouldBlock, trio.BrokenResourceError):
                self._inbox_send.send_nowait({"type": "websocket.disconnect", "code": code})
            self._inbox_send.close()
            # What is queued (the close echo) still goes out; then the stream closes.
            self._outbox_send.close()

    async def _ping(self) -> None:
        assert self._ping_interval is not None
        while not self._closed:
            await trio.sleep(self._ping_interval)
            await self._write(Ping())
