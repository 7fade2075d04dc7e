"""The state file's parts as JSON: reading one, making one for a write, timestamps.

Pure functions over the parsed object, shared by the store
(:mod:`._state`) and the modules that read or change its records
(:mod:`._records`, :mod:`._acting`, :mod:`._legacy`). A part that is missing
or of the wrong type reads as absent, as the Node client's plain read treats
it; writing into a part of the wrong type refuses rather than replaces it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any, Final

from .._errors import StateUnavailable
from .._protocol import format_iso
from .._session import AgentSession
from ._nodejson import json_type

__all__ = [
    "PENDING_DEVICE_AUTH_KEY",
    "STATE_UNAVAILABLE_MESSAGE",
    "ensure_mapping",
    "iso_now",
    "mapping_at",
    "parse_iso",
    "session_in",
]

# The exact upstream text worker handles show for a damaged state file.
STATE_UNAVAILABLE_MESSAGE: Final = "Worker state is unavailable; restore it before reconnecting."
# Where the Node client keeps a device sign-in that was started and not yet finished.
PENDING_DEVICE_AUTH_KEY: Final = "pending_device_auth"


def iso_now(wall_clock: Callable[[], float] = time.time) -> str:
    """The current time (from ``wall_clock``) as :func:`format_iso` writes it."""
    return format_iso(wall_clock())


def parse_iso(text: str) -> float | None:
    """The Unix time of an ISO timestamp (UTC when it names no zone), or None if unparseable."""
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp()


def mapping_at(parent: Mapping[str, Any], key: str) -> Mapping[str, Any] | None:
    """The JSON object under ``key``, for reading.

    Returns ``None`` when the key is absent *or* holds something other than an
    object, so a wrong-typed part of a damaged file never crashes a reader.
    """
    value = parent.get(key)
    return value if isinstance(value, dict) else None


def ensure_mapping(parent: dict[str, Any], key: str) -> dict[str, Any]:
    """The JSON object under ``key``, for writing inside :meth:`LocalStateStore.update`.

    Creates an empty object when the key is absent.

    Raises:
        StateUnavailable: the key holds something other than an object; it is
            left as it is rather than replaced.
    """
    value = parent.get(key)
    if value is None and key not in parent:
        created: dict[str, Any] = {}
        parent[key] = created
        return created
    if isinstance(value, dict):
        return value
    error = StateUnavailable(STATE_UNAVAILABLE_MESSAGE)
    error.add_note(f"{key!r} in the state file is {json_type(value)}, not an object")
    raise error


def session_in(data: Mapping[str, Any], session_id: str) -> AgentSession | None:
    """The session stored under ``agent_sessions[session_id]`` in ``data``, if well formed.

    A missing, wrong-typed or malformed record reads as ``None``, as the Node
    client's plain read gives an empty state then.
    """
    sessions = mapping_at(data, "agent_sessions")
    record = None if sessions is None else mapping_at(sessions, session_id)
    if record is None:
        return None
    try:
        return AgentSession.from_json(record)
    except ValueError:
        return None
