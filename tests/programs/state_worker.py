"""A helper program for the multi-process tests of the state file (not a test).

Usage::

    python tests/programs/state_worker.py count PATH NAME N [PAUSE]  # N locked increments
    python tests/programs/state_worker.py read PATH TARGET    # read until counter >= TARGET
    python tests/programs/state_worker.py churn PATH PAD      # big updates until killed
    python tests/programs/state_worker.py plant PATH N        # N stale-lock events
    python tests/programs/state_worker.py hold PATH           # hold the lock until killed

``count`` prints ``ready``, waits for a line on stdin (so all writers start
together), then adds one to ``counter`` and to ``workers[NAME]`` N times through
:meth:`LocalStateStore.update`, and appends runs of its name to ``order`` (so
the test can see the writers interleave). Between two updates it waits a
random 0 to PAUSE seconds (default 0), as a real server does other work
between updates; without a pause the process that just released the lock
takes it again at once, and the others, polling every 25 ms, rarely get in.
A lock timeout (possible when another process holds the lock for most of
2 s) is counted and the increment retried, because a timed-out update did
nothing. It prints ``{"timeouts": k, "seconds": s}``.

``read`` reads the file without the lock as fast as it can and parses it,
until ``counter`` reaches TARGET or 60 s pass. It prints
``{"reads": n, "invalid": k, "last": counter}``; any invalid read is a bug.

``churn`` rewrites a state padded to PAD bytes forever; inside each update
it prints ``writing <counter>`` (the value about to be written), so the parent
can kill it while the write is under way.

``plant`` plays N dead holders, one after another: it prints ``ready``, waits
for a line on stdin, then N times creates the lock file exclusively (when it
is free), dates it 60 s back, as a process killed inside its update 60 s ago
would have left it, and waits until a writer has broken it, plus a random 0
to 20 ms. Every event makes the waiting writers break a stale lock at once,
which is where a careless breaker removes a fresh lock. It prints
``{"planted": n}`` (fewer than N if 60 s pass first).

``hold`` takes the lock through an update, prints ``holding`` inside it and
waits there for a line on stdin, so the parent can kill it holding the lock:
a writer killed in the middle of its update.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time
from typing import Any

import trio

from letagents_trio._errors import StateLockTimeout
from letagents_trio.workers._state import LocalStateStore
from letagents_trio.workers._stateparts import ensure_mapping

# The reader stops after this long even if the writers never finish.
READ_GIVE_UP_SECONDS = 60.0
# A planted lock is dated this far back: well past the 10 s stale age.
PLANTED_AGE_SECONDS = 60.0
# The planter's poll while a writer holds the lock or has not yet broken its plant.
PLANT_POLL_SECONDS = 0.001


async def count(path: str, name: str, n: int, pause: float) -> None:
    store = LocalStateStore(path)
    rng = random.Random(name)
    timeouts = 0

    def bump(state: dict[str, Any]) -> None:
        state["counter"] = int(state.get("counter", 0)) + 1
        workers = ensure_mapping(state, "workers")
        workers[name] = int(workers.get(name, 0)) + 1
        order = state.setdefault("order", [])
        if not order or order[-1][0] != name:
            order.append([name, 0])
        order[-1][1] += 1

    # Start together: say so, then wait for the parent's go-ahead line.
    print("ready", flush=True)
    sys.stdin.readline()
    started = time.perf_counter()
    done = 0
    while done < n:
        try:
            await store.update(bump)
        except StateLockTimeout:
            timeouts += 1
            continue
        done += 1
        if pause:
            await trio.sleep(rng.uniform(0, pause))
    print(json.dumps({"timeouts": timeouts, "seconds": time.perf_counter() - started}))


def read(path: str, target: int) -> None:
    reads = invalid = last = 0
    give_up = time.monotonic() + READ_GIVE_UP_SECONDS
    while last < target and time.monotonic() < give_up:
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except FileNotFoundError:
            continue
        reads += 1
        try:
            data = json.loads(raw)
        except ValueError:
            invalid += 1
            continue
        if not isinstance(data, dict):
            invalid += 1
            continue
        last = int(data.get("counter", 0))
    print(json.dumps({"reads": reads, "invalid": invalid, "last": last}))


async def churn(path: str, pad: int) -> None:
    store = LocalStateStore(path)

    def rewrite(state: dict[str, Any]) -> None:
        following = int(state.get("counter", 0)) + 1
        print(f"writing {following}", flush=True)
        state["counter"] = following
        state["padding"] = str(following % 10) * pad

    while True:
        await store.update(rewrite)


async def plant(path: str, n: int) -> None:
    lock = path + ".lock"
    rng = random.Random("plant")
    planted = 0
    print("ready", flush=True)
    sys.stdin.readline()
    give_up = time.monotonic() + READ_GIVE_UP_SECONDS
    while planted < n and time.monotonic() < give_up:
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
        except FileExistsError:
            await trio.sleep(PLANT_POLL_SECONDS)
            continue
        os.close(fd)
        old = time.time() - PLANTED_AGE_SECONDS
        os.utime(lock, (old, old))
        planted += 1
        planted_stat = os.stat(lock)
        identity = (planted_stat.st_ino, planted_stat.st_mtime_ns)
        while time.monotonic() < give_up:  # until a writer has broken it
            try:
                now = os.stat(lock)
                if (now.st_ino, now.st_mtime_ns) != identity:
                    break
            except FileNotFoundError:
                break
            await trio.sleep(PLANT_POLL_SECONDS)
        await trio.sleep(rng.uniform(0, 0.02))
    print(json.dumps({"planted": planted}))


async def hold(path: str) -> None:
    def wait_holding(state: dict[str, Any]) -> None:
        print("holding", flush=True)
        sys.stdin.readline()

    await LocalStateStore(path).update(wait_holding)


def main(argv: list[str]) -> None:
    mode, path, *rest = argv
    if mode == "count":
        trio.run(count, path, rest[0], int(rest[1]), float(rest[2]) if len(rest) > 2 else 0.0)
    elif mode == "read":
        read(path, int(rest[0]))
    elif mode == "plant":
        trio.run(plant, path, int(rest[0]))
    elif mode == "churn":
        trio.run(churn, path, int(rest[0]))
    elif mode == "hold":
        trio.run(hold, path)
    else:
        raise SystemExit(f"unknown mode {mode!r}")


if __name__ == "__main__":
    main(sys.argv[1:])
