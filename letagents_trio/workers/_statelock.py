"""The state file's lock, shared with the Node client: take it, break it when stale, keep it honest.

The lock is the file ``<state path>.lock``, taken by an exclusive create
(PROTOCOL §6.1), number for number as the Node client does it:

1. try ``open(lock, O_CREAT | O_EXCL)``; on success the lock is ours;
2. if the lock exists and its mtime is more than 10 s old, its holder died:
   break it and retry at once;
3. else, once 2 s have passed since the first try, raise
   :class:`StateLockTimeout` naming the lock path; otherwise wait for the next
   25 ms poll and retry.

Ours, beyond Node's rules: a lock whose holder is gone is broken at once,
whatever its age. Our lock file names its holder, ``<pid> <16 hex> <pid
space>``, where the pid space (:func:`pid_space`) is this boot of this
machine's kernel and the pid namespace the pid is counted in. A lock naming
our pid space and a pid that no process has is a killed writer's (a
restarted MCP server used to wait for it, timing out at 2 s, three times, for
up to 10 s). Any other lock waits for the stale age, as Node's does: a pid
counted elsewhere (another machine sharing the folder, another container, a
reboot since) says nothing about its holder here, and a Node lock names none.

Polls sit on a fixed grid (start + n x 25 ms) measured with
:func:`trio.current_time`, so waiting is cancellable and exact under a
``MockClock``, and a slow poll never stretches the 2 s budget. The stale check
compares the lock's mtime, a wall-clock time, with an injectable ``wall_clock``.

**Breaking a stale lock never removes a fresh one.** Judging by ``stat`` and
then deleting the path is a race: two waiters judge the same dead lock stale,
the first deletes it and takes its own, the second then deletes that fresh
lock and takes the lock too. So a lock is identified by device, inode, mtime
(ns), size and content (ours holds ``<pid> <16 hex> <pid space>``, unique), and removed
only by :func:`_remove_if_same`: rename it to a unique name beside it
(``<lock>.<pid>.<12 hex>.broken``; a rename moves whatever file is at the path
at that instant, atomically), read the moved file's identity, and delete it
only if it is the one judged. If it is not, a fresh lock was moved: it is put
back with ``link`` (which never replaces a file), or, if another process took
the free path meanwhile, dropped; its holder notices before writing, below.
Releasing our own lock goes the same way, so a holder whose lock was broken
never deletes its successor's.

**A holder that overran the stale age does not write.** Right before the
state file's atomic rename, :meth:`HeldLock.ensure_held` checks that the file
at the lock path is still ours (same identity) and younger than
:data:`HOLD_LIMIT`, 1 s short of the stale age, so no other process can judge
it stale before the rename lands. Otherwise it raises
:class:`StateLockTimeout`, and the update writes nothing.

**Leftovers of killed writers are swept.** A writer killed (``SIGKILL``)
mid-update leaves its temp file ``<state>.<pid>.<12 hex>.tmp`` (the Node
client's pattern and ours), and one killed mid-break a
``<lock>.<pid>.<12 hex>.broken``. :func:`sweep_leftovers`, run under the lock,
deletes those whose process is gone or that are older than the stale age (a
reused pid cannot keep one forever); at most :data:`_MAX_SWEPT` per call.
Writers only create them under the lock, so a live one is never in the way;
a stalled holder whose temp is swept fails its rename and writes nothing.

What remains racy against a Node client, which breaks a stale lock by a plain
``unlink`` of the path: a Node process that judged a lock stale may unlink a
fresh lock that a Python process took in the instant between its ``stat`` and
its ``unlink``. The Python holder notices if the Node process's lock is in
place by its check (and the state file's identity check in the store catches
a Node write that landed first); a Node write that lands after the Python
holder's check can still undo it, as two Node processes can undo each other's.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import secrets
import stat as stat_module
from collections.abc import Callable
from pathlib import Path
from typing import Final, final

import attrs
import trio

from .._errors import StateLockTimeout

__all__ = [
    "HOLD_LIMIT",
    "LOCK_POLL_INTERVAL",
    "LOCK_STALE_AFTER",
    "LOCK_TIMEOUT",
    "HeldLock",
    "acquire_lock",
    "pid_space",
    "sweep_leftovers",
]

logger = logging.getLogger("letagents_trio.state")

# The Node client's lock poll: short next to a ~ms update, cheap next to 2 s.
LOCK_POLL_INTERVAL: Final = 0.025
# The Node client's give-up: an update holds the lock for milliseconds, so 2 s
# of waiting means a stuck or dead holder.
LOCK_TIMEOUT: Final = 2.0
# The Node client's stale age: a lock file this old was left by a dead process.
LOCK_STALE_AFTER: Final = 10.0
# A holder whose lock is older than this does not write: 1 s short of the stale
# age, so no other process can break the lock between the check and the rename.
HOLD_LIMIT: Final = LOCK_STALE_AFTER - 1.0
# Owner-only, as the state file itself.
_LOCK_MODE: Final = 0o600
# Lock files are tiny (ours, "<pid> <16 hex> <pid space>\n", has under 100
# bytes); read no more than this of one.
_MAX_LOCK_BYTES: Final = 256
# Random bytes in our lock's content and in the names a lock is moved to.
_TOKEN_BYTES: Final = 8
_ASIDE_RANDOM_BYTES: Final = 6
# Suffix of a lock moved aside to be judged (the sweep knows it).
BROKEN_SUFFIX: Final = ".broken"
# Leftovers deleted per sweep: bounds the time spent holding the lock.
_MAX_SWEPT: Final = 64
# Where Linux says which boot this is, and which pid namespace we count pids in.
_BOOT_ID: Final = Path("/proc/sys/kernel/random/boot_id")
_PID_NAMESPACE: Final = "/proc/self/ns/pid"
# Our lock's content: "<pid> <16 hex>", then " <pid space>" where we know it.
_OUR_LOCK: Final = re.compile(rb"(?P<pid>[0-9]{1,10}) [0-9a-f]{16}(?: (?P<space>[!-~]{1,200}))?\n")


@functools.cache
def pid_space() -> str | None:
    """Where this process's pids are counted: this kernel boot and this pid namespace.

    Two processes with the same value see the same pids, so one of them can
    tell that the other's pid is gone. ``None`` where it cannot be known (not
    Linux, or no ``/proc``): then no lock is broken before its stale age.
    """
    try:
        boot = _BOOT_ID.read_text(encoding="ascii").strip()
        namespace = os.readlink(_PID_NAMESPACE)
    except (OSError, UnicodeDecodeError):
        return None
    space = f"{boot}/{namespace}"
    return space if re.fullmatch(r"[!-~]{1,200}", space) else None


def _holder_gone(judged: _Identity) -> bool:
    """True if ``judged`` is our kind of lock, counted in our pid space, and its pid is gone."""
    here = pid_space()
    found = _OUR_LOCK.fullmatch(judged.content or b"")
    if here is None or found is None or found["space"] is None:
        return False
    return found["space"].decode("ascii") == here and _process_gone(int(found["pid"]))


@final
@attrs.frozen
class _Identity:
    """What tells one lock file from another, even on a reused inode."""

    dev: int
    ino: int
    mtime_ns: int
    size: int
    content: bytes | None  # None: unreadable (another user's lock)


def _identify(path: Path) -> _Identity | None:
    """The identity of the file at ``path`` now, or ``None`` when there is none."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except PermissionError:
        try:
            stat = os.stat(path)
        except FileNotFoundError:
            return None
        return _Identity(stat.st_dev, stat.st_ino, stat.st_mtime_ns, stat.st_size, None)
    try:
        stat = os.fstat(fd)
        content = os.read(fd, _MAX_LOCK_BYTES)
    finally:
        os.close(fd)
    return _Identity(stat.st_dev, stat.st_ino, stat.st_mtime_ns, stat.st_size, content)


def _remove_if_same(lock: Path, judged: _Identity) -> bool:
    """Delete the lock file if it is still the one ``judged``; put any other back.

    Returns:
        True if ``judged`` was removed; False if the path held another lock
        (put back, or dropped if the path was taken meanwhile) or none.
    """
    aside = lock.with_name(
        f"{lock.name}.{os.getpid()}.{secrets.token_hex(_ASIDE_RANDOM_BYTES)}{BROKEN_SUFFIX}"
    )
    try:
        os.rename(lock, aside)
    except FileNotFoundError:
        return False
    try:
        if _identify(aside) == judged:
            return True
        # A fresh lock was moved: put it back, never over a newer one.
        with contextlib.suppress(OSError):  # taken meanwhile: its holder will see
            os.link(aside, lock)
        return False
    finally:
        aside.unlink(missing_ok=True)


@final
@attrs.define(eq=False)
class HeldLock:
    """A lock this process holds; :meth:`release` it in ``finally``.

    Attributes:
        path: the lock file.
    """

    path: Path
    _identity: _Identity = attrs.field(repr=False)
    _wall_clock: Callable[[], float] = attrs.field(repr=False)

    def ensure_held(self) -> None:
        """Raise unless the lock is still ours and safely short of the stale age.

        Call it right before the state file's rename.

        Raises:
            StateLockTimeout: the lock was broken or taken over, or is older
                than :data:`HOLD_LIMIT`.
        """
        age = self._wall_clock() - self._identity.mtime_ns / 1e9
        if age > HOLD_LIMIT:
            raise StateLockTimeout(
                f"Held the local state lock at {self.path} for {age:.1f} s, past the"
                f" {HOLD_LIMIT:g} s limit; nothing was written"
            )
        if _identify(self.path) != self._identity:
            raise StateLockTimeout(
                f"Lost the local state lock at {self.path} to another process; nothing was written"
            )

    def release(self) -> None:
        """Delete the lock file if it is still ours; a successor's stays."""
        _remove_if_same(self.path, self._identity)


def _take(lock: Path, wall_clock: Callable[[], float]) -> HeldLock | None:
    """One try for the lock: held, or ``None`` while a live process holds it.

    A stale lock is broken and the create retried at once.

    Raises:
        OSError: the lock file cannot be created for another reason.
    """
    while True:
        try:
            fd = os.open(lock, os.O_CREAT | os.O_EXCL | os.O_WRONLY | os.O_CLOEXEC, _LOCK_MODE)
        except FileExistsError:
            pass
        else:
            try:
                space = pid_space()
                holder = f"{os.getpid()} {secrets.token_hex(_TOKEN_BYTES)}"
                token = f"{holder} {space}\n" if space else f"{holder}\n"
                token_bytes = token.encode()
                os.write(fd, token_bytes)
                stat = os.fstat(fd)
            except BaseException:
                os.close(fd)
                lock.unlink(missing_ok=True)
                raise
            os.close(fd)
            identity = _Identity(
                stat.st_dev, stat.st_ino, stat.st_mtime_ns, stat.st_size, token_bytes
            )
            return HeldLock(lock, identity, wall_clock)
        judged = _identify(lock)
        if judged is None:
            continue  # released between our two calls: try again at once
        age = wall_clock() - judged.mtime_ns / 1e9
        if age > LOCK_STALE_AFTER:
            logger.warning("breaking a stale state lock (%.1f s old) at %s", age, lock)
        elif _holder_gone(judged):
            logger.warning("breaking the state lock of a process that is gone at %s", lock)
        else:
            return None
        if not _remove_if_same(lock, judged):
            return None  # someone else broke it first and holds a fresh one


async def acquire_lock(lock: Path, wall_clock: Callable[[], float]) -> HeldLock:
    """Take the lock, waiting on the 25 ms grid for at most 2 s.

    Raises:
        StateLockTimeout: a live process held it for 2 s.
        OSError: the lock file cannot be created.

    Cancellation:
        Only while waiting, before the lock is ours; another process's lock is
        left alone.
    """
    start = trio.current_time()
    polls = 0
    while (held := _take(lock, wall_clock)) is None:
        if trio.current_time() - start >= LOCK_TIMEOUT:
            raise StateLockTimeout(f"Timed out acquiring local state lock at {lock}")
        polls += 1
        await trio.sleep_until(start + polls * LOCK_POLL_INTERVAL)
    return held


def _process_gone(pid: int) -> bool:
    """True if no process has this id (a pid we cannot judge counts as alive)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    except (PermissionError, OverflowError, OSError):
        return False
    return False


def sweep_leftovers(state_path: Path, wall_clock: Callable[[], float]) -> int:
    """Delete killed writers' temp files and half-broken locks beside the state file.

    Call it holding the lock. A leftover is ``<state>.<pid>.<12 hex>.tmp`` or
    ``<state>.lock.<pid>.<12 hex>.broken`` whose process is gone or whose
    mtime is more than :data:`LOCK_STALE_AFTER` old. Errors are ignored: a
    leftover that cannot be deleted is only litter.

    Returns:
        How many were deleted.
    """
    name = re.escape(state_path.name)
    pattern = re.compile(
        rf"{name}\.(?:lock\.(?P<lpid>\d{{1,10}})\.[0-9a-f]{{12}}{re.escape(BROKEN_SUFFIX)}"
        rf"|(?P<tpid>\d{{1,10}})\.[0-9a-f]{{12}}\.tmp)"
    )
    swept = 0
    try:
        entries = os.scandir(state_path.parent)
    except OSError:
        return 0
    with entries:
        for entry in entries:
            if swept >= _MAX_SWEPT:
                break
            match = pattern.fullmatch(entry.name)
            if match is None:
                continue
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if not stat_module.S_ISREG(info.st_mode):
                continue
            pid = int(match["lpid"] or match["tpid"])
            old = wall_clock() - info.st_mtime > LOCK_STALE_AFTER
            if old or _process_gone(pid):
                with contextlib.suppress(OSError):
                    os.unlink(entry.path)
                    swept += 1
    if swept:
        logger.warning("removed %d leftover file(s) of killed writers beside %s", swept, state_path)
    return swept
