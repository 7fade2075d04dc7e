"""How many process streams one reference-room process holds, and its memory.

Starts ``letagents-trio room`` (in-memory store, loopback, a free port) in a
subprocess, registers sessions (100 per room), and opens their process streams
from this process over raw trio sockets, level by level. At each level it
prints the time the level took to open and the server's resident memory
(``VmRSS`` from ``/proc``). At the last level it waits one heartbeat interval
and checks that every stream got a ``: heartbeat`` (the room is really
holding them, not just their sockets), then stops the room with SIGINT and
times the graceful stop.

Loopback only; bounded by ``--levels`` (each stream costs one file descriptor
here and one in the server) and an overall ``trio.fail_after``.

    python bench/bench_room_streams.py --levels 1000,2000,5000,10000
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import trio
from _refroom import LOGIN, ROOM_SIZE, register_many

TOKEN = "bench-owner-token"
OPEN_CONCURRENCY = 100


def rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


async def relay_stderr(stream: trio.abc.ReceiveStream) -> None:
    """Keep reading the room's stderr (a full pipe would stall it); echo it, timed."""
    async with stream:
        while chunk := await stream.receive_some():
            for line in chunk.decode(errors="replace").splitlines():
                print(f"  [room {time.perf_counter():.2f}] {line}")


async def start_room() -> tuple[trio.Process, str]:
    command = [
        sys.executable,
        "-c",
        "import sys; from letagents_trio.room_server._cli import main;"
        " sys.exit(main(sys.argv[1:]))",
        "--memory",
        "--port",
        "0",
        "--log-level",
        os.environ.get("BENCH_ROOM_LOG_LEVEL", "WARNING"),
    ]
    # The owner token goes in the environment, never on the command line.
    env = dict(os.environ, PYTHONUNBUFFERED="1", LETAGENTS_ROOM_OWNER_TOKENS=f"{TOKEN}={LOGIN}")
    process = await trio.lowlevel.open_process(command, stderr=subprocess.PIPE, env=env)
    assert process.stderr is not None
    seen = b""
    while b"letagents room on " not in seen or not seen.endswith(b"\n"):
        chunk = await process.stderr.receive_some()
        if not chunk:
            raise RuntimeError(f"room did not start: {seen!r}")
        seen += chunk
    url = seen.split(b"letagents room on ", 1)[1].split(b"\n", 1)[0].decode()
    return process, url


class Holder:
    def __init__(self) -> None:
        self.heartbeats = 0


async def hold_stream(
    host: str,
    port: int,
    session: dict[str, Any],
    holder: Holder,
    limiter: trio.CapacityLimiter,
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    async with limiter:
        stream = await trio.open_tcp_stream(host, port)
        request = (
            f"GET /rooms/{session['room_id']}/agent-sessions/{session['session_id']}/process"
            f" HTTP/1.1\r\nHost: {host}:{port}\r\nAccept: text/event-stream\r\n"
            f"Authorization: Bearer {TOKEN}\r\n"
            f"X-LetAgents-Agent-Session-Id: {session['session_id']}\r\n"
            f"X-LetAgents-Agent-Session-Token: {session['session_token']}\r\n\r\n"
        )
        await stream.send_all(request.encode())
        data = b""
        while b"event: open" not in data:
            chunk = await stream.receive_some(65536)
            if not chunk:
                raise RuntimeError(f"stream closed early: {data[:200]!r}")
            data += chunk
    task_status.started()
    async with stream:
        while chunk := await stream.receive_some(65536):
            holder.heartbeats += chunk.count(b": heartbeat")


async def main(levels: list[int]) -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    print(f"fd limit {hard}; levels {levels}; {ROOM_SIZE} sessions per room; cpus {os.cpu_count()}")
    with trio.fail_after(1800):
        process, url = await start_room()
        assert process.stderr is not None
        host, port = url.removeprefix("http://").rsplit(":", 1)
        idle = rss_mib(process.pid)
        print(f"room pid {process.pid} on {url}; idle RSS {idle:.1f} MiB")
        holders: list[Holder] = []
        limiter = trio.CapacityLimiter(OPEN_CONCURRENCY)
        try:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(relay_stderr, process.stderr)
                held = 0
                for level in levels:
                    t0 = time.perf_counter()
                    sessions = await register_many(url, held, level - held, token=TOKEN)
                    t1 = time.perf_counter()
                    async with trio.open_nursery() as opener:
                        for session in sessions:
                            h = Holder()
                            holders.append(h)

                            async def start_one(s: dict[str, Any] = session, h: Holder = h) -> None:
                                await nursery.start(hold_stream, host, int(port), s, h, limiter)

                            opener.start_soon(start_one)
                    t2 = time.perf_counter()
                    held = level
                    rss = rss_mib(process.pid)
                    print(
                        f"streams {level:6d}: registered {len(sessions):5d} in {t1 - t0:6.1f} s,"
                        f" opened them in {t2 - t1:6.1f} s; server RSS {rss:7.1f} MiB"
                        f" ({(rss - idle) * 1024 / level:5.1f} KiB per held stream + session)"
                    )
                before = sum(h.heartbeats for h in holders)
                await trio.sleep(16)
                beating = sum(1 for h in holders if h.heartbeats > 0)
                print(
                    f"after 16 s: {beating}/{len(holders)} streams got a heartbeat"
                    f" ({sum(h.heartbeats for h in holders) - before} heartbeats);"
                    f" server RSS {rss_mib(process.pid):.1f} MiB;"
                    f" bench client RSS {rss_mib(os.getpid()):.1f} MiB"
                )
                t3 = time.perf_counter()
                print(f"  [bench {t3:.2f}] SIGINT")
                process.send_signal(signal.SIGINT)
                with trio.fail_after(60):
                    code = await process.wait()
                stopped = time.perf_counter() - t3
                print(f"graceful stop with {len(holders)} streams: {stopped:.2f} s, exit {code}")
                nursery.cancel_scope.cancel()
        finally:
            if process.returncode is None:
                process.kill()
                with trio.move_on_after(5, shield=True):
                    await process.wait()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--levels", default="1000,2000,5000,10000")
    args = parser.parse_args()
    trio.run(main, [int(x) for x in args.levels.split(",")])
