"""Benchmark: N holders against a room in another process, over loopback.

The real deployment shape: the room is another process (``letagents-trio room``,
in-memory store, started here as a subprocess), and this process holds N
process connections through one ``open_connection_manager`` over real sockets.
Prints how long opening took, this process's peak memory, and the wall time of
the goodbye (close every stream, announce every exit) with how many exits the
room recorded inside the 1.5 s deadline. Loopback only, bounded.

    python bench/bench_holders_loopback.py [N ...]   (default: 1000)
"""

from __future__ import annotations

import resource
import signal
import sys
import time

import trio
from _refroom import register_many
from bench_room_streams import TOKEN, start_room

from letagents_trio import AgentSession, HolderStatus, RoomClient, open_connection_manager


async def one_level(url: str, count: int) -> None:
    sessions = [AgentSession.from_json(s) for s in await register_many(url, 0, count, token=TOKEN)]
    async with RoomClient(url, owner_token=TOKEN) as client:
        async with open_connection_manager(client, owner_mode=True) as manager:
            started = time.perf_counter()
            holders = [manager.hold(s) for s in sessions]
            with trio.fail_after(120):
                for holder in holders:
                    await holder.wait_status(HolderStatus.OPEN)
            opened = time.perf_counter() - started
            goodbye = time.perf_counter()
            report = await manager.announce_exits()
            announced = time.perf_counter() - goodbye
    recorded = sum(1 for a in report if a.recorded)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"holders {count:6d}: open in {opened:6.2f} s, goodbye in {announced:5.2f} s, "
        f"exits recorded {recorded}/{count}, peak RSS {peak:6.1f} MiB"
    )


async def main(levels: list[int]) -> None:
    process, url = await start_room()
    try:
        for count in levels:
            await one_level(url, count)
    finally:
        process.send_signal(signal.SIGINT)
        with trio.move_on_after(10, shield=True):
            await process.wait()


if __name__ == "__main__":
    trio.run(main, [int(a) for a in sys.argv[1:]] or [1000])
