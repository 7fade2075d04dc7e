"""The process socket frame by frame, and what the WebSocket connectors pass on.

``ProcessSocket`` runs here over one end of an in-memory stream pair, with a
wsproto server ``Connection`` on the other end written and read by the test,
so every frame the room sends and every byte the client answers is exact:
pongs, the close echo, the exit frame and its close, size limits on text
frames, the ids an ``open`` frame may name, and the errors that end a socket.
Then the socket as a :class:`~letagents_trio.ProcessStream` (``leave_nowait``,
``leave``, ``aclose``; the frames' writing, ``_send_exit``, on its own), over
in-memory streams and real sockets; and the
connectors: their exit POST, a bad upgrade answer, and the message limit each
passes on to the streams it opens.
"""

from __future__ import annotations

import base64
import contextlib
import gc
import json
import os
import sys
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, cast

import pytest
import trio
import trio.testing
from wsproto.connection import Connection, ConnectionType
from wsproto.events import (
    BytesMessage,
    CloseConnection,
    Event,
    Message,
    Ping,
    Pong,
    TextMessage,
)

from letagents_trio import (
    AgentSession,
    AttemptRejected,
    AutoConnector,
    Outcome,
    ProcessConnector,
    ProcessStream,
    RoomClient,
    RoomUnreachable,
    SSEConnector,
    StreamNews,
    StreamProtocolError,
    WebSocketConnector,
    _ws_socket,
)
from letagents_trio._websocket import _accept_value, classify_upgrade
from letagents_trio._ws_frames import MAX_MESSAGE_PIECES, MAX_PINGS_PER_INTERVAL
from letagents_trio._ws_socket import ProcessSocket
from letagents_trio.testing import FakeRoom, open_streaming_transport

from .sockets import OnlyAsyncClose, tcp_pair

if TYPE_CHECKING:
    from collections.abc import MutableMapping

    from trio.testing import MockClock

    from letagents_trio._http import Origin, Response
    from letagents_trio.testing._asgi import Receive, Send

PING_INTERVAL = 10.0
PONG_TIMEOUT = 5.0


class Room:
    """The room's end of one process socket: a wsproto server over the other stream."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.ws = Connection(ConnectionType.SERVER)
        # Every byte heard, also those after a close frame (which wsproto ignores).
        self.raw = bytearray()

    async def send(self, *events: Event) -> None:
        """Send ``events`` in one chunk."""
        await self.stream.send_all(b"".join(self.ws.send(event) for event in events))

    async def heard(self) -> list[Event]:
        """What the client has written so far, as events (waits for its first byte)."""
        await trio.testing.wait_all_tasks_blocked()
        data = bytes(await self.stream.receive_some())
        self.raw += data
        self.ws.receive_data(data)
        return list(self.ws.events())


def new_socket(stream: trio.abc.Stream, max_event_bytes: int = 1024) -> ProcessSocket:
    """A process socket over ``stream``, with this file's ping interval and pong timeout."""
    return ProcessSocket(
        stream,
        Connection(ConnectionType.CLIENT),
        ping_interval=PING_INTERVAL,
        pong_timeout=PONG_TIMEOUT,
        max_event_bytes=max_event_bytes,
        announce_exit=no_post,
    )


async def no_post(connection_id: str | None) -> bool:
    """The POSTed exit of a socket whose test sends every exit over the socket."""
    await trio.lowlevel.checkpoint()
    raise AssertionError(f"an exit POSTed: {connection_id}")


def open_socket(max_event_bytes: int = 1024) -> tuple[ProcessSocket, Room]:
    client, server = trio.testing.memory_stream_pair()
    return new_socket(client, max_event_bytes), Room(server)


def client_frames_length(*events: Event) -> int:
    """How many bytes a client writes for ``events`` (masks differ, lengths do not)."""
    return sum(len(Connection(ConnectionType.CLIENT).send(event)) for event in events)


EXIT_EVENTS = [
    TextMessage(data='{"event":"exit","process_connection_id":"conn-1"}'),
    CloseConnection(code=1000, reason=""),
]


def frame(**fields: object) -> TextMessage:
    return TextMessage(data=json.dumps(fields))


# --- what the room's frames say ----------------------------------------------------------


@pytest.mark.parametrize(
    ("sent", "news"),
    [
        (frame(event="open", connection_id="c"), StreamNews(connection_id="c")),
        (frame(event="open", connection_id="c" * 128), StreamNews(connection_id="c" * 128)),
        (frame(event="open", connection_id="c" * 129), StreamNews()),
        (frame(event="open", connection_id=""), StreamNews()),
        (frame(event="open", connection_id="a\nb"), StreamNews()),
        (frame(event="ping", connection_id="not-an-open"), StreamNews()),
        (frame(event="ended", connection_id="not-an-open"), StreamNews(ended=True)),
        (frame(event=7, connection_id="c"), StreamNews()),
        (TextMessage(data="not json"), StreamNews()),
        (TextMessage(data="[1, 2]"), StreamNews()),
        (Ping(), StreamNews()),
    ],
    ids=[
        "one-char",
        "128-chars",
        "129-chars",
        "empty",
        "unprintable",
        "other-event",
        "ended",
        "not-a-string",
        "not-json",
        "not-an-object",
        "ping",
    ],
)
async def test_each_frame_is_news_and_only_open_names_the_connection(
    autojump_clock: MockClock, sent: Event, news: StreamNews
) -> None:
    socket, room = open_socket()
    with trio.fail_after(1):
        await room.send(sent)
        assert await anext(socket) == news
    assert socket.connection_id == news.connection_id


async def test_a_fragmented_open_frame_is_read_whole(autojump_clock: MockClock) -> None:
    socket, room = open_socket()
    text = json.dumps({"event": "open", "connection_id": "conn-9"})
    with trio.fail_after(1):
        await room.send(Message(data=text[:10], message_finished=False))
        assert await anext(socket) == StreamNews()
        await room.send(Message(data=text[10:], message_finished=True))
        assert await anext(socket) == StreamNews(connection_id="conn-9")


async def test_text_frames_up_to_the_limit_pass_one_after_another(
    autojump_clock: MockClock,
) -> None:
    socket, room = open_socket(max_event_bytes=16)
    with trio.fail_after(1):
        for _ in range(3):
            await room.send(TextMessage(data="x" * 16))
            assert await anext(socket) == StreamNews()


@pytest.mark.parametrize(
    "parts", [["x" * 17], ["x" * 10, "x" * 7], ["x" * 8, "x" * 8, "x"]], ids=["one", "two", "three"]
)
async def test_a_text_frame_past_the_limit_is_refused(
    autojump_clock: MockClock, parts: Sequence[str]
) -> None:
    socket, room = open_socket(max_event_bytes=16)
    with trio.fail_after(1):
        for part in parts[:-1]:
            await room.send(Message(data=part, message_finished=False))
            assert await anext(socket) == StreamNews()
        await room.send(Message(data=parts[-1], message_finished=True))
        with pytest.raises(
            StreamProtocolError, match=r"^a message on the process socket is too large$"
        ):
            await anext(socket)


async def test_a_message_is_bounded_in_bytes_not_characters(autojump_clock: MockClock) -> None:
    """Issue 30 row 4: one-character fragments of U+20AC (three bytes each) reached
    88.6 MB a session before a limit counting characters fired."""
    socket, room = open_socket(max_event_bytes=16)
    with trio.fail_after(1):
        for _ in range(5):  # 15 bytes in 5 characters
            await room.send(Message(data="\u20ac", message_finished=False))
            assert await anext(socket) == StreamNews()
        await room.send(Message(data="\u20ac", message_finished=True))
        with pytest.raises(StreamProtocolError, match=r"^a message .* is too large$"):
            await anext(socket)


async def test_empty_fragments_count_against_a_message(autojump_clock: MockClock) -> None:
    """Issue 30 row 4: empty continuation fragments were never counted (a session
    grew 28 to 81 MB in 50 s); each is a piece of its message."""
    socket, room = open_socket()
    empty = Message(data="", message_finished=False)
    with trio.fail_after(60):
        for _ in range(MAX_MESSAGE_PIECES // 64):
            await room.send(*[empty] * 64)
            assert await anext(socket) == StreamNews()
        await room.send(empty)
        with pytest.raises(StreamProtocolError, match=r"^a message .* too many pieces$"):
            await anext(socket)


async def test_binary_messages_are_bounded_and_dropped(autojump_clock: MockClock) -> None:
    """Issue 30 row 4: a 2**40-byte binary frame was read forever at 100 % CPU."""
    socket, room = open_socket(max_event_bytes=1024)
    with trio.fail_after(1):
        await room.send(BytesMessage(data=b"x" * 1024))
        assert await anext(socket) == StreamNews()  # within the limit: news, nothing else
        await room.send(TextMessage(data='{"event":"open","connection_id":"c-1"}'))
        assert await anext(socket) == StreamNews(connection_id="c-1")
        await room.send(BytesMessage(data=b"x" * 1025))
        with pytest.raises(StreamProtocolError, match=r"^a message .* is too large$"):
            await anext(socket)


async def test_a_ping_flood_ends_the_attempt(autojump_clock: MockClock) -> None:
    """Issue 30 row 7: a ping flood cost the client a whole core. The room pings
    every 15 s; more than MAX_PINGS_PER_INTERVAL in one ping interval is a flood."""
    socket, room = open_socket()
    with trio.fail_after(30):
        await room.send(*[Ping(payload=b"p")] * MAX_PINGS_PER_INTERVAL)
        assert await anext(socket) == StreamNews()
        await trio.sleep(10)  # one interval later, the count starts again
        await room.send(*[Ping(payload=b"p")] * MAX_PINGS_PER_INTERVAL)
        assert await anext(socket) == StreamNews()
        await room.send(Ping(payload=b"p"))
        with pytest.raises(StreamProtocolError, match=r"^the room floods .* with pings$"):
            await anext(socket)


@pytest.mark.parametrize("payload", [b"p", b""], ids=["pings-with-payload", "bare-pings"])
async def test_a_ping_flood_ends_the_attempt_whatever_its_pings_carry(
    autojump_clock: MockClock, payload: bytes
) -> None:
    """Bare pings, answered without wsproto, count against the bound as any other."""
    socket, room = open_socket()
    with trio.fail_after(30):
        await room.send(*[Ping(payload=payload)] * MAX_PINGS_PER_INTERVAL)
        assert await anext(socket) == StreamNews()
        await room.send(Ping(payload=payload))
        with pytest.raises(StreamProtocolError, match=r"^the room floods .* with pings$"):
            await anext(socket)


async def test_a_chunk_of_bare_pings_between_frames_never_reaches_wsproto(
    autojump_clock: MockClock,
) -> None:
    """The room's heartbeat is answered without wsproto's parser; anything else goes to it."""
    socket, room = open_socket()
    given: list[bytes | None] = []
    parse = socket._ws.receive_data

    def receive_data(data: bytes | None) -> None:
        given.append(data)
        parse(data)

    socket._ws.receive_data = receive_data  # type: ignore[method-assign]
    with trio.fail_after(1):
        await room.send(Ping(), Ping())
        assert await anext(socket) == StreamNews()
        await room.send(Ping(payload=b"1"))
        assert await anext(socket) == StreamNews()
    assert given == [b"\x89\x011"]


async def test_bare_ping_bytes_inside_a_frame_are_that_frame_not_a_ping(
    autojump_clock: MockClock,
) -> None:
    """A chunk that looks like bare pings, read in the middle of a frame, is that frame's rest."""
    socket, room = open_socket()
    message = room.ws.send(BytesMessage(data=b"\x89\x00\x89\x00"))
    with trio.fail_after(1):
        for chunk in (message[:2], message[2:]):  # the head, then "two pings"
            await room.stream.send_all(chunk)
            assert await anext(socket) == StreamNews()
        await room.send(Ping())
        assert await anext(socket) == StreamNews()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(anext, socket)  # flushes the pong, then reads
            assert await room.heard() == [Pong(payload=b"")]  # one: the real ping's
            nursery.cancel_scope.cancel()
        await room.send(frame(event="ended"))
        assert await anext(socket) == StreamNews(ended=True)  # wsproto still in step


# --- what the client answers ---------------------------------------------------------------


async def test_the_latest_ping_of_a_read_is_answered_with_its_pong(
    autojump_clock: MockClock,
) -> None:
    """Issue 30 row 7: a ping flood cost a core, a pong written for every ping.
    RFC 6455, section 5.5.3, lets an endpoint answer only the most recent ping it has read."""
    socket, room = open_socket()
    with trio.fail_after(1):
        await room.send(Ping(payload=b"1"), Ping(payload=b"2"))
        assert await anext(socket) == StreamNews()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(anext, socket)  # flushes the pong, then reads
            assert await room.heard() == [Pong(payload=b"2")]
            nursery.cancel_scope.cancel()


async def test_a_ping_with_no_payload_is_answered_by_a_masked_empty_pong_each_time_anew(
    autojump_clock: MockClock,
) -> None:
    """The room's pings carry nothing: each answer is a pong of two bytes and a fresh mask."""
    socket, room = open_socket()
    pongs: list[bytes] = []
    with trio.fail_after(1):
        for _ in range(2):
            await room.send(Ping())
            assert await anext(socket) == StreamNews()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(anext, socket)  # flushes the pong, then reads
                before = len(room.raw)
                assert await room.heard() == [Pong(payload=b"")]
                pongs.append(bytes(room.raw[before:]))
                nursery.cancel_scope.cancel()
    # Final, opcode pong; masked, no payload; then the masking key, not the same twice.
    assert [pong[:2] for pong in pongs] == [b"\x8a\x80", b"\x8a\x80"]
    assert [len(pong) for pong in pongs] == [6, 6]
    assert pongs[0][2:] != pongs[1][2:]


async def test_reads_that_bring_only_pings_share_one_news_and_others_get_their_own(
    autojump_clock: MockClock,
) -> None:
    """Thousands of sockets wake for pings: their news is one object, never one per wake-up."""
    socket, room = open_socket()
    with trio.fail_after(1):
        await room.send(Ping(payload=b"1"))
        first = await anext(socket)
        await room.send(Ping(payload=b"2"))
        assert await anext(socket) is first == StreamNews()
        await room.send(frame(event="open", connection_id="conn-1"))
        assert await anext(socket) == StreamNews(connection_id="conn-1")
        await room.send(frame(event="ended"))
        assert await anext(socket) == StreamNews(ended=True)


@pytest.mark.parametrize("ping_first", [False, True], ids=["close", "ping-then-close"])
async def test_a_close_from_the_room_is_echoed_and_ends_the_stream_at_once(
    autojump_clock: MockClock, ping_first: bool
) -> None:
    socket, room = open_socket()
    sent: list[Event] = [Ping(payload=b"p")] if ping_first else []
    with trio.fail_after(1):
        await room.send(*sent, CloseConnection(code=1000))
        assert await anext(socket) == StreamNews()
        with pytest.raises(StopAsyncIteration):
            await anext(socket)
        assert trio.current_time() == 0
        heard = await room.heard()
    pong: list[Event] = [Pong(payload=b"p")] if ping_first else []
    assert heard == [*pong, CloseConnection(code=1000, reason="")]
    # Nothing after the close echo (wsproto would not show it).
    assert len(room.raw) == client_frames_length(*pong, CloseConnection(code=1000, reason=""))
    assert not await socket._send_exit("conn-1")


async def test_a_room_that_hangs_up_without_a_close_ends_the_stream(
    autojump_clock: MockClock,
) -> None:
    socket, room = open_socket()
    with trio.fail_after(1):
        await room.send(frame(event="open", connection_id="conn-1"))
        assert await anext(socket) == StreamNews(connection_id="conn-1")
        await room.stream.aclose()
        with pytest.raises(StopAsyncIteration):
            await anext(socket)
        assert trio.current_time() == 0
    assert not await socket._send_exit("conn-1")


async def test_the_exit_goes_as_one_compact_frame_and_a_normal_close(
    autojump_clock: MockClock,
) -> None:
    socket, room = open_socket()
    with trio.fail_after(1):
        assert await socket._send_exit("conn-1")
        assert await room.heard() == EXIT_EVENTS
        assert not await socket._send_exit("conn-1")


async def test_the_exit_is_made_when_the_room_names_the_connection(
    autojump_clock: MockClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    """At the goodbye of ten thousand sockets no frame is left to build."""

    def not_now(connection_id: str | None) -> bytes:
        raise AssertionError("exit frames built at the goodbye")

    socket, room = open_socket()
    with trio.fail_after(1):
        await room.send(frame(event="open", connection_id="conn-1"))
        assert await anext(socket) == StreamNews(connection_id="conn-1")
        monkeypatch.setattr(_ws_socket, "exit_frames", not_now)
        assert await socket._send_exit("conn-1")
        assert await room.heard() == EXIT_EVENTS


async def test_no_pong_follows_the_exit_frame(autojump_clock: MockClock) -> None:
    socket, room = open_socket()
    with trio.fail_after(60):
        await room.send(Ping(payload=b"late"))
        assert await anext(socket) == StreamNews()  # the pong waits for the next read
        assert await socket._send_exit("conn-1")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stops_at, socket, PING_INTERVAL)
            assert await room.heard() == EXIT_EVENTS
            # The reader, silent past its ping interval, sends no ping: it stops.
            await trio.sleep(PING_INTERVAL + PONG_TIMEOUT + 1)
    # Nothing after the close frame either (wsproto would not show a pong there).
    assert len(room.raw) == client_frames_length(*EXIT_EVENTS)


async def stops_at(socket: ProcessSocket, when: float) -> None:
    """After the exit, the reader ends the iteration (not a drop) at virtual time ``when``.

    The holder, which is leaving, takes that end as its stop.
    """
    with pytest.raises(StopAsyncIteration):
        await anext(socket)
    assert trio.current_time() == when


async def test_the_rooms_answer_to_the_exit_leaves_the_reader_waiting_to_be_stopped(
    autojump_clock: MockClock,
) -> None:
    """The room's close answering the exit is not news: the reader waits for its stop.

    So ten thousand answers arriving while the manager still writes exits
    unwind no holder in between; the manager stops them all afterwards.
    """
    socket, room = open_socket()
    with trio.fail_after(PING_INTERVAL * 10):
        assert await socket._send_exit("conn-1")
        await room.send(Ping(payload=b"crossed"))
        await room.heard()
        await room.send(CloseConnection(code=1000))
        with trio.move_on_after(PING_INTERVAL * 5) as waited:
            await anext(socket)
        assert waited.cancelled_caught
    # Not parsed, so not echoed and no pong: nothing after the exit's close.
    assert len(room.raw) == client_frames_length(*EXIT_EVENTS)


@pytest.mark.parametrize("how", ["answered", "not-taken"])
async def test_a_reader_waiting_after_the_exit_ends_as_the_socket_is_closed(
    autojump_clock: MockClock, how: str
) -> None:
    """Once the socket is closed (by the holder leaving) nothing more can come or go.

    The reader that waits to be stopped (the room answered the exit; or the
    socket could not take it, and the exit is POSTed) then ends the
    iteration, as a reader of any process stream does when it is closed:
    a holder that leaves by itself stops, and does not wait for its silence
    deadline.
    """
    socket, room = open_socket()
    client = socket._stream
    assert isinstance(client, trio.StapledStream)
    with trio.fail_after(PING_INTERVAL * 10):
        if how == "answered":
            assert await socket._send_exit("conn-1")
            await room.heard()
            await room.send(CloseConnection(code=1000))
        else:
            await client.send_stream.aclose()
            assert not await socket._send_exit("conn-1")
            assert socket.leaving
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stops_at, socket, 1)
            await trio.sleep(1)
            await socket.aclose()


async def test_a_socket_broken_after_the_exit_stops_the_reader(
    autojump_clock: MockClock,
) -> None:
    socket, room = open_socket()
    with trio.fail_after(1):
        assert await socket._send_exit("conn-1")
        await room.stream.aclose()
        await stops_at(socket, 0)


@pytest.mark.parametrize("wake", ["ping", "end"])
async def test_the_reader_waits_while_the_exit_is_being_written(
    autojump_clock: MockClock, wake: str
) -> None:
    """Woken before the exit is written whole, the reader must not close the socket.

    It waits to be stopped: ending the attempt would close the stream under
    the exit still being written, and the exit would be lost. Whatever woke
    it: a ping that crossed the exit, or the room ending its side.
    """
    socket, room = open_socket()
    client, server = socket._stream, room.stream
    assert isinstance(client, trio.StapledStream)
    assert isinstance(server, trio.StapledStream)
    release = trio.Event()

    async def slow_pump() -> None:
        await release.wait()
        trio.testing.memory_stream_pump(client.send_stream, server.receive_stream)

    client.send_stream.send_all_hook = slow_pump
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            reader = trio.CancelScope()

            async def read() -> None:
                with reader:
                    await anext(socket)
                    await anext(socket)

            nursery.start_soon(read)
            nursery.start_soon(socket._send_exit, "conn-1")
            await trio.testing.wait_all_tasks_blocked()
            if wake == "ping":
                await room.stream.send_all(room.ws.send(Ping()))
            else:
                await server.send_stream.aclose()
            await trio.sleep(1)
            assert not reader.cancelled_caught
            release.set()
            assert await room.heard() == EXIT_EVENTS
            await trio.sleep(1)
            # Still waiting, stream open: only a stop ends it now.
            reader.cancel()
        assert reader.cancelled_caught


async def test_an_exit_on_a_broken_socket_is_not_sent(autojump_clock: MockClock) -> None:
    socket, room = open_socket()
    await room.stream.aclose()
    with trio.fail_after(1):
        assert not await socket._send_exit("conn-1")


# --- what ends a socket ----------------------------------------------------------------------


async def test_a_silent_room_is_pinged_then_dropped_saying_why(autojump_clock: MockClock) -> None:
    socket, room = open_socket()
    with trio.fail_after(60):
        with pytest.raises(
            RoomUnreachable, match=r"^process socket: no pong within the pong timeout$"
        ):
            await anext(socket)
        assert trio.current_time() == PING_INTERVAL + PONG_TIMEOUT
        assert await room.heard() == [Ping(payload=b"")]


async def test_a_room_that_stops_reading_is_dropped_within_the_pong_timeout(
    autojump_clock: MockClock,
) -> None:
    """The client's writes are bounded too: its ping waits for a room that reads nothing."""
    client, _room_end = trio.testing.lockstep_stream_pair()  # a write waits for the read
    socket = new_socket(client)
    with trio.fail_after(60):
        with pytest.raises(
            RoomUnreachable,
            match=r"^process socket: the room took nothing within the pong timeout$",
        ):
            await anext(socket)
    assert trio.current_time() == PING_INTERVAL + PONG_TIMEOUT


async def test_a_socket_closed_under_the_reader_says_how_it_broke(
    autojump_clock: MockClock,
) -> None:
    socket, _room = open_socket()

    async def close_under_the_reader() -> None:
        await trio.testing.wait_all_tasks_blocked()
        assert socket.close()

    with trio.fail_after(1):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(close_under_the_reader)
            with pytest.raises(
                RoomUnreachable, match=r"^process socket broke: ClosedResourceError$"
            ):
                await anext(socket)


async def test_a_pong_to_a_broken_socket_says_how_it_broke(autojump_clock: MockClock) -> None:
    socket, room = open_socket()
    with trio.fail_after(1):
        await room.send(Ping())
        assert await anext(socket) == StreamNews()
        await room.stream.aclose()
        with pytest.raises(RoomUnreachable, match=r"^process socket broke: BrokenResourceError$"):
            await anext(socket)


# --- the socket as a ProcessStream: closed from another task --------------------------------------


async def test_a_process_socket_is_a_process_stream() -> None:  # noqa: ASYNC124 (a socket reads trio's clock)
    """What the holder is given; mypy checks the methods' signatures against the protocol."""
    socket, _room = open_socket()
    stream: ProcessStream = socket
    assert aiter(stream) is socket


@asynccontextmanager
async def socket_over(over: str) -> AsyncIterator[tuple[ProcessSocket, Room]]:
    """A process socket over an in-memory stream (``memory``) or a socketpair."""
    if over == "memory":
        yield open_socket()
    else:
        async with socket_over_a_socketpair() as pair:
            yield pair


async def closed_twice_under_the_reader(socket: ProcessSocket) -> None:
    """``aclose`` from another task while the reader waits, and again."""
    await trio.testing.wait_all_tasks_blocked()
    await socket.aclose()
    await socket.aclose()


@pytest.mark.parametrize("over", ["memory", "socket"])
async def test_aclose_under_a_waiting_reader_ends_it_as_a_break(over: str) -> None:
    """Not leaving, a socket closed under its reader broke: the holder counts a drop."""
    async with socket_over(over) as (socket, _room):
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(closed_twice_under_the_reader, socket)
                with pytest.raises(
                    RoomUnreachable, match=r"^process socket broke: ClosedResourceError$"
                ):
                    await anext(socket)
            assert not await socket._send_exit("conn-1")


@pytest.mark.parametrize("over", ["memory", "socket"])
async def test_aclose_after_the_exit_ends_the_waiting_reader(over: str) -> None:
    """Leaving, the reader woken by the close ends the iteration: the holder stops."""
    async with socket_over(over) as (socket, room):
        with trio.fail_after(5):
            assert await socket._send_exit("conn-1")
            async with trio.open_nursery() as nursery:
                nursery.start_soon(closed_twice_under_the_reader, socket)
                with pytest.raises(StopAsyncIteration):
                    await anext(socket)
            assert await room.heard() == EXIT_EVENTS
        assert len(room.raw) == client_frames_length(*EXIT_EVENTS)


async def test_aclose_of_a_socket_close_now_cannot_close_is_idempotent() -> None:
    stream = OnlyAsyncClose()
    socket = new_socket(stream)
    with trio.fail_after(5):
        await socket.aclose()
        await socket.aclose()
    assert stream.closed


# --- the connectors --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (200, Outcome.UNSUPPORTED),
        (299, Outcome.UNSUPPORTED),
        (300, Outcome.REFUSED),
        (302, Outcome.REFUSED),
        (499, Outcome.REFUSED),
        (199, Outcome.REFUSED),
    ],
)
def test_the_edges_of_the_2xx_answers_to_an_upgrade(status: int, outcome: Outcome) -> None:
    assert classify_upgrade(status) is outcome


@pytest.mark.parametrize("connector_type", [WebSocketConnector, AutoConnector])
async def test_the_connectors_post_the_exit_naming_the_connection(
    autojump_clock: MockClock, fake_room: FakeRoom, connector_type: type[WebSocketConnector]
) -> None:
    session = await fake_room.add_worker()
    async with fake_room.client() as client:
        connector = connector_type(client)
        assert await connector.announce_exit(session, "conn-x") is False
    assert [(e.session_id, e.body) for e in fake_room.exits] == [
        (
            session.session_id,
            {
                "agent_session_id": session.session_id,
                "agent_session_token": session.session_token,
                "process_connection_id": "conn-x",
            },
        )
    ]


class _Answer:
    """An answer to the upgrade, as :meth:`WebSocketConnector._accepted` reads one."""

    def __init__(self, status: int, accept: str) -> None:
        self.status = status
        self._accept = accept

    def header(self, name: str) -> str | None:
        return self._accept if name.lower() == "sec-websocket-accept" else None

    def detach(self) -> trio.abc.Stream:
        client, _server = trio.testing.memory_stream_pair()
        return client


async def test_a_101_with_the_wrong_accept_value_is_refused(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    key = base64.b64encode(b"0123456789abcdef")
    async with fake_room.client() as client:
        connector = WebSocketConnector(client)
        answer = cast("Response", _Answer(101, _accept_value(key)))
        assert isinstance(connector._accepted(answer, key, SESSION), ProcessSocket)
        with pytest.raises(AttemptRejected) as refused:
            connector._accepted(cast("Response", _Answer(101, "wrong")), key, SESSION)
    assert (refused.value.outcome, refused.value.detail) == (Outcome.REFUSED, "bad upgrade answer")


# --- each connector gets its message limit ------------------------------------------------------

SESSION = AgentSession(session_id="wsess_1", session_token="secret-token-1", room_id="room_a")
LONG = "x" * 1500


def long_news_app(*, upgrade: bool) -> Any:
    """A room whose process stream (socket, or SSE when ``upgrade`` is False) sends 1,500 bytes."""

    async def app(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await receive()  # websocket.connect
            if not upgrade:
                start = {"type": "websocket.http.response.start", "status": 404, "headers": []}
                await send(start)
                await send({"type": "websocket.http.response.body", "body": b""})
                return
            await send({"type": "websocket.accept"})
            await send({"type": "websocket.send", "text": LONG})
        else:
            headers = [(b"content-type", b"text/event-stream")]
            await send({"type": "http.response.start", "status": 200, "headers": headers})
            body = f"data: {LONG}\n\n".encode()
            await send({"type": "http.response.body", "body": body, "more_body": True})
        while (await receive())["type"] not in ("http.disconnect", "websocket.disconnect"):
            pass

    return app


async def read_all(connector: ProcessConnector, session: AgentSession) -> None:
    async with connector.open(session) as news:
        async for _ in news:
            pass


@asynccontextmanager
async def room_client(app: Any) -> AsyncIterator[RoomClient]:
    """A client of ``app`` in memory; its process connection over the lean HTTP/1.1 path."""
    async with (
        open_streaming_transport(app) as transport,
        RoomClient("http://room.test", transport=transport, opener=transport) as client,
    ):
        yield client


def limited(transport: str, client: RoomClient) -> ProcessConnector:
    """The connector for ``transport`` over ``client``, holding messages to 1,024 bytes."""
    if transport == "sse":
        return SSEConnector(client, max_event_bytes=1024)
    if transport == "websocket":
        return WebSocketConnector(client, max_message_bytes=1024)
    return AutoConnector(client, max_message_bytes=1024)


@pytest.mark.parametrize(
    ("transport", "upgrade"),
    [("sse", False), ("websocket", True), ("auto", True), ("auto", False)],
    ids=["sse", "websocket", "auto-websocket", "auto-sse"],
)
async def test_each_connector_holds_the_stream_to_its_message_limit(
    autojump_clock: MockClock, transport: str, upgrade: bool
) -> None:
    with trio.fail_after(10):
        async with room_client(long_news_app(upgrade=upgrade)) as client:
            connector = limited(transport, client)
            with pytest.raises(StreamProtocolError):
                await read_all(connector, SESSION)
            if isinstance(connector, AutoConnector):
                assert connector.uses_sse(SESSION) is not upgrade


@pytest.mark.parametrize("upgrade", [True, False], ids=["websocket", "sse"])
async def test_the_default_limit_holds_the_same_streams(
    autojump_clock: MockClock, upgrade: bool
) -> None:
    with trio.fail_after(10):
        async with room_client(long_news_app(upgrade=upgrade)) as client:
            connector = AutoConnector(client)
            async with connector.open(SESSION) as news:
                assert await anext(news) == StreamNews()
            assert connector.uses_sse(SESSION) is not upgrade


# --- the exit over a real socket (the write that skips send_all) -------------------------------


@asynccontextmanager
async def socket_over_a_socketpair() -> AsyncIterator[tuple[ProcessSocket, Room]]:
    a, b = trio.socket.socketpair()
    client, server = trio.SocketStream(a), trio.SocketStream(b)
    socket = new_socket(client)
    try:
        yield socket, Room(server)
    finally:
        with trio.CancelScope(shield=True):
            await client.aclose()
            await server.aclose()


async def test_the_exit_over_a_socket_is_written_at_once() -> None:
    async with socket_over_a_socketpair() as (socket, room):
        with trio.fail_after(5):
            assert await socket._send_exit("conn-1")
            assert await room.heard() == EXIT_EVENTS
            assert not await socket._send_exit("conn-1")
        # Once: wsproto would not show a second copy after the close frame.
        assert len(room.raw) == client_frames_length(*EXIT_EVENTS)


async def test_an_exit_written_at_once_is_sent_even_as_its_deadline_passes() -> None:
    """Written whole, it is reported so: no cancellation after the write can lose it."""
    async with socket_over_a_socketpair() as (socket, room):
        with trio.CancelScope() as scope:
            scope.cancel()
            sent = await socket._send_exit("conn-1")
        assert sent is True
        with trio.fail_after(5):
            assert await room.heard() == EXIT_EVENTS


async def test_an_exit_behind_a_stuck_pong_goes_by_post_at_once() -> None:
    """Issue 30 row 7: a room that floods pings and never reads held the exit on the
    send lock until the deadline. A pong still being written means the room does
    not read: the exit does not wait for it, it is POSTed (_send_exit says False)."""
    sent: list[bool] = []
    async with socket_over_a_socketpair() as (socket, room):
        with trio.fail_after(5):
            async with socket._send_lock:  # a pong the room does not read
                await _send_exit(socket, sent)
            assert sent == [False]
            with trio.move_on_after(0.1):
                await room.stream.receive_some()
                pytest.fail("the exit was written while another sender held the socket")


async def _send_exit(socket: ProcessSocket, sent: list[bool]) -> None:
    sent.append(await socket._send_exit("conn-1"))


async def test_the_exit_to_a_closed_socket_is_not_sent() -> None:
    async with socket_over_a_socketpair() as (socket, room):
        await room.stream.aclose()
        with trio.fail_after(5):
            assert not await socket._send_exit("conn-1")


async def test_the_exit_frame_is_written_at_once_alone_to_a_room_that_answers_it() -> None:
    """No checkpoint: a plain socket takes it (its close waits for the room's answer)."""
    async with socket_over_a_socketpair() as (socket, room):
        socket.exit_ack = True
        assert socket.leave_nowait("conn-1") is True  # written alone: leave() waits for the answer
        assert socket.leaving
        assert socket._exit_write.written
        with trio.fail_after(5):
            assert await room.heard() == EXIT_EVENTS[:1]
        assert socket.leave_nowait("conn-1") is False  # once
        assert await socket._send_exit("conn-1") is False
        assert len(room.raw) == client_frames_length(*EXIT_EVENTS[:1])


async def test_to_a_room_that_does_not_answer_exits_the_exit_and_its_close_go_together() -> None:
    """One write, then the socket closes at once: the room's answer wakes no reader."""
    async with socket_over_a_socketpair() as (socket, room):
        assert socket.leave_nowait("conn-1") is None  # done
        assert socket.leaving
        assert socket._stream.socket.fileno() == -1  # type: ignore[attr-defined]
        with trio.fail_after(5):
            assert await room.heard() == EXIT_EVENTS
            assert await room.stream.receive_some() == b""  # then the end
        assert socket.leave_nowait("conn-1") is False  # once
        assert len(room.raw) == client_frames_length(*EXIT_EVENTS)


async def test_an_exit_that_cannot_be_written_at_once_is_left_whole_for_send_exit(
    autojump_clock: MockClock,
) -> None:
    """Not a plain socket: ``leave_nowait`` is False having done nothing at all.

    The socket is not leaving: its reader still answers pings, and
    ``_send_exit`` then sends the whole exit and its close.
    """
    socket, room = open_socket()
    with trio.fail_after(1):
        await room.send(frame(event="open", connection_id="conn-1"), Ping(payload=b"1"))
        assert await anext(socket) == StreamNews(connection_id="conn-1")
        assert socket.leave_nowait("conn-1") is False
        assert not socket.leaving
        async with trio.open_nursery() as nursery:
            nursery.start_soon(anext, socket)  # flushes the pong, then reads
            assert await room.heard() == [Pong(payload=b"1")]
            nursery.cancel_scope.cancel()
        assert await socket._send_exit("conn-1")
        assert await room.heard() == EXIT_EVENTS


async def test_an_exit_is_not_written_at_once_while_a_pong_is_on_its_way() -> None:
    async with socket_over_a_socketpair() as (socket, room):
        async with socket._send_lock:  # a pong being sent
            assert socket.leave_nowait("conn-1") is False
        assert not socket.leaving
        with trio.fail_after(5):
            assert await socket._send_exit("conn-1")
            assert await room.heard() == EXIT_EVENTS


def fill(socket: ProcessSocket) -> int:
    """Fill the kernel's buffer of the socket under ``socket`` with ``f``s; how many went."""
    client = socket._stream
    assert isinstance(client, trio.SocketStream)
    filler = 0
    with contextlib.suppress(BlockingIOError):
        while True:
            filler += os.write(client.socket.fileno(), b"f" * 4096)
    return filler


@pytest.mark.parametrize("at_once_first", [False, True])
async def test_the_exit_to_a_full_socket_goes_out_whole(at_once_first: bool) -> None:
    """The kernel takes part of the frames at once; the rest waits for room.

    Also when the part went from the goodbye's loop (``leave_nowait``,
    the exit frame alone): then ``_send_exit`` sends the rest, and its close.
    """
    async with socket_over_a_socketpair() as (socket, room):
        filler = fill(socket)
        sent: list[bool] = []
        received = bytearray()
        if at_once_first:
            assert socket.leave_nowait("conn-1") is False
            assert socket.leaving
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_send_exit, socket, sent)
                await trio.testing.wait_all_tasks_blocked()
                assert sent == []  # the socket was full: the rest waits for room
                while len(received) < filler:
                    received += await room.stream.receive_some()
            assert sent == [True]
            events: list[Event] = []
            room.ws.receive_data(bytes(received[filler:]))
            events += room.ws.events()
            while len(events) < 2:
                room.ws.receive_data(bytes(await room.stream.receive_some()))
                events += room.ws.events()
            # Once: the rest that waited is not sent again, nor its close as
            # the socket closes; the room then reads the end.
            assert not await socket._send_exit("conn-1")
            with trio.move_on_after(0.1):
                await room.stream.receive_some()
                pytest.fail("more was written after the exit went out whole")
            await socket.aclose()
            assert await room.stream.receive_some() == b""
        assert received[:filler] == b"f" * filler
        assert events == EXIT_EVENTS


async def test_the_rest_of_an_exit_cut_short_behind_a_stuck_pong_goes_by_post() -> None:
    """The rest of a partial ``leave_nowait`` does not wait for a pong the room does
    not read: ``_send_exit`` says False at once, and the exit is POSTed."""
    async with socket_over_a_socketpair() as (socket, _room):
        fill(socket)
        assert socket.leave_nowait("conn-1") is False
        with trio.fail_after(5):
            async with socket._send_lock:  # a pong the room does not read
                started = trio.current_time()
                assert await socket._send_exit("conn-1") is False
                assert trio.current_time() - started < 1


# --- pongs over a real socket (the write that skips send_all) ----------------------------------


async def test_a_pong_over_a_socket_is_written_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """A pong is one small write: no lock, conflict detector or reschedule of send_all."""

    async def not_this_way(self: trio.SocketStream, data: object) -> None:  # noqa: ASYNC124 (replaces an async method)
        raise AssertionError("written through SocketStream.send_all")

    async with socket_over_a_socketpair() as (socket, room):
        with trio.fail_after(5):
            await room.send(Ping(payload=b"1"))
            monkeypatch.setattr(trio.SocketStream, "send_all", not_this_way)
            assert await anext(socket) == StreamNews()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(anext, socket)  # flushes the pong, then reads
                assert await room.heard() == [Pong(payload=b"1")]
                nursery.cancel_scope.cancel()


async def test_a_pong_over_a_socket_waits_for_another_sender() -> None:
    async with socket_over_a_socketpair() as (socket, room):
        with trio.fail_after(5):
            await room.send(Ping(payload=b"1"))
            assert await anext(socket) == StreamNews()
            async with trio.open_nursery() as nursery:
                async with socket._send_lock:  # another sender
                    nursery.start_soon(anext, socket)
                    await trio.testing.wait_all_tasks_blocked()
                    with trio.move_on_after(0.1):
                        await room.stream.receive_some()
                        pytest.fail("the pong was written while another sender held the socket")
                assert await room.heard() == [Pong(payload=b"1")]
                nursery.cancel_scope.cancel()


async def test_a_pong_to_a_reset_socket_says_how_it_broke() -> None:
    async with socket_over_a_socketpair() as (socket, room):
        with trio.fail_after(5):
            await room.send(Ping())
            assert await anext(socket) == StreamNews()
            await room.stream.aclose()
            with pytest.raises(
                RoomUnreachable,
                match=r"^process socket broke: (BrokenPipeError|ConnectionResetError)$",
            ):
                await anext(socket)


# --- leaving the socket's block -------------------------------------------------------------------


async def test_leaving_the_socket_block_closes_the_socket(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    async with fake_room.client() as client:
        connector = WebSocketConnector(client)
        async with connector.open(session) as socket:
            assert isinstance(socket, ProcessSocket)
        with pytest.raises(RoomUnreachable, match=r"^process socket broke: ClosedResourceError$"):
            await anext(socket)


@pytest.mark.parametrize("by", ["nowait", "send_exit"])
async def test_a_socket_closed_after_its_exit_ends_in_order_not_with_a_reset(by: str) -> None:
    """What the room sent meanwhile is read and dropped before the close.

    Closed with bytes unread, the socket would reset the connection, and a
    room whose next heartbeat then fails may never read the exit before it.
    Whichever way the holder left: its exit frame written at once, the
    socket then closed as the holder stops (``aclose``, as the socket's
    block does, the normal close written then); or the exit and its close
    sent (``_send_exit``), then the socket closed (``aclose``).
    """
    async with tcp_pair() as (stream, room):
        socket = new_socket(stream)
        with trio.fail_after(5):
            await room.send(Connection(ConnectionType.SERVER).send(Ping(payload=b"beat")))
            await trio.lowlevel.wait_readable(stream.socket)
            if by == "send_exit":
                assert await socket._send_exit("conn-1") is True
                await socket.aclose()
            else:
                assert socket.leave_nowait("conn-1") is None  # done
                await socket.aclose()
            heard = bytearray()
            while chunk := await room.recv(4096):  # an end, not ConnectionResetError
                heard += chunk
        assert len(heard) == client_frames_length(*EXIT_EVENTS)


async def test_a_held_socket_keeps_nothing_of_its_upgrade(
    autojump_clock: MockClock, fake_room: FakeRoom, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The upgrade's response and its HTTP state go once the socket is open.

    A dozen objects per held socket that every full pass of the collector
    would walk, ten thousand times over.
    """
    session = await fake_room.add_worker()
    responses: list[weakref.ref[Response]] = []
    accepted = WebSocketConnector._accepted

    def keep_a_weak_reference(
        self: WebSocketConnector, response: Response, key: bytes, session: AgentSession
    ) -> ProcessSocket:
        responses.append(weakref.ref(response))
        return accepted(self, response, key, session)

    monkeypatch.setattr(WebSocketConnector, "_accepted", keep_a_weak_reference)
    async with fake_room.client() as client:
        connector = WebSocketConnector(client)
        async with connector.open(session) as socket:
            assert await anext(socket) == StreamNews(connection_id=socket.connection_id)
            gc.collect()
            assert [response() for response in responses] == [None]


# --- the exit written alone, and closing what close_now cannot -----------------------------------


async def test_an_exit_written_at_once_leaves_its_close_for_the_sockets_close() -> None:
    """To a room that answers exits, the close must wait for its answer.

    So the goodbye's loop writes the exit frame alone; the normal close goes
    out when the socket is closed (after the answer, or when none came),
    before the end of the stream.
    """
    async with socket_over_a_socketpair() as (socket, room):
        with trio.fail_after(5):
            await room.send(frame(event="open", connection_id="conn-1", exit_ack=True))
            assert await anext(socket) == StreamNews(connection_id="conn-1")
            assert socket.leave_nowait("conn-1") is True  # written alone: its answer is to come
            assert await room.heard() == EXIT_EVENTS[:1]
            with trio.move_on_after(0.1):
                await room.stream.receive_some()
                pytest.fail("the close was written with the exit")
            await socket.aclose()
            heard = bytearray()
            while chunk := await room.stream.receive_some():  # then the end
                heard += chunk
            room.ws.receive_data(bytes(heard))
            assert list(room.ws.events()) == EXIT_EVENTS[1:]


async def test_the_close_of_an_exit_written_alone_is_not_written_after_half_an_exit() -> None:
    """An exit the socket could not take whole gets no close frame after it.

    The close of an exit written alone waits for the socket's close; if the
    exit itself never went out whole (a full socket, the deadline before the
    rest), a close frame then would follow a cut frame.
    """
    async with socket_over_a_socketpair() as (socket, room):
        socket.exit_ack = True  # its close waits for the socket's close
        filler = fill(socket)
        assert socket.leave_nowait("conn-1") is False
        with trio.fail_after(5):
            received = bytearray()
            while len(received) < filler:  # the room reads: the socket has room again
                received += await room.stream.receive_some()
            await socket.aclose()
            while chunk := await room.stream.receive_some():
                received += chunk
        assert bytes(received) == b"f" * filler


async def test_the_close_of_an_exit_written_alone_to_a_room_gone_raises_nothing() -> None:
    async with socket_over_a_socketpair() as (socket, room):
        socket.exit_ack = True
        assert socket.leave_nowait("conn-1") is True
        await room.stream.aclose()
        await socket.aclose()  # the close frame's write fails: the socket closes all the same
        stream = socket._stream
        assert isinstance(stream, trio.SocketStream)
        assert stream.socket.fileno() == -1


async def test_the_upgrade_offers_a_key_of_16_random_bytes(autojump_clock: MockClock) -> None:
    """RFC 6455, section 4.1: the nonce is 16 bytes, base64-encoded."""
    keys: list[bytes] = []

    async def app(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        keys.extend(v for k, v in scope["headers"] if k.lower() == b"sec-websocket-key")
        await receive()  # websocket.connect
        start = {"type": "websocket.http.response.start", "status": 404, "headers": []}
        await send(start)
        await send({"type": "websocket.http.response.body", "body": b""})

    with trio.fail_after(10):
        async with room_client(app) as client:
            with pytest.raises(AttemptRejected):
                await read_all(WebSocketConnector(client), SESSION)
    assert [len(base64.b64decode(key, validate=True)) for key in keys] == [16]


async def test_a_socket_close_now_cannot_close_is_closed_by_aclose() -> None:
    stream = OnlyAsyncClose()
    socket = new_socket(stream)
    assert not socket.close()
    assert not stream.closed
    await socket.aclose()
    assert stream.closed


async def test_an_exit_to_a_socket_the_room_closed_writes_nothing() -> None:
    """A socket finished by the room's close takes no exit: nothing more is written."""
    async with socket_over_a_socketpair() as (socket, room):
        with trio.fail_after(5):
            await room.send(CloseConnection(code=1000))
            assert await anext(socket) == StreamNews()
            with pytest.raises(StopAsyncIteration):
                await anext(socket)
            assert await room.heard() == [CloseConnection(code=1000, reason="")]  # the echo
            assert not await socket._send_exit("conn-1")
            with trio.move_on_after(0.1):
                await room.stream.receive_some()
                pytest.fail("something was written after the socket finished")


async def test_a_refused_upgrade_closes_a_stream_close_now_cannot_close() -> None:
    stream = OnlyAsyncClose(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")

    class Opener:
        async def open_stream(self, origin: Origin) -> trio.abc.Stream:
            await trio.lowlevel.checkpoint()
            return stream

    with trio.fail_after(5):
        async with RoomClient("http://room.test", opener=Opener()) as client:
            with pytest.raises(AttemptRejected):
                await read_all(WebSocketConnector(client), SESSION)
    assert stream.closed


# --- the room's acknowledgement of the exit (issue 30 row 2) -----------------------------


def ack(recorded: bool, connection_id: str | None = "conn-1") -> TextMessage:
    return TextMessage(
        data=json.dumps(
            {
                "event": "exit_recorded",
                "process_connection_id": connection_id,
                "recorded": recorded,
            },
            separators=(",", ":"),
        )
    )


OPEN_WITH_ACK = TextMessage(data='{"event":"open","connection_id":"conn-1","exit_ack":true}')


async def test_a_room_that_offers_acks_says_so_in_its_open_frame(
    autojump_clock: MockClock,
) -> None:
    socket, room = open_socket()
    assert socket.exit_ack is False
    with trio.fail_after(1):
        await room.send(TextMessage(data='{"event":"open","connection_id":"conn-0"}'))
        await anext(socket)
        assert socket.exit_ack is False  # fastroom.mjs, an older room
        await room.send(OPEN_WITH_ACK)
        await anext(socket)
    assert socket.exit_ack is True


@pytest.mark.parametrize("recorded", [True, False])
async def test_the_acknowledgement_ends_the_iteration_with_the_rooms_answer(
    autojump_clock: MockClock, recorded: bool
) -> None:
    """The exit goes alone (the room answers before any close); its answer ends the
    reader, with what the room said (R5's ``recorded``)."""
    socket, room = open_socket()
    with trio.fail_after(1):
        await room.send(OPEN_WITH_ACK)
        assert await anext(socket) == StreamNews(connection_id="conn-1")
        assert await socket._send_exit("conn-1") is True
        assert await room.heard() == EXIT_EVENTS[:1]  # no close yet
        assert socket.exit_recorded is None
        await room.send(Ping(payload=b"p"), ack(recorded))
        with pytest.raises(StopAsyncIteration):
            await anext(socket)
    assert socket.exit_recorded is recorded


async def test_an_acknowledgement_in_fragments_is_read_whole(autojump_clock: MockClock) -> None:
    socket, room = open_socket()
    text = ack(True).data
    with trio.fail_after(1):
        await room.send(OPEN_WITH_ACK)
        await anext(socket)
        assert await socket._send_exit("conn-1") is True
        await room.send(
            TextMessage(data=text[:10], message_finished=False), TextMessage(data=text[10:])
        )
        with pytest.raises(StopAsyncIteration):
            await anext(socket)
    assert socket.exit_recorded is True


async def test_an_acknowledgement_for_another_connection_is_not_this_exits(
    autojump_clock: MockClock,
) -> None:
    socket, room = open_socket()
    with trio.fail_after(1):
        await room.send(OPEN_WITH_ACK)
        await anext(socket)
        assert await socket._send_exit("conn-1") is True
        await room.send(ack(True, "conn-other"), CloseConnection(code=1000))
        with pytest.raises(StopAsyncIteration):
            await anext(socket)  # the room's close ends it, unanswered
    assert socket.exit_recorded is None


async def test_a_room_that_closes_instead_of_answering_leaves_the_exit_unconfirmed(
    autojump_clock: MockClock,
) -> None:
    """A room whose storage refused the exit closes (1011) without an answer."""
    socket, room = open_socket()
    with trio.fail_after(1):
        await room.send(OPEN_WITH_ACK)
        await anext(socket)
        assert socket.leave_nowait("conn-1") is False  # in memory: not at once
        assert await socket._send_exit("conn-1") is True
        await room.send(CloseConnection(code=1011))
        with pytest.raises(StopAsyncIteration):
            await anext(socket)
    assert socket.exit_recorded is None


# --- leave: the socket's own exit, and the POST when it cannot carry it or is not answered --


def posting(
    posted: list[str | None], answer: bool = True
) -> Callable[[str | None], Awaitable[bool]]:
    """The socket's POSTed exit: noted in ``posted``, answered ``answer``."""

    async def post(connection_id: str | None) -> bool:
        await trio.lowlevel.checkpoint()
        posted.append(connection_id)
        return answer

    return post


def socket_posting(posted: list[str | None], answer: bool = True) -> tuple[ProcessSocket, Room]:
    client, server = trio.testing.memory_stream_pair()
    socket = ProcessSocket(
        client,
        Connection(ConnectionType.CLIENT),
        ping_interval=PING_INTERVAL,
        pong_timeout=PONG_TIMEOUT,
        max_event_bytes=1024,
        announce_exit=posting(posted, answer),
    )
    return socket, Room(server)


async def test_leaving_to_a_room_that_gives_no_answer_sends_the_exit_and_closes(
    autojump_clock: MockClock,
) -> None:
    posted: list[str | None] = []
    socket, room = socket_posting(posted)
    with trio.fail_after(1):
        await room.send(frame(event="open", connection_id="conn-1"))
        await anext(socket)
        assert await socket.leave("conn-1") is None  # sent, unanswered
        assert await room.heard() == EXIT_EVENTS
        with pytest.raises(StopAsyncIteration):
            await anext(socket)  # closed: the reader ends
    assert posted == []


@pytest.mark.parametrize("recorded", [True, False])
async def test_leaving_to_a_room_that_answers_returns_its_answer(
    autojump_clock: MockClock, recorded: bool
) -> None:
    """The reader reads the answer; ``leave`` returns it, and POSTs nothing."""
    posted: list[str | None] = []
    socket, room = socket_posting(posted)
    with trio.fail_after(1):
        await room.send(OPEN_WITH_ACK)
        await anext(socket)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stops_at, socket, 0)
            answer: list[bool | None] = []

            async def leave() -> None:
                answer.append(await socket.leave("conn-1"))

            nursery.start_soon(leave)
            assert await room.heard() == EXIT_EVENTS[:1]  # no close before the answer
            await room.send(ack(recorded))
    assert (answer, posted) == ([recorded], [])


async def test_an_exit_unanswered_when_its_holder_closes_the_socket_is_sent_unconfirmed(
    autojump_clock: MockClock,
) -> None:
    """The goodbye stops the holder when the answers are due: its socket closes, and
    ``leave`` says sent, unanswered (the goodbye POSTs it then, not the socket)."""
    posted: list[str | None] = []
    socket, room = socket_posting(posted)
    with trio.fail_after(10):
        await room.send(OPEN_WITH_ACK)
        await anext(socket)
        async with trio.open_nursery() as nursery:
            answer: list[bool | None] = []

            async def leave() -> None:
                answer.append(await socket.leave("conn-1"))

            nursery.start_soon(leave)
            await trio.sleep(2)
            assert answer == []
            socket.close()
        assert trio.current_time() == 2
    assert (answer, posted) == ([None], [])


async def test_an_exit_whose_socket_its_holder_closed_under_the_reader_is_sent_unconfirmed(
    autojump_clock: MockClock,
) -> None:
    """The reader ends first, woken by the close: ``leave`` still says sent, unanswered.

    The close is the holder's, not the room's hanging up: the goodbye, which
    stopped the holder, POSTs the exit itself, so the socket must not.
    """
    posted: list[str | None] = []
    socket, room = socket_posting(posted)
    with trio.fail_after(10):
        await room.send(OPEN_WITH_ACK)
        await anext(socket)
        async with trio.open_nursery() as nursery:
            news: list[StreamNews] = []

            async def read() -> None:
                news.extend([item async for item in socket])

            nursery.start_soon(read)
            await trio.testing.wait_all_tasks_blocked()
            assert await socket._send_exit("conn-1")
            assert await room.heard() == EXIT_EVENTS[:1]  # its close waits for the answer
            socket.close()
        assert news == []
        assert await socket.leave("conn-1") is None
    assert posted == []


@pytest.mark.parametrize("hangs_up", ["close frame", "end of stream"])
async def test_an_exit_the_room_hangs_up_on_without_an_answer_is_posted(
    autojump_clock: MockClock, hangs_up: str
) -> None:
    """A room whose storage refused the exit closes without an answer: POSTed as well."""
    posted: list[str | None] = []
    socket, room = socket_posting(posted, answer=False)
    with trio.fail_after(10):
        await room.send(OPEN_WITH_ACK)
        await anext(socket)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stops_at, socket, 0)
            answer: list[bool | None] = []

            async def leave() -> None:
                answer.append(await socket.leave("conn-1"))

            nursery.start_soon(leave)
            assert await room.heard() == EXIT_EVENTS[:1]
            if hangs_up == "close frame":
                await room.send(CloseConnection(code=1011))
            else:
                await room.stream.aclose()
    assert (answer, posted) == ([False], ["conn-1"])


async def test_an_exit_the_socket_cannot_carry_is_posted(autojump_clock: MockClock) -> None:
    posted: list[str | None] = []
    socket, room = socket_posting(posted)
    with trio.fail_after(1):
        await room.send(frame(event="open", connection_id="conn-1"))
        await anext(socket)
        await room.stream.aclose()
        with pytest.raises(StopAsyncIteration):
            await anext(socket)
        assert await socket.leave("conn-1") is True
    assert posted == ["conn-1"]


# --- quiet reads: a lone ping waits in the kernel (Linux TCP) ----------------------------

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_RCVLOWAT polling")


@linux_only
async def test_a_lone_ping_waits_in_the_kernel_for_the_next_and_one_pong_answers_both() -> None:
    async with tcp_pair() as (stream, theirs):
        socket, room = new_socket(stream), Room(trio.SocketStream(theirs))
        news: list[StreamNews] = []
        with trio.fail_after(5):
            async with trio.open_nursery() as nursery:

                async def reader() -> None:
                    async for item in socket:
                        news.append(item)

                nursery.start_soon(reader)
                await room.send(frame(event="open", connection_id="conn-1"))
                await trio.testing.wait_all_tasks_blocked()
                assert [item.connection_id for item in news] == ["conn-1"]
                await room.send(Ping())
                await trio.testing.wait_all_tasks_blocked()
                assert len(news) == 1  # the lone ping did not wake the reader
                await room.send(Ping(payload=b""))
                assert [type(event) for event in await room.heard()] == [Pong]
                assert len(news) == 2
                await room.send(CloseConnection(code=1001))  # four bytes: wakes at once
                await trio.testing.wait_all_tasks_blocked()
                nursery.cancel_scope.cancel()
        assert socket._finished


def socket_pinging_every(ping_interval: float, stream: trio.abc.Stream) -> ProcessSocket:
    """A process socket over ``stream`` that pings after ``ping_interval`` of silence."""
    return ProcessSocket(
        stream,
        Connection(ConnectionType.CLIENT),
        ping_interval=ping_interval,
        pong_timeout=5.0,
        max_event_bytes=1024,
        announce_exit=no_post,
    )


@linux_only
async def test_the_ping_deadline_counts_from_when_a_kept_ping_arrived() -> None:
    """Kept from 0.1 s and read at the check (2 s), the room's ping re-arms the
    3 s ping deadline to 3.1 s, not 5 s: the client pings as if it had read it at once."""
    async with tcp_pair() as (stream, theirs):
        socket = socket_pinging_every(3.0, stream)
        room = Room(trio.SocketStream(theirs))
        with trio.fail_after(10):
            await room.send(frame(event="open", connection_id="conn-1"))
            start = trio.current_time()
            assert (await anext(socket)).connection_id == "conn-1"
            async with trio.open_nursery() as nursery:

                async def reader() -> None:
                    async for _ in socket:
                        pass

                nursery.start_soon(reader)
                await trio.sleep(0.1)
                await room.send(Ping())
                heard = await room.heard()  # the pong, then the client's ping
                while not any(isinstance(event, Ping) for event in heard):
                    heard += await room.heard()
                pinged_at = trio.current_time() - start
                nursery.cancel_scope.cancel()
        assert 3.0 <= pinged_at < 4.5


@linux_only
async def test_the_pong_the_socket_waits_for_is_read_as_it_comes() -> None:
    """Nothing is kept while a pong is awaited: it is news at once, not at the check.

    Kept, the pong (two bytes, as a lone ping) would be read only a second
    before the pong deadline, 4 s after it came.
    """
    async with tcp_pair() as (stream, theirs):
        socket = socket_pinging_every(0.2, stream)
        room = Room(trio.SocketStream(theirs))
        heard_again = trio.Event()
        with trio.fail_after(10):
            await room.send(frame(event="open", connection_id="conn-1"))
            assert (await anext(socket)).connection_id == "conn-1"
            async with trio.open_nursery() as nursery:

                async def reader() -> None:
                    async for _ in socket:
                        heard_again.set()

                nursery.start_soon(reader)
                heard = await room.heard()  # the client's ping, after 0.2 s of silence
                while not any(isinstance(event, Ping) for event in heard):
                    heard += await room.heard()
                await room.send(Pong())
                with trio.fail_after(2):
                    await heard_again.wait()
                nursery.cancel_scope.cancel()
