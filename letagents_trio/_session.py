"""The room's view of one agent session, as a frozen value.

A session row arrives from the room (the 201 of a registration) or from the
local state file. Only the fields the connection manager and worker handles
read are typed attributes; everything else the room sent is kept in ``extra``
so a round trip through the state file loses nothing. The session token is a
secret: it is hidden from ``repr`` and never logged.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, final

import attrs

__all__ = ["AgentSession"]

# Keys the session JSON carries that are typed attributes here.
_TYPED_KEYS = frozenset(
    {"session_id", "session_token", "room_id", "session_kind", "ended_at", "display_name"}
)


def _freeze(value: Mapping[str, Any]) -> Mapping[str, Any]:
    # A read-only view of a private copy: the value stays frozen even when the
    # caller keeps (and changes) the mapping it passed in.
    return MappingProxyType(dict(value))


@final
@attrs.frozen(kw_only=True)
class AgentSession:
    """One agent session in a room.

    Attributes:
        session_id: the room's id for the session.
        session_token: the session's secret credential (never shown in ``repr``).
        room_id: the room the session lives in.
        session_kind: ``"worker"`` or ``"controller"``.
        ended_at: ISO 8601 time the session ended, or ``None`` while it is live.
        display_name: the name the session goes by in the room.
        extra: every other field the room sent, kept for round trips.
    """

    session_id: str
    session_token: str = attrs.field(repr=False)
    room_id: str
    session_kind: str = "worker"
    ended_at: str | None = None
    display_name: str = ""
    # Compared, but not hashed (a mapping has no hash); equal values still hash equal.
    extra: Mapping[str, Any] = attrs.field(factory=dict, converter=_freeze, repr=False, hash=False)

    @property
    def is_local(self) -> bool:
        """True for sessions of local rooms, which have no process connection."""
        return self.session_id.startswith("local_")

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> AgentSession:
        """Build a session from the room's (or the state file's) JSON object.

        Raises:
            ValueError: a required field is missing or is not a string.
        """
        fields: dict[str, Any] = {}
        for key in ("session_id", "session_token", "room_id"):
            value = data.get(key)
            if not isinstance(value, str) or not value:
                raise ValueError(f"agent session JSON needs a non-empty string {key!r}")
            fields[key] = value
        kind = data.get("session_kind", "worker")
        ended_at = data.get("ended_at")
        display_name = data.get("display_name")
        return cls(
            session_id=fields["session_id"],
            session_token=fields["session_token"],
            room_id=fields["room_id"],
            session_kind=kind if isinstance(kind, str) else "worker",
            ended_at=ended_at if isinstance(ended_at, str) and ended_at else None,
            display_name=display_name if isinstance(display_name, str) else "",
            extra={k: v for k, v in data.items() if k not in _TYPED_KEYS},
        )

    def to_json(self) -> dict[str, Any]:
        """The session as JSON, including the token (for the state file only)."""
        return {
            **self.extra,
            "session_id": self.session_id,
            "session_token": self.session_token,
            "room_id": self.room_id,
            "session_kind": self.session_kind,
            "ended_at": self.ended_at,
            "display_name": self.display_name,
        }
