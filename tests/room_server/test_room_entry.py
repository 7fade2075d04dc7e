"""Invite rooms (``POST /projects``) and joining (``POST /rooms/{room}/join``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from letagents_trio.room_server._storage._rows import RoomRow
from letagents_trio.workers._names import looks_like_invite_code

from .helpers import OTHER_TOKEN, OWNER_TOKEN, owner_headers

if TYPE_CHECKING:
    import httpx2
    import trio.testing

    from letagents_trio.room_server import Room


async def test_an_invite_room_is_made_by_its_caller_and_joined_by_its_code(
    client: httpx2.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    made = await client.post("/projects", headers=owner_headers())
    assert made.status_code == 201
    room = made.json()
    code = room["code"]
    assert looks_like_invite_code(code)
    assert room["id"] == room["room_id"] == code
    assert room["role"] == "admin"
    joined = await client.post(f"/rooms/{code}/join", headers=owner_headers(OTHER_TOKEN))
    assert joined.status_code == 200
    assert joined.json()["room_id"] == code
    assert joined.json()["role"] == "participant"
    own = await client.post(f"/rooms/{code}/join", headers=owner_headers())
    assert own.json()["role"] == "admin"


async def test_a_code_no_room_has_is_404_and_makes_nothing(
    client: httpx2.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    for _ in range(2):
        missing = await client.post("/rooms/ZZZZ-9999/join", headers=owner_headers())
        assert (missing.status_code, missing.json()) == (404, {"error": "Room not found"})


async def test_a_named_room_is_made_on_join_unless_create_is_false(
    client: httpx2.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    refused = await client.post("/rooms/github.com/o/r/join?create=false", headers=owner_headers())
    assert refused.status_code == 404
    nobody = await client.post("/rooms/github.com/o/r/join")
    assert (nobody.status_code, nobody.json()) == (401, {"error": "Authentication required."})
    first = await client.post("/rooms/github.com/o/r/join", headers=owner_headers())
    assert first.status_code == 200
    assert first.json()["room_id"] == "github.com/o/r"
    assert first.json()["role"] == "admin"  # it made the room
    second = await client.post("/rooms/github.com/o/r/join", headers=owner_headers(OTHER_TOKEN))
    assert second.json()["role"] == "participant"
    anonymous = await client.post("/rooms/github.com/o/r/join")
    assert anonymous.status_code == 200
    assert (anonymous.json()["role"], anonymous.json()["authenticated"]) == ("anonymous", False)


async def test_the_first_signed_in_joiner_of_a_room_nobody_administers_is_its_admin(
    room: Room, client: httpx2.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    room.store.put_room(RoomRow(room_id="orphan", created_at=0))
    first = await client.post("/rooms/orphan/join", headers=owner_headers(OTHER_TOKEN))
    assert first.json()["role"] == "admin"
    second = await client.post("/rooms/orphan/join", headers=owner_headers())
    assert second.json()["role"] == "participant"


async def test_an_unknown_bearer_is_refused(
    client: httpx2.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    assert (await client.post("/projects")).status_code == 401
    assert (await client.post("/projects", headers=owner_headers("nope"))).status_code == 401
    joined = await client.post("/rooms/named/join", headers=owner_headers("nope"))
    assert joined.status_code == 401
    assert OWNER_TOKEN not in joined.text
