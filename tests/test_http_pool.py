"""Exits pipelined over a few kept-alive connections (``letagents_trio._http._pool``).

In memory, under the mock clock: a scripted room reads each connection's
requests as they come (as Node's server does) and answers each one as the
test says: at once, late, never, or by closing the connection.
"""

from __future__ import annotations

import json
import socket
from collections import Counter
from collections.abc import Awaitable, Callable
from functools import partial
from typing import Literal

import attrs
import h11
import pytest
import trio
import trio.testing

from letagents_trio import AgentSession, ApiError, RoomClient, RoomUnreachable
from letagents_trio._http import Answer, HTTPFailure, Origin
from letagents_trio._http._pool import LANES, PipelinedPool
from letagents_trio._http._request import request_bytes

ORIGIN = Origin("http", "room.test", 80)
OK = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 17\r\n\r\n"
    b'{"recorded":true}'
)
CLOSING = b'HTTP/1.1 200 OK\r\nContent-Length: 17\r\nConnection: close\r\n\r\n{"recorded":true}'
CHUNKED = (
    b'HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n11\r\n{"recorded":true}\r\n0\r\n\r\n'
)


@attrs.frozen
class Late:
    """An answer sent ``delay`` seconds after the request came, whatever came after it."""

    delay: float
    answer: bytes | Literal["close"] = OK


# An answer to send; or one sent late; or close without one; or never answer; or
# half an answer, then close.
Action = bytes | Late | Literal["close", "silence", "half"]


def exit_request(n: int = 1) -> bytes:
    return request_bytes(ORIGIN, f"/rooms/r/agent-sessions/s{n}/process/exit", "POST", [], b"{}")


def session_of(target: str) -> str:
    return target.split("/")[4]


@attrs.define
class ScriptedRoom:
    """An opener whose connections are served by ``script(connection, request)``.

    Each connection's requests are read as they come; their answers go out
    in order, each when its action says (``Late``: its delay after the
    request came), as an HTTP/1.1 server answers pipelined requests.
    """

    script: Callable[[int, int], Action] = lambda connection, request: OK
    nursery: trio.Nursery | None = None
    opened: int = 0
    # (connection, request, target, time read) of every request the room read.
    seen: list[tuple[int, int, str, float]] = attrs.field(factory=list)
    # The fields and body of every request the room read.
    requests: list[tuple[dict[str, str], bytes]] = attrs.field(factory=list)
    # Connections the room saw closed by the client.
    closed: list[int] = attrs.field(factory=list)

    async def open_stream(self, origin: Origin) -> trio.abc.Stream:
        assert origin == ORIGIN
        assert self.nursery is not None
        ours, theirs = trio.testing.memory_stream_pair()
        number = self.opened
        self.opened += 1
        self.nursery.start_soon(self._serve, number, theirs)
        await trio.lowlevel.checkpoint()
        return ours

    async def _serve(self, number: int, stream: trio.abc.Stream) -> None:
        send, receive = trio.open_memory_channel[tuple[float, Action]](1000)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._answer, number, stream, receive)
            await self._read(number, stream, send, nursery)

    async def _read(
        self,
        number: int,
        stream: trio.abc.Stream,
        answers: trio.MemorySendChannel[tuple[float, Action]],
        nursery: trio.Nursery,
    ) -> None:
        conn = h11.Connection(h11.SERVER)
        request = 0
        fields: dict[str, str] = {}
        body = b""
        async with answers:
            try:
                while True:
                    event = conn.next_event()
                    if event is h11.NEED_DATA:
                        data = await stream.receive_some(65536)
                        if not data:
                            self.closed.append(number)
                            return
                        conn.receive_data(bytes(data))
                    elif type(event) is h11.Request:
                        now = trio.current_time()
                        self.seen.append((number, request, event.target.decode(), now))
                        fields = {k.decode(): v.decode() for k, v in event.headers}
                        fields[":method"] = event.method.decode()
                        body = b""
                    elif type(event) is h11.Data:
                        body += event.data
                    elif type(event) is h11.EndOfMessage:
                        self.requests.append((fields, body))
                        await answers.send((trio.current_time(), self.script(number, request)))
                        request += 1
                        # The next request starts afresh, with what came after this one.
                        leftover, _ = conn.trailing_data
                        conn = h11.Connection(h11.SERVER)
                        if leftover:  # (nothing given to h11 means the end of the stream)
                            conn.receive_data(bytes(leftover))
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self.closed.append(number)
                nursery.cancel_scope.cancel()

    async def _answer(
        self,
        number: int,
        stream: trio.abc.Stream,
        answers: trio.MemoryReceiveChannel[tuple[float, Action]],
    ) -> None:
        try:
            async for came, action in answers:
                if isinstance(action, Late):
                    await trio.sleep_until(came + action.delay)
                    action = action.answer
                if action == "half":
                    await stream.send_all(OK[:20])
                    action = "close"
                if action == "close":
                    await stream.aclose()
                    return
                if action == "silence":
                    await trio.sleep_forever()
                assert isinstance(action, bytes)
                await stream.send_all(action)
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass


class Wrapped(trio.abc.Stream):
    """A stream around ``inner``, neither a socket nor a memory stream: ``close_now``
    cannot close it and ``send_now`` cannot write it, so the pool writes it with
    ``send_all`` (each write taking ``write_delay`` seconds) and closes it with ``aclose``
    (noted in ``closed``)."""

    def __init__(
        self, inner: trio.abc.Stream, *, write_delay: float = 0.0, closed: list[str] | None = None
    ) -> None:
        self.inner = inner
        self.write_delay = write_delay
        self.closed = closed

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await trio.sleep(self.write_delay)
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:  # pragma: no cover - not used
        await self.inner.wait_send_all_might_not_block()

    async def send_eof(self) -> None:  # pragma: no cover - not used
        raise NotImplementedError

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        return bytes(await self.inner.receive_some(max_bytes))

    async def aclose(self) -> None:
        if self.closed is not None:
            self.closed.append("aclose")
        await self.inner.aclose()


@attrs.frozen
class ServedBy:
    """An opener whose every connection the room side serves with ``serve``, in memory."""

    nursery: trio.Nursery
    serve: Callable[[trio.abc.Stream], Awaitable[None]]

    async def open_stream(self, origin: Origin) -> trio.abc.Stream:
        ours, theirs = trio.testing.memory_stream_pair()
        self.nursery.start_soon(self.serve, theirs)
        await trio.lowlevel.checkpoint()
        return ours


@pytest.fixture
async def room(nursery: trio.Nursery) -> ScriptedRoom:
    return ScriptedRoom(nursery=nursery)


async def exchange(pool: PipelinedPool, n: int = 1, *, max_body: int = 1024) -> Answer:
    return await pool.exchange(exit_request(n), max_body=max_body)


async def exchange_all(pool: PipelinedPool, count: int) -> dict[int, Answer | HTTPFailure]:
    """``count`` exchanges asked at once; each one's answer or failure."""
    results: dict[int, Answer | HTTPFailure] = {}

    async def ask(n: int) -> None:
        try:
            results[n] = await exchange(pool, n)
        except HTTPFailure as exc:
            results[n] = exc

    async with trio.open_nursery() as nursery:
        for n in range(count):
            nursery.start_soon(ask, n)
    return results


def answered_sessions(room: ScriptedRoom, connection: int) -> list[str]:
    return [session_of(t) for c, _, t, _ in room.seen if c == connection]


# --- pipelining ------------------------------------------------------------------------


async def test_an_answered_connection_serves_the_next_request(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    pool = PipelinedPool(room, ORIGIN)
    first = await exchange(pool, 1)
    second = await exchange(pool, 2)
    assert (
        first
        == second
        == Answer(
            200,
            ((b"content-type", b"application/json"), (b"content-length", b"17")),
            b'{"recorded":true}',
        )
    )
    assert first.header("Content-Type") == "application/json"
    assert first.header("Retry-After") is None
    assert room.opened == 1
    assert [(c, r) for c, r, _, _ in room.seen] == [(0, 0), (0, 1)]


async def test_requests_asked_at_once_are_written_behind_each_other_on_at_most_lanes_connections(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    """The room answers each request a second late: all 24 come at once, after one second."""
    room.script = lambda connection, request: Late(1.0)
    pool = PipelinedPool(room, ORIGIN, lanes=3)
    results = await exchange_all(pool, 24)
    assert trio.current_time() == 1.0
    assert all(isinstance(r, Answer) and r.status == 200 for r in results.values())
    assert room.opened == 3
    assert {t for _, _, _, t in room.seen} == {0.0}
    assert sorted(len(answered_sessions(room, c)) for c in range(3)) == [8, 8, 8]


async def test_each_caller_gets_the_answer_to_its_own_request(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    """Answers are matched to requests by their order on the connection."""

    def numbered(connection: int, request: int) -> Action:
        # Each answer names the session whose request it answers.
        _, _, target, _ = room.seen[-1]
        body = json.dumps({"session": session_of(target)}).encode()
        return Late(
            0.1 * (request % 3),
            b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body),
        )

    room.script = numbered
    pool = PipelinedPool(room, ORIGIN, lanes=2)
    results = await exchange_all(pool, 10)
    for n, answer in results.items():
        assert isinstance(answer, Answer)
        assert json.loads(answer.body) == {"session": f"s{n}"}


async def test_a_black_holed_room_receives_every_request_at_once(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    room.script = lambda connection, request: "silence"
    pool = PipelinedPool(room, ORIGIN, lanes=2)
    with trio.move_on_after(1.5) as scope:
        await exchange_all(pool, 50)
    assert scope.cancelled_caught
    assert len(room.seen) == 50
    assert {t for _, _, _, t in room.seen} == {0.0}
    assert room.opened == 2


async def test_the_first_lane_is_used_alone_while_it_has_nothing_waiting(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    pool = PipelinedPool(room, ORIGIN)
    for n in range(5):
        await exchange(pool, n)
    assert room.opened == 1
    assert repr(pool) == "<PipelinedPool room.test lanes=1 waiting=0>"


async def test_each_caller_is_told_when_its_request_is_written_not_when_it_is_answered(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    """Connected after a second, the room answers two seconds after each request came."""
    room.script = lambda connection, request: Late(2.0)

    class Slow:
        async def open_stream(self, origin: Origin) -> trio.abc.Stream:
            await trio.sleep(1.0)
            return await room.open_stream(origin)

    pool = PipelinedPool(Slow(), ORIGIN, lanes=2)
    told: list[tuple[int, float]] = []
    answered: list[float] = []

    async def ask(n: int) -> None:
        await pool.exchange(
            exit_request(n), max_body=1024, sent=lambda: told.append((n, trio.current_time()))
        )
        answered.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        for n in range(6):
            nursery.start_soon(ask, n)
    assert sorted(told) == [(n, 1.0) for n in range(6)]
    assert {t for _, _, _, t in room.seen} == {1.0}
    assert answered == [3.0] * 6


async def test_a_request_never_written_is_told_once_as_its_exchange_ends(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    """Its connection refused, or its room never connected before its caller gave up."""

    class Refusing:
        async def open_stream(self, origin: Origin) -> trio.abc.Stream:
            await trio.sleep(0.5)
            raise ConnectionRefusedError(111, "refused")

    class Never:
        async def open_stream(self, origin: Origin) -> trio.abc.Stream:
            await trio.sleep_forever()

    told: list[float] = []
    with pytest.raises(HTTPFailure):
        await PipelinedPool(Refusing(), ORIGIN).exchange(
            exit_request(), max_body=1024, sent=lambda: told.append(trio.current_time())
        )
    with trio.move_on_after(1.0):
        await PipelinedPool(Never(), ORIGIN).exchange(
            exit_request(), max_body=1024, sent=lambda: told.append(trio.current_time())
        )
    assert told == [0.5, 1.5]


def test_lanes_must_be_at_least_one() -> None:
    assert LANES == 128
    with pytest.raises(ValueError, match="lanes must be at least 1, got 0"):
        PipelinedPool(ScriptedRoom(), ORIGIN, lanes=0)


# --- a connection that ends early ------------------------------------------------------


async def every_answered_each_connection_taking(
    room: ScriptedRoom, pool: PipelinedPool, count: int, k: int
) -> None:
    """``count`` exchanges at once are all answered, each connection answering ``k``.

    The first ``k`` on each connection were answered; the rest went out again
    on the next connection, in the same order, one at a time: the room read
    each there only once the one before was answered, so a replacement
    carries its answered requests and at most the one it closed on.
    """
    results = await exchange_all(pool, count)
    assert all(isinstance(r, Answer) for r in results.values())
    assert room.opened == -(-count // k)
    unanswered = answered_sessions(room, 0)
    assert len(unanswered) == count
    for connection in range(1, room.opened):
        unanswered = unanswered[k:]
        carried = answered_sessions(room, connection)
        assert carried[:k] == unanswered[:k]
        assert carried == unanswered[: len(carried)]
        assert len(carried) <= k + 1
    assert len(room.seen) < 2 * count
    assert max(Counter(session_of(t) for _, _, t, _ in room.seen).values()) <= 3


async def test_a_room_that_closes_after_k_requests_gets_the_rest_on_new_connections(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    """Each connection answers 3 requests, then closes: every request is answered once."""
    room.script = lambda connection, request: OK if request < 3 else "close"
    pool = PipelinedPool(room, ORIGIN, lanes=1)
    await every_answered_each_connection_taking(room, pool, 10, 3)


async def test_an_answer_that_says_the_room_closes_moves_the_rest_to_a_new_connection(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    room.script = lambda connection, request: CLOSING if request == 1 else OK
    pool = PipelinedPool(room, ORIGIN, lanes=1)
    await every_answered_each_connection_taking(room, pool, 5, 2)
    await trio.testing.wait_all_tasks_blocked()
    assert room.closed[:2] == [0, 1]


async def test_a_connection_that_never_answered_fails_its_requests(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    room.script = lambda connection, request: "close"
    pool = PipelinedPool(room, ORIGIN, lanes=1)
    results = await exchange_all(pool, 3)
    assert {str(r) for r in results.values()} == {"RemoteProtocolError"}
    assert room.opened == 1


async def test_a_connection_the_room_closed_while_idle_is_replaced_once(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    room.script = lambda connection, request: "close" if (connection, request) == (0, 1) else OK
    pool = PipelinedPool(room, ORIGIN)
    await exchange(pool, 1)
    answer = await exchange(pool, 2)
    assert answer.status == 200
    assert room.opened == 2
    assert [(c, r, session_of(t)) for c, r, t, _ in room.seen] == [
        (0, 0, "s1"),
        (0, 1, "s2"),
        (1, 0, "s2"),
    ]


async def test_a_request_that_fails_again_on_the_new_connection_fails(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    room.script = lambda connection, request: OK if (connection, request) == (0, 0) else "close"
    pool = PipelinedPool(room, ORIGIN)
    await exchange(pool, 1)
    with pytest.raises(HTTPFailure, match=r"^RemoteProtocolError$"):
        await exchange(pool, 2)
    assert room.opened == 2


async def test_a_connection_broken_mid_answer_moves_the_unanswered_once_it_answered(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    room.script = lambda connection, request: "half" if (connection, request) == (0, 1) else OK
    pool = PipelinedPool(room, ORIGIN, lanes=1)
    results = await exchange_all(pool, 3)
    assert all(isinstance(r, Answer) for r in results.values())
    assert room.opened == 2
    assert answered_sessions(room, 1) == answered_sessions(room, 0)[1:]


async def test_an_opener_that_fails_fails_every_request_of_the_connection(
    autojump_clock: trio.testing.MockClock,
) -> None:
    class Refusing:
        opened = 0

        async def open_stream(self, origin: Origin) -> trio.abc.Stream:
            self.opened += 1
            await trio.lowlevel.checkpoint()
            raise ConnectionRefusedError(111, "refused")

    opener = Refusing()
    pool = PipelinedPool(opener, ORIGIN, lanes=1)
    results = await exchange_all(pool, 3)
    assert {str(r) for r in results.values()} == {"ConnectionRefusedError"}
    assert opener.opened == 1


# --- answers ---------------------------------------------------------------------------


async def test_an_answer_over_the_cap_fails_every_request_unanswered_on_its_connection(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    """The room had each request once; what follows the big answer is not read."""
    big = b"HTTP/1.1 200 OK\r\nContent-Length: 2000\r\n\r\n" + b"x" * 2000
    room.script = lambda connection, request: big if (connection, request) == (0, 1) else OK
    pool = PipelinedPool(room, ORIGIN, lanes=1)
    results = await exchange_all(pool, 3)
    first, *rest = (int(s[1:]) for s in answered_sessions(room, 0))
    assert isinstance(results[first], Answer)
    assert {n: str(results[n]) for n in rest} == dict.fromkeys(rest, "BodyTooLarge")
    assert room.opened == 1


async def test_an_answer_of_exactly_the_cap_is_read(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    exact = b"HTTP/1.1 200 OK\r\nContent-Length: 1024\r\n\r\n" + b"x" * 1024
    room.script = lambda connection, request: exact
    pool = PipelinedPool(room, ORIGIN)
    assert (await exchange(pool, max_body=1024)).body == b"x" * 1024


@pytest.mark.parametrize(
    "answer",
    [
        CHUNKED,
        b"HTTP/1.1 100 Continue\r\n\r\n" + OK,
        b'HTTP/1.1 200 OK\nContent-Length: 17\n\n{"recorded":true}',
        b'HTTP/1.1 200 OK\r\nContent-Length: 17\r\nX-Folded: a\r\n b\r\n\r\n{"recorded":true}',
    ],
    ids=["chunked", "informational", "bare-line-feeds", "folded"],
)
async def test_an_answer_only_h11_reads_is_read_by_h11_and_every_one_after_it(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom, answer: bytes
) -> None:
    room.script = lambda connection, request: answer if request == 1 else OK
    pool = PipelinedPool(room, ORIGIN, lanes=1)
    results = await exchange_all(pool, 4)
    assert [r.body if isinstance(r, Answer) else r for r in results.values()] == [
        b'{"recorded":true}'
    ] * 4
    assert room.opened == 1


async def test_a_head_past_the_cap_with_no_end_fails(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    room.script = lambda connection, request: b"HTTP/1.1 200 OK\r\nX: " + b"y" * 70_000
    pool = PipelinedPool(room, ORIGIN)
    with pytest.raises(HTTPFailure, match=r"^RemoteProtocolError$"):
        await exchange(pool)


async def test_too_many_informational_answers_fail_the_request(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    room.script = lambda connection, request: b"HTTP/1.1 103 Early Hints\r\n\r\n" * 9 + OK
    pool = PipelinedPool(room, ORIGIN)
    with pytest.raises(HTTPFailure, match=r"^TooManyInformational$"):
        await exchange(pool)


GARBLED = {
    # The body is longer than said: the next answer starts mid-body.
    "short-length": OK.replace(b"Content-Length: 17", b"Content-Length: 5"),
    # The body is shorter than said: the next answers are read as its body.
    "long-length": OK.replace(b"Content-Length: 17", b"Content-Length: 100"),
    "huge-body": b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"x" * 100_000,
    "continue-flood": b"HTTP/1.1 100 Continue\r\n\r\n" * 50 + OK,
}


@pytest.mark.parametrize("answer", GARBLED.values(), ids=GARBLED.keys())
async def test_a_room_that_garbles_every_answer_gets_each_request_once_on_at_most_lanes(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom, answer: bytes
) -> None:
    """1,000 exits at once to a room whose every answer is garbled: no connection
    beyond the first ``LANES``, no request read twice, each one done."""
    room.script = lambda connection, request: answer
    pool = PipelinedPool(room, ORIGIN)
    with trio.fail_after(5):
        results = await exchange_all(pool, 1000)
    assert room.opened == LANES
    assert max(Counter(session_of(t) for _, _, t, _ in room.seen).values()) == 1
    assert len(results) == 1000
    assert sum(isinstance(r, HTTPFailure) for r in results.values()) >= 1000 - LANES


# --- cancellation and closing ----------------------------------------------------------


async def first_cancelled_second_answered(pool: PipelinedPool) -> list[Answer]:
    """Ask two exchanges at once on one connection; stop waiting for the first after 1 s.

    Returns the second's answer (in a list: empty when it has none).
    """
    second: list[Answer] = []

    async def ask_second() -> None:
        second.append(await exchange(pool, 2))

    async with trio.open_nursery() as nursery:
        with trio.move_on_after(1):
            nursery.start_soon(ask_second)
            await exchange(pool, 1)
    return second


async def test_a_request_whose_caller_stopped_waiting_has_its_answer_read_and_dropped(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    room.script = lambda connection, request: Late(2.0) if request == 0 else OK
    pool = PipelinedPool(room, ORIGIN, lanes=1)
    results = await first_cancelled_second_answered(pool)
    # The second's answer came after the first's, which nobody waited for.
    assert trio.current_time() == 2.0
    assert [r.status for r in results] == [200]
    assert room.opened == 1


async def test_a_reader_that_stops_waiting_half_way_leaves_the_answer_to_the_next(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    """The first caller reads half of its answer's head, then is cancelled."""
    halves = [OK[:30], OK[30:] + OK]

    async def serve(stream: trio.abc.Stream) -> None:
        data = b""
        while data.count(b"{}") < 2:
            data += await stream.receive_some()
        await stream.send_all(halves[0])
        await trio.sleep(2)
        await stream.send_all(halves[1])
        await trio.sleep_forever()

    pool = PipelinedPool(ServedBy(nursery, serve), ORIGIN, lanes=1)
    second = await first_cancelled_second_answered(pool)
    assert second == [
        Answer(
            200,
            ((b"content-type", b"application/json"), (b"content-length", b"17")),
            b'{"recorded":true}',
        )
    ]


async def test_a_closed_pool_fails_waiting_requests_and_takes_no_more(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    room.script = lambda connection, request: "silence"
    pool = PipelinedPool(room, ORIGIN)
    failures: list[str] = []

    async def ask() -> None:
        with pytest.raises(HTTPFailure) as caught:
            await exchange(pool, 1)
        failures.append(str(caught.value))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        await trio.testing.wait_all_tasks_blocked()
        await pool.aclose()
    assert failures == ["the pool is closed"]
    await trio.testing.wait_all_tasks_blocked()
    assert room.closed == [0]
    with pytest.raises(HTTPFailure, match=r"^the pool is closed$"):
        await exchange(pool, 2)


async def test_the_request_goes_out_as_serialized_in_origin_form(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    pool = PipelinedPool(room, ORIGIN)
    await exchange(pool, 1)
    [(fields, body)] = room.requests
    assert [t for _, _, t, _ in room.seen] == ["/rooms/r/agent-sessions/s1/process/exit"]
    assert (fields[":method"], fields["host"], fields["content-length"], body) == (
        "POST",
        "room.test",
        "2",
        b"{}",
    )


async def test_a_stream_only_aclose_can_close_is_closed_forcefully(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    closed: list[str] = []

    class WrappingOpener:
        async def open_stream(self, origin: Origin) -> trio.abc.Stream:
            return Wrapped(await room.open_stream(origin), closed=closed)

    room.script = lambda connection, request: CLOSING
    pool = PipelinedPool(WrappingOpener(), ORIGIN)
    assert (await exchange(pool)).status == 200
    assert closed == ["aclose"]


# --- RoomClient's exits over the lean stack's pool ------------------------------------

SESSION = AgentSession(room_id="r", session_id="s-1", session_token="tok-secret-1")


def client_for(room: ScriptedRoom, owner: list[str]) -> RoomClient:
    return RoomClient("http://room.test", opener=room, owner_token=lambda: owner[0])


async def test_each_exit_is_made_as_it_is_sent_and_shares_the_kept_alive_connection(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    owner = ["owner-secret-1"]
    client = client_for(room, owner)
    assert await client.announce_exit(SESSION, "c-1") is True
    owner[0] = "owner-secret-2"
    other = attrs.evolve(SESSION, session_id="s-2")
    assert await client.announce_exit(other, None) is True
    assert room.opened == 1
    assert [(c, r, t) for c, r, t, _ in room.seen] == [
        (0, 0, "/rooms/r/agent-sessions/s-1/process/exit"),
        (0, 1, "/rooms/r/agent-sessions/s-2/process/exit"),
    ]
    sent = [(fields["authorization"], json.loads(body)) for fields, body in room.requests]
    assert sent == [
        (
            "Bearer owner-secret-1",
            {
                "agent_session_id": "s-1",
                "agent_session_token": "tok-secret-1",
                "process_connection_id": "c-1",
            },
        ),
        (
            "Bearer owner-secret-2",
            {
                "agent_session_id": "s-2",
                "agent_session_token": "tok-secret-1",
                "process_connection_id": None,
            },
        ),
    ]
    await client.aclose()
    await trio.testing.wait_all_tasks_blocked()
    assert room.closed == [0]


async def test_an_exit_the_room_refuses_is_an_api_error_and_recorded_false_is_false(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    refused = b"HTTP/1.1 503 Busy\r\nRetry-After: 7\r\nContent-Length: 4\r\n\r\nbusy"
    not_recorded = b'HTTP/1.1 200 OK\r\nContent-Length: 18\r\n\r\n{"recorded":false}'
    answers = iter([refused, not_recorded])
    room.script = lambda connection, request: next(answers)
    client = client_for(room, ["owner-secret-1"])
    with pytest.raises(ApiError) as caught:
        await client.announce_exit(SESSION, "c-1")
    assert (caught.value.status, caught.value.retry_after) == (503, 7.0)
    assert await client.announce_exit(SESSION, "c-1") is False
    assert room.opened == 1
    await client.aclose()


@pytest.mark.parametrize(
    "token", ["tok\r\nX-Evil: 1", "tok-ünïcode"], ids=["line-break", "not-ascii"]
)
async def test_a_credential_that_cannot_be_sent_fails_the_exit_without_showing_it(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom, token: str
) -> None:
    client = RoomClient("http://room.test", opener=room)
    bad = attrs.evolve(SESSION, session_token=token)
    with pytest.raises(RoomUnreachable) as caught:
        await client.announce_exit(bad, "c-1")
    assert (
        str(caught.value)
        == "POST /rooms/r/agent-sessions/s-1/process/exit failed: LocalProtocolError"
    )
    assert room.opened == 0
    await client.aclose()


async def test_a_closed_client_sends_no_more_exits(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    client = client_for(room, ["owner-secret-1"])
    await client.aclose()
    with pytest.raises(RoomUnreachable, match=r"failed: the stack is closed$"):
        await client.announce_exit(SESSION, "c-1")
    assert room.opened == 0


async def test_exits_over_real_sockets_are_pipelined_on_one_connection(
    nursery: trio.Nursery,
) -> None:
    """On loopback, where requests are written and answers read straight from the socket."""
    room = ScriptedRoom(nursery=nursery)
    served: list[int] = []

    async def handler(stream: trio.SocketStream) -> None:
        served.append(len(served))
        await room._serve(served[-1], stream)

    [listener] = await nursery.start(partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
    port = listener.socket.getsockname()[1]

    class Loopback:
        async def open_stream(self, origin: Origin) -> trio.abc.Stream:
            return await trio.open_tcp_stream("127.0.0.1", port)

    pool = PipelinedPool(Loopback(), ORIGIN, lanes=1)
    with trio.fail_after(10):
        results = await exchange_all(pool, 50)
        # Once connected, a request is written, and its caller told, as it is asked:
        # told, this caller stops waiting for an answer that never comes.
        room.script = lambda connection, request: "silence"
        with trio.CancelScope() as told:
            await pool.exchange(exit_request(50), max_body=1024, sent=told.cancel)
        assert told.cancelled_caught
        await pool.aclose()
    assert [a.body for a in results.values() if isinstance(a, Answer)] == [
        b'{"recorded":true}'
    ] * 50
    assert served == [0]
    assert [r for c, r, _, _ in room.seen] == list(range(51))


async def test_a_writer_cancelled_mid_write_ends_its_connection(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Part of the bytes may be out: the connection cannot carry another request."""
    closed: list[int] = []

    class Stuck(trio.abc.Stream):
        """Takes no byte, ever; not a socket, so the pool writes with send_all."""

        def __init__(self, number: int) -> None:
            self.number = number

        async def send_all(self, data: bytes | bytearray | memoryview) -> None:
            await trio.sleep_forever()

        async def wait_send_all_might_not_block(self) -> None:  # pragma: no cover - not used
            await trio.sleep_forever()

        async def send_eof(self) -> None:  # pragma: no cover - not used
            raise NotImplementedError

        async def receive_some(self, max_bytes: int | None = None) -> bytes:
            await trio.sleep_forever()
            raise AssertionError  # pragma: no cover

        async def aclose(self) -> None:
            closed.append(self.number)
            await trio.lowlevel.checkpoint()

    class Opener:
        opened = 0

        async def open_stream(self, origin: Origin) -> trio.abc.Stream:
            self.opened += 1
            await trio.lowlevel.checkpoint()
            return Stuck(self.opened)

    opener = Opener()
    pool = PipelinedPool(opener, ORIGIN)
    with trio.move_on_after(1):
        await exchange(pool, 1)
    assert closed == [1]
    with trio.move_on_after(1):
        await exchange(pool, 2)
    assert opener.opened == 2


# --- a socket the room does not read for a while ---------------------------------------


def big_request(n: int, size: int) -> bytes:
    """An exit whose body (``size`` bytes) fills the socket's buffers many times over."""
    target = f"/rooms/r/agent-sessions/s{n}/process/exit"
    return request_bytes(ORIGIN, target, "POST", [], b"x" * size)


# The socket buffers of a HeldBackRoom's connections (the kernel doubles them).
BUFFER = 16384


@attrs.define
class HeldBackRoom:
    """A loopback room that reads nothing until ``go`` is set, then serves as ``room`` does.

    Both ends' socket buffers are small, so a request of a few megabytes is
    written a part at a time, as the room reads.
    """

    room: ScriptedRoom
    go: trio.Event = attrs.field(factory=trio.Event)
    # Set once the room has read the connection to its end.
    served: trio.Event = attrs.field(factory=trio.Event)
    port: int = 0

    async def start(self, nursery: trio.Nursery) -> None:
        async def handler(stream: trio.SocketStream) -> None:
            await self.go.wait()
            await self.room._serve(0, stream)
            self.served.set()

        [listener] = await trio.open_tcp_listeners(0, host="127.0.0.1")
        listener.socket.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, BUFFER)
        self.port = listener.socket.getsockname()[1]
        nursery.start_soon(trio.serve_listeners, handler, [listener])

    async def open_stream(self, origin: Origin) -> trio.abc.Stream:
        stream = await trio.open_tcp_stream("127.0.0.1", self.port)
        stream.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, BUFFER)
        self.room.opened += 1
        return stream


async def test_a_writer_that_stops_waiting_at_a_full_socket_leaves_the_rest_to_be_written(
    nursery: trio.Nursery,
) -> None:
    """The first caller's request is 1 MB, the room reads nothing yet: its caller
    waits for room in the socket, then gives up. The second caller, reading,
    still gets its answer once the room reads: both requests reach the room
    whole, on the one connection."""
    room = HeldBackRoom(ScriptedRoom(nursery=nursery))
    await room.start(nursery)
    pool = PipelinedPool(room, ORIGIN, lanes=1)
    first = trio.CancelScope()
    second: list[Answer] = []

    async def ask_first() -> None:
        with first:
            await pool.exchange(big_request(1, 1 << 20), max_body=1024)

    told: list[str] = []

    async def ask_second() -> None:
        answer = await pool.exchange(
            exit_request(2), max_body=1024, sent=lambda: told.append("written")
        )
        second.append(answer)

    with trio.fail_after(10):
        async with trio.open_nursery() as callers:
            callers.start_soon(ask_first)
            await trio.testing.wait_all_tasks_blocked()
            callers.start_soon(ask_second)
            await trio.testing.wait_all_tasks_blocked()
            first.cancel()
            await trio.testing.wait_all_tasks_blocked()
            # Behind the rest of the first request, the second is not written yet.
            assert told == []
            room.go.set()
    await pool.aclose()
    assert first.cancelled_caught
    assert told == ["written"]
    assert [a.status for a in second] == [200]
    assert [(c, r, session_of(t)) for c, r, t, _ in room.room.seen] == [(0, 0, "s1"), (0, 1, "s2")]
    assert [len(body) for _, body in room.room.requests] == [1 << 20, 2]
    assert room.room.opened == 1


async def test_once_connected_a_request_is_written_before_its_callers_first_checkpoint(
    nursery: trio.Nursery,
) -> None:
    """On a plain socket an exit asked by a caller already past its deadline still
    goes out (the goodbye asks its exits as its deadline nears), and its caller
    is told so."""
    room = HeldBackRoom(ScriptedRoom(nursery=nursery))
    room.go.set()
    await room.start(nursery)
    pool = PipelinedPool(room, ORIGIN, lanes=1)
    told: list[str] = []
    with trio.fail_after(10):
        await exchange(pool, 1)
        with trio.CancelScope() as late:
            late.cancel()
            await pool.exchange(exit_request(2), max_body=1024, sent=lambda: told.append("out"))
        assert late.cancelled_caught
        assert told == ["out"]
        # Closing now drops only what was never handed to the kernel.
        await pool.aclose()
        await room.served.wait()
    assert [session_of(t) for _, _, t, _ in room.room.seen] == ["s1", "s2"]


# --- the pool's own life and its connections -------------------------------------------


async def test_a_pool_closed_while_connecting_closes_the_connection_when_it_comes(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    class Slow:
        async def open_stream(self, origin: Origin) -> trio.abc.Stream:
            await trio.sleep(1.0)
            return await room.open_stream(origin)

    pool = PipelinedPool(Slow(), ORIGIN)
    failures: list[tuple[str, float]] = []

    async def ask() -> None:
        with pytest.raises(HTTPFailure) as caught:
            await exchange(pool, 1)
        failures.append((str(caught.value), trio.current_time()))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask)
        await trio.sleep(0.5)
        await pool.aclose()
    await trio.testing.wait_all_tasks_blocked()
    assert failures == [("the pool is closed", 1.0)]
    assert room.opened == 1
    assert room.closed == [0]
    assert room.seen == []


async def test_a_replacement_connection_serves_later_requests_and_is_closed_with_the_pool(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    room.script = lambda connection, request: "close" if (connection, request) == (0, 1) else OK
    pool = PipelinedPool(room, ORIGIN)
    await exchange(pool, 1)
    await exchange(pool, 2)  # written again on connection 1, once 0 closed
    third = await exchange(pool, 3)
    fourth = await exchange(pool, 4)
    assert (third.status, fourth.status) == (200, 200)
    assert [(c, r, session_of(t)) for c, r, t, _ in room.seen] == [
        (0, 0, "s1"),
        (0, 1, "s2"),
        (1, 0, "s2"),
        (1, 1, "s3"),
        (1, 2, "s4"),
    ]
    await pool.aclose()
    await trio.testing.wait_all_tasks_blocked()
    assert room.closed == [0, 1]


async def test_a_request_whose_caller_stopped_waiting_is_not_sent_again(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    """The room closes the connection two seconds after the second request, unanswered;
    its caller gave up after one: only the third goes out again."""
    room.script = lambda connection, request: Late(2.0, "close") if request == 1 else OK
    pool = PipelinedPool(room, ORIGIN, lanes=1)
    await exchange(pool, 0)
    third = await first_cancelled_second_answered(pool)
    assert [a.status for a in third] == [200]
    assert trio.current_time() == 2.0
    assert answered_sessions(room, 1) == ["s2"]


# --- answers h11 reads -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("then", "opened", "outcome"),
    [
        # The room closes the connection between answers, or half-way through
        # one: the rest go out again on a new connection.
        ("close", 2, [200, 200, 200]),
        ("half", 2, [200, 200, 200]),
        # A length that is no number: the rest fail, on the one connection.
        (
            b"HTTP/1.1 200 OK\r\nContent-Length: x\r\n\r\n",
            1,
            [200, "RemoteProtocolError", "RemoteProtocolError"],
        ),
    ],
    ids=["closed", "cut", "garbled"],
)
async def test_after_an_answer_only_h11_reads_the_room_closing_moves_and_garbling_fails(
    autojump_clock: trio.testing.MockClock,
    room: ScriptedRoom,
    then: Action,
    opened: int,
    outcome: list[int | str],
) -> None:
    def script(connection: int, request: int) -> Action:
        if connection == 0:
            return CHUNKED if request == 0 else then
        return OK

    room.script = script
    pool = PipelinedPool(room, ORIGIN, lanes=1)
    results = await exchange_all(pool, 3)
    order = [int(s[1:]) for s in answered_sessions(room, 0)]
    assert [
        r.status if isinstance(r, Answer) else str(r) for r in (results[n] for n in order)
    ] == outcome
    assert room.opened == opened


@pytest.mark.parametrize(("size", "read"), [(1024, True), (1025, False)])
async def test_a_chunked_answer_is_held_to_the_cap_too(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom, size: int, read: bool
) -> None:
    body = b"y" * size
    chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n%x\r\n%s\r\n0\r\n\r\n" % (
        size,
        body,
    )
    room.script = lambda connection, request: chunked
    pool = PipelinedPool(room, ORIGIN)
    if read:
        assert (await exchange(pool, max_body=1024)).body == body
    else:
        with pytest.raises(HTTPFailure, match=r"^BodyTooLarge$"):
            await exchange(pool, max_body=1024)


async def test_each_answer_may_carry_its_own_informational_heads(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    hinted = b"HTTP/1.1 103 Early Hints\r\n\r\n" * 8 + OK
    room.script = lambda connection, request: hinted
    pool = PipelinedPool(room, ORIGIN)
    for n in range(3):
        assert (await exchange(pool, n)).status == 200


async def test_answers_that_come_together_are_each_read_after_one_only_h11_reads(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    """The room answers three requests in one write: a chunked answer, then two sized."""

    async def serve(stream: trio.abc.Stream) -> None:
        data = b""
        while data.count(b"{}") < 3:
            data += await stream.receive_some()
        await stream.send_all(CHUNKED + OK + OK)
        await trio.sleep_forever()

    pool = PipelinedPool(ServedBy(nursery, serve), ORIGIN, lanes=1)
    with trio.fail_after(5):
        results = await exchange_all(pool, 3)
    assert [r.body if isinstance(r, Answer) else r for r in results.values()] == [
        b'{"recorded":true}'
    ] * 3


async def test_a_large_head_is_read_on_h11s_path_too(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    """A head of 40 KiB (under the 64 KiB cap), chunked: h11 reads it."""
    big = CHUNKED.replace(b"\r\n\r\n", b"\r\nX-Big: " + b"z" * 40_000 + b"\r\n\r\n", 1)
    room.script = lambda connection, request: big
    pool = PipelinedPool(room, ORIGIN)
    answer = await exchange(pool)
    assert (answer.body, len(answer.header("X-Big") or "")) == (b'{"recorded":true}', 40_000)


async def test_a_request_queued_behind_one_being_written_is_told_only_once_its_own_bytes_are(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    """Each write takes a second: the second request, asked while the first is
    written, is told at 2, after its own write, not at 1."""

    class SlowOpener:
        async def open_stream(self, origin: Origin) -> trio.abc.Stream:
            return Wrapped(await room.open_stream(origin), write_delay=1.0)

    pool = PipelinedPool(SlowOpener(), ORIGIN, lanes=1)
    told: list[tuple[int, float]] = []

    async def ask(n: int) -> None:
        await pool.exchange(
            exit_request(n), max_body=1024, sent=lambda: told.append((n, trio.current_time()))
        )

    async with trio.open_nursery() as nursery:
        nursery.start_soon(ask, 1)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(ask, 2)
    assert told == [(1, 1.0), (2, 2.0)]
    await pool.aclose()


class Rounds(trio.abc.Instrument):
    """Counts the run loop's rounds (each waits for I/O once)."""

    def __init__(self) -> None:
        self.count = 0

    def before_io_wait(self, timeout: float) -> None:
        self.count += 1


async def test_answers_read_together_are_handed_out_in_the_readers_turn(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    """A room answers 200 pipelined requests in one write: the caller whose turn it
    is to read hands every answer already read to its caller, with no turn each
    (a goodbye reads thousands of answers on 128 connections; a round of the
    run loop each would let thousands of unwinding holders run between two)."""

    async def serve(stream: trio.abc.Stream) -> None:
        data = b""
        while data.count(b"{}") < 200:
            data += await stream.receive_some()
        await stream.send_all(OK * 200)
        await trio.sleep_forever()

    pool = PipelinedPool(ServedBy(nursery, serve), ORIGIN, lanes=1)
    rounds = Rounds()
    trio.lowlevel.add_instrument(rounds)
    try:
        results = await exchange_all(pool, 200)
    finally:
        trio.lowlevel.remove_instrument(rounds)
    assert [r.body for r in results.values() if isinstance(r, Answer)] == [OK[-17:]] * 200
    assert rounds.count < 20


@pytest.mark.parametrize(
    ("first", "cut"),
    [(OK, len(OK) - 5), (OK, 10), (CHUNKED, 0)],
    ids=["in the body", "in the head", "after one only h11 reads"],
)
async def test_a_reader_whose_answer_came_does_not_wait_for_the_rest_of_the_next(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery, first: bytes, cut: int
) -> None:
    """The room sends the first answer and part of the second, the rest a second
    later: the first caller has its answer at once, the second at 1."""

    async def serve(stream: trio.abc.Stream) -> None:
        data = b""
        while data.count(b"{}") < 2:
            data += await stream.receive_some()
        await stream.send_all(first + OK[:cut])
        await trio.sleep(1)
        await stream.send_all(OK[cut:])
        await trio.sleep_forever()

    pool = PipelinedPool(ServedBy(nursery, serve), ORIGIN, lanes=1)
    answered: dict[int, float] = {}

    async def ask(n: int) -> None:
        await exchange(pool, n)
        answered[n] = trio.current_time()

    async with trio.open_nursery() as callers:
        callers.start_soon(ask, 1)
        await trio.testing.wait_all_tasks_blocked()
        callers.start_soon(ask, 2)
    assert answered == {1: 0.0, 2: 1.0}
