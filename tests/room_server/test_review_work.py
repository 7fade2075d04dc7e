"""Review work (``…/review-lease-action``, ``…/review-verdict``) at its rules' edges, on both
stores.

Who may claim, assign and release a task's review authority, and what each
answers and records; a verdict's bounds (the body, the idempotency key, the head
SHA, the pull request link) at their edge, who may submit one, and its effect
as answered and recorded. The texts and codes are the letagents API's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import trio
import trio.testing

from letagents_trio.room_server._board._tasks import ADMIN_TEXT, TASK_NOT_FOUND_TEXT
from letagents_trio.room_server._wire import iso

from .helpers import (
    OTHER_PERSON_TOKEN,
    ROOM,
    claimed_task,
    hold,
    patch_task,
    person_headers,
    registered,
    registration,
    session_headers,
    worker_id,
)
from .test_governance_answers import events

if TYPE_CHECKING:
    import httpx2

    from letagents_trio.room_server import Room

R = f"/rooms/{ROOM}"
PR = "https://github.com/acme/widgets/pull/7"
SHA = "0123456789abcdef0123456789abcdef01234567"


async def in_review(client: httpx2.AsyncClient, worker: dict[str, Any], pr: str = PR) -> str:
    """A task ``worker`` claimed and moved to review with the PR link ``pr``."""
    task, _ = await claimed_task(client, worker)
    r = await patch_task(client, session_headers(worker), task, status="in_review", pr_url=pr)
    assert r.status_code == 200, r.text
    return task


async def review(
    client: httpx2.AsyncClient, headers: dict[str, str], task: str, **body: Any
) -> httpx2.Response:
    return await client.post(f"{R}/tasks/{task}/review-lease-action", json=body, headers=headers)


async def verdict(
    client: httpx2.AsyncClient, who: dict[str, Any], task: str, **body: Any
) -> httpx2.Response:
    fields = {"verdict": "approve", "idempotency_key": "k1", "expected_head_sha": SHA, **body}
    return await client.post(
        f"{R}/tasks/{task}/review-verdict", json=fields, headers=session_headers(who)
    )


def refusal(error: str, code: str | None = None) -> dict[str, Any]:
    return {"error": error} if code is None else {"error": error, "code": code}


async def test_a_claim_answers_the_review_lease_whole_once_and_records_it(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    task = await in_review(client, a)
    await trio.sleep(5)
    now = iso(room.clock.now_ms())
    r = await review(client, session_headers(b), task, action="claim")
    assert r.status_code == 200, r.text
    answer = r.json()
    assert (answer["room_id"], answer["action"]) == (ROOM, "claim")
    lease = answer["lease"]
    assert lease == {
        **lease,
        "room_id": ROOM,
        "task_id": task,
        "kind": "review",
        "status": "active",
        "agent_key": b["agent_key"],
        "agent_instance_id": b["agent_instance_id"],
        "agent_session_id": b["session_id"],
        "actor_label": b["actor_label"],
        "branch_ref": None,
        "pr_url": PR,
        "output_intent": f"Review {task}: t",
        "created_by": b["actor_label"],
        "created_at": now,
        "updated_at": now,
    }
    assert lease["id"].startswith("tl_")
    assert answer["task"]["id"] == task
    kinds = sorted((x["kind"], x["agent_key"]) for x in answer["task"]["active_leases"])
    assert kinds == [("review", b["agent_key"]), ("work", a["agent_key"])]
    (event,) = await events(client, "review_lease")
    assert event == {
        **event,
        "action": "claimed",
        "actor": b["actor_label"],
        "object_id": lease["id"],
        "state": "active",
        "linked_task_id": task,
        "title": b["actor_label"],
        "created_at": now,
    }
    # Claiming again answers the same lease; nothing new is recorded.
    await trio.sleep(5)
    again = await review(client, session_headers(b), task, action="claim")
    assert (again.status_code, again.json()["lease"]) == (200, lease)
    assert len(await events(client, "review_lease")) == 1


async def test_a_review_lease_carries_the_tasks_pr_link_and_a_blocked_task_takes_one(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    """The admin linked the PR (the work lease has none); a task blocked by requested
    changes is still under review."""
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    c = await registered(client, registration(name="C"))
    task, _ = await claimed_task(client, a)
    r = await patch_task(client, person_headers(), task, pr_url=PR)
    assert (r.status_code, r.json()["active_leases"][0]["pr_url"]) == (200, None)
    r = await patch_task(client, session_headers(a), task, status="in_review")
    assert r.status_code == 200, r.text
    r = await review(client, session_headers(b), task, action="claim")
    assert r.json()["lease"]["pr_url"] == PR
    r = await patch_task(client, session_headers(b), task, status="blocked")
    assert (r.status_code, r.json()["status"]) == (200, "blocked")
    r = await review(client, session_headers(c), task, action="claim")
    assert (r.status_code, r.json()["lease"]["agent_key"]) == (200, c["agent_key"])


async def test_review_authority_is_refused_outside_review_to_people_and_to_the_work_holder(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    task, _ = await claimed_task(client, a)
    r = await review(client, session_headers(b), task, action="claim")
    assert (r.status_code, r.json()) == (
        409,
        refusal(
            "Cannot assign review authority while task is assigned."
            " Move the task to in_review first.",
            "coordination_invalid_task_status",
        ),
    )
    assert (await patch_task(client, session_headers(a), task, status="in_review")).is_success
    r = await review(client, person_headers(), task, action="claim")
    assert (r.status_code, r.json()) == (
        403,
        refusal(
            "Registered worker session is required to claim review authority.",
            "coordination_worker_required",
        ),
    )
    r = await review(client, session_headers(a), task, action="claim")
    assert (r.status_code, r.json()) == (
        409,
        refusal(
            "The active work lease holder cannot also hold review authority for the same task.",
            "coordination_work_lease_holder",
        ),
    )
    r = await review(client, session_headers(b), task, action="take")
    assert (r.status_code, r.json()) == (
        400,
        refusal("action must be one of: assign, claim, release"),
    )
    r = await review(client, session_headers(b), "task_99", action="claim")
    assert (r.status_code, r.json()) == (404, refusal(TASK_NOT_FOUND_TEXT))
    r = await review(client, session_headers(b), "nope", action="claim")
    assert (r.status_code, r.json()) == (404, refusal(TASK_NOT_FOUND_TEXT))
    # Another account's person is no admin of this room.
    r = await review(client, person_headers(OTHER_PERSON_TOKEN), task, action="claim")
    assert (r.status_code, r.json()) == (403, refusal(ADMIN_TEXT))
    assert await events(client, "review_lease") == []


async def test_an_admin_assigns_review_authority_to_a_reachable_worker(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
) -> None:
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    task = await in_review(client, a)
    r = await review(client, session_headers(b), task, action="assign")
    assert (r.status_code, r.json()) == (
        403,
        refusal(
            "Only room admins can assign review authority to another worker.",
            "coordination_review_assignment_admin_required",
        ),
    )
    r = await review(client, person_headers(), task, action="assign", target_actor_key="  ")
    assert (r.status_code, r.json()) == (
        400,
        refusal("target_actor_key is required for review assignment"),
    )
    # B holds no stream: it cannot be reached, so it is no target.
    r = await review(
        client, person_headers(), task, action="assign", target_actor_key=b["agent_key"]
    )
    assert (r.status_code, r.json()["code"]) == (409, "coordination_target_session_unreachable"), (
        r.text
    )
    await nursery.start(hold, client, b)
    r = await review(
        client,
        person_headers(),
        task,
        action="assign",
        target_actor_key=f" {b['agent_key']} ",
        target_agent_session_id="s_other",
    )
    assert r.status_code == 409, r.text
    assert r.json()["error"] == (
        f"No active worker session exists for target actor_key {b['agent_key']}"
        " and target_agent_session_id s_other"
    )
    r = await review(
        client,
        person_headers(),
        task,
        action="assign",
        target_actor_key=b["agent_key"],
        target_actor_instance_id=b["agent_instance_id"],
    )
    assert r.status_code == 200, r.text
    answer = r.json()
    assert (answer["action"], answer["lease"]["agent_session_id"]) == ("assign", b["session_id"])
    assert answer["lease"]["created_by"] == "owner"
    (event,) = await events(client, "review_lease")
    assert (event["action"], event["actor"], event["title"]) == (
        "assigned",
        "owner",
        b["actor_label"],
    )
    # The work holder is no target of an assignment either.
    await nursery.start(hold, client, a)
    r = await review(
        client, person_headers(), task, action="assign", target_actor_key=a["agent_key"]
    )
    assert (r.status_code, r.json()["code"]) == (409, "coordination_work_lease_holder")


async def test_a_release_by_the_holder_or_an_admin_ends_the_review_lease(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    c = await registered(client, registration(name="C"))
    task = await in_review(client, a)
    lease = (await review(client, session_headers(b), task, action="claim")).json()["lease"]
    # C holds no review lease of its own; naming B's, it is neither holder nor admin.
    r = await review(client, session_headers(c), task, action="release")
    assert (r.status_code, r.json()) == (404, refusal("Active review lease not found"))
    r = await review(client, session_headers(c), task, action="release", lease_id=lease["id"])
    assert (r.status_code, r.json()) == (
        403,
        refusal(
            "Only the review lease holder or a room admin can release this review assignment.",
            "coordination_review_lease_forbidden",
        ),
    )
    await trio.sleep(5)
    now = iso(room.clock.now_ms())
    r = await review(client, session_headers(b), task, action="release")
    assert r.status_code == 200, r.text
    answer = r.json()
    assert (answer["room_id"], answer["action"]) == (ROOM, "release")
    assert answer["released_lease"] == {
        **lease,
        "status": "released",
        "revoked_reason": None,
        "updated_at": now,
    }
    assert [x["kind"] for x in answer["task"]["active_leases"]] == ["work"]
    _, released = await events(client, "review_lease")
    assert released == {
        **released,
        "action": "released",
        "actor": b["actor_label"],
        "object_id": lease["id"],
        "state": "released",
        "linked_task_id": task,
        "metadata": {"reason": f"Released review lease {lease['id']} for {task}."},
    }
    # An admin's release revokes, with its own reason.
    lease = (await review(client, session_headers(c), task, action="claim")).json()["lease"]
    body = {"action": "release", "lease_id": f" {lease['id']} ", "reason": "  Reassigning.  "}
    r = await review(client, person_headers(), task, **body)
    assert r.status_code == 200, r.text
    ended = r.json()["released_lease"]
    assert (ended["status"], ended["revoked_reason"]) == ("revoked", "Reassigning.")
    *_, revoked = await events(client, "review_lease")
    assert (revoked["actor"], revoked["state"], revoked["metadata"]) == (
        "owner",
        "revoked",
        {"reason": "Reassigning."},
    )
    r = await review(client, person_headers(), task, action="release")
    assert (r.status_code, r.json()) == (404, refusal("Active review lease not found"))


async def test_a_verdict_is_kept_once_per_key_and_answered_as_its_effect(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    task = await in_review(client, a)
    lease = (await review(client, session_headers(b), task, action="claim")).json()["lease"]
    await trio.sleep(5)
    now = iso(room.clock.now_ms())
    r = await verdict(
        client,
        b,
        task,
        verdict="  Request_Changes ",
        idempotency_key=" k1 ",
        expected_head_sha=f" {SHA.upper()} ",
        body="Add a test.",
    )
    assert r.status_code == 200, r.text
    answer = r.json()
    assert (answer["room_id"], answer["task_id"]) == (ROOM, task)
    effect = answer["effect"]
    assert effect == {
        "id": effect["id"],
        "state": "succeeded",
        "correlation_key": f"{task}:k1",
        "attempt_count": 1,
        "external_id": None,
        "external_url": None,
        "last_error": None,
        "quarantined_at": None,
        "quarantine_reason": None,
        "verdict": "request_changes",
        "expected_head_sha": SHA,
        "created_at": now,
    }
    assert effect["id"].startswith("we_")
    (event,) = await events(client, "pull_request_review")
    assert event == {
        **event,
        "action": "submitted",
        "actor": b["actor_label"],
        "object_id": effect["id"],
        "object_url": PR,
        "state": "request_changes",
        "linked_task_id": task,
        "title": f"Review of {task}",
        "metadata": {"expected_head_sha": SHA, "body": "Add a test."},
    }
    # The same key and verdict answer the same effect; another verdict, another body or
    # another head under it is refused, naming the key's first 64 characters.
    await trio.sleep(5)
    again = await verdict(
        client, b, task, verdict="request_changes", body="Add a test.", idempotency_key="k1"
    )
    assert (again.status_code, again.json()["effect"]) == (200, effect)
    conflict = refusal(
        f"idempotency_key k1 was already used for a different verdict on {task}.",
        "workflow_effect_idempotency_conflict",
    )
    for changed in (
        {"verdict": "approve", "body": "Add a test."},
        {"verdict": "request_changes", "body": "Add two tests."},
        {"verdict": "request_changes", "body": "Add a test.", "expected_head_sha": "f" * 40},
    ):
        r = await verdict(client, b, task, **changed)
        assert (r.status_code, r.json()) == (409, conflict), changed
    long_key = "k" * 200
    assert (await verdict(client, b, task, idempotency_key=long_key)).status_code == 200
    r = await verdict(client, b, task, idempotency_key=long_key, verdict="comment")
    assert r.json()["error"] == (
        f"idempotency_key {'k' * 64} was already used for a different verdict on {task}."
    )
    assert len(await events(client, "pull_request_review")) == 2
    assert lease["kind"] == "review"


async def test_a_verdicts_fields_are_bounded_at_their_edges(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    task = await in_review(client, a)
    assert (await review(client, session_headers(b), task, action="claim")).status_code == 200
    verdicts = refusal("verdict must be one of: approve, request_changes, comment")
    keys = refusal("idempotency_key is required and must be at most 200 characters")
    shas = refusal(
        "expected_head_sha is required and must be an exact 40-hex commit SHA",
        "workflow_effect_invalid_head_sha",
    )
    bodies = refusal("body must be at most 65536 characters")
    refused: list[tuple[dict[str, Any], dict[str, Any]]] = [
        ({"verdict": "reject"}, verdicts),
        ({"verdict": None}, verdicts),
        ({"body": "x" * 65_537}, bodies),
        ({"idempotency_key": "   "}, keys),
        ({"idempotency_key": 7}, keys),
        ({"idempotency_key": "k" * 201}, keys),
        ({"expected_head_sha": SHA[:39]}, shas),
        ({"expected_head_sha": SHA + "0"}, shas),
        ({"expected_head_sha": "g" * 40}, shas),
        ({"expected_head_sha": None}, shas),
    ]
    for fields, error in refused:
        r = await verdict(client, b, task, **fields)
        assert (r.status_code, r.json()) == (400, error), fields
    # A body's bound is checked before the task is looked up.
    r = await verdict(client, b, "task_99", verdict="reject")
    assert (r.status_code, r.json()) == (400, verdicts)
    r = await verdict(client, b, "task_99")
    assert (r.status_code, r.json()) == (404, refusal(TASK_NOT_FOUND_TEXT))
    # At the edge: a body of 65,536 characters, a key of 200; a body that is no text is
    # an empty one.
    r = await verdict(client, b, task, body="x" * 65_536, idempotency_key="a" * 200)
    assert r.status_code == 200, r.text
    r = await verdict(client, b, task, body=12, idempotency_key="b", verdict="comment")
    assert r.status_code == 200, r.text
    r = await verdict(client, b, task, body="", idempotency_key="b", verdict="comment")
    assert (r.status_code, r.json()["effect"]["verdict"]) == (200, "comment")


async def test_a_verdict_needs_the_exact_reviewer_session_a_task_in_review_and_a_pull_request(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(instance=worker_id(), actor="owner/shared"))
    twin = await registered(client, registration(instance=worker_id(), actor="owner/shared"))
    task = await in_review(client, a, pr="https://github.com/acme/widgets/pull/1234567890/")
    r = await client.post(
        f"{R}/tasks/{task}/review-verdict",
        json={"verdict": "approve", "idempotency_key": "k", "expected_head_sha": SHA},
        headers=person_headers(),
    )
    assert (r.status_code, r.json()) == (
        403,
        refusal(
            "Registered worker session is required to submit a review verdict.",
            "coordination_worker_required",
        ),
    )
    lease_required = refusal(
        "An active review lease held by this exact worker session is required.",
        "coordination_review_lease_required",
    )
    assert (await verdict(client, b, task)).json() == lease_required
    assert (await review(client, session_headers(b), task, action="claim")).status_code == 200
    # Another session of the same key holds no lease of its own.
    r = await verdict(client, twin, task)
    assert (r.status_code, r.json()) == (409, lease_required)
    assert (await verdict(client, b, task)).status_code == 200
    # Out of review: refused with the task's status.
    r = await patch_task(client, session_headers(a), task, status="in_progress")
    assert r.status_code == 200, r.text
    r = await verdict(client, b, task, idempotency_key="k2")
    assert (r.status_code, r.json()) == (
        409,
        refusal(
            f"Review verdicts require a task that is in review or blocked; {task} is in_progress.",
            "coordination_invalid_task_status",
        ),
    )


async def test_a_verdict_needs_a_canonical_github_pull_request_link(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    pr_required = refusal(
        "Task must have a canonical GitHub pull request URL before a verdict can be submitted.",
        "workflow_effect_pull_request_required",
    )
    task, _ = await claimed_task(client, a)
    assert (await patch_task(client, session_headers(a), task, status="in_review")).is_success
    assert (await review(client, session_headers(b), task, action="claim")).status_code == 200
    r = await verdict(client, b, task)
    assert (r.status_code, r.json()) == (409, pr_required)
    for link, passes in (
        ("https://github.com/acme/widgets/pull/12345678901", False),
        ("https://github.com/acme/widgets/pull/0", False),
        ("https://github.com/acme/widgets/issues/7", False),
        ("https://github.com/acme/widgets/pull/7/files", False),
        ("https://gitlab.com/acme/widgets/pull/7", False),
        ("https://github.com/acme/widgets/pull/9", True),
    ):
        r = await patch_task(client, person_headers(), task, pr_url=link)
        assert r.status_code == 200, r.text
        r = await verdict(client, b, task, idempotency_key=link)
        assert (r.status_code == 200) is passes, (link, r.text)
        if not passes:
            assert (r.status_code, r.json()) == (409, pr_required), link


async def test_review_leases_past_their_time_count_for_nothing(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    """Leases with an expiry (a room's store may hold them): within it they count, past it
    the reviewer holds nothing: no verdict, no release, a fresh lease when it claims again."""
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    task = await in_review(client, a)

    def expire_in(kind: str, ms: int) -> None:
        (row,) = [x for x in room.store.active_leases(ROOM) if x.kind == kind]
        room.store.put_lease(attrs.evolve(row, expires_at=room.clock.now_ms() + ms))

    expire_in("work", 7_200_000)
    first = (await review(client, session_headers(b), task, action="claim")).json()["lease"]
    expire_in("review", 3_600_000)
    assert (await verdict(client, b, task)).status_code == 200
    await trio.sleep(3_600)
    r = await verdict(client, b, task, idempotency_key="k2")
    assert r.json()["code"] == "coordination_review_lease_required"
    r = await review(client, session_headers(b), task, action="release")
    assert (r.status_code, r.json()) == (404, refusal("Active review lease not found"))
    r = await review(client, session_headers(b), task, action="claim")
    assert r.status_code == 200, r.text
    fresh = r.json()["lease"]
    assert fresh["id"] != first["id"]
    shown = sorted((x["kind"], x["id"]) for x in r.json()["task"]["active_leases"])
    assert [kind for kind, _ in shown] == ["review", "work"]
    assert ("review", fresh["id"]) in shown
    r = await review(client, session_headers(b), task, action="release")
    assert [x["kind"] for x in r.json()["task"]["active_leases"]] == ["work"]


async def test_a_reviewers_lease_on_one_task_is_not_its_lease_on_another(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    first = await in_review(client, a)
    second = await in_review(client, a)
    one = (await review(client, session_headers(b), first, action="claim")).json()
    two = (await review(client, session_headers(b), second, action="claim")).json()
    assert (two["lease"]["task_id"], two["lease"]["id"] != one["lease"]["id"]) == (second, True)
    assert {x["task_id"] for x in two["task"]["active_leases"]} == {second}


async def test_an_assignment_names_one_of_the_keys_sessions_by_instance(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, nursery: trio.Nursery
) -> None:
    a = await registered(client, registration(name="A"))
    one = await registered(client, registration(instance=worker_id(), actor="owner/shared"))
    two = await registered(client, registration(instance=worker_id(), actor="owner/shared"))
    await nursery.start(hold, client, one)
    await nursery.start(hold, client, two)
    task = await in_review(client, a)
    body = {"action": "assign", "target_actor_key": two["agent_key"]}
    r = await review(client, person_headers(), task, **body)
    assert (r.status_code, r.json()["code"]) == (409, "coordination_target_session_required")
    r = await review(
        client, person_headers(), task, **body, target_actor_instance_id=two["agent_instance_id"]
    )
    assert r.status_code == 200, r.text
    assert r.json()["lease"]["agent_session_id"] == two["session_id"]


async def test_a_task_in_review_without_a_work_lease_takes_a_reviewer_with_its_pr_link(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    """An admin moved it along (no agent ever took its work lease)."""
    b = await registered(client, registration(name="B"))
    r = await client.post(f"{R}/tasks", json={"title": "t"}, headers=person_headers())
    task = r.json()["id"]
    for step in ({"status": "accepted"}, {"status": "assigned", "assignee": "someone"}):
        assert (await patch_task(client, person_headers(), task, **step)).status_code == 200
    r = await patch_task(client, person_headers(), task, status="in_review", pr_url=PR)
    assert (r.status_code, r.json()["active_leases"]) == (200, []), r.text
    r = await review(client, session_headers(b), task, action="claim")
    assert r.status_code == 200, r.text
    assert (r.json()["lease"]["pr_url"], r.json()["lease"]["branch_ref"]) == (PR, None)


async def test_a_review_lease_takes_the_work_leases_pr_link_over_the_tasks(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    """The holder linked its PR; an admin then linked another to the task."""
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    task = await in_review(client, a)
    other = "https://github.com/acme/widgets/pull/8"
    r = await patch_task(client, person_headers(), task, pr_url=other)
    assert r.status_code == 200, r.text
    work = [x for x in r.json()["active_leases"] if x["kind"] == "work"]
    assert [x["pr_url"] for x in work] == [PR]
    r = await review(client, session_headers(b), task, action="claim")
    assert r.json()["lease"]["pr_url"] == PR


async def test_texts_are_cut_where_the_room_cuts_them(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    """A release's reason at 512 characters; a verdict's body at 2,000 in the record."""
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    task = await in_review(client, a)
    lease = (await review(client, session_headers(b), task, action="claim")).json()["lease"]
    body = "b" * 2_001
    assert (await verdict(client, b, task, body=body)).status_code == 200
    (event,) = await events(client, "pull_request_review")
    assert event["metadata"]["body"] == body[:2_000]
    release = {"action": "release", "lease_id": lease["id"], "reason": "r" * 513}
    r = await review(client, person_headers(), task, **release)
    assert r.json()["released_lease"]["revoked_reason"] == "r" * 512


async def test_another_accounts_person_submits_no_verdict(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a = await registered(client, registration(name="A"))
    task = await in_review(client, a)
    r = await client.post(
        f"{R}/tasks/{task}/review-verdict",
        json={"verdict": "approve", "idempotency_key": "k", "expected_head_sha": SHA},
        headers=person_headers(OTHER_PERSON_TOKEN),
    )
    assert (r.status_code, r.json()) == (403, refusal(ADMIN_TEXT))
