"""Refused WebSocket upgrades over real loopback (issue 30, row 1): answered, then closed.

The room runs in this process (``serve_room``, real hypercorn); every client is
a raw socket, so the test sees exactly what the room answers and whether it
then closes. Before, an upgrade hypercorn refuses itself (no
``Sec-WebSocket-Key``, a version other than 13, HTTP/1.0) got its ``400
Connection: close`` and the socket stayed open until the client left: the
connection counts as busy, so neither the cap on silent connections nor a
timer ever closed it. And a malformed key (RFC 6455 §4.2.1: the base64 of 16
bytes) was answered 101. The flood of thousands against a real room process
is ``tests/e2e/test_room_floods.py``.
"""

from __future__ import annotations

import base64
import logging
import sys
from typing import TYPE_CHECKING, Any, Final

import pytest
import trio
import trio.testing

from ..room_server.helpers import OWNER_TOKEN, ROOM, registration, session_headers
from ..room_server.paths import process_path
from .room_process import answer_and_close, served_room

if TYPE_CHECKING:
    from letagents_trio.room_server import Room

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX sockets")

# How long the room may take to close a refused upgrade's socket: at once, on loopback.
PROMPTLY: Final = 2.0
GOOD_KEY: Final = base64.b64encode(b"0123456789abcdef").decode()


def upgrade(
    path: str,
    *,
    key: str | None = GOOD_KEY,
    version: str = "13",
    http: str = "1.1",
    headers: dict[str, str] | None = None,
) -> bytes:
    lines = [
        f"GET {path} HTTP/{http}",
        "Host: 127.0.0.1",
        "Upgrade: websocket",
        "Connection: Upgrade",
        f"Sec-WebSocket-Version: {version}",
    ]
    if key is not None:
        lines.append(f"Sec-WebSocket-Key: {key}")
    lines.extend(f"{k}: {v}" for k, v in (headers or {}).items())
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


async def a_session(room: Room) -> dict[str, Any]:
    reply = await room.register(OWNER_TOKEN, ROOM, registration())
    assert reply.status == 201, reply.body
    return dict(reply.body)


@pytest.mark.parametrize(
    ("options", "status"),
    [
        pytest.param({"key": None}, 400, id="no key"),
        pytest.param({"version": "12"}, 400, id="version 12"),
        pytest.param({"http": "1.0"}, 400, id="HTTP/1.0"),
        pytest.param({"key": "not base64 at all!"}, 400, id="key not base64"),
        pytest.param({"key": base64.b64encode(b"abcd").decode()}, 400, id="key of 4 bytes"),
        pytest.param({"key": base64.b64encode(bytes(7500)).decode()}, 400, id="key of 7.5 KB"),
        pytest.param({"key": GOOD_KEY[:-2]}, 400, id="key unpadded"),
        pytest.param({}, 403, id="no credentials"),
    ],
)
async def test_a_refused_upgrade_is_answered_and_its_socket_closed(
    options: dict[str, Any], status: int
) -> None:
    with trio.fail_after(20):
        async with served_room() as (room, port):
            session = await a_session(room)
            request = upgrade(process_path(session), **options)
            line, closed = await answer_and_close(port, request, PROMPTLY)
            assert line.startswith(f"HTTP/1.1 {status} "), line
            assert closed, f"{line!r}: the socket is still open after {PROMPTLY} s"
            assert room.statistics().open_process_streams == 0


async def test_a_malformed_key_is_400_even_with_valid_credentials() -> None:
    """RFC 6455 §4.2.1: the key is the base64 of a 16-byte nonce; anything else
    is a bad handshake, answered 400, never 101, and no stream is opened."""
    with trio.fail_after(20):
        async with served_room() as (room, port):
            session = await a_session(room)
            for key in ("x" * 24, base64.b64encode(bytes(17)).decode(), "", GOOD_KEY + "A"):
                request = upgrade(process_path(session), key=key, headers=session_headers(session))
                line, closed = await answer_and_close(port, request, PROMPTLY)
                assert line.startswith("HTTP/1.1 400 "), (key, line)
                assert closed
            row = room.session(session["session_id"])
            assert row is not None
            assert row.process_connection_id is None


async def test_two_keys_are_400() -> None:
    with trio.fail_after(20):
        async with served_room() as (room, port):
            session = await a_session(room)
            request = upgrade(
                process_path(session),
                headers={**session_headers(session), "Sec-WebSocket-Key": GOOD_KEY},
            )
            line, closed = await answer_and_close(port, request, PROMPTLY)
            assert line.startswith("HTTP/1.1 400 "), line
            assert closed


async def test_a_frame_sent_before_the_answer_is_400_and_leaves_no_stream_held(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A client must not send before the 101 (RFC 6455 §4.1); hypercorn answers
    400 to such bytes. The room may have opened the session's stream by then:
    it is let go as a drop, never held for a connection that is gone, and the
    race logs no error."""
    with trio.fail_after(20):
        async with served_room() as (room, port):
            session = await a_session(room)
            request = upgrade(process_path(session), headers=session_headers(session))
            frame = b"\x81\x80abcd"  # an empty, masked text frame
            line, closed = await answer_and_close(port, request + frame, PROMPTLY)
            assert line.startswith("HTTP/1.1 400 "), line
            assert closed
            await trio.testing.wait_all_tasks_blocked(0.05)
            assert room.statistics().open_process_streams == 0
            row = room.session(session["session_id"])
            assert row is not None
            assert row.process_connection_id is None or row.process_disconnected_at is not None
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


async def test_a_valid_upgrade_is_still_accepted() -> None:
    with trio.fail_after(20):
        async with served_room() as (room, port):
            session = await a_session(room)
            stream = await trio.open_tcp_stream("127.0.0.1", port)
            async with stream:
                await stream.send_all(
                    upgrade(process_path(session), headers=session_headers(session))
                )
                data = b""
                while b'"event":"open"' not in data:
                    chunk = await stream.receive_some(65536)
                    assert chunk, data
                    data += chunk
                assert data.startswith(b"HTTP/1.1 101 ")
                assert room.statistics().open_process_streams == 1
