"""The roster and the room's messages as the letagents API writes them (issue 44), on both stores.

``POST …/presence`` sets a worker's status and text, who it is taken from its
session; ``GET …/presence`` lists the room's rows, newest first, with their
freshness. Message ids are ``msg_N`` on the wire while the store keeps its
numbers, so a database written before reads on, and so does a cursor a host
kept from a room of an older version.
"""

from __future__ import annotations

import sqlite3
from typing import TYPE_CHECKING, Any

import httpx2
import pytest
import trio
import trio.testing

from letagents_trio._protocol import WORKER_REQUIRED_TEXT
from letagents_trio.room_server import Room, RoomConfig, SQLiteStore, TrioClock, create_app
from letagents_trio.room_server._sessions._roster import PRESENCE_TEXT
from letagents_trio.room_server._storage._rows import MessageRow
from letagents_trio.testing._transport import open_streaming_transport

from .helpers import (
    EPOCH,
    OTHER_TOKEN,
    OWNER_TOKEN,
    ROOM,
    owner_headers,
    registered,
    registration,
    session_headers,
)

if TYPE_CHECKING:
    from pathlib import Path

PRESENCE = f"/rooms/{ROOM}/presence"


async def set_presence(
    client: httpx2.AsyncClient, session: dict[str, Any], **body: Any
) -> httpx2.Response:
    return await client.post(PRESENCE, json=body, headers=session_headers(session))


async def test_a_worker_sets_its_presence_and_the_roster_shows_it(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a = await registered(client, registration(name="Alice"))
    b = await registered(client, registration(name="Bob"))
    r = await set_presence(
        client,
        a,
        status=" Reviewing ",
        status_text="  reviewing PR #2 ",
        actor_label="someone else",  # who it is comes from the session, never the body
    )
    assert r.status_code == 200, r.text
    row = r.json()
    assert (row["actor_label"], row["display_name"], row["agent_session_id"]) == (
        a["actor_label"],
        "Alice",
        a["session_id"],
    )
    assert (row["status"], row["status_text"], row["freshness"]) == (
        "reviewing",
        "reviewing PR #2",
        "active",
    )
    await trio.sleep(91)  # past the API's 90 s window
    r = await set_presence(client, b, status="idle", status_text=" ")
    assert (r.json()["status"], r.json()["status_text"]) == ("idle", None)
    r = await set_presence(client, a, status="working", status_text="writing docs")
    assert r.status_code == 200
    # Newest first; one row per worker; a person who is the room's admin reads it too.
    for headers in (session_headers(b), owner_headers()):
        r = await client.get(PRESENCE, headers=headers)
        assert r.status_code == 200, r.text
        listed = r.json()
        assert listed["room_id"] == ROOM
        assert [(p["display_name"], p["status_text"]) for p in listed["presence"]] == [
            ("Alice", "writing docs"),
            ("Bob", None),
        ]
    await trio.sleep(91)
    r = await client.get(f"{PRESENCE}?limit=1", headers=owner_headers())
    ((only,),) = [r.json()["presence"]]
    assert (only["display_name"], only["freshness"]) == ("Alice", "stale")


@pytest.mark.parametrize("status", [None, "", "busy", 3])
async def test_a_presence_without_a_valid_status_is_400(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room, status: Any
) -> None:
    a = await registered(client, registration(name="Alice"))
    r = await set_presence(client, a, status=status, status_text="x")
    assert (r.status_code, r.json()) == (400, {"error": PRESENCE_TEXT})
    assert room.store.room_presence(ROOM, 10) == []


async def test_only_a_worker_session_of_the_room_sets_a_presence(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    lead = await registered(client, {**registration(name="Lead"), "session_kind": "controller"})
    r = await set_presence(client, lead, status="idle")
    assert (r.status_code, r.json()) == (403, {"error": WORKER_REQUIRED_TEXT})
    r = await client.post(PRESENCE, json={"status": "idle"}, headers=owner_headers())
    assert r.status_code == 403
    r = await client.get(PRESENCE, headers=owner_headers(OTHER_TOKEN))
    assert r.status_code in (401, 403)
    assert room.store.room_presence(ROOM, 10) == []


async def test_a_database_written_before_reads_on_with_api_ids(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    """A file an older version wrote (numbered messages with the name as sender, no
    roster table) opens: ids come out ``msg_N``, a bare cursor kept from then still
    reads on, a reply names an old message by its API id, and the roster works."""
    path = tmp_path / "room.db"
    old = SQLiteStore(path)
    for text in ("one", "two"):
        old.add_message(MessageRow(room_id=ROOM, sender="Juniper", text=text, created_at=EPOCH))
    old.close()
    with sqlite3.connect(path) as db:
        db.execute("DROP TABLE room_presence")
    store = SQLiteStore(path)
    room = Room(
        store=store,
        clock=TrioClock(EPOCH),
        owner_tokens={OWNER_TOKEN: "owner"},
        config=RoomConfig(),
    )
    try:
        async with (
            open_streaming_transport(create_app(room)) as transport,
            httpx2.AsyncClient(transport=transport, base_url="http://room.test") as client,
        ):
            a = await registered(client, registration(name="Alice"))
            headers = session_headers(a)
            r = await client.get(f"/rooms/{ROOM}/messages?after=1", headers=headers)
            assert [(m["id"], m["sender"], m["text"]) for m in r.json()["messages"]] == [
                ("msg_2", "Juniper", "two")
            ]
            r = await client.post(
                f"/rooms/{ROOM}/messages", json={"text": "re", "reply_to": "msg_1"}, headers=headers
            )
            assert r.status_code == 201, r.text
            reply = r.json()
            assert (reply["id"], reply["thread_root_id"], reply["sender"]) == (
                "msg_3",
                "msg_1",
                a["actor_label"],
            )
            r = await client.get(f"/rooms/{ROOM}/messages?after=msg_2", headers=headers)
            assert [m["id"] for m in r.json()["messages"]] == ["msg_3"]
            r = await set_presence(client, a, status="working", status_text="on it")
            assert r.status_code == 200, r.text
    finally:
        store.close()
