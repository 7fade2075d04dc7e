"""Benchmark: the CPU our client spends opening N sessions, alternated between trees.

``bench_vs_node.py``'s *all open* is wall time, which a host busy with other
work moves by tens of per cent; the CPU the opening itself takes moves far
less. For each tree (a folder holding ``letagents_trio/``: a worktree, or a
copy with a change applied), in turn, ``--reps`` times: a fresh
``fastroom.mjs``, then a client process (this file, ``--drive``) with that
tree first on ``PYTHONPATH`` that opens N sessions through the public API
(``RoomClient``, ``open_connection_manager`` with the collector's pauses, as
the benchmarks' ``py`` and ``py-ws`` rows), and reports the CPU time of its
process (``time.process_time``) from the first ``hold()`` until every
holder is OPEN, less the collector's own passes (they come after the room
holds every stream: the pause's end), and the wall time beside it.

    python bench/bench_open.py [N ...] [--transports sse,websocket] [--reps 2]
        [--tree NAME=PATH ...]

Default: 3000 sessions, both transports, one rep, this tree only. Prints
every run, then each tree's median and its change against the first tree's.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _peer import FASTROOM, NODE, raise_nofile

BENCH = Path(__file__).resolve().parent
# The longest one client may take to open and report.
RUN_BOUND = 300.0


def drive(api: str, sessions: int, transport: str) -> None:
    """Open ``sessions`` against ``api``; print the opening's CPU, collector and wall time."""
    import trio

    import letagents_trio
    from letagents_trio import (
        AgentSession,
        HolderStatus,
        RoomClient,
        SSEConnector,
        WebSocketConnector,
        open_connection_manager,
    )

    collected = [0.0]
    started = [0.0]

    def clock_collector(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[0] = time.process_time()
        else:
            collected[0] += time.process_time() - started[0]

    gc.callbacks.append(clock_collector)

    async def main() -> None:
        async with RoomClient(api) as client:
            connector = (WebSocketConnector if transport == "websocket" else SSEConnector)(client)
            async with open_connection_manager(
                client, connector=connector, owner_mode=True, pause_collector=True
            ) as manager:
                held = [
                    AgentSession(
                        session_id=f"session_{i}",
                        session_token=f"tok_{i}",
                        room_id="bench/room",
                        session_kind="worker",
                    )
                    for i in range(1, sessions + 1)
                ]
                cpu, wall, gc_before = time.process_time(), time.perf_counter(), collected[0]
                holders = [manager.hold(session) for session in held]
                for holder in holders:
                    assert holder is not None
                    await holder.wait_status(HolderStatus.OPEN)
                cpu = time.process_time() - cpu
                collector = collected[0] - gc_before
                print(
                    json.dumps(
                        {
                            "cpu_s": round(cpu - collector, 3),
                            "collector_s": round(collector, 3),
                            "wall_s": round(time.perf_counter() - wall, 3),
                            "tree": str(Path(letagents_trio.__file__).parent.parent),
                        }
                    ),
                    flush=True,
                )
                # Measured: no goodbye (the room is killed next), no teardown.
                os._exit(0)

    trio.run(main)


def one_run(tree: Path, sessions: int, transport: str) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as folder:
        port_file = Path(folder) / "port"
        assert NODE is not None
        room = subprocess.Popen(
            [NODE, str(FASTROOM), "--port-file", str(port_file), "--keepalive-ms", "15000"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            deadline = time.monotonic() + 15
            while not (port_file.exists() and port_file.read_text().strip()):
                if time.monotonic() > deadline:
                    raise RuntimeError("fastroom did not start")
                time.sleep(0.05)
            api = f"http://127.0.0.1:{port_file.read_text().strip()}"
            argv = [sys.executable, __file__, "--drive", api, str(sessions), transport]
            env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tree), str(BENCH)])}
            done = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=RUN_BOUND)
        finally:
            room.kill()
            room.wait()
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if not lines:
        raise RuntimeError(f"the client reported nothing: {done.stderr[-500:]}")
    result: dict[str, float] = json.loads(lines[0])
    return result


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sessions", type=int, nargs="*", default=[3000])
    parser.add_argument("--transports", default="sse,websocket")
    parser.add_argument("--reps", type=int, default=1)
    parser.add_argument("--tree", action="append", default=[], help="NAME=PATH")
    args = parser.parse_args(argv)
    args.trees = [tuple(spec.split("=", 1)) for spec in args.tree] or [("this", str(BENCH.parent))]
    return args


def main(args: argparse.Namespace) -> None:
    if NODE is None:
        print("node is not installed: the fake room (fastroom.mjs) needs it; nothing to run")
        return
    raise_nofile(max(65536, 4 * max(args.sessions) + 1024))
    for sessions in args.sessions:
        for transport in args.transports.split(","):
            cpu: dict[str, list[float]] = {name: [] for name, _ in args.trees}
            for rep in range(args.reps):
                for name, tree in args.trees:
                    run = one_run(Path(tree).resolve(), sessions, transport)
                    cpu[name].append(run["cpu_s"])
                    print(f"{sessions} {transport} {name} rep {rep + 1}: {json.dumps(run)}")
            first = statistics.median(cpu[args.trees[0][0]])
            for name, spent in cpu.items():
                median = statistics.median(spent)
                change = f"{(median / first - 1) * 100:+.0f} %" if first else "—"
                runs = " / ".join(f"{s:.3f}" for s in spent)
                print(f"{sessions} {transport} {name}: opening CPU {runs} s, median {change}")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--drive"]:
        drive(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        main(parse(sys.argv[1:]))
