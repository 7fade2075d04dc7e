"""Tests of the local rooms' chat database (``letagents_trio.workers._local_chat``).

Rules: real SQLite files in ``tmp_path``; two :class:`LocalChat` objects on one
file stand for two MCP server processes (SQLite locks each connection apart,
in one process or two), and one test set uses a real second OS process
holding the write lock. Timing tests take ``autojump_clock`` and assert exact
trio times (the database calls are synchronous and take no trio time); tests
with an OS process use the real clock, bounded by ``trio.fail_after``.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import stat
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any, cast

import pytest
import trio
import trio.testing

from letagents_trio._errors import (
    LetAgentsError,
    LocalChatBusy,
    LocalChatError,
    LocalChatUnavailable,
    WorkerError,
)
from letagents_trio._protocol import format_iso
from letagents_trio._session import AgentSession
from letagents_trio.workers._local_chat import (
    BAD_CURSOR_TEXT,
    LOCK_RETRY_INTERVAL,
    MAX_MESSAGE_CHARS,
    MAX_MESSAGE_PAGE,
    TEXT_REQUIRED_TEXT,
    TEXT_TOO_LONG_TEXT,
    WAIT_RECHECK_INTERVAL,
    LocalChat,
    LocalChatStatistics,
    message_cursor,
)
from letagents_trio.workers._paths import LOCAL_CHAT_DB_ENV
from letagents_trio.workers._wire import CONNECTION_REPLACED_OR_DISCONNECTED_TEXT

ROOM = "room_local"
# A wall time exactly representable in milliseconds.
WALL = 1_780_000_000.125
CEDAR = AgentSession(
    session_id="local_" + "c" * 64, session_token="tok-cedar", room_id=ROOM, display_name="Cedar"
)
BIRCH = AgentSession(
    session_id="local_" + "b" * 64, session_token="tok-birch", room_id=ROOM, display_name="Birch"
)
ELSEWHERE = AgentSession(
    session_id="local_" + "e" * 64, session_token="tok-e", room_id="room_other", display_name="Elm"
)


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "letagents" / "local-chat.sqlite"


@contextmanager
def opened(path: Path, **kwargs: Any) -> Iterator[LocalChat]:
    chat = LocalChat(path, wall_clock=lambda: WALL, **kwargs)
    try:
        yield chat
    finally:
        chat.close()


@pytest.fixture
def chat(db_path: Path) -> Iterator[LocalChat]:
    with opened(db_path) as chat:
        yield chat


@pytest.fixture
def other(db_path: Path) -> Iterator[LocalChat]:
    """A second object on the same file: another MCP server process."""
    with opened(db_path) as chat:
        yield chat


def texts(page: dict[str, Any]) -> list[str]:
    return [m["text"] for m in page["messages"]]


def rows(path: Path) -> list[tuple[Any, ...]]:
    """Every stored message, read behind the library's back."""
    conn = sqlite3.connect(path)
    try:
        return conn.execute("SELECT id, room_id, text FROM messages ORDER BY id").fetchall()
    finally:
        conn.close()


@contextmanager
def write_lock(path: Path) -> Iterator[sqlite3.Connection]:
    """Hold the database's write lock on a separate connection, as another process would."""
    conn = sqlite3.connect(path, isolation_level=None, timeout=0)
    try:
        # Inside the try: a refused BEGIN closes the connection too (Python 3.13
        # warns of a connection left to the garbage collector).
        conn.execute("BEGIN IMMEDIATE")
        yield conn
    finally:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        conn.close()


def mode_of(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def write_file(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def siblings(path: Path) -> list[str]:
    return sorted(p.name for p in path.parent.iterdir() if p != path)


# --- paths and cursors ---------------------------------------------------------------------


def test_the_default_path_is_under_home_whatever_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Only the MCP server's entry point reads LETAGENTS_LOCAL_CHAT_DB; LocalChat never does."""
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv(LOCAL_CHAT_DB_ENV, str(tmp_path / "chat.db"))
    assert LocalChat().path == tmp_path / ".letagents" / "local-chat.sqlite"
    assert LocalChat(tmp_path / "chat.db").path == tmp_path / "chat.db"


def test_creating_the_object_touches_nothing(db_path: Path) -> None:
    chat = LocalChat(db_path)
    assert not db_path.parent.exists()
    assert chat.statistics() == LocalChatStatistics(
        sends=0, refused_sends=0, lock_waits=0, open_waits=0, connected=False
    )


@pytest.mark.parametrize(("text", "cursor"), [(None, None), ("", None), ("  ", None), ("17", 17)])
def test_message_cursor_reads_message_ids(text: str | None, cursor: int | None) -> None:
    assert message_cursor(text) == cursor


@pytest.mark.parametrize("text", ["abc", "-1", "1.5", "\u0661\u0662", "9" * 19])
def test_message_cursor_refuses_anything_else_with_the_rooms_text(text: str) -> None:
    with pytest.raises(LocalChatError, match=f"^{BAD_CURSOR_TEXT}$"):
        message_cursor(text)


# --- send and read -------------------------------------------------------------------------


async def test_send_answers_the_room_apis_message_json(chat: LocalChat) -> None:
    message = await chat.send(CEDAR, "hello")
    assert message == {
        "id": "1",
        "room_id": ROOM,
        "sender": "Cedar",
        "text": "hello",
        "created_at": format_iso(WALL),
        "agent_session_id": CEDAR.session_id,
        "source": None,
        "prompt_kind": None,
    }
    assert message["created_at"] == "2026-05-28T20:26:40.125Z"
    page = await chat.read(ROOM)
    assert page == {"messages": [message], "has_more": False, "room_id": ROOM}


async def test_session_token_is_never_stored(chat: LocalChat, db_path: Path) -> None:
    await chat.send(CEDAR, "hello")
    chat.close()
    assert b"tok-cedar" not in _snapshot(db_path)[0]


async def test_read_pages_after_a_cursor_per_room(chat: LocalChat) -> None:
    for i in range(5):
        await chat.send(CEDAR, f"m{i}")
        await chat.send(ELSEWHERE, f"other{i}")
    first = await chat.read(ROOM, limit=2)
    assert texts(first) == ["m0", "m1"]
    assert first["has_more"] is True
    cursor = int(first["messages"][-1]["id"])
    rest = await chat.read(ROOM, after=cursor, limit=10)
    assert texts(rest) == ["m2", "m3", "m4"]
    assert rest["has_more"] is False
    assert await chat.read(ROOM, after=int(rest["messages"][-1]["id"])) == {
        "messages": [],
        "has_more": False,
        "room_id": ROOM,
    }
    assert texts(await chat.read("room_other", limit=1)) == ["other0"]
    assert texts(await chat.read("room_unknown")) == []


async def test_read_limit_is_clamped(chat: LocalChat) -> None:
    for i in range(MAX_MESSAGE_PAGE + 1):
        await chat.send(CEDAR, f"m{i}")
    assert len((await chat.read(ROOM, limit=0))["messages"]) == 1
    page = await chat.read(ROOM, limit=10_000)
    assert len(page["messages"]) == MAX_MESSAGE_PAGE
    assert page["has_more"] is True


async def test_two_objects_on_one_file_see_each_other(chat: LocalChat, other: LocalChat) -> None:
    await chat.send(CEDAR, "from the first")
    await other.send(BIRCH, "from the second")
    for reader in (chat, other):
        page = await reader.read(ROOM)
        assert texts(page) == ["from the first", "from the second"]
        assert [m["sender"] for m in page["messages"]] == ["Cedar", "Birch"]
        assert [m["id"] for m in page["messages"]] == ["1", "2"]


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("", TEXT_REQUIRED_TEXT),
        (" \n\t", TEXT_REQUIRED_TEXT),
        ("x" * (MAX_MESSAGE_CHARS + 1), TEXT_TOO_LONG_TEXT),
    ],
)
async def test_send_refuses_what_the_room_refuses(
    chat: LocalChat, db_path: Path, text: str, error: str
) -> None:
    with pytest.raises(LocalChatError, match=f"^{error}$"):
        await chat.send(CEDAR, text)
    await chat.send(CEDAR, "x" * MAX_MESSAGE_CHARS)  # the limit itself is fine
    assert [r[0] for r in rows(db_path)] == [1]


async def test_send_refuses_text_sqlite_cannot_store(chat: LocalChat) -> None:
    with pytest.raises(LocalChatError, match="not valid Unicode"):
        await chat.send(CEDAR, "half a pair \ud800")
    assert isinstance(LocalChatError("x"), LetAgentsError)


async def test_close_then_use_opens_again(chat: LocalChat) -> None:
    await chat.send(CEDAR, "one")
    chat.close()
    assert chat.statistics().connected is False
    assert texts(await chat.read(ROOM)) == ["one"]
    assert chat.statistics().connected is True


# --- the file ------------------------------------------------------------------------------


async def test_files_are_created_with_mode_0600(db_path: Path) -> None:
    db_path.parent.mkdir()
    old = os.umask(0o277)
    try:
        with opened(db_path) as chat:
            await chat.send(CEDAR, "private")
            names = siblings(db_path)
            modes = {
                p.name: stat.S_IMODE(p.stat().st_mode)
                for p in [db_path, *(db_path.parent / n for n in names)]
            }
    finally:
        os.umask(old)
    assert names == ["local-chat.sqlite-shm", "local-chat.sqlite-wal"]
    assert modes == dict.fromkeys([db_path.name, *names], 0o600)


async def test_the_parent_directory_is_created(chat: LocalChat, db_path: Path) -> None:
    await chat.read(ROOM)
    assert mode_of(db_path) == 0o600
    assert mode_of(db_path.parent) & 0o077 == 0


async def test_the_journal_is_wal(chat: LocalChat, db_path: Path) -> None:
    await chat.read(ROOM)
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()


async def test_an_existing_files_mode_is_left_alone(chat: LocalChat, db_path: Path) -> None:
    await chat.send(CEDAR, "one")
    chat.close()
    os.chmod(db_path, 0o640)
    await chat.send(CEDAR, "two")
    assert mode_of(db_path) == 0o640


def _snapshot(path: Path) -> tuple[bytes, int, list[str]]:
    return path.read_bytes(), path.stat().st_mtime_ns, siblings(path)


async def test_a_damaged_file_is_refused_and_left_untouched(chat: LocalChat, db_path: Path) -> None:
    write_file(db_path, b"this is not a database\n" * 300)
    before = _snapshot(db_path)
    for attempt in (chat.read(ROOM), chat.send(CEDAR, "hello"), chat.wait(ROOM)):
        with pytest.raises(LocalChatUnavailable) as info:
            await attempt
        assert str(db_path) in str(info.value)
        assert "cannot be used" in str(info.value)
    assert _snapshot(db_path) == before
    assert chat.statistics().connected is False


async def test_another_programs_database_is_refused_untouched(
    chat: LocalChat, db_path: Path
) -> None:
    db_path.parent.mkdir()
    conn = sqlite3.connect(db_path)
    conn.execute("CREATE TABLE messages (body TEXT)")
    conn.commit()
    conn.close()
    before = _snapshot(db_path)
    with pytest.raises(LocalChatUnavailable, match="belongs to another program") as info:
        await chat.send(CEDAR, "hello")
    assert LOCAL_CHAT_DB_ENV in str(info.value)
    assert _snapshot(db_path) == before


async def test_a_newer_schema_is_refused_untouched(chat: LocalChat, db_path: Path) -> None:
    await chat.send(CEDAR, "hello")
    chat.close()
    conn = sqlite3.connect(db_path)
    conn.execute("PRAGMA user_version = 2")
    conn.close()
    before = _snapshot(db_path)
    with pytest.raises(LocalChatUnavailable, match="schema version 2"):
        await chat.read(ROOM)
    assert _snapshot(db_path) == before


async def test_a_schema_created_by_another_process_between_two_looks_is_used(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, db_path: Path
) -> None:
    """The racing creators' case made deterministic: the creator commits right after our look.

    Another process commits the schema just after this one first reads the
    empty file's header; the header must be read in one snapshot, or an empty
    header next to tables looks like another program's database.
    """
    template = tmp_path / "template.sqlite"
    with opened(template) as creator:
        await creator.read(ROOM)
    connect = sqlite3.connect

    def create_it_elsewhere() -> None:
        # The other process's whole create, committed at once (the backup API).
        source, target = connect(template), connect(db_path)
        try:
            source.backup(target)
        finally:
            source.close()
            target.close()

    class CreatedAfterOneLook(sqlite3.Connection):
        """The library's connection; the file gets created after its first header read."""

        looked = created = False

        def execute(self, sql: str, *args: Any) -> sqlite3.Cursor:
            if self.looked and not self.created:
                self.created = True
                create_it_elsewhere()
            cursor = super().execute(sql, *args)
            self.looked = self.looked or "application_id" in sql
            return cursor

    with monkeypatch.context() as patch:
        patch.setattr(sqlite3, "connect", functools.partial(connect, factory=CreatedAfterOneLook))
        with opened(db_path) as chat:
            await chat.send(CEDAR, "after the race")
            assert isinstance(chat._conn, CreatedAfterOneLook)
            assert chat._conn.created
    assert [r[2] for r in rows(db_path)] == ["after the race"]


# --- the write lock ------------------------------------------------------------------------


async def test_check_runs_inside_the_write_transaction(chat: LocalChat, db_path: Path) -> None:
    await chat.read(ROOM)  # create the file
    seen: list[str] = []

    async def check() -> None:
        # Another process can neither write now nor see a half-written message.
        with pytest.raises(sqlite3.OperationalError, match="locked"), write_lock(db_path):
            pass
        seen.append("checked")
        await trio.lowlevel.checkpoint()

    await chat.send(CEDAR, "checked", check=check)
    assert seen == ["checked"]
    with write_lock(db_path):  # released afterwards
        pass


async def test_a_failing_check_writes_nothing(chat: LocalChat, db_path: Path) -> None:
    async def refuse() -> None:
        await trio.lowlevel.checkpoint()
        raise WorkerError(CONNECTION_REPLACED_OR_DISCONNECTED_TEXT)

    with pytest.raises(WorkerError, match="replaced or disconnected"):
        await chat.send(CEDAR, "never", check=refuse)
    assert rows(db_path) == []
    assert chat.statistics().refused_sends == 1
    await chat.send(CEDAR, "afterwards")  # the transaction was rolled back
    assert [r[2] for r in rows(db_path)] == ["afterwards"]


async def test_a_send_cancelled_in_its_check_writes_nothing(
    autojump_clock: trio.testing.MockClock, chat: LocalChat, db_path: Path
) -> None:
    async def slow_check() -> None:
        await trio.sleep_forever()

    with trio.move_on_after(1):
        await chat.send(CEDAR, "never", check=slow_check)
    assert trio.current_time() == 1
    assert rows(db_path) == []
    with write_lock(db_path):  # the lock was released
        pass
    await chat.send(CEDAR, "afterwards")
    assert [r[2] for r in rows(db_path)] == ["afterwards"]


async def test_a_send_waits_for_another_writer_on_trios_clock(
    autojump_clock: trio.testing.MockClock, chat: LocalChat, db_path: Path
) -> None:
    await chat.read(ROOM)
    # Tries at 0, 0.025, 0.05, 0.075 (the same sums the loop computes):
    # the other writer commits at 0.06, so the fourth try gets in.
    expected = 0.0
    for _ in range(3):
        expected += LOCK_RETRY_INTERVAL
    with write_lock(db_path) as holder:

        async def commit_later() -> None:
            await trio.sleep(0.06)
            holder.execute(
                "INSERT INTO messages (room_id, sender, text, created_at)"
                " VALUES ('room_local', 'Other', 'first', 'x')"
            )
            holder.execute("COMMIT")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(commit_later)
            message = await chat.send(CEDAR, "second")
    assert trio.current_time() == expected
    assert message["id"] == "2"
    assert chat.statistics().lock_waits == 3


async def test_a_send_gives_up_after_the_lock_wait_limit(
    autojump_clock: trio.testing.MockClock, db_path: Path
) -> None:
    with opened(db_path, lock_wait_limit=0.1) as chat:
        await chat.read(ROOM)
        with write_lock(db_path), pytest.raises(LocalChatBusy) as info:
            await chat.send(CEDAR, "never")
        assert trio.current_time() == 0.1
        assert str(db_path) in str(info.value)
    assert rows(db_path) == []


async def test_a_wait_for_the_lock_is_cancellable(
    autojump_clock: trio.testing.MockClock, chat: LocalChat, db_path: Path
) -> None:
    await chat.read(ROOM)
    with write_lock(db_path), trio.move_on_after(0.5):
        await chat.send(CEDAR, "never")
    assert trio.current_time() == 0.5
    assert rows(db_path) == []


# --- a real second process holding the write lock --------------------------------------------

LOCK_HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("COMMIT")
"""


async def read_line(stream: trio.abc.ReceiveStream) -> bytes:
    data = b""
    while not data.endswith(b"\n"):
        chunk = await stream.receive_some(1)
        assert chunk, "the lock holder exited"
        data += chunk
    return data


@asynccontextmanager
async def lock_holder(path: Path) -> AsyncIterator[trio.Process]:
    """A Python process holding the write lock until it reads a line on stdin."""
    async with trio.open_nursery() as nursery:
        run = functools.partial(
            trio.run_process,
            [sys.executable, "-c", LOCK_HOLDER, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        process = cast("trio.Process", await nursery.start(run))
        assert process.stdout is not None
        assert await read_line(process.stdout) == b"locked\n"
        yield process


async def release(process: trio.Process) -> None:
    assert process.stdin is not None
    await process.stdin.send_all(b"go\n")


async def test_a_send_blocked_by_another_process_fails_once_replaced(
    chat: LocalChat, db_path: Path
) -> None:
    """PROTOCOL §8.3 item 14: blocked behind a lock, re-registered meanwhile: nothing written."""
    await chat.send(CEDAR, "before")
    replaced = False
    checks: list[bool] = []

    async def check() -> None:
        await trio.lowlevel.checkpoint()
        checks.append(replaced)
        if replaced:
            raise WorkerError(CONNECTION_REPLACED_OR_DISCONNECTED_TEXT)

    with trio.fail_after(20):
        async with lock_holder(db_path) as process, trio.open_nursery() as nursery:

            async def reregister_then_release() -> None:
                nonlocal replaced
                await trio.testing.wait_all_tasks_blocked()  # the send sleeps between tries
                assert chat.statistics().lock_waits >= 1
                assert checks == []
                replaced = True  # the worker was registered again elsewhere
                await release(process)

            nursery.start_soon(reregister_then_release)
            with pytest.raises(WorkerError, match="replaced or disconnected"):
                await chat.send(CEDAR, "late", check=check)
    assert checks == [True]
    assert [r[2] for r in rows(db_path)] == ["before"]


async def test_a_send_blocked_by_another_process_goes_through_after_release(
    chat: LocalChat, db_path: Path
) -> None:
    await chat.read(ROOM)
    with trio.fail_after(20):
        async with lock_holder(db_path) as process, trio.open_nursery() as nursery:

            async def release_when_waiting() -> None:
                await trio.testing.wait_all_tasks_blocked()
                await release(process)

            nursery.start_soon(release_when_waiting)
            message = await chat.send(CEDAR, "waited")
    assert message["id"] == "1"
    assert chat.statistics().lock_waits >= 1
    assert [r[2] for r in rows(db_path)] == ["waited"]


async def test_a_send_behind_a_stuck_process_fails_busy(db_path: Path) -> None:
    with opened(db_path, lock_wait_limit=0.3) as chat:
        await chat.read(ROOM)
        with trio.fail_after(20):
            async with lock_holder(db_path) as process:
                start = trio.current_time()
                with pytest.raises(LocalChatBusy):
                    await chat.send(CEDAR, "never")
                assert trio.current_time() - start >= 0.3
                await release(process)
    assert rows(db_path) == []


# --- waiting -------------------------------------------------------------------------------


async def test_wait_returns_at_once_when_a_newer_message_exists(
    autojump_clock: trio.testing.MockClock, chat: LocalChat
) -> None:
    await chat.send(CEDAR, "one")
    await chat.send(CEDAR, "two")
    assert texts(await chat.wait(ROOM)) == ["one", "two"]
    assert texts(await chat.wait(ROOM, after=1)) == ["two"]
    assert trio.current_time() == 0


async def test_a_send_in_this_process_wakes_the_wait_at_once(
    autojump_clock: trio.testing.MockClock, chat: LocalChat
) -> None:
    async def send_later() -> None:
        await trio.sleep(1.1)
        await chat.send(BIRCH, "now")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(send_later)
        page = await chat.wait(ROOM)
    assert trio.current_time() == 1.1
    assert texts(page) == ["now"]


async def test_a_send_in_another_process_is_seen_at_the_next_recheck(
    autojump_clock: trio.testing.MockClock, chat: LocalChat, other: LocalChat
) -> None:
    await chat.send(CEDAR, "old")

    async def send_later() -> None:
        await trio.sleep(1.1)
        await other.send(BIRCH, "new")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(send_later)
        page = await chat.wait(ROOM, after=1)
    # Looks at 0, 0.25, …, 1.0, 1.25: the first look after 1.1.
    assert trio.current_time() == 5 * WAIT_RECHECK_INTERVAL == 1.25
    assert texts(page) == ["new"]


async def test_wait_ignores_other_rooms(
    autojump_clock: trio.testing.MockClock, chat: LocalChat
) -> None:
    async def send_later() -> None:
        await trio.sleep(1)
        await chat.send(ELSEWHERE, "not here")  # wakes the waiter, which looks again
        await trio.sleep(1)
        await chat.send(CEDAR, "here")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(send_later)
        page = await chat.wait(ROOM)
    assert trio.current_time() == 2
    assert texts(page) == ["here"]


async def test_a_wait_is_bounded_and_cancelled_by_its_caller(
    autojump_clock: trio.testing.MockClock, chat: LocalChat
) -> None:
    page = None
    with trio.move_on_after(3) as scope:
        page = await chat.wait(ROOM)
    assert scope.cancelled_caught
    assert page is None
    assert trio.current_time() == 3
    assert chat.statistics().open_waits == 0
    assert texts(await chat.read(ROOM)) == []


async def test_open_waits_are_counted(
    autojump_clock: trio.testing.MockClock, chat: LocalChat
) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(chat.wait, ROOM)
        nursery.start_soon(chat.wait, ROOM)
        await trio.testing.wait_all_tasks_blocked()
        assert chat.statistics().open_waits == 2
        await chat.send(CEDAR, "wake")
    assert chat.statistics().open_waits == 0
    assert trio.current_time() == 0


async def test_a_replaced_worker_wait_fails_when_a_message_arrives(
    autojump_clock: trio.testing.MockClock, chat: LocalChat, other: LocalChat
) -> None:
    """PROTOCOL §8.3 item 14: the predecessor's wait fails; it never gets the message."""
    valid = True
    asked: list[float] = []

    async def still_valid() -> bool:
        asked.append(trio.current_time())
        await trio.lowlevel.checkpoint()
        return valid

    async def reconnect_elsewhere_then_send() -> None:
        nonlocal valid
        await trio.sleep(0.6)
        valid = False  # the worker was registered again in another process
        await other.send(BIRCH, "for the successor")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(reconnect_elsewhere_then_send)
        with pytest.raises(WorkerError) as info:
            await chat.wait(ROOM, still_valid=still_valid)
    assert str(info.value) == CONNECTION_REPLACED_OR_DISCONNECTED_TEXT
    assert trio.current_time() == 0.75
    assert asked == [0, 0.25, 0.5, 0.75]
    assert texts(await other.read(ROOM)) == ["for the successor"]


async def test_a_wait_still_valid_returns_messages(
    autojump_clock: trio.testing.MockClock, chat: LocalChat
) -> None:
    async def still_valid() -> bool:
        await trio.lowlevel.checkpoint()
        return True

    await chat.send(CEDAR, "hi")
    assert texts(await chat.wait(ROOM, still_valid=still_valid)) == ["hi"]


RACER = """
import sys, trio
from letagents_trio.workers._local_chat import LocalChat
from letagents_trio._session import AgentSession

path, name, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
print("ready", flush=True)
sys.stdin.readline()


async def main() -> None:
    chat = LocalChat(path)
    session = AgentSession(
        session_id="local_" + name, session_token="t", room_id="room_local", display_name=name
    )
    try:
        for i in range(count):
            await chat.send(session, f"{name}-{i}")
    finally:
        chat.close()


trio.run(main)
"""


async def test_processes_racing_to_create_the_file_all_write(db_path: Path) -> None:
    """Four processes open a missing file at once: one schema, every message, in order."""
    names, per_process = ["p0", "p1", "p2", "p3"], 25
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            processes = []
            for name in names:
                run = functools.partial(
                    trio.run_process,
                    [sys.executable, "-c", RACER, str(db_path), name, str(per_process)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                )
                process = cast("trio.Process", await nursery.start(run))
                assert process.stdout is not None
                assert await read_line(process.stdout) == b"ready\n"
                processes.append(process)
            for process in processes:
                await release(process)
    stored = rows(db_path)
    assert [r[0] for r in stored] == list(range(1, len(names) * per_process + 1))
    for name in names:
        mine = [r[2] for r in stored if r[2].startswith(name + "-")]
        assert mine == [f"{name}-{i}" for i in range(per_process)]
    assert mode_of(db_path) == 0o600
