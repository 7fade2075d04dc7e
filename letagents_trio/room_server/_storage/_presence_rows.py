"""The roster's rows: each worker's presence in a room, in either store.

A :class:`PresenceRow` is what ``POST …/presence`` last set for one actor
label in one room (the letagents API keys presence the same way): its status,
the text the worker gave, who it is and when it was last heard. The room
replaces the row at every update. :class:`MemoryPresence` keeps the rows in a
dict; :class:`SQLitePresence` in the ``room_presence`` table of the
:class:`~._sqlite.SQLiteStore`'s file (created beside the others, so a file
written by an older version gains it empty). Both list a room's rows newest
heartbeat first.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from typing import Any, Final, final

import attrs

__all__ = ["PRESENCE_SCHEMA", "MemoryPresence", "PresenceRow", "SQLitePresence"]


@final
@attrs.frozen(kw_only=True)
class PresenceRow:
    """One worker's presence in a room (times in epoch milliseconds)."""

    room_id: str
    actor_label: str
    agent_key: str = ""
    agent_session_id: str | None = None
    session_kind: str = "worker"
    runtime: str | None = None
    display_name: str = ""
    owner_label: str = ""
    ide_label: str | None = None
    repo_branch: str | None = None
    status: str = "idle"
    status_text: str | None = None
    last_heartbeat_at: int = 0


def _newest_first(row: PresenceRow) -> tuple[int, str]:
    return (-row.last_heartbeat_at, row.actor_label)


@final
@attrs.define(eq=False)
class MemoryPresence:
    """Presence rows in a dict, keyed by room and actor label."""

    _rows: dict[tuple[str, str], PresenceRow] = attrs.field(factory=dict, init=False)

    def put_presence(self, row: PresenceRow) -> None:
        """Insert or replace the row of ``row``'s room and actor label."""
        self._rows[(row.room_id, row.actor_label)] = row

    def room_presence(self, room_id: str, limit: int) -> list[PresenceRow]:
        """Up to ``limit`` of the room's rows, newest heartbeat first."""
        rows = [row for (room, _), row in self._rows.items() if room == room_id]
        return sorted(rows, key=_newest_first)[:limit]


# The table, one JSON document per room and actor label.
PRESENCE_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS room_presence (
    room_id TEXT NOT NULL,
    actor_label TEXT NOT NULL,
    heard_at INTEGER NOT NULL,
    doc TEXT NOT NULL,
    PRIMARY KEY (room_id, actor_label)
);
"""


@final
@attrs.define(eq=False)
class SQLitePresence:
    """Presence rows in the store's SQLite file.

    Args:
        db: the store's connection (the table made with :data:`PRESENCE_SCHEMA`).
        write: the store's write, which turns SQLite's refusals into its own.
    """

    db: sqlite3.Connection
    write: Callable[[str, tuple[Any, ...]], object]

    def put_presence(self, row: PresenceRow) -> None:
        """Insert or replace the row of ``row``'s room and actor label."""
        doc = json.dumps(attrs.asdict(row), separators=(",", ":"), sort_keys=True)
        self.write(
            "INSERT OR REPLACE INTO room_presence (room_id, actor_label, heard_at, doc)"
            " VALUES (?, ?, ?, ?)",
            (row.room_id, row.actor_label, row.last_heartbeat_at, doc),
        )

    def room_presence(self, room_id: str, limit: int) -> list[PresenceRow]:
        """Up to ``limit`` of the room's rows, newest heartbeat first."""
        found = self.db.execute(
            "SELECT doc FROM room_presence WHERE room_id = ?"
            " ORDER BY heard_at DESC, actor_label LIMIT ?",
            (room_id, limit),
        ).fetchall()
        return [PresenceRow(**json.loads(doc)) for (doc,) in found]
