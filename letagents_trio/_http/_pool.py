"""Requests over kept-alive HTTP/1.1 connections to one origin, one at a time each.

The goodbye asks thousands of exits of the room at once. A connection of its
own for each, opened and closed, costs a socket, a connect and a close, and
at ten thousand sessions that is a large part of the process's last second
and a half. A :class:`KeepAlivePool` keeps the connections a request is
answered on, and the next request takes one of them when it is free:

* a request is written on an idle kept-alive connection (the most recently
  used: likeliest still open), else on a new one. A connection carries one
  request at a time and is never written ahead of an answer (no pipelining):
  a room that takes its time over an answer, or never gives it, must not
  hold back the requests behind it, and HTTP/1.1 servers answer one request
  at a time per connection (Node's among them). So requests asked at once
  are all in flight at once, each on its own connection, which is what a
  room slow to answer needs; a fast room frees connections as quickly as
  they are asked for;
* once answered, the connection goes back to the idle ones, unless the room
  said it closes it, or ``keep`` are idle already (then it is closed);
* a kept-alive connection the room closed while it was idle fails the next
  request written on it before any byte of an answer: that request goes out
  once more, on a new connection. A request that fails on a new connection
  fails.
  Only requests that may be sent twice belong here: a replayed exit changes
  nothing (PROTOCOL R5).

Requests are bytes serialized by the caller
(:func:`~letagents_trio._http._request.request_bytes`). Nothing here has a
timeout: the caller bounds each :meth:`KeepAlivePool.exchange`.
"""

from __future__ import annotations

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

__all__ = ["Answer", "KeepAlivePool"]

# Idle connections kept by default: enough for a burst of exits asked a few
# hundred at a time to find connections free rather than open new ones.
KEEP_IDLE: Final = 256


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
    # Whether an answer was read on it: if not, it is new.
    reused: bool = False


class _TooLarge(Exception):
    """An answer body over the pool's cap."""


class _TooManyInformational(Exception):
    """More informational (1xx) answers than :data:`~._request.MAX_INFORMATIONAL`."""


@final
class KeepAlivePool:
    """Requests to ``origin`` over kept-alive connections, each used by one request at a time.

    Args:
        opener: where the connections come from.
        origin: the origin every request goes to.
        keep: the most idle connections kept open.
    """

    def __init__(self, opener: Opener, origin: Origin, *, keep: int = KEEP_IDLE) -> None:
        if keep < 0:
            raise ValueError(f"keep must not be negative, got {keep}")
        self._opener = opener
        self._origin = origin
        self._keep = keep
        self._idle: list[_Connection] = []
        self._closed = False
        # What h11 is told was sent: the bytes went out already, serialized
        # ahead; h11 only needs to expect one answer for each request.
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
        if self._idle:
            try:
                return await self._exchange_on(self._idle.pop(), data, max_body)
            except _Stale:
                pass  # the room closed it while idle: once more, on a new one
        return await self._exchange_on(await self._connect(), data, max_body)

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

    async def _connect(self) -> _Connection:
        if self._closed:
            raise HTTPFailure("the pool is closed")
        try:
            stream = await self._opener.open_stream(self._origin)
        except NETWORK_ERRORS as exc:
            raise HTTPFailure(failure_kind(exc)) from exc
        conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)
        return _Connection(stream, conn)

    async def _exchange_on(self, connection: _Connection, data: bytes, max_body: int) -> Answer:
        """Write ``data`` on ``connection``, read the answer, keep or close the connection.

        Raises:
            _Stale: a kept-alive connection broke before any byte of the answer.
        """
        conn = connection.conn
        stream = connection.stream
        got_bytes = False
        try:
            try:
                await stream.send_all(data)
                conn.send(self._stand_in)
                conn.send(h11.EndOfMessage())
                head: h11.Response | None = None
                body = bytearray()
                informational = 0
                while True:
                    event = conn.next_event()
                    if event is h11.NEED_DATA:
                        chunk = await read_some(stream, READ_SIZE)
                        got_bytes = got_bytes or bool(chunk)
                        conn.receive_data(chunk)
                    elif isinstance(event, h11.Response):
                        head = event
                    elif isinstance(event, h11.Data):
                        body += event.data
                        if len(body) > max_body:
                            raise _TooLarge
                    elif isinstance(event, h11.EndOfMessage):
                        break
                    elif isinstance(event, h11.InformationalResponse):
                        informational += 1
                        if informational > MAX_INFORMATIONAL:
                            raise _TooManyInformational
                    else:
                        # ConnectionClosed: the room closed it without an answer.
                        raise h11.RemoteProtocolError("server disconnected without an answer")
            except BaseException:
                # Failed, too large or cancelled: the connection's state is unknown.
                if not close_now(stream):
                    await trio.aclose_forcefully(stream)
                raise
        except _TooLarge:
            raise HTTPFailure("BodyTooLarge") from None
        except _TooManyInformational:
            raise HTTPFailure("TooManyInformational") from None
        except NETWORK_ERRORS as exc:
            if connection.reused and not got_bytes:
                raise _Stale from exc
            raise HTTPFailure(failure_kind(exc)) from exc
        assert head is not None
        connection.reused = True
        if (
            conn.our_state is h11.DONE
            and conn.their_state is h11.DONE
            and not self._closed
            and len(self._idle) < self._keep
        ):
            conn.start_next_cycle()
            self._idle.append(connection)
        else:
            await _close(connection)
        return Answer(head.status_code, tuple(head.headers), bytes(body))


class _Stale(Exception):
    """A kept-alive connection broke before any of its answer: the room closed it idle."""


async def _close(connection: _Connection) -> None:
    """Close ``connection`` at once (a socket close), or forcefully when only aclose can."""
    stream = connection.stream
    if not close_now(stream):
        await trio.aclose_forcefully(stream)
