"""Oversized chunked bodies against a real room on hypercorn (issue 13, row 14).

A body over the limit (1 MiB) answers 413. Answered while the client still
wrote, hypercorn logged ``BusyResourceError`` in 2 of 10 runs; the room now
reads and drops the rest first, up to four times the limit. These run the
room as ``letagents-trio room`` and send raw chunked bodies from this
process (127.0.0.1), checking the answer and what the room logged.
"""

from __future__ import annotations

import contextlib
import re
import sys
from collections.abc import Iterator
from typing import Final

import pytest
import trio

from letagents_trio.room_server._body import DRAIN_FACTOR
from letagents_trio.room_server._config import MAX_BODY_BYTES

from ..room_server.helpers import OWNER_TOKEN
from .room_process import errors_in, running_room

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX")

CHUNK: Final = b" " * (64 * 1024)
HEAD: Final = (
    "POST /rooms/bodies/agent-sessions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    f"Authorization: Bearer {OWNER_TOKEN}\r\nContent-Type: application/json\r\n"
    "Transfer-Encoding: chunked\r\n\r\n"
).encode()
RUNS: Final = 10


@contextlib.contextmanager
def peer_gone() -> Iterator[None]:
    """The room closed the connection: a write or read fails, as after a reset."""
    with contextlib.suppress(trio.BrokenResourceError):
        yield


async def read_answer(stream: trio.SocketStream, buffer: bytes = b"") -> tuple[bytes, bytes]:
    """One whole answer (head and ``Content-Length`` body) from ``stream``.

    Returns:
        Its head (empty if the connection ended first) and what was read past it.
    """
    with peer_gone():
        while b"\r\n\r\n" not in buffer and (chunk := await stream.receive_some()):
            buffer += chunk
    if b"\r\n\r\n" not in buffer:
        return b"", b""
    head, rest = buffer.split(b"\r\n\r\n", 1)
    length = int(re.search(rb"(?i)content-length: *(\d+)", head)[1])  # type: ignore[index]
    while len(rest) < length:
        chunk = await stream.receive_some()
        assert chunk, head
        rest += chunk
    return head, rest[length:]


async def post_chunked(stream: trio.SocketStream, size: int) -> tuple[bytes, bool]:
    """POST ``size`` bytes of chunked body on ``stream`` while reading the answer.

    Returns:
        The answer's head (empty if the room's close came as a reset first),
        and whether the whole body was sent. Ends once the body is sent or the
        room closed the connection: a room that answered mid-body and neither
        read nor closed would hang here (bounded by the caller).
    """
    sent_all = False

    async def send_body() -> None:
        nonlocal sent_all
        with peer_gone():
            await stream.send_all(HEAD)
            for _ in range(size // len(CHUNK)):
                await stream.send_all(b"%x\r\n%s\r\n" % (len(CHUNK), CHUNK))
            await stream.send_all(b"0\r\n\r\n")
            sent_all = True

    async with trio.open_nursery() as nursery:
        nursery.start_soon(send_body)
        head, _ = await read_answer(stream)
    return head, sent_all


async def until_closed(stream: trio.SocketStream) -> None:
    """Read to the end: returns once the room closed the connection (EOF or reset)."""
    with peer_gone():
        while await stream.receive_some():
            pass


async def test_a_2_mib_chunked_body_is_413_ten_times_with_nothing_logged() -> None:
    """Each body is read to its end before the 413: the connection then serves
    the next request, which it could not with the body's rest unread."""
    heads: list[bytes] = []
    with trio.fail_after(120):
        async with running_room() as room:
            for _ in range(RUNS):
                async with await trio.open_tcp_stream("127.0.0.1", room.port) as stream:
                    head, sent_all = await post_chunked(stream, 2 * MAX_BODY_BYTES)
                    assert sent_all
                    heads.append(head)
                    await stream.send_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
                    health, _ = await read_answer(stream)
                    assert health.startswith(b"HTTP/1.1 200 "), health
            assert errors_in(await room.stop()) == []
    assert all(head.startswith(b"HTTP/1.1 413 ") for head in heads), heads


async def test_a_body_past_the_drain_limit_is_answered_and_closed_cleanly() -> None:
    """Past four times the limit the room stops reading: 413 (or, if the
    client's unread bytes made the close a reset, no answer), and the room
    closes the connection; never an error in the room's log."""
    heads: list[bytes] = []
    with trio.fail_after(120):
        async with running_room() as room:
            for _ in range(3):
                async with await trio.open_tcp_stream("127.0.0.1", room.port) as stream:
                    head, _ = await post_chunked(stream, 2 * DRAIN_FACTOR * MAX_BODY_BYTES)
                    heads.append(head)
                    await until_closed(stream)  # a room that kept it open fails the deadline
            assert errors_in(await room.stop()) == []
    assert all(head == b"" or head.startswith(b"HTTP/1.1 413 ") for head in heads), heads
