"""Messages at their edges (both stores, ``autojump_clock``).

A client's own message id (``client_message_id``) at 1 and 200 characters,
one more, empty or no string; the same id from another agent, and a retry
answered with what is attached to the message since; a message shown whole,
a person's answer in the thread of the message it answers; the page size's
and poll timeout's refusals, whole; two polls of a room on one wake-up; a
controller session reading, polling and posting; an owner token alone refused
as a read.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing

from letagents_trio._protocol import SESSION_REQUIRED_READ_TEXT
from letagents_trio.room_server._messaging._messages import (
    BAD_LIMIT_TEXT,
    BAD_TIMEOUT_TEXT,
    CLIENT_MESSAGE_ID_TEXT,
)
from letagents_trio.room_server._wire import iso

from .helpers import (
    ROOM,
    owner_headers,
    person_headers,
    registered,
    registration,
    say,
    session_headers,
)

if TYPE_CHECKING:
    import httpx2

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
    for edge in ("c", "c" * 200):
        r = await send(client, a, client_message_id=edge)
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


async def test_a_retry_answers_what_is_attached_to_the_message_since(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a = await registered(client, registration(name="A"))
    first = await send(client, a, text="did it", client_message_id="m-1")
    data = "QUJD"
    files = [{"path": "a.py", "status": "added"}]
    summary = {"version": 3, "contribution": {"files": files}}
    page = {"digest": hashlib.sha256(data.encode()).hexdigest(), "index": 0, "total": 1}
    body = {"source_message_id": first.json()["id"], "summary": summary, "review_page": page}
    r = await client.post(
        f"/rooms/{ROOM}/agent-work",
        json={**body, "review_page": {**page, "data": data}},
        headers=session_headers(a),
    )
    assert r.status_code == 200, r.text
    again = await send(client, a, text="did it", client_message_id="m-1")
    assert again.json()["agent_work"]["files"] == files


async def test_a_message_is_shown_whole(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    await trio.sleep(2)
    now = iso(room.clock.now_ms())
    r = await send(client, a)
    assert (r.status_code, r.json()) == (
        201,
        {
            "id": "msg_1",
            "room_id": ROOM,
            "sender": a["actor_label"],
            "text": "hi",
            "created_at": now,
            "timestamp": now,
            "agent_session_id": a["session_id"],
            "source": None,
            "prompt_kind": None,
            "reply_to": None,
            "thread_root_id": "msg_1",
            "thread_reply_to_id": None,
            "thread": None,
        },
    )


async def test_a_persons_answer_joins_the_thread_of_the_message_it_answers(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    asked = (await send(client, a, text="May I ship?")).json()["id"]
    ask = {
        "client_id": "ask-00001",
        "category": "approval",
        "title": "Ship?",
        "body": "Friday?",
        "source_message_id": asked,
    }
    r = await client.post(f"/rooms/{ROOM}/attention", json=ask, headers=session_headers(a))
    assert r.status_code == 201, r.text
    await trio.sleep(3)
    now = iso(room.clock.now_ms())
    r = await client.post(
        f"/rooms/{ROOM}/attention/ask-00001/respond",
        json={"response": "Yes.", "expected_version": 1},
        headers=person_headers(),
    )
    assert r.status_code == 200, r.text
    r = await client.get(MESSAGES, headers=session_headers(a))
    answer = r.json()["messages"][-1]
    assert (answer["source"], answer["created_at"]) == ("browser", now)
    assert (answer["thread_root_id"], answer["thread_reply_to_id"]) == (asked, asked)


@pytest.mark.parametrize("limit", ["x", "-1", "\u00b9"])
async def test_a_bad_page_size_is_refused_whole(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, limit: str
) -> None:
    a = await registered(client, registration(name="A"))
    r = await client.get(f"{MESSAGES}?limit={limit}", headers=session_headers(a))
    assert (r.status_code, r.json()) == (400, {"error": BAD_LIMIT_TEXT})


async def test_a_limit_is_read_by_its_first_six_digits(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a = await registered(client, registration(name="A"))
    for i in range(3):
        await say(client, a, f"m{i}")
    r = await client.get(f"{MESSAGES}?limit=0000020", headers=session_headers(a))
    assert [m["text"] for m in r.json()["messages"]] == ["m0", "m1"]  # 000002


@pytest.mark.parametrize("wait_ms", ["abc", "nan", "\uff11"])
async def test_a_bad_poll_timeout_is_refused_whole(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, wait_ms: str
) -> None:
    a = await registered(client, registration(name="A"))
    r = await client.get(
        f"{MESSAGES}/poll", params={"timeout": wait_ms}, headers=session_headers(a)
    )
    assert (r.status_code, r.json()) == (400, {"error": BAD_TIMEOUT_TEXT})


@pytest.mark.parametrize("wait_ms", ["0", "-5000"])
async def test_a_poll_of_no_time_answers_at_once(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, wait_ms: str
) -> None:
    a = await registered(client, registration(name="A"))
    r = await client.get(f"{MESSAGES}/poll?timeout={wait_ms}", headers=session_headers(a))
    assert (r.status_code, r.json()["messages"], r.json()["room_id"]) == (200, [], ROOM)
    assert trio.current_time() == 0


async def test_a_poll_that_ends_leaves_the_rooms_other_poll_waiting_for_the_next_message(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
) -> None:
    """The first poll's timeout leaves the second to be woken by the room's next message;
    both woken by one message answer it; once none waits the room keeps no wake-up."""
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    answered: list[tuple[str, float, list[str]]] = []

    async def poll(session: dict[str, Any], name: str, wait_ms: int, after: str = "") -> None:
        query = f"timeout={wait_ms}&after={after}"
        r = await client.get(f"{MESSAGES}/poll?{query}", headers=session_headers(session))
        assert r.status_code == 200, r.text
        answered.append((name, trio.current_time(), [m["text"] for m in r.json()["messages"]]))

    nursery.start_soon(poll, a, "short", 2_000)
    nursery.start_soon(poll, b, "long", 60_000)
    await trio.sleep(5)
    await say(client, a, "now")
    await trio.testing.wait_all_tasks_blocked()
    assert answered == [("short", 2, []), ("long", 5, ["now"])]
    answered.clear()
    nursery.start_soon(poll, a, "a", 60_000, "msg_1")
    nursery.start_soon(poll, b, "b", 60_000, "msg_1")
    await trio.sleep(1)
    await say(client, a, "again")
    await trio.testing.wait_all_tasks_blocked()
    assert sorted(answered) == [("a", 6, ["again"]), ("b", 6, ["again"])]
    assert room.work.messages._changed == {}


async def test_a_controller_session_reads_polls_and_posts(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    controller = await registered(client, dict(registration(name="Ctl"), session_kind="controller"))
    r = await send(client, controller, text="from the controller")
    assert r.status_code == 201, r.text
    for path in (MESSAGES, f"{MESSAGES}?before=latest", f"{MESSAGES}/poll?timeout=0"):
        r = await client.get(path, headers=session_headers(controller))
        assert (r.status_code, r.json()["room_id"]) == (200, ROOM), path
        assert [m["text"] for m in r.json()["messages"]] == ["from the controller"], path


async def test_an_owner_token_alone_is_refused_as_a_read(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    await registered(client, registration(name="A"))
    for path in (MESSAGES, f"{MESSAGES}/poll?timeout=0"):
        r = await client.get(path, headers=owner_headers())
        assert (r.status_code, r.json()) == (403, {"error": SESSION_REQUIRED_READ_TEXT}), path
