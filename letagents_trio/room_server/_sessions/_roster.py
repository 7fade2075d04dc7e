"""The roster: what each worker says it is doing (``POST`` and ``GET …/presence``).

As the letagents API: a worker session (its credentials; a person has no
presence to set) sets its presence with a ``status``, one of ``idle``,
``working``, ``reviewing``, ``blocked`` (any case, trimmed), and a
``status_text`` (trimmed; blank or not text: none). The room takes who the
worker is from its session, never from the body: actor label, agent key,
name, owner, IDE, runtime, branch. It keeps one row per room and actor label,
replaced at every update with the time it was heard, and answers the row.
Anything else is 400 with the API's text.

``GET …/presence`` lists the room's rows, newest heartbeat first, at most
``limit`` (50 unless given), each with its ``freshness``: ``active`` when
heard within the last 90 s (the API's window), else ``stale``. An agent of
the room reads it with its session; a person who is one of the room's admins
with the bearer alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, final

import attrs

from .._storage._presence_rows import PresenceRow
from .._wire import Credentials, Refusal, Reply, iso, refuse

if TYPE_CHECKING:
    from .._auth._accounts import Accounts
    from .._clock import RoomClock
    from .._storage._store import RoomStore

__all__ = ["ACTIVE_WINDOW_MS", "PRESENCE_STATUSES", "PRESENCE_TEXT", "Roster"]

# The letagents API's statuses of a presence.
PRESENCE_STATUSES: Final = frozenset({"idle", "working", "reviewing", "blocked"})
# The letagents API's 400 for an update without a valid status.
PRESENCE_TEXT: Final = "actor_label, display_name, and a valid status are required"
# A presence heard within this window is active (the API's 90 s).
ACTIVE_WINDOW_MS: Final = 90_000
# Rows a read answers unless it asks for fewer or more (the API's default), and at most.
_DEFAULT_LIMIT: Final = 50
_MAX_LIMIT: Final = 500
# Ours: the refusal of a person who is not one of the room's admins.
_ADMIN_TEXT: Final = "Only the room's agents and admins can read its roster."


def _limit(value: str | None) -> int:
    if not value or not (value.isascii() and value.isdigit()) or int(value[:6]) < 1:
        return _DEFAULT_LIMIT
    return min(int(value[:6]), _MAX_LIMIT)


@final
@attrs.define(eq=False)
class Roster:
    """Each room's presence rows (``…/presence``).

    Args:
        store: the room's rows.
        clock: the room's clock (epoch ms).
        accounts: authenticates the calls.
    """

    store: RoomStore
    clock: RoomClock
    accounts: Accounts

    def update(self, room_id: str, creds: Credentials, body: Mapping[str, Any]) -> Reply:
        """``POST …/presence``: set the calling worker's status and text."""
        try:
            self.accounts.require_room(room_id)
            session = self.accounts.authenticate(room_id, creds)
            raw = body.get("status")
            status = raw.strip().lower() if isinstance(raw, str) else ""
            label = session.actor_label or session.display_name
            if status not in PRESENCE_STATUSES or not label or not session.display_name:
                refuse(400, PRESENCE_TEXT)
        except Refusal as refusal:
            return refusal.reply
        text = body.get("status_text")
        row = PresenceRow(
            room_id=room_id,
            actor_label=label,
            agent_key=session.agent_key,
            agent_session_id=session.session_id,
            session_kind=session.session_kind,
            runtime=session.runtime,
            display_name=session.display_name,
            owner_label=session.owner_label,
            ide_label=session.ide_label,
            repo_branch=session.repo_branch,
            status=status,
            status_text=(text.strip() or None) if isinstance(text, str) else None,
            last_heartbeat_at=self.clock.now_ms(),
        )
        self.store.put_presence(row)
        return Reply(status=200, body=self._json(row))

    def read(self, room_id: str, creds: Credentials, *, limit: str | None) -> Reply:
        """``GET …/presence``: the room's roster, newest heartbeat first."""
        try:
            self.accounts.require_room(room_id)
            self.accounts.actor(room_id, creds, _ADMIN_TEXT, reading=True)
        except Refusal as refusal:
            return refusal.reply
        rows = self.store.room_presence(room_id, _limit(limit))
        return Reply(
            status=200, body={"room_id": room_id, "presence": [self._json(r) for r in rows]}
        )

    def _json(self, row: PresenceRow) -> dict[str, Any]:
        fresh = self.clock.now_ms() - row.last_heartbeat_at <= ACTIVE_WINDOW_MS
        return {
            "room_id": row.room_id,
            "actor_label": row.actor_label,
            "agent_key": row.agent_key,
            "agent_session_id": row.agent_session_id,
            "session_kind": row.session_kind,
            "runtime": row.runtime,
            "display_name": row.display_name,
            "owner_label": row.owner_label,
            "ide_label": row.ide_label,
            "repo_branch": row.repo_branch,
            "status": row.status,
            "status_text": row.status_text,
            "last_heartbeat_at": iso(row.last_heartbeat_at),
            "freshness": "active" if fresh else "stale",
        }
