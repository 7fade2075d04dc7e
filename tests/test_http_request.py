"""The lean HTTP/1.1 request (``letagents_trio._http._request``): URLs, the opener seam, upgrades.

Servers here are small tasks on in-memory streams, written byte for byte, so
each test controls exactly what the client sees. Over real sockets (TLS) see
tests/e2e/test_lean_http.py; the socket helpers are in test_http_sockio.py.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator

import h11
import pytest
import trio
import trio.testing
from hypothesis import given, settings
from hypothesis import strategies as st

from letagents_trio import AgentSession, RoomClient, RoomUnreachable
from letagents_trio._http import HTTPFailure, Origin, split_url
from letagents_trio._http._request import (
    USER_AGENT,
    failure_kind,
    request_bytes,
    start_request,
)

from .sockets import OnlyAsyncClose

SESSION = AgentSession(session_id="wsess_1", session_token="secret-token-1", room_id="room_a")
API = "http://room.test"

Serve = Callable[[trio.abc.Stream], Awaitable[None]]


class ScriptedOpener:
    """Opens in-memory streams whose far end a test serves with ``serve``."""

    def __init__(self, nursery: trio.Nursery, serve: Serve) -> None:
        self._nursery = nursery
        self._serve = serve
        self.origins: list[Origin] = []

    async def open_stream(self, origin: Origin) -> trio.abc.Stream:
        self.origins.append(origin)
        client_end, server_end = trio.testing.memory_stream_pair()
        self._nursery.start_soon(self._serve, server_end)
        await trio.lowlevel.checkpoint()
        return client_end


async def read_head(stream: trio.abc.Stream) -> bytes:
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = await stream.receive_some()
        if not chunk:
            break
        data += chunk
    return data


async def serve_two_chunks(stream: trio.abc.Stream) -> None:
    """Answer a chunked body of two chunks, ``first`` then ``second``, read apart."""
    await read_head(stream)
    await stream.send_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    await stream.send_all(b"5\r\nfirst\r\n")
    await trio.testing.wait_all_tasks_blocked()
    await stream.send_all(b"6\r\nsecond\r\n0\r\n\r\n")


# --- URLs and origins ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "origin", "target"),
    [
        ("http://room.test", Origin("http", "room.test", 80), "/"),
        ("https://Room.Test/a/b?x=1", Origin("https", "room.test", 443), "/a/b?x=1"),
        ("http://127.0.0.1:8080/rooms/a%2Fb", Origin("http", "127.0.0.1", 8080), "/rooms/a%2Fb"),
        ("http://[::1]:9/p", Origin("http", "::1", 9), "/p"),
    ],
)
def test_split_url(url: str, origin: Origin, target: str) -> None:
    assert split_url(url) == (origin, target)


@pytest.mark.parametrize("url", ["ftp://x/", "/rooms/a", "http:///nohost"])
def test_split_url_refuses_what_is_not_an_absolute_http_url(url: str) -> None:
    with pytest.raises(ValueError, match=r"^not an absolute http or https URL$"):
        split_url(url)


def test_authority_omits_default_ports_and_brackets_ipv6() -> None:
    assert Origin("http", "a", 80).authority == "a"
    assert Origin("https", "a", 443).authority == "a"
    assert Origin("http", "a", 443).authority == "a:443"
    assert Origin("http", "::1", 8080).authority == "[::1]:8080"


def test_a_request_is_written_in_origin_form_with_host_agent_and_length() -> None:
    data = request_bytes(Origin("http", "room.test", 8080), "/p?x=1", "POST", [("X-A", "1")], b"{}")
    assert data == (
        b"POST /p?x=1 HTTP/1.1\r\nHost: room.test:8080\r\n"
        + f"User-Agent: {USER_AGENT}\r\n".encode()
        + b"X-A: 1\r\nContent-Length: 2\r\n\r\n{}"
    )


def h11_request_bytes(
    origin: Origin, target: str, method: str, headers: list[tuple[str, str]], body: bytes | None
) -> bytes:
    """What h11 writes for the same request: the bytes request_bytes must match."""
    conn = h11.Connection(h11.CLIENT)
    fields = [("Host", origin.authority), ("User-Agent", USER_AGENT), *headers]
    if body is not None:
        fields.append(("Content-Length", str(len(body))))
    data = conn.send(h11.Request(method=method, target=target, headers=fields)) or b""
    if body:
        data += conn.send(h11.Data(data=body)) or b""
    return data + (conn.send(h11.EndOfMessage()) or b"")


# Text with what a field must not hold: control characters, edge white space, non-ASCII.
_TRICKY = st.text(
    alphabet=st.sampled_from([*"aZ09-_.:/ \t\r\n\x00\x7f\x0b\x0cé!~\u2028"]), max_size=12
)


@settings(max_examples=400, deadline=None)
@given(
    method=st.one_of(st.just("POST"), _TRICKY),
    target=st.one_of(st.just("/rooms/r/process/exit"), _TRICKY),
    headers=st.lists(st.tuples(_TRICKY, _TRICKY), max_size=3),
    body=st.one_of(st.none(), st.binary(max_size=8)),
)
def test_a_request_is_written_as_h11_writes_it_and_refused_where_h11_refuses_it(
    method: str, target: str, headers: list[tuple[str, str]], body: bytes | None
) -> None:
    """request_bytes makes h11's bytes without h11, and makes none where h11 would refuse."""
    headers = [
        (n, v)
        for n, v in headers
        if n.lower() not in ("host", "content-length", "transfer-encoding")
    ]
    origin = Origin("http", "room.test", 3001)
    try:
        expected = h11_request_bytes(origin, target, method, headers, body)
    except (h11.LocalProtocolError, UnicodeEncodeError):
        with pytest.raises(h11.LocalProtocolError):
            request_bytes(origin, target, method, headers, body)
        return
    assert request_bytes(origin, target, method, headers, body) == expected


@pytest.mark.parametrize("name", ["Host", "content-length", "Transfer-Encoding"])
def test_the_fields_that_frame_a_request_are_its_own(name: str) -> None:
    with pytest.raises(h11.LocalProtocolError, match=r"^a framing field among the headers$"):
        request_bytes(Origin("http", "room.test", 80), "/", "POST", [(name, "1")], b"{}")


# --- the seam: requests, upgrades, closing ---------------------------------------------


async def test_a_101_detaches_the_raw_stream_with_bytes_read_ahead() -> None:
    seen: list[bytes] = []

    async def serve(stream: trio.abc.Stream) -> None:
        seen.append(await read_head(stream))
        await stream.send_all(
            b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
            b"Connection: Upgrade\r\n\r\nEARLY"
        )
        await stream.send_all(b"echo:" + await stream.receive_some())

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            opener = ScriptedOpener(nursery, serve)
            async with RoomClient(API, owner_token="owner-1", opener=opener) as client:
                response = await client.start_request(
                    "GET",
                    client.session_url(SESSION, "/process"),
                    session=SESSION,
                    headers={"Upgrade": "websocket", "Connection": "Upgrade"},
                )
                try:
                    assert response.status == 101
                    assert response.header("UPGRADE") == "websocket"
                    raw = response.detach()
                    assert await response.next_chunk() == b""  # the body is over: raw bytes now
                    assert await raw.receive_some() == b"EARLY"
                    await raw.send_all(b"hi")
                    assert await raw.receive_some() == b"echo:hi"
                finally:
                    await response.aclose()
    assert opener.origins == [Origin("http", "room.test", 80)]
    head = seen[0].decode().lower()
    assert head.startswith("get /rooms/room_a/agent-sessions/wsess_1/process http/1.1\r\n")
    # The one header builder: credentials go out on the lean path too.
    assert "authorization: bearer owner-1" in head
    assert "x-letagents-agent-session-token: secret-token-1" in head


UPGRADE = [("Upgrade", "websocket"), ("Connection", "Upgrade")]


@pytest.fixture
def without_h11(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """No h11 connection may be made while the test runs."""

    def no_h11(*args: object, **kwargs: object) -> h11.Connection:
        raise AssertionError("h11 was used")

    monkeypatch.setattr(h11, "Connection", no_h11)
    yield
    monkeypatch.undo()


@pytest.mark.usefixtures("without_h11")
async def test_a_plain_101_is_read_without_h11_its_request_written_as_h11_writes_it() -> None:
    """Thousands of sockets upgrade at once: neither the request nor a plain 101 needs h11."""
    seen: list[bytes] = []

    async def serve(stream: trio.abc.Stream) -> None:
        seen.append(await read_head(stream))
        # The head in pieces, the new protocol's first bytes right behind it.
        await stream.send_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: web")
        await trio.testing.wait_all_tasks_blocked()
        await stream.send_all(b"socket\r\nConnection: Upgrade\r\n\r\nEARLY")

    origin = Origin("http", "room.test", 80)
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            opener = ScriptedOpener(nursery, serve)
            response = await start_request(opener, origin, "/p", "GET", UPGRADE)
            try:
                assert response.status == 101
                assert response.headers == [(b"upgrade", b"websocket"), (b"connection", b"Upgrade")]
                assert await response.next_chunk() == b""  # a 101 has no body
                raw = response.detach()
                assert await response.next_chunk() == b""
                assert await raw.receive_some() == b"EARLY"
            finally:
                await response.aclose()
    assert seen == [request_bytes(origin, "/p", "GET", UPGRADE)]


@pytest.mark.parametrize(
    ("answer", "status", "body", "after"),
    [
        (b"HTTP/1.1 404 Not Found\r\nContent-Length: 4\r\n\r\nnone", 404, b"none", None),
        (b"HTTP/1.1 410 Gone\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 410, b"", None),
        (
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 101 Switching Protocols\r\n"
            b"Upgrade: websocket\r\n\r\nEARLY",
            101,
            None,
            b"EARLY",
        ),
        (b"HTTP/1.1 101 Switching Protocols\nUpgrade: websocket\n\nEARLY", 101, None, b"EARLY"),
    ],
    ids=["refused", "ended-chunked", "informational-first", "bare-line-feeds"],
)
async def test_an_upgrade_answered_otherwise_is_read_by_h11(
    answer: bytes, status: int, body: bytes | None, after: bytes | None
) -> None:
    async def serve(stream: trio.abc.Stream) -> None:
        await read_head(stream)
        await stream.send_all(answer)

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            opener = ScriptedOpener(nursery, serve)
            origin = Origin("http", "room.test", 80)
            response = await start_request(opener, origin, "/p", "GET", UPGRADE)
            try:
                assert response.status == status
                if body is not None:
                    assert await response.read(100) == body
                else:
                    assert await response.detach().receive_some() == after
            finally:
                await response.aclose()


@pytest.mark.parametrize(
    ("answer", "failure"),
    [
        (b"", "RemoteProtocolError"),
        (b"HTTP/1.1 101 Switching Protocols\r\nX-Long: " + b"a" * 70_000, "RemoteProtocolError"),
        (b"HTTP/1.1 100 Continue\r\n\r\n" * 9, "TooManyInformational"),
    ],
    ids=["closed-unanswered", "head-too-large", "too-many-informational"],
)
async def test_an_upgrade_answered_wrongly_fails_by_kind(answer: bytes, failure: str) -> None:
    async def serve(stream: trio.abc.Stream) -> None:
        await read_head(stream)
        await stream.send_all(answer)
        await stream.aclose()

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            opener = ScriptedOpener(nursery, serve)
            with pytest.raises(HTTPFailure, match=f"^{failure}$"):
                await start_request(opener, Origin("http", "room.test", 80), "/p", "GET", UPGRADE)


async def test_an_upgrade_h11_would_refuse_is_not_sent_and_quotes_nothing() -> None:
    received: list[bytes] = []

    async def serve(stream: trio.abc.Stream) -> None:
        while chunk := await stream.receive_some():
            received.append(bytes(chunk))

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            opener = ScriptedOpener(nursery, serve)
            headers = [*UPGRADE, ("X-Token", "secret\r\nX-Evil: 1")]
            with pytest.raises(HTTPFailure, match=r"^LocalProtocolError$") as caught:
                await start_request(opener, Origin("http", "room.test", 80), "/p", "GET", headers)
    assert received == []  # closed with nothing sent
    assert "secret" not in repr(caught.value.__cause__)


STREAM = [("Accept", "text/event-stream"), ("Authorization", "Bearer secret-token-1")]


@pytest.mark.usefixtures("without_h11")
async def test_a_streams_plain_answer_and_its_get_go_without_h11() -> None:
    """Thousands of streams open at once: neither the GET nor its chunked answer needs h11."""
    seen: list[bytes] = []

    async def serve(stream: trio.abc.Stream) -> None:
        seen.append(await read_head(stream))
        # The head in pieces, the first chunk right behind it, the next one cut.
        await stream.send_all(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nTransfer-")
        await trio.testing.wait_all_tasks_blocked()
        await stream.send_all(b"Encoding: chunked\r\n\r\n5\r\nopen!\r\n8\r\nheart")
        await trio.testing.wait_all_tasks_blocked()
        await stream.send_all(b"bit\r\n0\r\n\r\n")

    origin = Origin("http", "room.test", 80)
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            opener = ScriptedOpener(nursery, serve)
            response = await start_request(opener, origin, "/p", "GET", STREAM)
            try:
                assert response.status == 200
                assert response.header("Transfer-Encoding") == "chunked"
                # What came with the head, in one piece; then the rest of the cut chunk.
                assert await response.next_chunk() == b"open!heart"
                assert await response.next_chunk() == b"bit"
                assert await response.next_chunk() == b""
                with pytest.raises(RuntimeError, match="did not switch"):
                    response.detach()
            finally:
                await response.aclose()
    assert seen == [request_bytes(origin, "/p", "GET", STREAM)]


@pytest.mark.parametrize(
    ("method", "answer", "status", "body"),
    [
        ("GET", b"HTTP/1.1 200 OK\r\n\r\nuntil the end", 200, b"until the end"),
        ("GET", b"HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n2\r\nok\r\n0\r\n\r\n", 200, b"ok"),
        (
            "GET",
            b"HTTP/1.1 103 Early Hints\r\n\r\nHTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok",
            200,
            b"ok",
        ),
        ("HEAD", b"HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n", 200, b""),
    ],
    ids=["ends-with-the-connection", "bare-line-feeds", "informational-first", "head"],
)
async def test_a_streams_answer_that_is_not_plain_is_read_by_h11(
    monkeypatch: pytest.MonkeyPatch, method: str, answer: bytes, status: int, body: bytes
) -> None:
    made: list[h11.Connection] = []
    real = h11.Connection

    def counted(*args: object, **kwargs: object) -> h11.Connection:
        made.append(real(*args, **kwargs))  # type: ignore[arg-type]
        return made[-1]

    async def serve(stream: trio.abc.Stream) -> None:
        await read_head(stream)
        await stream.send_all(answer)
        await stream.aclose()

    monkeypatch.setattr(h11, "Connection", counted)
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            opener = ScriptedOpener(nursery, serve)
            origin = Origin("http", "room.test", 80)
            response = await start_request(opener, origin, "/p", method, STREAM)
            try:
                assert response.status == status
                assert await response.read(100) == body
            finally:
                await response.aclose()
    assert len(made) == 1


async def serve_a_head_h11_reads_then_chunks(stream: trio.abc.Stream) -> None:
    """A head that is not plain (bare line feeds) after a 103 read apart; then chunks."""
    await read_head(stream)
    await stream.send_all(b"HTTP/1.1 103 Early Hints\r\n\r\n")
    await trio.testing.wait_all_tasks_blocked()
    await stream.send_all(b"HTTP/1.1 200 OK\nX-Big: " + b"b" * 20_000 + b"\n")
    await stream.send_all(b"Transfer-Encoding: chunked\n\n3\r\none\r\n")
    await trio.testing.wait_all_tasks_blocked()
    await stream.send_all(b"3\r\ntwo\r\n5\r\nthree\r\nzz\r\n")


async def test_an_answer_h11_reads_gives_its_head_and_chunks_as_they_come() -> None:
    """The h11 path: a final head after a 103, larger than h11's default bound, read
    apart; chunks as they come, every chunk already received in one piece, then the
    misframing refused."""
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            opener = ScriptedOpener(nursery, serve_a_head_h11_reads_then_chunks)
            response = await start_request(opener, Origin("http", "room.test", 80), "/", "GET", [])
            try:
                assert response.status == 200
                assert response.headers == [
                    (b"x-big", b"b" * 20_000),
                    (b"transfer-encoding", b"chunked"),
                ]
                assert await response.next_chunk() == b"one"
                assert await response.next_chunk() == b"twothree"
                with pytest.raises(HTTPFailure, match=r"^RemoteProtocolError$"):
                    await response.next_chunk()
            finally:
                await response.aclose()


async def test_a_101_to_a_request_that_asked_for_no_upgrade_is_refused() -> None:
    async def serve(stream: trio.abc.Stream) -> None:
        await read_head(stream)
        await stream.send_all(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n")

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            opener = ScriptedOpener(nursery, serve)
            with pytest.raises(HTTPFailure, match=r"^RemoteProtocolError$"):
                await start_request(opener, Origin("http", "room.test", 80), "/", "GET", STREAM)


async def test_the_response_reads_its_body_chunk_by_chunk_then_says_it_ended() -> None:
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            opener = ScriptedOpener(nursery, serve_two_chunks)
            response = await start_request(opener, Origin("http", "room.test", 80), "/", "GET", [])
            assert repr(response) == "<HTTP1Response status=200>"
            assert await response.next_chunk() == b"first"
            assert await response.next_chunk() == b"second"
            assert await response.next_chunk() == b""
            with trio.testing.assert_checkpoints():
                assert await response.next_chunk() == b""
            await response.aclose()


async def serve_three_chunks_at_once_then_misframe(stream: trio.abc.Stream) -> None:
    """Three chunks in one write (heartbeats kept by the kernel), then a bad chunk size."""
    await read_head(stream)
    await stream.send_all(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    await trio.testing.wait_all_tasks_blocked()
    await stream.send_all(b"3\r\none\r\n3\r\ntwo\r\n5\r\nthree\r\nzz\r\n")


async def test_one_read_gives_every_chunk_already_received_in_one_piece() -> None:
    """One holder wake-up for kept heartbeats, not one per chunk; what follows still fails."""
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            opener = ScriptedOpener(nursery, serve_three_chunks_at_once_then_misframe)
            response = await start_request(opener, Origin("http", "room.test", 80), "/", "GET", [])
            assert await response.next_chunk() == b"onetwothree"
            with pytest.raises(HTTPFailure):
                await response.next_chunk()
            await response.aclose()


async def serve_ten_bytes(stream: trio.abc.Stream) -> None:
    await read_head(stream)
    await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n0123456789")


@pytest.mark.parametrize(
    ("serve", "body"), [(serve_ten_bytes, b"0123456789"), (serve_two_chunks, b"firstsecond")]
)
async def test_read_takes_the_whole_body_within_its_limit(serve: Serve, body: bytes) -> None:
    """The limit bounds the whole body, however many chunks it comes in."""
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            opener = ScriptedOpener(nursery, serve)
            origin = Origin("http", "room.test", 80)
            response = await start_request(opener, origin, "/", "GET", [])
            assert await response.read(len(body)) == body
            response = await start_request(opener, origin, "/", "GET", [])
            with pytest.raises(HTTPFailure, match=r"^BodyTooLarge$"):
                await response.read(len(body) - 1)


async def test_informational_answers_before_the_head_are_skipped() -> None:
    async def serve(stream: trio.abc.Stream) -> None:
        await read_head(stream)
        await stream.send_all(
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\n\r\n"
            b"HTTP/1.1 204 No Content\r\n\r\n"
        )

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            opener = ScriptedOpener(nursery, serve)
            response = await start_request(opener, Origin("http", "room.test", 80), "/", "GET", [])
            assert response.status == 204
            assert await response.next_chunk() == b""


async def test_a_request_with_a_body_sends_it_whole_with_its_length() -> None:
    """A connector's request may carry a body: it goes as ``request_bytes`` writes it."""
    received: list[bytes] = []
    body = b'{"event":"exit"}'

    async def serve(stream: trio.abc.Stream) -> None:
        data = await read_head(stream)
        while not data.endswith(body):
            data += await stream.receive_some()
        received.append(data)
        await stream.send_all(b"HTTP/1.1 204 No Content\r\n\r\n")

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            opener = ScriptedOpener(nursery, serve)
            async with RoomClient(API, opener=opener) as client:
                response = await client.start_request("POST", API + "/p", body=body)
                assert response.status == 204
                await response.aclose()
    assert received == [
        request_bytes(
            Origin("http", "room.test", 80),
            "/p",
            "POST",
            [("Content-Type", "application/json")],
            body,
        )
    ]


async def test_a_head_larger_than_h11s_default_but_within_64_kib_is_read() -> None:
    async def serve(stream: trio.abc.Stream) -> None:
        await read_head(stream)
        # In two parts: h11 bounds a head only while it is still incomplete.
        await stream.send_all(b"HTTP/1.1 200 OK\r\nX-Long: " + b"a" * 40_000)
        await trio.testing.wait_all_tasks_blocked()
        await stream.send_all(b"\r\nContent-Length: 0\r\n\r\n")

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            opener = ScriptedOpener(nursery, serve)
            response = await start_request(opener, Origin("http", "room.test", 80), "/", "GET", [])
            assert response.header("x-long") == "a" * 40_000
            await response.aclose()


async def test_a_server_that_closes_without_answering_fails_the_request_by_kind() -> None:
    async def serve(stream: trio.abc.Stream) -> None:
        await read_head(stream)
        await stream.aclose()

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            opener = ScriptedOpener(nursery, serve)
            with pytest.raises(HTTPFailure, match=r"^RemoteProtocolError$"):
                await start_request(opener, Origin("http", "room.test", 80), "/", "GET", [])


class OpensOnlyAsyncClose:
    def __init__(self, answer: bytes) -> None:
        self.stream = OnlyAsyncClose(answer)

    async def open_stream(self, origin: Origin) -> trio.abc.Stream:
        await trio.lowlevel.checkpoint()
        return self.stream


@pytest.mark.parametrize("answer", [b"NOT HTTP\r\n\r\n", b"HTTP/1.1 204 No Content\r\n\r\n"])
async def test_a_stream_close_now_cannot_close_is_closed_by_aclose(answer: bytes) -> None:
    """Failed on its answer, or closed by its caller: either way the stream is closed."""
    opener = OpensOnlyAsyncClose(answer)
    origin = Origin("http", "room.test", 80)
    with trio.fail_after(5):
        if answer.startswith(b"HTTP"):
            response = await start_request(opener, origin, "/", "GET", [])
            await response.aclose()
        else:
            with pytest.raises(HTTPFailure, match=r"^RemoteProtocolError$"):
                await start_request(opener, origin, "/", "GET", [])
    assert opener.stream.closed


def test_a_failure_is_named_by_its_type_or_for_a_broken_stream_by_its_cause() -> None:
    broken = trio.BrokenResourceError()
    broken.__cause__ = ConnectionResetError()
    assert failure_kind(broken) == "ConnectionResetError"
    assert failure_kind(trio.BrokenResourceError()) == "BrokenResourceError"
    refused = ConnectionRefusedError()
    refused.__cause__ = OSError()
    assert failure_kind(refused) == "ConnectionRefusedError"


async def test_detach_without_a_switch_is_refused() -> None:
    async def serve(stream: trio.abc.Stream) -> None:
        await read_head(stream)
        await stream.send_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            client = RoomClient(API, opener=ScriptedOpener(nursery, serve))
            response = await client.start_request("GET", API + "/x")
            assert response.status == 404
            with pytest.raises(RuntimeError, match="did not switch"):
                response.detach()
            await response.aclose()
            await client.aclose()


@pytest.mark.parametrize(
    ("answer", "kind"),
    [
        (b"", "RemoteProtocolError"),  # closed before answering
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort", "RemoteProtocolError"),
        (b"NOT HTTP AT ALL\r\n\r\n", "RemoteProtocolError"),
    ],
)
async def test_broken_answers_are_room_unreachable_naming_only_the_kind(
    answer: bytes, kind: str
) -> None:
    async def serve(stream: trio.abc.Stream) -> None:
        await read_head(stream)
        if answer:
            await stream.send_all(answer)
        await stream.aclose()

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            client = RoomClient(API, opener=ScriptedOpener(nursery, serve))
            with pytest.raises(RoomUnreachable) as caught:
                await client.announce_exit(SESSION, "pc_1")
    assert str(caught.value).endswith(f"failed: {kind}")
    assert SESSION.session_token not in str(caught.value)
    assert isinstance(caught.value.__cause__, HTTPFailure)


async def test_a_stream_cut_mid_body_is_room_unreachable_on_the_next_read() -> None:
    async def serve(stream: trio.abc.Stream) -> None:
        await read_head(stream)
        await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\nshort")
        await stream.aclose()

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            client = RoomClient(API, opener=ScriptedOpener(nursery, serve))
            response = await client.start_request("GET", client.session_url(SESSION, "/process"))
            assert await response.next_chunk() == b"short"
            with pytest.raises(HTTPFailure, match=r"^RemoteProtocolError$"):
                await response.next_chunk()
            await response.aclose()


async def test_an_opener_that_fails_is_room_unreachable_naming_the_error() -> None:
    class Refusing:
        async def open_stream(self, origin: Origin) -> trio.abc.Stream:
            await trio.lowlevel.checkpoint()
            raise ConnectionRefusedError(111, "refused to secret-token-1")

    client = RoomClient(API, opener=Refusing())
    with pytest.raises(RoomUnreachable) as caught:
        await client.start_request("GET", client.session_url(SESSION, "/process"))
    assert str(caught.value) == (
        "GET /rooms/room_a/agent-sessions/wsess_1/process failed: ConnectionRefusedError"
    )


async def test_a_cancelled_request_closes_its_connection(
    autojump_clock: trio.testing.MockClock,
) -> None:
    closed = trio.Event()

    async def serve(stream: trio.abc.Stream) -> None:
        await read_head(stream)
        # Never answers; sees the client's close.
        while await stream.receive_some():
            pass  # pragma: no cover - the client sends nothing more
        closed.set()

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            client = RoomClient(API, opener=ScriptedOpener(nursery, serve))
            with trio.move_on_after(1) as scope:
                await client.start_request("GET", API + "/x")
            assert scope.cancelled_caught
            await closed.wait()
            assert trio.current_time() == 1


async def test_an_oversized_exit_answer_is_refused() -> None:
    async def serve(stream: trio.abc.Stream) -> None:
        await read_head(stream)
        size = 65 * 1024
        await stream.send_all(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
        # Refused unread as its length is declared: the client may close first.
        with contextlib.suppress(trio.BrokenResourceError):
            await stream.send_all(b" " * size)

    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            client = RoomClient(API, opener=ScriptedOpener(nursery, serve))
            with pytest.raises(RoomUnreachable, match="BodyTooLarge"):
                await client.announce_exit(SESSION, "pc_1")
