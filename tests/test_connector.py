"""classify_status and SSEConnector, over small ASGI apps on the streaming transport.

The holder's side of leaving (close, then POST) is ``test_manager_goodbye.py``'s;
here, what the SSE stream and connector offer it.

Each app below sends the chunks a test scripts, exactly as given, so every test
controls where the chunk boundaries fall. No sockets; the clock is trio's.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, cast

import httpx2
import pytest
import trio
import trio.testing

from letagents_trio import (
    AgentSession,
    AttemptRejected,
    Outcome,
    RoomClient,
    RoomUnreachable,
    SSEConnector,
    StreamNews,
    StreamProtocolError,
)
from letagents_trio._exits import HandedExit
from letagents_trio._http import HTTPFailure
from letagents_trio._protocol import MAX_EVENT_BYTES
from letagents_trio._sse import FEED_SLICE_BYTES
from letagents_trio._sse_connector import _SSEStream, classify_status
from letagents_trio.testing import open_streaming_transport
from letagents_trio.testing._asgi import read_body

if TYPE_CHECKING:
    from collections.abc import MutableMapping

    from letagents_trio.testing._asgi import Receive, Send

SESSION = AgentSession(session_id="wsess_1", session_token="secret-token-1", room_id="room_a")
API_URL = "http://room.test"
SSE_HEADERS = [(b"content-type", b"text/event-stream")]

# --- classify_status -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "content_type", "expected"),
    [
        (410, "application/json", Outcome.ENDED),
        (410, "text/event-stream", Outcome.ENDED),
        (404, "application/json", Outcome.UNSUPPORTED),
        (405, None, Outcome.UNSUPPORTED),
        (500, "text/event-stream", Outcome.DROPPED),
        (502, None, Outcome.DROPPED),
        (503, "application/json", Outcome.DROPPED),
        (599, None, Outcome.DROPPED),
        (401, "application/json", Outcome.REFUSED),
        (403, "text/event-stream", Outcome.REFUSED),
        (400, None, Outcome.REFUSED),
        (409, None, Outcome.REFUSED),
        (302, "text/event-stream", Outcome.REFUSED),
        (300, "text/event-stream", Outcome.REFUSED),
        (199, "text/event-stream", Outcome.REFUSED),
        (204, "text/event-stream", Outcome.REFUSED),
        (205, "text/event-stream", Outcome.REFUSED),
        (201, "text/event-stream", None),  # any 2xx with a body opens, as Node's response.ok
        (206, "text/event-stream", None),
        (299, "text/event-stream", None),
        (201, "application/json", Outcome.REFUSED),
        (200, "text/event-stream", None),
        (200, "text/event-stream; charset=utf-8", None),
        (200, "TEXT/EVENT-STREAM", None),
        (200, " text/event-stream ;charset=UTF-8", None),
        (200, "application/json", Outcome.REFUSED),
        (200, "text/plain", Outcome.REFUSED),
        (200, "text/event-streams", Outcome.REFUSED),
        (200, "", Outcome.REFUSED),
        (200, None, Outcome.REFUSED),
    ],
)
def test_classify_status(status: int, content_type: str | None, expected: Outcome | None) -> None:
    assert classify_status(status, content_type) is expected


# --- a scripted app --------------------------------------------------------------------


def scripted_app(
    chunks: Sequence[bytes],
    *,
    status: int = 200,
    headers: Sequence[tuple[bytes, bytes]] = SSE_HEADERS,
    then: str = "end",
) -> Any:
    """An app that answers ``status`` and sends ``chunks`` one by one.

    ``then`` says what happens after the last chunk: ``"end"`` ends the body,
    ``"hold"`` keeps the stream open until the client leaves, ``"reset"``
    raises ``httpx2.ReadError`` as a broken connection would.
    """

    async def app(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": status, "headers": list(headers)})
        for chunk in chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        if then == "reset":
            raise httpx2.ReadError("connection reset by peer")
        if then == "hold":
            while (await receive())["type"] != "http.disconnect":
                pass
            return
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    return app


@asynccontextmanager
async def connector_for(app: Any, **options: Any) -> AsyncIterator[SSEConnector]:
    async with (
        open_streaming_transport(app) as transport,
        RoomClient(API_URL, transport=transport, opener=transport) as client,
    ):
        yield SSEConnector(client, **options)


async def news_of(chunks: Sequence[bytes], **options: Any) -> list[StreamNews]:
    """Every StreamNews the connector reads from a stream of ``chunks``."""
    with trio.fail_after(5):
        async with (
            connector_for(scripted_app(chunks), **options) as connector,
            connector.open(SESSION) as stream,
        ):
            return [news async for news in stream]


OPEN_ID = "0b8f7c1e-4a53-4b0e-9a7c-1f2d3e4c5b6a"


# --- the open event --------------------------------------------------------------------


async def test_one_news_per_chunk_and_the_compact_open_event() -> None:
    news = await news_of(
        [
            b": connected\n\n",
            b'event: open\ndata: {"connection_id":"' + OPEN_ID.encode() + b'"}\n\n',
        ]
    )
    assert news == [StreamNews(), StreamNews(connection_id=OPEN_ID)]


async def test_comment_only_chunk_is_news_with_nothing_in_it() -> None:
    news = await news_of([b": heartbeat\n\n", b": heartbeat\n\n", b":\n\n"])
    assert news == [StreamNews(), StreamNews(), StreamNews()]
    assert all(n.connection_id is None and not n.ended for n in news)


async def test_pretty_printed_open_json_is_parsed() -> None:
    pretty = json.dumps({"connection_id": OPEN_ID, "extra": [1, 2]}, indent=2)
    body = "event: open\n" + "".join(f"data: {line}\n" for line in pretty.splitlines()) + "\n"
    assert "  " in pretty  # not what the Node client's regex accepts
    news = await news_of([body.encode()])
    assert news == [StreamNews(connection_id=OPEN_ID)]


async def test_open_json_with_spaces_and_a_non_uuid_id() -> None:
    news = await news_of([b'event: open\ndata: { "connection_id" : "conn 7" }\n\n'])
    assert news == [StreamNews(connection_id="conn 7")]


async def test_open_event_split_in_the_middle_of_its_json() -> None:
    whole = b'event: open\ndata: {"connection_id":"' + OPEN_ID.encode() + b'"}\n\n'
    cut = whole.index(b"connection_id") + 8
    news = await news_of([whole[:cut], whole[cut:-1], whole[-1:]])
    assert news == [StreamNews(), StreamNews(), StreamNews(connection_id=OPEN_ID)]


@pytest.mark.parametrize(
    "data",
    [
        b"not json",
        b'{"connection_id":',
        b"[1, 2, 3]",
        b'"just a string"',
        b'{"connection_id": 42}',
        b'{"connection_id": null}',
        b'{"connection_id": ""}',
        b'{"connection_id": ["x"]}',
        b'{"other": "x"}',
        b"1" * 5000,  # more digits than int() accepts: ValueError
        b"[" * 100_000,  # deeper than the JSON parser's recursion limit
        b'{"connection_id": "\\ud800"}',  # a lone surrogate cannot be sent back
        b'{"connection_id": "a\\u0000b"}',
        b'{"connection_id": "line\\nbreak"}',
    ],
    # No backslash in an id: pytest escapes it, and mutmut, which selects tests
    # by id, then found none of these and counted every mutant they reach as killed.
    ids=lambda d: d[:24].decode(errors="replace").replace("\\", "/"),
)
async def test_open_data_without_a_usable_id_is_ignored(data: bytes) -> None:
    news = await news_of([b"event: open\ndata: " + data + b"\n\n", b": after\n\n"])
    # A chunk longer than one read arrives as two: more news, none naming an id.
    assert len(news) >= 2
    assert set(news) == {StreamNews()}


async def test_connection_id_longer_than_128_chars_is_ignored() -> None:
    at_limit, over = "a" * 128, "b" * 129
    news = await news_of(
        [
            b'event: open\ndata: {"connection_id":"' + over.encode() + b'"}\n\n',
            b'event: open\ndata: {"connection_id":"' + at_limit.encode() + b'"}\n\n',
        ]
    )
    assert news == [StreamNews(), StreamNews(connection_id=at_limit)]


async def test_other_event_types_name_no_connection() -> None:
    news = await news_of([b'data: {"connection_id":"x"}\n\n', b"event: ping\ndata: {}\n\n"])
    assert news == [StreamNews(), StreamNews()]


# --- ended, end of stream, errors ------------------------------------------------------


async def test_ended_event() -> None:
    news = await news_of([b"event: ended\ndata: {}\n\n"])
    assert news == [StreamNews(ended=True)]


async def test_open_and_ended_in_one_chunk_are_one_news() -> None:
    news = await news_of(
        [b'event: open\ndata: {"connection_id":"c1"}\n\nevent: ended\ndata: {}\n\n']
    )
    assert news == [StreamNews(connection_id="c1", ended=True)]


# ``ended`` is final wherever its event line appears (issue 12 item 5), as in the
# Node client, which ends on the text "event: ended" in the stream's tail.


async def test_an_ended_event_cut_before_its_blank_line_still_ends() -> None:
    news = await news_of([b"event: ended\ndata: {}\n"])
    assert news == [StreamNews(ended=True)]


async def test_an_ended_event_without_data_ends() -> None:
    news = await news_of([b"event: ended\n\n"])
    assert news == [StreamNews(ended=True)]


async def test_an_ended_line_cut_off_by_the_end_of_the_stream_ends() -> None:
    news = await news_of([b": connected\n\n", b"event: ended"])
    # The name is known before its newline: ended with the read that brought it.
    assert news == [StreamNews(), StreamNews(ended=True)]


async def test_an_ended_line_ends_before_its_block_does() -> None:
    """The room keeps the stream open after the line: the news says ended at once."""
    with trio.fail_after(5):
        async with (
            connector_for(scripted_app([b"event: ended\n"], then="hold")) as connector,
            connector.open(SESSION) as stream,
        ):
            assert await anext(stream) == StreamNews(ended=True)


async def test_an_ended_line_then_a_reset_ends() -> None:
    with trio.fail_after(5):
        async with (
            connector_for(scripted_app([b"event: ended"], then="reset")) as connector,
            connector.open(SESSION) as stream,
        ):
            assert [n async for n in stream] == [StreamNews(ended=True)]


@pytest.mark.parametrize(
    "chunks",
    [
        [b"event: endedX\n\n"],
        [b"event: ended \n\n"],
        [b"data: event: ended\n\n"],
        [b": event: ended\n\n"],
        [b"event: end", b"\n\n"],
        [b"event: ended\nevent: ping\n"],  # cut off: its type is ping by then
    ],
)
async def test_only_an_ended_event_type_ends(chunks: list[bytes]) -> None:
    """Where Node's substring search and the event type differ, the type decides."""
    news = await news_of(chunks)
    assert not any(n.ended for n in news)


async def test_a_201_event_stream_opens() -> None:
    app = scripted_app([b": connected\n\n"], status=201)
    with trio.fail_after(5):
        async with connector_for(app) as connector, connector.open(SESSION) as stream:
            assert [n async for n in stream] == [StreamNews()]


async def test_a_reset_mid_stream_is_room_unreachable() -> None:
    with trio.fail_after(5):
        async with (
            connector_for(scripted_app([b": connected\n\n"], then="reset")) as connector,
            connector.open(SESSION) as stream,
        ):
            first = await anext(stream)
            assert first == StreamNews()
            # A reset cuts the chunked body short: the framing says it broke.
            with pytest.raises(RoomUnreachable, match="broke: RemoteProtocolError") as info:
                await anext(stream)
            assert isinstance(info.value.__cause__, HTTPFailure)


async def test_a_line_longer_than_the_limit_is_a_protocol_error() -> None:
    with trio.fail_after(5):
        async with (
            connector_for(scripted_app([b"x" * 1000] * 3, then="hold"), max_event_bytes=2048) as c,
            c.open(SESSION) as stream,
        ):
            assert await anext(stream) == StreamNews()
            assert await anext(stream) == StreamNews()
            with pytest.raises(StreamProtocolError):
                await anext(stream)


async def test_a_huge_chunk_is_decoded_with_a_checkpoint_per_slice() -> None:
    """Issue 13 row 1: one read that holds 1 MiB of blank lines (what 1 KB of
    gzip inflates to) must not hold trio's loop for the whole decode: another
    task runs between slices."""
    chunk = b"\n" * (1024 * 1024)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await trio.lowlevel.checkpoint()
            ticks += 1

    class OneHugeRead:
        """A response whose one read hands over the whole 1 MiB (a socket can)."""

        heard_at = None

        async def next_chunk(self, *, keep: int = 0) -> bytes:
            await trio.lowlevel.checkpoint()
            return chunk

    news = _SSEStream(None, SESSION, MAX_EVENT_BYTES)  # type: ignore[arg-type]
    news._response = OneHugeRead()  # type: ignore[assignment]
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ticker)
            await trio.lowlevel.checkpoint()
            before = ticks
            assert await anext(news) == StreamNews()
            assert ticks - before >= 1024 * 1024 // FEED_SLICE_BYTES - 1
            nursery.cancel_scope.cancel()


class RecordedReads:
    """A response that gives ``chunks`` in turn, recording what each read let the kernel keep.

    A piece of its body weighs 100 bytes more on the wire than it holds (as
    a TLS record and a chunk's framing would).
    """

    def __init__(self, *chunks: bytes) -> None:
        self._chunks = list(chunks)
        self.kept: list[int] = []
        self.heard_at: float | None = None

    def header(self, name: str) -> str | None:
        return None

    def wire_size(self, size: int) -> int:
        return size + 100

    async def next_chunk(self, *, keep: int = 0) -> bytes:
        await trio.lowlevel.checkpoint()
        self.kept.append(keep)
        self.heard_at = 7.0 if keep else None
        return self._chunks.pop(0)


OPEN_EVENT = b'event: open\ndata: {"connection_id":"c-1"}\n\n'


@pytest.mark.parametrize(
    ("heartbeat", "kept"),
    [
        (b": heartbeat\n\n", 113),
        (b":\r\n\r\n", 105),
        (b": keep-alive\n\n", 114),  # as long as `event: ended` and its blank line
        (b": keep-alive!\n\n", 0),  # longer: nothing is kept
        (b": hb\n\n: hb\n\n", 0),  # two: not what one heartbeat weighs
        (b"data: x\n\n", 0),  # an event, not a comment
    ],
)
async def test_a_named_stream_keeps_as_much_as_one_heartbeat_weighs_on_the_wire(
    heartbeat: bytes, kept: int
) -> None:
    """Learnt from the first lone heartbeat once named; anything heavier wakes the read."""
    chunks = (b": connected\n\n", b": hb\n\n", OPEN_EVENT, heartbeat, OPEN_EVENT, b"")
    response = RecordedReads(*chunks)
    stream = _SSEStream(None, SESSION, MAX_EVENT_BYTES)  # type: ignore[arg-type]
    stream._response = response  # type: ignore[assignment]
    news: list[StreamNews] = []
    heard: list[float] = []
    with trio.fail_after(5):
        async for item in stream:
            news.append(item)
            heard.append(stream.heard_at)
    # Nothing kept before the stream is named, nor before a heartbeat has shown its weight.
    assert response.kept == [0, 0, 0, 0, kept, kept]
    assert [item.connection_id for item in news] == [None, None, "c-1", None, "c-1"]
    # Kept by the kernel: heard when the bytes came (7), not when they were read.
    assert [at == 7.0 for at in heard] == [False, False, False, False, bool(kept)]


@pytest.mark.parametrize(
    ("status", "content_type", "outcome"),
    [
        (410, b"application/json", Outcome.ENDED),
        (404, b"application/json", Outcome.UNSUPPORTED),
        (405, b"text/plain", Outcome.UNSUPPORTED),
        (503, b"application/json", Outcome.DROPPED),
        (401, b"application/json", Outcome.REFUSED),
        (200, b"application/json", Outcome.REFUSED),
    ],
)
async def test_refusals_raise_attempt_rejected_without_secrets(
    status: int, content_type: bytes, outcome: Outcome
) -> None:
    app = scripted_app(
        [b'{"error":"secret-token-1"}'], status=status, headers=[(b"content-type", content_type)]
    )
    with trio.fail_after(5):
        async with connector_for(app) as connector:
            with pytest.raises(AttemptRejected) as info:
                async with connector.open(SESSION):
                    pytest.fail("the stream must not open")  # pragma: no cover
    assert info.value.outcome is outcome
    assert info.value.detail == f"HTTP {status}"
    assert str(info.value) == f"{outcome.value}: HTTP {status}"
    assert "secret-token-1" not in str(info.value)


async def test_the_request_asks_for_an_event_stream_with_the_session_credentials() -> None:
    seen: list[dict[str, str]] = []

    async def app(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        seen.append(
            {k.decode(): v.decode() for k, v in scope["headers"]} | {":path": scope["path"]}
        )
        await scripted_app([])(scope, receive, send)

    with trio.fail_after(5):
        async with connector_for(app) as connector, connector.open(SESSION) as stream:
            assert [n async for n in stream] == []
    [headers] = seen
    assert headers[":path"] == "/rooms/room_a/agent-sessions/wsess_1/process"
    assert headers["accept"] == "text/event-stream"
    # The connection serves this one stream (a room that honours it closes the
    # connection with the stream, which lets the stream be read quietly).
    assert headers["connection"] == "close"
    assert headers["x-letagents-agent-session-id"] == "wsess_1"
    assert headers["x-letagents-agent-session-token"] == "secret-token-1"


async def test_the_stream_asks_for_no_content_coding() -> None:
    """Issue 13 row 1: the process stream asks for ``identity``."""
    seen: list[dict[bytes, bytes]] = []
    inner = scripted_app([b": hi\n\n"], then="hold")

    async def app(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        seen.append({bytes(k).lower(): bytes(v) for k, v in scope["headers"]})
        await inner(scope, receive, send)

    with trio.fail_after(10):
        async with connector_for(app) as connector, connector.open(SESSION) as stream:
            await anext(stream)
    assert seen[0][b"accept-encoding"] == b"identity"


@pytest.mark.parametrize("coding", [b"gzip", b"br", b"deflate, gzip"])
async def test_an_encoded_stream_is_refused_unread(coding: bytes) -> None:
    """Issue 13 row 1: a stream in a content coding it did not ask for is a refusal."""
    bomb = scripted_app(
        [b"\x1f\x8b" + b"\x00" * 64], headers=[*SSE_HEADERS, (b"content-encoding", coding)]
    )
    with trio.fail_after(10):
        async with connector_for(bomb) as connector:
            with pytest.raises(AttemptRejected) as refused:
                async with connector.open(SESSION):
                    pass  # pragma: no cover - refused before the block
    assert refused.value.outcome is Outcome.REFUSED
    assert refused.value.detail == "HTTP 200 in a content coding it did not ask for"


async def test_a_refusal_not_2xx_says_only_its_status_whatever_its_coding() -> None:
    """A 300 is refused as any answer that is not 2xx: its coding is not the reason."""
    answer = scripted_app([], status=300, headers=[*SSE_HEADERS, (b"content-encoding", b"gzip")])
    with trio.fail_after(10):
        async with connector_for(answer) as connector:
            with pytest.raises(AttemptRejected) as refused:
                async with connector.open(SESSION):
                    pass  # pragma: no cover - refused before the block
    assert (refused.value.outcome, refused.value.detail) == (Outcome.REFUSED, "HTTP 300")


def test_identity_is_not_a_content_coding() -> None:
    assert classify_status(200, "text/event-stream", "identity") is None
    assert classify_status(200, "text/event-stream", None) is None
    assert classify_status(200, "text/event-stream", "gzip") is Outcome.REFUSED


# --- leaving -------------------------------------------------------------------------------


def exit_recorder(log: list[object]) -> Any:
    """An app that answers every exit POST with ``recorded: true`` and logs its body."""

    async def app(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        body, _ = await read_body(receive)
        log.append((scope["method"], scope["path"], json.loads(body)))
        answer = json.dumps({"recorded": True}).encode()
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer, "more_body": False})

    return app


def exit_post(connection_id: str | None) -> tuple[str, str, dict[str, object]]:
    return (
        "POST",
        "/rooms/room_a/agent-sessions/wsess_1/process/exit",
        {
            "agent_session_id": "wsess_1",
            "agent_session_token": "secret-token-1",
            "process_connection_id": connection_id,
        },
    )


@pytest.mark.parametrize("connection_id", ["conn-7", None])
async def test_the_exit_is_posted_naming_the_connection(connection_id: str | None) -> None:
    log: list[object] = []
    with trio.fail_after(10):
        async with connector_for(exit_recorder(log)) as connector:
            assert await connector.announce_exit(SESSION, connection_id) is True
    assert log == [exit_post(connection_id)]


def stream_and_exits(log: list[object]) -> Any:
    """An app holding an SSE stream open on GET, and answering exit POSTs as ``exit_recorder``."""
    stream = scripted_app([b'event: open\ndata: {"connection_id":"conn-7"}\n\n'], then="hold")
    exits = exit_recorder(log)

    async def app(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        if scope["method"] == "GET":
            await stream(scope, receive, send)
        else:
            await exits(scope, receive, send)

    return app


async def test_an_sse_stream_leaves_by_closing_then_posting_its_exit() -> None:
    """SSE has no exit of its own: at once, its POST is only made ready (not sent, it
    is left to leave()); leaving closes the stream (its
    next read fails, as a reader waiting would wake), then POSTs the exit naming the
    connection, and returns the answer."""
    log: list[object] = []
    with trio.fail_after(10):
        async with (
            connector_for(stream_and_exits(log)) as connector,
            connector.open(SESSION) as stream,
        ):
            assert await anext(stream) == StreamNews(connection_id="conn-7")
            assert isinstance(stream.leave_nowait("conn-7"), HandedExit)
            assert log == []
            assert await stream.leave("conn-7") is True
            with pytest.raises(RoomUnreachable):
                await anext(stream)
    assert log == [exit_post("conn-7")]


async def test_an_sse_exit_handed_over_goes_with_the_clients_delivery_and_closes_the_stream() -> (
    None
):
    """Sent, the exit made ready goes only with the room client's delivery, which
    settles it with the room's answer; the stream is closed once it is written."""
    log: list[object] = []
    settled: list[HandedExit] = []
    with trio.fail_after(10):
        async with (
            connector_for(stream_and_exits(log)) as connector,
            connector.open(SESSION) as stream,
        ):
            assert await anext(stream) == StreamNews(connection_id="conn-7")
            handed = stream.leave_nowait("conn-7")
            assert isinstance(handed, HandedExit)
            assert handed.send(settled.append)
            assert (log, settled) == ([], [])
            await connector._client.deliver_exits()
            assert settled == [handed]
            assert (handed.recorded, handed.failure) == (True, None)
            with pytest.raises(RoomUnreachable):
                await anext(stream)
    assert log == [exit_post("conn-7")]


async def test_a_stream_closed_by_another_task_ends_its_waiting_reader(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The goodbye's task closes the stream while the holder's reader waits for bytes:
    the reader wakes at once, and closing again (the block's own close) is harmless."""
    log: list[object] = []
    with trio.fail_after(10):
        async with (
            connector_for(stream_and_exits(log)) as connector,
            connector.open(SESSION) as stream,
        ):
            assert await anext(stream) == StreamNews(connection_id="conn-7")
            async with trio.open_nursery() as nursery:

                async def read_on() -> None:
                    with pytest.raises(RoomUnreachable):
                        await anext(stream)
                    log.append("reader ended")

                nursery.start_soon(read_on)
                await trio.testing.wait_all_tasks_blocked()
                started = trio.current_time()
                await stream.aclose()
            assert trio.current_time() == started
            await stream.aclose()
    assert log == ["reader ended"]


def test_max_event_bytes_below_1024_is_refused_naming_it() -> None:
    client = RoomClient(API_URL)
    for value in (0, 1, 1023, -1):
        with pytest.raises(ValueError, match=r"^max_event_bytes must be at least 1024, got "):
            SSEConnector(client, max_event_bytes=value)
    assert repr(SSEConnector(client, max_event_bytes=1024)) == (
        "<SSEConnector api_url='http://room.test'>"
    )


class _HeldResponse:
    """An open event stream whose closing is recorded: the ``Response`` a stream holds."""

    status = 200
    heard_at = None

    def __init__(self, closed: list[str]) -> None:
        self._closed = closed

    def header(self, name: str) -> str | None:
        return {"content-type": "text/event-stream"}.get(name.lower())

    async def next_chunk(self, *, keep: int = 0) -> bytes:
        await trio.sleep_forever()
        raise AssertionError  # pragma: no cover

    def detach(self) -> trio.abc.Stream:  # pragma: no cover - not an upgrade
        raise RuntimeError

    def close_nowait(self) -> bool:
        self._closed.append("closed")
        return True

    async def aclose(self) -> None:
        self._closed.append("closed")
        await trio.lowlevel.checkpoint()


class _ExitWatcher:
    """The room client's side of a stream's leaving: what had happened when the exit went."""

    api_url = API_URL

    def __init__(self) -> None:
        self.log: list[str] = []

    def session_url(self, session: AgentSession, tail: str) -> str:
        return f"{API_URL}/rooms/{session.room_id}/agent-sessions/{session.session_id}{tail}"

    async def start_request(self, method: str, url: str, **_: object) -> _HeldResponse:
        await trio.lowlevel.checkpoint()
        return _HeldResponse(self.log)

    async def announce_exit(
        self, session: AgentSession, connection_id: str | None, *, sent: Any = None
    ) -> bool:
        self.log.append(f"exit {connection_id} asked")
        await trio.sleep(1)  # its connection opening: nothing written yet
        self.log.append("exit written")
        sent()
        await trio.sleep(1)  # the room's answer
        self.log.append("answered")
        return True


async def test_a_stream_closes_once_its_exit_is_written_not_before(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Over SSE the exit is on its way before the stream closes (its holder then unwinds)."""
    watcher = _ExitWatcher()
    connector = SSEConnector(cast("RoomClient", watcher))
    async with connector.open(SESSION) as stream:
        assert await stream.leave("c1") is True
    assert watcher.log[:4] == ["exit c1 asked", "exit written", "closed", "answered"]
