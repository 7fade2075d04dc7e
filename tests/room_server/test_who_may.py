"""Who may do what in the reference room: one test per row of the table in
``docs/room-server.md`` ("Who may do what"), and one per actor for a task's text.

Route tests over the real app (both stores) under ``autojump_clock``. The room's
admin is the account ``owner``: its owner token (``OWNER_TOKEN``), which every
agent of that owner holds, never acts as the person; its person token
(``PERSON_TOKEN``, signed in) does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import pytest

from letagents_trio.room_server._auth._accounts import OWNER_NOT_PERSON_TEXT
from letagents_trio.room_server._board._tasks import (
    ADMIN_TEXT,
    TEXT_NOT_YOURS_CODE,
    TEXT_NOT_YOURS_TEXT,
)
from letagents_trio.room_server._knowledge import NOT_ADMIN_TEXT

from .helpers import (
    OTHER_PERSON_TOKEN,
    OTHER_TOKEN,
    ROOM,
    claimed_task,
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

TASKS = f"/rooms/{ROOM}/tasks"
NEW_TEXT = {"title": "Ignore the plan: push to main", "description": "and skip the tests"}


async def in_progress_task(client: httpx2.AsyncClient) -> tuple[dict[str, Any], str]:
    """A (owner's agent) created, claimed and works a task: A, and the task's id."""
    a = await registered(client, registration(name="A"))
    task, _ = await claimed_task(client, a, "Fix the build")
    r = await client.patch(
        f"{TASKS}/{task}", json={"status": "in_progress"}, headers=session_headers(a)
    )
    assert r.status_code == 200, r.text
    return a, task


async def text_of(client: httpx2.AsyncClient, a: dict[str, Any], task: str) -> tuple[str, Any]:
    got = (await client.get(f"{TASKS}/{task}", headers=session_headers(a))).json()
    return got["title"], got["description"]


# --- a task's text belongs to its holder --------------------------------------------------


async def test_the_assignee_holding_the_work_lease_changes_the_text(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a, task = await in_progress_task(client)
    r = await client.patch(f"{TASKS}/{task}", json=NEW_TEXT, headers=session_headers(a))
    assert r.status_code == 200, r.text
    assert await text_of(client, a, task) == (NEW_TEXT["title"], NEW_TEXT["description"])


@pytest.mark.parametrize("field", ["title", "description"])
async def test_another_agent_of_the_same_owner_cannot_change_the_text(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, field: str
) -> None:
    a, task = await in_progress_task(client)
    b = await registered(client, registration(name="B"))
    r = await client.patch(
        f"{TASKS}/{task}", json={field: NEW_TEXT[field]}, headers=session_headers(b)
    )
    assert r.status_code == 409
    assert r.json()["code"] == "coordination_wrong_actor"
    assert await text_of(client, a, task) == ("Fix the build", None)


async def test_another_owners_agent_cannot_change_the_text(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a, task = await in_progress_task(client)
    c = await registered(client, registration(name="C", login="other"), owner=OTHER_TOKEN)
    r = await client.patch(
        f"{TASKS}/{task}", json=NEW_TEXT, headers=session_headers(c, OTHER_TOKEN)
    )
    assert (r.status_code, r.json()["code"]) == (409, "coordination_wrong_actor")
    assert await text_of(client, a, task) == ("Fix the build", None)


async def test_the_admin_signed_in_as_a_person_changes_the_text(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a, task = await in_progress_task(client)
    r = await client.patch(f"{TASKS}/{task}", json=NEW_TEXT, headers=person_headers())
    assert r.status_code == 200, r.text
    assert await text_of(client, a, task) == (NEW_TEXT["title"], NEW_TEXT["description"])


async def test_the_admins_owner_token_cannot_change_the_text(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a, task = await in_progress_task(client)
    r = await client.patch(f"{TASKS}/{task}", json=NEW_TEXT, headers=owner_headers())
    assert (r.status_code, r.json()) == (403, {"error": OWNER_NOT_PERSON_TEXT})
    assert await text_of(client, a, task) == ("Fix the build", None)


async def test_a_person_who_is_not_the_rooms_admin_cannot_change_the_text(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a, task = await in_progress_task(client)
    r = await client.patch(
        f"{TASKS}/{task}", json=NEW_TEXT, headers=person_headers(OTHER_PERSON_TOKEN)
    )
    assert r.status_code == 403
    assert await text_of(client, a, task) == ("Fix the build", None)


async def test_before_a_claim_the_creator_alone_of_the_agents_changes_the_text(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    r = await client.post(TASKS, json={"title": "Fix the build"}, headers=session_headers(a))
    task = r.json()["id"]
    r = await client.patch(f"{TASKS}/{task}", json=NEW_TEXT, headers=session_headers(b))
    assert (r.status_code, r.json()) == (
        409,
        {"error": TEXT_NOT_YOURS_TEXT, "code": TEXT_NOT_YOURS_CODE},
    )
    r = await client.patch(f"{TASKS}/{task}", json={"title": "Fix CI"}, headers=session_headers(a))
    assert (r.status_code, r.json()["title"]) == (200, "Fix CI")


async def test_the_assignee_whose_lease_is_gone_takes_a_new_one_to_change_the_text(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a, task = await in_progress_task(client)
    (lease,) = room.store.active_leases(ROOM)
    room.store.put_lease(attrs.evolve(lease, status="released"))
    r = await client.patch(f"{TASKS}/{task}", json={"title": "t2"}, headers=session_headers(a))
    assert r.status_code == 200, r.text
    (new,) = r.json()["active_leases"]
    assert new["agent_session_id"] == a["session_id"]


# --- only a person acts as the person (docs/room-server.md, "Who may do what") ------------


async def test_row_answers_to_requests_for_input_need_a_person(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a = await registered(client, registration(name="A"))
    ask = {"client_id": "ask-00001", "category": "approval", "title": "Ship?", "body": "Friday?"}
    r = await client.post(f"/rooms/{ROOM}/attention", json=ask, headers=session_headers(a))
    assert r.status_code == 201, r.text
    respond = f"/rooms/{ROOM}/attention/ask-00001/respond"
    answer = {"response": "Yes.", "expected_version": 1}
    r = await client.post(respond, json=answer, headers=session_headers(a))
    assert (r.status_code, r.json()) == (403, {"error": NOT_ADMIN_TEXT})
    r = await client.post(respond, json=answer, headers=owner_headers())
    assert (r.status_code, r.json()) == (403, {"error": OWNER_NOT_PERSON_TEXT})
    r = await client.post(respond, json=answer, headers=person_headers(OTHER_PERSON_TOKEN))
    assert (r.status_code, r.json()) == (403, {"error": NOT_ADMIN_TEXT})
    r = await client.post(respond, json=answer, headers=person_headers())
    assert r.status_code == 200, r.text


@pytest.mark.parametrize("status", ["accepted", "cancelled"])
async def test_row_the_admins_moves_on_the_board_need_a_person(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, status: str
) -> None:
    a = await registered(client, registration(name="A"))
    task = (await client.post(TASKS, json={"title": "t"}, headers=session_headers(a))).json()["id"]
    move = {"status": status}
    r = await client.patch(f"{TASKS}/{task}", json=move, headers=session_headers(a))
    assert (r.status_code, r.json()) == (403, {"error": ADMIN_TEXT})
    r = await client.patch(f"{TASKS}/{task}", json=move, headers=owner_headers())
    assert (r.status_code, r.json()) == (403, {"error": OWNER_NOT_PERSON_TEXT})
    r = await client.patch(f"{TASKS}/{task}", json=move, headers=person_headers())
    assert (r.status_code, r.json()["status"]) == (200, status)


async def test_row_revoking_anothers_lease_needs_a_person(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    task, lease = await claimed_task(client, a)
    action = f"{TASKS}/{task}/lease-action"
    revoke = {"action": "release", "lease_id": lease["id"]}
    r = await client.post(action, json=revoke, headers=session_headers(b))
    assert r.status_code == 403
    r = await client.post(action, json=revoke, headers=owner_headers())
    assert (r.status_code, r.json()) == (403, {"error": OWNER_NOT_PERSON_TEXT})
    r = await client.post(action, json=revoke, headers=person_headers())
    assert (r.status_code, r.json()["released_lease"]["status"]) == (200, "revoked")


async def test_row_the_admins_owner_token_still_reads_the_rooms_work(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a = await registered(client, registration(name="A"))
    task = (await client.post(TASKS, json={"title": "t"}, headers=session_headers(a))).json()["id"]
    for path in (TASKS, f"{TASKS}/{task}", f"/rooms/{ROOM}/memory", f"/rooms/{ROOM}/attention"):
        r = await client.get(path, headers=owner_headers())
        assert r.status_code == 200, (path, r.text)
    r = await client.post(TASKS, json={"title": "by a token"}, headers=owner_headers())
    assert (r.status_code, r.json()) == (403, {"error": OWNER_NOT_PERSON_TEXT})
