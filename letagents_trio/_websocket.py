"""The process connection over a WebSocket (PROTOCOL §3.1, our extension).

:class:`WebSocketConnector` is a :class:`~letagents_trio._connector.ProcessConnector`
beside the SSE one: the holder's state machine, outcomes and delays are the
same code whichever connector it is given. The upgrade goes through the same seam
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
2. **Held**: the open socket is a :class:`~letagents_trio._ws_socket.ProcessSocket`
   (news, pings and pongs, the exit frames), kept by the connector so that
   the goodbye can speak over it.
3. **Goodbye** (:meth:`WebSocketConnector.leave_now`, :meth:`WebSocketConnector.goodbye`):
   while the socket is still open, the exit frame
   ``{"event":"exit","process_connection_id":…}`` goes out, then a normal
   close (in the same write, or, for an exit written at once, as the socket
   is closed), and the socket is closed without waiting on a closing
   handshake. A session with no open socket, or one that cannot take the
   frame, falls back to ``POST …/process/exit`` inside the same shielded
   deadline.

:class:`AutoConnector` tries the WebSocket first and falls back to SSE for a
room (origin and room id) whose answer to the upgrade is ``unsupported``,
remembering it. :func:`connector_for` picks by ``HoldPolicy.transport``.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Final, final

from wsproto.connection import Connection, ConnectionType

from ._connector import AttemptRejected, ProcessConnector, SSEConnector, StreamNews
from ._policy import HoldPolicy, Outcome
from ._ws_socket import ProcessSocket

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
        self._socket: ProcessSocket | None = None

    async def __aenter__(self) -> ProcessSocket:
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
        self._sockets: dict[str, ProcessSocket] = {}

    def open(self, session: AgentSession) -> _SocketBlock:
        """Upgrade ``GET …/process`` for ``session`` (see :class:`ProcessConnector`).

        Cancellation:
            Entering is a checkpoint. Cancelled or left, the socket is closed
            at once (no closing handshake: the goodbye does that when it matters).
        """
        return _SocketBlock(self, session)

    def _accepted(self, response: HTTP1Response, key: bytes) -> ProcessSocket:
        """The socket the room's ``101`` opened; any other answer is rejected."""
        outcome = classify_upgrade(response.status)
        if outcome is not None:
            raise AttemptRejected(outcome, f"HTTP {response.status}")
        if response.header("sec-websocket-accept") != _accept_value(key):
            raise AttemptRejected(Outcome.REFUSED, "bad upgrade answer")
        return ProcessSocket(
            response.detach(),
            Connection(ConnectionType.CLIENT),
            ping_interval=self._ping_interval,
            pong_timeout=self._pong_timeout,
            max_event_bytes=self._max_event_bytes,
        )

    def _open_socket(
        self, session: AgentSession, connection_id: str | None
    ) -> ProcessSocket | None:
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

        The exit frame is written alone; the manager then stops the holder,
        whose block writes the normal close and closes the socket (what the
        room sent meanwhile read and dropped first, so the close is an
        orderly end). The room answers a close with its own: kept for the
        block, the close gives it nothing to answer while thousands of exits
        are written, so no reader wakes between two of them (at 10,000
        sockets, nine alternated runs: every exit out a median 0.29 s after
        SIGTERM, against 0.61 s with the close alongside, docs/performance.md). A
        reader that something the room sent wakes first (a ping crossing
        the exit) waits for that stop, without parsing it. False, having
        done nothing :meth:`goodbye` could not follow, when there is no open
        socket on that connection, it is not a plain socket, or it could not
        take the exit frame at once.
        """
        socket = self._open_socket(session, connection_id)
        return socket is not None and bool(socket.send_exit_now(connection_id, close=False))


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
