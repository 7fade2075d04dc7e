"""The bookkeeping of a :class:`~._pool.PipelinedPool`: its connections, their requests, answers.

A :class:`Lane` is one kept-alive connection: the requests written on it in
order (whose answers come in that order), the bytes not written yet, and who
among the callers waiting on it is at its work (opening it, writing, reading).
A :class:`Request` is one caller's request on a lane, and once read its
:class:`Answer` or failure. What the pool does with them (the turns, the
reads, a lane's end) is :mod:`~._pool`'s.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, final

import attrs
import h11
import trio

from ._request import MAX_HEAD_BYTES, HTTPFailure, header_value

if TYPE_CHECKING:
    from ._answer import SimpleHead

__all__ = ["Answer", "Lane", "Request", "Settled"]


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


# Told of a handed request's answer, or else of its failure (see Request.settled).
Settled = Callable[["Answer | None", "HTTPFailure | None"], object]


@final
class Request:
    """One request on a lane: its bytes, and once read its answer or failure.

    A request has a caller waiting for it, or else (``settled``) was handed
    over with no caller: whoever reads its answer, or fails it, tells
    ``settled``, with no checkpoint.
    """

    __slots__ = (
        "_wake",
        "answer",
        "data",
        "end",
        "failure",
        "gone",
        "lane",
        "max_body",
        "sent",
        "settled",
    )

    def __init__(
        self,
        data: bytes,
        max_body: int,
        lane: Lane,
        sent: Callable[[], object] | None,
        settled: Settled | None = None,
    ) -> None:
        self.data = data
        self.max_body = max_body
        self.lane = lane
        self.answer: Answer | None = None
        self.failure: HTTPFailure | None = None
        self.settled = settled
        # Its caller stopped waiting (or, handed, the pool's delivery did):
        # its answer is read and dropped.
        self.gone = False
        self._wake: trio.Event | None = None
        # Told once its bytes are handed to the kernel (then None); at its
        # lane's byte count ``end`` they are.
        self.sent = sent
        self.end = 0

    @property
    def done(self) -> bool:
        return self.answer is not None or self.failure is not None

    @property
    def handed(self) -> bool:
        """Handed over with no caller, and not yet answered, failed, or given up."""
        return self.settled is not None and not self.gone and not self.done

    def answered(self, answer: Answer) -> None:
        """Its answer is read: wake its caller, or tell ``settled``."""
        self.answer = answer
        self._settle()

    def failed(self, failure: HTTPFailure) -> None:
        """It failed: wake its caller, or tell ``settled``."""
        self.failure = failure
        self._settle()

    def _settle(self) -> None:
        self.wake()
        settled, self.settled = self.settled, None
        if settled is not None and not self.gone:
            settled(self.answer, self.failure)

    @property
    def parked(self) -> bool:
        """Waiting for a turn, and not yet woken for one."""
        return self._wake is not None and not self._wake.is_set()

    async def park(self) -> None:
        """Wait until :meth:`wake` (its answer, or a turn at its lane's work).

        Cancellation:
            A checkpoint; cancelled, the request is no longer waiting and a
            later :meth:`wake` does nothing.
        """
        self._wake = trio.Event()
        try:
            await self._wake.wait()
        finally:
            self._wake = None

    def wake(self) -> None:
        if self._wake is not None:
            self._wake.set()

    def tell_sent(self) -> None:
        """Tell its caller it is on its way (once)."""
        sent, self.sent = self.sent, None
        if sent is not None:
            sent()


@final
class Lane:
    """One connection: its requests in the order written, whose answers come in that order."""

    __slots__ = (
        "answered",
        "body",
        "buffer",
        "closed",
        "conn",
        "connecting",
        "eof",
        "h11",
        "head",
        "informational",
        "last_head",
        "last_simple",
        "one_at_a_time",
        "outbox",
        "queued",
        "reader",
        "reading",
        "stream",
        "unsent",
        "waiting",
        "writing",
        "written",
    )

    def __init__(self, *, one_at_a_time: bool = False) -> None:
        self.stream: trio.abc.Stream | None = None
        # A replacement (see the module docstring): the next request is
        # written once the one before is answered.
        self.one_at_a_time = one_at_a_time
        # The room closed it: a protocol error now is its end, not garbling.
        self.eof = False
        self.conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)
        self.waiting: deque[Request] = deque()
        # Bytes of its requests not written yet; the bytes ever queued and
        # written on it, and the requests whose caller waits to be told they
        # are written (see Request.sent), in the order queued.
        self.outbox = bytearray()
        self.queued = self.written = 0
        self.unsent: deque[Request] = deque()
        # Answers read on it, ever: none, and a failure is the room's, not an idle close.
        self.answered = 0
        self.closed = False
        # Who is at its work: one caller for each.
        self.connecting = self.writing = self.reading = False
        # The reader's read, which bytes left unwritten interrupt (see wake_next).
        self.reader: trio.CancelScope | None = None
        # Bytes read and not yet part of an answer, while answers are simple
        # heads (_answer.simple_head); from the first that is not, h11 reads.
        self.buffer = bytearray()
        self.h11 = False
        # The last simple head read, and what it says (see _pool._simple_head).
        self.last_head = b""
        self.last_simple: SimpleHead | None = None
        # The answer h11 is reading, kept here so that another caller can
        # finish it when its reader stops waiting (cancelled) half-way.
        self.head: h11.Response | None = None
        self.body = bytearray()
        self.informational = 0

    def queue(self, request: Request) -> None:
        """Put ``request``'s bytes at the end of the outbox."""
        self.outbox += request.data
        self.queued += len(request.data)
        request.end = self.queued
        if request.sent is not None:
            self.unsent.append(request)

    def took(self, size: int) -> None:
        """The kernel took the outbox's first ``size`` bytes: tell the requests now written."""
        del self.outbox[:size]
        self.written += size
        while self.unsent and self.unsent[0].end <= self.written:
            self.unsent.popleft().tell_sent()

    def wake_next(self) -> None:
        """Wake the first caller waiting here for a turn, to take the work just left.

        With none waiting, bytes a writer left unwritten (it stopped waiting
        for room in the socket) would wait for the reader, who waits for an
        answer to them: its read is interrupted, and it writes them first.
        """
        for request in self.waiting:
            if request.parked and not request.done:
                request.wake()
                return
        if self.outbox and not self.writing and self.reader is not None:
            self.reader.cancel(reason="bytes to write, and no other caller to write them")
