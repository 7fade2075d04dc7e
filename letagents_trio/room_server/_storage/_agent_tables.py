"""Where the rows of :mod:`._agent_rows` live: one keyed table, in memory or in SQLite.

Every kind is stored alike: its ``KIND``, its ``key``, its room, its
``status`` (looked up by: a wake rule's) and the row as a JSON document. Both
stores compose one of these (``store.agents``): :class:`MemoryAgentTables`
keeps dicts, :class:`SQLiteAgentTables` writes through the SQLite store's own
connection and write path, so its writes join :meth:`RoomStore.atomic` and a
refused write raises :class:`~._store_errors.StoreWriteError` like any other.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar, final

import attrs

from ._agent_rows import AgentRecord

if TYPE_CHECKING:
    import sqlite3

__all__ = ["AGENT_SCHEMA", "AgentTables", "MemoryAgentTables", "SQLiteAgentTables"]

R = TypeVar("R", bound=AgentRecord)

AGENT_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS agent_records (
    kind TEXT NOT NULL,
    id TEXT NOT NULL,
    room_id TEXT NOT NULL,
    status TEXT,
    doc TEXT NOT NULL,
    PRIMARY KEY (kind, id)
);
CREATE INDEX IF NOT EXISTS agent_records_room ON agent_records (kind, room_id, id);
CREATE INDEX IF NOT EXISTS agent_records_status ON agent_records (kind, status);
"""


class AgentTables(Protocol):
    """The agents' records of a store (see the module docstring)."""

    def put(self, row: AgentRecord) -> None:
        """Store ``row``, replacing the row of the same kind and key."""
        ...

    def get(self, cls: type[R], key: str) -> R | None:
        """The row of kind ``cls`` with ``key``, if any."""
        ...

    def in_room(self, cls: type[R], room_id: str) -> list[R]:
        """Every row of kind ``cls`` in ``room_id``, in key order."""
        ...

    def with_status(self, cls: type[R], status: str) -> list[R]:
        """Every row of kind ``cls`` with ``status``, in every room, in key order."""
        ...


@final
@attrs.define(eq=False)
class MemoryAgentTables:
    """:class:`AgentTables` in a dict."""

    _rows: dict[tuple[str, str], AgentRecord] = attrs.field(factory=dict)

    def put(self, row: AgentRecord) -> None:
        self._rows[(row.KIND, row.key)] = row

    def get(self, cls: type[R], key: str) -> R | None:
        found = self._rows.get((cls.KIND, key))
        return found if isinstance(found, cls) else None

    def in_room(self, cls: type[R], room_id: str) -> list[R]:
        rows = [r for r in self._rows.values() if isinstance(r, cls) and r.room_id == room_id]
        return sorted(rows, key=lambda r: r.key)

    def with_status(self, cls: type[R], status: str) -> list[R]:
        rows = [r for r in self._rows.values() if isinstance(r, cls) and r.status == status]
        return sorted(rows, key=lambda r: r.key)


def _doc(row: AgentRecord) -> str:
    return json.dumps(attrs.asdict(row), separators=(",", ":"), sort_keys=True)


def _load(cls: type[R], doc: str) -> R:
    data: dict[str, Any] = json.loads(doc)
    return cls(**data)


@final
@attrs.define(eq=False)
class SQLiteAgentTables:
    """:class:`AgentTables` in the SQLite store's file.

    Args:
        db: the store's connection (reads).
        write: the store's one write path (one statement; refusals translated).
    """

    db: sqlite3.Connection = attrs.field(repr=False)
    write: Callable[[str, tuple[Any, ...]], object] = attrs.field(repr=False)

    def put(self, row: AgentRecord) -> None:
        self.write(
            "INSERT OR REPLACE INTO agent_records (kind, id, room_id, status, doc)"
            " VALUES (?, ?, ?, ?, ?)",
            (row.KIND, row.key, row.room_id, row.status, _doc(row)),
        )

    def get(self, cls: type[R], key: str) -> R | None:
        found = self.db.execute(
            "SELECT doc FROM agent_records WHERE kind = ? AND id = ?", (cls.KIND, key)
        ).fetchone()
        return None if found is None else _load(cls, found[0])

    def in_room(self, cls: type[R], room_id: str) -> list[R]:
        rows = self.db.execute(
            "SELECT doc FROM agent_records WHERE kind = ? AND room_id = ? ORDER BY id",
            (cls.KIND, room_id),
        ).fetchall()
        return [_load(cls, doc) for (doc,) in rows]

    def with_status(self, cls: type[R], status: str) -> list[R]:
        rows = self.db.execute(
            "SELECT doc FROM agent_records WHERE kind = ? AND status = ? ORDER BY id",
            (cls.KIND, status),
        ).fetchall()
        return [_load(cls, doc) for (doc,) in rows]
