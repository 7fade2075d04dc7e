"""A tiny HTTP/1.1 server over one in-memory stream: serve an ASGI app with h11.

The lean HTTP/1.1 path (:mod:`letagents_trio._http`) writes real HTTP/1.1 bytes; in
tests they go over a ``trio.testing.lockstep_stream_pair`` to this server,
which parses them with h11 and calls the app, so every holder and manager test
exercises the client's own framing. Nothing touches a socket or a thread:
``MockClock(autojump_threshold=0)`` sees every wait. The lockstep pair has no
buffer at all, so a room that writes faster than the client reads is held back
at once, as a full socket would hold it.

One connection, its requests read as they come and answered in order, as
Node's server (the letagents room's) answers pipelined requests:

1. Each request's head and body are read whole (ours are small), and the app
   is called for it at once, even while earlier requests are still being
   answered; its ``receive`` gives the body once, then waits until the
   client closes the connection and answers ``http.disconnect``. The task
   that reads the requests is the one that sees that close.
2. The answers go out in the order of the requests, each as its app sends
   it: ``http.response.start`` writes the head at once when the answer's
   turn has come (an event stream's headers must not wait for its first
   event); each body message is written as it comes, chunked unless the app
   set ``content-length``. An app whose answer's turn has not come waits in
   its ``send``, as it would on a full socket.
4. An upgrade to a WebSocket (``Upgrade: websocket``) ends the HTTP/1.1 part:
   the request's bytes, and any read past them, are handed to
   :func:`~letagents_trio.testing._websocket.serve_websocket`, which answers
   the upgrade and serves the app's ``websocket`` scope on the same stream,
   as hypercorn does over a socket.
5. Failures look as they would from a real server on a real network: a
   :class:`~._asgi.DropConnection` the app raises on purpose (a FakeRoom
   rule dropping a request; a test's own app may raise an
   ``httpx2.TransportError`` for a reset) closes the connection without
   another byte once its answer's turn comes;
   any other exception before the response started is a 500 (and logged),
   after it a connection cut mid-body; an app that returns without answering
   gets a 500.
"""

from __future__ import annotations

import logging
import math
from collections.abc import MutableMapping
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import h11
import httpx2
import trio

from ._asgi import DropConnection
from ._websocket import serve_websocket

if TYPE_CHECKING:
    from ._asgi import ASGIApp, Message

__all__ = ["serve_http1"]

logger = logging.getLogger("letagents_trio.testing")

# One read from the in-memory stream.
_READ_SIZE = 65_536
# What the peer going away looks like from this side.
_GONE = (trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError)


async def serve_http1(
    stream: trio.abc.Stream,
    app: ASGIApp,
    *,
    scheme: str,
    server: tuple[str, int],
    client: tuple[str, int],
    websocket_ping_interval: float | None = None,
) -> None:
    """Serve requests on ``stream`` with ``app`` until either side closes it.

    Args:
        stream: the server's end of the connection.
        app: the ASGI application.
        scheme: the scheme the app sees (``http`` or ``https``).
        server: the ``(host, port)`` the app sees as the server.
        client: the ``(host, port)`` the app sees as the peer.
        websocket_ping_interval: seconds between the server's pings on an
            upgraded connection; None for none.

    Cancellation:
        Cancelled (the transport's nursery closing), the stream is closed.
    """
    conn = h11.Connection(h11.SERVER)
    disconnected = trio.Event()
    send_replies, receive_replies = trio.open_memory_channel[_Reply](math.inf)
    upgrade: bytes | None = None
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                _write_replies, stream, receive_replies, disconnected, nursery.cancel_scope
            )
            async with send_replies:
                while True:
                    try:
                        request = await _next_request(stream, conn)
                    except _GONE:
                        request = None
                    if request is None:
                        disconnected.set()
                        break
                    head, body = request
                    if _is_websocket_upgrade(head):
                        # The rest of the connection is the WebSocket's (h11 kept
                        # any bytes read past the request: the first frames, maybe).
                        upgrade = _request_bytes(head) + bytes(conn.trailing_data[0])
                        break
                    reply = _Reply(head, body)
                    await send_replies.send(reply)
                    scope = _scope(head, scheme, server, client)
                    nursery.start_soon(_serve_one, reply, app, scope, body, disconnected)
                    if reply.conn.their_state is not h11.DONE:
                        # The client said this is its last request: watch for its close.
                        await _wait_closed(stream, disconnected)
                        break
                    conn = _next_connection(conn)
        if upgrade is not None:
            await serve_websocket(
                app,
                stream,
                ping_interval=websocket_ping_interval,
                client=client,
                initial=upgrade,
            )
    except _GONE:
        return
    finally:
        await trio.aclose_forcefully(stream)


class _Reply:
    """One request's answer: its own h11 state, and its bytes on their way to the writer."""

    def __init__(self, head: h11.Request, body: bytes) -> None:
        # Told the request again, so that h11 frames the answer as it should.
        self.conn = h11.Connection(h11.SERVER)
        self.conn.receive_data(_request_bytes(head) + _framed(head, body))
        while type(self.conn.next_event()) is not h11.EndOfMessage:
            pass
        self.send, self.receive = trio.open_memory_channel[bytes](0)
        # Closed without another byte when its turn comes.
        self.abort = False


def _framed(head: h11.Request, body: bytes) -> bytes:
    """``body`` as the request carried it: chunked when it said so."""
    chunked = any(
        name == b"transfer-encoding" and b"chunked" in value.lower() for name, value in head.headers
    )
    if not chunked:
        return body
    return (b"%x\r\n%s\r\n" % (len(body), body) if body else b"") + b"0\r\n\r\n"


def _next_connection(conn: h11.Connection) -> h11.Connection:
    """A fresh h11 server state for the next request, holding what was read past this one."""
    leftover, closed = conn.trailing_data
    fresh = h11.Connection(h11.SERVER)
    if leftover:
        fresh.receive_data(bytes(leftover))
    if closed:
        fresh.receive_data(b"")
    return fresh


async def _wait_closed(stream: trio.abc.Stream, disconnected: trio.Event) -> None:
    """Read and drop what the client sends until it closes the connection."""
    try:
        while await stream.receive_some(_READ_SIZE):
            pass
    except _GONE:
        pass
    disconnected.set()


async def _write_replies(
    stream: trio.abc.Stream,
    replies: trio.MemoryReceiveChannel[_Reply],
    disconnected: trio.Event,
    serving: trio.CancelScope,
) -> None:
    """Write each answer in the order of the requests; the connection ends with one that says so.

    Ending it cancels ``serving`` (the reading, and the apps still at work).
    """
    async with replies:
        async for reply in replies:
            async with reply.receive:
                async for data in reply.receive:
                    if data and not disconnected.is_set():
                        try:
                            await stream.send_all(data)
                        except _GONE:
                            disconnected.set()
            # Cut without another byte, or the connection ends after this answer.
            done = reply.conn.our_state is h11.DONE and reply.conn.their_state is h11.DONE
            if reply.abort or not done:
                serving.cancel()
                return


async def _next_request(
    stream: trio.abc.Stream, conn: h11.Connection
) -> tuple[h11.Request, bytes] | None:
    head: h11.Request | None = None
    chunks: list[bytes] = []
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(bytes(await stream.receive_some(_READ_SIZE)))
        elif isinstance(event, h11.Request):
            head = event
        elif isinstance(event, h11.Data):
            chunks.append(bytes(event.data))
        elif isinstance(event, h11.EndOfMessage):
            assert head is not None
            return head, b"".join(chunks)
        else:
            # ConnectionClosed (the client left between requests) or PAUSED.
            return None


def _is_websocket_upgrade(head: h11.Request) -> bool:
    return any(name == b"upgrade" and b"websocket" in value.lower() for name, value in head.headers)


def _request_bytes(head: h11.Request) -> bytes:
    """The request head as the client wrote it (wsproto's server parses it again)."""
    lines = [b"%s %s HTTP/1.1" % (head.method, head.target)]
    lines.extend(b"%s: %s" % (name, value) for name, value in head.headers.raw_items())
    return b"\r\n".join(lines) + b"\r\n\r\n"


def _scope(
    head: h11.Request, scheme: str, server: tuple[str, int], client: tuple[str, int]
) -> dict[str, Any]:
    target = bytes(head.target)
    raw_path, _, query = target.partition(b"?")
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.4"},
        "http_version": "1.1",
        "method": head.method.decode("ascii"),
        "scheme": scheme,
        "path": unquote(raw_path.decode("latin-1")),
        "raw_path": raw_path,
        "query_string": query,
        "root_path": "",
        "headers": [(bytes(k), bytes(v)) for k, v in head.headers],
        "server": server,
        "client": client,
    }


async def _serve_one(
    reply: _Reply,
    app: ASGIApp,
    scope: MutableMapping[str, Any],
    body: bytes,
    disconnected: trio.Event,
) -> None:
    """Serve one request: its answer goes to ``reply``, to be written in its turn."""
    conn = reply.conn
    started = False
    ended = False
    body_given = False
    head = b""

    async def write(event: h11.Event) -> None:
        nonlocal head
        data = head + (conn.send(event) or b"")
        head = b""
        if data and not disconnected.is_set():
            try:
                await reply.send.send(data)
                return
            except trio.BrokenResourceError:
                disconnected.set()
        await trio.lowlevel.checkpoint()

    async def receive() -> Message:
        nonlocal body_given
        if not body_given:
            body_given = True
            await trio.lowlevel.checkpoint()
            return {"type": "http.request", "body": body, "more_body": False}
        if head:
            await write(h11.Data(data=b""))
        await disconnected.wait()
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        nonlocal started, ended, head
        kind = message["type"]
        if kind == "http.response.start":
            if started:
                raise RuntimeError("the app started its response twice")
            started = True
            headers = [(bytes(k), bytes(v)) for k, v in message.get("headers", [])]
            # Kept until the app's next move (a body or a wait), so the head and
            # the first bytes go in one write, as they usually do over TCP.
            head = (
                conn.send(h11.Response(status_code=int(message["status"]), headers=headers)) or b""
            )
            await trio.lowlevel.checkpoint()
        elif kind == "http.response.body":
            if not started:
                raise RuntimeError("the app sent a body before starting its response")
            if ended:
                await trio.lowlevel.checkpoint()
                return
            chunk = bytes(message.get("body", b""))
            if chunk or head:
                await write(h11.Data(data=chunk))
            else:
                await trio.lowlevel.checkpoint()
            if not message.get("more_body", False):
                ended = True
                await write(h11.EndOfMessage())
        else:
            await trio.lowlevel.checkpoint()

    async with reply.send:
        try:
            await app(scope, receive, send)
        except (httpx2.TransportError, DropConnection):
            reply.abort = True
        except Exception:
            logger.exception("in-process app failed on %s %s", scope["method"], scope["path"])
            reply.abort = started
        if reply.abort:
            return
        if head:
            await write(h11.Data(data=b""))
        if disconnected.is_set():
            return
        if not started:
            payload = b"Internal Server Error"
            headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"content-length", b"21")]
            await write(h11.Response(status_code=500, headers=headers))
            await write(h11.Data(data=payload))
            ended = True
            await write(h11.EndOfMessage())
        elif not ended:
            await write(h11.EndOfMessage())
