"""Route paths used by the room-server tests."""

from __future__ import annotations

from typing import Any


def process_path(session: dict[str, Any], room: str = "room_shared") -> str:
    return f"/rooms/{room}/agent-sessions/{session['session_id']}/process"
