"""Messages at their edges (both stores, ``autojump_clock``).

A client's own message id (``client_message_id``) at 200 characters and one
more, empty or no string; the same id from another agent; and the other edges
of :mod:`letagents_trio.room_server._messaging._messages` that its rules
promise, each through the routes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from letagents_trio.room_server._messaging._messages import CLIENT_MESSAGE_ID_TEXT

from .helpers import ROOM, registered, registration, session_headers

if TYPE_CHECKING:
    import httpx2
    import trio.testing

    from letagents_trio.room_server import Room

MESSAGES = f"/rooms/{ROOM}/messages"


async def send(client: httpx2.AsyncClient, session: dict[str, Any], **body: Any) -> httpx2.Response:
    return await client.post(
        MESSAGES, json={"text": "hi", **body}, headers=session_headers(session)
    )


@pytest.mark.parametrize("client_id", ["c" * 201, "", 5, ["c"]])
async def test_a_client_message_id_is_a_string_of_1_to_200_characters(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    client_id: object,
) -> None:
    a = await registered(client, registration(name="A"))
    r = await send(client, a, client_message_id=client_id)
    assert (r.status_code, r.json()) == (400, {"error": CLIENT_MESSAGE_ID_TEXT})
    assert room.store.messages_after(ROOM, 0, 5) == []
    r = await send(client, a, client_message_id="c" * 200)
    assert r.status_code == 201, r.text


async def test_a_retry_answers_the_message_posted_and_another_agents_id_is_its_own(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    first = await send(client, a, text="once", client_message_id="m-1")
    again = await send(client, a, text="twice", client_message_id="m-1")
    assert (again.status_code, again.json()) == (201, first.json())
    other = await send(client, b, text="mine", client_message_id="m-1")
    assert other.status_code == 201, other.text
    assert other.json()["id"] != first.json()["id"]
    assert [m.text for m in room.store.messages_after(ROOM, 0, 5)] == ["once", "mine"]
