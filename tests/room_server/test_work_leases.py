"""Who works a task: the instance that holds its work lease, and a lease once it expired.

Route tests over the real app (both stores, ``autojump_clock``): the work
lease binds an agent instance, not only its key, so another live instance of
the same key is refused every lease-bound move; a lease past its
``expires_at`` is no lease at all (the board hides it, a lease action finds
none), and the assignee's next move takes a fresh one. Texts and codes are
the letagents API's, compared whole.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import trio
import trio.testing

from .helpers import (
    ROOM,
    claimed_task,
    registered,
    registration,
    session_headers,
    worker_id,
)

if TYPE_CHECKING:
    import httpx2

    from letagents_trio.room_server import Room

TASKS = f"/rooms/{ROOM}/tasks"


async def patch(
    client: httpx2.AsyncClient, session: dict[str, Any], task_id: str, **body: Any
) -> httpx2.Response:
    return await client.patch(f"{TASKS}/{task_id}", json=body, headers=session_headers(session))


async def test_another_instance_of_the_same_key_cannot_move_the_task(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    """The key is the assignee, so ownership passes; the lease is the first instance's,
    so the second gets 409 ``coordination_wrong_actor`` for in_progress, blocked and a PR
    link, and the task stays as it was."""
    first = await registered(
        client, registration(name="Ash", instance=worker_id(), actor="owner/shared")
    )
    second = await registered(
        client, registration(name="Oak", instance=worker_id(), actor="owner/shared")
    )
    assert first["agent_key"] == second["agent_key"]
    task, lease = await claimed_task(client, first)

    def wrong_actor(mutation: str) -> dict[str, str]:
        return {
            "error": f"Mutation {mutation} requires lease {lease['id']},"
            " which belongs to a different agent.",
            "code": "coordination_wrong_actor",
        }

    before = room.store.get_task(ROOM, 1)
    r = await patch(client, second, task, status="in_progress")
    assert (r.status_code, r.json()) == (409, wrong_actor("task_update"))
    assert room.store.get_task(ROOM, 1) == before
    r = await patch(client, first, task, status="in_progress")
    assert (r.status_code, r.json()["status"]) == (200, "in_progress")
    working = room.store.get_task(ROOM, 1)
    r = await patch(client, second, task, status="blocked")
    assert (r.status_code, r.json()) == (409, wrong_actor("task_update"))
    r = await patch(client, second, task, pr_url="https://example.test/pull/1")
    assert (r.status_code, r.json()) == (409, wrong_actor("workflow_artifact_attach"))
    assert room.store.get_task(ROOM, 1) == working
    r = await patch(client, first, task, status="blocked")
    assert (r.status_code, r.json()["status"]) == (200, "blocked")
    (still,) = r.json()["active_leases"]
    assert still["id"] == lease["id"]  # the holder's own move keeps its lease


async def test_an_expired_lease_is_gone_and_the_assignee_takes_a_fresh_one(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    """A lease is active until the millisecond of its ``expires_at``; from then on the
    task shows none, a release finds none (409), and the assignee's next move takes a
    new work lease."""
    a = await registered(client, registration(name="A"))
    task, lease = await claimed_task(client, a)
    (row,) = room.store.active_leases(ROOM)
    room.store.put_lease(attrs.evolve(row, expires_at=room.clock.now_ms() + 1))
    r = await client.get(f"{TASKS}/{task}", headers=session_headers(a))
    assert [x["id"] for x in r.json()["active_leases"]] == [lease["id"]]  # 1 ms left
    assert room.active_work_task_ids(a["session_id"]) == [task]
    await trio.sleep(0.001)
    r = await client.get(f"{TASKS}/{task}", headers=session_headers(a))
    assert r.json()["active_leases"] == []
    assert room.active_work_task_ids(a["session_id"]) == []
    r = await client.post(
        f"{TASKS}/{task}/lease-action", json={"action": "release"}, headers=session_headers(a)
    )
    assert (r.status_code, r.json()) == (
        409,
        {
            "error": "No active work lease exists for this task",
            "code": "coordination_missing_lease",
        },
    )
    r = await patch(client, a, task, status="in_progress")
    assert r.status_code == 200, r.text
    (fresh,) = r.json()["active_leases"]
    assert fresh["id"] != lease["id"]
    assert (fresh["status"], fresh["agent_session_id"], fresh["expires_at"]) == (
        "active",
        a["session_id"],
        None,
    )
    assert room.active_work_task_ids(a["session_id"]) == [task]
