"""A ``letagents-trio room`` in a subprocess, for the tests that attack it; and one
served in this process (:func:`served_room`), with the raw client that sees what
it answers (:func:`answer_and_close`).

The room gets few file descriptors (:data:`ROOM_FD_LIMIT`), so a flood reaches
its limit quickly, while this process raises its own (:func:`descriptors`).
The room's stderr is read throughout and kept (its end), for a test to check
what the room logged, and so a room logging in a loop never blocks on a full
pipe.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from functools import partial
from pathlib import Path
from typing import Final

import attrs
import pytest
import trio
import trio.lowlevel

from letagents_trio.room_server import MemoryStore, Room, RoomConfig, RoomStore, serve_room

from ..room_server.helpers import OWNER_TOKEN, PERSON_TOKEN

# `letagents-trio room` in a fresh interpreter, whatever is on PATH; its options follow.
ROOM_COMMAND: Final = (
    sys.executable,
    "-c",
    "import sys; from letagents_trio.room_server._cli import main; sys.exit(main(sys.argv[1:]))",
)

# The room's descriptor limit, the common default: a flood of a few thousand reaches it.
ROOM_FD_LIMIT: Final = 1024


@contextmanager
def descriptors(wanted: int) -> Iterator[None]:
    """Raise this process's soft RLIMIT_NOFILE to ``wanted`` (or the hard limit) meanwhile."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < wanted:
        pytest.skip(f"needs {wanted} descriptors, the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, wanted), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _limit_room(limit: int) -> None:  # runs in the child, before exec
    resource.setrlimit(resource.RLIMIT_NOFILE, (limit, limit))


# The room's log kept for a test to read: its end, should it log in a loop.
MAX_LOG_KEPT: Final = 1024 * 1024


@attrs.define
class RunningRoom:
    """A ``letagents-trio room`` subprocess: its URL, and what it wrote to stderr."""

    url: str
    process: trio.Process
    log: bytearray = attrs.field(factory=bytearray)
    log_closed: trio.Event = attrs.field(factory=trio.Event)

    @property
    def port(self) -> int:
        return int(self.url.rsplit(":", 1)[1])

    async def keep_log(self, stream: trio.abc.ReceiveStream) -> None:
        async for chunk in stream:
            self.log += chunk
            del self.log[:-MAX_LOG_KEPT]
        self.log_closed.set()

    async def stop(self) -> str:
        """Stop the room as SIGTERM does; return its whole log once it exited 0."""
        self.process.terminate()
        assert await self.process.wait() == 0, self.log.decode(errors="replace")
        await self.log_closed.wait()
        return self.log.decode(errors="replace")


def errors_in(log: str) -> list[str]:
    """The error lines of a room's log (tracebacks end in one), but for trio's
    EMFILE notices: a burst of slow bodies, all arriving within the second they
    may, can reach the room's descriptor limit for a moment; trio retries."""
    return [
        line
        for line in log.splitlines()
        if ("ERROR" in line or "Error" in line)
        and "EMFILE" not in line
        and "Too many open files" not in line
    ]


@asynccontextmanager
async def running_room(
    *options: str, fd_limit: int = ROOM_FD_LIMIT, db: Path | None = None
) -> AsyncIterator[RunningRoom]:
    """Run the room (``fd_limit`` descriptors, in memory or on the SQLite file ``db``) on a
    free port, its stderr read throughout (a room logging in a loop must not block on a
    full pipe); kill it on exit."""
    command = [
        *ROOM_COMMAND,
        "--port",
        "0",
        *(("--memory",) if db is None else ("--db", str(db))),
        "--owner-token",
        f"{OWNER_TOKEN}=owner",
        "--log-level",
        "WARNING",
        *options,
    ]
    process = await trio.lowlevel.open_process(
        command,
        stderr=subprocess.PIPE,
        env=dict(
            os.environ, PYTHONUNBUFFERED="1", LETAGENTS_ROOM_PERSON_TOKENS=f"{PERSON_TOKEN}=owner"
        ),
        preexec_fn=partial(_limit_room, fd_limit),
    )
    assert process.stderr is not None
    try:
        log = bytearray()
        while (started := re.search(rb"letagents room on (\S+)\n", log)) is None:
            chunk = await process.stderr.receive_some()
            assert chunk, log.decode()
            log += chunk
        room = RunningRoom(started[1].decode(), process, log)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(room.keep_log, process.stderr)
            yield room
            nursery.cancel_scope.cancel(reason="the test is over")
    finally:
        if process.returncode is None:
            process.kill()
            with trio.move_on_after(5, shield=True):
                await process.wait()
        await process.stderr.aclose()


@asynccontextmanager
async def served_room(store: RoomStore | None = None) -> AsyncIterator[tuple[Room, int]]:
    """A room on ``store`` (in memory by default) served in this process on a free
    loopback port: the room, and the port."""
    room = Room(
        store=MemoryStore() if store is None else store,
        owner_tokens={OWNER_TOKEN: "owner"},
        person_tokens={PERSON_TOKEN: "owner"},
        config=RoomConfig(),
    )
    async with trio.open_nursery() as nursery:
        url = await nursery.start(partial(serve_room, room, port=0))
        try:
            yield room, int(url.rsplit(":", 1)[1])
        finally:
            nursery.cancel_scope.cancel(reason="test over")


async def answer_and_close(port: int, request: bytes, wait: float) -> tuple[str, bool]:
    """Send ``request`` on a new connection; return the answer's status line, and
    whether the room closed the connection within ``wait`` seconds."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        await stream.send_all(request)
        data = b""
        closed = False
        with trio.move_on_after(wait):
            while True:
                try:
                    chunk = await stream.receive_some(65536)
                except trio.BrokenResourceError:
                    chunk = b""
                if not chunk:
                    closed = True
                    break
                data += chunk
    return data.split(b"\r\n", 1)[0].decode("latin-1"), closed
