"""Benchmark: where an SSE goodbye's time goes, the room's side and the client's.

The reference room runs in this process (``serve_room``, in memory), so its
CPU and its records are read directly; the client holds N sessions in a
process of its own (bench/_hold_py.py, ``py`` by default: SSE, the collector's
pauses opted in). Once every stream is open and 2 s have passed, the client is
sent SIGTERM and, per run, one JSON line says:

* ``client_ms``: the client's own time from the signal to its manager's block
  left (its ``exited`` line), and ``answered``: the exits it saw answered;
* ``first_s``, ``half_s``, ``all_s``: when the room had recorded its first,
  half and every exit, from the signal;
* ``room_cpu_s``: the room's CPU (this process's) from the signal until it
  had recorded every exit;
* ``load``: the host's load averages, as the machine may be shared.

    python bench/bench_goodbye_split.py [N] [--runs K] [--client py|py-plain] [--profile FILE]

``--profile FILE`` runs cProfile over the room's side of the goodbye (this
process, from the signal until every exit is recorded) and writes its stats to
FILE (the last run's), for ``python -m pstats FILE``; its times are inflated by
the profiler, its call counts are exact.

Loopback only; every wait bounded, the client killed and reaped.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import secrets
import signal
import sys
import tempfile
import time
from functools import partial
from pathlib import Path

import trio
from _peer import Child, client_argv, private_file
from _refroom import LOGIN, register_many

from letagents_trio.room_server import MemoryStore, Room, RoomConfig, serve_room

# Every stream open within this long, and every exit recorded within this long.
OPEN_BOUND = 120.0
RECORD_BOUND = 60.0
# How often the room's records are looked at during the goodbye.
LOOK_EVERY = 0.005


async def one_run(
    n: int, client: str, folder: Path, profile: Path | None = None
) -> dict[str, object]:
    token = secrets.token_urlsafe(24)
    room = Room(store=MemoryStore(), owner_tokens={token: LOGIN}, config=RoomConfig())
    async with trio.open_nursery() as nursery:
        url = await nursery.start(partial(serve_room, room, port=0))
        sessions = await register_many(url, 0, n, token=token)
        rooms = sorted({s["room_id"] for s in sessions})
        held = private_file(folder / f"sessions-{secrets.token_hex(4)}.json", json.dumps(sessions))
        argv = client_argv(client, url, n, sessions_file=held)
        child = await Child.spawn(client, argv, log=folder / "client.log")
        try:
            await child.next_event("open", "open_timeout", within=OPEN_BOUND)
            await trio.sleep(2.0)

            def recorded() -> int:
                return sum(room.process_statistics(r, token).body["exits_recorded"] for r in rooms)

            marks: dict[str, float] = {}
            profiler = cProfile.Profile() if profile is not None else None
            if profiler is not None:
                profiler.enable()
            start, cpu = time.perf_counter(), time.process_time()
            child.signal(signal.SIGTERM)
            with trio.move_on_after(RECORD_BOUND):
                while (got := recorded()) < n:
                    now = time.perf_counter() - start
                    if got:
                        marks.setdefault("first_s", now)
                    if got >= n / 2:
                        marks.setdefault("half_s", now)
                    await trio.sleep(LOOK_EVERY)
            marks["all_s"] = time.perf_counter() - start
            room_cpu = time.process_time() - cpu
            if profiler is not None and profile is not None:
                profiler.disable()
                profiler.dump_stats(profile)
            exited = await child.next_event("exited", within=10) or {}
        finally:
            with trio.move_on_after(10, shield=True):
                await child.kill()
            held.unlink(missing_ok=True)
        nursery.cancel_scope.cancel(reason="run over")
    averages = os.getloadavg()
    return {
        "sessions": n,
        "client": client,
        "client_ms": exited.get("ms"),
        "answered": exited.get("recorded"),
        "recorded": recorded(),
        **{key: round(value, 3) for key, value in marks.items()},
        "room_cpu_s": round(room_cpu, 3),
        "load": averages,
    }


async def main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="bench_goodbye_split_") as folder:
        for _ in range(args.runs):
            row = await one_run(args.sessions, args.client, Path(folder), args.profile)
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sessions", type=int, nargs="?", default=1000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--client", default="py")
    parser.add_argument("--profile", type=Path, default=None, help="cProfile stats file")
    trio.run(main, parser.parse_args(sys.argv[1:]))
