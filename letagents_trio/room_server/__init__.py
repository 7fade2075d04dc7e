"""The reference letagents room: a faithful single-node room server.

See ``docs/room-server.md`` for what it implements and how its rules map to
PROTOCOL.md. Build a :class:`Room` over a store and a clock, serve it with
:func:`serve_room` (hypercorn's trio worker), or mount :func:`create_app`
in-process with ``letagents_trio.testing``'s streaming transport. The command
line (``letagents-trio room``) lives in ``_cli``; it is the one place the
room's settings are read from the environment.
"""

from __future__ import annotations

from .._extras import missing_extra as _missing_extra

try:
    from ._app import create_app as create_app
    from ._clock import RoomClock as RoomClock
    from ._clock import SystemClock as SystemClock
    from ._clock import TrioClock as TrioClock
    from ._config import RoomConfig as RoomConfig
    from ._room import Room as Room
    from ._serve import serve_room as serve_room
    from ._sessions._streams import CloseMode as CloseMode
    from ._sessions._streams import ProcessStream as ProcessStream
    from ._statistics import RoomStatistics as RoomStatistics
    from ._storage._rows import Account as Account
    from ._storage._rows import GuidelinesRow as GuidelinesRow
    from ._storage._rows import KnowledgeRow as KnowledgeRow
    from ._storage._rows import LeaseRow as LeaseRow
    from ._storage._rows import MessageRow as MessageRow
    from ._storage._rows import SessionRow as SessionRow
    from ._storage._rows import TaskRow as TaskRow
    from ._storage._sqlite import SQLiteStore as SQLiteStore
    from ._storage._store import MemoryStore as MemoryStore
    from ._storage._store import RoomStore as RoomStore
    from ._wire import Credentials as Credentials
    from ._wire import Reply as Reply
    from ._work import RoomWork as RoomWork
except ModuleNotFoundError as _error:
    # Without its extra: one plain line naming it and how to install it.
    raise _missing_extra(_error, what="letagents_trio.room_server", extra="room") from None

__all__ = [
    "Account",
    "CloseMode",
    "Credentials",
    "GuidelinesRow",
    "KnowledgeRow",
    "LeaseRow",
    "MemoryStore",
    "MessageRow",
    "ProcessStream",
    "Reply",
    "Room",
    "RoomClock",
    "RoomConfig",
    "RoomStatistics",
    "RoomStore",
    "RoomWork",
    "SQLiteStore",
    "SessionRow",
    "SystemClock",
    "TaskRow",
    "TrioClock",
    "create_app",
    "serve_room",
]

from .._util import fixup_module_metadata as _fixup_module_metadata

_fixup_module_metadata(__name__, globals())
del _fixup_module_metadata
