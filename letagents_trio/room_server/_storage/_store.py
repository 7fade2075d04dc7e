"""Storage for the reference room: one interface, a memory and a SQLite backend.

The room keeps the rows of :mod:`._rows`: accounts, rooms, agent sessions (with
every evidence column of PROTOCOL.md §7.1), messages (and, per thread, which
messages answer its root), tasks, leases, each room's guidelines, and its
memory and requests for people (knowledge records); a governed board's rows
(:mod:`._board_rows`: settings, managers, intents, artifacts, review
effects, events) live behind each store's ``board`` part
(:mod:`._board_store`). Rows are frozen attrs values; the room changes a row
by building a new one (``attrs.evolve``) and putting it back.

Every store call is synchronous and short. The room runs on one trio thread and
never awaits between reading rows and writing them back, so each such
read-modify-write is atomic without database locks; registrations that *do*
wait are serialised per room by the room's own ``trio.Lock``.

:class:`MemoryStore` (here) keeps rows in dicts (tests, the demo).
:class:`~._sqlite.SQLiteStore` keeps them in one SQLite file. Both number
messages across the store (1, 2, ...) and tasks per room (``task_1`` in each
room), and answer pages in id order.

A write the storage refuses raises :class:`~._store_errors.StoreWriteError`
and stores nothing of itself; :meth:`RoomStore.atomic` makes several writes
all-or-nothing. The room answers such a request 507 or 503 and keeps its
best-effort bookkeeping (an agent heard, a stream refreshed) out of the way of
reads.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Iterator
from typing import TYPE_CHECKING, Protocol, final

import attrs

from ._agent_tables import AgentTables, MemoryAgentTables
from ._board_store import MemoryBoardRecords
from ._presence_rows import MemoryPresence, PresenceRow
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

if TYPE_CHECKING:
    from ._board_rows import BoardRecords

# The rows are re-exported: they lived here before ``_rows`` held them.
if TYPE_CHECKING:
    from ._auth_rows import MintedTokenRow

__all__ = [
    "Account",
    "GuidelinesRow",
    "KnowledgeRow",
    "LeaseRow",
    "MemoryStore",
    "MessageRow",
    "PresenceRow",
    "RoomRow",
    "RoomStore",
    "SessionRow",
    "TaskRow",
]


class RoomStore(Protocol):
    """What the room needs from storage. Every call is synchronous and short.

    Attributes:
        board: the governed board's rows (:mod:`._board_rows`).
        agents: what agents keep beyond chat (wake rules, reasoning, work captures).
    """

    @property
    def board(self) -> BoardRecords: ...

    @property
    def agents(self) -> AgentTables: ...

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

    def get_message(self, room_id: str, message_id: int) -> MessageRow | None:
        """Return the room's message with this id, if any."""
        ...

    def messages_after(self, room_id: str, after: int, limit: int) -> list[MessageRow]:
        """Return up to ``limit`` messages of the room with ids above ``after``, oldest first."""
        ...

    def messages_before(self, room_id: str, before: int | None, limit: int) -> list[MessageRow]:
        """Return the room's last ``limit`` messages with ids below ``before`` (``None``:
        its newest), oldest first."""
        ...

    def thread_replies(self, room_id: str, root_id: int) -> tuple[int, MessageRow | None]:
        """How many messages are in the thread of ``root_id``, and the newest of them."""
        ...

    def message_by_dedupe_id(self, room_id: str, dedupe_id: str) -> MessageRow | None:
        """Return the message with this dedupe id, if one was stored."""
        ...

    def add_task(self, task: TaskRow) -> TaskRow:
        """Store a new task and return it with its ``number``, the room's next."""
        ...

    def get_task(self, room_id: str, number: int) -> TaskRow | None:
        """Return the room's task with this number, if any."""
        ...

    def put_task(self, task: TaskRow) -> None:
        """Replace a stored task."""
        ...

    def tasks_page(
        self, room_id: str, *, after: int, limit: int, statuses: Collection[str] | None
    ) -> list[TaskRow]:
        """Up to ``limit`` of the room's tasks numbered above ``after``, in number order,
        only those in ``statuses`` unless it is ``None``."""
        ...

    def get_lease(self, lease_id: str) -> LeaseRow | None:
        """Return the lease, if any."""
        ...

    def put_lease(self, lease: LeaseRow) -> None:
        """Insert or replace a lease."""
        ...

    def active_leases(self, room_id: str) -> list[LeaseRow]:
        """The room's leases whose status is active (expired or not), oldest first."""
        ...

    def get_guidelines(self, room_id: str) -> GuidelinesRow | None:
        """Return the room's guidelines, if any were set."""
        ...

    def put_guidelines(self, row: GuidelinesRow) -> None:
        """Insert or replace the room's guidelines."""
        ...

    def get_knowledge(self, room_id: str, record_id: str) -> KnowledgeRow | None:
        """Return the room's knowledge record with this id (either type), if any."""
        ...

    def put_knowledge(self, row: KnowledgeRow) -> None:
        """Insert or replace a knowledge record."""
        ...

    def room_knowledge(self, room_id: str, kind: str) -> list[KnowledgeRow]:
        """Every knowledge record of the room of that type, in no particular order."""
        ...

    def put_presence(self, row: PresenceRow) -> None:
        """Insert or replace a worker's presence (keyed by room and actor label)."""
        ...

    def room_presence(self, room_id: str, limit: int) -> list[PresenceRow]:
        """Up to ``limit`` of the room's presence rows, newest heartbeat first."""
        ...

    def get_minted_token(self, token_hash: str) -> MintedTokenRow | None:
        """Return the minted owner token with this SHA-256, if any."""
        ...

    def put_minted_token(self, row: MintedTokenRow) -> None:
        """Insert or replace a minted owner token (keyed by its hash)."""
        ...

    def atomic(self) -> contextlib.AbstractContextManager[None]:
        """Make the writes inside all-or-nothing: a failure stores none of them.

        Raises:
            ~letagents_trio.room_server._storage._store_errors.StoreWriteError: a write,
                or the commit, failed; nothing was stored.
        """
        ...

    def close(self) -> None:
        """Release the store's resources."""
        ...


def lease_order(lease: LeaseRow) -> tuple[int, str]:
    """The order leases are listed in: oldest first."""
    return (lease.created_at, lease.lease_id)


@final
@attrs.define(eq=False)
class MemoryStore:
    """A :class:`RoomStore` in dicts; gone when the process ends."""

    _accounts: dict[str, Account] = attrs.field(factory=dict)
    _rooms: dict[str, RoomRow] = attrs.field(factory=dict)
    _sessions: dict[str, SessionRow] = attrs.field(factory=dict)
    _room_session_ids: dict[str, set[str]] = attrs.field(factory=dict)
    _messages: dict[str, list[MessageRow]] = attrs.field(factory=dict)
    _message_ids: dict[int, MessageRow] = attrs.field(factory=dict)
    _threads: dict[int, list[MessageRow]] = attrs.field(factory=dict)
    _next_message_id: int = 1
    _tasks: dict[str, list[TaskRow]] = attrs.field(factory=dict)
    _leases: dict[str, LeaseRow] = attrs.field(factory=dict)
    _guidelines: dict[str, GuidelinesRow] = attrs.field(factory=dict)
    _knowledge: dict[tuple[str, str], KnowledgeRow] = attrs.field(factory=dict)
    _minted: dict[str, MintedTokenRow] = attrs.field(factory=dict)

    board: MemoryBoardRecords = attrs.field(factory=MemoryBoardRecords)
    agents: MemoryAgentTables = attrs.field(factory=MemoryAgentTables)
    _presence: MemoryPresence = attrs.field(factory=MemoryPresence)

    def get_minted_token(self, token_hash: str) -> MintedTokenRow | None:
        return self._minted.get(token_hash)

    def put_minted_token(self, row: MintedTokenRow) -> None:
        self._minted[row.token_hash] = row

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
        self._message_ids[stored.message_id] = stored
        if stored.thread_root_id is not None:
            self._threads.setdefault(stored.thread_root_id, []).append(stored)
        return stored

    def get_message(self, room_id: str, message_id: int) -> MessageRow | None:
        found = self._message_ids.get(message_id)
        return found if found is not None and found.room_id == room_id else None

    def messages_after(self, room_id: str, after: int, limit: int) -> list[MessageRow]:
        return [m for m in self._messages.get(room_id, []) if m.message_id > after][:limit]

    def messages_before(self, room_id: str, before: int | None, limit: int) -> list[MessageRow]:
        rows = self._messages.get(room_id, [])
        if before is not None:
            rows = [m for m in rows if m.message_id < before]
        return rows[-limit:] if limit > 0 else []

    def thread_replies(self, room_id: str, root_id: int) -> tuple[int, MessageRow | None]:
        replies = [m for m in self._threads.get(root_id, []) if m.room_id == room_id]
        return len(replies), (replies[-1] if replies else None)

    def message_by_dedupe_id(self, room_id: str, dedupe_id: str) -> MessageRow | None:
        for message in self._messages.get(room_id, []):
            if message.dedupe_id == dedupe_id:
                return message
        return None

    def add_task(self, task: TaskRow) -> TaskRow:
        tasks = self._tasks.setdefault(task.room_id, [])
        stored = attrs.evolve(task, number=len(tasks) + 1)
        tasks.append(stored)
        return stored

    def get_task(self, room_id: str, number: int) -> TaskRow | None:
        tasks = self._tasks.get(room_id, [])
        return tasks[number - 1] if 0 < number <= len(tasks) else None

    def put_task(self, task: TaskRow) -> None:
        self._tasks[task.room_id][task.number - 1] = task

    def tasks_page(
        self, room_id: str, *, after: int, limit: int, statuses: Collection[str] | None
    ) -> list[TaskRow]:
        found = (
            task
            for task in self._tasks.get(room_id, [])[max(after, 0) :]
            if statuses is None or task.status in statuses
        )
        return [task for task, _ in zip(found, range(limit), strict=False)]

    def get_lease(self, lease_id: str) -> LeaseRow | None:
        return self._leases.get(lease_id)

    def put_lease(self, lease: LeaseRow) -> None:
        self._leases[lease.lease_id] = lease

    def active_leases(self, room_id: str) -> list[LeaseRow]:
        return sorted(
            (
                lease
                for lease in self._leases.values()
                if lease.room_id == room_id and lease.status == LEASE_ACTIVE
            ),
            key=lease_order,
        )

    def get_guidelines(self, room_id: str) -> GuidelinesRow | None:
        return self._guidelines.get(room_id)

    def put_guidelines(self, row: GuidelinesRow) -> None:
        self._guidelines[row.room_id] = row

    def get_knowledge(self, room_id: str, record_id: str) -> KnowledgeRow | None:
        return self._knowledge.get((room_id, record_id))

    def put_knowledge(self, row: KnowledgeRow) -> None:
        self._knowledge[(row.room_id, row.record_id)] = row

    def room_knowledge(self, room_id: str, kind: str) -> list[KnowledgeRow]:
        return [r for (room, _), r in self._knowledge.items() if room == room_id and r.type == kind]

    def put_presence(self, row: PresenceRow) -> None:
        self._presence.put_presence(row)

    def room_presence(self, room_id: str, limit: int) -> list[PresenceRow]:
        return self._presence.room_presence(room_id, limit)

    @contextlib.contextmanager
    def atomic(self) -> Iterator[None]:
        # Dicts never refuse a write.
        yield

    def close(self) -> None:
        pass
