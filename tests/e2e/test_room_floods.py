"""A flood of slow-body connections against a real room (issue 13, row 6).

The room runs as ``letagents-trio room`` in a subprocess limited to 1,024 file
descriptors; 3,000 connections from this process (127.0.0.1 only) each send
a complete request head and the start of a body, then nothing. Before, every
one was held forever: the room ran out of descriptors, ``accept`` failed
with EMFILE and a legitimate request timed out. Now the oldest body still
arriving is evicted when 256 are, so the legitimate requests are answered
during the flood, and at once after it. Bounded: 3,000 connections, 60 s.
"""

from __future__ import annotations

import contextlib
import os
import resource
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

import httpx2
import pytest
import trio
import trio.lowlevel

from letagents_trio.room_server._config import MAX_PENDING_BODIES

from ..room_server.helpers import OWNER_TOKEN, owner_headers, registration

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX resource limits")

ATTACKERS = 3000
ROOM_FD_LIMIT = 1024
SLOW_HEAD = (
    b"POST /rooms/flooded/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
)


@contextmanager
def descriptors(wanted: int) -> Iterator[None]:
    """Raise this process's soft RLIMIT_NOFILE to ``wanted`` (or the hard limit) meanwhile."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
    if target < ATTACKERS + 500:
        pytest.skip(f"needs {ATTACKERS + 500} descriptors, the hard limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, target), hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def _limit_room() -> None:  # runs in the child, before exec
    resource.setrlimit(resource.RLIMIT_NOFILE, (ROOM_FD_LIMIT, ROOM_FD_LIMIT))


async def start_room() -> tuple[trio.Process, str]:
    command = [
        sys.executable,
        "-c",
        "import sys; from letagents_trio.room_server._cli import main;"
        " sys.exit(main(sys.argv[1:]))",
        "--port",
        "0",
        "--memory",
        "--owner-token",
        f"{OWNER_TOKEN}=owner",
        "--log-level",
        "WARNING",
    ]
    process = await trio.lowlevel.open_process(
        command,
        stderr=subprocess.PIPE,
        env=dict(os.environ, PYTHONUNBUFFERED="1"),
        preexec_fn=_limit_room,
    )
    assert process.stderr is not None
    seen = b""
    while b"letagents room on " not in seen or not seen.endswith(b"\n"):
        chunk = await process.stderr.receive_some()
        assert chunk, seen
        seen += chunk
    return process, seen.split(b"letagents room on ", 1)[1].split(b"\n", 1)[0].decode()


async def legit_round(url: str) -> float:
    """A health check and a registration, as a real client; returns the seconds taken."""
    started = trio.current_time()
    async with httpx2.AsyncClient(base_url=url, timeout=httpx2.Timeout(5.0)) as client:
        assert (await client.get("/health")).status_code == 200
        r = await client.post(
            "/rooms/flooded/agent-sessions", json=registration(), headers=owner_headers()
        )
        assert r.status_code == 201, r.text
    return trio.current_time() - started


@pytest.mark.load
async def test_thousands_of_slow_bodies_do_not_deny_service() -> None:
    """The room sheds all but 256 of the attackers as fast as it accepts them;
    with those 256 still holding, a legitimate client is served at once, and
    again once every attacker has left."""
    settled = trio.Event()
    evicted = 0
    with descriptors(ATTACKERS + 2000), trio.fail_after(120):
        process, url = await start_room()
        port = int(url.rsplit(":", 1)[1])
        try:
            async with trio.open_nursery() as attack:

                async def attacker() -> None:
                    nonlocal evicted
                    stream = await trio.open_tcp_stream("127.0.0.1", port)
                    async with stream:
                        await stream.send_all(SLOW_HEAD)
                        with contextlib.suppress(trio.BrokenResourceError):
                            while await stream.receive_some(4096):
                                pass
                    evicted += 1
                    if evicted >= ATTACKERS - MAX_PENDING_BODIES:
                        settled.set()

                started = trio.current_time()
                for _ in range(ATTACKERS):
                    attack.start_soon(attacker)
                    await trio.lowlevel.checkpoint()
                # Every attacker is accepted and all but 256 shed: a few thousand
                # connections a second on an idle machine, slower on a busy one.
                with trio.move_on_after(90):
                    await settled.wait()
                shed_in = trio.current_time() - started
                during = await legit_round(url)
                attack.cancel_scope.cancel(reason="the attackers leave")
            after = await legit_round(url)
        finally:
            process.kill()
            with trio.move_on_after(5, shield=True):
                await process.wait()
            assert process.stderr is not None
            await process.stderr.aclose()
    print(
        f"{ATTACKERS} slow bodies: {evicted} shed in {shed_in:.1f} s;"
        f" legit request during {during:.2f} s, after {after:.2f} s"
    )
    assert during < 2.0
    assert after < 1.0
