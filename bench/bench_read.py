"""Measure one wake-up of a held stream: trio's SocketStream.receive_some against our read_some.

Run: ``python bench/bench_read.py [--sockets 2000] [--rounds 10]``. Prints figures; not a test.

N socket pairs, a reader task parked on one end of each (as a holder waits
for its next heartbeat or ping); each round writes one byte to every pair and
waits until every reader has read it and parked again. Printed per read: the
CPU of the round divided by N (the write of the byte included, the same for
both), and the objects the cyclic GC tracks per parked reader, which every
full pass walks. Both ways of reading are measured in this one process, one
after the other.
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import time
from collections.abc import Awaitable, Callable

import trio
import trio.testing

from letagents_trio._http import read_some

Read = Callable[[trio.SocketStream], Awaitable[bytes]]


async def _through_socketstream(stream: trio.SocketStream) -> bytes:
    return bytes(await stream.receive_some(4096))


async def _through_read_some(stream: trio.SocketStream) -> bytes:
    return await read_some(stream, 4096)


async def measure(read: Read, sockets: int, rounds: int) -> tuple[float, float]:
    """(CPU µs per wake-up and read, GC-tracked objects per parked reader)."""
    pairs = [trio.socket.socketpair() for _ in range(sockets)]
    streams = [trio.SocketStream(ours) for ours, _ in pairs]
    woken = 0
    all_read = trio.Event()

    async def reader(stream: trio.SocketStream) -> None:
        nonlocal woken
        while await read(stream):
            woken += 1
            if woken == sockets:
                all_read.set()

    gc.collect()
    before = len(gc.get_objects())
    cpu = 0.0
    async with trio.open_nursery() as nursery:
        for stream in streams:
            nursery.start_soon(reader, stream)
        await trio.testing.wait_all_tasks_blocked()
        gc.collect()
        parked = (len(gc.get_objects()) - before) / sockets
        for _ in range(rounds):
            woken, all_read = 0, trio.Event()
            started = time.process_time()
            for _ours, theirs in pairs:
                os.write(theirs.fileno(), b"x")
            await all_read.wait()
            cpu += time.process_time() - started
            await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    for ours, theirs in pairs:
        ours.close()
        theirs.close()
    return cpu / rounds / sockets * 1e6, parked


async def main(sockets: int, rounds: int) -> None:
    print(f"{sockets} held sockets, {rounds} rounds of one byte each (CPU includes the write)")
    ways = {"SocketStream.receive_some": _through_socketstream, "read_some": _through_read_some}
    cpus: dict[str, list[float]] = {name: [] for name in ways}
    objects: dict[str, float] = {}
    # Alternated, so that neither always runs on a heap the other has grown.
    for name in [*ways, *reversed(ways)] * 2:
        cpu, objects[name] = await measure(ways[name], sockets, rounds)
        cpus[name].append(cpu)
    for name, samples in cpus.items():
        print(
            f"  {name:26} {statistics.median(samples):5.1f} µs per wake-up and read"
            f" (median of {len(samples)}), {objects[name]:4.1f} GC objects per parked reader"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sockets", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=10)
    args, _ = parser.parse_known_args()
    trio.run(main, args.sockets, args.rounds)
