"""An httpx2 transport that serves an ASGI app in-process, streaming; and a stream opener.

httpx2's own ``ASGITransport`` runs the app to completion and buffers the whole
body, so it cannot carry an endless Server-Sent-Events stream. This transport
runs each request's app call as a task in a nursery and hands the response back
as soon as the app sends ``http.response.start``; the body then flows through a
trio memory channel, chunk by chunk, as the app sends it. Nothing touches a
socket or a thread, so ``trio.testing.MockClock(autojump_threshold=0)`` sees
every wait and timing tests stay exact.

Life of one request:

1. The request body is read whole (our requests are small JSON documents).
2. The app is started in the transport's nursery with a ``receive`` that gives
   the body once, then waits until the client goes away and answers
   ``http.disconnect`` (as a real server does).
3. ``handle_async_request`` returns when the response starts. If the app
   finishes without starting one, or fails before it, the client gets a 500
   (as from a real server) and the error is logged. An app drops the
   connection on purpose by raising :class:`~._asgi.DropConnection`: the
   client gets ``httpx2.ConnectError`` before the room acted, and
   ``httpx2.RemoteProtocolError`` after (a test's own app may also raise an
   ``httpx2.TransportError``, which reaches the client unchanged).
4. The body ends when the app sends its last chunk or returns. An
   ``httpx2.TransportError`` raised after the start reaches the client as a read
   error; any other exception ends the body with ``httpx2.ReadError``.
5. When the client closes the response (or cancels the request), the app's
   ``receive`` answers ``http.disconnect`` and later sends are dropped.

The same object is also an opener of the lean HTTP/1.1 path
(:class:`~letagents_trio._http.Opener`), so a :class:`~letagents_trio.RoomClient`
given it as ``opener=`` too sends the process connection's requests
(streams, upgrades, exits) to the same app: :meth:`StreamingASGITransport.open_stream`
hands the client one end of an in-memory stream pair and serves the other end
with :func:`~letagents_trio.testing._h11_server.serve_http1` (real HTTP/1.1
bytes, parsed by h11 on both sides) in the transport's nursery. A WebSocket
upgrade on such a connection is served there too (the app's ``websocket``
scope), so one opener carries both forms of the process connection.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, final

import attrs
import httpx2
import trio
import trio.testing

from ._asgi import ASGIApp, DropConnection, Message
from ._h11_server import serve_http1

if TYPE_CHECKING:
    from .._http import Origin

__all__ = ["ASGIApp", "StreamingASGITransport", "open_streaming_transport"]

logger = logging.getLogger("letagents_trio.testing")


# Chunks the app may send ahead of a client that is not reading. Small, like a
# socket buffer, so a slow reader slows the app down instead of growing memory.
BODY_BUFFER_CHUNKS = 16


@final
@attrs.define(eq=False)
class _Exchange:
    """The state one request shares between the client side and the app task."""

    started: trio.Event = attrs.field(factory=trio.Event)
    app_done: trio.Event = attrs.field(factory=trio.Event)
    disconnected: trio.Event = attrs.field(factory=trio.Event)
    status: int = 500
    headers: list[tuple[bytes, bytes]] = attrs.field(factory=list)
    body_send: trio.MemorySendChannel[bytes] | None = None
    failure: httpx2.TransportError | None = None
    body_error: httpx2.TransportError | None = None

    def finish_body(self, error: httpx2.TransportError | None = None) -> None:
        """End the body; with ``error``, the client's read fails once it drains."""
        if error is not None and self.body_error is None:
            self.body_error = error
        channel, self.body_send = self.body_send, None
        if channel is not None:
            channel.close()


def _answer_internal_error(exchange: _Exchange) -> None:
    exchange.status = 500
    exchange.headers = [(b"content-type", b"text/plain; charset=utf-8")]
    if exchange.body_send is not None:
        # Nothing was sent yet, so the buffer has room, unless the client left.
        with contextlib.suppress(trio.BrokenResourceError):
            exchange.body_send.send_nowait(b"Internal Server Error")


@final
class _ChannelByteStream(httpx2.AsyncByteStream):
    def __init__(
        self,
        receive: trio.MemoryReceiveChannel[bytes],
        exchange: _Exchange,
    ) -> None:
        self._receive = receive
        self._exchange = exchange

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._receive:
            yield chunk
        if self._exchange.body_error is not None:
            raise self._exchange.body_error

    async def aclose(self) -> None:
        self._exchange.disconnected.set()
        await self._receive.aclose()


@final
class StreamingASGITransport(httpx2.AsyncBaseTransport):
    """Serve an ASGI app to an ``httpx2.AsyncClient``, streaming response bodies.

    Args:
        app: the ASGI application.
        nursery: where each request's app task runs. It must outlive every
            response the client holds; :func:`open_streaming_transport` opens one.
        client: the ``(host, port)`` the app sees as the peer.
        websocket_ping_interval: seconds between the server's pings on a
            connection upgraded to a WebSocket (:meth:`open_stream`); None for none.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        nursery: trio.Nursery,
        client: tuple[str, int] = ("127.0.0.1", 50000),
        websocket_ping_interval: float | None = None,
    ) -> None:
        self._app = app
        self._nursery = nursery
        self._client = client
        self._websocket_ping_interval = websocket_ping_interval
        self._closed = False

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        """Start the app for ``request`` and return once the response starts.

        Cancellation:
            A checkpoint. Cancelled before the response starts, the app is told
            the client disconnected; nothing else is left behind.
        """
        if self._closed:
            raise httpx2.ConnectError("the in-process transport is closed", request=request)
        body = b"".join([chunk async for chunk in request.stream])  # type: ignore[union-attr]
        exchange = _Exchange()
        send_channel, receive_channel = trio.open_memory_channel[bytes](BODY_BUFFER_CHUNKS)
        exchange.body_send = send_channel
        self._nursery.start_soon(self._run_app, self._scope(request), body, exchange)
        try:
            await exchange.started.wait()
        except BaseException:
            exchange.disconnected.set()
            await receive_channel.aclose()
            raise
        if exchange.failure is not None:
            await receive_channel.aclose()
            raise exchange.failure
        return httpx2.Response(
            exchange.status,
            headers=exchange.headers,
            stream=_ChannelByteStream(receive_channel, exchange),
            request=request,
        )

    def _scope(self, request: httpx2.Request) -> dict[str, Any]:
        url = request.url
        return {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.4"},
            "http_version": "1.1",
            "method": request.method,
            "scheme": url.scheme,
            "path": url.path,
            "raw_path": url.raw_path.split(b"?")[0],
            "query_string": url.query,
            "root_path": "",
            "headers": [(k.lower(), v) for k, v in request.headers.raw],
            "server": (url.host, url.port or (443 if url.scheme == "https" else 80)),
            "client": self._client,
        }

    async def _run_app(self, scope: dict[str, Any], body: bytes, exchange: _Exchange) -> None:
        body_given = False

        async def receive() -> Message:
            nonlocal body_given
            if not body_given:
                body_given = True
                return {"type": "http.request", "body": body, "more_body": False}
            await exchange.disconnected.wait()
            return {"type": "http.disconnect"}

        async def send(message: Message) -> None:
            # Always a schedule point, like a socket write: an app that keeps
            # writing after the client left must not starve every other task.
            delivered = False
            kind = message["type"]
            if kind == "http.response.start":
                if exchange.started.is_set():
                    raise RuntimeError("the app started its response twice")
                exchange.status = int(message["status"])
                exchange.headers = [(bytes(k), bytes(v)) for k, v in message.get("headers", [])]
                exchange.started.set()
            elif kind == "http.response.body":
                if not exchange.started.is_set():
                    raise RuntimeError("the app sent a body before starting its response")
                chunk = bytes(message.get("body", b""))
                channel = exchange.body_send
                if channel is not None and chunk and not exchange.disconnected.is_set():
                    try:
                        await channel.send(chunk)
                        delivered = True
                    except (trio.BrokenResourceError, trio.ClosedResourceError):
                        exchange.disconnected.set()
                if not message.get("more_body", False):
                    exchange.finish_body()
            if not delivered:
                await trio.lowlevel.checkpoint()

        try:
            await self._app(scope, receive, send)
        except (httpx2.TransportError, DropConnection) as exc:
            error = _transport_error(exc)
            if exchange.started.is_set():
                exchange.finish_body(error)
            else:
                exchange.failure = error
        except Exception:
            logger.exception("in-process app failed on %s %s", scope["method"], scope["path"])
            if exchange.started.is_set():
                exchange.finish_body(httpx2.ReadError("the app failed mid-response"))
        finally:
            if not exchange.started.is_set() and exchange.failure is None:
                # The app failed or returned without answering: a real server
                # says 500 (once: this is the only place that answers it).
                _answer_internal_error(exchange)
            exchange.started.set()
            exchange.finish_body()
            exchange.app_done.set()

    async def open_stream(self, origin: Origin) -> trio.abc.Stream:
        """A fresh in-memory connection to the app (the lean path's seam).

        The app sees ``origin``'s host and port as the server and the
        transport's ``client`` as the peer.

        Raises:
            ConnectionRefusedError: the transport is closed.

        Cancellation:
            A checkpoint only.
        """
        if self._closed:
            raise ConnectionRefusedError("the in-process transport is closed")
        client_end, server_end = trio.testing.lockstep_stream_pair()
        self._nursery.start_soon(
            partial(
                serve_http1,
                server_end,
                self._app,
                scheme=origin.scheme,
                server=(origin.host, origin.port),
                client=self._client,
                websocket_ping_interval=self._websocket_ping_interval,
            )
        )
        await trio.lowlevel.checkpoint()
        return client_end

    async def aclose(self) -> None:
        """Nothing to close: the transport lives as long as its nursery.

        Several clients may share one transport (a ``FakeRoom`` gives the same
        one to each of its clients, and httpx2 closes a client's transport with
        the client), so closing one client must not cut off the others. The
        transport stops taking requests when :func:`open_streaming_transport`'s
        block ends.

        Cancellation:
            A checkpoint only.
        """
        await trio.lowlevel.checkpoint()


@asynccontextmanager
async def open_streaming_transport(
    app: ASGIApp, *, client: tuple[str, int] = ("127.0.0.1", 50000)
) -> AsyncIterator[StreamingASGITransport]:
    """Open a :class:`StreamingASGITransport` with a nursery of its own.

    On leaving the block, app tasks still running (endless streams) are cancelled.

    Cancellation:
        Leaving the block cancels every app task the transport started.
    """
    async with trio.open_nursery() as nursery:
        transport = StreamingASGITransport(app, nursery=nursery, client=client)
        try:
            yield transport
        finally:
            transport._closed = True
            nursery.cancel_scope.cancel(reason="in-process transport closed")


def _transport_error(exc: httpx2.TransportError | DropConnection) -> httpx2.TransportError:
    """What the client sees of a connection the app dropped."""
    if isinstance(exc, httpx2.TransportError):
        return exc
    if exc.after_commit:
        return httpx2.RemoteProtocolError("the room dropped the connection before its answer")
    return httpx2.ConnectError("the room refused the connection")
