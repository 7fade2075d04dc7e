"""Writes the room's storage refuses: the error the rules see, and its one log line a minute.

A full disk, a read-only database file or an I/O error makes SQLite refuse a
write. The store turns what SQLite raised into :class:`StoreWriteError`
(nothing of the write, or of its transaction, was stored), and the room
answers the request that wanted the write 507 (full) or 503 (any other
failure) while reads and best-effort bookkeeping go on (``_wire.storage_refusal``).
Under a full disk every write fails, thousands a minute, so
:class:`WriteRefusals` logs the first and then one line a minute with the count.
"""

from __future__ import annotations

import logging
import math
import sqlite3
import time
from typing import TYPE_CHECKING, Final, final

import attrs

if TYPE_CHECKING:
    from pathlib import Path

__all__ = ["WRITE_FAILURE_LOG_INTERVAL", "StoreWriteError", "WriteRefusals"]

logger = logging.getLogger("letagents_trio.room_server")

# A full disk refuses every write, thousands a minute: say so once a minute.
WRITE_FAILURE_LOG_INTERVAL: Final = 60.0


class StoreWriteError(Exception):
    """The store could not write; nothing of the write (or of its transaction) was stored.

    Attributes:
        reason: what the storage said, e.g. ``"database or disk is full"``.
        full: the storage is full (the disk, or the database's size cap).
    """

    def __init__(self, reason: str, *, full: bool) -> None:
        super().__init__(reason)
        self.reason = reason
        self.full = full

    @classmethod
    def of(cls, error: sqlite3.Error) -> StoreWriteError:
        """The error for what SQLite raised (its primary result code tells a full disk)."""
        code = getattr(error, "sqlite_errorcode", None)
        full = isinstance(code, int) and code & 0xFF == sqlite3.SQLITE_FULL
        return cls(str(error), full=full)


@final
@attrs.define(eq=False)
class WriteRefusals:
    """Counts a database's refused writes and logs them at most once an interval.

    The interval is measured with :func:`time.monotonic`: stores are
    synchronous and may be used outside a trio run.
    """

    _refused: int = 0
    _warned_at: float = -math.inf

    def of(self, error: sqlite3.Error, path: Path) -> StoreWriteError:
        """The :class:`StoreWriteError` for ``error``, counted (and logged when due)."""
        refused = StoreWriteError.of(error)
        self._refused += 1
        now = time.monotonic()
        if now - self._warned_at >= WRITE_FAILURE_LOG_INTERVAL:
            logger.warning(
                "the room's database %s refused %d write(s): %s",
                path,
                self._refused,
                refused.reason,
            )
            self._warned_at, self._refused = now, 0
        return refused
