"""What the board's writes store, at the time they are made (both stores, ``autojump_clock``).

A new task's times, a move that names one field keeping the others, a claim's
lease (its time and the PR link the claim names), the holder's PR link on its
lease, a lease adopted at registration, each move in the room's record, and
who may write at all.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio
import trio.testing

from letagents_trio.room_server._board._tasks import ADMIN_TEXT
from letagents_trio.room_server._wire import iso

from .helpers import (
    OTHER_PERSON_TOKEN,
    ROOM,
    claimed_task,
    disconnect,
    patch_task,
    person_headers,
    registered,
    registration,
    session_headers,
    worker_id,
)

if TYPE_CHECKING:
    import httpx2

    from letagents_trio.room_server import Room

TASKS = f"/rooms/{ROOM}/tasks"
PR = "https://example.test/pull/3"


async def patch(
    client: httpx2.AsyncClient, headers: dict[str, str], task_id: str, **body: Any
) -> httpx2.Response:
    r = await patch_task(client, headers, task_id, **body)
    assert r.status_code == 200, r.text
    return r


async def test_a_new_task_is_stamped_now_and_recorded(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    await trio.sleep(3)
    created = iso(room.clock.now_ms())
    r = await client.post(TASKS, json={"title": "t"}, headers=session_headers(a))
    assert (r.json()["created_at"], r.json()["updated_at"]) == (created, created)
    task = r.json()["id"]
    await patch(client, person_headers(), task, status="accepted")
    r = await client.get(f"/rooms/{ROOM}/events?event_type=task", headers=session_headers(a))
    assert [(e["action"], e["state"], e["object_id"]) for e in r.json()["events"]] == [
        ("created", "proposed", task),
        ("accepted", "accepted", task),
    ]


async def test_a_person_who_is_not_the_rooms_admin_creates_no_task(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    await registered(client, registration(name="A"))
    r = await client.post(TASKS, json={"title": "t"}, headers=person_headers(OTHER_PERSON_TOKEN))
    assert (r.status_code, r.json()) == (403, {"error": ADMIN_TEXT})
    assert room.store.tasks_page(ROOM, after=0, limit=5, statuses=None) == []


async def test_a_move_keeps_the_description_and_pr_link_it_does_not_name(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a = await registered(client, registration(name="A"))
    r = await client.post(
        TASKS, json={"title": "t", "description": "all of it"}, headers=session_headers(a)
    )
    task = r.json()["id"]
    await patch(client, person_headers(), task, status="accepted")
    claim = {"status": "assigned", "assignee": a["actor_label"], "pr_url": PR}
    r = await patch(client, session_headers(a), task, **claim)
    assert (r.json()["description"], r.json()["pr_url"]) == ("all of it", PR)
    r = await patch(client, session_headers(a), task, status="in_progress")
    assert (r.json()["description"], r.json()["pr_url"]) == ("all of it", PR)
    r = await patch(client, session_headers(a), task, title="t2")
    assert (r.json()["description"], r.json()["pr_url"]) == ("all of it", PR)


async def test_a_claims_lease_is_stamped_now_with_the_pr_link_it_names(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    task = (await client.post(TASKS, json={"title": "t"}, headers=session_headers(a))).json()["id"]
    await patch(client, person_headers(), task, status="accepted")
    await trio.sleep(2)
    now = iso(room.clock.now_ms())
    claim = {"status": "assigned", "assignee": a["actor_label"], "pr_url": PR}
    r = await patch(client, session_headers(a), task, **claim)
    (lease,) = r.json()["active_leases"]
    assert (lease["pr_url"], lease["created_at"], lease["updated_at"]) == (PR, now, now)


async def test_the_holders_pr_link_goes_on_its_lease_now(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    task, lease = await claimed_task(client, a)
    await trio.sleep(4)
    now = iso(room.clock.now_ms())
    r = await patch(client, session_headers(a), task, pr_url=PR)
    assert r.json()["active_leases"] == [{**lease, "pr_url": PR, "updated_at": now}]


async def test_an_adopted_lease_is_stamped_at_the_registration(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    instance = worker_id()
    a = await registered(client, registration(name="A", instance=instance))
    task, lease = await claimed_task(client, a)
    await disconnect(client, a)
    await trio.sleep(7)
    now = room.clock.now_ms()
    back = await registered(client, registration(name="A", instance=instance, replace=a))
    r = await client.get(f"{TASKS}/{task}", headers=session_headers(back))
    (shown,) = r.json()["active_leases"]
    assert (shown["id"], shown["agent_session_id"], shown["updated_at"]) == (
        lease["id"],
        back["session_id"],
        iso(now),
    )
