"""Requests pipelined over a few kept-alive HTTP/1.1 connections to one origin.

The goodbye asks thousands of exits of the room at once, within 1.5 s. A
connection of its own for each costs a socket, a connect, a close and an
exchange waited for alone: at ten thousand sessions more than the deadline.
A :class:`PipelinedPool` sends them over at most ``lanes`` connections
instead, each request written as soon as it is asked, behind those already
on its connection (pipelining, RFC 9112 §9.3): the room reads them as they
come and answers each connection's requests in order. A room slow to answer
holds back only the answers, never the requests: every exit reaches it at
once, and a replayed exit changes nothing (PROTOCOL §2.2), so only requests
that may be sent twice belong here.

* A request goes on the connection with the fewest requests waiting (looked
  for from the one after the last picked); a new one is opened while fewer
  than ``lanes`` are open and each has some. Once
  answered, a connection stays open for the next requests, unless the room
  said it closes it.
* A request has a caller waiting for it (:meth:`PipelinedPool.exchange`),
  or is handed over with no caller (:meth:`PipelinedPool.send_nowait`: a
  goodbye's thousands of exits), its outcome told to a callback as it is
  read or fails; :meth:`PipelinedPool.deliver` then runs one task per
  connection holding some, a caller of the last of them there, until each
  is settled.
* There is no task of the pool's own: the callers waiting on a connection
  (and the delivery's tasks) take turns at its work. One at a time opens it; a request is written as
  it is asked, with no task switch, when the kernel takes it at once
  (:func:`~._sockio.send_now`), else by one caller at a time, who waits for
  room in the socket; one reads the answers, hands each to its caller (and
  every answer after it already read: no turn each) and, once its own has
  come, hands the reading to the next caller waiting. A
  writer that stops waiting leaves its turn to a caller waiting for one, or
  else interrupts the reader, who writes the rest before it reads on: the
  answer it waits for may be to the bytes left.
* A connection that breaks, or that the room closes (after an answer that
  says so, or while idle), leaves its requests still unanswered to a new
  connection, if an answer was ever read on it; on a connection that never
  answered, they fail. So every new connection is opened on an answer, and
  a room that closes after each answer still gets every request. The new
  connection carries them one at a time (the next written once the one
  before is answered): its room closes connections early, and a request
  pipelined behind one that ends its connection would go out again, and
  again; so each request is written at most twice.
* An answer that breaks HTTP's rules or the caller's cap (a length that
  leaves the next answer garbled, a body over the cap, endless ``1xx``
  heads) fails its own request and every one still unanswered on its
  connection, which ends: the room had each of them once, and what it
  answers on that connection can no longer be read. A garbling room never
  makes the pool open a connection, or write a request, beyond the first.
* A caller that stops waiting (cancelled: the goodbye's deadline) leaves
  its request where it is; its answer, when it comes, is read and dropped.
* A caller may ask to be told when its request is on its way
  (``sent``): called once its bytes are handed to the kernel, or else when
  its exchange ends. Over TLS a request waits for its connection's
  handshake and a writer's turn, which a goodbye wants to pass before it
  closes the streams whose holders would then unwind (see the SSE connector).

Requests are bytes serialized by the caller
(:func:`~letagents_trio._http._request.request_bytes`). Nothing here has a
timeout: the caller bounds each :meth:`PipelinedPool.exchange`.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Final, final

import h11
import trio

from ._lane_answers import AnswerFailed, next_answer
from ._lanes import Answer, Lane, Request, Settled
from ._request import (
    NETWORK_ERRORS,
    HTTPFailure,
    Opener,
    Origin,
    failure_kind,
)
from ._sockio import can_send_now, close_now, send_now

__all__ = ["LANES", "PipelinedPool"]

# Connections per origin. Node's server (the letagents room's) reads every
# request as it comes on any of them; a server that reads a connection's next
# request only once it has answered the one before (hypercorn, behind the
# reference room; a proxy) reads at most one exit per connection at a time,
# and the exits still queued when the process is gone are lost: with four,
# the reference room received 1,139 of 10,000; with 64, every one. Node's
# server over TLS stops reading a connection once about 121 answers wait
# unread there, which a goodbye of thousands reads only late: 128 lanes take
# 10,000 exits (docs/performance.md, "128 connections for the exits").
LANES: Final = 128
# The most a lane's end may take once its writer was cancelled (shielded).
_END_BOUND: Final = 0.01


@final
class PipelinedPool:
    """Requests to ``origin`` pipelined over at most ``lanes`` kept-alive connections.

    Args:
        opener: where the connections come from.
        origin: the origin every request goes to.
        lanes: the most connections open at once (at least 1).
    """

    def __init__(self, opener: Opener, origin: Origin, *, lanes: int = LANES) -> None:
        if lanes < 1:
            raise ValueError(f"lanes must be at least 1, got {lanes}")
        self._opener = opener
        self._origin = origin
        self._width = lanes
        self._lanes: list[Lane] = []
        # _pick's next lane to look at, and a floor under the fewest requests
        # waiting on a lane (every lane has at least that many).
        self._cursor = 0
        self._fewest = 0
        self._closed = False
        # What h11 is told was sent before each answer is read: the bytes went
        # out already, serialized ahead; h11 only needs to expect one answer.
        self._stand_in = h11.Request(
            method="POST", target="/", headers=[("Host", origin.authority), ("Content-Length", "0")]
        )

    def __repr__(self) -> str:
        waiting = sum(len(lane.waiting) for lane in self._lanes)
        return (
            f"<PipelinedPool {self._origin.authority} lanes={len(self._lanes)} waiting={waiting}>"
        )

    async def exchange(
        self, data: bytes, *, max_body: int, sent: Callable[[], object] | None = None
    ) -> Answer:
        """Send one serialized request and read its answer (a body over ``max_body`` fails it).

        ``sent``, when given, is called once, without arguments and without a
        checkpoint: when the request's bytes are handed to the kernel, or
        else when the exchange ends (failed, or cancelled before).

        Raises:
            HTTPFailure: the connection could not be opened, or broke without
                ever answering (also after the request moved to a new one);
                or the answer broke HTTP's rules or the cap (``BodyTooLarge``).

        Cancellation:
            A checkpoint. Cancelled, the request stays on its connection (it
            may be on the wire already): the room may act on it.
        """
        if self._closed:
            if sent is not None:
                sent()
            await trio.lowlevel.checkpoint()
            raise HTTPFailure("the pool is closed")
        request = Request(data, max_body, self._pick(), sent)
        self._enqueue(request)
        try:
            await self._await(request)
        finally:
            request.gone = not request.done
            request.tell_sent()
        if request.failure is not None:
            raise request.failure
        assert request.answer is not None
        return request.answer

    def send_nowait(
        self,
        data: bytes,
        *,
        max_body: int,
        settled: Settled,
        sent: Callable[[], object] | None = None,
    ) -> None:
        """Hand one serialized request over, with no caller waiting: ``settled`` gets its outcome.

        It goes on a connection as :meth:`exchange`'s would, and is written as
        soon as that connection takes it; :meth:`deliver` does the
        connections' work for it. ``settled(answer, failure)`` is called
        once, with no checkpoint, when its answer is read or it fails (never
        once :meth:`deliver` was cancelled with it unsettled); ``sent`` as
        for :meth:`exchange`, or when :meth:`deliver` gives it up.

        Raises:
            HTTPFailure: the pool is closed (nothing was sent).
        """
        if self._closed:
            raise HTTPFailure("the pool is closed")
        self._enqueue(Request(data, max_body, self._pick(), sent, settled))

    async def deliver(self) -> None:
        """Do every connection's work until each request handed over is settled.

        One task per connection that holds some, waiting on the last of them
        there (the answers come in order): it opens the connection, writes
        its requests and reads its answers, settling each as it is read. A
        goodbye of thousands of exits so runs as many tasks as connections.

        Cancellation:
            A checkpoint. Cancelled, the requests not settled are given up:
            each stays where it is (its answer, when it comes, is read and
            dropped), is told it is sent, and is never settled.
        """
        try:
            while targets := self._last_handed():
                async with trio.open_nursery() as connections:
                    for request in targets:
                        connections.start_soon(self._await, request)
            await trio.lowlevel.checkpoint()
        finally:
            for lane in self._lanes:
                for request in lane.waiting:
                    if request.handed:
                        request.gone = True
                        request.tell_sent()

    def _last_handed(self) -> list[Request]:
        """The last request handed over and not settled on each connection that has one."""
        targets = []
        for lane in self._lanes:
            for request in reversed(lane.waiting):
                if request.handed:
                    targets.append(request)
                    break
        return targets

    def _enqueue(self, request: Request) -> None:
        """Put ``request`` on its lane, writing it at once where the kernel takes it."""
        lane = request.lane
        lane.waiting.append(request)
        if not lane.one_at_a_time or len(lane.waiting) == 1:
            lane.queue(request)
        self._write_now(lane)

    async def _await(self, request: Request) -> None:
        """Take turns at ``request``'s lane's work until it is answered or failed.

        Cancellation:
            A checkpoint at each turn it takes (none when ``request`` is
            already settled); cancelled, ``request`` is left as it is (its
            caller marks it gone).
        """
        while not request.done:
            await self._take_turn(request)

    async def aclose(self) -> None:
        """Close every connection; requests waiting and later ones fail.

        Cancellation:
            A checkpoint; the connections are closed even when cancelled.
        """
        self._closed = True
        lanes, self._lanes = self._lanes, []
        for lane in lanes:
            await self._end(lane, "the pool is closed", retry=False)
        await trio.lowlevel.checkpoint()

    def _pick(self) -> Lane:
        """An open lane with the fewest requests waiting; a new one while all have some.

        Looked for from the lane after the last one picked, against a floor
        under the fewest waiting (lowered as requests leave a lane), so that
        thousands of requests asked at once cost a look at about one lane
        each, not at every lane: a full look only once every lane has more
        than the floor.
        """
        if self._lanes:
            lane = self._at_floor()
            if lane is None:
                self._fewest = min(len(lane.waiting) for lane in self._lanes)
                lane = self._at_floor()
                assert lane is not None
            if not lane.waiting or len(self._lanes) >= self._width:
                return lane
        lane = Lane()
        self._lanes.append(lane)
        self._fewest = 0
        self._cursor = len(self._lanes)
        return lane

    def _at_floor(self) -> Lane | None:
        """The next lane, from the cursor on, with no more requests waiting than the floor."""
        lanes = self._lanes
        count = len(lanes)
        for step in range(count):
            index = (self._cursor + step) % count
            if len(lanes[index].waiting) <= self._fewest:
                self._cursor = index + 1
                return lanes[index]
        return None

    def _write_now(self, lane: Lane) -> None:
        """Write what the kernel takes of ``lane``'s outbox at once, if no caller is writing it."""
        stream = lane.stream
        if stream is None or lane.closed or lane.writing or not lane.outbox:
            return
        if not can_send_now(stream):
            return
        try:
            written = send_now(stream, bytes(lane.outbox))
        except OSError:
            return  # the connection broke: its reader finds out, and ends it
        if written:
            lane.took(written)

    async def _take_turn(self, request: Request) -> None:
        """Do the first of ``request``'s lane's work no one is doing, or wait for a turn."""
        lane = request.lane
        if lane.stream is None and not lane.connecting:
            await self._connect(lane)
        elif lane.stream is not None and lane.outbox and not lane.writing:
            await self._write(lane)
        elif lane.stream is not None and not lane.reading:
            await self._read(lane, request)
        else:
            await request.park()

    @contextlib.asynccontextmanager
    async def _turn(self, lane: Lane, work: str) -> AsyncIterator[None]:
        """Hold ``lane``'s ``work`` (``"writing"``, ``"reading"``) in the block, then wake the next.

        A broken connection in the block ends the lane (its unanswered requests move on).
        """
        setattr(lane, work, True)
        try:
            yield
        except NETWORK_ERRORS as exc:
            await self._end(lane, failure_kind(exc), retry=True)
        finally:
            setattr(lane, work, False)
            lane.wake_next()

    async def _connect(self, lane: Lane) -> None:
        lane.connecting = True
        try:
            stream = await self._opener.open_stream(self._origin)
        except NETWORK_ERRORS as exc:
            await self._end(lane, failure_kind(exc), retry=False)
            return
        finally:
            lane.connecting = False
            lane.wake_next()
        if lane.closed:  # the pool was closed meanwhile
            await _close(stream)
            return
        lane.stream = stream
        self._write_now(lane)

    async def _write(self, lane: Lane) -> None:
        """Write ``lane``'s outbox until it is empty, waiting for room in the socket."""
        stream = lane.stream
        assert stream is not None
        async with self._turn(lane, "writing"):
            while lane.outbox and not lane.closed:
                if can_send_now(stream):
                    written = send_now(stream, bytes(lane.outbox))
                    if written:
                        lane.took(written)
                    else:
                        await stream.wait_send_all_might_not_block()
                else:
                    # Requests asked meanwhile join the outbox behind these bytes.
                    # Cancelled mid-way, an unknown part is written: the lane ends.
                    data = bytes(lane.outbox)
                    try:
                        await stream.send_all(data)
                    except trio.Cancelled:
                        # Closing forcefully never waits: the bound is never reached.
                        with trio.move_on_after(_END_BOUND, shield=True):
                            await self._end(lane, "WriteCancelled", retry=True)
                        raise
                    if not lane.closed:
                        lane.took(len(data))

    async def _read(self, lane: Lane, request: Request) -> None:
        """Read ``lane``'s answers in order, handing each to its caller, until ``request``'s."""
        async with self._turn(lane, "reading"):
            # Interrupted (see Lane.wake_next), it leaves the answer half-read
            # in the lane, and its caller takes the writing turn.
            with trio.CancelScope() as lane.reader:
                try:
                    await self._read_until(lane, request)
                finally:
                    lane.reader = None

    async def _read_until(self, lane: Lane, request: Request) -> None:
        """The reading turn's work (see :meth:`_read`).

        Once ``request``'s answer is read, the answers after it already read
        are handed to their callers too (no turn each: a goodbye reads
        thousands on a few connections, and a round of the run loop each
        would let thousands of other tasks run between two).
        """
        while request.lane is lane and lane.waiting:
            head = lane.waiting[0]
            answer: tuple[Answer, bool] | None = None
            garbled: str | None = None
            try:
                answer = await next_answer(
                    lane, head.max_body, self._stand_in, more=not request.done
                )
            except AnswerFailed as exc:
                garbled = exc.failure
            except h11.ProtocolError as exc:
                if lane.eof:
                    raise  # the room closed it: the rest may move (see _turn)
                garbled = failure_kind(exc)
            if garbled is not None:
                # Neither this answer nor any after it can be read: the
                # room had these requests once, and they fail here.
                await self._end(lane, garbled, retry=False)
                return
            if answer is None:
                return  # the next answer is not all read yet: the next caller's turn
            reply, keep = answer
            lane.waiting.popleft()
            self._fewest = min(self._fewest, len(lane.waiting))
            lane.answered += 1
            head.answered(reply)
            if not keep:
                # The room closes it after this answer: the rest go on a new connection.
                await self._end(lane, "ConnectionClosed", retry=True)
                return
            if lane.one_at_a_time and lane.waiting:
                lane.queue(lane.waiting[0])
                self._write_now(lane)
                if lane.outbox:
                    return  # a caller's turn writes it (this one's, or the next's)

    async def _end(self, lane: Lane, failure: str, *, retry: bool) -> None:
        """Close ``lane``; its unanswered requests move to a new lane, or fail.

        They move when ``retry`` and an answer was ever read on it (the room
        answers on its connections: this one ended early), and fail otherwise.
        """
        if lane.closed:
            return
        lane.closed = True
        if lane in self._lanes:
            self._lanes.remove(lane)
        waiting = [request for request in lane.waiting if not request.gone]
        lane.waiting.clear()
        lane.outbox.clear()
        lane.unsent.clear()
        if waiting and retry and lane.answered and not self._closed:
            moved = Lane(one_at_a_time=True)
            self._lanes.append(moved)
            for request in waiting:
                request.lane = moved
                moved.waiting.append(request)
            self._fewest = min(self._fewest, len(moved.waiting))
            moved.queue(waiting[0])
            moved.wake_next()
        else:
            for request in waiting:
                request.failed(HTTPFailure(failure))
        if lane.stream is not None:
            await _close(lane.stream)


async def _close(stream: trio.abc.Stream) -> None:
    """Close ``stream`` at once (a socket close), or forcefully when only aclose can."""
    if not close_now(stream):
        await trio.aclose_forcefully(stream)
