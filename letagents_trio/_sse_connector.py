"""The process connection over the room's Server-Sent-Events route (PROTOCOL §2.1 R4, §3).

:class:`SSEConnector` opens ``GET …/process`` through the room client's lean
HTTP/1.1 path, one connection per stream. The answer decides the attempt
(:func:`classify_status`): any 2xx status that can carry a body (not 204 or
205), with a ``text/event-stream`` body in no content coding, opens the
connection, as the Node client's ``response.ok`` does; 410 means ended; 404
and 405 mean the room lacks the route; 5xx counts as dropped; any other
answer is a refusal.

An open stream is a plain object over the response, not a generator: each
read decodes one chunk (:class:`~letagents_trio._sse.SSEDecoder`) into one
:class:`~letagents_trio.StreamNews`, and leaving closes the socket and does
nothing else. The ``open`` event's data is parsed as JSON for
``connection_id``. ``ended`` is final wherever its ``event`` line appears, as
in the Node client, which looks for the text ``event: ended``: once the line
is read (before its blank line), with no ``data`` line, or cut off by the end
of the stream or a broken connection (``docs/process-connection.md``
tabulates where ours and Node's still differ, and why).

Once the stream is named, it carries nothing but heartbeats until it ends,
and the read may let the kernel keep one heartbeat unread
(:class:`~letagents_trio._http.QuietReads`): as many bytes on the wire as the
room's own lone heartbeat weighs there (its chunk's framing and its TLS
record included), learnt from the first one read. A second heartbeat wakes
the read, and so does anything heavier: every event, alone or after a kept
heartbeat. The end of a chunked body on a connection the room keeps alive
(five bytes) is lighter than a heartbeat; alone it waits until more comes,
the connection closes, or the silence deadline draws near.

SSE carries no exit of its own: the stream's :meth:`~_SSEStream.leave`
POSTs ``…/process/exit`` naming the connection, through the room client
(:meth:`RoomClient.announce_exit <letagents_trio.RoomClient.announce_exit>`,
pipelined on its kept-alive connections), and closes the stream as soon as
that exit is written.
"""

from __future__ import annotations

import json
import logging
import re
from typing import TYPE_CHECKING, final

import trio

from . import _protocol
from ._connector import AttemptRejected, StreamNews
from ._errors import RoomUnreachable
from ._http import HTTPFailure
from ._policy import Outcome
from ._sse import SSEDecoder, is_event_stream

if TYPE_CHECKING:
    from ._client import RoomClient
    from ._exits import HandedExit
    from ._http import Response
    from ._session import AgentSession

__all__ = ["SSEConnector", "classify_status"]

logger = logging.getLogger("letagents_trio.transport")

# The one event type that ends the session, wherever its line appears (§3).
_ENDED_EVENT = "ended"
# 2xx statuses that carry no body (fetch gives them a null body: Node refuses).
_NULL_BODY_STATUSES = frozenset({204, 205})
# What a process stream asks for: events, never a cached answer, nothing to
# inflate (a compressed stream could decode to far more than it weighs).
# The connection serves this one stream: a room that honours ``close`` closes
# it when it ends the stream, so that the end wakes a quiet read at once.
STREAM_HEADERS = {
    "Accept": _protocol.EVENT_STREAM,
    "Cache-Control": "no-store",
    "Accept-Encoding": _protocol.IDENTITY_ENCODING,
    "Connection": "close",
}
# A heartbeat, as the kernel may keep it: one comment block, alone in its
# piece of the body, no longer than ``event: ended`` and its blank line (14
# bytes; the protocol's ``: heartbeat`` block is 13, its ``ended`` event with
# its data 23): anything else the room writes weighs more on the wire, alone
# or after a kept heartbeat, and wakes the read at once.
_HEARTBEAT = re.compile(rb":[^\r\n]*(?:\r\n\r\n|\n\n|\r\r)")
_HEARTBEAT_MAX_BYTES = len(b"event: ended\n\n")


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


def _connection_id(data: str) -> str | None:
    try:
        parsed = json.loads(data)
    except (ValueError, RecursionError):
        # RecursionError: deeply nested arrays fit well inside the event limit.
        logger.debug("ignoring an open event whose data is not JSON")
        return None
    if not isinstance(parsed, dict):
        return None
    return _protocol.connection_id_or_none(parsed.get("connection_id"))


@final
class _SSEStream:
    """One process stream: the block :meth:`SSEConnector.open` returns, and its news."""

    def __init__(self, client: RoomClient, session: AgentSession, max_event_bytes: int) -> None:
        self._client = client
        self._session = session
        self._decoder = SSEDecoder(
            max_line_bytes=max_event_bytes,
            max_event_bytes=max_event_bytes,
            final_events=(_ENDED_EVENT,),
        )
        self._response: Response | None = None
        self._done = False
        # What the kernel may keep unread, on the wire: one heartbeat, once the
        # stream is named and a heartbeat has shown its size (see _HEARTBEAT).
        self._keep = 0
        self._named = False
        self._heard_at = trio.current_time()

    async def __aenter__(self) -> _SSEStream:
        url = self._client.session_url(self._session, "/process")
        response = await self._client.start_request(
            "GET", url, session=self._session, headers=STREAM_HEADERS
        )
        coding = response.header("content-encoding")
        outcome = classify_status(response.status, response.header("content-type"), coding)
        if outcome is not None:
            await response.aclose()
            detail = f"HTTP {response.status}"
            if outcome is Outcome.REFUSED and 200 <= response.status < 300 and coding:
                detail += " in a content coding it did not ask for"
            raise AttemptRejected(outcome, detail)
        self._response = response
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def __aiter__(self) -> _SSEStream:
        return self

    async def __anext__(self) -> StreamNews:
        response = self._response
        if self._done or response is None:
            await trio.lowlevel.checkpoint()
            raise StopAsyncIteration
        try:
            chunk = await response.next_chunk(keep=self._keep)
            kept_since = response.heard_at
            self._heard_at = trio.current_time() if kept_since is None else kept_since
        except HTTPFailure as exc:
            if self._ended_at_close():
                return StreamNews(ended=True)
            raise RoomUnreachable(f"process stream broke: {exc}") from exc
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
        ended = ended or self._decoder.event_type == _ENDED_EVENT
        # Ended is said once: the session is over, nothing after it is news.
        self._done = ended
        if connection_id is not None:
            self._named = True
        elif self._named and len(chunk) <= _HEARTBEAT_MAX_BYTES and _HEARTBEAT.fullmatch(chunk):
            # Named, the stream carries nothing but heartbeats until it ends.
            self._keep = response.wire_size(len(chunk))
        return StreamNews(connection_id=connection_id, ended=ended)

    def _ended_at_close(self) -> bool:
        """The stream ended: close the decoder; was an ``ended`` block cut off?"""
        self._done = True
        return any(event.event == _ENDED_EVENT for event in self._decoder.close())

    @property
    def heard_at(self) -> float:
        """When the latest chunk's bytes arrived (trio's clock): kept by the kernel, or read."""
        return self._heard_at

    def leave_nowait(self, connection_id: str) -> HandedExit:
        """The exit's POST, ready to be handed to the room client's pipelined connections.

        Sent, it needs no task of its own (:mod:`letagents_trio._exits`), and
        the stream closes once it is written, as in :meth:`leave`.
        """
        return self._client.hand_exit(self._session, connection_id, sent=self._close_nowait)

    async def leave(self, connection_id: str) -> bool | None:
        """POST the exit naming ``connection_id``, closing the stream once it is on its way.

        The stream closes as soon as the exit is handed to the kernel (at
        the latest when this call ends): the room records an exit naming the
        connection whether it sees the close first or not (PROTOCOL §2.2),
        and in a goodbye of thousands the holders, woken by their streams'
        close, unwind only once their exits are written. Over TLS an exit
        waits for its connection's handshake, which thousands of holders
        unwinding first would hold back.

        Returns:
            Whether the room recorded it.

        Raises:
            ApiError: the room refused the exit.
            RoomUnreachable: it could not be sent.

        Cancellation:
            A checkpoint; the stream is closed even when cancelled; the room
            may or may not have the exit.
        """
        try:
            return await self._client.announce_exit(
                self._session, connection_id, sent=self._close_nowait
            )
        finally:
            await self.aclose()

    def _close_nowait(self) -> None:
        if self._response is not None:
            self._response.close_nowait()

    async def aclose(self) -> None:
        """Close the connection: one socket close when it can be, else forcefully.

        Cancellation:
            Closes even when cancelled.
        """
        if self._response is not None:
            await self._response.aclose()
        else:
            await trio.lowlevel.checkpoint()


@final
class SSEConnector:
    """The process connection over the room's Server-Sent-Events route.

    Args:
        client: the room client whose URL, credentials and lean HTTP path are used.
        max_event_bytes: the largest line or event accepted on the stream
            (1 MiB by default; at least 1024).
    """

    def __init__(
        self, client: RoomClient, *, max_event_bytes: int = _protocol.MAX_EVENT_BYTES
    ) -> None:
        if max_event_bytes < 1024:
            raise ValueError(f"max_event_bytes must be at least 1024, got {max_event_bytes!r}")
        self._client = client
        self._max_event_bytes = max_event_bytes

    def __repr__(self) -> str:
        return f"<SSEConnector api_url={self._client.api_url!r}>"

    def open(self, session: AgentSession) -> _SSEStream:
        """Open ``GET …/process`` for ``session`` (see :class:`~letagents_trio.ProcessConnector`).

        Cancellation:
            Entering is a checkpoint. Cancelled or left, the socket is closed.
        """
        return _SSEStream(self._client, session, self._max_event_bytes)

    async def announce_exit(self, session: AgentSession, connection_id: str | None) -> bool:
        """POST the exit, for a session without an open stream.

        See :meth:`RoomClient.announce_exit <letagents_trio.RoomClient.announce_exit>`.

        Cancellation:
            A checkpoint; callers bound it with the exit deadline.
        """
        return await self._client.announce_exit(session, connection_id)
