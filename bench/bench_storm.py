"""Benchmark: the reconnect storm when the room restarts under N held sessions.

A fresh fastroom.mjs; the client (bench/_hold_py.py, or peer/node/hold.mjs with
``--clients py,node``) holds N sessions (default 3,000) until the room's
``held_served`` reaches N. Then the room is SIGKILLed and started again on the
same port (``--down`` seconds later, default 0: as fast as node starts), and
this harness polls the new room's ``/_status`` every 20 ms until every session
is open again. Reported per run:

* reopen: from the kill until ``held_served`` is N again (and from the new room
  listening);
* attempts: ``process_requests`` the new room saw until then and 1 s after
  (more than N means some sessions needed more than one attempt);
* peak attempts/s: the most requests in any 1 s window, and in any 100 ms
  window times ten (both from the 20 ms samples, so ±1 sample);
* the client's CPU from the kill until all reopened;
* then SIGTERM: process gone, and exits matched against the new connections.

Python runs once per ``--jitters`` value (HoldPolicy(jitter=J); default 0 and
0.5); Node has no jitter and runs once. Attempts refused while the room is down
never reach it and are not counted.

    python bench/bench_storm.py [N] [--jitters 0,0.5] [--down 0,2.5] [--clients py,node]
        [--json FILE]

Loopback only; every wait bounded, every child killed.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import trio
from _peer import (
    NODE,
    Child,
    HostLoad,
    Room,
    client_argv,
    raise_nofile,
    stopped_by_signals,
    wait_quiet,
)

REOPEN_BOUND = 120.0


@dataclass
class Storm:
    sessions: int
    client: str
    jitter: float | None
    down_s: float
    note: str = ""
    open_s: float | None = None
    restart_s: float | None = None
    reopen_s: float | None = None
    reopen_after_up_s: float | None = None
    attempts: int | None = None
    attempts_after_1s: int | None = None
    peak_per_s: int | None = None
    peak_per_100ms_x10: int | None = None
    storm_cpu_s: float | None = None
    gone_s: float | None = None
    exits: int | None = None
    exits_matched: int | None = None
    foreign_cpu_s: float | None = None


def peak(samples: list[tuple[float, int, int]], window: float) -> int:
    """The most requests seen within any ``window`` seconds of the samples."""
    best = 0
    start = 0
    for end in range(len(samples)):
        while samples[end][0] - samples[start][0] > window:
            start += 1
        best = max(best, samples[end][1] - samples[start][1])
    return best


async def run_storm(
    client: str, sessions: int, jitter: float | None, down: float, logs: Path
) -> Storm:
    result = Storm(sessions=sessions, client=client, jitter=jitter, down_s=down)
    tag = f"{sessions}-{client}-{jitter}-{down}"
    busy = await wait_quiet(0.15, 120)
    if busy >= 0.15:
        result.note = f"host {busy:.0%} busy before the run"
    load = HostLoad()
    async with Room.open(logs / f"room-{tag}.log", keepalive_ms=15000) as room:
        argv = client_argv(client, room.url, sessions, jitter=jitter or 0.0)
        child = await Child.spawn(client, argv, log=logs / f"client-{tag}.log")
        try:
            await storm(child, room, result, logs / f"room2-{tag}.log")
        finally:
            with trio.move_on_after(10, shield=True):
                await child.kill()
        rooms = [room.child.cpu_seconds(), *(r.total_cpu() for r in room.retired)]
        result.foreign_cpu_s = load.foreign(child.total_cpu(), *rooms)
    return result


async def storm(child: Child, room: Room, result: Storm, log: Path) -> None:
    n = result.sessions
    if await child.next_event("holding", within=60) is None:
        result.note = "no 'holding' line within 60 s"
        return
    opened = await room.wait_held(n, within=30 + n * 0.01)
    if opened is None:
        result.note = "not all open before the restart"
        return
    result.open_s = opened - child.started
    await trio.sleep(1.0)
    cpu_before = child.cpu_seconds()
    killed, up = await room.restart(log, down=result.down_s)
    result.restart_s = up - killed
    samples: list[tuple[float, int, int]] = []
    reopened = await room.wait_held(n, within=REOPEN_BOUND, samples=samples)
    cpu_after = child.cpu_seconds()
    if reopened is None:
        result.note = f"only {samples[-1][2] if samples else 0}/{n} reopened"
    else:
        result.reopen_s = reopened - killed
        result.reopen_after_up_s = reopened - up
        if cpu_before is not None and cpu_after is not None:
            result.storm_cpu_s = cpu_after - cpu_before
    result.attempts = samples[-1][1] if samples else None
    result.peak_per_s = peak(samples, 1.0)
    result.peak_per_100ms_x10 = peak(samples, 0.1) * 10
    await trio.sleep(1.0)
    result.attempts_after_1s = (await room.status())["process_requests"]
    term_at = time.perf_counter()
    child.signal(signal.SIGTERM)
    gone = await child.wait_gone(30)
    if gone is not None:
        result.gone_s = gone - term_at
    status = await room.settled_status()
    result.exits = status["exits"]
    result.exits_matched = status["exits_matched"]


def fmt(value: float | None, unit: str = " s") -> str:
    return "—" if value is None else f"{value:.2f}{unit}"


def table(results: list[Storm]) -> str:
    lines = [
        "| sessions | client | jitter | down | all open again (from kill / from up) "
        "| attempts (+1 s) | peak attempts/s (1 s / 100 ms×10) | client CPU | "
        "gone after SIGTERM | exits matched | other CPU on host |",
        "|" + "---|" * 11,
    ]
    for r in results:
        jitter = "—" if r.jitter is None else f"{r.jitter:g}"
        lines.append(
            f"| {r.sessions:,} | {r.client} | {jitter} | {r.down_s:g} s "
            f"| {fmt(r.reopen_s)} / {fmt(r.reopen_after_up_s)} "
            f"| {r.attempts} ({r.attempts_after_1s}) "
            f"| {r.peak_per_s} / {r.peak_per_100ms_x10} | {fmt(r.storm_cpu_s)} "
            f"| {fmt(r.gone_s)} | {r.exits_matched}/{r.sessions} | {fmt(r.foreign_cpu_s)} |"
        )
    notes = [f"- {r.client} jitter={r.jitter}: {r.note}" for r in results if r.note]
    return "\n".join(lines + (["", *notes] if notes else []))


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sessions", type=int, nargs="?", default=3000)
    parser.add_argument("--jitters", default="0,0.5")
    parser.add_argument("--down", default="0", help="seconds the room stays down (list)")
    parser.add_argument("--clients", default="py", help="py and/or node")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    args.jitters = [float(j) for j in args.jitters.split(",") if j]
    args.down = [float(d) for d in args.down.split(",") if d]
    args.clients = [c for c in args.clients.split(",") if c]
    return args


async def main(args: argparse.Namespace) -> None:
    limit = raise_nofile(max(65536, 4 * args.sessions + 1024))
    logs = Path(tempfile.mkdtemp(prefix="bench_storm_"))
    print(f"open-file limit {limit}; logs in {logs}", flush=True)
    if NODE is None:
        print("node is not installed: the fake room (fastroom.mjs) needs it; nothing to run")
        return
    results: list[Storm] = []
    try:
        async with stopped_by_signals():
            for down in args.down:
                for client in args.clients:
                    jitters: list[float | None] = list(args.jitters) if client == "py" else [None]
                    for jitter in jitters:
                        result = await run_storm(client, args.sessions, jitter, down, logs)
                        results.append(result)
                        print(json.dumps(asdict(result)), flush=True)
    finally:
        print()
        print(table(results))
        if args.json:
            args.json.write_text(json.dumps([asdict(r) for r in results], indent=1) + "\n")


if __name__ == "__main__":
    trio.run(main, parse(sys.argv[1:]))
