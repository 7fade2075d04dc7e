"""Room memory and requests for people (``…/memory``, ``…/attention``), on both stores."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from .helpers import (
    ROOM,
    owner_headers,
    person_headers,
    registered,
    registration,
    session_headers,
)

if TYPE_CHECKING:
    import httpx2
    import trio.testing

    from letagents_trio.room_server import Room

FACT = {
    "client_id": "fact-0001",
    "category": "decision",
    "title": "  Storage  ",
    "body": "We keep rooms in SQLite.",
}
ASK = {
    "client_id": "ask-00001",
    "category": "approval",
    "title": "Ship it?",
    "body": "The release is ready.",
    "recommendation": "Ship on Monday.",
    "unblocks": "The release.",
    "source_url": "https://example.test/pr/7",
}


async def post(
    client: httpx2.AsyncClient, kind: str, headers: dict[str, str], body: dict[str, Any]
) -> httpx2.Response:
    return await client.post(f"/rooms/{ROOM}/{kind}", json=body, headers=headers)


async def read(client: httpx2.AsyncClient, kind: str, headers: dict[str, str]) -> Any:
    r = await client.get(f"/rooms/{ROOM}/{kind}", headers=headers)
    assert r.status_code == 200, r.text
    return r.json()


async def test_an_agent_remembers_a_fact_and_a_retry_is_the_same_record(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    r = await post(client, "memory", session_headers(a), FACT)
    assert r.status_code == 201, r.text
    record = r.json()["record"]
    assert (record["id"], record["type"], record["title"], record["version"]) == (
        "fact-0001",
        "memory",
        "Storage",
        1,
    )
    assert record["author"] == {"id": a["agent_key"], "label": a["actor_label"], "kind": "agent"}
    assert (record["archived"], record["response"]) == (False, None)
    # The same id, author and content: the stored record again; anything else: 409.
    again = await post(client, "memory", session_headers(a), FACT)
    assert (again.status_code, again.json()["record"]) == (201, record)
    changed = await post(client, "memory", session_headers(a), {**FACT, "body": "Postgres."})
    assert changed.status_code == 409
    assert "already used for different content" in changed.json()["error"]
    by_b = await post(client, "memory", session_headers(b), FACT)
    assert by_b.status_code == 409
    page = await read(client, "memory", session_headers(b))
    assert (page["room_id"], page["records"], page["truncated"]) == (ROOM, [record], False)
    assert "tasks" not in page
    assert await read(client, "memory", owner_headers()) == page  # the admin reads it too


async def test_a_request_for_input_lists_with_waiting_tasks_and_a_person_answers_once(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    said = await client.post(
        f"/rooms/{ROOM}/messages", json={"text": "ready"}, headers=session_headers(a)
    )
    ask = {**ASK, "source_message_id": said.json()["id"]}
    r = await post(client, "attention", session_headers(a), ask)
    assert r.status_code == 201, r.text
    record = r.json()["record"]
    assert (record["recommendation"], record["unblocks"]) == ("Ship on Monday.", "The release.")
    page = await read(client, "attention", session_headers(a))
    assert [x["id"] for x in page["records"]] == ["ask-00001"]
    assert page["tasks"] == []
    # Agents never answer; a person (the room's admin) answers, naming the version seen.
    respond = f"/rooms/{ROOM}/attention/ask-00001/respond"
    r = await client.post(
        respond, json={"response": "yes", "expected_version": 1}, headers=session_headers(a)
    )
    assert r.status_code == 403
    r = await client.post(
        respond, json={"response": "yes", "expected_version": 0}, headers=person_headers()
    )
    assert r.status_code == 409
    r = await client.post(
        respond, json={"response": "Yes, ship it.", "expected_version": 1}, headers=person_headers()
    )
    assert r.status_code == 200, r.text
    answered = r.json()["record"]
    assert (answered["version"], answered["response"]["body"]) == (2, "Yes, ship it.")
    assert answered["response"]["actor"]["kind"] == "human"
    # The answer is posted to the room as a reply to the cited message, waking the agent.
    notice = room.store.messages_after(ROOM, 0, 10)[-1]
    assert notice.text == (
        f"@agent:{a['agent_key']}\n\nHuman response (ask-00001):\n\nYes, ship it."
    )
    assert (notice.sender, notice.source, notice.reply_to_id) == (
        "owner",
        "browser",
        int(said.json()["id"]),
    )
    # A retry of that answer is answered again; another answer is refused.
    r = await client.post(
        respond, json={"response": "Yes, ship it.", "expected_version": 1}, headers=person_headers()
    )
    assert (r.status_code, r.json()["record"]) == (200, answered)
    r = await client.post(
        respond, json={"response": "No.", "expected_version": 2}, headers=person_headers()
    )
    assert (r.status_code, r.json()) == (409, {"error": "This request has already been answered."})


@pytest.mark.parametrize(
    ("kind", "changes", "text"),
    [
        ("memory", {"category": "question"}, "Choose a valid category."),
        ("attention", {"category": "goal"}, "Choose a valid category."),
        ("memory", {"title": ""}, "Title must be nonempty text of at most 160 characters."),
        ("memory", {"title": "x" * 161}, "Title must be nonempty text of at most 160 characters."),
        ("memory", {"body": " "}, "Context must be nonempty text of at most 8000 characters."),
        (
            "memory",
            {"body": "x" * 8001},
            "Context must be nonempty text of at most 8000 characters.",
        ),
        (
            "memory",
            {"client_id": "short"},
            "Use a stable client ID of 8–80 letters, numbers, underscores or hyphens.",
        ),
        (
            "memory",
            {"client_id": "has spaces!"},
            "Use a stable client ID of 8–80 letters, numbers, underscores or hyphens.",
        ),
        ("memory", {"source_url": "ftp://x.test/"}, "Source URL must be an HTTP or HTTPS link."),
        (
            "memory",
            {"source_url": "https://u:p@x.test/"},
            "Source URL must be an HTTP or HTTPS link without credentials.",
        ),
        ("memory", {"source_message_id": "999"}, "The source message does not exist in this room."),
        ("memory", {"source_message_id": "msg_x"}, "Invalid source message."),
        (
            "attention",
            {"unblocks": "x" * 1001},
            "What this unblocks must be text of at most 1000 characters.",
        ),
    ],
)
async def test_bad_records_are_400_and_store_nothing(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    kind: str,
    changes: dict[str, Any],
    text: str,
) -> None:
    a = await registered(client, registration(name="A"))
    base = FACT if kind == "memory" else ASK
    r = await post(client, kind, session_headers(a), {**base, **changes})
    assert (r.status_code, r.json()) == (400, {"error": text})
    assert room.store.room_knowledge(ROOM, kind) == []


async def test_strangers_and_wrong_credentials_change_nothing(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a = await registered(client, registration(name="A"))
    r = await client.get(f"/rooms/{ROOM}/memory")
    assert r.status_code == 401
    bad = dict(session_headers(a), **{"X-LetAgents-Agent-Session-Token": "wrong"})
    r = await post(client, "memory", bad, FACT)
    assert (r.status_code, r.json()) == (401, {"error": "Invalid agent session credentials."})
