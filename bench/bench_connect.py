"""Measure opening many connections at once: trio.open_tcp_stream against our NetworkOpener.

Run: ``python bench/bench_connect.py [--connections 1000] [--host localhost] [--rounds 2]``.
Prints figures; not a test.

A listener on loopback; each round opens ``--connections`` connections at
once, each in its own task, as thousands of holders starting together do,
first with ``trio.open_tcp_stream`` (which looks the host up for every
connection, in a worker thread) and then with
:class:`~letagents_trio._http._net.NetworkOpener` (one lookup, shared and
cached, then Happy Eyeballs over the addresses). Printed per way and round:
the wall time and this process's CPU until every connection is open.
``--host 127.0.0.1`` measures an address literal, which needs no lookup.
"""

from __future__ import annotations

import argparse
import resource
import time
from functools import partial

import trio

from letagents_trio._http._net import NetworkOpener
from letagents_trio._http._request import split_url


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def _open_all(way: str, host: str, port: int, count: int) -> list[trio.abc.Stream]:
    opener = NetworkOpener()
    origin, _ = split_url(f"http://{host}:{port}/")
    streams: list[trio.abc.Stream] = []

    async def one() -> None:
        if way == "open_tcp_stream":
            streams.append(await trio.open_tcp_stream(host, port))
        else:
            streams.append(await opener.open_stream(origin))

    async with trio.open_nursery() as nursery:
        for _ in range(count):
            nursery.start_soon(one)
    return streams


async def main(count: int, host: str, rounds: int) -> None:
    async def parked(stream: trio.SocketStream) -> None:
        await trio.sleep_forever()

    async with trio.open_nursery() as nursery:
        listeners = await nursery.start(partial(trio.serve_tcp, parked, 0, host="127.0.0.1"))
        port = listeners[0].socket.getsockname()[1]
        print(f"{count} connections at once to {host}:{port}, {rounds} rounds alternated")
        for round_ in range(1, rounds + 1):
            for way in ("open_tcp_stream", "NetworkOpener"):
                cpu, started = _cpu(), time.perf_counter()
                streams = await _open_all(way, host, port, count)
                wall, cpu = time.perf_counter() - started, _cpu() - cpu
                print(f"round {round_}  {way:16s} wall {wall:.3f} s  CPU {cpu:.3f} s")
                for stream in streams:
                    await stream.aclose()
                await trio.sleep(0.5)
        nursery.cancel_scope.cancel(reason="measured")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--connections", type=int, default=1000)
    parser.add_argument("--host", default="localhost")
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    trio.run(main, args.connections, args.host, args.rounds)
