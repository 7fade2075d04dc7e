"""The reference room's rows in one SQLite file (:class:`SQLiteStore`).

Stdlib ``sqlite3``, WAL journal, one short transaction per call. One table per
row kind; each row is a JSON document (``attrs.asdict``) beside the columns the
room looks rows up by, so a restart keeps rooms, sessions, messages, tasks,
leases, guidelines and knowledge records. Messages that belong to a thread are
also indexed by their thread's root (``message_threads``), so a thread's
summary is one indexed query.

A write SQLite refuses (a full disk, a read-only file, an I/O error) raises
:class:`~._store_errors.StoreWriteError` and stores nothing of itself: each write is one
statement, or one transaction (:meth:`SQLiteStore.atomic` makes several writes
all-or-nothing); reads go on working.

Tables of an older layout (``tasks``, ``leases``) are left as they are and
never read: their rows lack the fields tasks and leases carry now, so a file
written by an older version opens without error and simply starts an empty
board.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Collection, Iterator
from pathlib import Path
from typing import Any, Final, TypeVar, final

import attrs

from ._agent_tables import AGENT_SCHEMA, SQLiteAgentTables
from ._auth_rows import MintedTokenRow
from ._board_store import BOARD_SCHEMA, SQLiteBoardRecords
from ._presence_rows import PRESENCE_SCHEMA, PresenceRow, SQLitePresence
from ._rows import (
    LEASE_ACTIVE,
    Account,
    GuidelinesRow,
    KnowledgeRow,
    LeaseRow,
    MessageRow,
    RoomRow,
    SessionRow,
    TaskRow,
)
from ._store import lease_order
from ._store_errors import WriteRefusals

__all__ = ["DB_FILE_MODE", "SQLiteStore"]

# The database file (and so its WAL and SHM files): owner-only.
DB_FILE_MODE: Final = 0o600

_Row = TypeVar(
    "_Row",
    Account,
    RoomRow,
    SessionRow,
    MessageRow,
    TaskRow,
    LeaseRow,
    GuidelinesRow,
    KnowledgeRow,
    MintedTokenRow,
)

# Keyed tables have a text id, the room id (empty for accounts) so per-room
# reads use an index, and the JSON document.
_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS accounts (id TEXT PRIMARY KEY, room_id TEXT NOT NULL, doc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS rooms (id TEXT PRIMARY KEY, room_id TEXT NOT NULL, doc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sessions (id TEXT PRIMARY KEY, room_id TEXT NOT NULL, doc TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS sessions_room ON sessions (room_id, id);
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    room_id TEXT NOT NULL,
    dedupe_id TEXT,
    doc TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_room ON messages (room_id, id);
CREATE INDEX IF NOT EXISTS messages_dedupe ON messages (room_id, dedupe_id);
CREATE TABLE IF NOT EXISTS message_threads (
    message_id INTEGER PRIMARY KEY,
    room_id TEXT NOT NULL,
    root_id INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS message_threads_root ON message_threads (room_id, root_id, message_id);
CREATE TABLE IF NOT EXISTS room_tasks (
    room_id TEXT NOT NULL,
    number INTEGER NOT NULL,
    status TEXT NOT NULL,
    doc TEXT NOT NULL,
    PRIMARY KEY (room_id, number)
);
CREATE TABLE IF NOT EXISTS task_leases (
    id TEXT PRIMARY KEY,
    room_id TEXT NOT NULL,
    status TEXT NOT NULL,
    doc TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS task_leases_room ON task_leases (room_id, status);
CREATE TABLE IF NOT EXISTS guidelines (
    id TEXT PRIMARY KEY, room_id TEXT NOT NULL, doc TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS knowledge (
    room_id TEXT NOT NULL,
    id TEXT NOT NULL,
    type TEXT NOT NULL,
    doc TEXT NOT NULL,
    PRIMARY KEY (room_id, id)
);
CREATE TABLE IF NOT EXISTS minted_tokens (
    id TEXT PRIMARY KEY, room_id TEXT NOT NULL, doc TEXT NOT NULL
);
"""


def _doc(row: Any) -> str:
    return json.dumps(attrs.asdict(row), separators=(",", ":"), sort_keys=True)


def _load(cls: type[_Row], doc: str) -> _Row:
    data: dict[str, Any] = json.loads(doc)
    return cls(**data)


def _loads(cls: type[_Row], rows: list[Any]) -> list[_Row]:
    return [_load(cls, doc) for (doc,) in rows]


@final
@attrs.define(eq=False)
class SQLiteStore:
    """A :class:`~letagents_trio.room_server.RoomStore` in one SQLite file (WAL, short writes).

    Args:
        path: the database file; created with its tables when missing.
    """

    path: Path = attrs.field(converter=Path)
    _db: sqlite3.Connection = attrs.field(init=False, repr=False)
    _transactions: int = attrs.field(default=0, init=False, repr=False)
    _refusals: WriteRefusals = attrs.field(factory=WriteRefusals, init=False, repr=False)
    board: SQLiteBoardRecords = attrs.field(init=False, repr=False)
    agents: SQLiteAgentTables = attrs.field(init=False, repr=False)
    _presence: SQLitePresence = attrs.field(init=False, repr=False)

    def __attrs_post_init__(self) -> None:
        # Owner-only, whatever the umask: the database holds messages and
        # session tokens. SQLite creates the -wal and -shm files with the
        # database file's mode; any left from an older run are tightened too.
        os.close(os.open(self.path, os.O_CREAT | os.O_RDWR, DB_FILE_MODE))
        for name in ("", "-wal", "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.chmod(f"{self.path}{name}", DB_FILE_MODE)
        self._db = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA + PRESENCE_SCHEMA)
        self._db.executescript(BOARD_SCHEMA)
        self.board = SQLiteBoardRecords(self._db, self._write, self.atomic)
        self._db.executescript(AGENT_SCHEMA)
        self.agents = SQLiteAgentTables(self._db, self._write)
        self._presence = SQLitePresence(self._db, self._write)

    def _write(self, sql: str, parameters: tuple[Any, ...]) -> sqlite3.Cursor:
        """One write statement (a transaction of its own outside :meth:`atomic`)."""
        try:
            return self._db.execute(sql, parameters)
        except sqlite3.Error as exc:
            raise self._refusals.of(exc, self.path) from exc

    @contextlib.contextmanager
    def atomic(self) -> Iterator[None]:
        """Make the writes inside all-or-nothing (see ``RoomStore.atomic``)."""
        if self._transactions:  # inside another: the outermost commits
            self._transactions += 1
            try:
                yield
            finally:
                self._transactions -= 1
            return
        try:
            self._db.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise self._refusals.of(exc, self.path) from exc
        self._transactions = 1
        try:
            yield
            self._db.execute("COMMIT")
        except sqlite3.Error as exc:
            self._rollback()
            raise self._refusals.of(exc, self.path) from exc
        except BaseException:
            self._rollback()
            raise
        finally:
            self._transactions = 0

    def _rollback(self) -> None:
        if self._db.in_transaction:  # SQLite may have rolled it back already
            with contextlib.suppress(sqlite3.Error):
                self._db.execute("ROLLBACK")

    def _put(self, table: str, key: str, room_id: str, row: Any) -> None:
        self._write(
            f"INSERT OR REPLACE INTO {table} (id, room_id, doc) VALUES (?, ?, ?)",
            (key, room_id, _doc(row)),
        )

    def _get(self, cls: type[_Row], table: str, key: str) -> _Row | None:
        found = self._db.execute(f"SELECT doc FROM {table} WHERE id = ?", (key,)).fetchone()
        return None if found is None else _load(cls, found[0])

    def get_minted_token(self, token_hash: str) -> MintedTokenRow | None:
        return self._get(MintedTokenRow, "minted_tokens", token_hash)

    def put_minted_token(self, row: MintedTokenRow) -> None:
        self._put("minted_tokens", row.token_hash, "", row)

    def get_account(self, login: str) -> Account | None:
        return self._get(Account, "accounts", login)

    def put_account(self, account: Account) -> None:
        self._put("accounts", account.login, "", account)

    def get_room(self, room_id: str) -> RoomRow | None:
        return self._get(RoomRow, "rooms", room_id)

    def put_room(self, room: RoomRow) -> None:
        self._put("rooms", room.room_id, room.room_id, room)

    def room_ids(self) -> list[str]:
        return [r for (r,) in self._db.execute("SELECT id FROM rooms ORDER BY id").fetchall()]

    def get_session(self, session_id: str) -> SessionRow | None:
        return self._get(SessionRow, "sessions", session_id)

    def put_session(self, session: SessionRow) -> None:
        self._put("sessions", session.session_id, session.room_id, session)

    def room_sessions(self, room_id: str) -> list[SessionRow]:
        rows = self._db.execute(
            "SELECT doc FROM sessions WHERE room_id = ? ORDER BY id", (room_id,)
        ).fetchall()
        return _loads(SessionRow, rows)

    # --- messages ------------------------------------------------------------------

    def add_message(self, message: MessageRow) -> MessageRow:
        # One transaction: a failed UPDATE must not leave a message without its doc.
        with self.atomic():
            cursor = self._write(
                "INSERT INTO messages (room_id, dedupe_id, doc) VALUES (?, ?, '')",
                (message.room_id, message.dedupe_id),
            )
            assert cursor.lastrowid is not None
            stored = attrs.evolve(message, message_id=cursor.lastrowid)
            self._write(
                "UPDATE messages SET doc = ? WHERE id = ?", (_doc(stored), stored.message_id)
            )
            if stored.thread_root_id is not None:
                self._write(
                    "INSERT INTO message_threads (message_id, room_id, root_id) VALUES (?, ?, ?)",
                    (stored.message_id, stored.room_id, stored.thread_root_id),
                )
        return stored

    def get_message(self, room_id: str, message_id: int) -> MessageRow | None:
        found = self._db.execute(
            "SELECT doc FROM messages WHERE room_id = ? AND id = ?", (room_id, message_id)
        ).fetchone()
        return None if found is None else _load(MessageRow, found[0])

    def messages_after(self, room_id: str, after: int, limit: int) -> list[MessageRow]:
        rows = self._db.execute(
            "SELECT doc FROM messages WHERE room_id = ? AND id > ? ORDER BY id LIMIT ?",
            (room_id, after, limit),
        ).fetchall()
        return _loads(MessageRow, rows)

    def messages_before(self, room_id: str, before: int | None, limit: int) -> list[MessageRow]:
        rows = self._db.execute(
            "SELECT doc FROM messages WHERE room_id = ? AND id < ? ORDER BY id DESC LIMIT ?",
            (room_id, 2**63 - 1 if before is None else before, limit),
        ).fetchall()
        return _loads(MessageRow, rows)[::-1]

    def thread_replies(self, room_id: str, root_id: int) -> tuple[int, MessageRow | None]:
        count, latest = self._db.execute(
            "SELECT count(*), max(message_id) FROM message_threads"
            " WHERE room_id = ? AND root_id = ?",
            (room_id, root_id),
        ).fetchone()
        return count, None if latest is None else self.get_message(room_id, latest)

    def message_by_dedupe_id(self, room_id: str, dedupe_id: str) -> MessageRow | None:
        found = self._db.execute(
            "SELECT doc FROM messages WHERE room_id = ? AND dedupe_id = ? LIMIT 1",
            (room_id, dedupe_id),
        ).fetchone()
        return None if found is None else _load(MessageRow, found[0])

    # --- tasks and leases ----------------------------------------------------------

    def add_task(self, task: TaskRow) -> TaskRow:
        with self.atomic():
            (last,) = self._db.execute(
                "SELECT coalesce(max(number), 0) FROM room_tasks WHERE room_id = ?",
                (task.room_id,),
            ).fetchone()
            stored = attrs.evolve(task, number=last + 1)
            self._write(
                "INSERT INTO room_tasks (room_id, number, status, doc) VALUES (?, ?, ?, ?)",
                (stored.room_id, stored.number, stored.status, _doc(stored)),
            )
        return stored

    def get_task(self, room_id: str, number: int) -> TaskRow | None:
        found = self._db.execute(
            "SELECT doc FROM room_tasks WHERE room_id = ? AND number = ?", (room_id, number)
        ).fetchone()
        return None if found is None else _load(TaskRow, found[0])

    def put_task(self, task: TaskRow) -> None:
        self._write(
            "UPDATE room_tasks SET status = ?, doc = ? WHERE room_id = ? AND number = ?",
            (task.status, _doc(task), task.room_id, task.number),
        )

    def tasks_page(
        self, room_id: str, *, after: int, limit: int, statuses: Collection[str] | None
    ) -> list[TaskRow]:
        query = "SELECT doc FROM room_tasks WHERE room_id = ? AND number > ?"
        args: list[object] = [room_id, after]
        if statuses is not None:
            query += f" AND status IN ({', '.join('?' for _ in statuses)})"
            args.extend(statuses)
        rows = self._db.execute(f"{query} ORDER BY number LIMIT ?", (*args, limit)).fetchall()
        return _loads(TaskRow, rows)

    def get_lease(self, lease_id: str) -> LeaseRow | None:
        return self._get(LeaseRow, "task_leases", lease_id)

    def put_lease(self, lease: LeaseRow) -> None:
        self._write(
            "INSERT OR REPLACE INTO task_leases (id, room_id, status, doc) VALUES (?, ?, ?, ?)",
            (lease.lease_id, lease.room_id, lease.status, _doc(lease)),
        )

    def active_leases(self, room_id: str) -> list[LeaseRow]:
        rows = self._db.execute(
            "SELECT doc FROM task_leases WHERE room_id = ? AND status = ?", (room_id, LEASE_ACTIVE)
        ).fetchall()
        return sorted(_loads(LeaseRow, rows), key=lease_order)

    # --- guidelines and knowledge --------------------------------------------------

    def get_guidelines(self, room_id: str) -> GuidelinesRow | None:
        return self._get(GuidelinesRow, "guidelines", room_id)

    def put_guidelines(self, row: GuidelinesRow) -> None:
        self._put("guidelines", row.room_id, row.room_id, row)

    def get_knowledge(self, room_id: str, record_id: str) -> KnowledgeRow | None:
        found = self._db.execute(
            "SELECT doc FROM knowledge WHERE room_id = ? AND id = ?", (room_id, record_id)
        ).fetchone()
        return None if found is None else _load(KnowledgeRow, found[0])

    def put_knowledge(self, row: KnowledgeRow) -> None:
        self._write(
            "INSERT OR REPLACE INTO knowledge (room_id, id, type, doc) VALUES (?, ?, ?, ?)",
            (row.room_id, row.record_id, row.type, _doc(row)),
        )

    def room_knowledge(self, room_id: str, kind: str) -> list[KnowledgeRow]:
        rows = self._db.execute(
            "SELECT doc FROM knowledge WHERE room_id = ? AND type = ?", (room_id, kind)
        ).fetchall()
        return _loads(KnowledgeRow, rows)

    def put_presence(self, row: PresenceRow) -> None:
        self._presence.put_presence(row)

    def room_presence(self, room_id: str, limit: int) -> list[PresenceRow]:
        return self._presence.room_presence(room_id, limit)

    def close(self) -> None:
        self._db.close()
