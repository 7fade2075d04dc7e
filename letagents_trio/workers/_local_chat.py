"""The chat of local rooms: one SQLite file shared by every MCP server of the user.

A room the chat-storage settings file marks ``local`` (PROTOCOL §6.1) never
sees HTTP. Its messages live in ``~/.letagents/local-chat.sqlite`` (or the
path given: the MCP server passes ``LETAGENTS_LOCAL_CHAT_DB`` when it is set),
which every MCP server process of the user opens at once, so all the
coordination is SQLite's own file locking.

The algorithm, per call:

1. **Open once, lazily.** The first call creates the parent directory and the
   file (mode ``0600``, before SQLite sees it, so the ``-wal`` and ``-shm``
   files SQLite adds inherit that mode), then checks the header: an empty
   file gets the schema inside ``BEGIN IMMEDIATE`` (two processes racing to
   create it agree); a file with our ``application_id`` and schema version is
   used as it is; anything else (not SQLite, another program's database, a
   newer schema) raises :class:`LocalChatUnavailable` and nothing is written
   to it. The journal is WAL, so readers never wait for the writer.
2. **One short transaction per call**, on trio's thread: SQLite calls take
   microseconds here, so there are no worker threads and MockClock tests stay
   exact. A call that finds the database locked by another process does not
   wait inside SQLite for long: the busy timeout is :data:`BUSY_TIMEOUT`
   (blocking trio's thread at most that long), after which the call sleeps
   :data:`LOCK_RETRY_INTERVAL` with ``trio.sleep_until`` (cancellable) and
   tries again, until :attr:`LocalChat.lock_wait_limit` seconds on trio's clock
   have passed; then :class:`LocalChatBusy`. This is waiting for another
   process's lock, which no event can announce, not polling a condition.
3. **send** takes the write lock first (``BEGIN IMMEDIATE``), then runs the
   caller's ``check`` (the worker's connection re-check, PROTOCOL §6.6) inside
   that transaction, then inserts and commits. The check therefore runs after
   every write queued ahead of ours: a send that waited behind another
   process's lock while its worker was re-registered elsewhere fails at the
   check and writes nothing (PROTOCOL §8.3 item 14).
4. **wait** is a long poll across processes. SQLite cannot notify another
   process, so a waiter re-reads every :data:`WAIT_RECHECK_INTERVAL` seconds;
   a send through the *same* :class:`LocalChat` wakes its waiters at once
   through a ``trio.Event``. On every look the waiter also asks
   ``still_valid()``; once it says no, the wait fails with the §5.2 item 13
   text, and a replaced worker never receives a message meant for its
   successor.

Message JSON matches the room API's (``message_json`` of the reference room):
``id`` (a decimal string; cursors are its integer value), ``room_id``,
``sender``, ``text``, ``created_at`` (ISO 8601 with milliseconds and ``Z``),
``agent_session_id``, ``source`` and ``prompt_kind``. Pages have the room's
shape ``{"messages": [...], "has_more": bool, "room_id": ...}``, so a tool can
format local and hosted answers with the same code.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar, final

import attrs
import trio

from .._errors import LocalChatBusy, LocalChatError, LocalChatUnavailable, WorkerError

# Page sizes, the text limit and the refusals' texts are the reference room's
# (one place: _protocol), so a room behaves the same whether local or hosted.
from .._protocol import (
    BAD_CURSOR_TEXT,
    DEFAULT_MESSAGE_PAGE,
    MAX_MESSAGE_CHARS,
    MAX_MESSAGE_PAGE,
    TEXT_REQUIRED_TEXT,
    TEXT_TOO_LONG_TEXT,
    format_iso,
)
from ._paths import LOCAL_CHAT_DB_ENV, LOCAL_CHAT_FILE, letagents_file
from ._state import LOCK_POLL_INTERVAL
from ._wire import CONNECTION_REPLACED_OR_DISCONNECTED_TEXT

if TYPE_CHECKING:
    from .._session import AgentSession

__all__ = [
    "BAD_CURSOR_TEXT",
    "BUSY_TIMEOUT",
    "DEFAULT_MESSAGE_PAGE",
    "LOCK_RETRY_INTERVAL",
    "LOCK_WAIT_LIMIT",
    "MAX_MESSAGE_CHARS",
    "MAX_MESSAGE_PAGE",
    "TEXT_REQUIRED_TEXT",
    "TEXT_TOO_LONG_TEXT",
    "WAIT_RECHECK_INTERVAL",
    "LocalChat",
    "LocalChatStatistics",
    "message_cursor",
]

logger = logging.getLogger("letagents_trio.local_chat")

_T = TypeVar("_T")

# SQLite's own wait for a lock, in seconds. It blocks trio's thread, so it is
# kept short: it absorbs the common sub-millisecond overlap of two writers, and
# anything longer goes through the cancellable retry loop.
BUSY_TIMEOUT: Final = 0.010
# Pause between two tries for a lock another process holds: the state file
# lock's interval (PROTOCOL §6.1), short next to a human's patience, long next
# to one insert.
LOCK_RETRY_INTERVAL: Final = LOCK_POLL_INTERVAL
# The longest a call waits for another process's lock before LocalChatBusy:
# better-sqlite3's default busy timeout, which is what the Node client waits.
LOCK_WAIT_LIMIT: Final = 5.0
# How often a waiter re-reads the file. There is no cross-process wake-up in
# SQLite; a quarter second keeps delivery between two MCP servers well under a
# chat turn's latency, for about four indexed reads (and four state-file
# checks) a second per waiting worker. Same-process sends wake waiters at once.
WAIT_RECHECK_INTERVAL: Final = 0.25

# "LAgC": marks the file as ours, so another program's database is never written.
_APPLICATION_ID: Final = 0x4C416743
# Bumped when the table changes; a newer file is refused, not downgraded.
_SCHEMA_VERSION: Final = 1
_SCHEMA: Final = (
    """
    CREATE TABLE messages (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        room_id TEXT NOT NULL,
        agent_session_id TEXT,
        sender TEXT NOT NULL,
        text TEXT NOT NULL,
        created_at TEXT NOT NULL,
        source TEXT,
        prompt_kind TEXT
    )
    """,
    "CREATE INDEX messages_room ON messages (room_id, id)",
)
_COLUMNS: Final = "id, room_id, agent_session_id, sender, text, created_at, source, prompt_kind"
# The file's header fields and table count, read atomically (see LocalChat._ours).
_HEADER_QUERY: Final = (
    "SELECT application_id, user_version, (SELECT count(*) FROM sqlite_schema)"
    " FROM pragma_application_id, pragma_user_version"
)
# SQLite's primary result codes for "someone else holds a lock".
_BUSY_CODES: Final = frozenset({sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED})


def _to_path(value: os.PathLike[str] | str | None) -> Path:
    return letagents_file(LOCAL_CHAT_FILE) if value is None else Path(value)


def message_cursor(after_message_id: str | None) -> int | None:
    """The cursor of a tool's ``after_message_id``: ``None`` when absent or blank.

    Raises:
        LocalChatError: ``BAD_CURSOR_TEXT`` for anything but a message id
            (decimal digits), as the room answers.
    """
    if after_message_id is None or not after_message_id.strip():
        return None
    text = after_message_id.strip()
    if not text.isascii() or not text.isdigit() or len(text) > 18:
        raise LocalChatError(BAD_CURSOR_TEXT)
    return int(text)


def _is_busy(exc: sqlite3.Error) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    return isinstance(code, int) and code & 0xFF in _BUSY_CODES


def _message_json(row: tuple[Any, ...]) -> dict[str, Any]:
    message_id, room_id, session_id, sender, text, created_at, source, prompt_kind = row
    return {
        "id": str(message_id),
        "room_id": room_id,
        "sender": sender,
        "text": text,
        "created_at": created_at,
        "agent_session_id": session_id,
        "source": source,
        "prompt_kind": prompt_kind,
    }


def _begin_immediate(conn: sqlite3.Connection) -> sqlite3.Connection:
    # Takes the write lock now, not at the first write: the check must run under it.
    conn.execute("BEGIN IMMEDIATE")
    return conn


def _clamp_limit(limit: int) -> int:
    return max(1, min(int(limit), MAX_MESSAGE_PAGE))


@final
@attrs.frozen(kw_only=True)
class LocalChatStatistics:
    """A snapshot of one :class:`LocalChat`.

    Attributes:
        sends: messages written.
        refused_sends: sends whose ``check`` failed (nothing written).
        lock_waits: tries that found another process's lock and slept.
        open_waits: :meth:`LocalChat.wait` calls waiting now.
        connected: whether the database is open.
    """

    sends: int
    refused_sends: int
    lock_waits: int
    open_waits: int
    connected: bool


@final
@attrs.define(eq=False)
class LocalChat:
    """The local rooms' chat database, shared with every process of the user.

    Creating the object touches nothing; the file is opened (and created, with
    its schema) by the first call. Call :meth:`close` when done.

    Args:
        path: the SQLite file; ``None`` means ``~/.letagents/local-chat.sqlite``.
        wall_clock: Unix time for ``created_at`` (tests pass a fixed clock).
        lock_wait_limit: seconds on trio's clock a call waits for another
            process's lock before :class:`LocalChatBusy`.
    """

    path: Path = attrs.field(default=None, converter=_to_path)
    wall_clock: Callable[[], float] = attrs.field(default=time.time, repr=False)
    lock_wait_limit: float = LOCK_WAIT_LIMIT
    _conn: sqlite3.Connection | None = attrs.field(default=None, init=False, repr=False)
    # Serialises this object's sends: the connection has one transaction at a
    # time, and a send awaits its check inside one.
    _write_lock: trio.Lock = attrs.field(factory=trio.Lock, init=False, repr=False)
    # Replaced after every send; waiters of this object wait on it.
    _sent: trio.Event = attrs.field(factory=trio.Event, init=False, repr=False)
    _sends: int = attrs.field(default=0, init=False, repr=False)
    _refused: int = attrs.field(default=0, init=False, repr=False)
    _lock_waits: int = attrs.field(default=0, init=False, repr=False)
    _open_waits: int = attrs.field(default=0, init=False, repr=False)

    def statistics(self) -> LocalChatStatistics:
        """A frozen snapshot of the counters."""
        return LocalChatStatistics(
            sends=self._sends,
            refused_sends=self._refused,
            lock_waits=self._lock_waits,
            open_waits=self._open_waits,
            connected=self._conn is not None,
        )

    def close(self) -> None:
        """Close the database; a later call opens it again."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    # --- opening -----------------------------------------------------------------

    def _unavailable(self, exc: BaseException) -> LocalChatUnavailable:
        return LocalChatUnavailable(f"The local chat database {self.path} cannot be used: {exc}")

    def _create_file(self) -> None:
        """Create the parent directory and an empty file with mode 0600, if absent."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            return
        os.close(fd)
        os.chmod(self.path, 0o600)  # whatever the umask took away
        logger.info("created the local chat database %s", self.path)

    def _open(self) -> sqlite3.Connection:
        """The open connection; opens it (and creates the schema) on first use.

        Raises:
            sqlite3.Error: busy (the caller retries) or any other failure.
            LocalChatUnavailable: the file is not ours to use.
            OSError: the file or its directory cannot be created.
        """
        if self._conn is not None:
            return self._conn
        self._create_file()
        conn = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT, isolation_level=None)
        try:
            self._prepare(conn)
        except BaseException:
            conn.close()
            raise
        self._conn = conn
        return conn

    def _prepare(self, conn: sqlite3.Connection) -> None:
        # Reads the header first: a file that is not SQLite fails here, before
        # any write (journal mode included) could touch it.
        if not self._ours(conn):
            conn.execute("PRAGMA journal_mode=WAL").fetchone()
            conn.execute("BEGIN IMMEDIATE")
            try:
                if not self._ours(conn):  # another process may have won the race
                    for statement in _SCHEMA:
                        conn.execute(statement)
                    conn.execute(f"PRAGMA application_id = {_APPLICATION_ID}")
                    conn.execute(f"PRAGMA user_version = {_SCHEMA_VERSION}")
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        # WAL's usual pairing: commits survive a crash of this process, and a
        # power cut loses at most the last messages, never the file.
        conn.execute("PRAGMA synchronous=NORMAL")

    def _ours(self, conn: sqlite3.Connection) -> bool:
        """True for our schema, False for an empty file; raises for anything else.

        The header and the table count are read in one statement, so one
        snapshot: read apart, another process could commit the schema between
        the reads, and an empty header with tables would look like another
        program's database.
        """
        app_id, version, tables = conn.execute(_HEADER_QUERY).fetchone()
        if app_id == _APPLICATION_ID:
            if version == _SCHEMA_VERSION:
                return True
            raise LocalChatUnavailable(
                f"The local chat database {self.path} has schema version {version};"
                f" this letagents-trio reads version {_SCHEMA_VERSION}. Nothing was written to it."
            )
        if app_id != 0 or version != 0 or tables:
            raise LocalChatUnavailable(
                f"The local chat database {self.path} belongs to another program"
                " (or another version of letagents). Nothing was written to it;"
                f" move it away or point {LOCAL_CHAT_DB_ENV} at another file."
            )
        return False

    # --- the retry loop ------------------------------------------------------------

    async def _run(self, op: Callable[[sqlite3.Connection], _T]) -> _T:
        """Run one short synchronous step, retrying while another process holds a lock.

        Raises:
            LocalChatBusy: still locked after ``lock_wait_limit`` seconds.
            LocalChatUnavailable: the file cannot be opened or used.
        """
        await trio.lowlevel.checkpoint()
        deadline = trio.current_time() + self.lock_wait_limit
        while True:
            try:
                return op(self._open())
            except sqlite3.Error as exc:
                if not _is_busy(exc):
                    self.close()
                    raise self._unavailable(exc) from exc
            except OSError as exc:
                raise self._unavailable(exc) from exc
            self._lock_waits += 1
            now = trio.current_time()
            if now >= deadline:
                raise LocalChatBusy(
                    f"Another process held the local chat database {self.path} locked"
                    f" for more than {self.lock_wait_limit:g} s; nothing was written."
                )
            await trio.sleep_until(min(now + LOCK_RETRY_INTERVAL, deadline))

    # --- the public calls ----------------------------------------------------------

    async def send(
        self,
        session: AgentSession,
        text: str,
        *,
        check: Callable[[], Awaitable[None]] | None = None,
    ) -> dict[str, Any]:
        """Post ``text`` to ``session``'s room as that session.

        Takes the database's write lock (waiting for other processes as the
        module docstring says), runs ``check`` while holding it, then inserts
        and commits. ``check`` is the worker's connection re-check (PROTOCOL
        §6.6): if it raises, the transaction is rolled back and the error
        propagates. It runs while every other process's writes wait, so it
        must be short (a state-file read, not a network call).

        Args:
            session: the sender; its ``room_id``, ``session_id`` and
                ``display_name`` go into the message.
            text: the message; not blank, at most :data:`MAX_MESSAGE_CHARS`.
            check: awaited inside the write transaction, before the insert.

        Returns:
            The stored message's JSON, as the room API answers a send.

        Raises:
            LocalChatError: blank or too long ``text`` (the room's texts).
            LocalChatBusy: another process held the write lock too long.
            LocalChatUnavailable: the database is damaged or not ours.
            Exception: whatever ``check`` raised; nothing was written.

        Cancellation:
            A checkpoint. Cancelled while waiting for the lock or inside
            ``check``, nothing is written (the transaction is rolled back).
            The insert and commit do not checkpoint: once ``check`` returned,
            the message is either fully written or, on error, not at all.
        """
        if not text.strip():
            raise LocalChatError(TEXT_REQUIRED_TEXT)
        if len(text) > MAX_MESSAGE_CHARS:
            raise LocalChatError(TEXT_TOO_LONG_TEXT)
        try:
            text.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise LocalChatError("text is not valid Unicode") from exc
        async with self._write_lock:
            conn = await self._run(_begin_immediate)
            try:
                if check is not None:
                    await check()
                created_at = format_iso(self.wall_clock())
                cursor = conn.execute(
                    "INSERT INTO messages (room_id, agent_session_id, sender, text, created_at)"
                    " VALUES (?, ?, ?, ?, ?)",
                    (session.room_id, session.session_id, session.display_name, text, created_at),
                )
                conn.execute("COMMIT")
            except sqlite3.Error as exc:
                self._rollback(conn)
                self.close()
                raise self._unavailable(exc) from exc
            except Exception:
                # The check refused (or failed): nothing is written.
                self._rollback(conn)
                self._refused += 1
                raise
            except BaseException:
                self._rollback(conn)
                raise
        self._sends += 1
        self._sent.set()
        self._sent = trio.Event()
        message_id = cursor.lastrowid
        logger.debug("local message %s in room %s", message_id, session.room_id)
        return {
            "id": str(message_id),
            "room_id": session.room_id,
            "sender": session.display_name,
            "text": text,
            "created_at": created_at,
            "agent_session_id": session.session_id,
            "source": None,
            "prompt_kind": None,
        }

    @staticmethod
    def _rollback(conn: sqlite3.Connection) -> None:
        try:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
        except sqlite3.Error:
            # A failed rollback leaves nothing committed; closing the
            # connection (done by the caller on sqlite errors) discards it.
            logger.warning("rollback of a local chat send failed", exc_info=True)

    def _page_now(
        self, conn: sqlite3.Connection, room_id: str, after: int, limit: int
    ) -> dict[str, Any]:
        rows = conn.execute(
            f"SELECT {_COLUMNS} FROM messages WHERE room_id = ? AND id > ? ORDER BY id LIMIT ?",
            (room_id, after, limit + 1),
        ).fetchall()
        return {
            "messages": [_message_json(row) for row in rows[:limit]],
            "has_more": len(rows) > limit,
            "room_id": room_id,
        }

    async def read(
        self, room_id: str, *, after: int | None = None, limit: int = DEFAULT_MESSAGE_PAGE
    ) -> dict[str, Any]:
        """One page of ``room_id``'s messages with ids above ``after``, oldest first.

        Args:
            room_id: the local room.
            after: a message id (see :func:`message_cursor`); ``None`` reads
                from the start, as the room does.
            limit: page size, clamped to 1 … :data:`MAX_MESSAGE_PAGE`.

        Returns:
            ``{"messages": [...], "has_more": bool, "room_id": room_id}``.

        Raises:
            LocalChatBusy: another process held a lock too long (rare in WAL).
            LocalChatUnavailable: the database is damaged or not ours.

        Cancellation:
            A checkpoint; a read has nothing to undo.
        """
        cursor, size = after or 0, _clamp_limit(limit)
        return await self._run(lambda conn: self._page_now(conn, room_id, cursor, size))

    async def latest(self, room_id: str, *, limit: int = DEFAULT_MESSAGE_PAGE) -> dict[str, Any]:
        """``room_id``'s newest ``limit`` messages, oldest of them first (the room's
        ``before=latest`` page).

        Returns:
            ``{"messages": [...], "has_more": bool, "has_older": bool, "room_id": room_id}``;
            ``has_older`` (and ``has_more``, the same) says older messages remain.

        Raises:
            LocalChatBusy, LocalChatUnavailable: as :meth:`read`.

        Cancellation:
            A checkpoint; a read has nothing to undo.
        """
        size = _clamp_limit(limit)

        def newest(conn: sqlite3.Connection) -> dict[str, Any]:
            rows = conn.execute(
                f"SELECT {_COLUMNS} FROM messages WHERE room_id = ? ORDER BY id DESC LIMIT ?",
                (room_id, size + 1),
            ).fetchall()
            older = len(rows) > size
            return {
                "messages": [_message_json(row) for row in reversed(rows[:size])],
                "has_more": older,
                "has_older": older,
                "room_id": room_id,
            }

        return await self._run(newest)

    async def wait(
        self,
        room_id: str,
        *,
        after: int | None = None,
        limit: int = DEFAULT_MESSAGE_PAGE,
        still_valid: Callable[[], Awaitable[bool]] | None = None,
    ) -> dict[str, Any]:
        """Wait until ``room_id`` has a message with an id above ``after``; return the page.

        Looks at once, then every :data:`WAIT_RECHECK_INTERVAL` seconds (another
        process's send is seen at the next look; a send through this object
        wakes the waiter at once). There is no timeout: the caller bounds the
        wait, e.g. ``with trio.move_on_after(seconds):``, and on expiry answers
        with :meth:`read` (an empty page, unless a message just arrived).

        Args:
            room_id: the local room.
            after: a message id; ``None`` means any message.
            limit: page size, clamped to 1 … :data:`MAX_MESSAGE_PAGE`.
            still_valid: asked on every look, after the read and before
                returning: once it answers ``False`` the wait fails, so a
                replaced worker never returns its successor's messages.

        Returns:
            A non-empty page, shaped as :meth:`read` returns it.

        Raises:
            WorkerError: ``CONNECTION_REPLACED_OR_DISCONNECTED_TEXT`` when
                ``still_valid`` answered ``False``.
            LocalChatBusy, LocalChatUnavailable: as :meth:`read`.

        Cancellation:
            Cancellable at every look and every pause; nothing to undo.
        """
        cursor, size = after or 0, _clamp_limit(limit)
        self._open_waits += 1
        try:
            while True:
                # Taken before the read, so a send after the read still wakes us.
                sent = self._sent
                page = await self._run(lambda conn: self._page_now(conn, room_id, cursor, size))
                if still_valid is not None and not await still_valid():
                    raise WorkerError(CONNECTION_REPLACED_OR_DISCONNECTED_TEXT)
                if page["messages"]:
                    return page
                with trio.move_on_after(WAIT_RECHECK_INTERVAL):
                    await sent.wait()
        finally:
            self._open_waits -= 1
