"""Where a governed board's rows live: in dicts, or in two SQLite tables.

:class:`MemoryBoardRecords` is the part :class:`~._store.MemoryStore` composes;
:class:`SQLiteBoardRecords` the part :class:`~._sqlite.SQLiteStore` composes,
over the store's own connection and its write path (so a refused write raises
the store's :class:`~._store_errors.StoreWriteError` and joins its
``atomic()`` block). Keyed rows share one table (``board_records``: kind,
room, key, the order they were first stored, the JSON document); events have
their own (``room_events``), numbered across the store, indexed by room.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections.abc import Callable
from typing import Any, Final, TypeVar, final

import attrs

from ._board_rows import (
    ArtifactRow,
    BoardIntentRow,
    BoardManagerRow,
    BoardSettingsRow,
    EventFilter,
    ReviewEffectRow,
    RoomEventRow,
    kind_of,
)

__all__ = ["BOARD_SCHEMA", "MemoryBoardRecords", "SQLiteBoardRecords"]

_Keyed = TypeVar(
    "_Keyed", BoardSettingsRow, BoardManagerRow, BoardIntentRow, ArtifactRow, ReviewEffectRow
)
KeyedRow = BoardSettingsRow | BoardManagerRow | BoardIntentRow | ArtifactRow | ReviewEffectRow


@final
@attrs.define(eq=False)
class MemoryBoardRecords:
    """The governed board's rows in dicts (insertion order is the rows' order)."""

    _rows: dict[tuple[str, str, str], Any] = attrs.field(factory=dict)
    _events: dict[str, list[RoomEventRow]] = attrs.field(factory=dict)
    _next_event_id: int = 1

    def get_row(self, cls: type[_Keyed], room_id: str, key: str) -> _Keyed | None:
        found = self._rows.get((kind_of(cls), room_id, key))
        return found if isinstance(found, cls) else None

    def put_row(self, row: KeyedRow) -> None:
        self._rows[(kind_of(type(row)), row.room_id, row.key)] = row

    def room_rows(self, cls: type[_Keyed], room_id: str) -> list[_Keyed]:
        kind = kind_of(cls)
        return [r for (k, room, _), r in self._rows.items() if k == kind and room == room_id]

    def add_event(self, event: RoomEventRow) -> RoomEventRow:
        stored = attrs.evolve(event, event_id=self._next_event_id)
        self._next_event_id += 1
        self._events.setdefault(event.room_id, []).append(stored)
        return stored

    def events_page(
        self, room_id: str, *, after: int, limit: int, match: EventFilter
    ) -> list[RoomEventRow]:
        found = (
            e for e in self._events.get(room_id, []) if e.event_id > after and match.matches(e)
        )
        return [e for e, _ in zip(found, range(limit), strict=False)]


BOARD_SCHEMA: Final = """
CREATE TABLE IF NOT EXISTS board_records (
    kind TEXT NOT NULL,
    room_id TEXT NOT NULL,
    id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    doc TEXT NOT NULL,
    PRIMARY KEY (kind, room_id, id)
);
CREATE INDEX IF NOT EXISTS board_records_order ON board_records (kind, room_id, seq);
CREATE TABLE IF NOT EXISTS room_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    room_id TEXT NOT NULL,
    event_type TEXT NOT NULL,
    object_id TEXT,
    actor TEXT,
    created_at INTEGER NOT NULL,
    doc TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS room_events_room ON room_events (room_id, id);
"""


def _doc(row: Any) -> str:
    return json.dumps(attrs.asdict(row), separators=(",", ":"), sort_keys=True)


@final
@attrs.define(eq=False)
class SQLiteBoardRecords:
    """The governed board's rows in the store's SQLite file.

    Args:
        db: the store's connection (its schema includes :data:`BOARD_SCHEMA`).
        write: the store's write path (one statement; translates refusals).
        atomic: the store's all-or-nothing block.
    """

    db: sqlite3.Connection
    write: Callable[[str, tuple[Any, ...]], sqlite3.Cursor]
    atomic: Callable[[], contextlib.AbstractContextManager[None]]

    def get_row(self, cls: type[_Keyed], room_id: str, key: str) -> _Keyed | None:
        found = self.db.execute(
            "SELECT doc FROM board_records WHERE kind = ? AND room_id = ? AND id = ?",
            (kind_of(cls), room_id, key),
        ).fetchone()
        return None if found is None else cls(**json.loads(found[0]))

    def put_row(self, row: KeyedRow) -> None:
        # A new key goes last; a replaced one keeps its place.
        self.write(
            "INSERT INTO board_records (kind, room_id, id, seq, doc) VALUES (?, ?, ?,"
            " (SELECT coalesce(max(seq), 0) + 1 FROM board_records WHERE kind = ? AND room_id = ?),"
            " ?) ON CONFLICT (kind, room_id, id) DO UPDATE SET doc = excluded.doc",
            (kind_of(type(row)), row.room_id, row.key, kind_of(type(row)), row.room_id, _doc(row)),
        )

    def room_rows(self, cls: type[_Keyed], room_id: str) -> list[_Keyed]:
        rows = self.db.execute(
            "SELECT doc FROM board_records WHERE kind = ? AND room_id = ? ORDER BY seq",
            (kind_of(cls), room_id),
        ).fetchall()
        return [cls(**json.loads(doc)) for (doc,) in rows]

    def add_event(self, event: RoomEventRow) -> RoomEventRow:
        with self.atomic():  # the row and its document, or nothing
            return self._add_event(event)

    def _add_event(self, event: RoomEventRow) -> RoomEventRow:
        cursor = self.write(
            "INSERT INTO room_events (room_id, event_type, object_id, actor, created_at, doc)"
            " VALUES (?, ?, ?, ?, ?, '')",
            (event.room_id, event.event_type, event.object_id, event.actor, event.created_at),
        )
        assert cursor.lastrowid is not None
        stored = attrs.evolve(event, event_id=cursor.lastrowid)
        self.write("UPDATE room_events SET doc = ? WHERE id = ?", (_doc(stored), stored.event_id))
        return stored

    def events_page(
        self, room_id: str, *, after: int, limit: int, match: EventFilter
    ) -> list[RoomEventRow]:
        query = "SELECT doc FROM room_events WHERE room_id = ? AND id > ?"
        args: list[object] = [room_id, after]
        for column, value in (
            ("event_type", match.event_type),
            ("object_id", match.object_id),
            ("actor", match.actor),
        ):
            if value is not None:
                query += f" AND {column} = ?"
                args.append(value)
        if match.since is not None:
            query += " AND created_at >= ?"
            args.append(match.since)
        if match.until is not None:
            query += " AND created_at <= ?"
            args.append(match.until)
        rows = self.db.execute(f"{query} ORDER BY id LIMIT ?", (*args, limit)).fetchall()
        return [RoomEventRow(**json.loads(doc)) for (doc,) in rows]
