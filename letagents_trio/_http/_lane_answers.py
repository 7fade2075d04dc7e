"""A pipelined connection's answers, read in order: simple heads here, any other by h11.

The answers to a :class:`~._pool.PipelinedPool`'s requests come back in
order on each connection (a :class:`~._lanes.Lane`). A simple head
(:func:`~._answer.simple_head`: ``HTTP/1.1``, one ``Content-Length``) is read
here, without h11; from the first that is not, h11 reads every answer of the
connection, told of a stand-in request before each (the requests went out
already, serialized ahead: it only needs to expect one answer).
"""

from __future__ import annotations

import h11

from ._answer import HEAD_END, SimpleHead, simple_head
from ._lanes import Answer, Lane
from ._request import MAX_HEAD_BYTES, MAX_INFORMATIONAL, TOO_MANY_INFORMATIONAL
from ._sockio import READ_SIZE, read_some

__all__ = ["AnswerFailed", "next_answer"]


class AnswerFailed(Exception):
    """The answer at the head of a lane broke a rule: it fails, and the lane ends."""

    def __init__(self, failure: str) -> None:
        super().__init__(failure)
        self.failure = failure


async def next_answer(
    lane: Lane, max_body: int, stand_in: h11.Request, *, more: bool = True
) -> tuple[Answer, bool] | None:
    """Read the next answer on ``lane``, and whether the connection stays open after it.

    A simple head (:func:`~._answer.simple_head`) is read here; from the
    first that is not, h11 reads every answer of the lane. Not ``more``:
    only a simple answer already all read, with no checkpoint; else None.

    Raises:
        AnswerFailed: it is over ``max_body`` or has too many informational heads.
        h11.ProtocolError, OSError, trio.BrokenResourceError: the connection
            broke, or the room broke HTTP's rules.

    Cancellation:
        A checkpoint only while it waits for the room's bytes (none when not
        ``more``); cancelled there, what was read stays in ``lane``'s buffer
        and the caller decides the connection's fate.
    """
    buffer = lane.buffer
    while not lane.h11:
        head = _simple_head(lane, buffer)
        if head is None:
            if HEAD_END.search(buffer) or len(buffer) > MAX_HEAD_BYTES:
                _hand_to_h11(lane, stand_in)
                break
            if not more:
                return None
            await _read_more(lane)
            continue
        if head.length > max_body:
            raise AnswerFailed("BodyTooLarge")
        end = head.size + head.length
        if len(buffer) < end and not more:
            return None
        while len(buffer) < end:
            await _read_more(lane)
        body = bytes(buffer[head.size : end])
        del buffer[:end]
        return Answer(head.status, head.headers, body), not head.close
    return await _h11_answer(lane, max_body, stand_in) if more else None


def _hand_to_h11(lane: Lane, stand_in: h11.Request) -> None:
    """From now on h11 reads ``lane``'s answers, starting with the bytes read so far."""
    lane.h11 = True
    lane.conn.send(stand_in)
    lane.conn.send(h11.EndOfMessage())
    lane.conn.receive_data(bytes(lane.buffer))
    lane.buffer.clear()


async def _h11_answer(lane: Lane, max_body: int, stand_in: h11.Request) -> tuple[Answer, bool]:
    """Read the next answer on ``lane`` with h11 (see :meth:`_answer`).

    Cancellation:
        A checkpoint only while it waits for the room's bytes; what h11 was
        given stays in ``lane.conn``, and what it parsed in ``lane``.
    """
    conn = lane.conn
    stream = lane.stream
    assert stream is not None
    if conn.our_state is h11.IDLE:
        conn.send(stand_in)
        conn.send(h11.EndOfMessage())
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            data = await read_some(stream, READ_SIZE)
            lane.eof = not data
            conn.receive_data(data)
        elif isinstance(event, h11.Response):
            lane.head = event
        elif isinstance(event, h11.Data):
            lane.body += event.data
            if len(lane.body) > max_body:
                raise AnswerFailed("BodyTooLarge")
        elif isinstance(event, h11.EndOfMessage):
            head, body = lane.head, bytes(lane.body)
            assert head is not None
            lane.head, lane.body, lane.informational = None, bytearray(), 0
            keep = conn.our_state is h11.DONE and conn.their_state is h11.DONE
            if keep:
                conn.start_next_cycle()
            return Answer(head.status_code, tuple(head.headers), body), keep
        elif isinstance(event, h11.InformationalResponse):
            lane.informational += 1
            if lane.informational > MAX_INFORMATIONAL:
                raise AnswerFailed(TOO_MANY_INFORMATIONAL)
        else:
            # ConnectionClosed: the room closed it without an answer.
            lane.eof = True
            raise h11.RemoteProtocolError("server disconnected without an answer")


def _simple_head(lane: Lane, buffer: bytearray) -> SimpleHead | None:
    """:func:`~._answer.simple_head` of ``buffer``; the lane's last head is not read again.

    A room's answers to exits have the same head but for its ``Date``, which
    changes once a second: thousands read in a goodbye cost a comparison
    each, not a parse.
    """
    end = buffer.find(b"\r\n\r\n") + 4
    if end > 4 and end == len(lane.last_head) and buffer.startswith(lane.last_head):
        return lane.last_simple
    head = simple_head(buffer)
    if head is not None and head.size == end:
        lane.last_head, lane.last_simple = bytes(buffer[:end]), head
    return head


async def _read_more(lane: Lane) -> None:
    """Add the next bytes the room sends on ``lane`` to its buffer.

    Raises:
        h11.RemoteProtocolError: the room closed the connection (mid-answer, or before one).

    Cancellation:
        A checkpoint: the wait comes before the read, and nothing is lost.
    """
    assert lane.stream is not None
    data = await read_some(lane.stream, READ_SIZE)
    if not data:
        lane.eof = True
        raise h11.RemoteProtocolError("server disconnected without an answer")
    lane.buffer += data
