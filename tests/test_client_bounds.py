"""Hostile answers to ordinary calls (issue 13, rows 2 and 13): every call is bounded.

A room that accepts a call and never answers, declares or streams a huge body,
answers in a content coding it was not asked for (a gzip bomb), or nests its
JSON beyond the parser's depth costs a bounded time and memory, and the call
fails as :class:`RoomUnreachable`. The rooms are small ASGI apps served by the
in-memory streaming transport, on ``MockClock`` for exact times.
"""

from __future__ import annotations

import gzip
import math
from collections.abc import AsyncIterator, MutableMapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing

from letagents_trio import RoomUnreachable
from letagents_trio._client import RoomClient
from letagents_trio._exit_posts import MAX_EXIT_ANSWER_BYTES
from letagents_trio._protocol import CALL_TIMEOUT, MAX_ANSWER_BYTES
from letagents_trio._session import AgentSession
from letagents_trio.testing._transport import BODY_BUFFER_CHUNKS, open_streaming_transport

if TYPE_CHECKING:
    from letagents_trio.testing._asgi import Receive, Send

API = "http://room.test"
JSON_HEADERS = [(b"content-type", b"application/json")]
CHUNK = b" " * (64 * 1024)
SESSION = AgentSession(session_id="s-1", session_token="t-1", room_id="r")

App = Any


@asynccontextmanager
async def client_for(app: App, **options: Any) -> AsyncIterator[RoomClient]:
    async with (
        open_streaming_transport(app) as transport,
        RoomClient(API, transport=transport, opener=transport, **options) as client,
    ):
        yield client


def answering_after(delay: float, body: bytes = b'{"ok":true}') -> App:
    async def app(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        await trio.sleep(delay)
        await send({"type": "http.response.start", "status": 200, "headers": JSON_HEADERS})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    return app


def streaming(headers: list[tuple[bytes, bytes]], sent: list[int]) -> App:
    """Answer 200 with ``headers``, then send CHUNK forever, noting each in ``sent``."""

    async def app(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        while True:
            await send({"type": "http.response.body", "body": CHUNK, "more_body": True})
            sent.append(len(CHUNK))

    return app


# --- row 13: a deadline for every call ------------------------------------------------


async def test_a_call_that_gets_no_answer_fails_at_its_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Before: still waiting at 30 s (no read timeout). After: refused at 30 s exactly."""
    with trio.fail_after(10 * CALL_TIMEOUT):
        async with client_for(answering_after(math.inf)) as client:
            with pytest.raises(RoomUnreachable, match=r"GET /agents/me: no answer within 30 s"):
                await client.call("GET", "/agents/me")
            assert trio.current_time() == CALL_TIMEOUT


async def test_the_deadline_covers_the_body_too(autojump_clock: trio.testing.MockClock) -> None:
    """Headers at once, then a body that never ends: the same deadline ends it."""

    async def app(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": JSON_HEADERS})
        await send({"type": "http.response.body", "body": b"{", "more_body": True})
        await trio.sleep_forever()

    with trio.fail_after(10 * CALL_TIMEOUT):
        async with client_for(app, call_timeout=2.5) as client:
            with pytest.raises(RoomUnreachable, match=r"no answer within 2\.5 s"):
                await client.call("GET", "/agents/me")
            assert trio.current_time() == 2.5


async def test_a_long_poll_opts_out_and_keeps_its_own_deadline(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """``bounded=False``: the caller's own scope bounds the call, not the client's."""
    with trio.fail_after(1000):
        async with client_for(answering_after(100.0), call_timeout=5) as client:
            assert await client.call("GET", "/x", bounded=False) == {"ok": True}
            assert trio.current_time() == 100.0
            with pytest.raises(RoomUnreachable, match=r"no answer within 5 s"):
                await client.call("GET", "/x")
            assert trio.current_time() == 105.0


def test_bounds_must_be_positive() -> None:
    with pytest.raises(ValueError, match="call_timeout"):
        RoomClient(API, call_timeout=0)
    with pytest.raises(ValueError, match="max_answer_bytes"):
        RoomClient(API, max_answer_bytes=0)


# --- row 2: a cap on every answer body ---------------------------------------------------


async def test_a_declared_huge_body_is_refused_unread(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Before: 2 GiB of Content-Length was read whole (RSS 34 MB -> 1.15 GB on the
    exit answer). After: refused from the header, before a chunk is taken."""
    sent: list[int] = []
    headers = [*JSON_HEADERS, (b"content-length", str(2 * 1024**3).encode())]
    with trio.fail_after(10):
        async with client_for(streaming(headers, sent)) as client:
            with pytest.raises(RoomUnreachable, match=f"larger than {MAX_ANSWER_BYTES} bytes"):
                await client.call("GET", "/agents/me")
    assert sum(sent) <= (BODY_BUFFER_CHUNKS + 2) * len(CHUNK)


async def test_an_endless_body_is_refused_at_the_cap(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """No Content-Length, a body that never ends: refused once past the cap."""
    cap = 1024 * 1024
    sent: list[int] = []
    with trio.fail_after(10):
        async with client_for(streaming(JSON_HEADERS, sent), max_answer_bytes=cap) as client:
            with pytest.raises(RoomUnreachable, match=f"larger than {cap} bytes"):
                await client.call("GET", "/agents/me")
    assert cap < sum(sent) <= cap + (BODY_BUFFER_CHUNKS + 2) * len(CHUNK)


async def test_an_endless_exit_answer_is_refused_at_the_exit_cap(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The exit answer is ``{"recorded": …}``: the lean path reads a few KiB at most."""
    sent: list[int] = []
    with trio.fail_after(10):
        async with client_for(streaming(JSON_HEADERS, sent)) as client:
            with pytest.raises(RoomUnreachable, match="BodyTooLarge"):
                await client.announce_exit(SESSION, "c-1")
    assert (
        MAX_EXIT_ANSWER_BYTES
        <= sum(sent)
        <= MAX_EXIT_ANSWER_BYTES + (BODY_BUFFER_CHUNKS + 2) * len(CHUNK)
    )


async def test_a_gzip_bomb_is_refused_uninflated(autojump_clock: trio.testing.MockClock) -> None:
    """Before: a 1 MB gzip answer inflated to 3.1 GB (10 s). After: calls ask for
    identity and refuse any content coding, so nothing is inflated."""
    bomb = gzip.compress(b" " * (64 * 1024 * 1024), compresslevel=9)
    seen: list[dict[bytes, bytes]] = []

    async def app(scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        seen.append(dict(scope["headers"]))
        headers = [*JSON_HEADERS, (b"content-encoding", b"gzip")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": bomb, "more_body": False})

    with trio.fail_after(10):
        async with client_for(app) as client:
            with pytest.raises(RoomUnreachable, match="content coding it was not asked for"):
                await client.call("GET", "/agents/me")
    assert seen[0][b"accept-encoding"] == b"identity"


async def test_json_nested_beyond_the_parser_is_invalid_json(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """100,000 nested arrays fit in 200 KB: RecursionError used to escape the call."""
    deep = b"[" * 100_000 + b"]" * 100_000
    with trio.fail_after(10):
        async with client_for(answering_after(0, deep)) as client:
            with pytest.raises(RoomUnreachable, match="invalid JSON"):
                await client.call("GET", "/agents/me")
