"""Registering and deciding board intents, at the rules' edges (both stores).

What a registration refuses and answers (the notice to the manager, once per
intent), who may decide, what each approval carries out and answers (a task
created, a claim with its lease, a token), each refusal of a claim's approval,
a denial, deciding again, and the notices the proposer is sent. The texts and
codes are the letagents API's.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import attrs
import trio
import trio.testing

from letagents_trio.room_server._auth._accounts import OWNER_NOT_PERSON_TEXT
from letagents_trio.room_server._board._governance import MANAGER_ONLY_TEXT
from letagents_trio.room_server._wire import iso
from letagents_trio.workers._intent_payloads import create_intent_payload as create_payload
from letagents_trio.workers._intent_payloads import lease_intent_payload as lease_payload
from letagents_trio.workers._intent_payloads import mutation_intent_payload as mutation_payload

from .helpers import (
    OTHER_PERSON_TOKEN,
    ROOM,
    claimed_task,
    disconnect,
    owner_headers,
    person_headers,
    registered,
    registration,
    session_headers,
    worker_id,
)
from .test_board_governance import decide, governed, intend
from .test_governance_answers import events, new_task

if TYPE_CHECKING:
    import httpx2

    from letagents_trio.room_server import Room

R = f"/rooms/{ROOM}"
CONFLICT = "board_intent_claim_conflict"


async def messages(client: httpx2.AsyncClient, reader: dict[str, Any]) -> list[dict[str, Any]]:
    r = await client.get(f"{R}/messages", headers=session_headers(reader))
    assert r.status_code == 200, r.text
    found: list[dict[str, Any]] = r.json()["messages"]
    return found


async def register(client: httpx2.AsyncClient, who: dict[str, Any], **body: Any) -> httpx2.Response:
    return await client.post(f"{R}/board-intents", json=body, headers=session_headers(who))


def claim_payload(task_id: str, who: dict[str, Any]) -> dict[str, Any]:
    return mutation_payload(
        task_id, status="assigned", assignee=who["actor_label"], assignee_agent_key=who["agent_key"]
    )


async def test_a_registration_refuses_a_bad_action_or_payload(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a, _ = await governed(client)
    refused: list[tuple[dict[str, Any], str]] = [
        ({"action_type": "task_merge", "payload": {}}, "action_type is invalid"),
        ({"payload": {}}, "action_type is invalid"),
        ({"action_type": "task_close", "payload": ["x"]}, "payload must be an object"),
        ({"action_type": "task_close"}, "payload must be an object"),
        (
            {"action_type": "task_create", "payload": {"title": "   "}},
            "task_create payload must include a title",
        ),
        (
            {"action_type": "task_create", "payload": {"title": 3}},
            "task_create payload must include a title",
        ),
    ]
    for body, error in refused:
        r = await register(client, a, **body)
        assert (r.status_code, r.json()) == (400, {"error": error}), body
    listed = (await client.get(f"{R}/board-intents", headers=person_headers())).json()
    assert listed["intents"] == []


async def test_a_registration_tells_the_manager_once_and_records_the_intent(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a, b = await governed(client)
    long_id = "task_" + "9" * 200
    r = await register(
        client,
        a,
        action_type="task_close",
        payload=mutation_payload("task_1", status="done"),
        task_id=long_id,
    )
    assert r.status_code == 201, r.text
    answer = r.json()
    intent = answer["intent"]
    assert (answer["room_id"], intent["task_id"]) == (ROOM, long_id[:128])
    assert intent["id"].startswith("bi_")
    text = (
        f"{b['actor_label']}: new board intent {intent['id']} from {a['actor_label']}:"
        " task close. Decide it with approve_board_intent or deny_board_intent."
    )
    (notice,) = [m for m in await messages(client, a) if intent["id"] in m["text"]]
    assert notice["text"] == text
    assert answer["manager_notification"] == {
        "delivered": True,
        "message_id": notice["id"],
        "target_manager_agent_session_id": b["session_id"],
    }
    # Registered again: the same intent, the same notice, nothing new posted or recorded.
    again = await register(
        client,
        a,
        action_type="task_close",
        payload=mutation_payload("task_1", status="done"),
        task_id=long_id,
    )
    assert (again.status_code, again.json()) == (201, answer)
    assert sum(intent["id"] in m["text"] for m in await messages(client, a)) == 1
    (event,) = await events(client, "board_intent")
    assert event == {
        **event,
        "action": "registered",
        "actor": a["actor_label"],
        "object_id": intent["id"],
        "state": "pending",
        "linked_task_id": long_id[:128],
        "metadata": {"action_type": "task_close"},
    }
    # Another action with the same payload, or another proposer, is another intent.
    other = await intend(client, a, "task_update", mutation_payload("task_1", status="done"))
    assert other["id"] != intent["id"]
    c = await registered(client, registration(name="C"))
    third = await intend(client, c, "task_close", mutation_payload("task_1", status="done"))
    assert third["id"] not in (intent["id"], other["id"])


async def test_without_a_manager_the_notice_says_the_intent_waits(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a, _ = await governed(client)
    r = await client.request("DELETE", f"{R}/board-managers/active", headers=person_headers())
    assert r.status_code == 200
    r = await register(
        client, a, action_type="task_create", payload=create_payload("x", None, None)
    )
    intent = r.json()["intent"]
    (notice,) = [m for m in await messages(client, a) if intent["id"] in m["text"]]
    assert notice["text"] == (
        f"New board intent {intent['id']} from {a['actor_label']}: Create task."
        " It is pending, but no Board Manager is assigned."
    )
    assert r.json()["manager_notification"]["target_manager_agent_session_id"] is None


async def test_only_the_manager_or_an_admin_decides(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a, b = await governed(client)
    intent = await intend(client, a, "task_create", create_payload("x", None, None))
    for verb in ("approve", "deny"):
        r = await decide(client, a, intent["id"], verb)
        assert (r.status_code, r.json()) == (403, {"error": MANAGER_ONLY_TEXT})
        r = await client.post(
            f"{R}/board-intents/{intent['id']}/{verb}",
            json={},
            headers=person_headers(OTHER_PERSON_TOKEN),
        )
        assert r.status_code == 403
        assert r.json()["error"] == "Only the room's admins can change its Board Manager settings."
        r = await client.post(
            f"/rooms/room_none/board-intents/{intent['id']}/{verb}",
            json={},
            headers=person_headers(),
        )
        assert r.status_code == 404
    # Once B no longer manages, its session decides nothing.
    r = await client.request("DELETE", f"{R}/board-managers/active", headers=person_headers())
    assert r.status_code == 200
    r = await decide(client, b, intent["id"])
    assert (r.status_code, r.json()) == (403, {"error": MANAGER_ONLY_TEXT})
    listed = (await client.get(f"{R}/board-intents", headers=person_headers())).json()["intents"]
    assert [i["status"] for i in listed] == ["pending"]


async def test_an_approved_creation_answers_and_records_the_task(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a, b = await governed(client)
    r = await client.post(f"{R}/messages", json={"text": "src"}, headers=session_headers(a))
    source = r.json()["id"]
    intent = await intend(client, a, "task_create", create_payload(" Ship ", " Do it ", source))
    await trio.sleep(5)
    now = room.clock.now_ms()
    r = await client.post(
        f"{R}/board-intents/{intent['id']}/approve",
        json={"reason": "  fine  "},
        headers=session_headers(b),
    )
    answer = r.json()
    task = answer["result"]["task"]
    assert (task["title"], task["description"], task["source_message_id"]) == (
        "Ship",
        "Do it",
        source,
    )
    assert (task["created_by"], task["status"], task["created_at"], task["updated_at"]) == (
        a["actor_label"],
        "accepted",
        iso(now),
        iso(now),
    )
    used = answer["intent"]
    assert (used["status"], used["task_id"], used["decision_by"], used["decision_reason"]) == (
        "used",
        task["id"],
        b["actor_label"],
        "fine",
    )
    assert (used["decided_at"], used["updated_at"]) == (iso(now), iso(now))
    notice = answer["proposer_notification"]
    (posted,) = [m for m in await messages(client, a) if m["id"] == notice["message_id"]]
    assert posted["text"] == (
        f"{a['actor_label']}: board intent {intent['id']} was approved."
        " The approved task was created; read the board for its current state."
    )
    created = [e for e in await events(client, "task") if e["action"] == "created"]
    assert [
        (e["object_id"], e["actor"], e["title"], e["state"], e["linked_task_id"]) for e in created
    ] == [(task["id"], a["actor_label"], "Ship", "accepted", task["id"])]
    decided = [e for e in await events(client, "board_intent") if e["action"] == "approved"]
    assert [(e["object_id"], e["actor"], e["state"], e["linked_task_id"]) for e in decided] == [
        (intent["id"], b["actor_label"], "used", task["id"])
    ]
    assert decided[0]["metadata"] == {"action_type": "task_create"}
    assert answer["room_id"] == ROOM


async def test_an_approved_claim_gives_the_proposer_the_task_and_a_work_lease(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a, b = await governed(client)
    pr = "https://github.com/acme/widgets/pull/3"
    task_id = await new_task(client)
    r = await client.patch(f"{R}/tasks/{task_id}", json={"pr_url": pr}, headers=person_headers())
    assert r.status_code == 200, r.text
    intent = await intend(client, a, "task_claim", claim_payload(task_id, a), task_id=task_id)
    await trio.sleep(5)
    now = iso(room.clock.now_ms())
    answer = (await decide(client, b, intent["id"])).json()
    task = answer["result"]["task"]
    assert (task["status"], task["assignee"], task["updated_at"]) == (
        "assigned",
        a["actor_label"],
        now,
    )
    (lease,) = task["active_leases"]
    assert (lease["kind"], lease["agent_session_id"], lease["pr_url"], lease["created_at"]) == (
        "work",
        a["session_id"],
        pr,
        now,
    )
    assert (answer["intent"]["status"], answer["intent"]["task_id"]) == ("used", task_id)
    assigned = [e for e in await events(client, "task") if e["action"] == "assigned"]
    assert [
        (e["actor"], e["object_id"], e["state"], e["title"], e["linked_task_id"]) for e in assigned
    ] == [(a["actor_label"], task_id, "assigned", "x", task_id)]
    # Deciding it again answers it as it stands: nothing left to follow up.
    again = (await decide(client, b, intent["id"])).json()
    assert again["result"] == {"kind": "approval_recorded", "requires_follow_up": False}
    (posted,) = [
        m
        for m in await messages(client, a)
        if m["id"] == again["proposer_notification"]["message_id"]
    ]
    assert posted["text"] == (
        f"{a['actor_label']}: board intent {intent['id']} was approved."
        " The approved action was already applied; read the board for its current state."
    )


async def test_a_claim_approval_is_refused_when_it_cannot_be_carried_out(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a, b = await governed(client)
    c = await registered(client, registration(name="C"))

    async def refused(intent: dict[str, Any], error: str) -> None:
        r = await decide(client, b, intent["id"])
        assert (r.status_code, r.json()) == (409, {"error": error, "code": CONFLICT})

    exact = "The claim must name the exact registered proposer and task."
    # Naming another agent, or a task that does not exist.
    task_id = await new_task(client)
    await refused(await intend(client, a, "task_claim", claim_payload(task_id, c)), exact)
    await refused(await intend(client, a, "task_claim", claim_payload("task_99", a)), exact)
    # A task that is not accepted.
    proposed = await new_task(client, "proposed")
    await refused(
        await intend(client, a, "task_claim", claim_payload(proposed, a)),
        "Claim an accepted task, or recover the same worker's assigned task.",
    )
    # The proposer's session ended.
    late = await intend(client, a, "task_claim", claim_payload(task_id, a))
    await disconnect(client, a)
    await refused(late, "The exact proposing or approving worker session is no longer active.")
    listed = (await client.get(f"{R}/board-intents", headers=person_headers())).json()["intents"]
    assert {i["status"] for i in listed} == {"pending"}


async def test_a_claim_approval_recovers_the_same_workers_assigned_task(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    """The task is already the proposer's: the approval gives it a work lease once, and
    keeps that lease (within its time) when approved again; an intent naming that lease
    stays open. An intent registered without a task id takes the task's."""
    a, b = await governed(client)
    task_id = await new_task(client)
    body = {
        "status": "assigned",
        "assignee": a["actor_label"],
        "assignee_agent_key": a["agent_key"],
    }
    r = await client.patch(f"{R}/tasks/{task_id}", json=body, headers=person_headers())
    assert r.status_code == 200, r.text
    intent = await intend(client, a, "task_claim", claim_payload(task_id, a))
    answer = (await decide(client, b, intent["id"])).json()
    assert answer["result"]["kind"] == "task_claimed", answer
    assert answer["intent"]["task_id"] == task_id
    (lease,) = answer["result"]["task"]["active_leases"]
    assert lease["agent_session_id"] == a["session_id"]
    (row,) = room.store.active_leases(ROOM)
    room.store.put_lease(attrs.evolve(row, expires_at=room.clock.now_ms() + 3_600_000))
    release = await intend(
        client, a, "task_override", lease_payload(task_id, "release", lease["id"])
    )
    again = await intend(client, a, "task_claim", {**claim_payload(task_id, a)})
    kept = (await decide(client, b, again["id"])).json()["result"]["task"]["active_leases"]
    assert [x["id"] for x in kept] == [lease["id"]]
    listed = (await client.get(f"{R}/board-intents", headers=person_headers())).json()
    assert {i["id"]: i["status"] for i in listed["intents"]}[release["id"]] == "pending"


async def test_a_claim_approval_refuses_a_task_assigned_to_another_agent_or_no_task_id(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a, b = await governed(client)
    c = await registered(client, registration(name="C"))
    task_id = await new_task(client)
    body = {
        "status": "assigned",
        "assignee": c["actor_label"],
        "assignee_agent_key": c["agent_key"],
    }
    r = await client.patch(f"{R}/tasks/{task_id}", json=body, headers=person_headers())
    assert r.status_code == 200, r.text
    intent = await intend(client, a, "task_claim", claim_payload(task_id, a))
    r = await decide(client, b, intent["id"])
    assert (r.status_code, r.json()) == (
        409,
        {
            "error": "Claim an accepted task, or recover the same worker's assigned task.",
            "code": CONFLICT,
        },
    )
    numbered = await intend(client, a, "task_claim", {**claim_payload(task_id, a), "task_id": 1})
    r = await decide(client, b, numbered["id"])
    assert (r.status_code, r.json()["error"]) == (
        409,
        "The claim must name the exact registered proposer and task.",
    )


async def test_a_claim_approval_never_replaces_another_sessions_work_lease(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    """Two sessions of one agent key: the first claimed the task before the room was
    governed; the second's approved claim may not take the first one's lease."""
    first = await registered(client, registration(instance=worker_id(), actor="owner/shared"))
    second = await registered(client, registration(instance=worker_id(), actor="owner/shared"))
    manager = await registered(client, registration(name="M"))
    task_id, lease = await claimed_task(client, first)
    r = await client.post(
        f"{R}/board-managers",
        json={"agent_session_id": manager["session_id"]},
        headers=person_headers(),
    )
    assert r.status_code == 201, r.text
    intent = await intend(client, second, "task_claim", claim_payload(task_id, second))
    r = await decide(client, manager, intent["id"])
    assert (r.status_code, r.json()) == (
        409,
        {
            "error": "The existing work lease cannot be replaced by claim approval.",
            "code": CONFLICT,
        },
    )
    r = await client.get(f"{R}/tasks/{task_id}", headers=person_headers())
    assert [x["id"] for x in r.json()["active_leases"]] == [lease["id"]]


async def test_a_token_approval_and_a_denial_answer_and_tell_the_proposer(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a, b = await governed(client)
    task_id = await new_task(client)
    close = await intend(
        client, a, "task_close", mutation_payload(task_id, status="cancelled"), task_id=task_id
    )
    now = room.clock.now_ms()
    answer = (await decide(client, b, close["id"])).json()
    # 256 random bits, URL-safe: shown once, kept only as a hash.
    assert re.fullmatch(r"[A-Za-z0-9_-]{43}", answer["approval_token"])
    approved = answer["intent"]
    assert (approved["status"], approved["expires_at"], approved["decided_at"]) == (
        "approved",
        iso(now + 30 * 60 * 1000),
        iso(now),
    )
    (posted,) = [
        m
        for m in await messages(client, a)
        if m["id"] == answer["proposer_notification"]["message_id"]
    ]
    assert posted["text"] == (
        f"{a['actor_label']}: board intent {close['id']} was approved."
        " Continue the exact approved action with board_intent_id."
    )
    r = await decide(client, b, close["id"])
    again = r.json()
    assert (r.status_code, again["room_id"], again["intent"]) == (200, ROOM, approved)
    assert again["result"] == {"kind": "approval_recorded", "requires_follow_up": True}
    assert set(again) == {"room_id", "intent", "proposer_notification", "result"}
    assert (await decide(client, b, close["id"], "deny")).status_code == 404
    # A denial, with its reason; the notice tells the proposer not to act.
    other = await intend(client, a, "task_close", mutation_payload(task_id, status="done"))
    await trio.sleep(3)
    r = await client.post(
        f"{R}/board-intents/{other['id']}/deny", json={"reason": " no "}, headers=person_headers()
    )
    denied = r.json()
    assert set(denied) == {"room_id", "intent", "proposer_notification"}
    assert (denied["room_id"], denied["intent"]["status"], denied["intent"]["decision_by"]) == (
        ROOM,
        "denied",
        "owner",
    )
    assert (
        denied["intent"]["decision_reason"],
        denied["intent"]["decided_at"],
        denied["intent"]["updated_at"],
    ) == ("no", iso(room.clock.now_ms()), iso(room.clock.now_ms()))
    (posted,) = [
        m
        for m in await messages(client, a)
        if m["id"] == denied["proposer_notification"]["message_id"]
    ]
    assert posted["text"] == (
        f"{a['actor_label']}: board intent {other['id']} was denied."
        " Do not perform the requested action."
    )
    decided = [(e["action"], e["actor"], e["state"]) for e in await events(client, "board_intent")]
    assert ("denied", "owner", "denied") in decided
    assert ("approved", b["actor_label"], "approved") in decided
    r = await decide(client, None, "x" * 129)
    assert (r.status_code, r.json()) == (404, {"error": "Pending board intent not found"})
    r = await decide(client, None, "x" * 129, "deny")
    assert (r.status_code, r.json()) == (404, {"error": "Pending board intent not found"})


async def test_a_session_id_without_its_token_decides_nothing(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    """Half a session's credentials is no session, and no admin either."""
    a, b = await governed(client)
    intent = await intend(client, a, "task_create", create_payload("x", None, None))
    headers = {**owner_headers(), "X-LetAgents-Agent-Session-Id": b["session_id"]}
    for verb in ("approve", "deny"):
        r = await client.post(f"{R}/board-intents/{intent['id']}/{verb}", json={}, headers=headers)
        assert r.status_code == 403, r.text
    listed = (await client.get(f"{R}/board-intents", headers=person_headers())).json()["intents"]
    assert [i["status"] for i in listed] == ["pending"]


async def test_an_owner_token_alone_registers_no_intent(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    """Registering writes: an agent's worker session, or an admin signed in as a person."""
    await governed(client)
    body = {"action_type": "task_create", "payload": create_payload("x", None, None)}
    r = await client.post(f"{R}/board-intents", json=body, headers=owner_headers())
    assert (r.status_code, r.json()) == (403, {"error": OWNER_NOT_PERSON_TEXT})
    listed = (await client.get(f"{R}/board-intents", headers=person_headers())).json()
    assert listed["intents"] == []


async def test_an_intent_whose_payload_names_no_task_is_approved_with_a_token(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a, b = await governed(client)
    intent = await intend(client, a, "task_update", {"status": "done"})
    r = await decide(client, b, intent["id"])
    assert (r.status_code, r.json()["result"]) == (
        200,
        {"kind": "approval_token", "requires_follow_up": True},
    )
