"""Benchmark: our client at scale against the reference room in its own process, both transports.

For each session count and each client, a fresh ``letagents-trio room
--memory`` on 127.0.0.1 (bench/_refroom.py) in its own process; this harness
registers N worker sessions there (100 per room, the room issues their ids
and tokens) and hands them to the client in a 0600 file; the client holds
them in a process of its own:

* ``py``: bench/_hold_py.py, the package's public API (RoomClient,
  open_connection_manager, HoldPolicy defaults: SSE), SIGTERM caught with
  trio.open_signal_receiver cancelling the scope around the manager;
* ``py-ws``: the same with ``WebSocketConnector``, exits sent
  over each socket (``py-plain``, ``py-ws-plain``: without the collector's
  pauses, and ``py-freeze`` are also accepted).

Measured per row, as bench_vs_node.py measures them (bench/_scale.py):

* all open: spawn until the client's ``open`` line (every holder OPEN), and
  the same from its ``holding`` line; the room's count of held streams is
  checked then (a note when it is not N);
* RSS held: the client's VmRSS after the idle window, and the room's;
* idle CPU: the client's and the room's CPU time (their threads', to the nanosecond,
  as in ``bench_vs_node.py``) over ``--idle-window``
  seconds (default 15), starting 1 s after all opened once the client has caught
  up (as in ``bench_vs_node.py``), while the room sends
  its heartbeats: ``: heartbeat`` on SSE, a WebSocket ping, each every 15 s,
  the room's default (``letagents-trio room`` has no option to change it), so
  each stream gets one in a 15 s window;
* gone after SIGTERM: SIGTERM until the process is reaped, and the CPU it
  spent from SIGTERM on;
* exits recorded by the room once settled (its admin-only
  ``GET /rooms/{room}/process-statistics``, summed over the rooms):
  recorded / N, with ``matched`` (the exit named the connection the room had
  open), ``answered`` (exits the client saw answered "recorded": an exit sent
  over a WebSocket gets no answer) and how many came over the socket.

    python bench/bench_vs_room.py [N ...] [--quick] [--clients py,py-ws]
        [--idle-window S] [--json FILE] [--retries K]

Default N: 1000 3000 10000. ``--quick``: N=300, a 5 s idle window. The room
and the client each need N open files and a margin: a row that would not fit
under the open-file limit (``ulimit -Hn``) is skipped with a note saying so.
Loopback only; every wait bounded, every child killed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import trio
from _peer import Child, HostLoad, client_argv, raise_nofile, wait_quiet
from _refroom import ReferenceRoom
from _scale import (
    Row,
    add_arguments,
    add_note,
    apply_defaults,
    hold_idle,
    note_foreign,
    open_bound,
    run_client,
    run_rows,
    say_goodbye,
    wait_holding,
)

from letagents_trio.room_server import RoomConfig

CLIENTS = ("py", "py-ws")
VARIANTS = ("py-plain", "py-ws-plain", "py-freeze")
CASE = "reference"
# The room's heartbeat interval, which its command line does not change.
HEARTBEAT = RoomConfig().heartbeat_interval
# Open files each process needs besides one per session (interpreter, logs, listeners).
FD_MARGIN = 512


async def run_row(client: str, sessions: int, args: argparse.Namespace, folder: Path) -> Row:
    row = Row(sessions=sessions, client=client, case=CASE, idle_window_s=args.idle_window)
    if sessions + FD_MARGIN > args.fd_limit:
        row.note = (
            f"skipped: the client and the room each need {sessions + FD_MARGIN} open files; "
            f"the limit is {args.fd_limit} (raise ulimit -Hn)"
        )
        return row
    if client != "py-ws" and 2 * sessions + FD_MARGIN > args.fd_limit:
        add_note(
            row,
            f"an SSE goodbye may need up to {2 * sessions} sockets in the room for a moment "
            f"(streams closing while exits connect); the limit is {args.fd_limit}",
        )
    tag = f"{sessions}-{client}"
    row.host_busy_before = await wait_quiet(args.quiet_below, args.quiet_within)
    async with ReferenceRoom.open(folder, tag) as room:
        sessions_file = await room.register(sessions)
        load = HostLoad()
        room_before = room.child.cpu_seconds() or 0.0
        argv = client_argv(client, room.url, sessions, sessions_file=sessions_file)

        async def measured(child: Child) -> None:
            await measure(child, room, row)

        log = folder / f"client-{tag}.log"
        child = await run_client(row, argv, log, measured, room=room.child)
        room_cpu = (room.child.cpu_seconds() or room_before) - room_before
        foreign = load.foreign(child.total_cpu(), room_cpu)
    note_foreign(row, foreign, child.started)
    return row


async def measure(child: Child, room: ReferenceRoom, row: Row) -> None:
    n = row.sessions
    if not await wait_holding(child, row):
        return
    bound = open_bound(n)
    opened = await child.next_event("open", "open_timeout", within=bound)
    if opened is None or opened["event"] != "open":
        add_note(row, f"not every session open after {bound:.0f} s")
    else:
        row.open_s = opened["_at"] - child.started
    row.open_cpu_s = child.cpu_seconds()
    row.rss_open = child.rss_bytes()
    held = (await room.statistics())["held"]
    if held != n:
        add_note(row, f"the room held {held}/{n} streams once all were open")
    opened_at = None if opened is None else float(opened["_at"])
    await hold_idle(child, row, room.child, opened_at=opened_at)
    await say_goodbye(child, row)
    exited = next((e for e in child.events if e.get("event") == "exited"), None)
    if exited is not None:
        row.exits_answered = int(exited["recorded"])
    counts = await room.settled_statistics()
    row.exits = counts["exits_recorded"]
    row.exits_matched = counts["exits_matched"]
    row.exits_announced = counts["exits_announced"]
    row.exits_over_socket = counts["exits_over_socket"]


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser, idle_window=HEARTBEAT, quick_idle_window=5.0)
    parser.add_argument("--clients", default=",".join(CLIENTS))
    args = parser.parse_args(argv)
    apply_defaults(args)
    args.clients = [c for c in args.clients.split(",") if c]
    for name in args.clients:
        if name not in CLIENTS + VARIANTS:
            parser.error(f"unknown client {name!r}")
    return args


async def main(args: argparse.Namespace) -> None:
    args.fd_limit = raise_nofile(2 * max(args.sessions) + FD_MARGIN)
    folder = Path(tempfile.mkdtemp(prefix="bench_vs_room_"))
    print(
        f"open-file limit {args.fd_limit} a process; room heartbeat every {HEARTBEAT:g} s "
        f"(its default); idle window {args.idle_window:g} s; logs in {folder}",
        flush=True,
    )
    plan = [(n, CASE, client) for n in args.sessions for client in args.clients]

    async def one(client: str, sessions: int, case: str) -> Row:
        return await run_row(client, sessions, args, folder)

    await run_rows(args, plan, one)


if __name__ == "__main__":
    trio.run(main, parse(sys.argv[1:]))
