"""Benchmark: letagents-trio side by side with the Node client (0.12.31), over loopback.

For each session count, each case and each client, a fresh fake room
(peer/fastroom.mjs, Node's C HTTP parser) and the client in its own process:

* ``py``: bench/_hold_py.py, the package's public API (RoomClient,
  open_connection_manager, HoldPolicy defaults, the collector's pauses opted
  in as an operator of thousands of sessions would), SIGTERM caught with
  trio.open_signal_receiver cancelling the scope around the manager, the
  process ended at once once the goodbye is done (``--exit-at-once``, as
  ``letagents-trio mcp`` ends and as hold.mjs ends with ``process.exit``);
* ``node``: peer/node/hold.mjs, the unmodified Node process-connection module;
* ``py-ws`` (only when asked for with ``--clients``): ``py`` with
  ``WebSocketConnector``, the WebSocket form fastroom.mjs also
  serves (exits go over each socket; the room counts them with the POSTs);
* ``py-plain``, ``py-ws-plain`` (only when asked for with ``--clients``):
  ``py`` and ``py-ws`` without the collector's pauses (the library's default);
* ``py-freeze`` (only when asked for with ``--clients``): ``py`` calling
  gc.freeze() once every stream is open, to show what the cyclic GC costs.

Measured per row:

* all open: spawn until the room's ``held_served`` reaches N (``/_status``
  polled every 20 ms by this harness), and the same from the client's
  ``holding`` line (every session handed over, so interpreter start-up excluded);
* RSS held: the client's VmRSS after the idle window;
* idle CPU: the CPU time of the client's threads (/proc/PID/task/*/schedstat, to the
  nanosecond; ticks of /proc/PID/stat where there is none) over ``--idle-window``
  seconds (default 10) while the room sends ``: keep-alive`` every
  ``--keepalive-ms`` (default 5000, so every stream gets two in the window),
  starting 1 s after all opened, and not before the client has caught up
  with the streams the room already holds (under 30 % of a core over 0.5 s;
  ``idle_after_s`` in the JSON says when the window began);
* gone after SIGTERM: SIGTERM until the process is reaped (pidfd, wait4), and
  the CPU it spent from SIGTERM on (wait4's rusage minus /proc before);
* exits recorded by the room once settled: received / N, with
  ``exits_matched`` (named the current connection) and ``exits_answered``
  (answered while the client still waited).

Cases: ``healthy``; ``slow`` (``--exit-delay-ms 800``: what a remote room
answers, so only ``answered`` counts); ``blackhole`` (``--mode blackhole-exit``,
exits received, never answered: the deadline must end the process). Each has a
hosted form, ``hosted``, ``hosted-slow`` and ``hosted-blackhole``: the room
served as a hosted letagents room is (``--as-api --tls-cert … --tls-key …``:
HTTPS, the stream's connection kept alive, ``: connected`` then
``: heartbeat`` comments), with a throwaway certificate authority made for the
run (the ``openssl`` command) that each client trusts as its users would:
``SSL_CERT_FILE`` for ours, ``NODE_EXTRA_CA_CERTS`` for Node.

After the table, a second one gives each Python row's all open, RSS held and
idle CPU as ratios to Node's row of the same N and case (when Node ran), the
form the performance targets take.

    python bench/bench_vs_node.py [N ...] [--quick] [--no-node] [--cases healthy,slow]
        [--clients py,node] [--idle-window S] [--keepalive-ms MS] [--json FILE]

Default N: 1000 3000 10000. ``--quick``: N=300, a 2 s idle window. Node's rows
are skipped with a note when ``node`` is missing (the room needs node too, so
then nothing runs). Loopback only; every wait bounded, every child killed.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import trio
from _peer import (
    NODE,
    Child,
    HostedTLS,
    HostLoad,
    Room,
    client_argv,
    hosted_tls,
    raise_nofile,
    wait_quiet,
)
from _scale import (
    Row,
    add_arguments,
    add_note,
    apply_defaults,
    fmt_ratio,
    hold_idle,
    note_foreign,
    open_bound,
    run_client,
    run_rows,
    say_goodbye,
    wait_holding,
)

# case: (the room's mode, its exit delay in ms, served as a hosted room)
CASES = {
    "healthy": ("served", 0, False),
    "slow": ("served", 800, False),
    "blackhole": ("blackhole-exit", 0, False),
    "hosted": ("served", 0, True),
    "hosted-slow": ("served", 800, True),
    "hosted-blackhole": ("blackhole-exit", 0, True),
}
CLIENTS = ("py", "node")
# Also accepted by --clients: the Python driver with gc.freeze() after opening.
VARIANTS = ("py-ws", "py-plain", "py-ws-plain", "py-freeze")


async def run_row(
    client: str, sessions: int, case: str, args: argparse.Namespace, logs: Path
) -> Row:
    row = Row(sessions=sessions, client=client, case=case, idle_window_s=args.idle_window)
    if client == "node" and NODE is None:
        row.note = "skipped: node is not installed"
        return row
    mode, delay, hosted = CASES[case]
    tls: HostedTLS | None = args.tls if hosted else None
    tag = f"{sessions}-{client}-{case}"
    row.host_busy_before = await wait_quiet(args.quiet_below, args.quiet_within)
    load = HostLoad()
    async with Room.open(
        logs / f"room-{tag}.log",
        keepalive_ms=args.keepalive_ms,
        mode=mode,
        exit_delay_ms=delay,
        hosted=tls,
    ) as room:
        argv = client_argv(client, room.url, sessions)

        async def measured(child: Child) -> None:
            await measure(child, room, row)

        log = logs / f"client-{tag}.log"
        env = None if tls is None else tls.trust(client)
        child = await run_client(row, argv, log, measured, room=room.child, env=env)
        foreign = load.foreign(child.total_cpu(), room.child.cpu_seconds())
    note_foreign(row, foreign, child.started)
    return row


async def measure(child: Child, room: Room, row: Row) -> None:
    n = row.sessions
    if not await wait_holding(child, row):
        return
    bound = open_bound(n)
    opened = await room.wait_held(n, within=bound)
    if opened is None:
        served = (await room.status())["held_served"]
        add_note(row, f"only {served}/{n} open after {bound:.0f} s")
    else:
        row.open_s = opened - child.started
    row.open_cpu_s = child.cpu_seconds()
    row.rss_open = child.rss_bytes()
    await hold_idle(child, row, opened_at=opened)
    term_wall = await say_goodbye(child, row)
    status = await room.settled_status()
    row.exits = status["exits"]
    row.exits_matched = status["exits_matched"]
    row.exits_answered = status["exits_answered"]
    if status["first_exit_wall"] is not None:
        row.exit_span_s = status["last_exit_wall"] - term_wall


def ratios(rows: list[Row]) -> str:
    """Each Python row against Node's row of the same N and case, as the targets read.

    Empty when no row has a Node row beside it.
    """
    node = {(r.sessions, r.case): r for r in rows if r.client == "node"}
    lines = [
        "| sessions | client | case | all open / Node's | RSS held / Node's | idle CPU / Node's |",
        "|" + "---|" * 6,
    ]
    for r in rows:
        ref = node.get((r.sessions, r.case))
        if r.client == "node" or ref is None:
            continue
        lines.append(
            f"| {r.sessions:,} | {r.client} | {r.case} | {fmt_ratio(r.open_s, ref.open_s)} "
            f"| {fmt_ratio(r.rss_held, ref.rss_held)} | {fmt_ratio(r.idle_cpu_s, ref.idle_cpu_s)} |"
        )
    return "\n".join(lines) if len(lines) > 2 else ""


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_arguments(parser, idle_window=10.0, quick_idle_window=2.0)
    parser.add_argument("--no-node", action="store_true", help="skip the Node client")
    parser.add_argument("--clients", default=",".join(CLIENTS))
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--keepalive-ms", type=int, default=5000)
    args = parser.parse_args(argv)
    apply_defaults(args)
    args.clients = [c for c in args.clients.split(",") if c and not (args.no_node and c == "node")]
    args.cases = [c for c in args.cases.split(",") if c]
    for name in args.clients:
        if name not in CLIENTS + VARIANTS:
            parser.error(f"unknown client {name!r}")
    for name in args.cases:
        if name not in CASES:
            parser.error(f"unknown case {name!r}")
    return args


async def main(args: argparse.Namespace) -> None:
    limit = raise_nofile(max(65536, 4 * max(args.sessions) + 1024))
    logs = Path(tempfile.mkdtemp(prefix="bench_vs_node_"))
    print(
        f"open-file limit {limit}; keep-alive every {args.keepalive_ms} ms; "
        f"idle window {args.idle_window:g} s; logs in {logs}",
        flush=True,
    )
    if NODE is None:
        print("node is not installed: the fake room (fastroom.mjs) needs it; nothing to run")
        return
    # One certificate authority for every hosted row of the run.
    hosted = any(CASES[case][2] for case in args.cases)
    args.tls = await hosted_tls(logs) if hosted else None
    plan = [
        (n, case, client) for n in args.sessions for case in args.cases for client in args.clients
    ]

    async def one(client: str, sessions: int, case: str) -> Row:
        return await run_row(client, sessions, case, args, logs)

    await run_rows(args, plan, one, footer=ratios)


if __name__ == "__main__":
    trio.run(main, parse(sys.argv[1:]))
