"""Many exits at once, pipelined over a few kept-alive connections (``exchange_many``).

In memory, under the mock clock, against a room that reads ahead as Node's HTTP
server does (the letagents API runs on it): every request is handled as soon as
it is read, and the answers go back in order on each connection, each when its
handler is done. So a room that answers slowly, or never, still has every
request at once.
"""

from __future__ import annotations

import attrs
import pytest
import trio
import trio.testing

from letagents_trio._http import Answer, HTTPFailure, Origin
from letagents_trio._http._pool import KeepAlivePool
from letagents_trio._http._request import request_bytes

ORIGIN = Origin("http", "room.test", 80)


def answer(status: int = 200, *, close: bool = False) -> bytes:
    body = b'{"recorded":true}'
    extra = b"Connection: close\r\n" if close else b""
    return b"HTTP/1.1 %d OK\r\nContent-Length: %d\r\n%s\r\n%s" % (status, len(body), extra, body)


def exit_request(n: int) -> bytes:
    return request_bytes(ORIGIN, f"/x/{n}", "POST", [], b"{}")


@attrs.define
class ReadingAhead:
    """A room whose connections read every request at once and answer them in order.

    ``delay`` seconds after it arrived each request is answered (None: never);
    ``close_after`` answers a connection carries before the room closes it.
    """

    nursery: trio.Nursery
    delay: float | None = 0.0
    close_after: int | None = None
    refuse_connections: bool = False
    opened: int = 0
    # (connection, target, trio time) of every request read.
    seen: list[tuple[int, str, float]] = attrs.field(factory=list)

    async def open_stream(self, origin: Origin) -> trio.abc.Stream:
        if self.refuse_connections:
            raise ConnectionRefusedError("refused")
        ours, theirs = trio.testing.memory_stream_pair()
        number, self.opened = self.opened, self.opened + 1
        self.nursery.start_soon(self._serve, number, theirs)
        await trio.lowlevel.checkpoint()
        return ours

    async def _serve(self, number: int, stream: trio.abc.Stream) -> None:
        answers_send, answers_receive = trio.open_memory_channel[float](float("inf"))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(self._answer, number, stream, answers_receive)
            buffer = b""
            try:
                while data := await stream.receive_some(65536):
                    buffer += data
                    while b"\r\n\r\n" in buffer:
                        head, _, rest = buffer.partition(b"\r\n\r\n")
                        length = next(
                            int(line.split(b":")[1])
                            for line in head.split(b"\r\n")
                            if line.lower().startswith(b"content-length")
                        )
                        target = head.split(b" ")[1].decode()
                        buffer = rest[length:]
                        self.seen.append((number, target, trio.current_time()))
                        await answers_send.send(trio.current_time())
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                pass
            answers_send.close()

    async def _answer(
        self, number: int, stream: trio.abc.Stream, arrivals: trio.MemoryReceiveChannel[float]
    ) -> None:
        sent = 0
        try:
            async for arrived in arrivals:
                if self.delay is None:
                    await trio.sleep_forever()
                await trio.sleep_until(arrived + self.delay)
                sent += 1
                closing = self.close_after is not None and sent >= self.close_after
                await stream.send_all(answer(close=closing))
                if closing:
                    await stream.aclose()
                    return
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            pass


async def batch(pool: KeepAlivePool, count: int) -> dict[int, tuple[float, Answer | HTTPFailure]]:
    """Send ``count`` requests in one batch; each index's answer and when it came."""
    answers: dict[int, tuple[float, Answer | HTTPFailure]] = {}

    async def answered(index: int, result: Answer | HTTPFailure) -> None:
        answers[index] = (trio.current_time(), result)
        await trio.lowlevel.checkpoint()

    await pool.exchange_many(
        [exit_request(n) for n in range(count)], max_body=1024, answered=answered
    )
    return answers


async def test_a_batch_beyond_its_lanes_is_pipelined_and_the_room_has_every_request_at_once(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    room = ReadingAhead(nursery, delay=0.8)
    pool = KeepAlivePool(room, ORIGIN, lanes=2)
    answers = await batch(pool, 6)
    assert room.opened == 2
    assert sorted(time for _, _, time in room.seen) == [0] * 6
    # Each lane's three in order: [0, 2, 4] on one connection, [1, 3, 5] on the other.
    assert sorted([t for n, t, _ in room.seen if n == number] for number in (0, 1)) == [
        ["/x/0", "/x/2", "/x/4"],
        ["/x/1", "/x/3", "/x/5"],
    ]
    assert sorted(answers) == list(range(6))
    assert {time for time, _ in answers.values()} == {0.8}
    assert all(
        isinstance(result, Answer) and result.status == 200 for _, result in answers.values()
    )


async def test_up_to_its_lanes_each_request_has_a_connection_of_its_own(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    room = ReadingAhead(nursery, delay=0.8)
    pool = KeepAlivePool(room, ORIGIN, lanes=8)
    answers = await batch(pool, 5)
    assert room.opened == 5
    assert {time for time, _ in answers.values()} == {0.8}


async def test_a_room_that_never_answers_still_reads_every_request(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    room = ReadingAhead(nursery, delay=None)
    pool = KeepAlivePool(room, ORIGIN, lanes=2)
    with trio.move_on_after(1.5):
        await batch(pool, 6)
    assert trio.current_time() == 1.5
    assert len(room.seen) == 6


async def test_a_connection_the_room_closes_early_leaves_the_rest_to_a_new_one(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    """The room says ``Connection: close`` with its second answer: what that lane
    had left goes again, on a new connection (a replayed exit changes nothing)."""
    room = ReadingAhead(nursery, delay=0.0, close_after=2)
    pool = KeepAlivePool(room, ORIGIN, lanes=1)
    answers = await batch(pool, 5)
    assert sorted(answers) == list(range(5))
    assert all(isinstance(result, Answer) for _, result in answers.values())
    assert room.opened == 3  # 2 answers, 2 answers, 1 answer
    # Every request was read, the ones after each close twice.
    assert [target for _, target, _ in room.seen] == [
        "/x/0", "/x/1", "/x/2", "/x/3", "/x/4",
        "/x/2", "/x/3", "/x/4",
        "/x/4",
    ]  # fmt: skip


async def test_a_new_connection_that_fails_fails_its_share(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    room = ReadingAhead(nursery, refuse_connections=True)
    pool = KeepAlivePool(room, ORIGIN, lanes=2)
    answers = await batch(pool, 4)
    assert sorted(answers) == list(range(4))
    assert {str(result) for _, result in answers.values()} == {"ConnectionRefusedError"}


async def test_an_answer_over_the_cap_fails_alone_and_the_rest_go_on(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    room = ReadingAhead(nursery, delay=0.0)
    pool = KeepAlivePool(room, ORIGIN, lanes=1)
    answers: dict[int, Answer | HTTPFailure] = {}

    async def answered(index: int, result: Answer | HTTPFailure) -> None:
        answers[index] = result
        await trio.lowlevel.checkpoint()

    # Room's bodies are 17 bytes: with a cap of 16 each fails alone.
    await pool.exchange_many([exit_request(n) for n in range(3)], max_body=16, answered=answered)
    assert {index: str(result) for index, result in answers.items()} == {
        0: "BodyTooLarge",
        1: "BodyTooLarge",
        2: "BodyTooLarge",
    }
    assert room.opened == 3  # each failure leaves the rest to a new connection


async def test_answered_connections_are_kept_for_the_next_batch(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    room = ReadingAhead(nursery, delay=0.0)
    pool = KeepAlivePool(room, ORIGIN, lanes=2)
    await batch(pool, 6)
    await batch(pool, 6)
    assert room.opened == 2


async def test_cancelling_a_batch_closes_its_connections(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    room = ReadingAhead(nursery, delay=None)
    pool = KeepAlivePool(room, ORIGIN, lanes=2)
    with trio.move_on_after(1):
        await batch(pool, 4)
    await pool.aclose()
    # Nothing kept: the next batch opens connections anew (and fails: closed pool).
    answers = await batch(pool, 2)
    assert {str(result) for _, result in answers.values()} == {"the pool is closed"}


@pytest.mark.parametrize("lanes", [0, -1])
def test_a_pool_needs_a_lane(lanes: int) -> None:
    with pytest.raises(ValueError, match=r"^lanes must be at least 1, got "):
        KeepAlivePool(ReadingAhead(None), ORIGIN, lanes=lanes)  # type: ignore[arg-type]
