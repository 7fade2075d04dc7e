"""The room's statistics: a snapshot of its in-memory state, and one room's stream counters.

Read-only views over the parts :class:`~._room.Room` builds: the process
streams it holds (:class:`~._sessions._streams.StreamRegistry`) and the open
message polls. ``Room.statistics`` and ``Room.process_statistics`` answer
with them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, final

import attrs

from ._wire import Refusal, Reply

if TYPE_CHECKING:
    from ._auth._accounts import Accounts
    from ._messaging._messages import Deliveries
    from ._sessions._streams import StreamRegistry

__all__ = ["STATISTICS_ADMIN_TEXT", "RoomCounters", "RoomStatistics"]

# Ours: the 403 of ``…/process-statistics`` for an account that is not an admin.
STATISTICS_ADMIN_TEXT: Final = "Only the room's admins can read its statistics."


@final
@attrs.frozen(kw_only=True)
class RoomStatistics:
    """A snapshot of the room's in-memory state."""

    open_process_streams: int
    open_polls: int


@final
@attrs.frozen
class RoomCounters:
    """The room's counters, read from its stream registry and its deliveries."""

    _accounts: Accounts
    _streams: StreamRegistry
    _deliveries: Deliveries

    def snapshot(self) -> RoomStatistics:
        """Return a snapshot of the open streams and polls."""
        return RoomStatistics(
            open_process_streams=self._streams.count(),
            open_polls=self._deliveries.open_polls(),
        )

    def process_statistics(self, room_id: str, owner_token: str | None) -> Reply:
        """One room's stream counters, for its admins (``Room.process_statistics``).

        Returns:
            200 with ``room_id`` and the counters; the room's refusal otherwise
            (404 unknown room, 401 unknown bearer, 403 not an admin).
        """
        try:
            self._accounts.require_room(room_id)
            self._accounts.room_admin(room_id, owner_token, STATISTICS_ADMIN_TEXT)
        except Refusal as refusal:
            return refusal.reply
        counts = attrs.asdict(self._streams.counts(room_id))
        return Reply(status=200, body={"room_id": room_id, **counts})
