"""Hostile and truncated process streams, through the whole manager and holder.

A :class:`HostileRoom` answers each ``GET …/process`` with the next scripted
handler (the last one repeats) and records every attempt and exit announcement.
Every test runs under ``autojump_clock`` over the in-process streaming
transport, so times are exact: an attempt dropped at 0 is retried at exactly 1.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, final

import attrs
import httpx2
import pytest
import trio

from letagents_trio import (
    AgentSession,
    EventKind,
    HolderEvent,
    HolderStatus,
    HoldPolicy,
    Outcome,
    ProcessHolder,
    RoomClient,
    SSEConnector,
    open_connection_manager,
)
from letagents_trio._protocol import MAX_EVENT_BYTES
from letagents_trio.testing import open_streaming_transport
from letagents_trio.testing._transport import BODY_BUFFER_CHUNKS

if TYPE_CHECKING:
    from trio.testing import MockClock

    from letagents_trio.testing._asgi import Receive, Send

Handler = Callable[["Receive", "Send"], Awaitable[None]]

SESSION = AgentSession(session_id="wsess_h", session_token="hostile-secret", room_id="room_h")
API_URL = "http://hostile.test"
MIB = 1024 * 1024
START_SSE = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-type", b"text/event-stream")],
}


def body(chunk: bytes, *, more: bool = True) -> dict[str, Any]:
    return {"type": "http.response.body", "body": chunk, "more_body": more}


def open_event(connection_id: str) -> bytes:
    return b"event: open\ndata: " + json.dumps({"connection_id": connection_id}).encode() + b"\n\n"


async def until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


async def hold_open(receive: Receive, send: Send) -> None:
    """A well-behaved stream: open, name the connection, then stay open."""
    await send(START_SSE)
    await send(body(b": connected\n\n" + open_event("good-connection")))
    await until_disconnect(receive)


def chunks_then(chunks: Sequence[bytes], then: str = "hold") -> Handler:
    """Send ``chunks``, then ``"hold"`` open, ``"end"`` the body, or ``"reset"``."""

    async def handler(receive: Receive, send: Send) -> None:
        await send(START_SSE)
        for chunk in chunks:
            await send(body(chunk))
        if then == "reset":
            raise httpx2.ReadError("connection reset by peer")
        if then == "end":
            await send(body(b"", more=False))
            return
        await until_disconnect(receive)

    return handler


@final
class HostileRoom:
    """An ASGI app whose process route follows a script, one handler per attempt."""

    def __init__(self, *handlers: Handler) -> None:
        self.handlers = handlers or (hold_open,)
        self.attempts: list[float] = []
        self.exits: list[dict[str, Any]] = []

    async def app(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        if scope["method"] == "POST":
            message = await receive()
            self.exits.append(json.loads(message["body"]))
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"application/json")],
                }
            )
            await send(body(b'{"recorded":true}', more=False))
            return
        handler = self.handlers[min(len(self.attempts), len(self.handlers) - 1)]
        self.attempts.append(trio.current_time())
        await handler(receive, send)


@final
@attrs.frozen
class _Ended:
    """State hooks that note the sessions the room ended, if asked to."""

    ended: list[AgentSession] | None

    async def mark_ended(self, session: AgentSession) -> None:
        await trio.lowlevel.checkpoint()
        if self.ended is not None:
            self.ended.append(session)

    async def is_still_ours(self, session: AgentSession) -> bool:
        await trio.lowlevel.checkpoint()
        return True


@asynccontextmanager
async def held(
    room: HostileRoom,
    *,
    policy: HoldPolicy | None = None,
    ended: list[AgentSession] | None = None,
    max_event_bytes: int = MAX_EVENT_BYTES,
) -> AsyncIterator[tuple[ProcessHolder, trio.MemoryReceiveChannel[HolderEvent]]]:
    """Hold SESSION against ``room``; yield its holder and the manager's timeline."""

    async with (
        open_streaming_transport(room.app) as transport,
        RoomClient(API_URL, transport=transport, opener=transport) as client,
        open_connection_manager(
            client,
            policy=policy,
            state=_Ended(ended),
            connector=SSEConnector(client, max_event_bytes=max_event_bytes),
        ) as manager,
    ):
        with manager.subscribe(math.inf) as events:
            holder = manager.hold(SESSION)
            yield holder, events


async def next_event(
    events: trio.MemoryReceiveChannel[HolderEvent], kind: EventKind
) -> HolderEvent:
    async for event in events:
        if event.kind is kind:
            return event
    raise AssertionError(f"the timeline ended before a {kind!r} event")  # pragma: no cover


# --- oversized input -----------------------------------------------------------------------


async def test_an_endless_line_is_a_protocol_error_and_memory_stays_bounded(
    autojump_clock: MockClock,
) -> None:
    chunk = b"x" * (64 * 1024)
    sent: list[int] = []
    stopped = trio.Event()

    async def endless(receive: Receive, send: Send) -> None:
        # A server that writes one line forever, stopping only when the client leaves.
        try:
            async with trio.open_nursery() as nursery:

                async def watch() -> None:
                    await until_disconnect(receive)
                    nursery.cancel_scope.cancel(reason="client left")

                nursery.start_soon(watch)
                await send(START_SSE)
                while True:
                    await send(body(chunk))
                    sent.append(len(chunk))
        finally:
            stopped.set()

    room = HostileRoom(endless, hold_open)
    with trio.fail_after(60):
        async with held(room) as (holder, events):
            closed = await next_event(events, EventKind.CLOSED)
            sent_at_drop = sum(sent)
            assert (closed.time, closed.outcome, closed.detail) == (
                0,
                Outcome.DROPPED,
                "protocol error",
            )
            # The decoder refuses the line as soon as it passes 1 MiB: the room had
            # written the limit, plus the chunk that crossed it once its write returned.
            assert MIB <= sent_at_drop <= MIB + 4 * len(chunk)
            await stopped.wait()
            # Whatever the scheduling, only the transport's socket-like buffer can
            # ever be ahead of the reader, and the room stops once the client left.
            assert sum(sent) <= MIB + (BODY_BUFFER_CHUNKS + 2) * len(chunk)
            backoff = await next_event(events, EventKind.BACKOFF)
            assert (backoff.outcome, backoff.delay) == (Outcome.DROPPED, 1)
            await holder.wait_status(HolderStatus.OPEN)
            assert trio.current_time() == 1
    assert room.attempts == [0, 1]


async def test_an_oversized_event_is_a_protocol_error_at_the_policys_limit(
    autojump_clock: MockClock,
) -> None:
    line = b"data: " + b"y" * 1000 + b"\n"
    room = HostileRoom(chunks_then([b": connected\n\n", *[line] * 5]), hold_open)
    with trio.fail_after(60):
        async with held(room, max_event_bytes=4096) as (holder, events):
            closed = await next_event(events, EventKind.CLOSED)
            assert (closed.time, closed.outcome, closed.detail) == (
                0,
                Outcome.DROPPED,
                "protocol error",
            )
            await holder.wait_status(HolderStatus.OPEN)
            assert trio.current_time() == 1


async def test_a_broken_stream_is_a_warning_naming_the_session_and_its_drop_is_logged(
    autojump_clock: MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The protocol error says what the room sent; the attempt's end says its outcome."""
    caplog.set_level(logging.INFO, logger="letagents_trio.holder")
    line = b"data: " + b"y" * 1000 + b"\n"
    room = HostileRoom(chunks_then([b": connected\n\n", *[line] * 5]), hold_open)
    with trio.fail_after(60):
        async with held(room, max_event_bytes=4096) as (_, events):
            await next_event(events, EventKind.BACKOFF)
    lines = [
        (r.levelname, r.getMessage()) for r in caplog.records if r.name == "letagents_trio.holder"
    ]
    assert lines == [
        (
            "WARNING",
            "process stream of wsess_h broke: event stream sent an event's data longer"
            " than 4096 bytes (5004 bytes so far); the stream is refused",
        ),
        ("INFO", "process connection of wsess_h: dropped (protocol error)"),
    ]


async def test_an_event_of_many_empty_data_lines_is_bounded_too(
    autojump_clock: MockClock,
) -> None:
    room = HostileRoom(chunks_then([b"data:\n" * 2048]), hold_open)
    with trio.fail_after(60):
        async with held(room, max_event_bytes=1024) as (_, events):
            closed = await next_event(events, EventKind.CLOSED)
            assert (closed.time, closed.detail) == (0, "protocol error")


async def test_an_event_within_the_limit_keeps_the_stream_open(
    autojump_clock: MockClock,
) -> None:
    room = HostileRoom(chunks_then([b"data: " + b"z" * 4000 + b"\n\n", open_event("c-ok")]))
    with trio.fail_after(60):
        async with held(room, max_event_bytes=4096) as (holder, events):
            connection = await next_event(events, EventKind.CONNECTION)
            assert connection.connection_id == "c-ok"
            assert holder.status is HolderStatus.OPEN


async def test_deeply_nested_open_json_is_ignored_not_a_crash(
    autojump_clock: MockClock,
) -> None:
    room = HostileRoom(chunks_then([b"event: open\ndata: " + b"[" * 100_000 + b"\n\n"]))
    with trio.fail_after(60):
        async with held(room) as (holder, _):
            await holder.wait_status(HolderStatus.OPEN)
            await trio.sleep(10)
            assert holder.status is HolderStatus.OPEN
            assert holder.connection_id is None
    assert room.attempts == [0]


async def test_an_unencodable_connection_id_never_reaches_the_exit_announcement(
    autojump_clock: MockClock,
) -> None:
    room = HostileRoom(chunks_then([b'event: open\ndata: {"connection_id":"\\ud800"}\n\n']))
    with trio.fail_after(60):
        async with held(room) as (holder, _):
            await holder.wait_status(HolderStatus.OPEN)
            await trio.sleep(1)
            assert holder.connection_id is None
    assert [e["process_connection_id"] for e in room.exits] == [None]


# --- truncated and broken streams ----------------------------------------------------------


async def test_a_body_cut_mid_event_is_a_drop_and_reconnects_after_one_second(
    autojump_clock: MockClock,
) -> None:
    cut = chunks_then([b": connected\n\n" + open_event("c1"), b"event: open\ndata: {}"], then="end")
    room = HostileRoom(cut, hold_open)
    with trio.fail_after(60):
        async with held(room) as (holder, events):
            closed = await next_event(events, EventKind.CLOSED)
            assert (closed.time, closed.outcome, closed.detail, closed.connection_id) == (
                0,
                Outcome.DROPPED,
                "stream end",
                "c1",
            )
            assert holder.connection_id is None
            await holder.wait_status(HolderStatus.OPEN)
            assert trio.current_time() == 1
            assert holder.status is HolderStatus.OPEN
    assert room.attempts == [0, 1]


@pytest.mark.parametrize("then", ["end", "hold"])
@pytest.mark.parametrize(
    "tail",
    [b"event: ended\ndata: {}", b"event: ended\n", b"event: ended", b"event: ended\n\n"],
)
async def test_an_ended_event_cut_off_or_without_data_ends_at_once(
    autojump_clock: MockClock, tail: bytes, then: str
) -> None:
    """As the Node client (``process-connection.js`` ``holdOnce``: ``tail.includes("event:
    ended")`` after every read): ``event: ended`` ends the session as soon as it arrives,
    cut off by the end of the stream or on a stream the room keeps open, newline or
    not; no reconnect after 1 s to learn it from a 410, and no 45 s wait for the
    silence (issue 12 item 5; issue 28 row 8: a final name is known before its newline)."""
    ended: list[AgentSession] = []
    room = HostileRoom(chunks_then([b": connected\n\n" + open_event("c1"), tail], then=then))
    with trio.fail_after(60):
        async with held(room, ended=ended) as (holder, events):
            closed = await next_event(events, EventKind.CLOSED)
            assert (closed.time, closed.outcome, closed.detail) == (0, Outcome.ENDED, "ended event")
            await holder.wait_status(HolderStatus.ENDED)
    assert room.attempts == [0]
    assert ended == [SESSION]


async def test_a_byte_order_mark_mid_stream_hides_the_ended_event(
    autojump_clock: MockClock,
) -> None:
    """A documented difference (``docs/process-connection.md``): Node
    (``runtime/process-connection.ts`` ``holdOnce``; ``process-connection.js`` in 0.12.31)
    finds the text ``event: ended`` in its last 128 characters after a mid-stream U+FEFF
    (``tail.includes``, a substring); SSE keeps a BOM that is not the stream's first
    character, so the field is ``\\ufeffevent`` and names no event: the stream stays open
    and the session is not ended."""
    ended: list[AgentSession] = []
    chunk = open_event("c1") + "\ufeffevent: ended\ndata: {}\n\n".encode()
    room = HostileRoom(chunks_then([chunk]))
    with trio.fail_after(60):
        async with held(room, ended=ended) as (holder, events):
            await next_event(events, EventKind.CONNECTION)
            await trio.sleep(30)
            assert holder.status is HolderStatus.OPEN
    assert (ended, room.attempts) == ([], [0])


@pytest.mark.parametrize("then", ["hold", "end"])
async def test_an_open_event_without_its_blank_line_names_no_connection(
    autojump_clock: MockClock, then: str
) -> None:
    """A documented difference: Node (``runtime/process-connection.ts`` ``holdOnce``;
    ``process-connection.js`` in 0.12.31) takes the id as soon as its pattern
    (``"connection_id":"<36 of [0-9a-f-]>"``) is in the tail after a read, so an exit sent
    while the stream is held names it; here an event without its blank line never
    happened (E4): the exit names ``null``. Cut off by the end of the stream, both drop
    and reopen after 1 s."""
    cut = b'event: open\ndata: {"connection_id":"11111111-1111-4111-8111-111111111111"}'
    room = HostileRoom(chunks_then([b": connected\n\n" + cut], then=then))
    with trio.fail_after(60):
        async with held(room) as (holder, events):
            if then == "end":
                closed = await next_event(events, EventKind.CLOSED)
                assert (closed.time, closed.outcome) == (0, Outcome.DROPPED)
            await trio.sleep(1.5)
            assert holder.connection_id is None
    assert room.attempts == ([0] if then == "hold" else [0, 1])
    assert [e["process_connection_id"] for e in room.exits] == [None]


async def test_invalid_utf8_is_replaced_not_a_crash(autojump_clock: MockClock) -> None:
    ended: list[AgentSession] = []
    room = HostileRoom(
        chunks_then(
            [
                b"\xff\xfe: not utf-8 \xc3\x28\n\n",
                b"\x80\x81bogus-field: \xed\xa0\x80\n\n",
                b'event: open\ndata: {"connection_id":"c\xff1"}\n\n',
                b"event: ended\ndata: {}\n\n",
            ]
        )
    )
    with trio.fail_after(60):
        async with held(room, ended=ended) as (holder, events):
            connection = await next_event(events, EventKind.CONNECTION)
            assert connection.connection_id == "c\ufffd1"
            closed = await next_event(events, EventKind.CLOSED)
            assert (closed.outcome, closed.detail) == (Outcome.ENDED, "ended event")
            assert await holder.wait_status(HolderStatus.ENDED) is HolderStatus.ENDED
    assert ended == [SESSION]
    assert room.attempts == [0]


async def test_an_ended_event_split_across_chunks_still_ends(autojump_clock: MockClock) -> None:
    ended: list[AgentSession] = []
    room = HostileRoom(
        chunks_then(
            [b": connected\r\n\r\n", b"event: en", b"ded\r\nda", b"ta: {}\r", b"\n\r", b"\n"]
        )
    )
    with trio.fail_after(100):
        async with held(room, ended=ended) as (holder, events):
            closed = await next_event(events, EventKind.CLOSED)
            assert (closed.time, closed.outcome) == (0, Outcome.ENDED)
            await holder.wait_status(HolderStatus.ENDED)
            await trio.sleep(50)
    assert ended == [SESSION]
    assert room.attempts == [0]
    assert room.exits == []  # an ended holder leaves the manager: nothing to announce


async def test_a_json_200_is_refused_and_retried_after_five_seconds(
    autojump_clock: MockClock,
) -> None:
    async def json_200(receive: Receive, send: Send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send(body(b'{"connection_id":"not-a-stream"}', more=False))

    room = HostileRoom(json_200, hold_open)
    with trio.fail_after(60):
        async with held(room) as (holder, events):
            closed = await next_event(events, EventKind.CLOSED)
            assert (closed.time, closed.outcome, closed.detail) == (0, Outcome.REFUSED, "HTTP 200")
            await holder.wait_status(HolderStatus.OPEN)
            assert trio.current_time() == 5
    assert room.attempts == [0, 5]


async def test_a_reset_mid_stream_is_dropped_as_unreachable(autojump_clock: MockClock) -> None:
    room = HostileRoom(chunks_then([b": connected\n\n" + open_event("c-reset")], then="reset"))
    with trio.fail_after(60):
        async with held(room) as (_, events):
            closed = await next_event(events, EventKind.CLOSED)
            assert (closed.time, closed.outcome, closed.detail, closed.connection_id) == (
                0,
                Outcome.DROPPED,
                "unreachable",
                "c-reset",
            )
            await next_event(events, EventKind.ATTEMPT)
            assert trio.current_time() == 1
            # The script repeats: the second attempt is reset the same way.
            closed = await next_event(events, EventKind.CLOSED)
            assert (closed.time, closed.detail) == (1, "unreachable")
            # It had opened, and opening resets the counters: 1 s again.
            backoff = await next_event(events, EventKind.BACKOFF)
            assert (backoff.time, backoff.delay) == (1, 1)


async def test_a_room_that_never_answers_times_out_at_exactly_ten_seconds(
    autojump_clock: MockClock,
) -> None:
    async def never(receive: Receive, send: Send) -> None:
        await trio.sleep_forever()

    room = HostileRoom(never, hold_open)
    with trio.fail_after(60):
        async with held(room) as (holder, events):
            closed = await next_event(events, EventKind.CLOSED)
            assert (closed.time, closed.outcome, closed.detail) == (
                10,
                Outcome.DROPPED,
                "answer timeout",
            )
            await holder.wait_status(HolderStatus.OPEN)
            assert trio.current_time() == 11
    assert room.attempts == [0, 11]
