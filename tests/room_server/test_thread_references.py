"""How a message names another (``reply_to``, ``thread_root_id``): ids with spaces around
them, blank and null references, and the longest id the store holds (both stores).

A reference is the id of a message of the room, with the spaces around it
ignored; blank or null is no reference at all. An id of 18 digits is an id
(one no message has here: "must reference an existing message"); one of 19
does not fit the store's integer and is no id ("must be a valid message id").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from letagents_trio.room_server._messaging._threads import (
    REPLY_TO_INVALID_TEXT,
    REPLY_TO_MISSING_TEXT,
    THREAD_ROOT_INVALID_TEXT,
    THREAD_ROOT_MISSING_TEXT,
)

from .helpers import ROOM, registered, registration
from .test_threads import post, sent

if TYPE_CHECKING:
    import httpx2
    import trio.testing

    from letagents_trio.room_server import Room


@pytest.mark.parametrize("field", ["reply_to", "thread_root_id"])
async def test_spaces_around_an_id_are_ignored(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, field: str
) -> None:
    a = await registered(client, registration(name="A"))
    root = await sent(client, a, "root")
    reply = await sent(client, a, "re", **{field: f"  {root['id']}\t"})
    assert reply["thread_root_id"] == root["id"]
    assert reply["thread"]["root_message_id"] == root["id"]


@pytest.mark.parametrize("blank", ["", "   ", None])
@pytest.mark.parametrize("field", ["reply_to", "thread_root_id"])
async def test_a_blank_or_null_reference_is_none(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    field: str,
    blank: str | None,
) -> None:
    a = await registered(client, registration(name="A"))
    await sent(client, a, "root")
    message = await sent(client, a, "alone", **{field: blank})
    assert (message["thread_root_id"], message["reply_to"], message["thread"]) == (
        message["id"],
        None,
        None,
    )


@pytest.mark.parametrize(
    ("fields", "text"),
    [
        ({"reply_to": "9" * 18}, REPLY_TO_MISSING_TEXT),
        ({"reply_to": "9" * 19}, REPLY_TO_INVALID_TEXT),
        ({"thread_root_id": "9" * 18}, THREAD_ROOT_MISSING_TEXT),
        ({"thread_root_id": "9" * 19}, THREAD_ROOT_INVALID_TEXT),
        ({"reply_to": "1 2"}, REPLY_TO_INVALID_TEXT),
        ({"thread_root_id": "-1"}, THREAD_ROOT_INVALID_TEXT),
    ],
)
async def test_the_longest_id_is_18_digits(
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
