"""The board: tasks, their statuses and transitions, and who may move them (both stores).

Route tests over the real app under ``autojump_clock``; the pure rules of
:mod:`letagents_trio.room_server._board._tasks` at the end. Texts and codes are the
letagents API's, compared whole.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import pytest

from letagents_trio.room_server._auth._accounts import Actor
from letagents_trio.room_server._board._tasks import (
    ADMIN_TEXT,
    TASK_STATUSES,
    TEXT_NOT_YOURS_CODE,
    TEXT_NOT_YOURS_TEXT,
    VALID_TRANSITIONS,
    Coordination,
    Mutation,
    classify,
    coordinate,
    invalid_transition_text,
    ownership,
    parse_patch,
    parse_task_number,
    resolve_assignment,
    text_edit,
)
from letagents_trio.room_server._messaging._citations import (
    INVALID_SOURCE_TEXT,
    SOURCE_MESSAGE_TEXT,
)
from letagents_trio.room_server._storage._rows import LeaseRow, SessionRow, TaskRow
from letagents_trio.workers import _room_work as room_work

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

if TYPE_CHECKING:
    import httpx2
    import trio.testing

    from letagents_trio.room_server import Room

TASKS = f"/rooms/{ROOM}/tasks"


async def create(client: httpx2.AsyncClient, headers: dict[str, str], **body: Any) -> Any:
    r = await client.post(TASKS, json=body, headers=headers)
    assert r.status_code == 201, r.text
    return r.json()


async def patch(
    client: httpx2.AsyncClient, headers: dict[str, str], task_id: str, **body: Any
) -> httpx2.Response:
    return await client.patch(f"{TASKS}/{task_id}", json=body, headers=headers)


async def test_a_new_task_is_proposed_and_answered_as_the_task(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a = await registered(client, registration(name="A"))
    task = await create(client, session_headers(a), title="Wire up CI", description="all of it")
    assert task == {
        "id": "task_1",
        "room_id": ROOM,
        "title": "Wire up CI",
        "description": "all of it",
        "status": "proposed",
        "assignee": None,
        "assignee_agent_key": None,
        "created_by": a["actor_label"],
        "source_message_id": None,
        "pr_url": None,
        "created_at": task["created_at"],
        "updated_at": task["created_at"],
        "active_leases": [],
    }
    assert (await create(client, person_headers(), title="by a person"))["id"] == "task_2"
    assert (await create(client, person_headers(), title="by a person"))["created_by"] == "owner"
    r = await client.get(f"{TASKS}/task_1", headers=session_headers(a))
    assert (r.status_code, r.json()) == (200, task)


async def test_the_whole_life_of_a_task(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    ah, bh, admin = session_headers(a), session_headers(b), person_headers()
    task = (await create(client, bh, title="t"))["id"]
    claim_a = {"status": "assigned", "assignee": a["actor_label"]}
    # A proposed task cannot be claimed: there is no lease to take yet.
    r = await patch(client, ah, task, **claim_a)
    assert (r.status_code, r.json()) == (
        409,
        {
            "error": "Mutation task_claim requires an active work lease.",
            "code": "coordination_missing_lease",
        },
    )
    # Only the room's admins, as people, accept.
    r = await patch(client, ah, task, status="accepted")
    assert (r.status_code, r.json()) == (403, {"error": ADMIN_TEXT})
    assert (await patch(client, admin, task, status="accepted")).json()["status"] == "accepted"
    # An agent claims for itself only.
    r = await patch(client, ah, task, status="assigned", assignee=b["actor_label"])
    assert (r.status_code, r.json()) == (
        409,
        {"error": "Agents can only claim tasks for themselves"},
    )
    r = await patch(client, ah, task, **claim_a)
    assert r.status_code == 200, r.text
    claimed = r.json()
    assert (claimed["status"], claimed["assignee"], claimed["assignee_agent_key"]) == (
        "assigned",
        a["actor_label"],
        a["agent_key"],
    )
    (lease,) = claimed["active_leases"]
    # B can neither claim it again nor move it.
    r = await patch(client, bh, task, status="assigned", assignee=b["actor_label"])
    assert (r.status_code, r.json()) == (
        409,
        {
            "error": f"Mutation task_claim requires lease {lease['id']},"
            " which belongs to a different agent.",
            "code": "coordination_wrong_actor",
        },
    )
    r = await patch(client, bh, task, status="in_progress")
    assert (r.status_code, r.json()) == (
        409,
        {"error": "Only the assigned agent can move this task to in_progress"},
    )
    r = await patch(client, ah, task, assignee=b["actor_label"])
    assert (r.status_code, r.json()) == (
        409,
        {"error": "Agents cannot reassign a task after claim"},
    )
    # A works it, then submits it with its PR.
    assert (await patch(client, ah, task, status="in_progress")).json()["status"] == "in_progress"
    pr = "https://example.test/pull/7"
    r = await patch(client, ah, task, status="in_review", pr_url=pr)
    reviewed = r.json()
    assert (reviewed["status"], reviewed["pr_url"]) == ("in_review", pr)
    assert reviewed["active_leases"][0]["pr_url"] == pr
    # Merging needs a board reviewer's lease; the admin closes it as done instead.
    r = await patch(client, admin, task, status="merged")
    assert (r.status_code, r.json()["code"]) == (409, "coordination_board_review_required")
    r = await patch(client, admin, task, status="blocked")
    assert (r.status_code, r.json()["code"]) == (403, "coordination_review_worker_required")
    assert (await patch(client, admin, task, status="done")).json()["status"] == "done"


async def test_a_move_outside_the_table_is_400_and_changes_nothing(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    task, _ = await claimed_task(client, a)
    before = room.store.get_task(ROOM, 1)
    for status in ("proposed", "bogus"):
        r = await patch(client, session_headers(a), task, status=status)
        assert (r.status_code, r.json()) == (
            400,
            {
                "error": f"Invalid transition: assigned → {status}."
                " Allowed: in_progress, in_review, cancelled"
            },
        )
    assert room.store.get_task(ROOM, 1) == before


@pytest.mark.parametrize(
    ("body", "text"),
    [
        ({}, "title and created_by are required"),
        ({"title": ""}, "title and created_by are required"),
        ({"title": "   "}, "title must be a nonblank string"),
        ({"title": "x" * 513}, "title must be at most 512 characters"),
        ({"title": 5}, "title must be a nonblank string"),
        ({"title": "t", "description": ["x"]}, "description must be a string"),
        ({"title": "t", "source_message_id": 5}, "source_message_id must be a message id"),
        ({"title": "a\x00b"}, "title must not contain NUL characters"),
        ({"title": "t", "description": "x\x00"}, "description must not contain NUL characters"),
        # No message 99 in the room: as memory refuses it.
        ({"title": "t", "source_message_id": "99"}, SOURCE_MESSAGE_TEXT),
        ({"title": "t", "source_message_id": "msg_x"}, INVALID_SOURCE_TEXT),
    ],
)
async def test_bad_task_bodies_are_400_and_store_nothing(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    body: dict[str, Any],
    text: str,
) -> None:
    a = await registered(client, registration(name="A"))
    r = await client.post(TASKS, json=body, headers=session_headers(a))
    assert (r.status_code, r.json()) == (400, {"error": text})
    assert room.store.tasks_page(ROOM, after=0, limit=5, statuses=None) == []


async def test_a_task_cites_a_message_of_its_own_room_only(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    """A message of another room is refused 400, as memory refuses it; one of its own is kept."""
    a = await registered(client, registration(name="A"))
    z = await registered(client, registration(name="Z"), room="room_two")
    elsewhere = await client.post(
        "/rooms/room_two/messages", json={"text": "hi"}, headers=session_headers(z)
    )
    here = await client.post(
        f"/rooms/{ROOM}/messages", json={"text": "hi"}, headers=session_headers(a)
    )
    assert elsewhere.json()["id"] != here.json()["id"]
    body = {"title": "t", "source_message_id": elsewhere.json()["id"]}
    r = await client.post(TASKS, json=body, headers=session_headers(a))
    assert (r.status_code, r.json()) == (400, {"error": SOURCE_MESSAGE_TEXT})
    memory = {"client_id": "mem-00001", "category": "goal", "title": "t", "body": "b"}
    r = await client.post(
        f"/rooms/{ROOM}/memory", json={**memory, **body}, headers=session_headers(a)
    )
    assert (r.status_code, r.json()) == (400, {"error": SOURCE_MESSAGE_TEXT})
    assert room.store.tasks_page(ROOM, after=0, limit=5, statuses=None) == []
    body = {"title": "t", "source_message_id": here.json()["id"]}
    r = await client.post(TASKS, json=body, headers=session_headers(a))
    assert (r.status_code, r.json()["source_message_id"]) == (201, here.json()["id"])


@pytest.mark.parametrize(
    ("body", "text"),
    [
        ({"assignee": 5}, "Task update could not be completed."),
        ({"title": ""}, "title must be a nonblank string"),
        ({"description": 1}, "description must be a string"),
        ({"title": "\x00"}, "title must not contain NUL characters"),
    ],
)
async def test_bad_patches_are_400(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    body: dict[str, Any],
    text: str,
) -> None:
    a = await registered(client, registration(name="A"))
    task = (await create(client, session_headers(a), title="t"))["id"]
    r = await patch(client, person_headers(), task, **body)
    assert (r.status_code, r.json()) == (400, {"error": text})


async def test_unknown_tasks_and_strangers(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a = await registered(client, registration(name="A"))
    for task in ("task_9", "task_0", "task_x", "9", "task_" + "9" * 30):
        r = await client.get(f"{TASKS}/{task}", headers=session_headers(a))
        assert (r.status_code, r.json()) == (404, {"error": "Task not found"}), task
    r = await client.get(TASKS)
    assert r.status_code == 401
    r = await client.get(TASKS, headers=owner_headers(OTHER_TOKEN))  # no session in the room
    assert r.status_code == 403


async def test_the_board_pages_and_filters(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a = await registered(client, registration(name="A"))
    headers = session_headers(a)
    for i in range(5):
        await create(client, headers, title=f"t{i}")
    await patch(client, person_headers(), "task_2", status="cancelled")
    await patch(client, person_headers(), "task_4", status="accepted")

    async def board(query: str) -> dict[str, Any]:
        r = await client.get(f"{TASKS}?{query}", headers=headers)
        assert r.status_code == 200, r.text
        body: dict[str, Any] = r.json()
        return body

    everything = await board("")
    assert [t["id"] for t in everything["tasks"]] == [f"task_{n}" for n in range(1, 6)]
    assert (everything["room_id"], everything["has_more"]) == (ROOM, False)
    open_ids = [t["id"] for t in (await board("open=true&status=cancelled"))["tasks"]]
    assert open_ids == ["task_1", "task_3", "task_4", "task_5"]  # open wins over status
    assert [t["id"] for t in (await board("status=accepted"))["tasks"]] == ["task_4"]
    first = await board("limit=2")
    assert ([t["id"] for t in first["tasks"]], first["has_more"]) == (["task_1", "task_2"], True)
    rest = await board("limit=2&after=task_4")
    assert ([t["id"] for t in rest["tasks"]], rest["has_more"]) == (["task_5"], False)
    assert len((await board("limit=nope"))["tasks"]) == 5


# --- the pure rules ---------------------------------------------------------------------------

AGENT = SessionRow(
    session_id="s1",
    room_id=ROOM,
    token_hash="h",
    agent_key="owner/a",
    agent_instance_id="worker_a",
    actor_label="A | owner",
    owner_account_id="acct",
)
ME = Actor(label="A | owner", account_id="acct", session=AGENT)
OTHER = Actor(label="B", account_id="acct", session=attrs.evolve(AGENT, agent_key="owner/b"))
TASK = TaskRow(room_id=ROOM, number=3, title="t", status="accepted", created_at=0, updated_at=0)
MINE = attrs.evolve(TASK, status="assigned", assignee="A | owner", assignee_agent_key="owner/a")
LEASE = LeaseRow(
    lease_id="tl_1",
    room_id=ROOM,
    task_id="task_3",
    kind="work",
    agent_session_id="s1",
    agent_key="owner/a",
    agent_instance_id="worker_a",
    created_at=EPOCH,
    updated_at=EPOCH,
)


def test_every_status_has_its_transitions() -> None:
    assert TASK_STATUSES == room_work.TASK_STATUSES  # the tools' schema lists the same
    assert set(VALID_TRANSITIONS) == set(TASK_STATUSES)
    for allowed in VALID_TRANSITIONS.values():
        assert set(allowed) <= set(TASK_STATUSES)
    assert invalid_transition_text("done", "in_review") == (
        "Invalid transition: done → in_review. Allowed: accepted"
    )
    assert (
        invalid_transition_text("bogus", "done")
        == "Invalid transition: bogus → done. Allowed: none"
    )


@pytest.mark.parametrize(
    ("task_id", "number"),
    [("task_1", 1), ("task_42", 42), ("task_0", None), ("task_", None), ("msg_1", None)],
)
def test_a_task_id_is_task_and_a_positive_number(task_id: str, number: int | None) -> None:
    assert parse_task_number(task_id) == number


def test_an_agent_claims_for_itself_and_only_the_assignee_moves_on() -> None:
    claim = parse_patch(
        {"status": "assigned", "assignee": "A | owner", "assignee_agent_key": "owner/a"}
    )
    assert ownership(TASK, claim, ME) is None
    assert ownership(TASK, claim, OTHER) == "Agents can only claim tasks for themselves"
    work = parse_patch({"status": "in_progress"})
    assert ownership(MINE, work, ME) is None
    assert (
        ownership(MINE, work, OTHER) == "Only the assigned agent can move this task to in_progress"
    )
    by_label = attrs.evolve(MINE, assignee_agent_key=None)
    assert ownership(by_label, work, ME) is None
    assert ownership(MINE, parse_patch({"title": "x"}), OTHER) is None  # not an owned move


def test_the_work_lease_decides_who_acts() -> None:
    claim = classify(parse_patch({"status": "assigned"}), review_request=False)
    assert claim is not None
    assert coordinate(TASK, claim, ME, []).take_lease  # an accepted task: the claim takes it
    assert coordinate(TASK, claim, ME, [LEASE]).allowed  # already the holder
    assert coordinate(TASK, claim, OTHER, [LEASE]).code == "coordination_wrong_actor"
    submit = classify(parse_patch({"status": "in_review"}), review_request=False)
    assert submit is not None
    assert coordinate(MINE, submit, ME, []).take_lease  # the assignee whose lease is gone
    assert coordinate(TASK, submit, ME, []).code == "coordination_missing_lease"
    review = classify(parse_patch({"status": "blocked"}), review_request=True)
    assert review is not None
    assert coordinate(MINE, review, ME, [LEASE]).code == "coordination_wrong_lease_kind"
    assert classify(parse_patch({"title": "x"}), review_request=False) is None
    assert classify(parse_patch({"pr_url": "u"}), review_request=False) is not None


def test_naming_an_assignee_without_a_key_clears_the_key() -> None:
    assert resolve_assignment(MINE, parse_patch({"assignee": "C"})) == ("assigned", "C", None)
    assert resolve_assignment(MINE, parse_patch({"assignee": None})) == ("assigned", None, None)
    assert resolve_assignment(MINE, parse_patch({"assignee_agent_key": "k"})) == (
        "assigned",
        "A | owner",
        "k",
    )
    assert resolve_assignment(MINE, parse_patch({"status": "in_progress"})) == (
        "in_progress",
        "A | owner",
        "owner/a",
    )


def test_each_refusal_is_a_decision_not_allowed_with_its_code_and_reason() -> None:
    work = Mutation(name="task_update")
    assert coordinate(MINE, Mutation(name="task_update", kind="review"), ME, [LEASE]) == (
        Coordination(
            allowed=False,
            code="coordination_wrong_lease_kind",
            reason="Mutation task_update requires a review lease, but actor holds work lease tl_1.",
        )
    )
    assert coordinate(MINE, work, OTHER, [LEASE]) == Coordination(
        allowed=False,
        code="coordination_wrong_actor",
        reason="Mutation task_update requires lease tl_1, which belongs to a different agent.",
    )
    assert coordinate(MINE, work, OTHER, []) == Coordination(
        allowed=False,
        code="coordination_missing_lease",
        reason="Mutation task_update requires an active work lease.",
    )
    closed = attrs.evolve(MINE, status="done", created_by="B")
    assert text_edit(closed, parse_patch({"title": "x"}), OTHER, []) == Coordination(allowed=True)
    assert text_edit(closed, parse_patch({"title": "x"}), ME, []) == Coordination(
        allowed=False, code=TEXT_NOT_YOURS_CODE, reason=TEXT_NOT_YOURS_TEXT
    )
