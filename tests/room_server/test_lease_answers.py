"""A work-lease action's whole answer and what it writes (both stores, ``autojump_clock``).

A release or handoff answers ``{room_id, action, task, released_lease,
new_lease}``: the task as it is after the action, with the room's active
leases at that time; the lease given back (``released`` by its holder,
``revoked`` by an admin, with the reason given or the room's own); and the
target's fresh lease, which carries the task's PR link. A release that moves
the task back to ``accepted`` is in the room's record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import trio
import trio.testing

from letagents_trio.room_server._wire import iso

from .helpers import (
    ROOM,
    claimed_task,
    hold,
    person_headers,
    registered,
    registration,
    session_headers,
)

if TYPE_CHECKING:
    import httpx2

    from letagents_trio.room_server import Room

TASKS = f"/rooms/{ROOM}/tasks"
PR = "https://example.test/pull/9"


async def act(
    client: httpx2.AsyncClient, headers: dict[str, str], task_id: str, **body: Any
) -> httpx2.Response:
    return await client.post(f"{TASKS}/{task_id}/lease-action", json=body, headers=headers)


async def working(
    client: httpx2.AsyncClient, session: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    """A task the session claimed and moved to ``in_progress``, and its work lease."""
    task, lease = await claimed_task(client, session)
    r = await client.patch(
        f"{TASKS}/{task}", json={"status": "in_progress"}, headers=session_headers(session)
    )
    assert r.status_code == 200, r.text
    return task, lease


async def expiring_lease_elsewhere(client: httpx2.AsyncClient, room: Room) -> None:
    """Another agent's task whose work lease expires in an hour: still active now."""
    other = await registered(client, registration(name="Other"))
    await claimed_task(client, other, title="elsewhere")
    (row,) = [x for x in room.store.active_leases(ROOM) if x.actor_label == other["actor_label"]]
    room.store.put_lease(attrs.evolve(row, expires_at=room.clock.now_ms() + 3_600_000))


async def test_the_holders_release_answers_the_task_back_on_the_board(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    task, lease = await working(client, a)
    await expiring_lease_elsewhere(client, room)
    await trio.sleep(5)
    now = iso(room.clock.now_ms())
    r = await act(client, session_headers(a), task, action="release")
    assert r.status_code == 200, r.text
    answer = r.json()
    assert (answer["room_id"], answer["action"], answer["new_lease"]) == (ROOM, "release", None)
    assert answer["released_lease"] == {**lease, "status": "released", "updated_at": now}
    shown = answer["task"]
    assert (shown["status"], shown["assignee"], shown["assignee_agent_key"]) == (
        "accepted",
        None,
        None,
    )
    assert (shown["updated_at"], shown["active_leases"]) == (now, [])
    r = await client.get(f"/rooms/{ROOM}/events?event_type=task", headers=session_headers(a))
    last = r.json()["events"][-1]
    assert (last["action"], last["state"], last["object_id"], last["actor"]) == (
        "accepted",
        "accepted",
        task,
        a["actor_label"],
    )


async def test_an_admins_release_revokes_with_the_rooms_reason(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a = await registered(client, registration(name="A"))
    task, lease = await working(client, a)
    r = await act(client, person_headers(), task, action="release")
    assert r.status_code == 200, r.text
    released = r.json()["released_lease"]
    assert (released["status"], released["revoked_reason"]) == (
        "revoked",
        f"Lease {lease['id']} released for {task}.",
    )


async def test_a_handoff_answers_the_targets_lease_with_the_tasks_pr_link(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
) -> None:
    """The admin linked the PR (the lease has none): the target's lease carries the task's."""
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    task, lease = await working(client, a)
    r = await client.patch(f"{TASKS}/{task}", json={"pr_url": PR}, headers=person_headers())
    assert (r.status_code, r.json()["active_leases"][0]["pr_url"]) == (200, None)
    await expiring_lease_elsewhere(client, room)
    await nursery.start(hold, client, b)
    await trio.sleep(5)
    now = iso(room.clock.now_ms())
    handoff = {"action": "handoff", "target_actor_key": b["agent_key"]}
    r = await act(client, person_headers(), task, **handoff)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert (answer["room_id"], answer["action"]) == (ROOM, "handoff")
    assert answer["released_lease"] == {
        **lease,
        "status": "revoked",
        "revoked_reason": f"Lease {lease['id']} handed off for {task}.",
        "updated_at": now,
    }
    new = answer["new_lease"]
    assert new == {
        **new,
        "task_id": task,
        "kind": "work",
        "status": "active",
        "agent_key": b["agent_key"],
        "agent_instance_id": b["agent_instance_id"],
        "agent_session_id": b["session_id"],
        "actor_label": b["actor_label"],
        "epoch": 1,
        "pr_url": PR,
        "expires_at": None,
        "revoked_reason": None,
        "created_by": "owner",
        "created_at": now,
        "updated_at": now,
    }
    shown = answer["task"]
    assert (shown["status"], shown["assignee"], shown["assignee_agent_key"]) == (
        "assigned",
        b["actor_label"],
        b["agent_key"],
    )
    assert (shown["updated_at"], shown["pr_url"], shown["active_leases"]) == (now, PR, [new])
