"""Storage for the reference room: one interface, a memory and a SQLite backend.

The room keeps seven kinds of rows: accounts, rooms, agent sessions (with every
evidence column of PROTOCOL.md §7.1), messages, tasks, leases and each room's
guidelines. Rows are
frozen attrs values; the room changes a row by building a new one
(``attrs.evolve``) and putting it back.

Every store call is synchronous and short. The room runs on one trio thread and
never awaits between reading rows and writing them back, so each such
read-modify-write is atomic without database locks; registrations that *do*
wait are serialised per room by the room's own ``trio.Lock``.

:class:`MemoryStore` keeps rows in dicts (tests, the demo). :class:`SQLiteStore`
keeps them in one SQLite file (stdlib ``sqlite3``, WAL journal, one short
transaction per call), one table per kind, each row a JSON document beside the
columns the room looks rows up by. A restart therefore keeps rooms, sessions,
messages, tasks and leases. Times are integer epoch milliseconds everywhere.
Session tokens are never stored: only their SHA-256 (``token_hash``).

A write SQLite refuses (a full disk, a read-only file, an I/O error) raises
:class:`~._store_errors.StoreWriteError` and stores nothing of itself: each write is one
statement, or one transaction (:meth:`RoomStore.atomic` makes several writes
all-or-nothing); reads go on working. The room answers such a request 507 or
503 and keeps its best-effort bookkeeping (an agent heard, a stream refreshed)
out of the way of reads.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any, Final, Protocol, TypeVar, final

import attrs

from ._store_errors import WriteRefusals

__all__ = [
    "END_REASON_DISCONNECT",
    "END_REASON_NAME_HANDOVER",
    "END_REASON_REPLACED",
    "END_REASON_ROOM_ADMIN",
    "Account",
    "GuidelinesRow",
    "LeaseRow",
    "MemoryStore",
    "MessageRow",
    "RoomRow",
    "RoomStore",
    "SQLiteStore",
    "SessionRow",
    "TaskRow",
]

# The database file (and so its WAL and SHM files): owner-only.
DB_FILE_MODE: Final = 0o600


@final
@attrs.frozen(kw_only=True)
class Account:
    """An owner account (dev auth: an owner token maps to a login)."""

    account_id: str
    login: str


def _strings(values: Iterable[str]) -> tuple[str, ...]:
    """A stored list (JSON has no tuples) as the row's tuple."""
    return tuple(values)


@final
@attrs.frozen(kw_only=True)
class RoomRow:
    """A room; rooms exist from their first registration (or an admin grant) on.

    Attributes:
        created_by: the account id whose registration made the room (its
            first admin); None for a room made by a grant, or stored before
            rooms recorded it.
        admins: account ids granted admin explicitly, besides the creator.
    """

    room_id: str
    created_at: int
    created_by: str | None = None
    admins: tuple[str, ...] = attrs.field(default=(), converter=_strings)


# How a session was ended, stored in its end_reason: it left itself, a newer
# registration of its instance replaced it, another took its name over, or the
# room's admin ended it (then its leases pass to no one).
END_REASON_DISCONNECT: Final = "disconnect"
END_REASON_REPLACED: Final = "replaced"
END_REASON_NAME_HANDOVER: Final = "name_handover"
END_REASON_ROOM_ADMIN: Final = "room_admin"


@final
@attrs.frozen(kw_only=True)
class SessionRow:
    """One agent session with the evidence columns of PROTOCOL.md §7.1.

    Times are epoch milliseconds (``None`` when unset). ``token_hash`` is the
    SHA-256 hex of the session token; the token itself is never stored.
    """

    session_id: str
    room_id: str
    token_hash: str = attrs.field(repr=False)
    session_kind: str = "worker"
    runtime: str | None = None
    host_id: str | None = None
    host_kind: str | None = None
    host_label: str | None = None
    liveness_capability: str | None = None
    tool_bridge_id: str | None = None
    actor_label: str = ""
    agent_key: str = ""
    agent_instance_id: str | None = None
    display_name: str = ""
    assigned_base_display_name: str | None = None
    owner_account_id: str = ""
    owner_label: str = ""
    supervisor_grant_id: str | None = None
    ide_label: str | None = None
    repo_branch: str | None = None
    created_at: int = 0
    updated_at: int = 0
    last_seen_at: int | None = None
    ended_at: int | None = None
    end_reason: str | None = None
    agent_heard_at: int | None = None
    process_seen_at: int | None = None
    process_connection_id: str | None = None
    process_disconnected_at: int | None = None
    process_host_id: str | None = None
    # Liveness notices (§7.5): the outage epoch last announced offline, when,
    # and when the recovery that followed it was announced.
    offline_epoch_announced: int | None = None
    offline_announced_at: int | None = None
    recovery_announced_at: int | None = None

    @property
    def live(self) -> bool:
        """True while the session has not ended."""
        return self.ended_at is None


@final
@attrs.frozen(kw_only=True)
class MessageRow:
    """A room chat message; ``message_id`` is assigned by the store (1, 2, ...)."""

    message_id: int = 0
    room_id: str
    sender: str
    text: str
    created_at: int
    agent_session_id: str | None = None
    source: str | None = None
    prompt_kind: str | None = None
    dedupe_id: str | None = None


@final
@attrs.frozen(kw_only=True)
class TaskRow:
    """A task in a room (the minimal model leases hang from)."""

    task_id: str
    room_id: str
    title: str
    created_at: int
    created_by_session_id: str | None = None


@final
@attrs.frozen(kw_only=True)
class LeaseRow:
    """A lease on a task held by a session; active while not released nor expired."""

    lease_id: str
    room_id: str
    task_id: str
    kind: str
    session_id: str
    epoch: int
    created_at: int
    expires_at: int | None = None
    released_at: int | None = None

    def active(self, now_ms: int) -> bool:
        """True when not released and not expired at ``now_ms``."""
        return self.released_at is None and (self.expires_at is None or self.expires_at > now_ms)


@final
@attrs.frozen(kw_only=True)
class GuidelinesRow:
    """A room's guidelines, as normalized and stored, and who set them when.

    ``guidelines`` is None once cleared (an empty text is stored as none).
    """

    room_id: str
    guidelines: str | None
    updated_by: str
    updated_at: int


class RoomStore(Protocol):
    """What the room needs from storage. Every call is synchronous and short."""

    def get_account(self, login: str) -> Account | None:
        """Return the account with this login, if any."""
        ...

    def put_account(self, account: Account) -> None:
        """Insert or replace an account (keyed by login)."""
        ...

    def get_room(self, room_id: str) -> RoomRow | None:
        """Return the room, if it exists."""
        ...

    def put_room(self, room: RoomRow) -> None:
        """Insert or replace a room."""
        ...

    def room_ids(self) -> list[str]:
        """Return every room id."""
        ...

    def get_session(self, session_id: str) -> SessionRow | None:
        """Return the session row, if any."""
        ...

    def put_session(self, session: SessionRow) -> None:
        """Insert or replace a session row."""
        ...

    def room_sessions(self, room_id: str) -> list[SessionRow]:
        """Return every session of a room (live and ended), in session-id order."""
        ...

    def add_message(self, message: MessageRow) -> MessageRow:
        """Store a message and return it with its new ``message_id``."""
        ...

    def messages_after(self, room_id: str, after: int, limit: int) -> list[MessageRow]:
        """Return up to ``limit`` messages of the room with ids above ``after``, oldest first."""
        ...

    def message_by_dedupe_id(self, room_id: str, dedupe_id: str) -> MessageRow | None:
        """Return the message with this dedupe id, if one was stored."""
        ...

    def get_task(self, task_id: str) -> TaskRow | None:
        """Return the task, if any."""
        ...

    def put_task(self, task: TaskRow) -> None:
        """Insert or replace a task."""
        ...

    def get_lease(self, lease_id: str) -> LeaseRow | None:
        """Return the lease, if any."""
        ...

    def put_lease(self, lease: LeaseRow) -> None:
        """Insert or replace a lease."""
        ...

    def room_leases(self, room_id: str) -> list[LeaseRow]:
        """Return every lease of a room, in lease-id order."""
        ...

    def get_guidelines(self, room_id: str) -> GuidelinesRow | None:
        """Return the room's guidelines, if any were set."""
        ...

    def put_guidelines(self, row: GuidelinesRow) -> None:
        """Insert or replace the room's guidelines."""
        ...

    def atomic(self) -> contextlib.AbstractContextManager[None]:
        """Make the writes inside all-or-nothing: a failure stores none of them.

        Raises:
            ~letagents_trio.room_server._store_errors.StoreWriteError: a write,
                or the commit, failed; nothing was stored.
        """
        ...

    def close(self) -> None:
        """Release the store's resources."""
        ...


@final
@attrs.define(eq=False)
class MemoryStore:
    """A :class:`RoomStore` in dicts; gone when the process ends."""

    _accounts: dict[str, Account] = attrs.field(factory=dict)
    _rooms: dict[str, RoomRow] = attrs.field(factory=dict)
    _sessions: dict[str, SessionRow] = attrs.field(factory=dict)
    _room_session_ids: dict[str, set[str]] = attrs.field(factory=dict)
    _messages: dict[str, list[MessageRow]] = attrs.field(factory=dict)
    _next_message_id: int = 1
    _tasks: dict[str, TaskRow] = attrs.field(factory=dict)
    _leases: dict[str, LeaseRow] = attrs.field(factory=dict)
    _guidelines: dict[str, GuidelinesRow] = attrs.field(factory=dict)

    def get_account(self, login: str) -> Account | None:
        return self._accounts.get(login)

    def put_account(self, account: Account) -> None:
        self._accounts[account.login] = account

    def get_room(self, room_id: str) -> RoomRow | None:
        return self._rooms.get(room_id)

    def put_room(self, room: RoomRow) -> None:
        self._rooms[room.room_id] = room

    def room_ids(self) -> list[str]:
        return sorted(self._rooms)

    def get_session(self, session_id: str) -> SessionRow | None:
        return self._sessions.get(session_id)

    def put_session(self, session: SessionRow) -> None:
        self._sessions[session.session_id] = session
        self._room_session_ids.setdefault(session.room_id, set()).add(session.session_id)

    def room_sessions(self, room_id: str) -> list[SessionRow]:
        ids = sorted(self._room_session_ids.get(room_id, ()))
        return [self._sessions[i] for i in ids]

    def add_message(self, message: MessageRow) -> MessageRow:
        stored = attrs.evolve(message, message_id=self._next_message_id)
        self._next_message_id += 1
        self._messages.setdefault(message.room_id, []).append(stored)
        return stored

    def messages_after(self, room_id: str, after: int, limit: int) -> list[MessageRow]:
        return [m for m in self._messages.get(room_id, []) if m.message_id > after][:limit]

    def message_by_dedupe_id(self, room_id: str, dedupe_id: str) -> MessageRow | None:
        for message in self._messages.get(room_id, []):
            if message.dedupe_id == dedupe_id:
                return message
        return None

    def get_task(self, task_id: str) -> TaskRow | None:
        return self._tasks.get(task_id)

    def put_task(self, task: TaskRow) -> None:
        self._tasks[task.task_id] = task

    def get_lease(self, lease_id: str) -> LeaseRow | None:
        return self._leases.get(lease_id)

    def put_lease(self, lease: LeaseRow) -> None:
        self._leases[lease.lease_id] = lease

    def room_leases(self, room_id: str) -> list[LeaseRow]:
        return sorted(
            (lease for lease in self._leases.values() if lease.room_id == room_id),
            key=lambda lease: lease.lease_id,
        )

    def get_guidelines(self, room_id: str) -> GuidelinesRow | None:
        return self._guidelines.get(room_id)

    def put_guidelines(self, row: GuidelinesRow) -> None:
        self._guidelines[row.room_id] = row

    @contextlib.contextmanager
    def atomic(self) -> Iterator[None]:
        # Dicts never refuse a write.
        yield

    def close(self) -> None:
        pass


_Row = TypeVar("_Row", Account, RoomRow, SessionRow, MessageRow, TaskRow, LeaseRow, GuidelinesRow)

# One table per row kind: (table, key column). Every table also has room_id
# (empty for accounts) so per-room reads use an index, and a JSON document.
_SCHEMA = """
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
CREATE TABLE IF NOT EXISTS tasks (id TEXT PRIMARY KEY, room_id TEXT NOT NULL, doc TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS leases (id TEXT PRIMARY KEY, room_id TEXT NOT NULL, doc TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS leases_room ON leases (room_id, id);
CREATE TABLE IF NOT EXISTS guidelines (
    id TEXT PRIMARY KEY, room_id TEXT NOT NULL, doc TEXT NOT NULL
);
"""


def _doc(row: Any) -> str:
    return json.dumps(attrs.asdict(row), separators=(",", ":"), sort_keys=True)


def _load(cls: type[_Row], doc: str) -> _Row:
    data: dict[str, Any] = json.loads(doc)
    return cls(**data)


@final
@attrs.define(eq=False)
class SQLiteStore:
    """A :class:`RoomStore` in one SQLite file (WAL journal, short transactions).

    Args:
        path: the database file; created with its tables when missing.
    """

    path: Path = attrs.field(converter=Path)
    _db: sqlite3.Connection = attrs.field(init=False, repr=False)
    _transactions: int = attrs.field(default=0, init=False, repr=False)
    _refusals: WriteRefusals = attrs.field(factory=WriteRefusals, init=False, repr=False)

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
        self._db.executescript(_SCHEMA)

    def _write(self, sql: str, parameters: tuple[Any, ...]) -> sqlite3.Cursor:
        """One write statement (a transaction of its own outside :meth:`atomic`)."""
        try:
            return self._db.execute(sql, parameters)
        except sqlite3.Error as exc:
            raise self._refusals.of(exc, self.path) from exc

    @contextlib.contextmanager
    def atomic(self) -> Iterator[None]:
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
        found = self._db.execute(
            f"SELECT doc FROM {table} WHERE id = ?",
            (key,),
        ).fetchone()
        return None if found is None else _load(cls, found[0])

    def _in_room(self, cls: type[_Row], table: str, room_id: str) -> list[_Row]:
        rows = self._db.execute(
            f"SELECT doc FROM {table} WHERE room_id = ? ORDER BY id",
            (room_id,),
        ).fetchall()
        return [_load(cls, doc) for (doc,) in rows]

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
        return self._in_room(SessionRow, "sessions", room_id)

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
        return stored

    def messages_after(self, room_id: str, after: int, limit: int) -> list[MessageRow]:
        rows = self._db.execute(
            "SELECT doc FROM messages WHERE room_id = ? AND id > ? ORDER BY id LIMIT ?",
            (room_id, after, limit),
        ).fetchall()
        return [_load(MessageRow, doc) for (doc,) in rows]

    def message_by_dedupe_id(self, room_id: str, dedupe_id: str) -> MessageRow | None:
        found = self._db.execute(
            "SELECT doc FROM messages WHERE room_id = ? AND dedupe_id = ? LIMIT 1",
            (room_id, dedupe_id),
        ).fetchone()
        return None if found is None else _load(MessageRow, found[0])

    def get_task(self, task_id: str) -> TaskRow | None:
        return self._get(TaskRow, "tasks", task_id)

    def put_task(self, task: TaskRow) -> None:
        self._put("tasks", task.task_id, task.room_id, task)

    def get_lease(self, lease_id: str) -> LeaseRow | None:
        return self._get(LeaseRow, "leases", lease_id)

    def put_lease(self, lease: LeaseRow) -> None:
        self._put("leases", lease.lease_id, lease.room_id, lease)

    def room_leases(self, room_id: str) -> list[LeaseRow]:
        return self._in_room(LeaseRow, "leases", room_id)

    def get_guidelines(self, room_id: str) -> GuidelinesRow | None:
        return self._get(GuidelinesRow, "guidelines", room_id)

    def put_guidelines(self, row: GuidelinesRow) -> None:
        self._put("guidelines", row.room_id, row.room_id, row)

    def close(self) -> None:
        self._db.close()
