"""``GET`` / ``PUT /rooms/{room}/agent-guidelines`` (issue 12 item 4), on both stores.

Agents read; admins (people: an owner bearer, no session credentials) read and
write; the text is normalized, limited to 8 000 UTF-8 bytes, and a change (not
a rewrite of the same text) is announced by one room message.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from letagents_trio.room_server._guidelines import (
    AGENT_WRITE_TEXT,
    GUIDELINES_NOTE,
    MAX_GUIDELINES_BYTES,
    NOT_ADMIN_TEXT,
    NOT_TEXT_TEXT,
    normalize_guidelines,
)

from .helpers import OTHER_TOKEN, ROOM, owner_headers, registered, registration, session_headers

if TYPE_CHECKING:
    import httpx2
    import trio.testing

PATH = f"/rooms/{ROOM}/agent-guidelines"


async def messages(client: httpx2.AsyncClient, worker: dict[str, Any]) -> list[dict[str, Any]]:
    response = await client.get(f"/rooms/{ROOM}/messages", headers=session_headers(worker))
    assert response.status_code == 200, response.text
    found: list[dict[str, Any]] = response.json()["messages"]
    return found


async def test_an_admin_writes_an_agent_reads_and_a_change_is_announced(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    worker = await registered(client, registration())
    empty = await client.get(PATH, headers=session_headers(worker))
    assert empty.status_code == 200
    assert empty.json() == {
        "room_id": ROOM,
        "guidelines": "",
        "updated_by": None,
        "updated_at": None,
        "inherited_from_room_id": None,
        "max_bytes": 8000,
        "token_budget": 2000,
        "note": GUIDELINES_NOTE,
        "can_manage": False,
    }
    put = await client.put(PATH, json={"guidelines": "  Run tests.\r\n"}, headers=owner_headers())
    assert put.status_code == 200, put.text
    assert put.json()["guidelines"] == "Run tests."
    assert put.json()["updated_by"] == "owner"
    assert put.json()["can_manage"] is True
    again = await client.put(PATH, json={"guidelines": "Run tests."}, headers=owner_headers())
    assert again.status_code == 200
    assert again.json()["updated_at"] == put.json()["updated_at"]
    read = await client.get(PATH, headers=session_headers(worker))
    assert (read.json()["guidelines"], read.json()["can_manage"]) == ("Run tests.", False)
    admin_read = await client.get(PATH, headers=owner_headers())
    assert admin_read.json()["can_manage"] is True
    notices = [m for m in await messages(client, worker) if m["source"] == "room_guidelines"]
    assert [(m["sender"], m["text"]) for m in notices] == [
        ("letagents", "owner updated this room's guidelines. Read them with get_room_guidelines.")
    ]
    cleared = await client.put(PATH, json={"guidelines": " \n "}, headers=owner_headers())
    assert cleared.json()["guidelines"] == ""
    notices = [m for m in await messages(client, worker) if m["source"] == "room_guidelines"]
    assert notices[-1]["text"] == "owner cleared this room's guidelines."


async def test_only_admins_as_people_write(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    worker = await registered(client, registration())
    as_agent = await client.put(PATH, json={"guidelines": "x"}, headers=session_headers(worker))
    assert (as_agent.status_code, as_agent.json()["error"]) == (403, AGENT_WRITE_TEXT)
    in_body = await client.put(
        PATH,
        json={
            "guidelines": "x",
            "agent_session_id": worker["session_id"],
            "agent_session_token": worker["session_token"],
        },
        headers=owner_headers(),
    )
    assert (in_body.status_code, in_body.json()["error"]) == (403, AGENT_WRITE_TEXT)
    stranger = await client.put(PATH, json={"guidelines": "x"}, headers=owner_headers(OTHER_TOKEN))
    assert (stranger.status_code, stranger.json()["error"]) == (403, NOT_ADMIN_TEXT)
    assert (await client.get(PATH, headers=owner_headers(OTHER_TOKEN))).status_code == 403
    nobody = await client.put(PATH, json={"guidelines": "x"})
    assert nobody.status_code == 401
    assert (await client.get(PATH)).status_code == 401
    unknown = await client.get("/rooms/nowhere/agent-guidelines", headers=owner_headers())
    assert unknown.status_code == 404
    read = await client.get(PATH, headers=session_headers(worker))
    assert read.json()["guidelines"] == ""


@pytest.mark.parametrize("value", [None, 7, ["x"], {"text": "x"}, True])
async def test_guidelines_must_be_text(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, value: object
) -> None:
    await registered(client, registration())
    response = await client.put(PATH, json={"guidelines": value}, headers=owner_headers())
    assert (response.status_code, response.json()["error"]) == (400, NOT_TEXT_TEXT)


async def test_the_limit_counts_utf8_bytes_of_the_normalized_text(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    await registered(client, registration())
    exact = "é" * (MAX_GUIDELINES_BYTES // 2)  # 2 bytes each: exactly at the limit
    ok = await client.put(PATH, json={"guidelines": f"\r\n{exact}\x00 "}, headers=owner_headers())
    assert ok.status_code == 200, ok.text
    assert ok.json()["guidelines"] == exact
    over = await client.put(PATH, json={"guidelines": exact + "x"}, headers=owner_headers())
    assert over.status_code == 413
    assert over.json()["max_bytes"] == MAX_GUIDELINES_BYTES
    read = await client.get(PATH, headers=owner_headers())
    assert read.json()["guidelines"] == exact  # the refused write changed nothing


@pytest.mark.parametrize(
    ("raw", "stored"),
    [
        ("a\r\nb\rc\nd", "a\nb\nc\nd"),
        ("\ta\tb\t", "a\tb"),
        ("a\x00b\x07c\x1bd\x7fe\x85f\u009fg", "abcdefg"),
        ("a\ud800b\udfffc", "abc"),
        ("a\U0001f600b", "a\U0001f600b"),
        ("\u00a0\u2003 text \ufeff", "text"),
        ("line\u2028sep", "line\u2028sep"),
        ("\r\n\r\n", ""),
    ],
)
def test_normalization(raw: str, stored: str) -> None:
    assert normalize_guidelines(raw) == stored
