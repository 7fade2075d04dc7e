"""Entering rooms from a chat: join by name or invite code, make an invite room, remember it.

``POST /rooms/{room}/join`` (a named room is made on first join; a code no
room has is 404) and ``POST /projects`` (a new invite room whose id is its
code). A joined room is remembered in the state file where the Node client
keeps it, so either server on the machine can resume it (PROTOCOL §6.1,
unknown keys): ``room_sessions[<room_id>]`` and ``current_room``, each
``{room_id, project_id, code, display_name, git_room, joined_via, joined_at,
last_seen_at, last_message_id?}`` in that order, ``joined_at`` kept from an
earlier join of the same room. Both are written in one locked update.

Joining is what the room's tools do *before* a worker exists: it needs no
session, and works signed in or not (a signed-in caller may become a new
room's first admin). A worker is registered in the joined room afterwards
with ``register_agent_session``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

from .._client import encode_room_path
from .._errors import ApiError, WorkerError
from ._names import looks_like_invite_code
from ._stateparts import ensure_mapping, iso_now, mapping_at

if TYPE_CHECKING:
    from .._client import RoomClient
    from ._state import LocalStateStore

__all__ = [
    "CURRENT_ROOM_KEY",
    "ROOM_SESSIONS_KEY",
    "create_invite_room",
    "join_room",
    "normalize_invite_code",
    "saved_room",
]

# The Node client's keys for joined rooms.
ROOM_SESSIONS_KEY: Final = "room_sessions"
CURRENT_ROOM_KEY: Final = "current_room"
# Ours.
UNKNOWN_CODE_TEXT: Final = (
    "No room has the invite code {code} (the room answered 404). Check the code with the"
    " person who shared it, or make a room with create_room."
)
BLANK_TEXT: Final = "Pass the {what} to join."


def normalize_invite_code(value: str) -> str:
    """An invite code as the room keeps it: trimmed, upper case."""
    return value.strip().upper()


def _text(answer: Mapping[str, Any], key: str) -> str | None:
    value = answer.get(key)
    return value if isinstance(value, str) and value else None


def saved_room(data: Mapping[str, Any], room_id: str | None = None) -> Mapping[str, Any] | None:
    """The state's saved room ``room_id`` (``room_sessions``), else its ``current_room``."""
    if room_id:
        sessions = mapping_at(data, ROOM_SESSIONS_KEY)
        found = None if sessions is None else mapping_at(sessions, room_id)
        if found is not None and isinstance(found.get("room_id"), str):
            return found
    current = mapping_at(data, CURRENT_ROOM_KEY)
    return current if current is not None and isinstance(current.get("room_id"), str) else None


async def _remember(
    store: LocalStateStore, answer: Mapping[str, Any], room_id: str, joined_via: str
) -> dict[str, Any]:
    now = iso_now(store.wall_clock)
    code = _text(answer, "code") or (room_id if looks_like_invite_code(room_id) else None)

    def remember(state: dict[str, Any]) -> dict[str, Any]:
        sessions = ensure_mapping(state, ROOM_SESSIONS_KEY)
        earlier = mapping_at(sessions, room_id) or {}
        session: dict[str, Any] = {
            "room_id": room_id,
            "project_id": _text(answer, "project_id") or earlier.get("project_id"),
            "code": code or earlier.get("code"),
            "display_name": _text(answer, "display_name") or earlier.get("display_name"),
            "git_room": answer.get("git_room", earlier.get("git_room")),
            "joined_via": joined_via,
            "joined_at": earlier.get("joined_at") or now,
            "last_seen_at": now,
        }
        if isinstance(earlier.get("last_message_id"), str):
            session["last_message_id"] = earlier["last_message_id"]
        sessions[room_id] = session
        state[CURRENT_ROOM_KEY] = dict(session)
        return session

    return await store.update(remember)


async def join_room(
    client: RoomClient, store: LocalStateStore, identifier: str, joined_via: str
) -> tuple[dict[str, Any], Mapping[str, Any]]:
    """Join the room ``identifier`` (a code when ``joined_via`` is ``join_code``) and remember it.

    Returns:
        The remembered room session and the room's answer.

    Raises:
        WorkerError: a blank identifier, or a code no room has; nothing was written.
        ApiError, RoomUnreachable: the room refused or did not answer.
        StateUnavailable, StateError: the state file could not be written
            (the room has the join; a second join is harmless).

    Cancellation:
        A checkpoint; the room may have recorded the join.
    """
    by_code = joined_via == "join_code"
    room_id = normalize_invite_code(identifier) if by_code else identifier.strip()
    if not room_id:
        raise WorkerError(BLANK_TEXT.format(what="invite code" if by_code else "room name"))
    try:
        answer = await client.call("POST", f"/rooms/{encode_room_path(room_id)}/join")
    except ApiError as exc:
        if exc.status == 404 and looks_like_invite_code(room_id):
            raise WorkerError(UNKNOWN_CODE_TEXT.format(code=room_id)) from None
        raise
    fields: Mapping[str, Any] = answer if isinstance(answer, Mapping) else {}
    joined = _text(fields, "room_id") or room_id
    return await _remember(store, fields, joined, joined_via), fields


async def create_invite_room(
    client: RoomClient, store: LocalStateStore
) -> tuple[dict[str, Any], Mapping[str, Any]]:
    """Make an invite room (``POST /projects``) and remember it as joined by its code.

    Raises:
        ApiError, RoomUnreachable: the room refused (401 when not signed in)
            or did not answer.
        StateUnavailable, StateError: as :func:`join_room`.

    Cancellation:
        A checkpoint; the room may have made the room.
    """
    answer = await client.call("POST", "/projects")
    fields: Mapping[str, Any] = answer if isinstance(answer, Mapping) else {}
    room_id = _text(fields, "code") or _text(fields, "id") or _text(fields, "room_id")
    if room_id is None:
        raise WorkerError("The room made a room but did not say its code.")
    remembered = {**fields, "project_id": _text(fields, "id")}
    return await _remember(store, remembered, room_id, "join_code"), fields
