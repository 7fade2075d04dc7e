"""The state lock's own rules: judging a holder's pid, the leftover sweep, the hold limit.

The scenarios of several processes sharing the lock are in ``test_state.py``.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trio
import trio.testing

from letagents_trio._errors import StateLockTimeout
from letagents_trio.workers import _statelock
from letagents_trio.workers._statelock import (
    HOLD_LIMIT,
    LOCK_POLL_INTERVAL,
    LOCK_STALE_AFTER,
    LOCK_TIMEOUT,
    _identify,
    _Identity,
    _process_gone,
    _remove_if_same,
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


# --- breaking a lock: what is moved aside, and what is put back ---------------------------


def test_a_lock_gone_before_it_is_broken_is_not_counted_as_broken(tmp_path: Path) -> None:
    lock = tmp_path / "mcp-state.json.lock"
    lock.write_bytes(b"123 judged\n")
    judged = _identify(lock)
    assert judged is not None
    lock.unlink()  # released by its holder meanwhile
    assert not _remove_if_same(lock, judged)


def test_a_lock_taken_while_one_was_moved_aside_stays_and_the_moved_one_goes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = tmp_path / "mcp-state.json.lock"
    lock.write_bytes(b"123 judged\n")
    judged = _identify(lock)
    assert judged is not None
    lock.unlink()
    lock.write_bytes(b"456 fresh\n")  # what the rename will move aside
    asides: list[Path] = []

    def taken_meanwhile(path: Path) -> _Identity | None:
        # Between the move and the put-back, a third process takes the free path.
        asides.append(path)
        lock.write_bytes(b"789 taker\n")
        return real_identify(path)

    real_identify = _statelock._identify
    monkeypatch.setattr(_statelock, "_identify", taken_meanwhile)
    assert not _remove_if_same(lock, judged)
    assert lock.read_bytes() == b"789 taker\n"
    assert sorted(tmp_path.iterdir()) == [lock]  # the moved fresh lock was dropped
    # Named as a sweep finds it, should the breaker be killed before it deletes it.
    (aside,) = asides
    assert re.fullmatch(
        rf"{re.escape(lock.name)}\.{os.getpid()}\.[0-9a-f]{{12}}\.broken", aside.name
    )


async def test_our_lock_is_owner_only_and_names_no_pid_space_where_none_is_known(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_statelock, "pid_space", lambda: None)
    lock = tmp_path / "mcp-state.json.lock"
    held = await acquire_lock(lock, time.time)
    try:
        assert stat.S_IMODE(os.stat(lock).st_mode) == 0o600
        assert re.fullmatch(rb"%d [0-9a-f]{16}\n" % os.getpid(), lock.read_bytes())
    finally:
        held.release()


# --- the sweep, entry by entry ---------------------------------------------------------------


class Listing(list[os.DirEntry[str]]):
    """A folder's entries, as ``os.scandir`` gives them: iterable, and a context manager."""

    def __enter__(self) -> Listing:
        return self

    def __exit__(self, *exc_info: object) -> None:
        return None


def sorted_scandir(monkeypatch: pytest.MonkeyPatch, *, vanish_first: bool = False) -> None:
    """Make the sweep see the folder in name order (and, if asked, lose its first entry)."""
    real_scandir = os.scandir

    def in_order(path: str | os.PathLike[str]) -> Listing:
        with real_scandir(path) as entries:
            listed = Listing(sorted(entries, key=lambda entry: entry.name))
        if vanish_first:
            os.unlink(listed[0].path)  # gone between the listing and its stat
        return listed

    monkeypatch.setattr(os, "scandir", in_order)


def test_a_sweep_passes_over_what_it_cannot_judge_or_delete_and_goes_on(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "mcp-state.json"
    gone = dead_pid()
    target = plant(tmp_path, "kept.json")
    (tmp_path / f"{state.name}.{gone}.000000000000.tmp").symlink_to(target)  # first: not a file
    stuck = plant(tmp_path, f"{state.name}.{gone}.000000000001.tmp")
    swept = plant(tmp_path, f"{state.name}.{gone}.000000000002.tmp")
    real_unlink = os.unlink

    def refusing(path: str | os.PathLike[str], *args: object, **kwargs: object) -> None:
        if Path(path) == stuck:
            raise PermissionError(path)
        real_unlink(path)

    sorted_scandir(monkeypatch)
    monkeypatch.setattr(os, "unlink", refusing)
    assert sweep_leftovers(state, time.time) == 1
    assert (stuck.exists(), swept.exists()) == (True, False)


def test_a_sweep_passes_over_a_leftover_gone_before_its_stat(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    state = tmp_path / "mcp-state.json"
    gone = dead_pid()
    plant(tmp_path, f"{state.name}.{gone}.000000000000.tmp")
    swept = plant(tmp_path, f"{state.name}.{gone}.000000000001.tmp")
    sorted_scandir(monkeypatch, vanish_first=True)
    assert sweep_leftovers(state, time.time) == 1
    assert not swept.exists()


def test_a_live_writers_leftover_is_swept_only_past_the_stale_age(tmp_path: Path) -> None:
    state = tmp_path / "mcp-state.json"
    leftover = plant(tmp_path, f"{state.name}.{os.getpid()}.0123456789ab.tmp")
    written = os.stat(leftover).st_mtime
    assert sweep_leftovers(state, lambda: written + LOCK_STALE_AFTER) == 0
    assert sweep_leftovers(state, lambda: written + LOCK_STALE_AFTER + 0.001) == 1


# --- taking the lock: the poll grid, the budget, a failed write ----------------------------


def held_by_another(lock: Path) -> None:
    """A fresh lock of a live holder we cannot judge (a Node client's: no content)."""
    lock.write_bytes(b"")


async def test_the_first_poll_is_one_interval_after_the_first_try(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    lock = tmp_path / "mcp-state.json.lock"
    held_by_another(lock)
    taken: list[float] = []

    async def take() -> None:
        (await acquire_lock(lock, time.time)).release()
        taken.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(take)
        await trio.sleep(0.01)
        lock.unlink()
    assert taken == [LOCK_POLL_INTERVAL]


async def test_the_two_second_budget_counts_from_the_first_try_at_any_time(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    await trio.sleep(100)
    lock = tmp_path / "mcp-state.json.lock"
    held_by_another(lock)
    with pytest.raises(StateLockTimeout):
        await acquire_lock(lock, time.time)
    assert trio.current_time() == 100 + LOCK_TIMEOUT


async def test_a_lock_released_between_the_create_and_its_stat_is_retried_at_once(
    autojump_clock: trio.testing.MockClock, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = tmp_path / "mcp-state.json.lock"
    held_by_another(lock)
    real_identify = _statelock._identify
    looks: list[Path] = []

    def released_meanwhile(path: Path) -> _Identity | None:
        looks.append(path)
        if len(looks) == 1:
            path.unlink()  # its holder lets go just before we look at it
            return None
        return real_identify(path)

    monkeypatch.setattr(_statelock, "_identify", released_meanwhile)
    held = await acquire_lock(lock, time.time)
    held.release()
    assert trio.current_time() == 0


async def test_a_lock_whose_content_cannot_be_written_is_removed_and_the_error_raised(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    lock = tmp_path / "mcp-state.json.lock"

    def full(fd: int, data: bytes) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "write", full)
    with pytest.raises(OSError, match="No space left") as caught:
        await acquire_lock(lock, time.time)
    assert caught.value.errno == errno.ENOSPC
    assert not lock.exists()


# --- identifying a lock file -------------------------------------------------------------------


def test_a_symlink_at_the_lock_path_is_never_followed(tmp_path: Path) -> None:
    target = plant(tmp_path, "elsewhere.json")
    lock = tmp_path / "mcp-state.json.lock"
    lock.symlink_to(target)
    with pytest.raises(OSError, match="Too many levels of symbolic links") as caught:
        _identify(lock)
    assert caught.value.errno == errno.ELOOP


def test_an_unreadable_lock_is_identified_by_its_stat_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Another user's lock: we may stat it, not open it.
    lock = plant(tmp_path, "mcp-state.json.lock")
    gone = plant(tmp_path, "gone.lock")
    real_open = os.open

    def refusing(path: str | os.PathLike[str], *args: object, **kwargs: object) -> int:
        if Path(path) == gone:
            gone.unlink()  # refused, then gone before its stat
        if Path(path) in (lock, gone):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real_open(path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(os, "open", refusing)
    seen = os.stat(lock)
    assert _identify(lock) == _Identity(
        seen.st_dev, seen.st_ino, seen.st_mtime_ns, seen.st_size, None
    )
    assert _identify(gone) is None
