"""Serving over real loopback (real clock, bounded by fail_after), the CLI, and restarts.

The loopback tests use the real clock: sockets and subprocesses do not run on
trio's mock clock. Each is bounded by ``trio.fail_after``.
"""

from __future__ import annotations

import os
import signal
import subprocess
from contextlib import aclosing
from functools import partial
from pathlib import Path
from typing import Any

import httpx2
import trio
import trio.testing

from letagents_trio.room_server import (
    MemoryStore,
    Room,
    SQLiteStore,
    TrioClock,
    create_app,
    serve_room,
)
from letagents_trio.testing._transport import open_streaming_transport

from ..room_server.helpers import (
    EPOCH,
    OWNER_TOKEN,
    PERSON_TOKEN,
    ROOM,
    claimed_task,
    open_process,
    owner_headers,
    registered,
    registration,
    say,
    session_headers,
)
from ..room_server.paths import process_path
from .room_process import ROOM_COMMAND


async def test_serve_room_over_loopback_streams_and_stops_gracefully() -> None:
    room = Room(store=MemoryStore(), owner_tokens={OWNER_TOKEN: "owner"})
    server_scope = trio.CancelScope()

    async def run_server(*, task_status: trio.TaskStatus[str]) -> None:
        with server_scope:
            async with trio.open_nursery() as server:
                task_status.started(await server.start(partial(serve_room, room, port=0)))

    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            url = await nursery.start(run_server)
            assert url.startswith("http://127.0.0.1:")
            async with httpx2.AsyncClient(base_url=url, timeout=httpx2.Timeout(5, read=None)) as c:
                session = await registered(c, registration())
                async with c.stream(
                    "GET", process_path(session), headers=session_headers(session)
                ) as response:
                    assert response.headers["content-type"] == "text/event-stream"
                    data = b""
                    async with aclosing(response.aiter_raw()) as chunks:
                        async for chunk in chunks:
                            data += chunk
                            if b"event: open" in data and data.endswith(b"\n\n"):
                                break
                        assert data.startswith(
                            b': connected\n\nevent: open\ndata: {"connection_id":"'
                        )
                        start = trio.current_time()
                        server_scope.cancel(reason="test over")
                        rest = b""
                        try:
                            async for chunk in chunks:
                                rest += chunk
                        except httpx2.HTTPError:
                            pass
                    assert b"event: ended" not in rest  # shutdown closes silently
        assert trio.current_time() - start < 6
    row = room.session(session["session_id"])
    assert row is not None
    assert row.process_disconnected_at is None  # a shutdown records nothing


async def test_cli_serves_and_stops_on_sigterm(tmp_path: Path) -> None:
    db = tmp_path / "room.sqlite3"
    command = [
        *ROOM_COMMAND,
        "--port",
        "0",
        "--db",
        str(db),
        "--owner-token",
        "cli-token=alice",
    ]
    with trio.fail_after(30):
        process = await trio.lowlevel.open_process(
            command, stderr=subprocess.PIPE, env=dict(os.environ, PYTHONUNBUFFERED="1")
        )
        assert process.stderr is not None
        try:
            seen = b""
            while b"letagents room on " not in seen or not seen.endswith(b"\n"):
                chunk = await process.stderr.receive_some()
                assert chunk, seen
                seen += chunk
            url = seen.split(b"letagents room on ", 1)[1].split(b"\n", 1)[0].decode()
            async with httpx2.AsyncClient(base_url=url) as c:
                r = await c.get("/agents/me", headers=owner_headers("cli-token"))
                assert r.json()["account"]["login"] == "alice"
            process.send_signal(signal.SIGTERM)
            assert await process.wait() == 0
        finally:
            if process.returncode is None:
                process.kill()
                with trio.move_on_after(5, shield=True):
                    await process.wait()
            await process.stderr.aclose()
    assert db.exists()


async def test_cli_takes_owner_tokens_from_a_private_file_not_the_command_line(
    tmp_path: Path,
) -> None:
    """Issue 13 row 7: before, the token could only be given on the command line,
    where any local user reads it from /proc/PID/cmdline."""
    tokens = tmp_path / "owner-tokens"
    tokens.write_text("# owners\nfile-token-0123=alice\n")
    tokens.chmod(0o600)
    command = [
        *ROOM_COMMAND,
        "--port",
        "0",
        "--memory",
        "--owner-tokens-file",
        str(tokens),
    ]
    with trio.fail_after(30):
        process = await trio.lowlevel.open_process(
            command, stderr=subprocess.PIPE, env=dict(os.environ, PYTHONUNBUFFERED="1")
        )
        assert process.stderr is not None
        try:
            seen = b""
            while b"letagents room on " not in seen or not seen.endswith(b"\n"):
                chunk = await process.stderr.receive_some()
                assert chunk, seen
                seen += chunk
            url = seen.split(b"letagents room on ", 1)[1].split(b"\n", 1)[0].decode()
            async with httpx2.AsyncClient(base_url=url) as c:
                r = await c.get("/agents/me", headers=owner_headers("file-token-0123"))
                assert r.json()["account"]["login"] == "alice"
            cmdline = trio.Path(f"/proc/{process.pid}/cmdline")
            if await cmdline.exists():
                assert b"file-token-0123" not in await cmdline.read_bytes()
            assert b"file-token-0123" not in seen
            process.send_signal(signal.SIGTERM)
            assert await process.wait() == 0
        finally:
            if process.returncode is None:
                process.kill()
                with trio.move_on_after(5, shield=True):
                    await process.wait()
            await process.stderr.aclose()


async def test_sqlite_restart_keeps_rooms_sessions_messages_and_leases(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    path = tmp_path / "room.db"

    def open_room() -> Room:
        return Room(
            store=SQLiteStore(path),
            clock=TrioClock(EPOCH),
            owner_tokens={OWNER_TOKEN: "owner"},
            person_tokens={PERSON_TOKEN: "owner"},  # the room's admin accepts the task
        )

    first = open_room()
    async with (
        open_streaming_transport(create_app(first)) as transport,
        httpx2.AsyncClient(transport=transport, base_url="http://room.test") as client,
    ):
        session = await registered(client, registration(name="Keeper"))
        await say(client, session, "before restart")
        task, _ = await claimed_task(client, session)
        async with open_process(client, session) as reader:
            assert await reader.next() == ": connected"
            first.close_all_process_streams()  # the restart: a silent close
            assert (await reader.next() or "").startswith("event: open")
            assert await reader.next() is None
    first.store.close()

    await trio.sleep(3)
    second = open_room()
    try:
        async with (
            open_streaming_transport(create_app(second)) as transport,
            httpx2.AsyncClient(transport=transport, base_url="http://room.test") as client,
        ):
            stored: Any = second.session(session["session_id"])
            assert stored.display_name == "Keeper"
            assert stored.process_disconnected_at is None
            r = await client.get(f"/rooms/{ROOM}/messages", headers=session_headers(session))
            assert [m["text"] for m in r.json()["messages"]] == ["before restart"]
            assert second.active_work_task_ids(session["session_id"]) == [task]
            # The holder reconnects with the same credentials.
            async with open_process(client, session) as reader:
                assert await reader.next() == ": connected"
                row: Any = second.session(session["session_id"])
                assert row.process_seen_at == EPOCH + 3_000
            again = await registered(client, registration(name="Other"))
            assert again["display_name"] == "Other"
    finally:
        second.store.close()
