"""The process connection over a WebSocket (PROTOCOL §3.1, our extension).

:class:`WebSocketConnector` is a :class:`~letagents_trio.ProcessConnector`
beside the SSE one: the holder's state machine, outcomes and delays are the
same code whichever connector it is given. The upgrade goes through the same
seam as the SSE request, :meth:`RoomClient.start_request
<letagents_trio.RoomClient.start_request>`, and on ``101`` the raw stream is
the response's (:meth:`~letagents_trio._http.Response.detach`).

One socket's life:

1. **Upgrade**: ``GET …/process`` with ``Upgrade: websocket`` and the same
   credential headers as the SSE request. ``101`` with the right
   ``Sec-WebSocket-Accept`` opens it. Any other answer maps to the SSE
   outcomes (:func:`classify_upgrade`): 410 ended, 404/405 unsupported, 5xx
   dropped, other 4xx refused; a 2xx (a room that ignored the upgrade and
   answered as it would an SSE request) is unsupported too.
2. **Held**: the open socket is a :class:`~letagents_trio._ws_socket.ProcessSocket`
   (news, pings and pongs, the exit frames), the holder's stream.
3. **Goodbye**: the socket carries the exit itself
   (:meth:`ProcessSocket.leave <letagents_trio._ws_socket.ProcessSocket.leave>`):
   ``{"event":"exit","process_connection_id":…}``, then a normal close, and
   the socket is closed without waiting on a closing handshake. A socket
   that cannot take the frame POSTs ``…/process/exit`` instead, through the
   room client, and so does a holder with no open socket
   (:meth:`WebSocketConnector.announce_exit`), inside the same shielded deadline.

:class:`AutoConnector` tries the WebSocket first and falls back to SSE for a
room (origin and room id) whose answer to the upgrade is ``unsupported``,
remembering it.
"""

from __future__ import annotations

import base64
import functools
import hashlib
import logging
import math
import os
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import TYPE_CHECKING, Final, final

from wsproto.connection import Connection, ConnectionType

from . import _protocol
from ._connector import AttemptRejected, ProcessStream
from ._policy import Outcome
from ._sse_connector import SSEConnector
from ._ws_socket import ProcessSocket

if TYPE_CHECKING:
    from ._client import RoomClient
    from ._http import Response
    from ._session import AgentSession

__all__ = ["AutoConnector", "WebSocketConnector", "classify_upgrade"]

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


def _positive(name: str, value: float) -> float:
    value = float(value)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be finite and > 0, got {value!r}")
    return value


@final
class _SocketBlock:
    """The block of one process socket: a plain object, not a generator.

    Leaving it closes the socket, nothing else: ten thousand holders stopping
    at once cost ten thousand socket closes, not as many generator unwindings
    through the client's layers.
    """

    def __init__(self, connector: WebSocketConnector, session: AgentSession) -> None:
        self._connector = connector
        self._session = session
        self._socket: ProcessSocket | None = None

    async def __aenter__(self) -> ProcessSocket:
        connector, session = self._connector, self._session
        key = base64.b64encode(os.urandom(16))
        headers = {**_UPGRADE_HEADERS, "Sec-WebSocket-Key": key.decode("ascii")}
        client = connector.client
        response = await client.start_request(
            "GET", client.session_url(session, "/process"), session=session, headers=headers
        )
        try:
            self._socket = connector._accepted(response, key, session)
        except BaseException:
            await response.aclose()
            raise
        # Only the socket is kept: the upgrade's response and its HTTP state
        # (a dozen objects for the collector to walk, per held socket) go now.
        return self._socket

    async def __aexit__(self, *exc_info: object) -> None:
        socket, self._socket = self._socket, None
        if socket is not None:
            await socket.aclose()


@final
class WebSocketConnector:
    """The process connection over a WebSocket upgrade of the process route.

    Args:
        client: the room client whose URL, credentials and stack are used
            (and whose ``POST …/process/exit`` is the goodbye's fallback).
        ping_interval: the client pings after hearing nothing for this long
            (seconds on trio's clock; 40 by default, longer than two of the
            15 s intervals between the room's own pings, since a lone ping
            may wait in the kernel for the next: a room that pings is never
            pinged back).
        pong_timeout: a socket that stays silent this long after the
            client's ping counts as dropped (5 by default).
        max_message_bytes: the largest message the room may send (1 MiB by
            default; at least 1024).
    """

    def __init__(
        self,
        client: RoomClient,
        *,
        ping_interval: float = _protocol.WEBSOCKET_PING_INTERVAL,
        pong_timeout: float = _protocol.WEBSOCKET_PONG_TIMEOUT,
        max_message_bytes: int = _protocol.MAX_EVENT_BYTES,
    ) -> None:
        if max_message_bytes < 1024:
            raise ValueError(f"max_message_bytes must be at least 1024, got {max_message_bytes!r}")
        self.client = client
        self._ping_interval = _positive("ping_interval", ping_interval)
        self._pong_timeout = _positive("pong_timeout", pong_timeout)
        self._max_message_bytes = max_message_bytes

    def __repr__(self) -> str:
        return f"<WebSocketConnector api_url={self.client.api_url!r}>"

    def open(self, session: AgentSession) -> _SocketBlock:
        """Upgrade ``GET …/process`` for ``session`` (a ``ProcessConnector``).

        Cancellation:
            Entering is a checkpoint. Cancelled or left, the socket is closed
            at once (no closing handshake: the goodbye does that when it matters).
        """
        return _SocketBlock(self, session)

    def _accepted(self, response: Response, key: bytes, session: AgentSession) -> ProcessSocket:
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
            max_event_bytes=self._max_message_bytes,
            announce_exit=functools.partial(self.client.announce_exit, session),
        )

    async def announce_exit(self, session: AgentSession, connection_id: str | None) -> bool:
        """POST the exit, for a session without an open socket.

        See :meth:`RoomClient.announce_exit <letagents_trio.RoomClient.announce_exit>`.

        Cancellation:
            A checkpoint; callers bound it with the exit deadline.
        """
        return await self.client.announce_exit(session, connection_id)


@final
class AutoConnector:
    """WebSocket first; SSE for a room that does not support the upgrade, remembered.

    Args:
        client: the room client.
        ping_interval, pong_timeout, max_message_bytes: the WebSocket's, as
            :class:`WebSocketConnector` takes them; ``max_message_bytes`` is
            also the SSE stream's largest event.
    """

    def __init__(
        self,
        client: RoomClient,
        *,
        ping_interval: float = _protocol.WEBSOCKET_PING_INTERVAL,
        pong_timeout: float = _protocol.WEBSOCKET_PONG_TIMEOUT,
        max_message_bytes: int = _protocol.MAX_EVENT_BYTES,
    ) -> None:
        self._websocket = WebSocketConnector(
            client,
            ping_interval=ping_interval,
            pong_timeout=pong_timeout,
            max_message_bytes=max_message_bytes,
        )
        self._sse = SSEConnector(client, max_event_bytes=max_message_bytes)
        self._sse_rooms: set[tuple[str, str]] = set()

    def __repr__(self) -> str:
        return f"<AutoConnector api_url={self._websocket.client.api_url!r}>"

    def _room(self, session: AgentSession) -> tuple[str, str]:
        return self._websocket.client.api_url, session.room_id

    def uses_sse(self, session: AgentSession) -> bool:
        """Whether ``session``'s room is remembered as one without the upgrade."""
        return self._room(session) in self._sse_rooms

    @asynccontextmanager
    async def open(self, session: AgentSession) -> AsyncIterator[ProcessStream]:
        """Upgrade, or open SSE for a room without the upgrade (a ``ProcessConnector``).

        Cancellation:
            A checkpoint; left, whichever stream was opened is closed.
        """
        async with AsyncExitStack() as stack:
            stream: ProcessStream | None = None
            if not self.uses_sse(session):
                try:
                    stream = await stack.enter_async_context(self._websocket.open(session))
                except AttemptRejected as exc:
                    if exc.outcome is not Outcome.UNSUPPORTED:
                        raise
                    if len(self._sse_rooms) < MAX_REMEMBERED_ROOMS:
                        self._sse_rooms.add(self._room(session))
                    logger.info("room %s has no WebSocket form (%s): SSE", session.room_id, exc)
            if stream is None:
                stream = await stack.enter_async_context(self._sse.open(session))
            yield stream

    async def announce_exit(self, session: AgentSession, connection_id: str | None) -> bool:
        """POST the exit, for a session without an open stream.

        Cancellation:
            A checkpoint; callers bound it with the exit deadline.
        """
        return await self._websocket.announce_exit(session, connection_id)
