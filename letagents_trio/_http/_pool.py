"""Requests that may be sent twice, over kept-alive HTTP/1.1 connections to one origin.

The goodbye announces thousands of exits at once. A connection of its own for
each, opened and closed, costs a socket, a connect, a task and a close per
exit, and at ten thousand sessions that is more than the exit deadline
allows. A :class:`KeepAlivePool` sends them instead over a few connections,
**pipelined**:

* :meth:`KeepAlivePool.exchange_many` spreads its requests over at most
  :data:`LANES` connections (kept-alive idle ones first, else new ones), one
  request each while there are no more than that, and otherwise several,
  written in one go without waiting for answers; the answers come back in
  order on each connection, and each is handed to the caller as it is read.
  HTTP/1.1 allows this, and a server that handles its requests as they
  arrive (Node's, which the letagents API runs on, records each exit when it
  reads it and only queues the answers) records every exit at once, however
  slowly it answers, or whether it answers at all;
* a connection that the room closes early (``Connection: close``, or broken
  after some answers) leaves the rest of its share to a new connection; one
  kept alive that the room had closed while idle fails before any answer, and
  its share goes out once more on a new one; a request whose answer breaks
  the rules (too large, too many informational answers) fails alone, and the
  rest go on a new connection. A new connection that fails before any
  answer fails its whole share. Every loop ends an answer or a failure
  further on, so a lane never spins;
* a connection whose answers all came back, and that the room keeps open,
  joins the idle ones (at most ``keep``); the next requests take it.

:meth:`KeepAlivePool.exchange` is one request on its own (a batch of one).
Only requests that may be sent twice belong here: a replayed exit changes
nothing (PROTOCOL R5). Requests are bytes serialized by the caller
(:func:`~letagents_trio._http._request.request_bytes`). Nothing here has a
timeout: the caller bounds each call.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Final, final

import attrs
import h11
import trio

from ._request import (
    MAX_HEAD_BYTES,
    MAX_INFORMATIONAL,
    NETWORK_ERRORS,
    HTTPFailure,
    Opener,
    Origin,
    failure_kind,
    header_value,
)
from ._sockio import READ_SIZE, close_now, read_some

__all__ = ["LANES", "Answer", "KeepAlivePool"]

# Idle connections kept by default: enough for a burst of exits asked a few
# hundred at a time to find connections free rather than open new ones.
KEEP_IDLE: Final = 256
# The most connections one batch spreads over. Up to this many exits each go
# on a connection of their own, all in flight at once, which suits any room,
# however it reads and however slowly it answers; beyond it, each connection
# carries several, pipelined: a few connections and tasks for thousands of
# exits, each recorded as soon as the room reads it (a server that reads one
# request only once it has answered the one before, and answers slowly, then
# records a lane's next exit only after that answer).
LANES: Final = 1024

Answered = Callable[[int, "Answer | HTTPFailure"], Awaitable[None]]


@final
@attrs.frozen
class Answer:
    """One answer: its status, its headers (names in lower case) and its body."""

    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes

    def header(self, name: str) -> str | None:
        """The first header called ``name`` (any case), decoded as Latin-1; None without one."""
        return header_value(self.headers, name)


@final
@attrs.define(eq=False)
class _Connection:
    stream: trio.abc.Stream
    conn: h11.Connection
    # Whether it was kept alive from earlier requests (then its first failure may be stale).
    reused: bool = False
    # Whether a byte of an answer was read on it since it was written to.
    heard: bool = False


class _Refused(Exception):
    """One answer broke the rules (its request fails alone): the failure's kind."""


@final
class KeepAlivePool:
    """Requests to ``origin`` over kept-alive connections; many at once pipelined.

    Args:
        opener: where the connections come from.
        origin: the origin every request goes to.
        keep: the most idle connections kept open.
        lanes: the most connections one batch spreads over.
    """

    def __init__(
        self, opener: Opener, origin: Origin, *, keep: int = KEEP_IDLE, lanes: int = LANES
    ) -> None:
        if keep < 0:
            raise ValueError(f"keep must not be negative, got {keep}")
        if lanes < 1:
            raise ValueError(f"lanes must be at least 1, got {lanes}")
        self._opener = opener
        self._origin = origin
        self._keep = keep
        self._lanes = lanes
        self._idle: list[_Connection] = []
        self._closed = False
        # What h11 is told was sent, once per answer expected: the bytes went
        # out already, serialized ahead; h11 only needs to expect the answer.
        self._stand_in = h11.Request(
            method="POST", target="/", headers=[("Host", origin.authority), ("Content-Length", "0")]
        )

    def __repr__(self) -> str:
        return f"<KeepAlivePool {self._origin.authority} idle={len(self._idle)}>"

    async def exchange(self, data: bytes, *, max_body: int) -> Answer:
        """Send one serialized request and read its answer (a body over ``max_body`` fails it).

        Raises:
            HTTPFailure: the connection failed; or broke before the answer
                (on a kept-alive one: twice, the second time on a new one);
                or the answer broke HTTP's rules or the cap (``BodyTooLarge``).

        Cancellation:
            A checkpoint. Cancelled, the connection is closed; the room may
            have acted on the request.
        """
        results: list[Answer | HTTPFailure] = []

        async def keep(index: int, result: Answer | HTTPFailure) -> None:
            results.append(result)
            await trio.lowlevel.checkpoint()

        await self.exchange_many([data], max_body=max_body, answered=keep)
        [result] = results
        if isinstance(result, HTTPFailure):
            raise result
        return result

    async def exchange_many(
        self, requests: Sequence[bytes], *, max_body: int, answered: Answered
    ) -> None:
        """Send serialized requests pipelined over a few connections; hand over each answer.

        ``answered(index, answer_or_failure)`` is awaited once per request, as
        its answer is read (or its request has failed: an
        :class:`HTTPFailure`), in order on each connection.

        Cancellation:
            A checkpoint. Cancelled, every connection still waiting is closed
            (the room may have acted on each request written), and the
            requests not answered yet are never handed over.
        """
        lanes = min(self._lanes, len(requests))
        if lanes == 1:
            await self._lane(requests, range(len(requests)), max_body, answered)
            await trio.lowlevel.checkpoint()
            return
        async with trio.open_nursery() as nursery:
            for lane in range(lanes):
                share = range(lane, len(requests), lanes)
                nursery.start_soon(self._lane, requests, share, max_body, answered)

    async def aclose(self) -> None:
        """Close the idle connections; later exchanges fail.

        Cancellation:
            A checkpoint; the connections are closed even when cancelled.
        """
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            await _close(connection)
        await trio.lowlevel.checkpoint()

    async def _lane(
        self, requests: Sequence[bytes], share: Sequence[int], max_body: int, answered: Answered
    ) -> None:
        """One connection's share of a batch: written at once, answers read in order.

        A new connection is taken for what a closed or broken one left.
        """
        remaining = deque(share)
        while remaining:
            if self._idle:
                connection = self._idle.pop()
            else:
                try:
                    connection = await self._connect()
                except HTTPFailure as failure:
                    await _fail_all(remaining, failure, answered)
                    return
            reused, usable = connection.reused, False
            connection.heard = False
            try:
                await connection.stream.send_all(b"".join(requests[i] for i in remaining))
                while remaining:
                    try:
                        answer: Answer | HTTPFailure = await self._read_answer(connection, max_body)
                    except _Refused as refused:
                        answer = HTTPFailure(str(refused))  # fails alone
                    usable = not isinstance(answer, HTTPFailure) and self._next_cycle(connection)
                    await answered(remaining.popleft(), answer)
                    if not usable:
                        break  # the room closes it, or it is unusable: the rest go on a new one
            except NETWORK_ERRORS as exc:
                usable = False
                broken = HTTPFailure(failure_kind(exc))
                if connection.heard:
                    # Broken mid-answer: the room had that request, which fails;
                    # the rest go out again on a new connection.
                    await answered(remaining.popleft(), broken)
                elif not reused:
                    await _fail_all(remaining, broken, answered)
                    return
                # Else stale (closed by the room while idle): all again, on a new one.
            finally:
                if usable and not remaining and not self._closed and len(self._idle) < self._keep:
                    self._idle.append(connection)
                elif not close_now(connection.stream):
                    await trio.aclose_forcefully(connection.stream)

    async def _connect(self) -> _Connection:
        if self._closed:
            raise HTTPFailure("the pool is closed")
        try:
            stream = await self._opener.open_stream(self._origin)
        except NETWORK_ERRORS as exc:
            raise HTTPFailure(failure_kind(exc)) from exc
        conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)
        return _Connection(stream, conn)

    async def _read_answer(self, connection: _Connection, max_body: int) -> Answer:
        """Read the next answer on ``connection`` (written already, as serialized bytes).

        Raises:
            _Refused: the answer is over ``max_body``, or comes after too many
                informational ones (the connection is then unusable).
            h11.ProtocolError, trio.BrokenResourceError, OSError: the network
                failed, or the room closed without an answer.

        Cancellation:
            A checkpoint; the connection is left unusable.
        """
        conn, stream = connection.conn, connection.stream
        conn.send(self._stand_in)
        conn.send(h11.EndOfMessage())
        head: h11.Response | None = None
        body = bytearray()
        informational = 0
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                data = await read_some(stream, READ_SIZE)
                connection.heard = connection.heard or bool(data)
                conn.receive_data(data)
            elif isinstance(event, h11.Response):
                head = event
            elif isinstance(event, h11.Data):
                body += event.data
                if len(body) > max_body:
                    raise _Refused("BodyTooLarge")
            elif isinstance(event, h11.EndOfMessage):
                assert head is not None
                return Answer(head.status_code, tuple(head.headers), bytes(body))
            elif isinstance(event, h11.InformationalResponse):
                informational += 1
                if informational > MAX_INFORMATIONAL:
                    raise _Refused("TooManyInformational")
            else:
                # ConnectionClosed: the room closed it without an answer.
                raise h11.RemoteProtocolError("server disconnected without an answer")

    def _next_cycle(self, connection: _Connection) -> bool:
        """Ready ``connection`` for its next answer; False when the room closes it."""
        conn = connection.conn
        if conn.our_state is h11.DONE and conn.their_state is h11.DONE:
            conn.start_next_cycle()
            connection.reused = True
            return True
        return False


async def _fail_all(remaining: deque[int], failure: HTTPFailure, answered: Answered) -> None:
    while remaining:
        await answered(remaining.popleft(), failure)


async def _close(connection: _Connection) -> None:
    """Close ``connection`` at once (a socket close), or forcefully when only aclose can."""
    stream = connection.stream
    if not close_now(stream):
        await trio.aclose_forcefully(stream)
