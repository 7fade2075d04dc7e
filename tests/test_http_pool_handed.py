"""Requests handed to the pipelined pool with no caller waiting (``send_nowait``, ``deliver``).

A goodbye hands its SSE exits over this way: one task per connection does the
connections' work, and each request is settled as its answer is read.
"""

from __future__ import annotations

from functools import partial

import pytest
import trio
import trio.testing

from letagents_trio._http import Answer, HTTPFailure, Origin, _lane_answers
from letagents_trio._http._answer import SimpleHead, simple_head
from letagents_trio._http._pool import PipelinedPool

from .test_http_pool import OK, ORIGIN, Late, ScriptedRoom, exchange, exit_request

Outcome = tuple[Answer | None, HTTPFailure | None, float]


class Spawned(trio.abc.Instrument):
    """Counts the tasks spawned, by the last part of their name."""

    def __init__(self) -> None:
        self.names: list[str] = []

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        self.names.append(task.name.rpartition(".")[2])


def hand(
    pool: PipelinedPool,
    count: int,
    outcomes: dict[int, Outcome],
    told: list[int] | None = None,
) -> None:
    """Hand ``count`` exits over; each one's outcome, and when, goes to ``outcomes``."""

    def settled(n: int, answer: Answer | None, failure: HTTPFailure | None) -> None:
        assert n not in outcomes, "settled twice"
        outcomes[n] = (answer, failure, trio.current_time())

    for n in range(count):
        sent = None if told is None else partial(told.append, n)
        pool.send_nowait(exit_request(n), max_body=1024, settled=partial(settled, n), sent=sent)


@pytest.fixture
async def room(nursery: trio.Nursery) -> ScriptedRoom:
    return ScriptedRoom(nursery=nursery)


async def test_handed_requests_are_carried_by_one_task_per_connection(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    """24 exits over 3 connections, answered a second after they came: three tasks
    carry them all (not one each), and every one is settled with its answer."""
    room.script = lambda connection, request: Late(1.0)
    pool = PipelinedPool(room, ORIGIN, lanes=3)
    outcomes: dict[int, Outcome] = {}
    hand(pool, 24, outcomes)
    assert outcomes == {}
    spawned = Spawned()
    trio.lowlevel.add_instrument(spawned)
    try:
        await pool.deliver()
    finally:
        trio.lowlevel.remove_instrument(spawned)
    assert spawned.names.count("_await") == 3
    assert room.opened == 3
    assert {t for _, _, _, t in room.seen} == {0.0}
    assert sorted(outcomes) == list(range(24))
    assert {
        (answer.status, answer.body, failure, at)
        for answer, failure, at in outcomes.values()
        if answer is not None
    } == {(200, OK[-17:], None, 1.0)}


async def test_each_handed_request_is_settled_as_its_answer_is_read(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    """One connection whose room answers the n-th request n tenths of a second after it
    came: each is settled then, by the connection's task, not once all are read."""
    room.script = lambda connection, request: Late(0.125 * request)
    pool = PipelinedPool(room, ORIGIN, lanes=1)
    outcomes: dict[int, Outcome] = {}
    hand(pool, 5, outcomes)
    await pool.deliver()
    assert [(failure, at) for _, failure, at in outcomes.values()] == [
        (None, 0.125 * n) for n in range(5)
    ]


async def test_a_delivery_cancelled_gives_its_requests_up_told_sent_never_settled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The room's connections never open: cut after a second, each request handed over
    is told it is on its way (its stream may close), and is never settled."""

    class Never:
        async def open_stream(self, origin: Origin) -> trio.abc.Stream:
            await trio.sleep_forever()

    pool = PipelinedPool(Never(), ORIGIN, lanes=2)
    outcomes: dict[int, Outcome] = {}
    told: list[int] = []
    hand(pool, 6, outcomes, told)
    with trio.move_on_after(1.0):
        await pool.deliver()
    assert sorted(told) == list(range(6))
    assert outcomes == {}


async def test_requests_handed_to_a_room_that_never_answers_a_connection_fail(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    """The room closes each connection unanswered: every request on it is settled failed."""
    room.script = lambda connection, request: "close"
    pool = PipelinedPool(room, ORIGIN, lanes=2)
    outcomes: dict[int, Outcome] = {}
    hand(pool, 4, outcomes)
    await pool.deliver()
    assert sorted(outcomes) == list(range(4))
    assert {(answer, type(failure)) for answer, failure, _ in outcomes.values()} == {
        (None, HTTPFailure)
    }


async def test_a_handed_request_and_a_callers_share_a_connection(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    """A caller's exchange behind a handed request on the one connection: the delivery
    and the caller take turns, and each gets its own answer."""
    room.script = lambda connection, request: Late(0.5)
    pool = PipelinedPool(room, ORIGIN, lanes=1)
    outcomes: dict[int, Outcome] = {}
    hand(pool, 1, outcomes)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(pool.deliver)
        answer = await exchange(pool, 7)
    assert answer.status == 200
    assert [(failure, at) for _, failure, at in outcomes.values()] == [(None, 0.5)]
    assert room.opened == 1


async def test_nothing_handed_is_delivered_at_once(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    pool = PipelinedPool(room, ORIGIN)
    await pool.deliver()
    assert trio.current_time() == 0
    assert room.opened == 0


async def test_a_closed_pool_takes_nothing_handed(room: ScriptedRoom) -> None:
    pool = PipelinedPool(room, ORIGIN)
    await pool.aclose()
    with pytest.raises(HTTPFailure, match=r"^the pool is closed$"):
        pool.send_nowait(exit_request(), max_body=1024, settled=lambda answer, failure: None)
    assert room.opened == 0


async def test_requests_asked_at_once_are_spread_over_the_connections_in_turn(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    """Ten handed over on four connections go 3, 3, 2, 2; once one connection's are
    answered, the next request goes there (it has the fewest waiting)."""
    room.script = lambda connection, request: Late(1.0) if connection else OK
    pool = PipelinedPool(room, ORIGIN, lanes=4)
    outcomes: dict[int, Outcome] = {}
    hand(pool, 10, outcomes)
    assert [len(lane.waiting) for lane in pool._lanes] == [3, 3, 2, 2]
    with trio.move_on_after(0.5):
        await pool.deliver()
    waiting = [len(lane.waiting) for lane in pool._lanes]
    assert waiting.count(0) == 1
    pool.send_nowait(exit_request(99), max_body=1024, settled=lambda answer, failure: None)
    waiting[waiting.index(0)] = 1
    assert [len(lane.waiting) for lane in pool._lanes] == waiting


async def test_a_head_the_same_as_the_last_on_its_connection_is_not_parsed_again(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Five answers, the third with another head (a longer body), the fourth saying the
    room closes the connection: the same heads are parsed once, and each answer is its own."""
    other = OK.replace(b"17", b"18").replace(b"true", b"false")
    closing = OK.replace(b"Content-Length", b"Connection: close\r\nContent-Length")
    replies = [OK, OK, other, closing, OK]
    room.script = lambda connection, request: replies[request] if connection == 0 else OK
    parsed: list[int] = []

    def counted(data: bytes | bytearray) -> SimpleHead | None:
        head = simple_head(data)
        if head is not None:
            parsed.append(head.length)
        return head

    monkeypatch.setattr(_lane_answers, "simple_head", counted)
    pool = PipelinedPool(room, ORIGIN, lanes=1)
    outcomes: dict[int, Outcome] = {}
    hand(pool, 5, outcomes)
    await pool.deliver()
    bodies = [answer.body for answer, _, _ in outcomes.values() if answer is not None]
    assert bodies == [OK[-17:], OK[-17:], other[-18:], OK[-17:], OK[-17:]]
    # OK once, the other head, the closing one, then OK again on the new connection.
    assert parsed == [17, 18, 17, 17]
    assert room.opened == 2


async def test_a_request_given_up_is_never_settled_by_a_later_reader(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    """The delivery cut after its request was written, before its answer: a caller's
    exchange on the same connection later reads that answer too, and drops it."""
    room.script = lambda connection, request: Late(1.0)
    pool = PipelinedPool(room, ORIGIN, lanes=1)
    outcomes: dict[int, Outcome] = {}
    hand(pool, 1, outcomes)
    with trio.move_on_after(0.5):
        await pool.deliver()
    assert len(room.seen) == 1
    answer = await exchange(pool, 2)
    assert answer.status == 200
    assert trio.current_time() == 1.5
    assert outcomes == {}
