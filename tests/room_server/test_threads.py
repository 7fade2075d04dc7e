"""Threads and the newest-first reads of ``GET …/messages``, on both stores.

A reply joins the thread of what it answers; ``thread_root_id`` names a
thread; a reply in another thread, or a reference to no message of the room,
is 400 with the letagents API's text and stores nothing. ``before=latest``
answers the room's newest page (oldest of it first) with ``has_older``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from letagents_trio.room_server._messaging._messages import BAD_BEFORE_TEXT, parse_before
from letagents_trio.room_server._messaging._threads import (
    REPLY_OUTSIDE_THREAD_TEXT,
    REPLY_TO_INVALID_TEXT,
    REPLY_TO_MISSING_TEXT,
    THREAD_ROOT_MISSING_TEXT,
)
from letagents_trio.room_server._wire import Refusal

from .helpers import ROOM, registered, registration, session_headers

if TYPE_CHECKING:
    import httpx2
    import trio.testing

    from letagents_trio.room_server import Room


async def post(
    client: httpx2.AsyncClient, session: dict[str, Any], text: str, **fields: Any
) -> httpx2.Response:
    return await client.post(
        f"/rooms/{ROOM}/messages", json={"text": text, **fields}, headers=session_headers(session)
    )


async def sent(
    client: httpx2.AsyncClient, session: dict[str, Any], text: str, **fields: Any
) -> dict[str, Any]:
    r = await post(client, session, text, **fields)
    assert r.status_code == 201, r.text
    message: dict[str, Any] = r.json()
    return message


async def page(client: httpx2.AsyncClient, session: dict[str, Any], query: str) -> dict[str, Any]:
    r = await client.get(f"/rooms/{ROOM}/messages?{query}", headers=session_headers(session))
    assert r.status_code == 200, r.text
    body: dict[str, Any] = r.json()
    return body


async def test_a_reply_joins_the_thread_of_what_it_answers(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    root = await sent(client, a, "plan?")
    assert (root["thread_root_id"], root["thread_reply_to_id"], root["thread"]) == (
        root["id"],
        None,
        None,
    )
    assert root["reply_to"] is None
    assert root["timestamp"] == root["created_at"]
    reply = await sent(client, b, "yes", reply_to=root["id"])
    assert (reply["thread_root_id"], reply["thread_reply_to_id"]) == (root["id"], root["id"])
    assert reply["reply_to"] == {
        "id": root["id"],
        "sender": "A",
        "text": "plan?",
        "source": None,
        "timestamp": root["timestamp"],
    }
    assert reply["thread"]["root_message_id"] == root["id"]
    assert reply["thread"]["reply_count"] == 1
    # A reply to the reply is in the same thread, as is a message naming the thread.
    deeper = await sent(client, a, "when?", reply_to=reply["id"])
    named = await sent(client, a, "also", thread_root_id=reply["id"])
    assert deeper["thread_root_id"] == named["thread_root_id"] == root["id"]
    listed = (await page(client, a, "after=0"))["messages"]
    summary = listed[0]["thread"]  # the root shows its thread now
    assert (summary["root_message_id"], summary["reply_count"]) == (root["id"], 3)
    assert summary["latest_reply"]["id"] == named["id"]
    other = await sent(client, b, "another topic")
    assert other["thread"] is None


@pytest.mark.parametrize(
    ("fields", "text"),
    [
        ({"reply_to": "msg_x"}, REPLY_TO_INVALID_TEXT),
        ({"reply_to": "0"}, REPLY_TO_INVALID_TEXT),
        ({"reply_to": 7}, REPLY_TO_INVALID_TEXT),
        ({"reply_to": "999"}, REPLY_TO_MISSING_TEXT),
        ({"thread_root_id": "999"}, THREAD_ROOT_MISSING_TEXT),
    ],
)
async def test_references_to_no_message_here_are_400_and_store_nothing(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    fields: dict[str, Any],
    text: str,
) -> None:
    a = await registered(client, registration(name="A"))
    r = await post(client, a, "x", **fields)
    assert (r.status_code, r.json()) == (400, {"error": text})
    assert room.store.messages_after(ROOM, 0, 10) == []


async def test_a_reply_outside_the_named_thread_is_400(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    one = await sent(client, a, "one")
    two = await sent(client, a, "two")
    r = await post(client, a, "x", reply_to=one["id"], thread_root_id=two["id"])
    assert (r.status_code, r.json()) == (400, {"error": REPLY_OUTSIDE_THREAD_TEXT})
    assert len(room.store.messages_after(ROOM, 0, 10)) == 2
    # A message of another room is no message of this one.
    elsewhere = await registered(client, registration(name="E"), room="room_other")
    r = await client.post(
        "/rooms/room_other/messages",
        json={"text": "x", "reply_to": one["id"]},
        headers=session_headers(elsewhere),
    )
    assert (r.status_code, r.json()) == (400, {"error": REPLY_TO_MISSING_TEXT})


async def test_before_latest_is_the_newest_page_oldest_first(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a = await registered(client, registration(name="A"))
    ids = [(await sent(client, a, f"m{i}"))["id"] for i in range(5)]
    newest = await page(client, a, "before=latest&limit=2")
    assert [m["id"] for m in newest["messages"]] == ids[3:]
    assert (newest["has_older"], newest["has_more"]) == (True, True)
    older = await page(client, a, f"before={ids[3]}&limit=2")
    assert [m["id"] for m in older["messages"]] == ids[1:3]
    oldest = await page(client, a, f"before={ids[1]}&limit=2")
    assert [m["id"] for m in oldest["messages"]] == ids[:1]
    assert oldest["has_older"] is False
    whole = await page(client, a, "before=latest")
    assert [m["id"] for m in whole["messages"]] == ids
    r = await client.get(f"/rooms/{ROOM}/messages?before=soon", headers=session_headers(a))
    assert (r.status_code, r.json()) == (400, {"error": BAD_BEFORE_TEXT})


@pytest.mark.parametrize(("before", "cursor"), [("latest", None), ("12", 12)])
def test_before_is_latest_or_a_message_id(before: str, cursor: int | None) -> None:
    assert parse_before(before) == cursor


@pytest.mark.parametrize("before", ["", "msg_1", "-1", "１", "1" * 19, "LATEST"])
def test_anything_else_is_no_before(before: str) -> None:
    with pytest.raises(Refusal):
        parse_before(before)
