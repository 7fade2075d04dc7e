"""Room memory and requests as the room shows them, field by field (both stores).

A record and a waiting task are compared whole, with their exact times (the
room's clock is ``EPOCH`` plus trio's virtual time); the list order (live,
unanswered, most recently changed first); and who may read: any session of
the room (a controller too), a person who is one of its admins, never another
owner.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio
import trio.testing

from letagents_trio._protocol import SESSION_REQUIRED_READ_TEXT
from letagents_trio.room_server._knowledge import NOT_ADMIN_TEXT
from letagents_trio.room_server._wire import iso

from .helpers import (
    EPOCH,
    OTHER_TOKEN,
    ROOM,
    claimed_task,
    owner_headers,
    person_headers,
    registered,
    registration,
    session_headers,
)
from .test_knowledge import ASK, FACT, post, read

if TYPE_CHECKING:
    import httpx2

    from letagents_trio.room_server import Room


def first_version(author: dict[str, str], **fields: object) -> dict[str, object]:
    """A record as the room shows it when first saved at ``EPOCH`` by ``author``."""
    return {
        "room_id": ROOM,
        **fields,
        "version": 1,
        "author": author,
        "updated_by": author,
        "created_at": iso(EPOCH),
        "updated_at": iso(EPOCH),
        "archived": False,
        "response": None,
    }


async def test_a_request_and_its_answer_are_shown_whole(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a = await registered(client, registration(name="A"))
    r = await post(client, "attention", session_headers(a), ASK)
    agent = {"id": a["agent_key"], "label": a["actor_label"], "kind": "agent"}
    asked = first_version(
        agent,
        id="ask-00001",
        type="attention",
        category="approval",
        title="Ship it?",
        body="The release is ready.",
        recommendation="Ship on Monday.",
        unblocks="The release.",
        source_url="https://example.test/pr/7",
        source_message_id="",
    )
    assert (r.status_code, r.json()) == (201, {"record": asked})
    await trio.sleep(5)
    answer = {"response": "Yes.", "expected_version": 1}
    r = await client.post(
        f"/rooms/{ROOM}/attention/ask-00001/respond", json=answer, headers=person_headers()
    )
    assert r.status_code == 200, r.text
    person = r.json()["record"]["updated_by"]
    assert (person["label"], person["kind"]) == ("owner", "human")
    assert person["id"]  # the owner's account
    answered = {
        **asked,
        "version": 2,
        "updated_by": person,
        "updated_at": iso(EPOCH + 5000),
        "response": {"body": "Yes.", "actor": person, "at": iso(EPOCH + 5000)},
    }
    assert r.json() == {"record": answered}
    page = await read(client, "attention", session_headers(a))
    assert page["records"] == [answered]


async def test_the_requests_list_names_the_tasks_that_wait_on_someone(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    """Blocked and in-review tasks, the first task of the room among them, each with its
    id, title, status, description and time; no other task."""
    a = await registered(client, registration(name="A"))
    headers = session_headers(a)
    first, _ = await claimed_task(client, a, "first")
    r = await client.post(
        f"/rooms/{ROOM}/tasks", json={"title": "idle", "description": "d"}, headers=headers
    )
    assert r.status_code == 201
    second, _ = await claimed_task(client, a, "second")
    await trio.sleep(2)
    for task, status in ((first, "in_progress"), (first, "blocked"), (second, "in_review")):
        r = await client.patch(
            f"/rooms/{ROOM}/tasks/{task}", json={"status": status}, headers=headers
        )
        assert r.status_code == 200, r.text
    page = await read(client, "attention", headers)
    waiting = [
        {"id": first, "title": "first", "status": "blocked", "description": None},
        {"id": second, "title": "second", "status": "in_review", "description": None},
    ]
    assert page["tasks"] == [{**t, "updated_at": iso(EPOCH + 2000)} for t in waiting]


async def test_unanswered_requests_come_before_answered_ones(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a = await registered(client, registration(name="A"))
    headers = session_headers(a)
    for n in (1, 2, 3):
        assert (
            await post(client, "attention", headers, {**ASK, "client_id": f"ask-0000{n}"})
        ).status_code == 201
        await trio.sleep(1)
    answer = {"response": "Yes.", "expected_version": 1}
    r = await client.post(
        f"/rooms/{ROOM}/attention/ask-00001/respond", json=answer, headers=person_headers()
    )
    assert r.status_code == 200, r.text
    page = await read(client, "attention", headers)
    # Answered last, ask-00001 is the most recently changed, and still listed last.
    assert [x["id"] for x in page["records"]] == ["ask-00003", "ask-00002", "ask-00001"]


async def test_who_may_read_the_rooms_records(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a = await registered(client, registration(name="A"))
    controller = await registered(client, dict(registration(name="Ctl"), session_kind="controller"))
    for kind in ("memory", "attention"):
        path = f"/rooms/{ROOM}/{kind}"
        assert (await client.get(path, headers=session_headers(controller))).status_code == 200
        assert (await client.get(path, headers=owner_headers())).status_code == 200
        r = await client.get(path, headers=owner_headers(OTHER_TOKEN))
        assert (r.status_code, r.json()) == (403, {"error": NOT_ADMIN_TEXT})
        r = await client.get(path, headers={"X-LetAgents-Agent-Session-Id": a["session_id"]})
        assert (r.status_code, r.json()) == (403, {"error": SESSION_REQUIRED_READ_TEXT})


async def test_a_memory_record_keeps_no_recommendation_and_unblocks_nothing(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    """Those two are a request's fields: a memory record given them is saved without."""
    a = await registered(client, registration(name="A"))
    said = await client.post(
        f"/rooms/{ROOM}/messages", json={"text": "x"}, headers=session_headers(a)
    )
    fact = {**FACT, "recommendation": "r", "unblocks": "u", "source_message_id": said.json()["id"]}
    r = await post(client, "memory", session_headers(a), fact)
    agent = {"id": a["agent_key"], "label": a["actor_label"], "kind": "agent"}
    saved = first_version(
        agent,
        id="fact-0001",
        type="memory",
        category="decision",
        title="Storage",
        body="We keep rooms in SQLite.",
        recommendation="",
        unblocks="",
        source_url="",
        source_message_id=said.json()["id"],
    )
    assert (r.status_code, r.json()) == (201, {"record": saved})


async def test_another_owner_writes_nothing(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    await registered(client, registration(name="A"))
    for kind, record in (("memory", FACT), ("attention", ASK)):
        r = await post(client, kind, owner_headers(OTHER_TOKEN), record)
        assert (r.status_code, r.json()) == (403, {"error": NOT_ADMIN_TEXT})
        assert room.store.room_knowledge(ROOM, kind) == []
