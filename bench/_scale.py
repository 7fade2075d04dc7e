"""The scale benchmark's rows, shared by bench_vs_node.py and bench_vs_room.py (not a benchmark).

A row is one client holding N sessions against one fresh room. Each
benchmark opens its room and waits for every session to be open its own way;
from there the steps are the same and live here:

* :func:`run_client`: the client in its own process, always killed and reaped;
  :func:`wait_holding`: its ``holding`` line (every session handed over);
* :func:`hold_idle`: 1 s after all opened, once the client has caught up
  (:func:`caught_up`), the client's (and the room's) CPU over the idle
  window, and their RSS at its end;
* :func:`say_goodbye`: SIGTERM, then the moment the process is reaped and
  the CPU it spent from SIGTERM on, its own ``exited`` line and its GC times;
* :func:`table`: the markdown table both print;
* :func:`add_arguments` and :func:`run_rows`: the options every row takes and
  the loop (a quiet host before each row, reruns of rows skewed by other load,
  one JSON line per row, the table at the end even when stopped).

Every wait here is bounded.
"""

from __future__ import annotations

import argparse
import json
import signal
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import httpx2
import trio
from _peer import Child, stopped_by_signals

__all__ = [
    "Row",
    "add_arguments",
    "add_note",
    "apply_defaults",
    "fmt_ratio",
    "hold_idle",
    "note_foreign",
    "open_bound",
    "run_client",
    "run_rows",
    "say_goodbye",
    "table",
    "wait_holding",
]

GONE_BOUND = 30.0
# Opening may take this long per session on top of OPEN_BOUND_BASE.
OPEN_BOUND_PER_SESSION = 0.01
OPEN_BOUND_BASE = 30.0
# The client prints "holding" once the interpreter started and every session is handed over.
HOLDING_BOUND = 60.0
# Rows during which other processes used more than this share of one core get a note.
FOREIGN_NOTE = 0.1
# Idle measurement starts this long after all opened (the last open events settle)...
SETTLE_BEFORE_IDLE = 1.0
# ...and once the client has caught up: the room counts a stream held when it
# wrote the answer, and a client that opened 10,000 at full speed may still be
# reading a backlog of them (1.8 s of CPU after the room held all 10,000, with
# not one heartbeat due). Caught up: under this share of a core over
# QUIET_STEP, which heartbeats every 5 s to 10,000 streams stay well under.
QUIET_SHARE = 0.3
QUIET_STEP = 0.5
# The catching up is waited for this long at most (then measured anyway, with a note).
QUIET_BOUND = 30.0


@dataclass
class Row:
    sessions: int
    client: str
    case: str
    note: str = ""
    holding_s: float | None = None
    open_s: float | None = None
    open_cpu_s: float | None = None
    rss_open: int | None = None
    rss_held: int | None = None
    idle_window_s: float = 0.0
    # From all open (the room's count) to the start of the idle window.
    idle_after_s: float | None = None
    idle_cpu_s: float | None = None
    gone_s: float | None = None
    self_exit_ms: float | None = None
    exit_cpu_s: float | None = None
    exits: int | None = None
    exits_matched: int | None = None
    exits_answered: int | None = None
    exit_span_s: float | None = None
    gc_open_ms: float | None = None
    gc_idle_ms: float | None = None
    gc_exit_ms: float | None = None
    host_busy_before: float | None = None
    foreign_cpu_s: float | None = None
    # The room's own figures, when the room is the one measured too (bench_vs_room.py).
    rss_room_held: int | None = None
    room_idle_cpu_s: float | None = None
    exits_announced: int | None = None
    exits_over_socket: int | None = None


def add_note(row: Row, note: str) -> None:
    row.note = f"{row.note}; {note}" if row.note else note


def skewed(row: Row) -> bool:
    """Other processes used more than FOREIGN_NOTE of a core during the row."""
    return "other processes used" in row.note


def note_foreign(row: Row, foreign: float, started: float) -> None:
    """Record the CPU other processes used during the row; note it when large."""
    row.foreign_cpu_s = foreign
    if foreign > FOREIGN_NOTE * (time.perf_counter() - started):
        add_note(row, f"other processes used {foreign:.1f} s of CPU during the row")


def open_bound(sessions: int) -> float:
    """How long all of ``sessions`` may take to open before the row says they did not."""
    return OPEN_BOUND_BASE + sessions * OPEN_BOUND_PER_SESSION


async def run_client(
    row: Row,
    argv: Sequence[str],
    log: Path,
    measure: Callable[[Child], Awaitable[None]],
    *,
    room: Child,
    env: Mapping[str, str] | None = None,
) -> Child:
    """Spawn the client (``env`` added to its environment), ``measure`` it, and kill
    and reap it whatever happened.

    A room that stops answering the harness (an HTTP or OS error) ends the
    measurement with a note.
    """
    child = await Child.spawn(row.client, argv, log=log, env=env)
    try:
        await measure(child)
    except (httpx2.HTTPError, OSError) as exc:
        gone = "the room died; " if await room.wait_gone(0) is not None else ""
        add_note(row, f"{gone}room status failed: {type(exc).__name__}")
    finally:
        with trio.move_on_after(10, shield=True):
            await child.kill()
    return child


async def wait_holding(child: Child, row: Row) -> bool:
    """Wait for the client's ``holding`` line; record when, or note that it never came."""
    holding = await child.next_event("holding", within=HOLDING_BOUND)
    if holding is None:
        add_note(row, f"no 'holding' line within {HOLDING_BOUND:.0f} s")
        return False
    row.holding_s = holding["_at"] - child.started
    return True


def idle_cpu(child: Child) -> float | None:
    """CPU seconds so far for an idle window: to the nanosecond where /proc has it, else ticks."""
    precise = child.thread_cpu_seconds()
    return child.cpu_seconds() if precise is None else precise


async def caught_up(child: Child) -> bool:
    """Wait for ``child`` under QUIET_SHARE of a core over QUIET_STEP (QUIET_BOUND at most)."""
    with trio.move_on_after(QUIET_BOUND):
        while True:
            before = idle_cpu(child)
            await trio.sleep(QUIET_STEP)
            after = idle_cpu(child)
            if before is None or after is None or after - before < QUIET_SHARE * QUIET_STEP:
                return True
    return False


async def hold_idle(
    child: Child, row: Row, room: Child | None = None, *, opened_at: float | None = None
) -> None:
    """Once caught up, 1 s after all opened at least: CPU over ``row.idle_window_s``, RSS after."""
    await trio.sleep(SETTLE_BEFORE_IDLE)
    if not await caught_up(child):
        add_note(row, f"still busy {QUIET_BOUND:.0f} s after all opened")
    if opened_at is not None:
        row.idle_after_s = time.perf_counter() - opened_at
    before = idle_cpu(child), None if room is None else idle_cpu(room)
    await trio.sleep(row.idle_window_s)
    after = idle_cpu(child), None if room is None else idle_cpu(room)
    if before[0] is not None and after[0] is not None:
        row.idle_cpu_s = after[0] - before[0]
    if before[1] is not None and after[1] is not None:
        row.room_idle_cpu_s = after[1] - before[1]
    row.rss_held = child.rss_bytes()
    row.rss_room_held = None if room is None else room.rss_bytes()


async def say_goodbye(child: Child, row: Row) -> float:
    """SIGTERM the client and measure its goodbye; return when SIGTERM was sent (time.time)."""
    before_term = child.cpu_seconds()
    term_at = time.perf_counter()
    term_wall = time.time()
    child.signal(signal.SIGTERM)
    gone = await child.wait_gone(GONE_BOUND)
    if gone is None:
        add_note(row, f"still there {GONE_BOUND:.0f} s after SIGTERM")
    else:
        row.gone_s = gone - term_at
        total = child.total_cpu()
        if total is not None and before_term is not None:
            row.exit_cpu_s = total - before_term
    exited = await child.next_event("exited", within=1)
    if exited is not None and exited.get("ms") is not None:
        row.self_exit_ms = float(exited["ms"])
    gc_ms = [sum(e["gc_ms"]) for e in child.events if "gc_ms" in e]
    if len(gc_ms) == 3:  # open, signal, exited: the Python driver only
        row.gc_open_ms, row.gc_idle_ms, row.gc_exit_ms = (
            gc_ms[0],
            gc_ms[1] - gc_ms[0],
            gc_ms[2] - gc_ms[1],
        )
    return term_wall


def fmt_s(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f} s"


def fmt_mb(value: int | None) -> str:
    return "—" if value is None else f"{value / 2**20:.0f} MiB"


def fmt_cpu(cpu: float | None, window: float) -> str:
    if cpu is None or not window:
        return "—"
    return f"{cpu / window * 100:.2f}% ({cpu:.3f} s)"


def _cells(r: Row) -> str:
    after = None if r.open_s is None or r.holding_s is None else r.open_s - r.holding_s
    rss = fmt_mb(r.rss_held)
    idle = fmt_cpu(r.idle_cpu_s, r.idle_window_s)
    if r.rss_room_held is not None:
        rss += f"; room {fmt_mb(r.rss_room_held)}"
    if r.room_idle_cpu_s is not None:
        idle += f"; room {fmt_cpu(r.room_idle_cpu_s, r.idle_window_s)}"
    exits = "—"
    if r.exits is not None:
        exits = f"{r.exits}/{r.sessions} ({r.exits_matched}/{r.exits_answered})"
        if r.exits_over_socket is not None:
            exits += f", {r.exits_over_socket} over the socket"
    return (
        f"{fmt_s(r.open_s)} / {fmt_s(after)} | {rss} | {idle} "
        f"| {fmt_s(r.gone_s)} ({fmt_s(r.exit_cpu_s)}) | {exits} | {fmt_s(r.foreign_cpu_s)}"
    )


def table(rows: list[Row]) -> str:
    head = (
        "| sessions | client | case | all open (from spawn / from holding) | RSS held "
        "| idle CPU | process gone after SIGTERM (CPU) | exits recorded (matched/answered) "
        "| other CPU on host |"
    )
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        if r.note.startswith("skipped"):
            lines.append(f"| {r.sessions:,} | {r.client} | {r.case} | {r.note} ||||||")
        else:
            lines.append(f"| {r.sessions:,} | {r.client} | {r.case} | {_cells(r)} |")
    notes = [
        f"- {r.sessions} {r.client} {r.case}: {r.note}"
        for r in rows
        if r.note and not r.note.startswith("other processes used")
    ]
    return "\n".join(lines + (["", *notes] if notes else []))


def fmt_ratio(value: float | None, reference: float | None) -> str:
    """``value / reference`` as ``0.42×``; a dash when either is missing or the reference is 0."""
    if value is None or not reference:
        return "—"
    return f"{value / reference:.2f}×"


def add_arguments(
    parser: argparse.ArgumentParser, *, idle_window: float, quick_idle_window: float
) -> None:
    """The options every scale benchmark takes (``--quick``: N=300, a shorter idle window)."""
    parser.add_argument("sessions", type=int, nargs="*", help="session counts (1000 3000 10000)")
    parser.add_argument(
        "--quick", action="store_true", help=f"N=300 and a {quick_idle_window:g} s idle window"
    )
    parser.add_argument(
        "--idle-window", type=float, default=None, help=f"seconds ({idle_window:g})"
    )
    parser.add_argument("--json", type=Path, default=None, help="also write the rows here")
    parser.add_argument(
        "--quiet-below",
        type=float,
        default=0.15,
        help="before each row, wait for the host to be less busy than this share of all cores",
    )
    parser.add_argument("--quiet-within", type=float, default=120.0, help="...at most this long")
    parser.add_argument(
        "--retries",
        type=int,
        default=2,
        help="rerun rows skewed by other load (keep the best)",
    )
    parser.set_defaults(idle_windows=(idle_window, quick_idle_window))


def apply_defaults(args: argparse.Namespace) -> None:
    """Fill the session counts and the idle window from ``--quick``."""
    if not args.sessions:
        args.sessions = [300] if args.quick else [1000, 3000, 10000]
    if args.idle_window is None:
        args.idle_window = args.idle_windows[1] if args.quick else args.idle_windows[0]


async def run_rows(
    args: argparse.Namespace,
    plan: Iterable[tuple[int, str, str]],
    run_row: Callable[[str, int, str], Awaitable[Row]],
    *,
    footer: Callable[[list[Row]], str] | None = None,
) -> None:
    """Run ``run_row(client, sessions, case)`` for each of ``plan`` (best of --retries
    while skewed by other load); print each row as JSON and, at the end (even when
    stopped by a signal), the table and ``footer(rows)`` when it says something;
    write ``--json``."""
    rows: list[Row] = []
    try:
        async with stopped_by_signals():
            for sessions, case, client in plan:
                row = await run_row(client, sessions, case)
                for _ in range(args.retries):
                    if not skewed(row):
                        break
                    print(json.dumps(asdict(row)), "(skewed; again)", flush=True)
                    again = await run_row(client, sessions, case)
                    row = min(row, again, key=lambda r: r.foreign_cpu_s or 0.0)
                rows.append(row)
                print(json.dumps(asdict(row)), flush=True)
    finally:
        print()
        print(table(rows))
        extra = footer(rows) if footer is not None else ""
        if extra:
            print()
            print(extra)
        if args.json:
            args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n")
