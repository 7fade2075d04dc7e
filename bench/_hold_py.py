"""The Python counterpart of peer/node/hold.mjs: hold N worker sessions, announce on SIGTERM.

Uses only the public names of letagents_trio, the way an embedder would: one
RoomClient, one open_connection_manager, and SIGTERM/SIGINT handled with
trio.open_signal_receiver cancelling the scope around the manager (whose block
then closes every stream and announces every exit within the exit deadline).

    python bench/_hold_py.py --api URL (--room R --sessions N | --sessions-file FILE)
        [--jitter J] [--transport T] [--pause-collector] [--wait-go] [--tracemalloc FILE]
        [--census FILE] [--cprofile-dir DIR] [--gc-freeze] [--trim-heap] [--heap-stats]

Sessions are session_1..N with tokens tok_1..N, as hold.mjs stores them, or
the sessions a room registered: ``--sessions-file`` names a JSON list of the
room's registration answers (``session_id``, ``session_token``, ``room_id``),
a file only its owner may read (mode 0600; tokens never go on a command line).
One JSON line per event on stdout:

    {"event":"ready"}                      with --wait-go: waiting for a line on stdin
    {"event":"holding","n":N}              every session handed to the manager
    {"event":"open","n":N,"ms":M,...}      every holder OPEN, M ms after "holding"
    {"event":"tracemalloc",...}            with --tracemalloc: traced bytes while holding
    {"event":"census",...}                 with --census: GC-tracked objects, a full collection
    {"event":"trimmed","ms":M}             with --trim-heap: the C heap's free pages given back
    {"event":"heap","rss":B,...}           with --heap-stats: where memory is, 1 s after "open"
    {"event":"signal","signal":"SIGTERM"}
    {"event":"exited","ms":M,"recorded":K,"errors":{...}}
                                           M ms from the signal to the manager's block left

--exit-at-once: the program keeps its holders to the end and, once "exited" is
written, ends the process at once (``os._exit``), as ``letagents-trio mcp`` ends:
nothing held is freed one object at a time, and the interpreter's teardown is
skipped. A program's choice; the library never ends a process.

"open", "signal" and "exited" also carry gc_ms and gc_runs: the wall time spent in
the cyclic garbage collector so far, and its runs, per generation.

--cprofile-dir writes open.pstats (hold() calls until every holder is OPEN) and
exit.pstats (signal until the block is left). Bench helper, not part of the package.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from types import ModuleType

import trio

from letagents_trio import (
    AgentSession,
    AutoConnector,
    ConnectionManager,
    HolderStatus,
    HoldPolicy,
    ProcessConnector,
    RoomClient,
    SSEConnector,
    WebSocketConnector,
    open_connection_manager,
)

# The connector each --transport names.
CONNECTORS = {"sse": SSEConnector, "websocket": WebSocketConnector, "auto": AutoConnector}


def emit(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


class GCClock:
    """Wall time spent in the cyclic garbage collector, by generation (gc.callbacks)."""

    def __init__(self) -> None:
        self.seconds = [0.0, 0.0, 0.0]
        self.runs = [0, 0, 0]
        self._started = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
        else:
            generation = info["generation"]
            self.seconds[generation] += time.perf_counter() - self._started
            self.runs[generation] += 1

    def report(self) -> dict[str, object]:
        return {"gc_ms": [round(s * 1000, 1) for s in self.seconds], "gc_runs": list(self.runs)}


GC = GCClock()
# With --exit-at-once: every holder, kept until the process ends.
KEPT: list[object] = []


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--api", required=True)
    parser.add_argument("--room", default="bench/room")
    parser.add_argument("--sessions", type=int, default=None, help="session_1..N")
    parser.add_argument(
        "--sessions-file",
        type=Path,
        default=None,
        help="a 0600 JSON list of registered sessions (id, token, room), instead of --sessions",
    )
    parser.add_argument("--jitter", type=float, default=0.0)
    parser.add_argument("--open-timeout", type=float, default=300.0)
    parser.add_argument("--wait-go", action="store_true")
    parser.add_argument("--tracemalloc", type=Path, default=None)
    parser.add_argument("--cprofile-dir", type=Path, default=None)
    parser.add_argument("--census", type=Path, default=None)
    parser.add_argument(
        "--transport",
        choices=("sse", "websocket", "auto"),
        default="sse",
        help="the connector: SSE, WebSocket (our extension) or WebSocket first",
    )
    parser.add_argument(
        "--pause-collector",
        action="store_true",
        help="open_connection_manager(pause_collector=True): an operator's opt-in",
    )
    parser.add_argument(
        "--gc-freeze",
        action="store_true",
        help="gc.freeze() once every stream is open (an embedder's mitigation, for comparison)",
    )
    parser.add_argument(
        "--exit-at-once",
        action="store_true",
        help="keep the holders and end with os._exit once the goodbye is done (as the MCP server)",
    )
    parser.add_argument(
        "--trim-heap",
        action="store_true",
        help="glibc's malloc_trim(0) once every stream is open: an operator's opt-in",
    )
    parser.add_argument(
        "--heap-stats",
        action="store_true",
        help="RSS, the C heap (in use, free inside) and Python's blocks once every stream is open",
    )
    args = parser.parse_args(argv)
    if (args.sessions is None) == (args.sessions_file is None):
        parser.error("give exactly one of --sessions and --sessions-file")
    # Read before trio starts: a file read is blocking.
    args.registered = None if args.sessions_file is None else read_sessions(args.sessions_file)
    return args


def import_probes() -> ModuleType:
    """bench/_probes.py, imported only when a flag asks for a probe (its imports are start-up)."""
    import _probes

    return _probes


def read_sessions(path: Path) -> list[AgentSession]:
    """The registered sessions in ``path``, which no one but its owner may read."""
    if path.stat().st_mode & 0o077:
        raise SystemExit(f"{path} holds session tokens: it must be mode 0600")
    return [AgentSession.from_json(item) for item in json.loads(path.read_text())]


async def cancel_on_signal(scope: trio.CancelScope, signalled: list[float]) -> None:
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
        async for signum in signals:
            signalled.append(time.perf_counter())
            emit(event="signal", signal=signal.Signals(signum).name, **GC.report())
            scope.cancel()
            return


async def hold_all(manager: ConnectionManager, args: argparse.Namespace) -> None:
    sessions: list[AgentSession] | None = args.registered
    if sessions is None:
        sessions = [
            AgentSession(
                session_id=f"session_{i}",
                session_token=f"tok_{i}",
                room_id=args.room,
                session_kind="worker",
            )
            for i in range(1, args.sessions + 1)
        ]
    looking = args.tracemalloc or args.census or args.heap_stats
    probes = import_probes() if looking or args.trim_heap or args.cprofile_dir else None
    profile = probes.profiler() if probes and args.cprofile_dir else None
    if probes and args.tracemalloc:
        probes.start_tracing()
    if profile:
        profile.enable()
    holders = [manager.hold(session) for session in sessions]
    if args.exit_at_once:
        KEPT.extend(holders)
    emit(event="holding", n=len(holders))
    started = time.perf_counter()
    with trio.move_on_after(args.open_timeout) as scope:
        for holder in holders:
            assert holder is not None
            await holder.wait_status(HolderStatus.OPEN)
    if profile and args.cprofile_dir:
        profile.disable()
        profile.dump_stats(args.cprofile_dir / "open.pstats")
    if scope.cancelled_caught:
        emit(event="open_timeout", n=len(holders))
        return
    elapsed = round((time.perf_counter() - started) * 1000, 1)
    emit(event="open", n=len(holders), ms=elapsed, **GC.report())
    if probes is not None:
        if args.trim_heap:
            emit(event="trimmed", **probes.trim_heap())
        if looking:
            # Let the open events (connection ids) arrive before looking.
            await trio.sleep(1)
        if args.heap_stats:
            emit(event="heap", n=len(holders), **probes.heap_stats())
        if args.tracemalloc:
            emit(event="tracemalloc", **probes.snapshot_heap(args.tracemalloc, len(holders)))
        if args.census:
            emit(event="census", **probes.census(args.census, len(holders)))
    if args.gc_freeze:
        gc.freeze()
        emit(event="gc_frozen", objects=gc.get_freeze_count())


async def main(args: argparse.Namespace) -> None:
    if args.wait_go:
        emit(event="ready")
        await trio.to_thread.run_sync(sys.stdin.readline)
    signalled: list[float] = []
    profile = import_probes().profiler() if args.cprofile_dir else None
    policy = HoldPolicy(jitter=args.jitter)
    held: ConnectionManager | None = None
    with trio.CancelScope() as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(cancel_on_signal, scope, signalled)
            async with RoomClient(args.api) as client:
                connector: ProcessConnector = CONNECTORS[args.transport](client)
                async with open_connection_manager(
                    client,
                    policy=policy,
                    connector=connector,
                    owner_mode=True,
                    pause_collector=args.pause_collector,
                ) as manager:
                    held = manager
                    try:
                        await hold_all(manager, args)
                        await trio.sleep_forever()
                    finally:
                        # The goodbye runs as this block is left: profile it from here.
                        if profile:
                            profile.enable()
    if profile and args.cprofile_dir:
        profile.disable()
        profile.dump_stats(args.cprofile_dir / "exit.pstats")
    elapsed = (time.perf_counter() - signalled[0]) * 1000 if signalled else None
    # A second call sends nothing and returns the first call's report.
    report = await held.announce_exits() if held is not None else ()
    errors = Counter(a.error for a in report if a.error)
    emit(
        event="exited",
        ms=None if elapsed is None else round(elapsed, 1),
        recorded=sum(1 for a in report if a.recorded),
        errors=dict(errors),
        **GC.report(),
    )


if __name__ == "__main__":
    arguments = parse(sys.argv[1:])
    trio.run(main, arguments)
    if arguments.exit_at_once:
        sys.stdout.flush()
        os._exit(0)
