"""Work leases: the claim that takes one, lease actions, and adoption at registration (§7.3).

Route tests over the real app (both stores, ``autojump_clock``); the pure
rules of :mod:`letagents_trio.room_server._board._leases` at the end.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import attrs
import pytest
import trio

from letagents_trio.room_server import RoomStore, SQLiteStore
from letagents_trio.room_server._auth._accounts import Actor
from letagents_trio.room_server._board._leases import (
    adopted,
    adopts,
    choose_target,
    ended_lease,
    lease_json,
    new_work_lease,
    parse_lease_action,
    work_lease,
    work_task_ids,
)
from letagents_trio.room_server._storage._rows import LeaseRow, SessionRow, TaskRow
from letagents_trio.room_server._wire import Refusal

from .helpers import (
    EPOCH,
    ROOM,
    announce_exit,
    claimed_task,
    drop,
    hold,
    person_headers,
    registered,
    registration,
    session_headers,
    worker_id,
)

if TYPE_CHECKING:
    import httpx2
    import trio.testing

    from letagents_trio.room_server import Room


def action_path(task_id: str) -> str:
    return f"/rooms/{ROOM}/tasks/{task_id}/lease-action"


async def act(
    client: httpx2.AsyncClient, headers: dict[str, str], task_id: str, **body: Any
) -> httpx2.Response:
    return await client.post(action_path(task_id), json=body, headers=headers)


async def test_a_claim_takes_the_work_lease_and_its_holder_releases_it(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    task, lease = await claimed_task(client, a)
    assert (lease["task_id"], lease["kind"], lease["status"], lease["epoch"]) == (
        task,
        "work",
        "active",
        1,
    )
    assert (lease["agent_session_id"], lease["agent_key"]) == (a["session_id"], a["agent_key"])
    assert lease["id"].startswith("tl_")
    assert room.active_work_task_ids(a["session_id"]) == [task]
    # Another agent's lease is not its to give back.
    r = await act(client, session_headers(b), task, action="release")
    assert r.status_code == 403
    assert "holder" in r.json()["error"]
    # A stale lease reference is refused, naming the lease.
    r = await act(client, session_headers(a), task, action="release", lease_id="tl_old")
    assert (r.status_code, r.json()) == (
        409,
        {
            "error": "Lease tl_old is no longer the active work lease for this task",
            "code": "coordination_stale_lease_reference",
        },
    )
    r = await act(client, session_headers(a), task, action="release", lease_id=lease["id"])
    assert r.status_code == 200, r.text
    answer = r.json()
    assert (answer["action"], answer["new_lease"]) == ("release", None)
    assert (answer["released_lease"]["id"], answer["released_lease"]["status"]) == (
        lease["id"],
        "released",
    )
    assert answer["task"]["status"] == "accepted"  # back on the board, unassigned
    assert answer["task"]["assignee"] is None
    assert answer["task"]["active_leases"] == []
    assert room.active_work_task_ids(a["session_id"]) == []
    # Nothing left to release.
    r = await act(client, session_headers(a), task, action="release")
    assert (r.status_code, r.json()) == (
        409,
        {
            "error": "No active work lease exists for this task",
            "code": "coordination_missing_lease",
        },
    )


async def test_the_rooms_admin_revokes_and_hands_off(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
) -> None:
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    task, lease = await claimed_task(client, a)
    # B is not reachable (no stream, no poll): no handoff to it.
    handoff = {"action": "handoff", "target_actor_key": b["agent_key"]}
    r = await act(client, person_headers(), task, **handoff)
    assert (r.status_code, r.json()["code"]) == (409, "coordination_target_session_unreachable")
    await nursery.start(hold, client, b)
    r = await act(client, person_headers(), task, **handoff, reason="A is on leave")
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["released_lease"]["status"] == "revoked"  # not the holder: revoked
    assert answer["released_lease"]["revoked_reason"] == "A is on leave"
    new = answer["new_lease"]
    assert (new["agent_session_id"], new["epoch"], new["created_by"]) == (
        b["session_id"],
        1,
        "owner",
    )
    assert (answer["task"]["status"], answer["task"]["assignee_agent_key"]) == (
        "assigned",
        b["agent_key"],
    )
    assert room.active_work_task_ids(b["session_id"]) == [task]
    assert lease["id"] != new["id"]


@pytest.mark.parametrize(
    ("body", "status", "text"),
    [
        ({"action": "steal"}, 400, "action must be 'release' or 'handoff'"),
        ({"action": "handoff"}, 400, "target_actor_key is required for handoff"),
    ],
)
async def test_bad_lease_actions_are_400(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    body: dict[str, Any],
    status: int,
    text: str,
) -> None:
    a = await registered(client, registration(name="A"))
    task, _ = await claimed_task(client, a)
    r = await act(client, session_headers(a), task, **body)
    assert (r.status_code, r.json()) == (status, {"error": text})
    r = await act(client, session_headers(a), "task_99", action="release")
    assert (r.status_code, r.json()) == (404, {"error": "Task not found"})


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
async def test_a_claim_whose_lease_the_storage_refuses_changes_nothing(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, store: RoomStore
) -> None:
    """The claim's two writes (the task, its work lease) are one transaction: the
    lease refused, the task stays accepted and unassigned, and the answer says so."""
    a = await registered(client, registration(name="A"))
    tasks = f"/rooms/{ROOM}/tasks"
    r = await client.post(tasks, json={"title": "t"}, headers=session_headers(a))
    task = r.json()["id"]
    r = await client.patch(f"{tasks}/{task}", json={"status": "accepted"}, headers=person_headers())
    assert r.status_code == 200, r.text
    assert isinstance(store, SQLiteStore)
    store._db.execute(  # the task's UPDATE goes through; the lease's INSERT is refused
        "CREATE TRIGGER refuse_leases BEFORE INSERT ON task_leases"
        " BEGIN SELECT RAISE(ABORT, 'disk I/O error'); END"
    )
    claim = {"status": "assigned", "assignee": a["actor_label"]}
    r = await client.patch(f"{tasks}/{task}", json=claim, headers=session_headers(a))
    assert (r.status_code, r.json()["code"]) == (503, "storage_unavailable")
    r = await client.get(f"{tasks}/{task}", headers=session_headers(a))
    assert (r.json()["status"], r.json()["assignee"], r.json()["active_leases"]) == (
        "accepted",
        None,
        [],
    )
    store._db.execute("DROP TRIGGER refuse_leases")
    r = await client.patch(f"{tasks}/{task}", json=claim, headers=session_headers(a))
    assert (r.status_code, r.json()["status"]) == (200, "assigned")


async def test_a_durable_worker_adopts_its_own_leases_on_return(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    instance = worker_id()
    a = await registered(client, registration(name="A", instance=instance))
    task, lease = await claimed_task(client, a)
    r = await client.post(
        f"/rooms/{ROOM}/agent-sessions/{a['session_id']}/disconnect",
        json={"agent_session_id": a["session_id"], "agent_session_token": a["session_token"]},
    )
    assert r.status_code == 200
    back = await registered(client, registration(name="A", instance=instance, replace=a))
    assert back["adopted_task_leases"] == [
        {"lease_id": lease["id"], "task_id": task, "kind": "work"}
    ]
    stored = room.store.get_lease(lease["id"])
    assert stored is not None
    assert (stored.agent_session_id, stored.epoch) == (back["session_id"], 2)
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
    task, lease = await claimed_task(client, old)
    review = attrs.evolve(
        room.store.get_lease(lease["id"]) or pytest.fail("no lease"),
        lease_id="tl_review",
        kind="review",
    )
    room.store.put_lease(review)
    await drop(await nursery.start(hold, client, old))
    assert await announce_exit(client, old)
    new = await registered(
        client, registration(name="Builder", instance="legacy-2", actor="owner/legacy-two")
    )
    assert new["display_name"] == "Builder"
    # Work leases only: the review lease stays with the ended holder.
    assert new["adopted_task_leases"] == [
        {"lease_id": lease["id"], "task_id": task, "kind": "work"}
    ]
    kept = room.store.get_lease("tl_review")
    assert kept is not None
    assert kept.agent_session_id == old["session_id"]
    moved = room.store.get_lease(lease["id"])
    assert moved is not None
    assert (moved.agent_key, moved.agent_instance_id) == ("owner/legacy-two", "legacy-2")


async def test_admin_ended_and_other_durable_holders_pass_nothing(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
) -> None:
    durable = await registered(client, registration(name="Keeper"))
    await claimed_task(client, durable)
    await drop(await nursery.start(hold, client, durable))
    assert await announce_exit(client, durable)
    other = await registered(client, registration(name="Keeper"))
    assert other["display_name"] == "Keeper"  # the name passes ...
    assert "adopted_task_leases" not in other  # ... a durable holder's work does not
    instance = worker_id()
    admin = await registered(client, registration(name="Admin", instance=instance))
    await claimed_task(client, admin, "t2")
    room.end_session(admin["session_id"], reason="room_admin")
    back = await registered(client, registration(name="Admin", instance=instance, replace=admin))
    assert "adopted_task_leases" not in back


# --- the pure rules ---------------------------------------------------------------------------

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
    lease_id="l",
    room_id=ROOM,
    task_id="task_1",
    kind="work",
    agent_session_id="old",
    agent_key="owner/a",
    created_at=0,
    updated_at=0,
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
    moved = adopted(WORK, NEW, now=5)
    assert (moved.agent_session_id, moved.epoch, moved.updated_at) == ("new", 2, 5)
    other = attrs.evolve(WORK, kind="review")
    assert adopted(other, NEW, now=5).epoch == 1


TASK = TaskRow(room_id=ROOM, number=1, title="t", status="in_progress", created_at=0, updated_at=0)
B1 = attrs.evolve(NEW, session_id="b1", agent_key="owner/b", agent_instance_id="i1")
B2 = attrs.evolve(B1, session_id="b2", agent_instance_id="i2")


def target(sessions: list[SessionRow], task: TaskRow = TASK, **body: str) -> str:
    action = parse_lease_action({"action": "handoff", "target_actor_key": "owner/b", **body})
    try:
        return choose_target(action, task, sessions, lambda sid: sid != "b2").session_id
    except Refusal as refusal:
        return str(refusal.reply.body["error"])


def test_a_handoff_target_is_one_live_reachable_worker_of_the_key() -> None:
    assert target([B1]) == "b1"
    assert target([]) == "No active worker session exists for target actor_key owner/b"
    assert target([B1, B2]) == (
        "Multiple active worker sessions exist for target actor_key owner/b;"
        " target_agent_session_id is required"
    )
    assert target([B1, B2], target_agent_session_id="b1") == "b1"
    assert target([B1, B2], target_actor_instance_id="i1") == "b1"
    assert target([B1, B2], target_actor_instance_id="i2") == (
        "Target worker session b2 is not reachable in this room"
    )
    assert target([attrs.evolve(B1, ended_at=1)]).startswith("No active worker session")
    assert target([B1], attrs.evolve(TASK, status="accepted")) == (
        "Cannot hand off a task in accepted status"
    )


# --- the lease rules at their edges -----------------------------------------------------------


def refusal(sessions: list[SessionRow], task: TaskRow = TASK, **body: str) -> tuple[int, Any]:
    action = parse_lease_action({"action": "handoff", "target_actor_key": "owner/b", **body})
    with pytest.raises(Refusal) as caught:
        choose_target(action, task, sessions, lambda sid: sid != "b2")
    return caught.value.reply.status, caught.value.reply.body


def test_each_handoff_refusal_is_a_409_with_the_apis_text_and_code() -> None:
    required, unreachable = (
        "coordination_target_session_required",
        ("coordination_target_session_unreachable"),
    )
    twin = attrs.evolve(B1, session_id="b3")  # the same instance as b1
    missing = "No active worker session exists for target actor_key owner/b"
    assert refusal([]) == (409, {"error": missing, "code": required})
    assert refusal([B1], target_agent_session_id="b9") == (
        409,
        {"error": f"{missing} and target_agent_session_id b9", "code": required},
    )
    assert refusal([B1], target_actor_instance_id="i9") == (
        409,
        {"error": f"{missing} and target_actor_instance_id i9", "code": required},
    )
    assert refusal([B1, twin], target_actor_instance_id="i1") == (
        409,
        {
            "error": "Multiple active worker sessions exist for target actor_key owner/b and"
            " target_actor_instance_id i1; target_agent_session_id is required",
            "code": required,
        },
    )
    assert refusal([B1, B2]) == (
        409,
        {
            "error": "Multiple active worker sessions exist for target actor_key owner/b;"
            " target_agent_session_id is required",
            "code": required,
        },
    )
    assert refusal([B2]) == (
        409,
        {"error": "Target worker session b2 is not reachable in this room", "code": unreachable},
    )
    assert refusal([B1], attrs.evolve(TASK, status="accepted")) == (
        409,
        {
            "error": "Cannot hand off a task in accepted status",
            "code": "coordination_invalid_task_status",
        },
    )


def test_a_tasks_work_lease_is_its_active_lease_of_kind_work() -> None:
    expiring = attrs.evolve(WORK, expires_at=10)
    review = attrs.evolve(WORK, lease_id="r", kind="review")
    other_task = attrs.evolve(WORK, lease_id="o", task_id="task_2")
    leases = [expiring, review, other_task]
    assert work_lease(leases, "task_1", 9) == expiring
    assert work_lease(leases, "task_1", 10) is None  # expired: the review lease is no work
    assert work_task_ids(leases, "old", 9) == ["task_1", "task_2"]
    assert work_task_ids(leases, "old", 10) == ["task_2"]


def test_a_lease_ends_released_by_its_holder_or_revoked_by_an_admin() -> None:
    released = ended_lease(WORK, holder=True, reason="done", now=9)
    assert (released.status, released.revoked_reason, released.updated_at) == ("released", None, 9)
    revoked = ended_lease(WORK, holder=False, reason="stuck", now=9)
    assert (revoked.status, revoked.revoked_reason, revoked.updated_at) == ("revoked", "stuck", 9)


def test_an_adopted_lease_binds_the_new_sessions_identity() -> None:
    row = attrs.evolve(NEW, actor_label="Alpha | owner's agent | Claude Code")
    moved = adopted(WORK, row, now=5)
    assert (moved.agent_key, moved.agent_instance_id, moved.actor_label) == (
        "owner/a",
        "i1",
        "Alpha | owner's agent | Claude Code",
    )


def test_a_claims_work_lease_and_how_it_is_shown() -> None:
    claimer = attrs.evolve(B1, actor_label="Bee | owner's agent | Codex")
    actor = Actor(label="Bee | owner's agent | Codex", account_id="acct", session=claimer)
    lease = new_work_lease(TASK, actor, now=7, pr_url="https://example.test/pr/1")
    assert re.fullmatch(r"tl_[0-9a-f]{32}", lease.lease_id)
    assert lease == LeaseRow(
        lease_id=lease.lease_id,
        room_id=ROOM,
        task_id=TASK.task_id,
        kind="work",
        agent_session_id="b1",
        agent_key="owner/b",
        agent_instance_id="i1",
        actor_label="Bee | owner's agent | Codex",
        created_by="Bee | owner's agent | Codex",
        output_intent="t",
        pr_url="https://example.test/pr/1",
        created_at=7,
        updated_at=7,
    )
    shown = lease_json(attrs.evolve(lease, expires_at=EPOCH, branch_ref="feature"))
    assert shown == {
        "id": lease.lease_id,
        "room_id": ROOM,
        "task_id": TASK.task_id,
        "kind": "work",
        "status": "active",
        "agent_key": "owner/b",
        "agent_instance_id": "i1",
        "agent_session_id": "b1",
        "actor_label": "Bee | owner's agent | Codex",
        "epoch": 1,
        "branch_ref": "feature",
        "pr_url": "https://example.test/pr/1",
        "output_intent": "t",
        "expires_at": "2027-01-15T08:00:00.000Z",
        "last_heartbeat_at": None,
        "revoked_reason": None,
        "created_by": "Bee | owner's agent | Codex",
        "created_at": "1970-01-01T00:00:00.007Z",
        "updated_at": "1970-01-01T00:00:00.007Z",
    }
    # A person's claim (no agent session) binds no agent key.
    person = new_work_lease(TASK, Actor(label="owner", account_id="acct"), now=7, pr_url=None)
    assert (person.agent_key, person.agent_session_id) == ("", None)
