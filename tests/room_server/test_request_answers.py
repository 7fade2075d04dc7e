"""Answering a request for a person's input (``POST …/attention/{id}/respond``), refusal by
refusal, and the room message an answer posts (both stores).

Each refusal is compared whole (status and body): only a person who is one of
the room's admins answers, with no session credentials at all; a record id
that is no id is 400, a record that is no request 404; the answer is text of
at most 8000 characters; a stale version 409. The pure ``response_text`` at the
end: the answer wakes the agent that asked by its key, and a person's
request is answered with no handle.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from letagents_trio.room_server._knowledge import NOT_ADMIN_TEXT, response_text
from letagents_trio.room_server._storage._rows import KnowledgeRow

from .helpers import (
    OTHER_PERSON_TOKEN,
    ROOM,
    person_headers,
    registered,
    registration,
    session_headers,
)
from .test_knowledge import ASK, FACT, post

if TYPE_CHECKING:
    import httpx2
    import trio.testing

    from letagents_trio.room_server import Room

RECORD_ID_TEXT = "Use a stable client ID of 8–80 letters, numbers, underscores or hyphens."
RESPONSE_TEXT = "Response must be nonempty text of at most 8000 characters."


def respond_path(record_id: str) -> str:
    return f"/rooms/{ROOM}/attention/{record_id}/respond"


@pytest.mark.parametrize(
    ("record_id", "headers", "body", "status", "error"),
    [
        # Anyone with session credentials, even one of them, even with the owner's bearer.
        (
            "ask-00001",
            "session_id_only",
            {"response": "y", "expected_version": 1},
            403,
            NOT_ADMIN_TEXT,
        ),
        ("ask-00001", "agent", {"response": "y", "expected_version": 1}, 403, NOT_ADMIN_TEXT),
        # A person who is not one of the room's admins.
        ("ask-00001", "other_owner", {"response": "y", "expected_version": 1}, 403, NOT_ADMIN_TEXT),
        ("short", "owner", {"response": "y", "expected_version": 1}, 400, RECORD_ID_TEXT),
        ("ask-99999", "owner", {"response": "y", "expected_version": 1}, 404, "Record not found."),
        ("fact-0001", "owner", {"response": "y", "expected_version": 1}, 404, "Record not found."),
        ("ask-00001", "owner", {"expected_version": 1}, 400, RESPONSE_TEXT),
        ("ask-00001", "owner", {"response": "  ", "expected_version": 1}, 400, RESPONSE_TEXT),
        ("ask-00001", "owner", {"response": "y" * 8001, "expected_version": 1}, 400, RESPONSE_TEXT),
        (
            "ask-00001",
            "owner",
            {"response": "y", "expected_version": 2},
            409,
            "This changed since you opened it. Refresh to see the latest version.",
        ),
    ],
)
async def test_each_refused_answer_says_why_and_changes_nothing(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    record_id: str,
    headers: str,
    body: dict[str, Any],
    status: int,
    error: str,
) -> None:
    a = await registered(client, registration(name="A"))
    assert (await post(client, "attention", session_headers(a), ASK)).status_code == 201
    assert (await post(client, "memory", session_headers(a), FACT)).status_code == 201
    before = room.store.room_knowledge(ROOM, "attention")
    chosen = {
        "owner": person_headers(),  # the room's admin, signed in
        "other_owner": person_headers(OTHER_PERSON_TOKEN),
        "agent": session_headers(a),
        "session_id_only": {
            **person_headers(),
            "X-LetAgents-Agent-Session-Id": a["session_id"],
        },
    }[headers]
    r = await client.post(respond_path(record_id), json=body, headers=chosen)
    assert (r.status_code, r.json()) == (status, {"error": error})
    assert room.store.room_knowledge(ROOM, "attention") == before


async def test_an_answer_of_8000_characters_is_taken(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a = await registered(client, registration(name="A"))
    assert (await post(client, "attention", session_headers(a), ASK)).status_code == 201
    answer = {"response": "y" * 8000, "expected_version": 1}
    r = await client.post(respond_path("ask-00001"), json=answer, headers=person_headers())
    assert r.status_code == 200, r.text
    assert r.json()["record"]["response"]["body"] == "y" * 8000


def request_by(author: dict[str, str]) -> KnowledgeRow:
    return KnowledgeRow(
        room_id=ROOM,
        record_id="ask-00001",
        type="attention",
        category="question",
        title="t",
        body="b",
        author=author,
        updated_by=author,
        created_at=0,
        updated_at=0,
        response={"body": "Yes."},
    )


@pytest.mark.parametrize(
    ("author", "text"),
    [
        ({"id": "owner/river-bank", "kind": "agent"}, "@agent:owner/river-bank\n\n"),
        ({"id": "Owner/River Bank!", "kind": "agent"}, "@agent:owner/riverbank\n\n"),
        ({"id": "owner/a_b.c:d", "kind": "agent"}, "@agent:owner/a_b.c:d\n\n"),
        ({"id": "", "kind": "agent"}, ""),
        ({"id": "!!", "kind": "agent"}, ""),
        ({"id": "acct_1", "kind": "human"}, ""),
    ],
)
def test_an_answer_wakes_the_agent_that_asked_by_its_key(author: dict[str, str], text: str) -> None:
    assert response_text(request_by(author)) == f"{text}Human response (ask-00001):\n\nYes."
