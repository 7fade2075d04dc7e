"""Tasks and leases (the minimal model) and lease adoption at registration (§7.3)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import trio

from letagents_trio.room_server._leases import adopted, adopts
from letagents_trio.room_server._store import LeaseRow, SessionRow

from .helpers import (
    ROOM,
    announce_exit,
    drop,
    hold,
    registered,
    registration,
    session_headers,
    worker_id,
)

if TYPE_CHECKING:
    import httpx2
    import trio.testing

    from letagents_trio.room_server import Room


async def new_task(client: httpx2.AsyncClient, session: dict[str, Any], title: str = "t") -> str:
    r = await client.post(
        f"/rooms/{ROOM}/tasks", json={"title": title}, headers=session_headers(session)
    )
    assert r.status_code == 201, r.text
    task_id: str = r.json()["task_id"]
    return task_id


async def take(
    client: httpx2.AsyncClient, session: dict[str, Any], task_id: str, kind: str = "work"
) -> httpx2.Response:
    return await client.post(
        f"/rooms/{ROOM}/tasks/{task_id}/leases",
        json={"kind": kind},
        headers=session_headers(session),
    )


async def test_take_and_release_a_work_lease(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    task = await new_task(client, a)
    r = await take(client, a, task)
    assert r.status_code == 201
    lease = r.json()
    assert (lease["task_id"], lease["kind"], lease["epoch"]) == (task, "work", 1)
    assert (await take(client, a, task)).status_code == 200  # already mine
    r = await take(client, b, task)
    assert (r.status_code, r.json()["code"]) == (409, "task_already_leased")
    assert room.active_work_task_ids(a["session_id"]) == [task]
    r = await client.post(
        f"/rooms/{ROOM}/leases/{lease['lease_id']}/release", json={}, headers=session_headers(b)
    )
    assert r.status_code == 403
    r = await client.post(
        f"/rooms/{ROOM}/leases/{lease['lease_id']}/release", json={}, headers=session_headers(a)
    )
    assert r.status_code == 200
    assert r.json()["released_at"] is not None
    assert room.active_work_task_ids(a["session_id"]) == []
    assert (await take(client, b, task)).status_code == 201
    r = await take(client, b, "task_nope")
    assert (r.status_code, r.json()) == (404, {"error": "Task not found"})


async def test_a_durable_worker_adopts_its_own_leases_on_return(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    instance = worker_id()
    a = await registered(client, registration(name="A", instance=instance))
    task = await new_task(client, a)
    lease = (await take(client, a, task)).json()
    r = await client.post(
        f"/rooms/{ROOM}/agent-sessions/{a['session_id']}/disconnect",
        json={"agent_session_id": a["session_id"], "agent_session_token": a["session_token"]},
    )
    assert r.status_code == 200
    back = await registered(client, registration(name="A", instance=instance, replace=a))
    assert back["adopted_task_leases"] == [
        {"lease_id": lease["lease_id"], "task_id": task, "kind": "work"}
    ]
    stored = room.store.get_lease(lease["lease_id"])
    assert stored is not None
    assert (stored.session_id, stored.epoch) == (back["session_id"], 2)
    again = await registered(client, registration(name="A", instance=instance, replace=back))
    assert "adopted_task_leases" not in again  # held by a live session: nothing to adopt


async def test_an_exited_legacy_holders_work_passes_with_its_name(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
) -> None:
    body = registration(name="Builder", instance="legacy-1", actor="owner/legacy-one")
    old = await registered(client, body)
    task = await new_task(client, old)
    lease = (await take(client, old, task)).json()
    review = (await take(client, old, task, kind="review")).json()
    await drop(await nursery.start(hold, client, old))
    assert await announce_exit(client, old)
    new = await registered(
        client, registration(name="Builder", instance="legacy-2", actor="owner/legacy-two")
    )
    assert new["display_name"] == "Builder"
    # Work leases only: the review lease stays with the ended holder.
    assert new["adopted_task_leases"] == [
        {"lease_id": lease["lease_id"], "task_id": task, "kind": "work"}
    ]
    kept = room.store.get_lease(review["lease_id"])
    assert kept is not None
    assert kept.session_id == old["session_id"]


async def test_admin_ended_and_other_durable_holders_pass_nothing(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
) -> None:
    durable = await registered(client, registration(name="Keeper"))
    task = await new_task(client, durable)
    await take(client, durable, task)
    await drop(await nursery.start(hold, client, durable))
    assert await announce_exit(client, durable)
    other = await registered(client, registration(name="Keeper"))
    assert other["display_name"] == "Keeper"  # the name passes ...
    assert "adopted_task_leases" not in other  # ... a durable holder's work does not
    instance = worker_id()
    admin = await registered(client, registration(name="Admin", instance=instance))
    task2 = await new_task(client, admin)
    await take(client, admin, task2)
    room.end_session(admin["session_id"], reason="room_admin")
    back = await registered(client, registration(name="Admin", instance=instance, replace=admin))
    assert "adopted_task_leases" not in back


# --- the pure adoption rule (§7.3) ------------------------------------------------------------

NEW = SessionRow(
    session_id="new",
    room_id=ROOM,
    token_hash="h",
    agent_key="owner/a",
    agent_instance_id="i1",
    display_name="Alpha",
    owner_account_id="acct",
)
OLD = attrs.evolve(NEW, session_id="old", ended_at=1)
WORK = LeaseRow(
    lease_id="l", room_id=ROOM, task_id="t", kind="work", session_id="old", epoch=1, created_at=0
)


def adopts_if(holder: SessionRow, *, exited: bool, live_keys: frozenset[str] = frozenset()) -> bool:
    return adopts(WORK, holder, NEW, live_keys=set(live_keys), exited=lambda _: exited)


def test_the_same_instance_always_adopts_and_nobody_adopts_from_the_living() -> None:
    assert adopts_if(OLD, exited=False)
    assert not adopts_if(attrs.evolve(OLD, ended_at=None), exited=True)


def test_admin_ends_supervised_holders_and_other_owners_pass_nothing_on() -> None:
    for holder in (
        attrs.evolve(OLD, end_reason="room_admin"),
        attrs.evolve(OLD, supervisor_grant_id="g"),
        attrs.evolve(OLD, owner_account_id="someone-else"),
    ):
        assert not adopts_if(holder, exited=True)


def test_another_instance_adopts_once_the_old_process_exited() -> None:
    same_key = attrs.evolve(OLD, agent_instance_id="i0")
    assert not adopts_if(same_key, exited=False)
    assert adopts_if(same_key, exited=True)
    same_name = attrs.evolve(OLD, agent_key="owner/b", agent_instance_id="i0")
    assert adopts_if(same_name, exited=True)
    assert not adopts_if(same_name, exited=True, live_keys=frozenset({"owner/b"}))
    durable = attrs.evolve(same_name, agent_instance_id="worker_" + "0" * 32)
    assert not adopts_if(durable, exited=True)


def test_an_adopted_work_lease_moves_to_the_next_epoch() -> None:
    moved = adopted(WORK, "new")
    assert (moved.session_id, moved.epoch) == ("new", 2)
    other = attrs.evolve(WORK, kind="review")
    assert adopted(other, "new").epoch == 1
