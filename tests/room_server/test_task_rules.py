"""Who may move a task, at the rules' edges (both stores).

A task an admin assigned by label only (no agent key), a claim naming another
agent's key, a request for changes by each kind of lease holder, merging, a
submission by another instance of the assignee's key, the creator's edit of a
closed task, the bound of a task id in ``after``, the board's page and leases,
and a ``PATCH`` whose status or PR link is no string. Every refusal is compared
whole: the texts and codes are the letagents API's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import pytest

from letagents_trio.room_server._board._taskboard import REVIEW_WORKER_TEXT
from letagents_trio.room_server._board._tasks import (
    ADMIN_TEXT,
    BOARD_REVIEW_TEXT,
    REVIEW_DECISION_TEXT,
    UPDATE_FAILED_TEXT,
)
from letagents_trio.room_server._wire import iso

from .helpers import (
    OTHER_TOKEN,
    ROOM,
    claimed_task,
    owner_headers,
    patch_task,
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

TASKS = f"/rooms/{ROOM}/tasks"


patch = patch_task


async def new_task(client: httpx2.AsyncClient, creator: dict[str, Any]) -> str:
    r = await client.post(TASKS, json={"title": "t"}, headers=session_headers(creator))
    assert r.status_code == 201, r.text
    task_id: str = r.json()["id"]
    r = await patch(client, person_headers(), task_id, status="accepted")
    assert r.status_code == 200, r.text
    return task_id


def missing_lease(mutation: str, kind: str = "work") -> dict[str, str]:
    return {
        "error": f"Mutation {mutation} requires an active {kind} lease.",
        "code": "coordination_missing_lease",
    }


def wrong_actor(mutation: str, lease_id: str) -> dict[str, str]:
    return {
        "error": f"Mutation {mutation} requires lease {lease_id},"
        " which belongs to a different agent.",
        "code": "coordination_wrong_actor",
    }


async def test_a_task_assigned_by_label_is_the_labelled_agents_alone(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    """An admin assigns a task by label only: the agent of that label moves it (taking a
    work lease); its creator, another agent, neither moves it nor changes its text."""
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    task = await new_task(client, b)
    r = await patch(client, person_headers(), task, status="assigned", assignee=a["actor_label"])
    assert r.status_code == 200, r.text
    assert (r.json()["assignee"], r.json()["assignee_agent_key"]) == (a["actor_label"], None)
    before = room.store.get_task(ROOM, 1)
    r = await patch(client, session_headers(b), task, title="mine now")
    assert (r.status_code, r.json()) == (409, missing_lease("task_update"))
    r = await patch(client, session_headers(b), task, status="in_progress")
    assert (r.status_code, r.json()) == (
        409,
        {"error": "Only the assigned agent can move this task to in_progress"},
    )
    assert room.store.get_task(ROOM, 1) == before
    r = await patch(client, session_headers(a), task, status="in_progress")
    assert (r.status_code, r.json()["status"]) == (200, "in_progress")
    (lease,) = r.json()["active_leases"]
    assert (lease["agent_session_id"], lease["kind"]) == (a["session_id"], "work")


async def test_a_claim_naming_another_agents_key_is_refused(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    task = await new_task(client, a)
    before = room.store.get_task(ROOM, 1)
    claim = {"status": "assigned", "assignee": a["actor_label"], "assignee_agent_key": "owner/b"}
    r = await patch(client, session_headers(a), task, **claim)
    assert (r.status_code, r.json()) == (
        409,
        {"error": "Agents can only claim tasks for themselves"},
    )
    assert room.store.get_task(ROOM, 1) == before


async def test_only_the_board_reviewer_requests_changes(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    """Moving a task in review back to ``blocked`` needs its review lease: the work holder
    holds the wrong kind, an agent without one finds it missing, then another's."""
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    c = await registered(client, registration(name="C"))
    task, work = await claimed_task(client, a)
    r = await patch(client, session_headers(a), task, status="in_review")
    assert r.status_code == 200, r.text
    r = await patch(client, session_headers(a), task, status="blocked")
    assert (r.status_code, r.json()) == (
        409,
        {
            "error": "Mutation task_update requires a review lease, but actor holds work"
            f" lease {work['id']}.",
            "code": "coordination_wrong_lease_kind",
        },
    )
    r = await patch(client, session_headers(c), task, status="blocked")
    assert (r.status_code, r.json()) == (409, missing_lease("task_update", "review"))
    r = await client.post(
        f"{TASKS}/{task}/review-lease-action", json={"action": "claim"}, headers=session_headers(b)
    )
    assert r.status_code == 200, r.text
    (review,) = [x for x in room.store.active_leases(ROOM) if x.kind == "review"]
    r = await patch(client, session_headers(c), task, status="blocked")
    assert (r.status_code, r.json()) == (409, wrong_actor("task_update", review.lease_id))
    # The reviewer's request for changes changes the status alone.
    decision_only = {"error": REVIEW_DECISION_TEXT, "code": "coordination_review_decision_only"}
    for more in ({"assignee": "C"}, {"assignee_agent_key": c["agent_key"]}, {"pr_url": "u"}):
        r = await patch(client, session_headers(b), task, status="blocked", **more)
        assert (r.status_code, r.json()) == (409, decision_only), more
    assert room.store.get_task(ROOM, 1).status == "in_review"  # type: ignore[union-attr]
    r = await patch(client, session_headers(b), task, status="blocked")
    assert (r.status_code, r.json()["status"]) == (200, "blocked")


async def test_merging_needs_a_board_reviewer(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    task, _ = await claimed_task(client, a)
    assert (await patch(client, session_headers(a), task, status="in_review")).status_code == 200
    r = await patch(client, person_headers(), task, status="merged")
    assert (r.status_code, r.json()) == (
        409,
        {"error": BOARD_REVIEW_TEXT, "code": "coordination_board_review_required"},
    )
    r = await client.post(
        f"{TASKS}/{task}/review-lease-action", json={"action": "claim"}, headers=session_headers(b)
    )
    assert r.status_code == 200, r.text
    r = await patch(client, person_headers(), task, status="merged")
    assert (r.status_code, r.json()["status"]) == (200, "merged")


async def test_another_instance_of_the_key_cannot_submit_the_task(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    first = await registered(client, registration(instance=worker_id(), actor="owner/shared"))
    second = await registered(client, registration(instance=worker_id(), actor="owner/shared"))
    task, lease = await claimed_task(client, first)
    r = await patch(client, session_headers(second), task, status="in_review")
    assert (r.status_code, r.json()) == (409, wrong_actor("task_complete", lease["id"]))


async def test_the_creator_changes_the_text_of_a_closed_task(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    """A closed task is nobody's work any more: its creator's edit passes, though the
    agent that worked it is still its assignee (and its lease still active)."""
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    task = await new_task(client, b)
    claim = {"status": "assigned", "assignee": a["actor_label"]}
    assert (await patch(client, session_headers(a), task, **claim)).status_code == 200
    assert (await patch(client, session_headers(a), task, status="in_progress")).status_code == 200
    r = await patch(client, person_headers(), task, status="done")
    assert (r.json()["assignee"], len(r.json()["active_leases"])) == (a["actor_label"], 1)
    r = await patch(client, session_headers(b), task, title="Done right")
    assert (r.status_code, r.json()["title"]) == (200, "Done right")


@pytest.mark.parametrize(
    ("after", "ids"),
    [
        ("task_" + "9" * 12, []),  # 12 digits: a task id, past every task
        ("task_" + "9" * 13, ["task_1", "task_2"]),  # 13: no task id, so from the start
    ],
)
async def test_a_task_id_has_at_most_12_digits(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    after: str,
    ids: list[str],
) -> None:
    a = await registered(client, registration(name="A"))
    for _ in range(2):
        await client.post(TASKS, json={"title": "t"}, headers=session_headers(a))
    r = await client.get(f"{TASKS}?after={after}", headers=session_headers(a))
    assert [t["id"] for t in r.json()["tasks"]] == ids


@pytest.mark.parametrize("body", [{"status": 5}, {"status": ["done"]}, {"pr_url": 7}])
async def test_a_status_or_pr_link_that_is_no_string_is_400(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    body: dict[str, Any],
) -> None:
    a = await registered(client, registration(name="A"))
    task, _ = await claimed_task(client, a)
    before = room.store.get_task(ROOM, 1)
    for headers in (session_headers(a), person_headers()):
        r = await patch(client, headers, task, **body)
        assert (r.status_code, r.json()) == (400, {"error": UPDATE_FAILED_TEXT})
    assert room.store.get_task(ROOM, 1) == before


async def test_a_null_status_or_pr_link_changes_neither(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a = await registered(client, registration(name="A"))
    task, _ = await claimed_task(client, a)
    r = await patch(client, session_headers(a), task, status=None, pr_url=None, title="t2")
    assert r.status_code == 200, r.text
    assert (r.json()["status"], r.json()["pr_url"], r.json()["title"]) == ("assigned", None, "t2")


@pytest.mark.parametrize(
    ("limit", "size"),
    [
        ("1", 1),
        ("0000010", 1),  # a limit is read by its first six digits: 000001
        ("0000001", 3),  # 000000: no page size, so the default page
    ],
)
async def test_a_board_page_of_one_and_limits_of_many_digits(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, limit: str, size: int
) -> None:
    a = await registered(client, registration(name="A"))
    for _ in range(3):
        await client.post(TASKS, json={"title": "t"}, headers=session_headers(a))
    r = await client.get(f"{TASKS}?limit={limit}", headers=session_headers(a))
    assert (len(r.json()["tasks"]), r.json()["has_more"]) == (size, size < 3)


async def test_the_board_shows_each_tasks_active_leases(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    """A lease that expires later is active now, and shown with its task on the board."""
    a = await registered(client, registration(name="A"))
    task, lease = await claimed_task(client, a)
    (row,) = room.store.active_leases(ROOM)
    expires = room.clock.now_ms() + 3_600_000
    room.store.put_lease(attrs.evolve(row, expires_at=expires))
    r = await client.get(TASKS, headers=session_headers(a))
    (shown,) = r.json()["tasks"]
    assert (shown["id"], shown["active_leases"]) == (task, [{**lease, "expires_at": iso(expires)}])


async def test_a_bearer_who_is_not_the_rooms_admin_reads_no_board(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    await registered(client, registration(name="A"))
    for path in (TASKS, f"{TASKS}/task_1"):
        r = await client.get(path, headers=owner_headers(OTHER_TOKEN))
        assert (r.status_code, r.json()) == (403, {"error": ADMIN_TEXT}), path


async def test_a_person_cannot_request_changes(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a = await registered(client, registration(name="A"))
    task, _ = await claimed_task(client, a)
    assert (await patch(client, session_headers(a), task, status="in_review")).status_code == 200
    r = await patch(client, person_headers(), task, status="blocked")
    assert (r.status_code, r.json()) == (
        403,
        {"error": REVIEW_WORKER_TEXT, "code": "coordination_review_worker_required"},
    )
