"""Entering rooms: making an invite room (``POST /projects``), joining one (``POST …/join``).

The letagents API's rules, for the reference room:

* **Invite rooms.** ``POST /projects`` makes a room whose id is a fresh invite
  code (``XXXX-XXXX``: letters and digits, the shape a client recognises as a
  code), with the caller's account as its creator (its first admin), and
  answers 201 with the room (``id`` and ``code`` are the code). It needs a
  signed-in caller (owner or person token): 401 otherwise.
* **Joining.** ``POST /rooms/{room}/join`` answers 200 with the room and the
  caller's ``role`` there (``admin``, ``participant`` or ``anonymous``). A
  room that does not exist is made, a *named* room only: an id shaped like
  an invite code that no room has is 404 ``Room not found`` (a code is made
  by ``POST /projects``, never by guessing), and so is any missing room when
  the query says ``create=false`` or ``create=0``. Joining an existing room
  needs no bearer; making one does (401 without): the API lets anyone make a
  named room, under a rate limit of ten joins a minute per address, which the
  reference room does not keep, so only an account makes rooms here. A
  signed-in caller who joins a room nobody administers yet becomes its first
  admin (the API's ``assignInitialProjectAdmin``). A bearer that is given but
  is no account's is 401.

The room's answer (:func:`room_json`) carries the API's room fields the
reference room has: ``room_id``, ``name``, ``display_name``, ``code``,
``kind``, ``role`` and ``authenticated``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final, final

import attrs

from ...workers._names import looks_like_invite_code
from .._storage._rows import RoomRow
from .._wire import OWNER_AUTH_TEXT, ROOM_NOT_FOUND_TEXT, Reply, iso, random_code, valid_room_id

if TYPE_CHECKING:
    from .._auth._accounts import Accounts
    from .._clock import RoomClock
    from .._storage._rows import Account
    from .._storage._store import RoomStore

__all__ = ["RoomEntry", "room_json"]

# The query values that forbid making a missing room.
_NO_CREATE: Final = frozenset({"false", "0"})


def room_json(room: RoomRow, *, role: str, authenticated: bool) -> dict[str, Any]:
    """The room as the API answers it (``toRoomResponse``), with the fields this room has."""
    code = room.room_id if looks_like_invite_code(room.room_id) else None
    return {
        "room_id": room.room_id,
        "name": None if code else room.room_id,
        "display_name": room.room_id,
        "code": code,
        "kind": "main",
        "created_at": iso(room.created_at),
        "role": role,
        "authenticated": authenticated,
    }


@final
@attrs.define(eq=False)
class RoomEntry:
    """Making invite rooms and joining rooms.

    Args:
        store: the room's rows.
        clock: the room's clock.
        accounts: who a bearer is, and who administers a room.
    """

    store: RoomStore
    clock: RoomClock
    accounts: Accounts

    def _caller(self, bearer: str | None) -> Account | Reply | None:
        if bearer is None:
            return None
        found = self.accounts.bearer(bearer)
        if found is None:
            return Reply(status=401, body={"error": OWNER_AUTH_TEXT})
        return found[0]

    def create_invite_room(self, bearer: str | None) -> Reply:
        """``POST /projects``: a new invite room, made by the caller (201)."""
        caller = self._caller(bearer)
        if isinstance(caller, Reply):
            return caller
        if caller is None:
            return Reply(status=401, body={"error": OWNER_AUTH_TEXT})
        code = random_code()
        while self.store.get_room(code) is not None:  # 27**8 codes: a clash is rare
            code = random_code()
        room = RoomRow(room_id=code, created_at=self.clock.now_ms(), created_by=caller.account_id)
        self.store.put_room(room)
        body = room_json(room, role="admin", authenticated=True)
        return Reply(status=201, body={"id": code, **body})

    def join(self, room_id: str, bearer: str | None, *, create: str | None = None) -> Reply:
        """``POST /rooms/{room}/join``: the room and the caller's role there (200)."""
        caller = self._caller(bearer)
        if isinstance(caller, Reply):
            return caller
        if not valid_room_id(room_id):
            return Reply(status=404, body={"error": ROOM_NOT_FOUND_TEXT})
        room = self.store.get_room(room_id)
        if room is None:
            may_create = (create or "").strip().lower() not in _NO_CREATE
            if looks_like_invite_code(room_id) or not may_create:
                return Reply(status=404, body={"error": ROOM_NOT_FOUND_TEXT})
            if caller is None:  # no rate limit here: only an account makes rooms
                return Reply(status=401, body={"error": OWNER_AUTH_TEXT})
            room = RoomRow(
                room_id=room_id,
                created_at=self.clock.now_ms(),
                created_by=None if caller is None else caller.account_id,
            )
            self.store.put_room(room)
        elif caller is not None and room.created_by is None and not room.admins:
            room = attrs.evolve(room, created_by=caller.account_id)
            self.store.put_room(room)
        return Reply(
            status=200,
            body=room_json(
                room, role=self._role(room_id, caller), authenticated=caller is not None
            ),
        )

    def _role(self, room_id: str, caller: Account | None) -> str:
        if caller is None:
            return "anonymous"
        # A signed-in caller who joined is one of the room's participants (the API remembers it).
        return "admin" if self.accounts.is_admin(room_id, caller) else "participant"
