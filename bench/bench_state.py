"""Measure the local state file: one locked update, and four processes contending.

Run: ``python bench/bench_state.py [--updates 1000]``. Prints figures; not a test.

1. One locked update of a small state file (a counter and a stored session),
   timed one by one: median and p99 in milliseconds. Each update takes the
   lock, re-reads and parses the file, writes a temp file, fsyncs it and
   renames it over. A no-op update (nothing changed, so nothing written) is
   timed the same way, to show what the fsync and rename cost.
2. The contention test of tests/test_state.py: 4 processes x 200 updates
   through the lock plus an unlocked reader, wall time from the go-ahead until
   every process has exited; once with up to 10 ms of "other work" between a
   writer's updates (as the test does) and once in a tight loop.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from functools import partial
from pathlib import Path
from typing import Any

import trio

from letagents_trio.workers._state import LocalStateStore

WORKER = Path(__file__).resolve().parent.parent / "tests" / "state_worker.py"


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


async def time_updates(path: Path, count: int, *, change: bool) -> list[float]:
    store = LocalStateStore(path)

    def bump(state: dict[str, Any]) -> None:
        if change:
            state["counter"] = int(state.get("counter", 0)) + 1

    samples = []
    for _ in range(count):
        started = time.perf_counter()
        await store.update(bump)
        samples.append((time.perf_counter() - started) * 1000)
    return samples


async def contention(path: Path, pause: float, workers: int = 4, per_worker: int = 200) -> float:
    target = workers * per_worker

    async def read_line(stream: trio.abc.ReceiveStream) -> bytes:
        data = b""
        while not data.endswith(b"\n"):
            chunk = await stream.receive_some(1)
            if not chunk:
                raise RuntimeError("a worker exited early")
            data += chunk
        return data

    async def finish(process: trio.Process) -> None:
        assert process.stdout is not None
        while await process.stdout.receive_some():
            pass
        if await process.wait() != 0:
            raise RuntimeError("a worker failed")

    processes = []
    for i in range(workers):
        process = await trio.lowlevel.open_process(
            [sys.executable, str(WORKER), "count", str(path), f"w{i}", str(per_worker), str(pause)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        assert process.stdout is not None
        await read_line(process.stdout)
        processes.append(process)
    started = time.perf_counter()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(
            partial(trio.run_process, capture_stdout=True),
            [sys.executable, str(WORKER), "read", str(path), str(target)],
        )
        for process in processes:
            assert process.stdin is not None
            await process.stdin.send_all(b"go\n")
            nursery.start_soon(finish, process)
    elapsed = time.perf_counter() - started
    counter = LocalStateStore(path).read().data["counter"]
    if counter != target:
        raise RuntimeError(f"lost updates: {counter} != {target}")
    return elapsed


def write_small_state(path: Path) -> None:
    small = {
        "local_host_id": "host_" + "0" * 32,
        "agent_sessions": {"s1": {"session_id": "s1", "session_token": "t", "room_id": "o/r"}},
    }
    path.write_text(json.dumps(small, indent=2) + "\n")


async def main(updates: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "mcp-state.json"
        write_small_state(path)
        await time_updates(path, 50, change=True)  # warm up the page cache
        for label, change in (("locked update (writes)", True), ("no-op update", False)):
            samples = await time_updates(path, updates, change=change)
            print(
                f"{label:24} n={updates}  median {statistics.median(samples):.3f} ms"
                f"  p99 {percentile(samples, 0.99):.3f} ms  max {max(samples):.3f} ms"
            )
    for pause in (0.01, 0.0):
        with tempfile.TemporaryDirectory() as tmp:
            elapsed = await contention(Path(tmp) / "mcp-state.json", pause)
            print(f"4 processes x 200 updates, pause <= {pause * 1000:g} ms: {elapsed:.2f} s wall")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--updates", type=int, default=1000)
    trio.run(main, parser.parse_args().updates)
