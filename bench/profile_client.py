"""Profile our client holding N sessions against fastroom: where CPU and memory go (issue 10).

Three separate runs, each against a fresh fastroom.mjs,
each with bench/_hold_py.py started with ``--wait-go`` so a profiler can be in
place before the first hold():

* ``--py-spy`` (default on when py-spy is installed): ``py-spy record --pid``
  at ``--rate`` Hz, one recording for the open phase (go until the room's
  ``held_served`` is N), one over ``--idle-window`` s of holding (the room
  sends a keep-alive every ``--keepalive-ms``, default 5000) and one for the
  goodbye (SIGTERM until the process is gone). Sampling, so the figures are
  not inflated by the profiler; idle samples are not recorded, so samples ≈
  CPU time.
* ``--cprofile``: the driver's cProfile of the same two phases, for call
  counts per stream (the times are inflated by cProfile's overhead).
* ``--tracemalloc``: the driver's tracemalloc snapshot while holding
  (25 frames), per stream, then its census of the objects the cyclic GC
  tracks (by type, per stream) and the time of one full collection.

    python bench/profile_client.py [N] [--out DIR] [--rate HZ] [--no-py-spy]
        [--cprofile] [--tracemalloc] [--transport sse|websocket] [--hosted]

``--hosted``: the room served as a hosted one is (HTTPS with a throwaway
certificate authority the client trusts through ``SSL_CERT_FILE``, the API's
head and comments; bench_vs_node.py's ``hosted`` case).

Writes raw outputs to DIR (a fresh temporary folder by default) and prints a
summary: per phase, CPU samples by package of the innermost frame, then the
functions that appear in the most samples (inclusive), as ms of CPU per stream.
"""

from __future__ import annotations

import argparse
import pstats
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import trio
from _peer import HOLD_PY, Child, Room, hosted_tls, raise_nofile, wait_quiet

PY_SPY = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
# Innermost-frame file → the package that gets the sample's "self" time.
PACKAGES = (
    ("letagents_trio/", "letagents_trio"),
    ("httpx2/", "httpx2"),
    ("httpcore2/", "httpcore2"),
    ("h11/", "h11"),
    ("trio/_core/", "trio core (scheduler, cancel scopes, I/O manager)"),
    ("trio/", "trio (sockets, streams, sync)"),
    ("attr/", "attrs"),
    ("anyio/", "anyio"),
    ("sniffio/", "sniffio"),
    ("idna/", "idna"),
    ("json/", "json"),
    ("logging/", "logging"),
    ("ssl.py", "ssl"),
    ("socket.py", "socket"),
    ("enum.py", "enum"),
    ("contextlib.py", "contextlib"),
    ("urllib/", "urllib"),
)
# Frames present in nearly every sample, left out of the inclusive ranking.
ALWAYS = ("run (trio/_core/_run.py", "unrolled_run", "<module>", "main (trio", "_hold_py.py")


def package(frame: str) -> str:
    for marker, name in PACKAGES:
        if marker in frame:
            return name
    if "/python3." in frame or "(<frozen" in frame:
        return "stdlib (other)"
    return "other"


def short(frame: str) -> str:
    """``func (path/to/site-packages/pkg/mod.py:123)`` → ``func (pkg/mod.py)``."""
    name, _, where = frame.partition(" (")
    where = where.rstrip(")").rsplit(":", 1)[0]
    for cut in ("site-packages/", "/lib/python3.11/", "/work/wt/bench/", "/work/main/"):
        if cut in where:
            where = where.split(cut, 1)[1]
    return f"{name} ({where})"


def summarize_raw(path: Path, count: int, cpu: float | None, top: int = 45) -> str:
    """Self time by package and the top inclusive functions, per stream.

    Shares come from the samples; ms per stream scale them to ``cpu``, the
    phase's CPU seconds measured from /proc (sample counts alone are not a
    reliable clock in py-spy's non-blocking mode).
    """
    self_by_package: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in path.read_text().splitlines():
        stack, _, weight = line.rpartition(" ")
        if not stack or not weight.isdigit():
            continue
        samples = int(weight)
        frames = [f for f in stack.split(";") if " (" in f]
        if not frames:
            continue
        total += samples
        self_by_package[package(frames[-1])] += samples
        for name in {short(f) for f in frames}:
            if not any(a in name for a in ALWAYS):
                inclusive[name] += samples
    if not total:
        return f"{path.name}: no samples"
    cpu = cpu if cpu is not None else float("nan")
    per = cpu * 1000 / total / count  # ms of CPU per stream for one sample
    lines = [
        f"{path.name}: {total} samples; {cpu:.2f} s CPU (/proc) = {cpu * 1000 / count:.3f} "
        "ms per stream"
    ]
    lines.append("  self time by package (innermost frame):")
    for name, hits in self_by_package.most_common():
        lines.append(f"    {hits / total * 100:5.1f}%  {hits * per:6.3f} ms/stream  {name}")
    lines.append("  inclusive (stack contains):")
    for name, hits in inclusive.most_common(top):
        lines.append(f"    {hits / total * 100:5.1f}%  {hits * per:6.3f} ms/stream  {name}")
    return "\n".join(lines)


def summarize_pstats(path: Path, count: int, top: int = 40) -> str:
    # pstats keeps its table in an attribute typeshed does not declare.
    table: dict[tuple[str, int, str], tuple[int, int, float, float, object]]
    table = pstats.Stats(str(path)).stats  # type: ignore[attr-defined]
    rows: list[tuple[float, float, int, str]] = []
    for (file, line, func), (_cc, calls, tottime, cumtime, _callers) in table.items():
        rows.append((cumtime, tottime, calls, short(f"{func} ({file}:{line})")))
    lines = [f"{path.name}: calls per stream, tottime and cumtime in ms per stream (cProfile)"]
    for cumulative, title in ((True, "by cumulative"), (False, "by own time")):
        lines.append(f"  {title}:")
        ranked = sorted(rows, key=lambda r: r[0] if cumulative else r[1], reverse=True)
        for cum, tot, calls, name in ranked[:top]:
            lines.append(
                f"    {calls / count:8.2f} calls  {tot / count * 1000:7.3f} own  "
                f"{cum / count * 1000:7.3f} cum  {name}"
            )
    return "\n".join(lines)


def report(out: Path, names: tuple[str, ...], summary: Callable[[Path], str]) -> str:
    return "\n".join(summary(out / name) for name in names if (out / name).exists())


async def start_spy(pid: int, out: Path, rate: int, log: Path) -> Child:
    argv = [PY_SPY, "record", "--pid", str(pid), "--rate", str(rate), "--format", "raw"]
    argv += ["--output", str(out), "--nonblocking"]
    spy = await Child.spawn("py-spy", argv, log=log)
    await trio.sleep(1.0)  # attach before anything is measured
    return spy


async def stop_spy(spy: Child) -> None:
    spy.signal(signal.SIGINT)
    if await spy.wait_gone(20) is None:
        await spy.kill()


async def one_run(
    args: argparse.Namespace, kind: str, extra: list[str], out: Path
) -> dict[str, tuple[float, float | None]]:
    """Run the driver once; return (wall seconds, CPU seconds) by phase."""
    n = args.sessions
    busy = await wait_quiet(0.15, 120)
    if busy >= 0.15:
        print(f"note: the host was {busy:.0%} busy before the {kind} run", flush=True)
    tls = await hosted_tls(out) if args.hosted else None
    log = out / f"room-{kind}.log"
    async with Room.open(log, keepalive_ms=args.keepalive_ms, hosted=tls) as room:
        # Ended as bench_vs_node.py's clients end (and letagents-trio mcp):
        # nothing held is freed one object at a time after the goodbye.
        argv = [sys.executable, str(HOLD_PY), "--api", room.url, "--sessions", str(n)]
        argv += ["--transport", args.transport, "--wait-go", "--exit-at-once", *extra]
        if args.pause_collector:
            argv.append("--pause-collector")
        env = None if tls is None else tls.trust("py")
        log = out / f"client-{kind}.log"
        child = await Child.spawn("py", argv, log=log, stdin=True, env=env)
        spy: Child | None = None
        try:
            if await child.next_event("ready", within=60) is None:
                raise RuntimeError("the driver did not start")
            if kind == "py-spy":
                spy = await start_spy(child.pid, out / "open.raw", args.rate, out / "spy-open.log")
            started = time.perf_counter()
            cpu_go = child.cpu_seconds()
            await child.send_line("go")
            opened = await room.wait_held(n, within=30 + n * 0.01)
            if opened is None:
                raise RuntimeError("not every stream opened")
            phases = {"open": (opened - started, delta(cpu_go, child.cpu_seconds()))}
            await child.next_event("open", "open_timeout", within=30)
            if spy is not None:
                await stop_spy(spy)
                spy = None
            if kind == "tracemalloc":
                await child.next_event("census", within=120)
            await trio.sleep(1.0)
            if kind == "py-spy" and args.idle_window:
                spy = await start_spy(child.pid, out / "idle.raw", args.rate, out / "spy-idle.log")
                cpu_idle = child.cpu_seconds()
                await trio.sleep(args.idle_window)
                phases["idle"] = (args.idle_window, delta(cpu_idle, child.cpu_seconds()))
                await stop_spy(spy)
                spy = None
            if kind == "py-spy":
                spy = await start_spy(child.pid, out / "exit.raw", args.rate, out / "spy-exit.log")
            term = time.perf_counter()
            cpu_term = child.cpu_seconds()
            child.signal(signal.SIGTERM)
            gone = await child.wait_gone(30)
            phases["exit"] = ((gone or float("nan")) - term, delta(cpu_term, child.total_cpu()))
            if spy is not None and await spy.wait_gone(20) is None:
                await spy.kill()
            return phases
        finally:
            with trio.move_on_after(10, shield=True):
                if spy is not None:
                    await spy.kill()
                await child.kill()


def delta(before: float | None, after: float | None) -> float | None:
    return None if before is None or after is None else after - before


def describe(phases: dict[str, tuple[float, float | None]]) -> str:
    return ", ".join(
        f"{name} {wall:.2f} s wall / {'?' if cpu is None else f'{cpu:.2f}'} s CPU"
        for name, (wall, cpu) in phases.items()
    )


async def main(args: argparse.Namespace) -> None:
    raise_nofile(max(65536, 4 * args.sessions + 1024))
    out: Path = args.out
    n = args.sessions
    print(f"{n} sessions; outputs in {out}", flush=True)
    if args.py_spy:
        phases = await one_run(args, "py-spy", [], out)
        print(f"\n== py-spy at {args.rate} Hz ({describe(phases)}) ==")
        cpu = {f"{name}.raw": spent for name, (_, spent) in phases.items()}
        print(report(out, tuple(cpu), lambda p: summarize_raw(p, n, cpu[p.name])))
    if args.cprofile:
        phases = await one_run(args, "cprofile", ["--cprofile-dir", str(out)], out)
        print(f"\n== cProfile ({describe(phases)}; inflated by cProfile) ==")
        print(report(out, ("open.pstats", "exit.pstats"), lambda p: summarize_pstats(p, n)))
    if args.tracemalloc:
        heap, objects = out / "tracemalloc.txt", out / "census.txt"
        extra = ["--tracemalloc", str(heap), "--census", str(objects)]
        await one_run(args, "tracemalloc", extra, out)
        print("\n== tracemalloc while holding, then the GC-tracked objects ==")
        names = (heap.name, objects.name)
        print(report(out, names, lambda p: "\n".join(p.read_text().splitlines()[:70])))


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sessions", type=int, nargs="?", default=3000)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--rate", type=int, default=1000)
    parser.add_argument("--keepalive-ms", type=int, default=5000)
    parser.add_argument("--idle-window", type=float, default=10.0, help="py-spy idle phase (s)")
    parser.add_argument("--no-py-spy", dest="py_spy", action="store_false")
    parser.add_argument("--cprofile", action="store_true")
    parser.add_argument("--tracemalloc", action="store_true")
    parser.add_argument("--transport", choices=("sse", "websocket"), default="sse")
    parser.add_argument("--hosted", action="store_true", help="HTTPS and the API's head")
    parser.add_argument(
        "--pause-collector", action="store_true", help="as the benchmarks' py and py-ws rows"
    )
    args = parser.parse_args(argv)
    args.out = args.out or Path(tempfile.mkdtemp(prefix="profile_client_"))
    args.out.mkdir(parents=True, exist_ok=True)
    if args.py_spy and not Path(PY_SPY).exists():
        print("py-spy not found; skipping the sampling profile", file=sys.stderr)
        args.py_spy = False
    return args


if __name__ == "__main__":
    trio.run(main, parse(sys.argv[1:]))
