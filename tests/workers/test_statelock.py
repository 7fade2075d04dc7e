"""The state lock's own rules: judging a holder's pid, the leftover sweep, the hold limit.

The scenarios of several processes sharing the lock are in ``test_state.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from letagents_trio._errors import StateLockTimeout
from letagents_trio.workers._statelock import (
    HOLD_LIMIT,
    _process_gone,
    acquire_lock,
    sweep_leftovers,
)


def dead_pid() -> int:
    """The id of a process that has exited and been reaped."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], check=True, capture_output=True
    )
    return int(done.stdout)


def plant(folder: Path, name: str) -> Path:
    leftover = folder / name
    leftover.write_bytes(b"{}")
    return leftover


# A child that says whether any catchable signal reached it before its stdin closed.
WITNESS = """
import signal, sys
got = []
for number in range(1, signal.NSIG):
    try:
        signal.signal(number, lambda *_: got.append(1))
    except (OSError, ValueError):
        pass
print("ready", flush=True)
sys.stdin.read()
print("signalled" if got else "quiet", flush=True)
"""


def test_judging_a_pid_never_signals_its_process() -> None:
    child = subprocess.Popen(
        [sys.executable, "-c", WITNESS], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == b"ready\n"
        assert not _process_gone(child.pid)
        out, _ = child.communicate(timeout=30)
        assert out == b"quiet\n"  # asked with signal 0: nothing delivered
    finally:
        child.kill()
        child.wait(timeout=10)
    assert _process_gone(child.pid)


@pytest.mark.parametrize("pid", [0, -1, 2**31, 9_999_999_999])
def test_a_pid_that_cannot_be_judged_counts_as_alive(pid: int) -> None:
    # 0 and negative ids name process groups; ids past pid_t cannot be asked.
    assert not _process_gone(pid)


def test_a_sweep_deletes_at_most_64_leftovers_and_counts_them(tmp_path: Path) -> None:
    state = tmp_path / "mcp-state.json"
    gone = dead_pid()
    for n in range(70):
        plant(tmp_path, f"{state.name}.{gone}.{n:012x}.tmp")
    assert sweep_leftovers(state, time.time) == 64
    assert len(list(tmp_path.iterdir())) == 6
    assert sweep_leftovers(state, time.time) == 6
    assert list(tmp_path.iterdir()) == []


def test_a_sweep_of_a_missing_folder_deletes_nothing(tmp_path: Path) -> None:
    assert sweep_leftovers(tmp_path / "missing" / "mcp-state.json", time.time) == 0


def test_a_symlink_named_like_a_leftover_is_not_swept(tmp_path: Path) -> None:
    state = tmp_path / "mcp-state.json"
    target = plant(tmp_path, "kept.json")
    link = tmp_path / f"{state.name}.{dead_pid()}.0123456789ab.tmp"
    link.symlink_to(target)
    assert sweep_leftovers(state, time.time) == 0
    assert link.is_symlink()
    assert target.exists()


async def test_a_holder_writes_up_to_exactly_the_hold_limit(tmp_path: Path) -> None:
    lock = tmp_path / "mcp-state.json.lock"
    wall = [0.0]
    held = await acquire_lock(lock, lambda: wall[0])
    try:
        taken = os.stat(lock).st_mtime_ns / 1e9
        wall[0] = taken + HOLD_LIMIT
        held.ensure_held()  # exactly at the limit: still safe to write
        wall[0] = taken + HOLD_LIMIT + 0.001
        with pytest.raises(StateLockTimeout, match="past the 9 s limit"):
            held.ensure_held()
    finally:
        held.release()
    assert not lock.exists()
