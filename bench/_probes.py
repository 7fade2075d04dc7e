"""The probes bench/_hold_py.py runs on request: memory, objects, the C heap, a profiler.

Each flag of _hold_py.py that looks inside the process (``--tracemalloc``,
``--census``, ``--trim-heap``, ``--heap-stats``, ``--cprofile-dir``) uses this
module, which is imported only then: the modules it needs (ctypes, tracemalloc,
cProfile) would otherwise lengthen every client's start, which the benchmarks'
*all open* counts. Each probe returns the fields of the JSON line the program
writes for it. Bench helper, not part of the package.
"""

from __future__ import annotations

import cProfile
import ctypes
import ctypes.util
import gc
import sys
import time
import tracemalloc
from collections import Counter
from pathlib import Path

__all__ = ["census", "heap_stats", "profiler", "snapshot_heap", "start_tracing", "trim_heap"]


def profiler() -> cProfile.Profile:
    """A cProfile profiler, not yet enabled."""
    return cProfile.Profile()


def start_tracing() -> None:
    """Trace Python's allocations from now on, 25 frames deep."""
    tracemalloc.start(25)


def snapshot_heap(path: Path, count: int) -> dict[str, object]:
    """Write the top allocation sites of the traced heap while holding; stop tracing."""
    snapshot = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(False, tracemalloc.__file__)]
    )
    total = sum(stat.size for stat in snapshot.statistics("filename"))
    lines = [f"traced {total} bytes while holding {count} streams ({total / count:.0f} B/stream)"]
    for key in ("filename", "lineno", "traceback"):
        lines.append(f"\n== top by {key} ==")
        for stat in snapshot.statistics(key)[: 12 if key == "traceback" else 30]:
            lines.append(
                f"{stat.size / count:9.0f} B/stream {stat.count / count:7.2f} blocks/stream "
                f"{stat.traceback[0]}"
            )
            if key == "traceback":
                lines.extend(f"        {frame}" for frame in stat.traceback.format()[-16:])
    path.write_text("\n".join(lines) + "\n")
    tracemalloc.stop()
    return {"bytes": total, "per_stream": round(total / count)}


def census(path: Path, count: int) -> dict[str, object]:
    """Write the objects the cyclic GC tracks, by type, per stream; time a full collection."""
    objects = gc.get_objects()
    by_type = Counter(type(o).__qualname__ for o in objects)
    started = time.perf_counter()
    gc.collect()
    full = time.perf_counter() - started
    lines = [
        f"{len(objects)} GC-tracked objects while holding {count} streams "
        f"({len(objects) / count:.1f} per stream); one full gc.collect(): {full * 1000:.0f} ms"
    ]
    lines += [f"{n / count:8.2f} per stream  {name}" for name, n in by_type.most_common(40)]
    path.write_text("\n".join(lines) + "\n")
    return {"objects": len(objects), "full_collect_ms": round(full * 1000, 1)}


def trim_heap() -> dict[str, object]:
    """Give the free pages inside the C heap back to the system, once (glibc's malloc_trim).

    Opening thousands of TLS streams at once leaves the handshakes' passing
    buffers as free holes between what the streams keep; the pages stay
    resident until trimmed. An operator's setting, as docs/performance.md
    says: the library never does this. Where the C library is not glibc,
    nothing is done.
    """
    path = ctypes.util.find_library("c")
    malloc_trim = getattr(ctypes.CDLL(path), "malloc_trim", None) if path else None
    if malloc_trim is None:
        return {"ms": None}
    started = time.perf_counter()
    malloc_trim(0)
    return {"ms": round((time.perf_counter() - started) * 1000, 1)}


class _MallInfo2(ctypes.Structure):
    """glibc's ``struct mallinfo2``: the main arena's counts, in bytes."""

    _fields_ = [
        (name, ctypes.c_size_t)
        for name in (
            "arena", "ordblks", "smblks", "hblks", "hblkhd",
            "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost",
        )
    ]  # fmt: skip


def heap_stats() -> dict[str, object]:
    """Where the memory held is: RSS, the C heap's bytes in use and free inside it, Python's.

    The C heap's figures are glibc's (``mallinfo2``), absent elsewhere; Python's
    small objects are counted in blocks (``sys.getallocatedblocks``).
    """
    rss = 0
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                rss = int(line.split()[1]) * 1024
    fields: dict[str, object] = {"rss": rss, "py_blocks": sys.getallocatedblocks()}
    path = ctypes.util.find_library("c")
    mallinfo2 = getattr(ctypes.CDLL(path), "mallinfo2", None) if path else None
    if mallinfo2 is not None:
        mallinfo2.restype = _MallInfo2
        info = mallinfo2()
        fields |= {"c_in_use": info.uordblks, "c_free": info.fordblks, "c_mapped": info.hblkhd}
    return fields
