"""Floods against a real room (issue 13, row 6): slow bodies, and connections that say nothing.

The room runs as ``letagents-trio room`` in a subprocess limited to 1,024 file
descriptors (:mod:`.room_process`); 3,000 connections from this process
(127.0.0.1 only) attack it, bounded in count and time.

Slow bodies: each sends a complete request head and the start of a body, then
nothing. Before, every one was held forever: the room ran out of descriptors,
``accept`` failed with EMFILE and a legitimate request timed out. Now the
oldest late body is evicted when 256 are arriving, and every body has 10 s.
Under load this test also stopped the whole room now and then: a client
closing just as its 408 went out made hypercorn's connection raise
``BusyResourceError`` out of the server (:mod:`..room_server.test_connections`).

Silent connections: each connects and sends nothing. Before, the room held
each until its keep-alive timeout, ~700 at a time, and a request made behind
3,000 of them waited 15 s or more. Now at most 256 are kept, the oldest closed.

A legitimate client is answered during each flood, and at once after it; the
room's log has no error.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
from pathlib import Path
from typing import Any

import httpx2
import pytest
import trio
import trio.lowlevel
import trio.testing

from letagents_trio.room_server._config import MAX_PENDING_BODIES, MAX_SILENT_CONNECTIONS

from ..room_server.helpers import (
    owner_headers,
    registered,
    registration,
    session_headers,
)
from ..room_server.paths import process_path
from .room_process import answer_and_close, descriptors, errors_in, running_room

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX resource limits")

ATTACKERS = 3000
SLOW_HEAD = (
    b"POST /rooms/flooded/tasks HTTP/1.1\r\nHost: 127.0.0.1\r\n"
    b"Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
)


async def legit_round(url: str) -> float:
    """A health check and a registration on a new connection, as a real client.

    Returns:
        The seconds from the connection's opening to the second answer; the
        client's own setup (an SSL context, ~0.1 s on a busy machine) is not
        the room's time and is left out.

    The client waits as long as the caller's cancel scope lets it (30 s at most).
    """
    async with httpx2.AsyncClient(base_url=url, timeout=httpx2.Timeout(30.0)) as client:
        started = trio.current_time()
        assert (await client.get("/health")).status_code == 200
        r = await client.post(
            "/rooms/flooded/agent-sessions", json=registration(), headers=owner_headers()
        )
        assert r.status_code == 201, r.text
        return trio.current_time() - started


async def test_thousands_of_slow_bodies_do_not_deny_service() -> None:
    """The room sheds all but 256 of the attackers as fast as it accepts them;
    with those 256 still holding, a legitimate client is served at once, and
    again once every attacker has left."""
    settled = trio.Event()
    evicted = 0
    with descriptors(ATTACKERS + 2000), trio.fail_after(120):
        async with running_room() as room:
            async with trio.open_nursery() as attack:

                async def attacker() -> None:
                    nonlocal evicted
                    stream = await trio.open_tcp_stream("127.0.0.1", room.port)
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
                during = await legit_round(room.url)
                attack.cancel_scope.cancel(reason="the attackers leave")
            after = await legit_round(room.url)
            log = await room.stop()
    print(
        f"{ATTACKERS} slow bodies: {evicted} shed in {shed_in:.1f} s;"
        f" legit request during {during:.2f} s, after {after:.2f} s"
    )
    assert during < 2.0
    assert after < 1.0
    assert errors_in(log) == []


SILENT_ATTACKERS = 3000
# Held process streams: more than the cap on silent connections, which must
# never count them (one process may hold 10,000 on 127.0.0.1).
HELD_STREAMS = 300
# The room's descriptors, at most, while silent attackers flood it: the held
# streams, the capped attackers and a few of its own. Without the cap it held
# each attacker until its keep-alive timeout (5 s) and reached its limit
# (1,024) within a second, whatever the machine's speed.
MOST_DESCRIPTORS = HELD_STREAMS + MAX_SILENT_CONNECTIONS + 100
# How often the room's descriptors are counted during the flood.
SAMPLE_EVERY = 0.05


async def count_descriptors(pid: int, peak: list[int]) -> None:
    """Keep in ``peak[0]`` the most descriptors process ``pid`` has had open, until cancelled."""
    fds = Path(f"/proc/{pid}/fd")
    while True:
        with contextlib.suppress(OSError):  # the room has exited
            peak[0] = max(peak[0], len(os.listdir(fds)))
        await trio.sleep(SAMPLE_EVERY)


async def register_sessions(url: str, count: int) -> list[dict[str, Any]]:
    """``count`` sessions, 100 a room, registered 20 at a time."""
    sessions: list[dict[str, Any]] = []
    limiter = trio.CapacityLimiter(20)
    async with httpx2.AsyncClient(base_url=url, timeout=httpx2.Timeout(30.0)) as client:

        async def one(i: int) -> None:
            async with limiter:
                room = f"held_{i // 100}"
                session = await registered(client, registration(name=f"Held{i}"), room=room)
                sessions.append({**session, "room": room})

        async with trio.open_nursery() as nursery:
            for i in range(count):
                nursery.start_soon(one, i)
    return sessions


async def hold_stream(
    port: int,
    session: dict[str, Any],
    closed: list[str],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Open a session's process stream on a raw socket and read it until cancelled."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    async with stream:
        head = f"GET {process_path(session, session['room'])} HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        head += "".join(f"{k}: {v}\r\n" for k, v in session_headers(session).items())
        await stream.send_all(f"{head}Accept: text/event-stream\r\n\r\n".encode())
        data = b""
        while b"event: open" not in data:
            chunk = await stream.receive_some(65536)
            assert chunk, data
            data += chunk
        task_status.started()
        with contextlib.suppress(trio.BrokenResourceError):
            while await stream.receive_some(65536):
                pass
    closed.append(session["session_id"])


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts /proc/PID/fd")
async def test_thousands_of_silent_connections_do_not_deny_service() -> None:
    """Connections that never send a request are capped (the oldest closed), so
    they never take the room's descriptors: a legitimate client is answered
    during the flood and at once after it, and the held process streams, more
    than the cap, are never closed.

    The request made behind all 3,000 (``first``) is reported, not bounded:
    with the cap it waits for the room to accept the queue ahead of it, which
    takes CPU time (1–2 s here, 11 s with the machine three times over-busy);
    without it, for the attackers' keep-alive timeouts (20 s here)."""
    connected = shed = 0
    all_connected, settled = trio.Event(), trio.Event()
    closed: list[str] = []
    first = math.inf
    peak = [0]
    with descriptors(SILENT_ATTACKERS + HELD_STREAMS + 2000), trio.fail_after(150):
        async with running_room() as room:
            sessions = await register_sessions(room.url, HELD_STREAMS)
            async with trio.open_nursery() as holders:
                for session in sessions:
                    await holders.start(hold_stream, room.port, session, closed)
                async with trio.open_nursery() as attack:

                    async def attacker() -> None:
                        nonlocal connected, shed
                        stream = await trio.open_tcp_stream("127.0.0.1", room.port)
                        connected += 1
                        if connected == SILENT_ATTACKERS:
                            all_connected.set()
                        async with stream:
                            with contextlib.suppress(trio.BrokenResourceError):
                                while await stream.receive_some(4096):
                                    pass
                        shed += 1
                        if shed >= SILENT_ATTACKERS - MAX_SILENT_CONNECTIONS:
                            settled.set()

                    attack.start_soon(count_descriptors, room.process.pid, peak)
                    started = trio.current_time()
                    for _ in range(SILENT_ATTACKERS):
                        attack.start_soon(attacker)
                        await trio.lowlevel.checkpoint()
                    await all_connected.wait()
                    connected_in = trio.current_time() - started
                    with trio.move_on_after(30):
                        first = await legit_round(room.url)
                    with trio.move_on_after(60):
                        await settled.wait()
                    shed_in = trio.current_time() - started
                    during = await legit_round(room.url)
                    attack.cancel_scope.cancel(reason="the attackers leave")
                after = await legit_round(room.url)
                assert not closed, f"{len(closed)} held process streams were closed"
                holders.cancel_scope.cancel(reason="test over")
            log = await room.stop()
    print(
        f"{SILENT_ATTACKERS} silent connections (connected in {connected_in:.1f} s) beside"
        f" {HELD_STREAMS} held streams: at most {peak[0]} room descriptors; request behind"
        f" them {first:.2f} s; {shed} shed in {shed_in:.1f} s; request during {during:.2f} s,"
        f" after {after:.2f} s"
    )
    assert peak[0] <= MOST_DESCRIPTORS
    assert settled.is_set()
    assert errors_in(log) == []
    assert during < 2.0
    assert after < 1.0


# Clients connecting at once, each silent for the moment before its request.
BURST = 600
# A room with this many descriptors keeps up to a quarter of them silent: 1,024.
ROOMY_FD_LIMIT = 4096
# How long every reader must have been waiting before the count is taken.
SETTLE = 0.05


async def closed_by_the_room(streams: list[trio.SocketStream]) -> int:
    """How many of ``streams`` the room has closed (it sends nothing on a silent one)."""
    closed = 0

    async def check(stream: trio.SocketStream) -> None:
        nonlocal closed
        try:
            if await stream.receive_some(1024) == b"":
                closed += 1
        except trio.BrokenResourceError:
            closed += 1

    async with trio.open_nursery() as nursery:
        for stream in streams:
            nursery.start_soon(check, stream)
        # The room cut them as it accepted the burst, before it answered the
        # request behind it: each cut one's end is already here, and every
        # reader still waiting waits on a connection the room keeps.
        await trio.testing.wait_all_tasks_blocked(SETTLE)
        nursery.cancel_scope.cancel(reason="counted")
    return closed


@pytest.mark.parametrize(("options", "cut"), [((), 0), (("--max-silent-connections", "256"), 344)])
async def test_a_burst_of_connections_is_served_when_the_open_file_limit_allows(
    options: tuple[str, ...], cut: int
) -> None:
    """By default the room keeps a quarter of its open-file limit silent, at
    least 256: a room restarting under thousands of held sessions sees them
    all connect at once, each silent for the moment before its request. A
    fixed 256 cut 261 of 3,000 process sockets opened together on a room with
    20,000 descriptors (and the admin connection of the benchmark reading it)."""
    assert BURST - MAX_SILENT_CONNECTIONS == 344
    streams: list[trio.SocketStream] = []
    with descriptors(BURST + 500), trio.fail_after(60):
        async with running_room(*options, fd_limit=ROOMY_FD_LIMIT) as room:
            try:
                for _ in range(BURST):
                    streams.append(await trio.open_tcp_stream("127.0.0.1", room.port))
                # Answered behind the burst: the room has accepted every connection of it.
                await legit_round(room.url)
                closed = await closed_by_the_room(streams)
            finally:
                for stream in streams:
                    await stream.aclose()
            log = await room.stop()
    # The legitimate client's connection counts too for a moment, and may cut one or two more.
    assert cut <= closed <= cut + (2 if cut else 0)
    assert ("silent connections at the cap" in log) == bool(cut)


# Refused upgrades (issue 30, row 1): of every kind, more than the room's descriptors.
REFUSED_UPGRADES = 2400
# How long each attacker waits for the room to close its socket after the 400.
# Before, none was closed after 20 s: the room held 1,024 descriptors, /health
# and registrations timed out, and it logged EMFILE hundreds of times.
REFUSED_CLOSE_WAIT = 10.0
UPGRADE_HEAD = (
    "GET /rooms/flooded/agent-sessions/s1/process HTTP/{http}\r\nHost: 127.0.0.1\r\n"
    "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: {version}\r\n{key}\r\n"
)
REFUSED_KINDS = (
    # Refused by hypercorn itself: no key, another version, HTTP/1.0.
    UPGRADE_HEAD.format(http="1.1", version="13", key=""),
    UPGRADE_HEAD.format(
        http="1.1", version="12", key="Sec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAA==\r\n"
    ),
    UPGRADE_HEAD.format(
        http="1.0", version="13", key="Sec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAA==\r\n"
    ),
    # Refused by the room: keys that are not the base64 of 16 bytes (answered 101 before).
    UPGRADE_HEAD.format(http="1.1", version="13", key="Sec-WebSocket-Key: not base64!\r\n"),
    UPGRADE_HEAD.format(http="1.1", version="13", key="Sec-WebSocket-Key: YWJjZA==\r\n"),
    UPGRADE_HEAD.format(http="1.1", version="13", key=f"Sec-WebSocket-Key: {'QUFB' * 2500}\r\n"),
)


async def test_a_flood_of_refused_upgrades_is_answered_and_closed() -> None:
    """Every refused upgrade gets its 400 and then its socket closed by the
    room, so 2,400 of them against a room of 1,024 descriptors (1,200 of the
    kinds hypercorn refuses itself) leave it serving: ``/health`` and a
    registration answer during and after."""
    answers: dict[str, int] = {}
    still_open = 0
    done = trio.Event()
    finished = 0
    with descriptors(REFUSED_UPGRADES + 1000), trio.fail_after(120):
        async with running_room() as room:
            async with trio.open_nursery() as attack:

                async def attacker(request: bytes) -> None:
                    nonlocal still_open, finished
                    line, closed = await answer_and_close(room.port, request, REFUSED_CLOSE_WAIT)
                    answers[line] = answers.get(line, 0) + 1
                    still_open += not closed
                    finished += 1
                    if finished == REFUSED_UPGRADES:
                        done.set()

                started = trio.current_time()
                for i in range(REFUSED_UPGRADES):
                    attack.start_soon(attacker, REFUSED_KINDS[i % len(REFUSED_KINDS)].encode())
                    await trio.lowlevel.checkpoint()
                during = await legit_round(room.url)
                await done.wait()
                took = trio.current_time() - started
            after = await legit_round(room.url)
            log = await room.stop()
    print(
        f"{REFUSED_UPGRADES} refused upgrades: answers {answers}, {still_open} still open"
        f" {REFUSED_CLOSE_WAIT:g} s after their answer; all done in {took:.1f} s;"
        f" legit request during {during:.2f} s, after {after:.2f} s"
    )
    assert answers == {"HTTP/1.1 400 ": REFUSED_UPGRADES}
    assert still_open == 0
    assert during < 5.0
    assert after < 1.0
    assert errors_in(log) == []
