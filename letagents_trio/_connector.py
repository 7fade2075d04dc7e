"""What a holder needs from a transport: open a process connection, hear news.

The holder knows nothing of HTTP or SSE. It asks a :class:`ProcessConnector`
to open the process connection for a session, inside the holder's own cancel
scope, and reads :class:`StreamNews` from it, one item per chunk of bytes the
room wrote (so a comment-only heartbeat still counts as news and re-arms the
silence deadline). A connector reports a refusal by raising
:class:`AttemptRejected` with the attempt's :class:`~letagents_trio.Outcome`, and a
network failure by raising :class:`~letagents_trio.RoomUnreachable`.

:class:`SSEConnector` is the connector for the room's HTTP route
(PROTOCOL §2.1 R4, §3): any 2xx status that can carry a body (not 204 or
205), with a ``text/event-stream`` body, opens the connection, as the Node
client's ``response.ok`` does; 410 means ended; 404 and 405 mean the room lacks
the route; 5xx counts as dropped; any other answer is a refusal. The ``open``
event's data is parsed as JSON for ``connection_id``. ``ended`` is final
wherever its ``event`` line appears, as in the Node client, which looks for
the text ``event: ended``: once the line is read (before its blank line),
with no ``data`` line, or cut off by the end of the stream or a broken
connection (``docs/process-connection.md`` tabulates where ours and Node's
still differ, and why). The WebSocket connectors (:mod:`._websocket`)
implement the same methods.

The goodbye of one session is the connector's too (:meth:`ProcessConnector.goodbye`),
so each transport keeps its own order while the manager stays one piece of
code: SSE closes the stream, then POSTs the exit; a WebSocket sends the exit
over the open socket, then closes it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from functools import partial
from typing import TYPE_CHECKING, Protocol, final

import attrs
import trio

from . import _protocol
from ._errors import LetAgentsError, RoomUnreachable
from ._http1 import HTTP1Response, HTTPFailure
from ._policy import Outcome
from ._sse import SSEDecoder, is_event_stream

if TYPE_CHECKING:
    from ._client import PreparedExit, RoomClient
    from ._session import AgentSession

__all__ = ["AttemptRejected", "ProcessConnector", "SSEConnector", "StreamNews", "classify_status"]

logger = logging.getLogger("letagents_trio.transport")

# Connection ids are UUIDs; anything longer is not one and is not kept.
_MAX_CONNECTION_ID = 128
# The one event type that ends the session, wherever its line appears (§3).
_ENDED_EVENT = "ended"
# 2xx statuses that carry no body (fetch gives them a null body: Node refuses).
_NULL_BODY_STATUSES = frozenset({204, 205})


@final
@attrs.frozen(kw_only=True)
class StreamNews:
    """What one read from an open process connection brought.

    Attributes:
        connection_id: the id the room gave this connection, if this read named one.
        ended: the room said the session has ended.
    """

    connection_id: str | None = None
    ended: bool = False


@final
class StreamLeft(Exception):
    """The goodbye closed this stream itself: the holder stops, it does not retry.

    Raised by a connector's news iterator once :meth:`ProcessConnector.goodbye`
    has closed the stream to announce the exit. The holder then ends as
    ``STOPPED`` at once, a plain return rather than a cancellation through
    every layer, and before the exit's answer comes back.
    """


@final
class AttemptRejected(LetAgentsError):
    """The room answered, but did not open the process connection.

    Attributes:
        outcome: how the attempt counts (ended, unsupported, dropped or refused).
        detail: a short, secret-free description, such as ``HTTP 401``.
    """

    def __init__(self, outcome: Outcome, detail: str) -> None:
        super().__init__(f"{outcome.value}: {detail}")
        self.outcome = outcome
        self.detail = detail


class ProcessConnector(Protocol):
    """A way to hold a process connection and to announce a process's exit."""

    def open(self, session: AgentSession) -> AbstractAsyncContextManager[AsyncIterator[StreamNews]]:
        """Open the process connection; the block's value yields news until it closes.

        Entering returns once the room has accepted the connection. Raises
        :class:`AttemptRejected` when the room refuses it and
        :class:`~letagents_trio.RoomUnreachable` when it cannot be reached;
        iterating may raise those or :class:`~letagents_trio.StreamProtocolError`.
        """
        ...

    async def announce_exit(self, session: AgentSession, connection_id: str | None) -> bool:
        """Tell the room this process is gone; return whether it recorded that.

        Cancellation:
            Called under the manager's shielded exit deadline, which cancels it
            when the deadline passes; the room may or may not have recorded it.
        """
        ...

    async def goodbye(
        self,
        session: AgentSession,
        connection_id: str | None,
        stop: Callable[[], Awaitable[None]],
    ) -> bool | None:
        """Close ``session``'s connection and announce its exit, in this transport's order.

        Args:
            session: the session leaving.
            connection_id: the connection held when the goodbye began, if any.
            stop: stops the session's holder and waits until its stream is closed.
                A connector that closes the stream itself need not call it: the
                manager stops the holder once ``goodbye`` returns, either way.

        Returns:
            Whether the room recorded the exit; None when it gives no answer
            (an exit sent over an open WebSocket).

        Cancellation:
            Called under the manager's shielded exit deadline, which cancels it.
        """
        ...

    def leave_now(self, session: AgentSession, connection_id: str | None) -> bool:
        """Announce the exit at once, without a checkpoint, when the transport can.

        The manager asks this of every session before it starts a task for
        :meth:`goodbye`: at ten thousand sessions, a task each costs a second
        of CPU. A connector that can announce synchronously (a WebSocket
        writing its exit frame on an open plain socket) does it
        and returns True; the manager then stops the holder, whose block
        closes the stream. Otherwise it does nothing that :meth:`goodbye`
        could not follow and returns False; :class:`SSEConnector` always
        does, since its exit needs a request of its own.
        """
        ...


def classify_status(
    status: int, content_type: str | None, content_encoding: str | None = None
) -> Outcome | None:
    """The outcome of a process-route answer, or None when it opens the stream.

    The stream asks for no content coding; one it did not ask for is a refusal,
    never inflated (a small compressed body can decode to gigabytes).
    """
    if status == 410:
        return Outcome.ENDED
    if status in (404, 405):
        return Outcome.UNSUPPORTED
    if status >= 500:
        return Outcome.DROPPED
    if not 200 <= status < 300 or status in _NULL_BODY_STATUSES:
        return Outcome.REFUSED
    if not is_event_stream(content_type):
        return Outcome.REFUSED
    if (content_encoding or "").strip().lower() not in ("", _protocol.IDENTITY_ENCODING):
        return Outcome.REFUSED
    return None


@final
class _SSENews:
    """Turns the chunks of an SSE body into :class:`StreamNews`, one per chunk.

    A plain object over the lean response, not a generator: when the holder
    stops, closing the socket is all there is to do.
    """

    def __init__(
        self,
        response: HTTP1Response,
        decoder: SSEDecoder,
        prepare_exit: Callable[[str], PreparedExit],
    ) -> None:
        self._response = response
        self._decoder = decoder
        self._prepare_exit = prepare_exit
        self._done = False
        # Set by the goodbye, which closed the socket: nothing read after is news.
        self._leaving = False
        # The exit naming the connection, made when the room names it.
        self.exit: PreparedExit | None = None

    def __aiter__(self) -> _SSENews:
        return self

    def leave(self) -> bool:
        """Close the stream now for the goodbye; False when only the holder can close it.

        The reader then raises :class:`StreamLeft` instead of reporting a drop
        (and reconnecting) while the exit is announced.
        """
        self._leaving = self._response.close()
        return self._leaving

    async def __anext__(self) -> StreamNews:
        if self._done:
            await trio.lowlevel.checkpoint()
            raise StopAsyncIteration
        chunk = b""
        try:
            chunk = await self._response.next_chunk()
        except HTTPFailure as exc:
            if not self._leaving:
                if self._ended_at_close():
                    return StreamNews(ended=True)
                raise RoomUnreachable(f"process stream broke: {exc}") from exc
        if self._leaving:
            # Raised outside the except block: the network error is not chained to it.
            raise StreamLeft("process exit")
        if not chunk:
            if self._ended_at_close():
                return StreamNews(ended=True)
            raise StopAsyncIteration
        connection_id: str | None = None
        ended = False
        # The read was a checkpoint; one more between slices, so that one read
        # that decodes to megabytes never holds the loop longer than one slice.
        for step, events in enumerate(self._decoder.feed_slices(chunk)):
            if step:
                await trio.lowlevel.checkpoint()
            for event in events:
                if event.event == "open":
                    connection_id = _connection_id(event.data) or connection_id
                elif event.event == _ENDED_EVENT:
                    ended = True
        if connection_id is not None:
            try:
                self.exit = self._prepare_exit(connection_id)
            except RoomUnreachable:
                self.exit = None  # said again, and reported, if the goodbye comes
        ended = ended or self._decoder.event_type == _ENDED_EVENT
        # Ended is said once: the session is over, nothing after it is news.
        self._done = ended
        return StreamNews(connection_id=connection_id, ended=ended)

    def _ended_at_close(self) -> bool:
        """The stream ended: close the decoder; was an ``ended`` block cut off?"""
        self._done = True
        return any(event.event == _ENDED_EVENT for event in self._decoder.close())


def _connection_id(data: str) -> str | None:
    try:
        parsed = json.loads(data)
    except (ValueError, RecursionError):
        # RecursionError: deeply nested arrays fit well inside the event limit.
        logger.debug("ignoring an open event whose data is not JSON")
        return None
    value = parsed.get("connection_id") if isinstance(parsed, dict) else None
    # Printable only: the id goes back to the room in the exit announcement and
    # into logs; a lone surrogate could not even be encoded for the exit POST.
    if isinstance(value, str) and 0 < len(value) <= _MAX_CONNECTION_ID and value.isprintable():
        return value
    return None


@final
class _ProcessStream:
    """The block of one process connection: a plain object, not a generator.

    Leaving it closes the socket and does nothing else, so a thousand holders
    stopping at once cost a thousand socket closes, not a thousand generator
    unwindings through every layer of a client.
    """

    def __init__(
        self,
        client: RoomClient,
        session: AgentSession,
        max_event_bytes: int,
        streams: dict[str, _SSENews],
    ) -> None:
        self._client = client
        self._session = session
        self._max_event_bytes = max_event_bytes
        self._streams = streams
        self._response: HTTP1Response | None = None
        self._news: _SSENews | None = None

    async def __aenter__(self) -> _SSENews:
        response = await self._client.start_process_stream(self._session)
        coding = response.header("content-encoding")
        outcome = classify_status(response.status, response.header("content-type"), coding)
        if outcome is not None:
            if not response.close():
                await response.aclose()
            detail = f"HTTP {response.status}"
            if outcome is Outcome.REFUSED and 200 <= response.status < 300 and coding:
                detail += " in a content coding it did not ask for"
            raise AttemptRejected(outcome, detail)
        self._response = response
        decoder = SSEDecoder(
            max_line_bytes=self._max_event_bytes,
            max_event_bytes=self._max_event_bytes,
            final_events=(_ENDED_EVENT,),
        )
        self._news = _SSENews(response, decoder, partial(self._client.prepare_exit, self._session))
        self._streams[self._session.session_id] = self._news
        return self._news

    async def __aexit__(self, *exc_info: object) -> None:
        response, self._response = self._response, None
        if self._news is not None and self._streams.get(self._session.session_id) is self._news:
            del self._streams[self._session.session_id]
        self._news = None
        if response is not None and not response.close():
            await response.aclose()


@final
class SSEConnector:
    """The process connection over the room's Server-Sent-Events route.

    Args:
        client: the room client whose HTTP client and credentials are used.
        max_event_bytes: the largest line or event accepted on the stream.
    """

    def __init__(
        self, client: RoomClient, *, max_event_bytes: int = _protocol.MAX_EVENT_BYTES
    ) -> None:
        self._client = client
        self._max_event_bytes = max_event_bytes
        # The open stream of each session, so the goodbye can close it itself.
        self._streams: dict[str, _SSENews] = {}

    def open(self, session: AgentSession) -> _ProcessStream:
        """Open ``GET …/process`` for ``session`` (see :class:`ProcessConnector`).

        Cancellation:
            Entering is a checkpoint. Cancelled or left, the socket is closed.
        """
        return _ProcessStream(self._client, session, self._max_event_bytes, self._streams)

    async def announce_exit(self, session: AgentSession, connection_id: str | None) -> bool:
        """POST the exit announcement (see :meth:`RoomClient.announce_exit`).

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
        """Close the stream, then POST the exit (see :class:`ProcessConnector`).

        An exit that names its connection is recorded in whichever order the
        room sees the close and the exit (PROTOCOL §2.2), so its stream is
        closed here, a socket close, and the exit goes out at once: at
        thousands of sessions no holder's unwinding runs before the exits (the
        holder stops on its own, ``StreamLeft``). An exit naming none is
        recorded only once the room has seen the stream close: for that one
        the holder is stopped and its stream closed first, as ``stop`` does.
        """
        stream = self._streams.get(session.session_id)
        prepared = None if stream is None else stream.exit
        if connection_id is None or stream is None or not stream.leave():
            await stop()
        return await self._client.announce_exit(session, connection_id, prepared=prepared)

    def leave_now(self, session: AgentSession, connection_id: str | None) -> bool:
        """Never: the exit needs a request of its own (:meth:`goodbye`)."""
        return False
