"""Tests of the local state file: reads, the lock, atomic writes, damaged files.

Rules: timing tests take ``autojump_clock`` and assert exact trio times; the
store's wall clock is then ``WALL_BASE + trio.current_time()`` so the stale
lock check follows the MockClock too. Tests with OS processes use the real
clock, bounded by ``trio.fail_after``. This machine runs tests as root, which
ignores file permissions: a directory in place of the file stands in for an
unreadable file, and the chmod-based tests skip under root.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import random
import shutil
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from letagents_trio._errors import StateError, StateLockTimeout, StateUnavailable
from letagents_trio._protocol import format_iso
from letagents_trio._session import AgentSession
from letagents_trio.workers._state import (
    HOLD_LIMIT,
    LOCK_POLL_INTERVAL,
    LOCK_STALE_AFTER,
    LOCK_TIMEOUT,
    LocalStateStore,
    OwnerAuth,
)
from letagents_trio.workers._statelock import _identify, _remove_if_same, pid_space
from letagents_trio.workers._stateparts import (
    STATE_UNAVAILABLE_MESSAGE,
    ensure_mapping,
    iso_now,
    mapping_at,
)

if TYPE_CHECKING:
    from letagents_trio._manager import HolderStateHooks

# A wall-clock origin exactly representable as a float, so mtime arithmetic
# in the stale-lock tests is exact.
WALL_BASE = 1_000_000.0
WORKER_ID = "worker_" + "ab" * 16
STATE_WORKER = Path(__file__).parents[1] / "programs" / "state_worker.py"
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def mock_wall() -> float:
    return WALL_BASE + trio.current_time()


@pytest.fixture
def state_path(tmp_path: Path) -> Path:
    return tmp_path / "letagents" / "mcp-state.json"


@pytest.fixture
def store(state_path: Path) -> LocalStateStore:
    return LocalStateStore(state_path, wall_clock=mock_wall)


def write_raw(path: Path, raw: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(raw)


def write_json(path: Path, data: Any) -> bytes:
    raw = (json.dumps(data, indent=2) + "\n").encode()
    write_raw(path, raw)
    return raw


def read_bytes(path: Path) -> bytes:
    return path.read_bytes()


def load(path: Path) -> Any:
    return json.loads(path.read_bytes())


def leftovers(path: Path) -> list[str]:
    """Lock and temp files beside the state file."""
    return sorted(p.name for p in path.parent.iterdir() if p.name != path.name)


def session_record(session_id: str = "s1", token: str = "tok-1", **extra: Any) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "session_token": token,
        "room_id": "owner/repo",
        "session_kind": "worker",
        "agent_instance_id": WORKER_ID,
        "display_name": "RiverValley",
        "created_at": "2026-01-01T00:00:00.000Z",
        "updated_at": "2026-01-01T00:00:00.000Z",
        "last_seen_at": "2026-01-01T00:00:00.000Z",
        **extra,
    }


def must_not_run(state: dict[str, Any]) -> None:
    raise AssertionError("the update function ran")


# --- path ------------------------------------------------------------------------


def test_the_default_path_is_under_home_whatever_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Only the MCP server's entry point reads LETAGENTS_STATE_PATH; the store never does."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("LETAGENTS_STATE_PATH", str(tmp_path / "elsewhere.json"))
    assert LocalStateStore().path == tmp_path / ".letagents" / "mcp-state.json"
    assert LocalStateStore().lock_path == tmp_path / ".letagents" / "mcp-state.json.lock"
    assert LocalStateStore(tmp_path / "s.json").lock_path == tmp_path / "s.json.lock"


# --- reading -----------------------------------------------------------------------


def test_missing_file_is_empty_and_complete(store: LocalStateStore) -> None:
    snapshot = store.read()
    assert snapshot.complete
    assert dict(snapshot.data) == {}
    assert snapshot.problem is None


DAMAGED = {
    "corrupt": b"{not json",
    "truncated": b'{\n  "agent_sessions": {\n    "s1": {"session_id": "s',
    "empty": b"",
    "array": b"[]\n",
    "string": b'"state"\n',
    "null": b"null\n",
    "number": b"3\n",
    "nan": b'{"x": NaN}\n',
    "bad utf-8": b'{"x": "\xff"}\n',
    "bom": b'\xef\xbb\xbf{"x": 1}\n',
    # Issue 13 row 11: RecursionError escaped read(), auth(), update() ...
    "nested 2,000 deep": b'{"x": ' + b"[" * 2000 + b"]" * 2000 + b"}\n",
    "nested 900 deep": b'{"x": ' + b"[" * 900 + b"]" * 900 + b"}\n",
}


@pytest.mark.parametrize("raw", DAMAGED.values(), ids=DAMAGED.keys())
async def test_damaged_file_is_incomplete_and_never_written(
    store: LocalStateStore, state_path: Path, raw: bytes
) -> None:
    write_raw(state_path, raw)
    snapshot = store.read()
    assert not snapshot.complete
    assert dict(snapshot.data) == {}
    assert snapshot.problem
    with pytest.raises(StateUnavailable) as caught:
        await store.update(must_not_run)
    assert str(caught.value) == STATE_UNAVAILABLE_MESSAGE
    assert any(str(state_path) in note for note in caught.value.__notes__)
    assert store.auth() is None
    assert store.stored_session("s1") is None
    for attempt in (
        store.end_session("s1", "2026-01-01T00:00:00.000Z", "tok"),
        store.save_auth("owner-token"),
        store.clear_auth(),
        store.clear_expired_auth(),
    ):
        with pytest.raises(StateUnavailable):
            await attempt
    assert read_bytes(state_path) == raw
    assert leftovers(state_path) == []


async def test_unreadable_file_is_incomplete(store: LocalStateStore, state_path: Path) -> None:
    # Root reads any file, so a directory stands in for "cannot be read".
    os.makedirs(state_path)
    snapshot = store.read()
    assert not snapshot.complete
    assert snapshot.problem is not None
    assert snapshot.problem.startswith("unreadable")
    with pytest.raises(StateUnavailable):
        await store.update(must_not_run)
    assert os.listdir(state_path) == []


@pytest.mark.skipif(IS_ROOT, reason="root ignores file permissions")
async def test_permission_denied_is_incomplete(store: LocalStateStore, state_path: Path) -> None:
    write_json(state_path, {"x": 1})
    os.chmod(state_path, 0)
    try:
        assert not store.read().complete
        with pytest.raises(StateUnavailable):
            await store.update(must_not_run)
    finally:
        os.chmod(state_path, 0o600)


async def test_unusable_directory_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    store = LocalStateStore(blocker / "mcp-state.json")
    with pytest.raises(StateUnavailable) as caught:
        await store.update(must_not_run)
    assert str(caught.value) == STATE_UNAVAILABLE_MESSAGE
    assert blocker.read_text() == "x"


async def test_wrong_typed_parts_do_not_crash_readers_and_are_not_overwritten(
    store: LocalStateStore, state_path: Path
) -> None:
    raw = write_json(
        state_path,
        {
            "agent_sessions": ["s1"],
            "current_agent_session_ids": "owner/repo",
            "auth": ["token"],
        },
    )
    assert store.read().complete
    assert store.stored_session("s1") is None
    assert store.auth() is None
    assert await store.end_session("s1", "2026-01-01T00:00:00.000Z", "tok") is False
    with pytest.raises(StateUnavailable) as caught:
        await store.save_auth("owner-token")
    assert "'auth' in the state file is an array, not an object" in caught.value.__notes__
    with pytest.raises(StateUnavailable):
        await store.update(lambda state: ensure_mapping(state, "agent_sessions").clear())
    assert read_bytes(state_path) == raw
    assert leftovers(state_path) == []


def test_mapping_helpers() -> None:
    state: dict[str, Any] = {"a": {"x": 1}, "b": [], "c": None}
    assert mapping_at(state, "a") == {"x": 1}
    assert mapping_at(state, "b") is None
    assert mapping_at(state, "missing") is None
    created = ensure_mapping(state, "d")
    assert state["d"] is created
    assert ensure_mapping(state, "a") is state["a"]
    for key in ("b", "c"):
        with pytest.raises(StateUnavailable):
            ensure_mapping(state, key)
    assert state["b"] == []
    assert state["c"] is None


# --- writing -----------------------------------------------------------------------


async def test_update_writes_two_space_json_with_a_newline(
    store: LocalStateStore, state_path: Path
) -> None:
    def fill(state: dict[str, Any]) -> str:
        state["zeta"] = 1
        state["alpha"] = {"name": "Zoë", "list": [1, 2]}
        return "done"

    assert await store.update(fill) == "done"
    assert read_bytes(state_path).decode() == (
        '{\n  "zeta": 1,\n  "alpha": {\n    "name": "Zoë",\n    "list": [\n      1,\n'
        "      2\n    ]\n  }\n}\n"
    )


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
async def test_written_bytes_match_node_json_stringify(
    store: LocalStateStore, state_path: Path
) -> None:
    """The file is byte for byte what the Node client writes for the same object."""
    data = {
        "zeta": {"é": "Zoë ✓", "empty": {}, "list": [], "nested": [1, [2, {"a": None}]]},
        "alpha": True,
        "10": "integer-like keys go first, as in a JavaScript object",
        "9": {"b": 1, "4294967294": "max index", "4294967295": "not an index", "01": "nor this"},
        "-1": "not an index either",
        "quote": 'a "b" \\ \n \t \u0001',
    }
    await store.update(lambda state: state.update(data))
    script = "let s='';process.stdin.on('data',d=>s+=d).on('end',()=>" + (
        "process.stdout.write(JSON.stringify(JSON.parse(s), null, 2) + '\\n'))"
    )
    node = shutil.which("node")
    assert node is not None
    with trio.fail_after(30):
        done = await trio.run_process(
            [node, "-e", script], stdin=read_bytes(state_path), capture_stdout=True
        )
    assert done.stdout == read_bytes(state_path)


async def test_lone_surrogates_are_written_escaped(
    store: LocalStateStore, state_path: Path
) -> None:
    write_raw(state_path, b'{"x": "\\ud800"}')
    await store.update(lambda state: state.update(y=1))
    assert load(state_path) == {"x": "\ud800", "y": 1}
    assert b"\\ud800" in read_bytes(state_path)


async def test_unknown_keys_are_kept(store: LocalStateStore, state_path: Path) -> None:
    original = {
        "pending_device_auth": {"code": "X"},
        "agent_identity_leases": [1, 2],
        "agent_sessions": {"s1": session_record(owner_account_id="acct", future={"a": [1]})},
        "mcp_workers": {WORKER_ID: {"worker_id": WORKER_ID, "rooms": {}, "extra": True}},
        "current_room": "owner/repo",
    }
    write_json(state_path, original)
    await store.update(lambda state: state.update(local_host_id="host_" + "0" * 32))
    assert load(state_path) == {
        **original,
        "local_host_id": "host_" + "0" * 32,
    }


async def test_no_op_update_leaves_the_file_alone(store: LocalStateStore, state_path: Path) -> None:
    raw = b'{"compact":true,"agent_sessions":{}}'
    write_raw(state_path, raw)
    before = os.stat(state_path)
    assert await store.update(lambda state: len(state)) == 2
    after = os.stat(state_path)
    assert read_bytes(state_path) == raw
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    assert leftovers(state_path) == []


async def test_written_file_is_mode_0600(store: LocalStateStore, state_path: Path) -> None:
    write_json(state_path, {"x": 1})
    os.chmod(state_path, 0o644)
    old_umask = os.umask(0)
    try:
        await store.update(lambda state: state.update(x=2))
    finally:
        os.umask(old_umask)
    assert stat.S_IMODE(os.stat(state_path).st_mode) == 0o600


async def test_first_write_creates_the_directory(store: LocalStateStore, state_path: Path) -> None:
    assert not state_path.parent.exists()
    await store.update(lambda state: state.update(x=1))
    assert load(state_path) == {"x": 1}
    assert leftovers(state_path) == []


async def test_failing_update_function_writes_nothing_and_unlocks(
    store: LocalStateStore, state_path: Path
) -> None:
    raw = write_json(state_path, {"x": 1})

    def half_done(state: dict[str, Any]) -> None:
        state["x"] = 2
        raise ValueError("changed my mind")

    with pytest.raises(ValueError, match="changed my mind"):
        await store.update(half_done)
    assert read_bytes(state_path) == raw
    assert leftovers(state_path) == []


async def test_unserialisable_change_writes_nothing(
    store: LocalStateStore, state_path: Path
) -> None:
    raw = write_json(state_path, {"x": 1})
    with pytest.raises(TypeError):
        await store.update(lambda state: state.update(x=object()))
    assert read_bytes(state_path) == raw
    assert leftovers(state_path) == []


class Interrupt(BaseException):
    """Stands in for KeyboardInterrupt inside the locked section."""


async def test_lock_released_on_base_exception(store: LocalStateStore, state_path: Path) -> None:
    raw = write_json(state_path, {"x": 1})

    def interrupted(state: dict[str, Any]) -> None:
        assert store.lock_path.exists()
        raise Interrupt

    with pytest.raises(Interrupt):
        await store.update(interrupted)
    assert read_bytes(state_path) == raw
    assert leftovers(state_path) == []


@pytest.mark.parametrize("failing", ["replace", "fsync"])
async def test_failed_write_keeps_the_old_file_and_removes_the_temp(
    store: LocalStateStore, state_path: Path, monkeypatch: pytest.MonkeyPatch, failing: str
) -> None:
    # Root writes into read-only directories, so the failure is injected.
    raw = write_json(state_path, {"x": 1})
    temps: list[str] = []

    def fail(*args: Any) -> None:
        temps.extend(p.name for p in state_path.parent.glob("*.tmp"))
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(os, failing, fail)
    with pytest.raises(StateError, match="EROFS") as caught:
        await store.update(lambda state: state.update(x=2))
    monkeypatch.undo()
    assert not isinstance(caught.value, StateUnavailable)
    assert str(state_path) in str(caught.value)
    assert len(temps) == 1
    assert temps[0].startswith(f"mcp-state.json.{os.getpid()}.")
    assert len(temps[0].split(".")[-2]) == 12
    assert read_bytes(state_path) == raw
    assert leftovers(state_path) == []


@pytest.mark.parametrize("full", ["lock", "directory"])
async def test_a_full_disk_says_so_and_never_asks_to_restore_the_state(
    store: LocalStateStore, state_path: Path, monkeypatch: pytest.MonkeyPatch, full: str
) -> None:
    """The lock (or its directory) cannot be made on a full disk: the state is intact."""
    raw = write_json(state_path, {"x": 1})

    def no_space(*args: Any, **kwargs: Any) -> Any:
        raise OSError(errno.ENOSPC, "No space left on device")

    if full == "lock":
        monkeypatch.setattr(os, "write", no_space)
    else:
        monkeypatch.setattr(Path, "mkdir", no_space)
    with pytest.raises(StateError) as caught:
        await store.update(lambda state: state.update(x=2))
    monkeypatch.undo()
    assert not isinstance(caught.value, StateUnavailable)
    assert str(caught.value) == (
        f"Could not write the local state file {state_path}"
        " (ENOSPC: No space left on device); it is unchanged"
    )
    assert read_bytes(state_path) == raw
    assert leftovers(state_path) == []


@pytest.mark.skipif(IS_ROOT, reason="root writes into read-only directories")
async def test_read_only_directory(store: LocalStateStore, state_path: Path) -> None:
    raw = write_json(state_path, {"x": 1})
    state_path.parent.chmod(0o500)
    try:
        with pytest.raises(StateError):
            await store.update(lambda state: state.update(x=2))
    finally:
        state_path.parent.chmod(0o700)
    assert read_bytes(state_path) == raw
    assert leftovers(state_path) == []


@settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.dictionaries(
        st.text(max_size=8).filter(lambda k: k != "added"),
        st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=8),
            lambda inner: (
                st.lists(inner, max_size=3)
                | st.dictionaries(st.text(max_size=5), inner, max_size=3)
            ),
            max_leaves=8,
        ),
        max_size=6,
    )
)
def test_any_object_survives_an_update(tmp_path: Path, data: dict[str, Any]) -> None:
    path = tmp_path / "h" / "state.json"
    store = LocalStateStore(path)
    raw = (json.dumps(data) + "\n").encode()
    write_raw(path, raw)
    trio.run(store.update, lambda state: None)
    assert path.read_bytes() == raw
    trio.run(store.update, lambda state: state.update(added=True))
    assert json.loads(path.read_bytes()) == {**data, "added": True}


# --- the lock ------------------------------------------------------------------------


def hold_lock(store: LocalStateStore, mtime: float) -> None:
    store.lock_path.parent.mkdir(parents=True, exist_ok=True)
    store.lock_path.write_bytes(b"")
    os.utime(store.lock_path, (mtime, mtime))


async def test_live_lock_times_out_at_exactly_two_seconds(
    autojump_clock: trio.testing.MockClock, store: LocalStateStore, state_path: Path
) -> None:
    start = trio.current_time()
    hold_lock(store, WALL_BASE)
    with pytest.raises(StateLockTimeout) as caught:
        await store.update(must_not_run)
    # Polls at start + n x 25 ms; the 80th poll is the first with 2 s elapsed.
    assert trio.current_time() == start + LOCK_TIMEOUT
    assert trio.current_time() == start + 80 * LOCK_POLL_INTERVAL
    assert str(caught.value) == f"Timed out acquiring local state lock at {store.lock_path}"
    assert store.lock_path.exists()  # someone else's: left alone
    assert os.listdir(state_path.parent) == [store.lock_path.name]  # no state file


async def test_stale_lock_is_broken_at_once(
    autojump_clock: trio.testing.MockClock,
    store: LocalStateStore,
    state_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    start = trio.current_time()
    hold_lock(store, WALL_BASE - LOCK_STALE_AFTER - 1)
    with caplog.at_level(logging.WARNING, logger="letagents_trio.state"):
        await store.update(lambda state: state.update(x=1))
    assert trio.current_time() == start
    assert load(state_path) == {"x": 1}
    assert leftovers(state_path) == []
    assert "breaking a stale state lock" in caplog.text


def named_lock(store: LocalStateStore, content: bytes, mtime: float) -> None:
    hold_lock(store, mtime)
    store.lock_path.write_bytes(content)
    os.utime(store.lock_path, (mtime, mtime))


needs_pid_space = pytest.mark.skipif(pid_space() is None, reason="needs Linux's /proc")


@needs_pid_space
async def test_a_fresh_lock_whose_holder_is_gone_here_is_broken_at_once(
    autojump_clock: trio.testing.MockClock,
    store: LocalStateStore,
    state_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 30, row 8: a writer killed holding the lock left it; the lock names
    a pid no process has in our pid space, so nothing can still hold it."""
    start = trio.current_time()
    named_lock(store, f"{dead_pid()} {'a' * 16} {pid_space()}\n".encode(), WALL_BASE)
    with caplog.at_level(logging.WARNING, logger="letagents_trio.state"):
        await store.update(lambda state: state.update(x=1))
    assert trio.current_time() == start
    assert load(state_path) == {"x": 1}
    assert "breaking the state lock of a process that is gone" in caplog.text


@needs_pid_space
@pytest.mark.parametrize(
    "holder",
    [
        pytest.param(
            lambda: f"{dead_pid()} {'a' * 16} {pid_space()}-elsewhere\n", id="another pid space"
        ),
        pytest.param(lambda: f"{dead_pid()} {'a' * 16}\n", id="no pid space"),
        pytest.param(lambda: f"{os.getpid()} {'a' * 16} {pid_space()}\n", id="a live pid"),
        pytest.param(lambda: "", id="a Node lock"),
        pytest.param(lambda: f"{dead_pid()} {pid_space()}\n", id="not our format"),
    ],
)
async def test_any_other_fresh_lock_waits_for_its_stale_age(
    autojump_clock: trio.testing.MockClock,
    store: LocalStateStore,
    holder: Callable[[], str],
) -> None:
    """A pid counted elsewhere (another machine sharing the folder, another pid
    namespace, a boot since) says nothing about its holder here: the Node rule."""
    named_lock(store, holder().encode(), WALL_BASE)
    with pytest.raises(StateLockTimeout):
        await store.update(must_not_run)
    assert store.lock_path.exists()


@needs_pid_space
async def test_our_lock_names_its_pid_and_pid_space(
    autojump_clock: trio.testing.MockClock, store: LocalStateStore
) -> None:
    seen: list[bytes] = []
    await store.update(lambda state: seen.append(store.lock_path.read_bytes()))
    pid, token, space = seen[0].decode().rstrip("\n").split(" ")
    assert (int(pid), len(token), space) == (os.getpid(), 16, pid_space())


async def test_lock_that_goes_stale_while_waited_for_is_broken(
    autojump_clock: trio.testing.MockClock, store: LocalStateStore, state_path: Path
) -> None:
    start = trio.current_time()
    # 9 s old now: stale once more than 1 s has passed, i.e. at the 41st poll.
    hold_lock(store, WALL_BASE + start - 9.0)
    await store.update(lambda state: state.update(x=1))
    assert trio.current_time() == start + 41 * LOCK_POLL_INTERVAL
    assert load(state_path) == {"x": 1}


async def test_lock_released_by_its_holder_is_taken_at_the_next_poll(
    autojump_clock: trio.testing.MockClock, store: LocalStateStore, state_path: Path
) -> None:
    start = trio.current_time()
    hold_lock(store, WALL_BASE)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(store.update, lambda state: state.update(x=1))
        await trio.sleep(0.51)
        store.lock_path.unlink()
    assert trio.current_time() == start + 21 * LOCK_POLL_INTERVAL
    assert load(state_path) == {"x": 1}
    assert leftovers(state_path) == []


async def test_cancelled_while_waiting_leaves_the_other_lock(
    autojump_clock: trio.testing.MockClock, store: LocalStateStore, state_path: Path
) -> None:
    start = trio.current_time()
    hold_lock(store, WALL_BASE)
    with trio.move_on_after(0.5) as scope:
        await store.update(must_not_run)
    assert scope.cancelled_caught
    assert trio.current_time() == start + 0.5
    assert leftovers(state_path) == [store.lock_path.name]
    assert store.lock_path.stat().st_mtime == WALL_BASE


async def test_cancelled_before_the_lock_does_nothing(
    store: LocalStateStore, state_path: Path
) -> None:
    with trio.CancelScope() as scope:
        scope.cancel(reason="test")
        await store.update(must_not_run)
    assert not state_path.parent.exists()


async def test_a_lock_taken_over_meanwhile_is_not_removed_nor_written_under(
    store: LocalStateStore, state_path: Path
) -> None:
    # Another process broke our lock as stale and took its own: we lost the
    # lock, so we write nothing and leave theirs in place.
    write_json(state_path, {"x": 0})

    def taken_over(state: dict[str, Any]) -> None:
        store.lock_path.unlink()
        store.lock_path.write_bytes(b"other")
        state["x"] = 1

    with pytest.raises(StateLockTimeout, match="Lost the local state lock"):
        await store.update(taken_over)
    assert store.lock_path.read_bytes() == b"other"
    assert load(state_path) == {"x": 0}
    assert leftovers(state_path) == [store.lock_path.name]


async def test_a_holder_past_the_hold_limit_writes_nothing(
    state_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # The holder stalls 12 s inside its update (the wall clock jumps): another
    # process may have broken its lock at 10 s, so it must not write.
    offset = [0.0]
    store = LocalStateStore(state_path, wall_clock=lambda: time.time() + offset[0])
    write_json(state_path, {"x": 0})

    def stalled(state: dict[str, Any]) -> None:
        offset[0] = 12.0
        state["x"] = 1

    with pytest.raises(StateLockTimeout, match=r"for 12\.\d s, past the 9 s limit"):
        await store.update(stalled)
    assert HOLD_LIMIT == LOCK_STALE_AFTER - 1
    assert load(state_path) == {"x": 0}
    assert leftovers(state_path) == []  # its own lock, released


@pytest.mark.slow
async def test_a_stalled_holder_does_not_undo_the_updates_made_after_its_lock_broke(
    state_path: Path,
) -> None:
    """A holder stalled past the stale age loses the lock and writes nothing.

    Before: its lock was broken at 10 s, the other process's 5 updates went in,
    and the stalled holder's write then overwrote them.
    """
    store = LocalStateStore(state_path)
    write_json(state_path, {"counter": 0})

    def stalled(state: dict[str, Any]) -> None:
        # 12 s of stall, seen from outside: the lock's mtime is 12 s old.
        old = time.time() - 12
        os.utime(store.lock_path, (old, old))
        waiter = subprocess.run(
            python("count", str(state_path), "waiter", "5"),
            input=b"go\n",
            capture_output=True,
            timeout=30,
            check=True,
        )
        assert json.loads(waiter.stdout.splitlines()[-1])["timeouts"] == 0
        state["counter"] = int(state.get("counter", 0)) + 1

    with pytest.raises(StateLockTimeout, match="Lost the local state lock"):
        await store.update(stalled)
    assert load(state_path)["counter"] == 5
    assert leftovers(state_path) == []


def test_breaking_a_stale_lock_puts_back_a_fresh_one_it_moved(state_path: Path) -> None:
    # Judged stale, but by the time of the rename the path holds a fresh lock:
    # that one is put back, same inode, same content.
    lock = state_path.with_name(state_path.name + ".lock")
    lock.parent.mkdir(parents=True)
    lock.write_bytes(b"")
    os.utime(lock, (1.0, 1.0))
    judged = _identify(lock)
    assert judged is not None
    lock.unlink()
    lock.write_bytes(b"123 fresh\n")
    fresh = os.stat(lock)
    assert not _remove_if_same(lock, judged)
    assert lock.read_bytes() == b"123 fresh\n"
    assert os.stat(lock).st_ino == fresh.st_ino
    assert leftovers(state_path) == [lock.name]
    assert _remove_if_same(lock, _identify(lock))  # type: ignore[arg-type]
    assert leftovers(state_path) == []


async def test_updates_of_one_process_never_wait_for_each_other(
    autojump_clock: trio.testing.MockClock, store: LocalStateStore, state_path: Path
) -> None:
    start = trio.current_time()

    def bump(state: dict[str, Any]) -> None:
        state["n"] = state.get("n", 0) + 1

    async with trio.open_nursery() as nursery:
        for _ in range(20):
            nursery.start_soon(store.update, bump)
    assert trio.current_time() == start
    assert load(state_path) == {"n": 20}


# --- sessions --------------------------------------------------------------------


ENDED = "2026-11-30T20:41:02.123Z"


async def test_end_session_with_the_right_token(store: LocalStateStore, state_path: Path) -> None:
    write_json(
        state_path,
        {
            "agent_sessions": {"s1": session_record(), "s2": session_record("s2", "tok-2")},
            "current_agent_session_ids": {"owner/repo": "s1", "other/room": "s1", "x/y": "s2"},
        },
    )
    assert await store.end_session("s1", ENDED, "tok-1") is True
    state = load(state_path)
    record = state["agent_sessions"]["s1"]
    assert (record["ended_at"], record["updated_at"], record["last_seen_at"]) == (ENDED,) * 3
    assert record["created_at"] == "2026-01-01T00:00:00.000Z"
    assert "ended_at" not in state["agent_sessions"]["s2"]
    assert state["current_agent_session_ids"] == {"x/y": "s2"}


async def test_end_session_of_a_durable_worker_needs_its_token(
    store: LocalStateStore, state_path: Path
) -> None:
    raw = write_json(state_path, {"agent_sessions": {"s1": session_record(token="successor")}})
    assert await store.end_session("s1", ENDED, "predecessor") is False
    assert read_bytes(state_path) == raw


async def test_end_session_of_a_non_durable_session_ignores_the_token(
    store: LocalStateStore, state_path: Path
) -> None:
    record = session_record(agent_instance_id="6f1c3e0a-2b6d-4b7e-9a55-0d6c1f2e3a4b")
    write_json(state_path, {"agent_sessions": {"s1": record}})
    assert await store.end_session("s1", ENDED, "anything") is True
    assert load(state_path)["agent_sessions"]["s1"]["ended_at"] == ENDED


async def test_end_session_of_a_missing_record_writes_nothing(
    store: LocalStateStore, state_path: Path
) -> None:
    raw = write_json(state_path, {"agent_sessions": {}, "current_agent_session_ids": {"r": "s1"}})
    assert await store.end_session("s1", ENDED, "tok-1") is False
    assert read_bytes(state_path) == raw


def test_store_offers_the_connection_manager_hooks(store: LocalStateStore) -> None:
    hooks: HolderStateHooks = store  # mypy checks the protocol
    assert hooks.mark_ended == store.mark_ended
    assert hooks.is_still_ours == store.is_still_ours


async def test_stored_session_and_still_ours(store: LocalStateStore, state_path: Path) -> None:
    write_json(state_path, {"agent_sessions": {"s1": session_record(), "bad": {"x": 1}}})
    stored = store.stored_session("s1")
    assert stored is not None
    assert stored.session_token == "tok-1"
    assert stored.extra["agent_instance_id"] == WORKER_ID
    assert store.stored_session("bad") is None
    assert store.stored_session("missing") is None

    ours = AgentSession.from_json(session_record())
    assert await store.is_still_ours(ours)
    replaced = AgentSession.from_json(session_record(token="old"))
    assert not await store.is_still_ours(replaced)
    assert not await store.is_still_ours(AgentSession.from_json(session_record("missing")))
    await store.end_session("s1", ENDED, "tok-1")
    assert not await store.is_still_ours(ours)


async def test_still_ours_is_false_when_the_file_is_damaged(
    store: LocalStateStore, state_path: Path
) -> None:
    write_raw(state_path, b"{")
    assert not await store.is_still_ours(AgentSession.from_json(session_record()))
    assert store.stored_session("s1") is None
    assert store.auth() is None


async def test_mark_ended_uses_now_and_the_sessions_token(
    autojump_clock: trio.testing.MockClock, store: LocalStateStore, state_path: Path
) -> None:
    write_json(state_path, {"agent_sessions": {"s1": session_record()}})
    await trio.sleep(1.5)
    await store.mark_ended(AgentSession.from_json(session_record()))
    record = load(state_path)["agent_sessions"]["s1"]
    assert record["ended_at"] == format_iso(mock_wall())
    assert record["ended_at"] == "1970-01-12T13:46:41.500Z"


async def test_end_session_without_a_time_stamps_it_with_the_stores_wall_clock(
    autojump_clock: trio.testing.MockClock, store: LocalStateStore, state_path: Path
) -> None:
    """The room client passes no time: the store's injectable wall clock decides it."""
    write_json(state_path, {"agent_sessions": {"s1": session_record()}})
    await trio.sleep(2.25)
    assert await store.end_session("s1", None, session_record()["session_token"])
    record = load(state_path)["agent_sessions"]["s1"]
    assert record["ended_at"] == record["updated_at"] == format_iso(mock_wall())
    assert record["ended_at"] == "1970-01-12T13:46:42.250Z"


async def test_mark_ended_logs_errors_without_secrets(
    store: LocalStateStore, state_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    raw = b"[]"
    write_raw(state_path, raw)
    with caplog.at_level(logging.WARNING, logger="letagents_trio.state"):
        await store.mark_ended(AgentSession.from_json(session_record(token="secret-token")))
    assert "could not mark session s1 ended" in caplog.text
    assert "secret-token" not in caplog.text
    assert read_bytes(state_path) == raw


# --- owner auth ------------------------------------------------------------------


async def test_auth_round_trip(
    autojump_clock: trio.testing.MockClock, store: LocalStateStore, state_path: Path
) -> None:
    assert store.auth() is None
    await store.save_auth(
        "owner-secret", expires_at="1970-01-13T00:00:00.000Z", account={"login": "Ada"}
    )
    auth = store.auth()
    assert auth == OwnerAuth(
        token="owner-secret",
        expires_at="1970-01-13T00:00:00.000Z",
        account={"login": "Ada"},
        stored_at=format_iso(WALL_BASE),
        source="device_flow",
    )
    assert "owner-secret" not in repr(auth)
    assert "owner-secret" not in repr(store.read())
    assert await store.clear_auth() is True
    assert store.auth() is None
    assert "auth" not in load(state_path)
    assert await store.clear_auth() is False


async def test_clear_auth_forgets_only_the_token_the_room_refused(
    autojump_clock: trio.testing.MockClock, store: LocalStateStore, state_path: Path
) -> None:
    """Issue 28 row 9: a refused token that is not the stored one (an environment
    token, or an old one a new sign-in replaced meanwhile) leaves the sign-in alone
    (Node's ``runtime/api.ts`` clears on any owner 401; ours does better)."""
    await store.save_auth("stored-secret")
    before = read_bytes(state_path)
    assert await store.clear_auth("env-secret") is False
    assert await store.clear_auth("") is False
    assert read_bytes(state_path) == before
    assert await store.clear_auth("stored-secret") is True
    assert "auth" not in load(state_path)


async def test_save_auth_keeps_unknown_keys_and_drops_stale_known_ones(
    autojump_clock: trio.testing.MockClock, store: LocalStateStore, state_path: Path
) -> None:
    write_json(state_path, {"auth": {"token": "old", "account": {"login": "x"}, "scopes": ["a"]}})
    await store.save_auth("new")
    assert load(state_path)["auth"] == {
        "scopes": ["a"],
        "token": "new",
        "stored_at": format_iso(WALL_BASE),
        "source": "device_flow",
    }


async def test_expired_auth_is_absent_and_cleared_by_the_next_update(
    autojump_clock: trio.testing.MockClock, store: LocalStateStore, state_path: Path
) -> None:
    # WALL_BASE is 1970-01-12T13:46:40Z.
    write_json(state_path, {"auth": {"token": "t", "expires_at": "1970-01-12T13:46:39.999Z"}})
    assert store.auth() is None
    assert "auth" in load(state_path)
    await store.update(lambda state: state.update(x=1))
    assert load(state_path) == {"x": 1}


async def test_clear_expired_auth(
    autojump_clock: trio.testing.MockClock, store: LocalStateStore, state_path: Path
) -> None:
    live = {"token": "t", "expires_at": "1970-01-12T13:46:41Z"}
    raw = write_json(state_path, {"auth": live})
    assert store.auth() is not None
    assert await store.clear_expired_auth() is False
    assert read_bytes(state_path) == raw
    write_json(state_path, {"auth": {**live, "expires_at": "1970-01-12T13:46:00+00:00"}})
    assert await store.clear_expired_auth() is True
    assert load(state_path) == {}


async def test_unparseable_expiry_and_bad_tokens(
    autojump_clock: trio.testing.MockClock, store: LocalStateStore, state_path: Path
) -> None:
    write_json(state_path, {"auth": {"token": "t", "expires_at": "soon"}})
    assert store.auth() is not None
    assert await store.clear_expired_auth() is False
    write_json(state_path, {"auth": {"token": ""}})
    assert store.auth() is None


# --- timestamps --------------------------------------------------------------------


def test_iso_timestamps_match_javascript() -> None:
    # Values from node: new Date(1796071262123).toISOString() (and .9 ms).
    assert format_iso(1796071262.123) == "2026-11-30T20:41:02.123Z"
    assert format_iso(1796071262.1239) == "2026-11-30T20:41:02.123Z"
    assert format_iso(0) == "1970-01-01T00:00:00.000Z"
    assert iso_now(lambda: 1796071262.5) == "2026-11-30T20:41:02.500Z"


# --- several OS processes --------------------------------------------------------


def python(*args: str) -> list[str]:
    return [sys.executable, str(STATE_WORKER), *args]


async def read_all(stream: trio.abc.ReceiveStream) -> bytes:
    data = b""
    while chunk := await stream.receive_some():
        data += chunk
    return data


async def read_line(stream: trio.abc.ReceiveStream) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = await stream.receive_some(1)
        assert chunk, "the process exited"
        data += chunk
    return data


@pytest.mark.slow
async def test_four_processes_lose_no_update(state_path: Path) -> None:
    """4 processes x 200 locked increments; a reader never sees a broken file."""
    workers, per_worker = 4, 200
    pause = 0.01  # up to 10 ms of other work between two updates of one writer
    target = workers * per_worker
    state_path.parent.mkdir(parents=True)
    results: dict[str, bytes] = {}

    async def reader() -> None:
        done = await trio.run_process(
            python("read", str(state_path), str(target)), capture_stdout=True
        )
        results["reader"] = done.stdout

    async def collect(name: str, process: trio.Process) -> None:
        assert process.stdout is not None
        results[name] = await read_all(process.stdout)
        assert await process.wait() == 0

    with trio.fail_after(90):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader)
            processes = []
            for i in range(workers):
                process = await trio.lowlevel.open_process(
                    python("count", str(state_path), f"w{i}", str(per_worker), str(pause)),
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                )
                assert process.stdout is not None
                assert await read_line(process.stdout) == b"ready\n"
                processes.append(process)
            for i, process in enumerate(processes):
                assert process.stdin is not None
                await process.stdin.send_all(b"go\n")
                nursery.start_soon(collect, f"w{i}", process)
    state = load(state_path)
    assert state["counter"] == target
    assert state["workers"] == {f"w{i}": per_worker for i in range(workers)}
    assert sum(run for _, run in state["order"]) == target
    assert len(state["order"]) > workers  # the writers really interleaved
    reader_report = json.loads(results["reader"])
    assert reader_report["invalid"] == 0
    assert reader_report["reads"] > 0
    assert reader_report["last"] == target
    assert leftovers(state_path) == []


@needs_pid_space
async def test_a_writer_killed_holding_the_lock_does_not_block_the_next_one(
    state_path: Path,
) -> None:
    """Before, the restarted server waited the 10 s stale age: "Timed out
    acquiring local state lock" at 2.1, 5.1 and 8.1 s. Real clock."""
    state_path.parent.mkdir(parents=True)
    store = LocalStateStore(state_path)
    with trio.fail_after(20):
        process = await trio.lowlevel.open_process(
            python("hold", str(state_path)), stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        assert process.stdout is not None
        try:
            assert await read_line(process.stdout) == b"holding\n"
        finally:
            process.kill()
            with trio.move_on_after(5, shield=True):
                await process.wait()
                for pipe in (process.stdin, process.stdout):
                    assert pipe is not None
                    await pipe.aclose()
        assert store.lock_path.exists()  # left by the killed writer
        started = trio.current_time()
        await store.update(lambda state: state.update(x=1))
        took = trio.current_time() - started
    assert took < LOCK_TIMEOUT
    assert load(state_path) == {"x": 1}


@pytest.mark.slow
async def test_stale_lock_events_lose_no_update(state_path: Path) -> None:
    """4 writers contend while 100 dead holders' locks are broken: no increment is lost.

    Breaking a stale lock by stat-then-unlink lost 3-9 increments per 100 such
    events: two waiters judged the same lock stale, the first broke it and
    took its own, the second then unlinked that fresh lock and took the lock
    too, and the two read-modify-writes overlapped.
    """
    workers, per_worker, events = 4, 150, 100
    target = workers * per_worker
    state_path.parent.mkdir(parents=True)
    results: dict[str, bytes] = {}

    async def collect(name: str, process: trio.Process) -> None:
        assert process.stdout is not None
        results[name] = await read_all(process.stdout)
        assert await process.wait() == 0

    with trio.fail_after(90):
        async with trio.open_nursery() as nursery:
            commands = {
                f"w{i}": python("count", str(state_path), f"w{i}", str(per_worker), "0.01")
                for i in range(workers)
            }
            commands["planter"] = python("plant", str(state_path), str(events))
            processes = {}
            for name, command in commands.items():
                process = await trio.lowlevel.open_process(
                    command, stdin=subprocess.PIPE, stdout=subprocess.PIPE
                )
                assert process.stdout is not None
                assert await read_line(process.stdout) == b"ready\n"
                processes[name] = process
            for name, process in processes.items():
                assert process.stdin is not None
                await process.stdin.send_all(b"go\n")
                nursery.start_soon(collect, name, process)
    state = load(state_path)
    assert json.loads(results["planter"])["planted"] == events
    lost = target - state["counter"]
    assert lost == 0, f"{lost} increments lost in {events} stale-lock events"
    assert state["workers"] == {f"w{i}": per_worker for i in range(workers)}


def kill_rounds() -> Iterator[int]:
    rng = random.Random(20261130)
    for _ in range(12):
        yield rng.randint(1, 6)


@pytest.mark.slow
async def test_sigkill_mid_update_leaves_old_or_new_file(state_path: Path) -> None:
    """A writer killed inside its update leaves a whole file: the old or the new one."""
    state_path.parent.mkdir(parents=True)
    pad = 2_000_000  # big enough that the kill lands during the write
    locks_left = 0
    for round_, wait_for in enumerate(kill_rounds()):
        before = load(state_path)["counter"] if round_ > 0 else 0
        with trio.fail_after(30):
            process = await trio.lowlevel.open_process(
                python("churn", str(state_path), str(pad)), stdout=subprocess.PIPE
            )
            assert process.stdout is not None
            seen = b""
            while seen.count(b"\n") < wait_for:
                chunk = await process.stdout.receive_some()
                assert chunk, "the writer exited"
                seen += chunk
            process.send_signal(signal.SIGKILL)
            await process.wait()
            await process.stdout.aclose()
        announced = int(seen.splitlines()[wait_for - 1].split()[1])
        state = load(state_path)  # never partial
        assert state["counter"] in (announced - 1, announced)
        assert state["counter"] >= before
        assert state["padding"] == str(state["counter"] % 10) * pad
        if state_path.with_name(state_path.name + ".lock").exists():
            locks_left += 1
            # Age the dead writer's lock so the next writer breaks it as stale.
            old = os.stat(state_path).st_mtime - LOCK_STALE_AFTER - 5
            os.utime(state_path.with_name(state_path.name + ".lock"), (old, old))
        for temp in state_path.parent.glob("*.tmp"):
            assert temp.name.startswith(f"{state_path.name}.{process.pid}.")
            temp.unlink()
    assert locks_left > 0, "no kill landed inside an update"


def dead_pid() -> int:
    """The id of a process that has exited and been reaped."""
    done = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"], check=True, capture_output=True
    )
    return int(done.stdout)


def plant_leftover(state_path: Path, name: str, age: float = 0.0) -> Path:
    leftover = state_path.with_name(name)
    leftover.parent.mkdir(parents=True, exist_ok=True)
    leftover.write_bytes(b"{}")
    if age:
        old = time.time() - age
        os.utime(leftover, (old, old))
    return leftover


async def test_leftovers_of_dead_or_old_writers_are_swept_under_the_lock(
    state_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = LocalStateStore(state_path)
    base = state_path.name
    gone, alive = dead_pid(), os.getpid()
    swept = [
        plant_leftover(state_path, f"{base}.{gone}.0123456789ab.tmp"),
        plant_leftover(state_path, f"{base}.lock.{gone}.0123456789ab.broken"),
        plant_leftover(state_path, f"{base}.{alive}.00000000000a.tmp", age=LOCK_STALE_AFTER + 5),
    ]
    kept = [
        plant_leftover(state_path, f"{base}.{alive}.00000000000b.tmp"),  # live and fresh
        plant_leftover(state_path, f"{base}.{gone}.0123456789ab.tmp.keep"),
        plant_leftover(state_path, f"other.json.{gone}.0123456789ab.tmp"),
        plant_leftover(state_path, f"{base}.{gone}.XYZ.tmp"),
    ]
    with caplog.at_level(logging.WARNING, logger="letagents_trio.state"):
        await store.update(lambda state: state.update(x=1))
    assert not any(path.exists() for path in swept)
    assert all(path.exists() for path in kept)
    assert "removed 3 leftover file(s)" in caplog.text
    assert load(state_path) == {"x": 1}


@pytest.mark.slow
async def test_temp_files_of_sigkilled_writers_are_removed_by_the_next_update(
    state_path: Path,
) -> None:
    """Writers killed mid-write leave temp files; the next locked update removes them.

    Before: 11 temp files (2.6 MB) left by 40 kills, never cleaned.
    """
    state_path.parent.mkdir(parents=True)
    pad = 2_000_000
    left = 0
    rng = random.Random(20261201)
    # Each kill lands at a random moment; most miss the write. Until one has
    # left a temp file (usually within a few dozen), bounded in count and time.
    with trio.fail_after(150):
        for _ in range(200):
            wait_for = rng.randint(1, 3)
            process = await trio.lowlevel.open_process(
                python("churn", str(state_path), str(pad)), stdout=subprocess.PIPE
            )
            assert process.stdout is not None
            seen = b""
            while seen.count(b"\n") < wait_for:
                chunk = await process.stdout.receive_some()
                assert chunk, "the writer exited"
                seen += chunk
            await trio.sleep(rng.uniform(0, 0.03))  # somewhere in the encode, write or fsync
            process.send_signal(signal.SIGKILL)
            await process.wait()
            await process.stdout.aclose()
            # The dead writer's lock is 10 s from stale: stand in for the wait.
            lock = state_path.with_name(state_path.name + ".lock")
            if lock.exists():
                old = time.time() - LOCK_STALE_AFTER - 5
                os.utime(lock, (old, old))
            left = max(left, len(list(state_path.parent.glob("*.tmp"))))
            if left:
                break
    assert left > 0, "no kill left a temp file"
    await LocalStateStore(state_path).update(lambda state: state.update(after=True))
    assert list(state_path.parent.glob("*.tmp")) == []
    assert leftovers(state_path) == []
