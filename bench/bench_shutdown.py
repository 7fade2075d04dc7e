"""Benchmark: shutting down N holders against the in-memory room (real clock).

Opens N process connections through the in-process FakeRoom (the reference
room, no sockets), waits until every one is open and named, then leaves the
manager's block and measures, on the wall clock, how long closing every
stream and announcing every exit takes. Also prints the peak memory of the
whole run (resource.getrusage) and the Python-heap peak traced during the
hold. Prints figures; asserts nothing about speed.

    python bench/bench_shutdown.py [N]   (default 1000)
"""

from __future__ import annotations

import math
import resource
import sys
import time
import tracemalloc

import trio

from letagents_trio import EventKind, HolderStatus, open_connection_manager
from letagents_trio.testing import open_fake_room


async def run(count: int) -> None:
    async with open_fake_room() as room:
        sessions = [
            await room.add_worker(room_id=f"room_{i % 20}", display_name=f"Worker{i}")
            for i in range(count)
        ]
        tracemalloc.start()
        opened = time.perf_counter()
        async with room.client() as client:
            async with open_connection_manager(client, owner_mode=True) as manager:
                with manager.subscribe(math.inf) as events:
                    for session in sessions:
                        manager.hold(session)
                    named = 0
                    async for event in events:
                        if event.kind is EventKind.CONNECTION:
                            named += 1
                            if named == count:
                                break
                held = time.perf_counter()
                assert manager.statistics().by_status[HolderStatus.OPEN] == count
                _, heap_peak = tracemalloc.get_traced_memory()
                tracemalloc.stop()
                started = time.perf_counter()
                report = await manager.announce_exits()
                announced = time.perf_counter()
        recorded = sum(1 for a in report if a.recorded)
    peak_rss_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(f"holders:                         {count}")
    print(f"open and named, wall time:       {held - opened:.3f} s")
    print(f"shutdown (close + announce):     {announced - started:.3f} s")
    print(f"exits recorded by the room:      {recorded}/{count}")
    print(f"python heap peak while holding:  {heap_peak / 2**20:.1f} MiB")
    print(f"process peak RSS (whole run):    {peak_rss_kib / 1024:.1f} MiB")


if __name__ == "__main__":
    trio.run(run, int(sys.argv[1]) if len(sys.argv) > 1 else 1000)
