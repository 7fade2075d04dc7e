"""Slow and oversized request bodies (issue 13, rows 6 and 14), at the ASGI level.

The app is called directly with a scripted ``receive``, so a body can arrive
as slowly as a test likes (the streaming transport reads bodies whole). Times
are exact on ``MockClock``.
"""

from __future__ import annotations

import math
from collections.abc import MutableMapping
from typing import Any

import trio
import trio.testing

from letagents_trio.room_server import MemoryStore, Room, RoomConfig, create_app
from letagents_trio.room_server._body import SLOW_BODY_GRACE
from letagents_trio.room_server._config import BODY_TIMEOUT, MAX_BODY_BYTES

from .helpers import OWNER_TOKEN, ROOM, owner_headers

Message = MutableMapping[str, Any]


def scope_for(path: str = f"/rooms/{ROOM}/tasks") -> Message:
    headers = [(k.lower().encode(), v.encode()) for k, v in owner_headers().items()]
    return {
        "type": "http",
        "method": "POST",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [*headers, (b"content-type", b"application/json")],
    }


class Exchange:
    """One request: body chunks fed by the test, the answer collected."""

    def __init__(self) -> None:
        self.to_app, self._from_test = trio.open_memory_channel[Message](math.inf)
        self.sent: list[Message] = []
        self.received = 0
        self.done = trio.Event()

    async def receive(self) -> Message:
        message = await self._from_test.receive()
        self.received += len(message.get("body", b""))
        return message

    async def send(self, message: Message) -> None:
        self.sent.append(message)

    def feed(self, body: bytes, *, more: bool = True) -> None:
        self.to_app.send_nowait({"type": "http.request", "body": body, "more_body": more})

    @property
    def status(self) -> int | None:
        return self.sent[0]["status"] if self.sent else None


def new_room(**config: Any) -> Room:
    return Room(
        store=MemoryStore(), owner_tokens={OWNER_TOKEN: "owner"}, config=RoomConfig(**config)
    )


async def run(app: Any, exchange: Exchange) -> None:
    await app(scope_for(), exchange.receive, exchange.send)
    exchange.done.set()


async def test_a_body_that_never_ends_is_408_at_the_body_timeout(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Before: held forever (hypercorn's read_timeout is None). After: 408 at 10 s."""
    app = create_app(new_room())
    exchange = Exchange()
    exchange.feed(b'{"title":')
    with trio.fail_after(1000):
        await run(app, exchange)
    assert (exchange.status, trio.current_time()) == (408, BODY_TIMEOUT)


async def test_the_oldest_slow_body_is_evicted_never_the_newcomer(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Two slow bodies fill a gate of two; once they are late (past the grace), a
    third request evicts the oldest (503) and, its body arriving at once, is
    answered; the second is still waiting."""
    app = create_app(new_room(max_pending_bodies=2))
    first, second, legit = Exchange(), Exchange(), Exchange()
    with trio.fail_after(1000):
        async with trio.open_nursery() as nursery:
            for slow in (first, second):
                slow.feed(b"{")
                nursery.start_soon(run, app, slow)
                await trio.testing.wait_all_tasks_blocked()
            await trio.sleep(SLOW_BODY_GRACE)
            legit.feed(b'{"title": "t"}', more=False)
            await run(app, legit)
            await first.done.wait()
            assert (first.status, trio.current_time()) == (503, SLOW_BODY_GRACE)
            assert legit.status == 404  # read whole and reached the rules (no such room)
            assert second.status is None
            nursery.cancel_scope.cancel()


async def test_a_burst_of_bodies_that_arrive_at_once_evicts_nobody(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A process saying goodbye sends thousands of exits at once: with a gate of
    two, ten requests whose bodies follow within the grace are all answered."""
    app = create_app(new_room(max_pending_bodies=2))
    exchanges = [Exchange() for _ in range(10)]
    with trio.fail_after(100):
        async with trio.open_nursery() as nursery:
            for exchange in exchanges:
                exchange.feed(b"{")
                nursery.start_soon(run, app, exchange)
            await trio.testing.wait_all_tasks_blocked()
            for exchange in exchanges:
                exchange.feed(b'"title": "t"}', more=False)
    assert [e.status for e in exchanges] == [404] * 10  # every one reached the rules


async def test_an_oversized_chunked_body_is_drained_before_the_413(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Row 14: 2 MiB in chunks, no Content-Length. Before: 413 after the first
    MiB, the rest unread (hypercorn then logged BusyResourceError in 2 of 10
    runs). After: every byte read and dropped, then 413."""
    app = create_app(new_room())
    exchange = Exchange()
    chunk = b" " * (64 * 1024)
    total = 2 * MAX_BODY_BYTES
    for _ in range(total // len(chunk) - 1):
        exchange.feed(chunk)
    exchange.feed(chunk, more=False)
    with trio.fail_after(100):
        await run(app, exchange)
    assert exchange.status == 413
    assert exchange.received == total


async def test_a_body_far_over_the_limit_is_answered_mid_body(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Draining is bounded: past four times the limit the 413 goes at once."""
    app = create_app(new_room(max_body_bytes=1024))
    exchange = Exchange()
    for _ in range(100):
        exchange.feed(b" " * 1024)
    with trio.fail_after(100):
        await run(app, exchange)
    assert exchange.status == 413
    assert exchange.received <= 5 * 1024
