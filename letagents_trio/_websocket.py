"""The process connection over a WebSocket (PROTOCOL §3.1, our extension).

:class:`WebSocketConnector` is a :class:`~letagents_trio._connector.ProcessConnector`
beside the SSE one: the holder's state machine, outcomes and delays are the
same code whichever connector it is given. The socket is driven sans-IO with
wsproto's frame layer over any ``trio.abc.Stream`` (a TCP or TLS stream, or
an in-memory one in tests), so one held socket costs one stream, one wsproto
``Connection`` and no task of its own. The upgrade goes through the same seam
as the SSE request, :meth:`RoomClient.open_request
<letagents_trio.RoomClient.open_request>` (``tunnel=True``): the socket gets
the client's opener (TCP with cached resolution, TLS with the system trust
store, proxies from the environment through ``CONNECT``; in tests the
in-memory server) and, on ``101``, the raw stream from
:meth:`~letagents_trio._http1.HTTP1Response.detach`.

One socket's life:

1. **Upgrade**: ``GET …/process`` with ``Upgrade: websocket`` and the same
   credential headers as the SSE request. ``101`` with the right
   ``Sec-WebSocket-Accept`` opens it. Any other answer maps to the SSE
   outcomes (:func:`classify_upgrade`): 410 ended, 404/405 unsupported, 5xx
   dropped, other 4xx refused; a 2xx (a room that ignored the upgrade and
   answered as it would an SSE request) is unsupported too.
2. **News**: every chunk read is one :class:`StreamNews` (so the holder's
   silence deadline re-arms on pings too); the ``open`` text frame names the
   connection and ``ended`` ends the session. The room's pings are answered.
3. **Liveness**: the read waits at most ``ping_interval`` for a byte; then
   the client pings, and a socket silent ``pong_timeout`` longer is dropped
   (:class:`~letagents_trio.RoomUnreachable`). The deadline lives in the read
   itself: no timer task per socket.
4. **Goodbye** (:meth:`WebSocketConnector.goodbye`): while the socket is
   still open, the exit frame ``{"event":"exit","process_connection_id":…}``
   and a normal close go out in one write, and the socket is closed at once:
   the goodbye never waits on a closing handshake (what was written before
   the close reaches the room even if the close resets the connection; what
   the room sent meanwhile is read and dropped first, so that the close is an
   orderly end). After the exit, a socket that closes or breaks ends the
   holder's attempt as a stop (:class:`~letagents_trio._connector.StreamLeft`),
   never a drop; the room's answering close is not parsed. A
   session with no open socket, or one that cannot take the frame, falls back
   to ``POST …/process/exit`` inside the same shielded deadline.

:class:`AutoConnector` tries the WebSocket first and falls back to SSE for a
room (origin and room id) whose answer to the upgrade is ``unsupported``,
remembering it. :func:`connector_for` picks by ``HoldPolicy.transport``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import logging
import os
import types
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Final, NoReturn, final

import trio
from wsproto.connection import Connection, ConnectionState, ConnectionType
from wsproto.events import CloseConnection, Ping, TextMessage

from ._connector import AttemptRejected, ProcessConnector, SSEConnector, StreamLeft, StreamNews
from ._errors import RoomUnreachable, StreamProtocolError
from ._http1 import can_send_now, close_now, discard_unread, read_some, send_now
from ._policy import HoldPolicy, Outcome

if TYPE_CHECKING:
    from ._client import RoomClient
    from ._http1 import HTTP1Response
    from ._session import AgentSession

__all__ = [
    "AutoConnector",
    "WebSocketConnector",
    "classify_upgrade",
    "connector_for",
]

logger = logging.getLogger("letagents_trio.transport")

# RFC 6455, section 1.3: the key's accept value is SHA-1 over the key and this GUID.
_WEBSOCKET_GUID: Final = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"
# The upgrade's own headers (RFC 6455, section 4.1), beside the credentials;
# no-store as on the SSE request: no cache in between may answer for the room.
_UPGRADE_HEADERS: Final = {
    "Upgrade": "websocket",
    "Connection": "Upgrade",
    "Sec-WebSocket-Version": "13",
    "Cache-Control": "no-store",
}
# Bytes asked for per read: the room's frames are tens of bytes.
RECEIVE_BYTES: Final = 4096
# The normal close code (RFC 6455, section 7.4.1).
_NORMAL_CLOSURE: Final = 1000
# Connection ids are UUIDs; anything longer is not one and is not kept.
_MAX_CONNECTION_ID: Final = 128
# Rooms remembered as SSE-only by AutoConnector; past this, none are added.
MAX_REMEMBERED_ROOMS: Final = 4096


def classify_upgrade(status: int) -> Outcome | None:
    """The outcome of an answer to the upgrade, or None when it opens the socket (101)."""
    if status == 101:
        return None
    if status == 410:
        return Outcome.ENDED
    if status in (404, 405) or 200 <= status < 300:
        # 2xx: a room that ignored the upgrade (it may well serve SSE).
        return Outcome.UNSUPPORTED
    if status >= 500:
        return Outcome.DROPPED
    return Outcome.REFUSED


def _accept_value(key: bytes) -> str:
    return base64.b64encode(hashlib.sha1(key + _WEBSOCKET_GUID).digest()).decode("ascii")


def _exit_frames(connection_id: str | None) -> bytes:
    """The exit frame and a normal close, as a client writes them (each with a fresh mask).

    Serialized by a connection of their own, so that they can be made before
    they are sent: WebSocket frames stand alone, and the socket's own
    connection sends nothing after them.
    """
    text = json.dumps(
        {"event": "exit", "process_connection_id": connection_id}, separators=(",", ":")
    )
    frames = Connection(ConnectionType.CLIENT)
    return frames.send(TextMessage(data=text)) + frames.send(CloseConnection(code=_NORMAL_CLOSURE))


@final
class _Socket:
    """One open process socket: the stream, its wsproto connection and its clock."""

    def __init__(
        self,
        stream: trio.abc.Stream,
        ws: Connection,
        *,
        ping_interval: float,
        pong_timeout: float,
        max_event_bytes: int,
    ) -> None:
        self._stream = stream
        self._ws = ws
        self._ping_interval = ping_interval
        self._pong_timeout = pong_timeout
        self._max_event_bytes = max_event_bytes
        self._deadline = trio.current_time() + ping_interval
        self._awaiting_pong = False
        self._text: list[str] = []
        self._text_size = 0
        self._finished = False
        self._reply = b""
        # The part of the exit the kernel could not take at once (send_exit sends it).
        self._unsent = b""
        # Set once the exit and the close are written whole: the socket may close then.
        self._exit_written = False
        self._send_lock = trio.Lock()
        self.connection_id: str | None = None
        # The exit naming connection_id, ready to be written (see _exit_bytes).
        self._exit = b""
        # Set once the exit frame is on its way: no more news, nothing more sent.
        self.leaving = False

    def __aiter__(self) -> _Socket:
        return self

    async def __anext__(self) -> StreamNews:
        news = self._news()
        while news is None:
            if self._finished:
                await self._flush()
                raise StopAsyncIteration
            data = b""
            try:
                data = await self._receive()
            except RoomUnreachable:
                # After the exit frame a broken or closed socket is expected.
                if not self.leaving:
                    raise
            if self.leaving:
                await self._leave(answered=bool(data))
            if data:
                self._ws.receive_data(data)
                # Every chunk is news, a ping included: it re-arms the holder's silence.
                news = self._news() or StreamNews()
            else:
                self._ws.receive_data(None)
                self._finished = True
        return news

    def _news(self) -> StreamNews | None:
        """The news in the events wsproto has; None when it has none."""
        connection_id: str | None = None
        ended = False
        seen = False
        for event in self._ws.events():
            seen = True
            if isinstance(event, TextMessage):
                text = self._message(event)
                if text is not None:
                    kind, named = _server_frame(text)
                    connection_id = named or connection_id
                    ended = ended or kind == "ended"
            elif isinstance(event, Ping) and self._ws.state is ConnectionState.OPEN:
                self._reply += self._ws.send(event.response())
            elif isinstance(event, CloseConnection):
                self._finished = True
                if self._ws.state is ConnectionState.REMOTE_CLOSING:
                    self._reply += self._ws.send(event.response())
        if not seen:
            return None
        if connection_id is not None:
            self.connection_id = connection_id
            # Made now rather than at the goodbye, where ten thousand sockets
            # would spend 0.16 s on them (wsproto frames at ~8 µs each).
            self._exit = _exit_frames(connection_id)
        return StreamNews(connection_id=connection_id, ended=ended)

    def _message(self, event: TextMessage) -> str | None:
        self._text_size += len(event.data)
        if self._text_size > self._max_event_bytes:
            raise StreamProtocolError("a frame on the process socket is too large")
        self._text.append(event.data)
        if not event.message_finished:
            return None
        text = "".join(self._text)
        self._text.clear()
        self._text_size = 0
        return text

    async def _receive(self) -> bytes:
        """Read one chunk, pinging after ``ping_interval`` of silence."""
        await self._flush()
        while True:
            with trio.move_on_at(self._deadline):
                try:
                    data = await read_some(self._stream, RECEIVE_BYTES)
                except (trio.BrokenResourceError, trio.ClosedResourceError) as exc:
                    raise RoomUnreachable(f"process socket broke: {type(exc).__name__}") from exc
                self._deadline = trio.current_time() + self._ping_interval
                self._awaiting_pong = False
                return data
            if self._awaiting_pong or self.leaving:
                raise RoomUnreachable("process socket: no pong within the pong timeout")
            if self._ws.state is ConnectionState.OPEN:
                self._reply += self._ws.send(Ping())
            await self._flush()
            self._awaiting_pong = True
            self._deadline = trio.current_time() + self._pong_timeout

    async def _flush(self) -> None:
        """Send the pongs and pings (or the close echo) waiting to go.

        Written at once when the socket takes them (:func:`send_now`: a pong
        is one small write), else in turn with any other sender.
        """
        data, self._reply = self._reply, b""
        if not data or self.leaving:
            return
        try:
            if not self._send_lock.locked():
                sent = send_now(self._stream, data)
                data = data[sent:] if sent is not None else data
                if not data:
                    return
            async with self._send_lock:
                await self._stream.send_all(data)
        except (OSError, trio.BrokenResourceError, trio.ClosedResourceError) as exc:
            raise RoomUnreachable(f"process socket broke: {type(exc).__name__}") from exc

    def _exit_bytes(self, connection_id: str | None) -> bytes | None:
        """Mark the socket leaving; the exit frame and a normal close, serialized.

        None when the socket cannot take them (already leaving, finished, closing).
        From here on the reader sends nothing more: no pong may follow the close.
        The frames naming the connection the room opened were made when it
        named it; others (an exit naming none) are made here.
        """
        if self.leaving or self._finished or self._ws.state is not ConnectionState.OPEN:
            return None
        self.leaving = True
        if connection_id is not None and connection_id == self.connection_id:
            return self._exit
        return _exit_frames(connection_id)

    def send_exit_now(self, connection_id: str | None) -> bool | None:
        """Write the exit frame and a normal close at once, without a checkpoint.

        Returns:
            True when both were written whole. None when they cannot be
            written at once and nothing was done (not a plain socket, or a
            pong is on its way). False otherwise: the socket cannot take the
            exit (closed, broken), or the kernel took only part of it, and
            :meth:`send_exit` must send the rest.
        """
        if self._send_lock.locked() or not can_send_now(self._stream):
            return None
        data = self._exit_bytes(connection_id)
        if data is None:
            return False
        try:
            sent = send_now(self._stream, data)
        except OSError:
            return False
        self._unsent = data[sent or 0 :]
        self._exit_written = not self._unsent
        return self._exit_written

    async def send_exit(self, connection_id: str | None) -> bool:
        """Send the exit frame and a normal close; whether the socket took them.

        At once when it can (:meth:`send_exit_now`); what the kernel could not
        take at once, or all of it on a stream that cannot be written so, goes
        out in turn with the reader's pongs.

        Cancellation:
            A checkpoint; under the caller's exit deadline.
        """
        sent = self.send_exit_now(connection_id)
        if sent:
            await trio.lowlevel.cancel_shielded_checkpoint()
            return True
        data = self._exit_bytes(connection_id) if sent is None else self._unsent
        self._unsent = b""
        if not data:
            await trio.lowlevel.checkpoint()
            return False
        async with self._send_lock:
            try:
                await self._stream.send_all(data)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                return False
        self._exit_written = True
        return True

    async def _leave(self, *, answered: bool) -> NoReturn:
        """The reader woke after the exit began: end the attempt as a stop, or wait to be stopped.

        - The exit is written whole and nothing more can come (the socket was
          closed, by the goodbye that wrote it or by the room, or broke, or
          stayed silent past the ping deadline): the attempt ends here, as a
          stop and not a drop (:class:`~letagents_trio._connector.StreamLeft`,
          raised outside any except block so that no network error is chained
          to it). The holder unwinds in this one wake-up.
        - The room answered (its closing frame, or a ping that crossed the
          exit): the answer is not even parsed, and the reader waits to be
          stopped. The manager stops the holders once every exit that could go
          at once is written, so ten thousand answers arriving meanwhile do
          not unwind ten thousand holders between two exits.
        - The exit is still being written: the socket stays open for the
          writer, and the reader waits to be stopped.
        """
        if self._exit_written and not answered:
            raise StreamLeft("process exit")
        await trio.sleep_forever()
        raise AssertionError("unreachable")  # pragma: no cover

    def release(self) -> None:
        """Let wsproto's parser go now, not at the collector's next full pass.

        wsproto's frame parser is a generator that refers back to the object
        holding it: a reference cycle per socket, which only the cyclic GC
        frees. At ten thousand sockets that is 50,000 objects left for a full
        pass after every goodbye or reconnection wave (measured: 0.09 s at the
        process's exit). Closing the generator breaks the cycle, so reference
        counting frees it all at once. The attributes are wsproto's own
        (1.2 to 1.3), looked up defensively: without them nothing is done.
        Only for a socket that is done with: nothing can be read after it,
        and after an exit what the room sent meanwhile is read and dropped.
        """
        parser = getattr(getattr(self._ws, "_proto", None), "_parse_more", None)
        if isinstance(parser, types.GeneratorType):
            parser.close()
        if self.leaving:
            # After the exit, the close that follows must be an orderly end,
            # not a reset that could cost the room the exit (see discard_unread).
            discard_unread(self._stream)

    async def aclose(self) -> None:
        """Close the socket: at once when it can be (:meth:`close`), else forcefully.

        Cancellation:
            Closes even when cancelled; a checkpoint only when :meth:`close`
            could not close the stream synchronously.
        """
        if not self.close():
            await trio.aclose_forcefully(self._stream)

    def close(self) -> bool:
        """Close the socket now, without a checkpoint; False when only the holder can.

        The reader waiting on it wakes, sees :attr:`leaving` and ends the
        attempt with :class:`~letagents_trio._connector.StreamLeft`. After
        an exit, what the room sent meanwhile is read and dropped first, so
        that the close is an orderly end (see :meth:`release`).
        """
        if self.leaving:
            discard_unread(self._stream)
        return close_now(self._stream)


def _server_frame(text: str) -> tuple[str | None, str | None]:
    """The ``event`` of a server text frame and the connection id it names, if any."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        logger.debug("ignoring a process-socket frame that is not JSON")
        return None, None
    if not isinstance(value, dict):
        return None, None
    event = value.get("event")
    kind = event if isinstance(event, str) else None
    named = value.get("connection_id") if kind == "open" else None
    if isinstance(named, str) and 0 < len(named) <= _MAX_CONNECTION_ID and named.isprintable():
        return kind, named
    return kind, None


@final
class _SocketBlock:
    """The block of one process socket: a plain object, not a generator.

    Leaving it closes the socket and forgets it, nothing else: ten thousand
    holders stopping at once cost ten thousand socket closes, not as many
    generator unwindings through the client's layers.
    """

    def __init__(self, connector: WebSocketConnector, session: AgentSession) -> None:
        self._connector = connector
        self._session = session
        self._socket: _Socket | None = None

    async def __aenter__(self) -> _Socket:
        connector, session = self._connector, self._session
        key = base64.b64encode(os.urandom(16))
        headers = {**_UPGRADE_HEADERS, "Sec-WebSocket-Key": key.decode("ascii")}
        client = connector._client
        response = await client.start_request(
            "GET",
            client.session_url(session, "/process"),
            session=session,
            headers=headers,
            tunnel=True,
        )
        try:
            socket = connector._accepted(response, key)
        except BaseException:
            if not response.close():
                await response.aclose()
            raise
        # Only the socket is kept: the upgrade's response and its HTTP state
        # (a dozen objects for the collector to walk, per held socket) go now.
        self._socket = socket
        connector._sockets[session.session_id] = socket
        return socket

    async def __aexit__(self, *exc_info: object) -> None:
        socket, self._socket = self._socket, None
        if socket is None:
            return
        sockets = self._connector._sockets
        if sockets.get(self._session.session_id) is socket:
            del sockets[self._session.session_id]
        socket.release()
        await socket.aclose()


@final
class WebSocketConnector:
    """The process connection over a WebSocket upgrade of the process route.

    Args:
        client: the room client whose URL, credentials and stream opener are
            used (and whose ``POST …/process/exit`` is the goodbye's fallback).
        policy: ``ping_interval``, ``pong_timeout`` and ``max_event_bytes``.
    """

    def __init__(self, client: RoomClient, *, policy: HoldPolicy | None = None) -> None:
        policy = policy or HoldPolicy()
        self._client = client
        self._ping_interval = policy.ping_interval
        self._pong_timeout = policy.pong_timeout
        self._max_event_bytes = policy.max_event_bytes
        # The open socket of each session, so the goodbye can speak over it.
        self._sockets: dict[str, _Socket] = {}

    def open(self, session: AgentSession) -> _SocketBlock:
        """Upgrade ``GET …/process`` for ``session`` (see :class:`ProcessConnector`).

        Cancellation:
            Entering is a checkpoint. Cancelled or left, the socket is closed
            at once (no closing handshake: the goodbye does that when it matters).
        """
        return _SocketBlock(self, session)

    def _accepted(self, response: HTTP1Response, key: bytes) -> _Socket:
        """The socket the room's ``101`` opened; any other answer is rejected."""
        outcome = classify_upgrade(response.status)
        if outcome is not None:
            raise AttemptRejected(outcome, f"HTTP {response.status}")
        if response.header("sec-websocket-accept") != _accept_value(key):
            raise AttemptRejected(Outcome.REFUSED, "bad upgrade answer")
        return _Socket(
            response.detach(),
            Connection(ConnectionType.CLIENT),
            ping_interval=self._ping_interval,
            pong_timeout=self._pong_timeout,
            max_event_bytes=self._max_event_bytes,
        )

    def _open_socket(self, session: AgentSession, connection_id: str | None) -> _Socket | None:
        """``session``'s socket, when it is open on the connection the exit names."""
        socket = self._sockets.get(session.session_id)
        if socket is None or connection_id is None or socket.connection_id != connection_id:
            return None
        return socket

    async def announce_exit(self, session: AgentSession, connection_id: str | None) -> bool:
        """POST the exit announcement (the fallback; see :meth:`RoomClient.announce_exit`).

        Cancellation:
            A checkpoint; callers bound it with the exit deadline.
        """
        return await self._client.announce_exit(session, connection_id)

    async def goodbye(
        self,
        session: AgentSession,
        connection_id: str | None,
        stop: Callable[[], Awaitable[None]],
    ) -> bool | None:
        """Announce the exit over the open socket, then close it (see :class:`ProcessConnector`).

        Returns None when the exit went over the socket (the room does not
        answer it); otherwise the fallback POST's answer.

        The socket is closed right after the frames are written, here and
        without waiting for the closing handshake or for the holder to unwind
        (the manager stops it): bytes written before a close reach the room
        even when the close resets the connection, and the goodbye of
        thousands of sockets stays one write and one close each.

        Cancellation:
            Under the manager's shielded exit deadline, which cancels it.
        """
        socket = self._open_socket(session, connection_id)
        if socket is not None and await socket.send_exit(connection_id):
            if not socket.close():
                await stop()
            return None
        await stop()
        return await self._client.announce_exit(session, connection_id)

    def leave_now(self, session: AgentSession, connection_id: str | None) -> bool:
        """Send the exit over the open socket at once, without a checkpoint.

        The exit frame and the close are written; the manager then stops
        the holder, whose block closes the socket (what the room sent
        meanwhile read and dropped, so the close is an orderly end). A reader
        that the room's answering close wakes first waits for that stop,
        without parsing it. False, having done nothing :meth:`goodbye`
        could not follow, when there is no open socket on that connection,
        it is not a plain socket, or it could not take the frames at once.
        """
        socket = self._open_socket(session, connection_id)
        return socket is not None and bool(socket.send_exit_now(connection_id))


@final
class AutoConnector:
    """WebSocket first; SSE for a room that does not support the upgrade, remembered.

    Args:
        client: the room client.
        policy: passed to both connectors.
    """

    def __init__(self, client: RoomClient, *, policy: HoldPolicy | None = None) -> None:
        policy = policy or HoldPolicy()
        self._client = client
        self._websocket = WebSocketConnector(client, policy=policy)
        self._sse = SSEConnector(client, max_event_bytes=policy.max_event_bytes)
        self._sse_rooms: set[tuple[str, str]] = set()

    def _room(self, session: AgentSession) -> tuple[str, str]:
        return self._client.api_url, session.room_id

    def uses_sse(self, session: AgentSession) -> bool:
        """Whether ``session``'s room is remembered as one without the upgrade."""
        return self._room(session) in self._sse_rooms

    @asynccontextmanager
    async def open(self, session: AgentSession) -> AsyncIterator[AsyncIterator[StreamNews]]:
        """Upgrade, or open SSE for a room without the upgrade (see :class:`ProcessConnector`).

        Cancellation:
            A checkpoint; left, whichever stream was opened is closed.
        """
        async with AsyncExitStack() as stack:
            news: AsyncIterator[StreamNews] | None = None
            if not self.uses_sse(session):
                try:
                    news = await stack.enter_async_context(self._websocket.open(session))
                except AttemptRejected as exc:
                    if exc.outcome is not Outcome.UNSUPPORTED:
                        raise
                    if len(self._sse_rooms) < MAX_REMEMBERED_ROOMS:
                        self._sse_rooms.add(self._room(session))
                    logger.info("room %s has no WebSocket form (%s): SSE", session.room_id, exc)
            if news is None:
                news = await stack.enter_async_context(self._sse.open(session))
            yield news

    async def announce_exit(self, session: AgentSession, connection_id: str | None) -> bool:
        """POST the exit announcement (see :meth:`RoomClient.announce_exit`)."""
        return await self._client.announce_exit(session, connection_id)

    async def goodbye(
        self,
        session: AgentSession,
        connection_id: str | None,
        stop: Callable[[], Awaitable[None]],
    ) -> bool | None:
        """Over the socket when the session holds one, else close and POST."""
        return await self._websocket.goodbye(session, connection_id, stop)

    def leave_now(self, session: AgentSession, connection_id: str | None) -> bool:
        """Over the socket at once when the session holds one (see :class:`ProcessConnector`)."""
        return self._websocket.leave_now(session, connection_id)


def connector_for(client: RoomClient, policy: HoldPolicy) -> ProcessConnector:
    """The connector ``policy.transport`` names, over ``client``."""
    if policy.transport == "websocket":
        return WebSocketConnector(client, policy=policy)
    if policy.transport == "auto":
        return AutoConnector(client, policy=policy)
    return SSEConnector(client, max_event_bytes=policy.max_event_bytes)
