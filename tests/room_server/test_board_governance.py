"""A governed board (``…/board-settings``, ``…/board-managers``, ``…/board-intents``), on both
stores: modes, managers, intents and their decisions, and the gate on the board's writes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio
import trio.testing

from letagents_trio.room_server._board._governance import payload_hash
from letagents_trio.workers._intent_payloads import create_intent_payload as create_payload
from letagents_trio.workers._intent_payloads import lease_intent_payload as lease_payload
from letagents_trio.workers._intent_payloads import mutation_intent_payload as mutation_payload

from .helpers import ROOM, person_headers, registered, registration, session_headers

if TYPE_CHECKING:
    import httpx2

    from letagents_trio.room_server import Room

R = f"/rooms/{ROOM}"


async def governed(client: httpx2.AsyncClient, mode: str = "intent_required") -> tuple[Any, Any]:
    """Two workers, A and B, in a room whose admin set ``mode`` and made B its manager."""
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    r = await client.patch(
        f"{R}/board-settings", json={"manager_mode": mode}, headers=person_headers()
    )
    assert r.status_code == 200, r.text
    r = await client.post(
        f"{R}/board-managers", json={"agent_session_id": b["session_id"]}, headers=person_headers()
    )
    assert r.status_code == 201, r.text
    return a, b


async def intend(
    client: httpx2.AsyncClient,
    who: dict[str, Any],
    action: str,
    payload: dict[str, Any],
    **extra: Any,
) -> dict[str, Any]:
    body = {"action_type": action, "payload": payload, **extra}
    r = await client.post(f"{R}/board-intents", json=body, headers=session_headers(who))
    assert r.status_code == 201, r.text
    intent: dict[str, Any] = r.json()["intent"]
    return intent


async def decide(
    client: httpx2.AsyncClient, who: dict[str, Any] | None, intent_id: str, verb: str = "approve"
) -> httpx2.Response:
    headers = person_headers() if who is None else session_headers(who)
    return await client.post(f"{R}/board-intents/{intent_id}/{verb}", json={}, headers=headers)


async def test_settings_default_to_manager_optional_and_only_admins_change_them(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    r = await client.get(f"{R}/board-settings", headers=session_headers(a))
    body = r.json()
    assert (r.status_code, body["settings"]["manager_mode"], body["active_manager"]) == (
        200,
        "manager_optional",
        None,
    )
    assert body["pending_intent_count"] == 0
    # A worker's call carries its owner's bearer, but the room's admin is the owner
    # account: an agent of another owner is refused.
    other = await registered(
        client, registration(name="O", login="other"), owner="other-owner-token"
    )
    r = await client.patch(
        f"{R}/board-settings",
        json={"manager_mode": "off"},
        headers=session_headers(other, "other-owner-token"),
    )
    assert r.status_code == 403
    r = await client.patch(
        f"{R}/board-settings", json={"manager_mode": "x"}, headers=person_headers()
    )
    assert (r.status_code, r.json()) == (400, {"error": "manager_mode is invalid"})
    r = await client.patch(
        f"{R}/board-settings",
        json={"manager_mode": "off", "manager_failover": "never"},
        headers=person_headers(),
    )
    assert (r.status_code, r.json()) == (400, {"error": "manager_failover is invalid"})
    r = await client.patch(
        f"{R}/board-settings", json={"manager_mode": "intent_required"}, headers=person_headers()
    )
    assert r.json()["settings"]["manager_mode"] == "intent_required"
    assert r.json()["settings"]["manager_failover"] == "auto"
    r = await client.post(
        f"{R}/board-managers", json={"agent_session_id": "nope"}, headers=person_headers()
    )
    assert (r.status_code, r.json()) == (404, {"error": "Active agent session not found"})
    r = await client.post(f"{R}/board-managers", json={}, headers=person_headers())
    assert (r.status_code, r.json()) == (400, {"error": "agent_session_id is required"})


async def test_a_create_intent_approved_by_the_manager_creates_the_task(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a, b = await governed(client)
    # Without an approval the room refuses the agent's add_task.
    r = await client.post(f"{R}/tasks", json={"title": "Ship"}, headers=session_headers(a))
    assert (r.status_code, r.json()) == (
        409,
        {
            "error": "Board Manager approval is required for this board action.",
            "code": "board_intent_required",
        },
    )
    payload = create_payload("  Ship  ", "Do it", None)
    assert payload == {"title": "Ship", "description": "Do it", "source_message_id": None}
    intent = await intend(client, a, "task_create", payload)
    assert (intent["status"], intent["proposer_actor_label"]) == ("pending", a["actor_label"])
    assert intent["payload_hash"] == payload_hash(payload)
    too_long = {"action_type": "task_create", "payload": create_payload("x" * 513, None, None)}
    r = await client.post(f"{R}/board-intents", json=too_long, headers=session_headers(a))
    assert (r.status_code, r.json()) == (400, {"error": "title must be at most 512 characters"})
    # The same proposer registering the same payload again gets the same intent.
    assert (await intend(client, a, "task_create", payload))["id"] == intent["id"]
    # A worker that is not the manager may not decide; the manager may.
    r = await decide(client, a, intent["id"])
    assert r.status_code == 403
    assert r.json()["error"] == (
        "Only the active Board Manager can decide board intents with worker credentials."
    )
    r = await decide(client, b, intent["id"])
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["result"]["kind"] == "task_created"
    task = answer["result"]["task"]
    assert (task["title"], task["description"], task["status"]) == ("Ship", "Do it", "accepted")
    assert (answer["intent"]["status"], answer["intent"]["task_id"]) == ("used", task["id"])
    assert answer["intent"]["decision_by"] == b["actor_label"]
    assert answer["proposer_notification"]["delivered"] is True
    # Deciding it again answers the decision as it stands; the board has one task.
    again = (await decide(client, b, intent["id"])).json()
    assert (again["result"]["kind"], again["result"]["task"]["id"]) == ("task_created", task["id"])
    board = (await client.get(f"{R}/tasks", headers=session_headers(a))).json()["tasks"]
    assert [t["id"] for t in board] == [task["id"]]
    # The room was told, once per intent and outcome.
    page = await client.get(f"{R}/messages", headers=session_headers(a))
    texts = [m["text"] for m in page.json()["messages"]]
    assert sum(intent["id"] in text and "was approved" in text for text in texts) == 1
    assert any(intent["id"] in text and b["actor_label"] in text for text in texts)


async def test_a_denied_intent_and_a_changed_payload_are_refused_with_the_rooms_codes(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a, b = await governed(client)
    payload = create_payload("Ship", None, None)
    denied = await intend(client, a, "task_create", payload)
    r = await decide(client, b, denied["id"], "deny")
    assert (r.status_code, r.json()["intent"]["status"]) == (200, "denied")
    assert (await decide(client, b, denied["id"], "deny")).json()["intent"]["status"] == "denied"
    assert (await decide(client, b, denied["id"])).status_code == 404  # no longer pending
    body = {"title": "Ship", "board_intent_id": denied["id"]}
    r = await client.post(f"{R}/tasks", json=body, headers=session_headers(a))
    assert (r.status_code, r.json()["code"]) == (409, "board_intent_not_approved")
    assert r.json()["error"] == f"Board intent {denied['id']} is denied, not approved."
    # An admin approves a close intent: a token, for exactly that payload.
    r = await client.post(f"{R}/tasks", json={"title": "x"}, headers=person_headers())
    task_id = r.json()["id"]
    close = await intend(
        client, a, "task_close", mutation_payload(task_id, status="cancelled"), task_id=task_id
    )
    r = await decide(client, None, close["id"])
    token = r.json()["approval_token"]
    assert r.json()["result"] == {"kind": "approval_token", "requires_follow_up": True}
    patch = {"status": "cancelled", "board_intent_id": close["id"], "board_approval_token": "bad"}
    r = await client.patch(f"{R}/tasks/{task_id}", json=patch, headers=session_headers(a))
    assert (r.status_code, r.json()["code"]) == (409, "board_intent_token_invalid")
    patch = {**patch, "status": "done", "board_approval_token": token}
    r = await client.patch(f"{R}/tasks/{task_id}", json=patch, headers=session_headers(a))
    assert (r.status_code, r.json()["code"]) == (409, "board_intent_payload_mismatch")
    patch["status"] = "cancelled"
    r = await client.patch(f"{R}/tasks/{task_id}", json=patch, headers=session_headers(a))
    assert (r.status_code, r.json()["status"]) == (200, "cancelled")
    r = await client.patch(f"{R}/tasks/{task_id}", json=patch, headers=session_headers(a))
    assert r.json()["code"] == "board_intent_not_approved"  # used


async def test_a_claim_intent_approval_assigns_the_task_and_its_work_lease(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a, b = await governed(client)
    r = await client.post(f"{R}/tasks", json={"title": "x"}, headers=person_headers())
    task_id = r.json()["id"]
    await client.patch(
        f"{R}/tasks/{task_id}", json={"status": "accepted"}, headers=person_headers()
    )
    claim = {"status": "assigned", "assignee": a["actor_label"]}
    r = await client.patch(f"{R}/tasks/{task_id}", json=claim, headers=session_headers(a))
    assert r.json()["code"] == "board_intent_required"
    payload = mutation_payload(
        task_id, status="assigned", assignee=a["actor_label"], assignee_agent_key=a["agent_key"]
    )
    intent = await intend(client, a, "task_claim", payload, task_id=task_id)
    r = await decide(client, b, intent["id"])
    result = r.json()["result"]
    assert (result["kind"], result["requires_follow_up"]) == ("task_claimed", False)
    task = result["task"]
    assert (task["status"], task["assignee"], task["assignee_agent_key"]) == (
        "assigned",
        a["actor_label"],
        a["agent_key"],
    )
    (lease,) = task["active_leases"]
    assert (lease["kind"], lease["agent_session_id"]) == ("work", a["session_id"])
    # A holds the work: it moves the task on without another intent.
    r = await client.patch(
        f"{R}/tasks/{task_id}", json={"status": "in_progress"}, headers=session_headers(a)
    )
    assert (r.status_code, r.json()["status"]) == (200, "in_progress")
    # Its lease release is high-impact: it needs an intent naming that lease.
    r = await client.post(
        f"{R}/tasks/{task_id}/lease-action", json={"action": "release"}, headers=session_headers(a)
    )
    assert r.json()["code"] == "board_intent_required"
    release = await intend(
        client, a, "task_override", lease_payload(task_id, "release", lease["id"]), task_id=task_id
    )
    await decide(client, b, release["id"])
    body = {"action": "release", "board_intent_id": release["id"]}  # its own session, no token
    r = await client.post(
        f"{R}/tasks/{task_id}/lease-action", json=body, headers=session_headers(a)
    )
    assert (r.status_code, r.json()["task"]["status"]) == (200, "accepted"), r.text


async def test_manager_optional_governs_only_while_a_manager_is_assigned(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a, _ = await governed(client, "manager_optional")
    r = await client.post(f"{R}/tasks", json={"title": "x"}, headers=session_headers(a))
    assert r.status_code == 409
    r = await client.request(
        "DELETE", f"{R}/board-managers/active", json={"reason": "done"}, headers=person_headers()
    )
    assert (r.json()["manager"]["status"], r.json()["manager"]["release_reason"]) == (
        "released",
        "done",
    )
    r = await client.post(f"{R}/tasks", json={"title": "x"}, headers=session_headers(a))
    assert r.status_code == 201
    settings = (await client.get(f"{R}/board-settings", headers=person_headers())).json()
    assert settings["active_manager"] is None


async def test_intents_expire_pending_after_a_day_and_approved_after_half_an_hour(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a, b = await governed(client)
    pending = await intend(client, a, "task_create", create_payload("p", None, None))
    r = await client.post(f"{R}/tasks", json={"title": "x"}, headers=person_headers())
    task_id = r.json()["id"]
    payload = mutation_payload(task_id, status="cancelled")
    close = await intend(client, a, "task_close", payload, task_id=task_id)
    token = (await decide(client, b, close["id"])).json()["approval_token"]
    await trio.sleep(30 * 60 + 1)
    patch = {"status": "cancelled", "board_intent_id": close["id"], "board_approval_token": token}
    r = await client.patch(f"{R}/tasks/{task_id}", json=patch, headers=session_headers(a))
    assert (r.status_code, r.json()) == (
        409,
        {
            "error": f"Board intent {close['id']} approval has expired.",
            "code": "board_intent_expired",
        },
    )
    listed = (
        await client.get(f"{R}/board-intents?status=pending", headers=person_headers())
    ).json()
    assert [i["id"] for i in listed["intents"]] == [pending["id"]]
    await trio.sleep(24 * 60 * 60)
    listed = (await client.get(f"{R}/board-intents", headers=person_headers())).json()["intents"]
    assert [i["status"] for i in listed] == ["expired", "expired"]
    assert (await decide(client, b, pending["id"])).status_code == 404
    settings = (await client.get(f"{R}/board-settings", headers=person_headers())).json()
    assert settings["pending_intent_count"] == 0


async def test_a_change_to_the_task_supersedes_the_intents_it_made_moot(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a, b = await governed(client)
    c = await registered(client, registration(name="C"))
    r = await client.post(f"{R}/tasks", json={"title": "x"}, headers=person_headers())
    task_id = r.json()["id"]
    await client.patch(
        f"{R}/tasks/{task_id}", json={"status": "accepted"}, headers=person_headers()
    )
    close = await intend(
        client, a, "task_close", mutation_payload(task_id, status="cancelled"), task_id=task_id
    )
    token = (await decide(client, b, close["id"])).json()["approval_token"]
    claims = [
        await intend(
            client,
            who,
            "task_claim",
            mutation_payload(
                task_id,
                status="assigned",
                assignee=who["actor_label"],
                assignee_agent_key=who["agent_key"],
            ),
            task_id=task_id,
        )
        for who in (a, c)
    ]
    assert (await decide(client, b, claims[0]["id"])).json()["result"]["kind"] == "task_claimed"
    listed = (await client.get(f"{R}/board-intents", headers=person_headers())).json()["intents"]
    status = {i["id"]: (i["status"], i["decision_reason"]) for i in listed}
    assert status[claims[0]["id"]][0] == "used"
    assert status[claims[1]["id"]] == ("superseded", f"Superseded: {task_id} moved to assigned.")
    assert status[close["id"]][0] == "superseded"  # approved for the task as it stood
    patch = {"status": "cancelled", "board_intent_id": close["id"], "board_approval_token": token}
    r = await client.patch(f"{R}/tasks/{task_id}", json=patch, headers=session_headers(a))
    assert r.json()["error"] == f"Board intent {close['id']} is superseded, not approved."


async def test_an_approved_claim_fires_the_tasks_wake_rules_as_a_claim_does(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a, b = await governed(client)
    r = await client.post(f"{R}/tasks", json={"title": "x"}, headers=person_headers())
    task_id = r.json()["id"]
    await client.patch(
        f"{R}/tasks/{task_id}", json={"status": "accepted"}, headers=person_headers()
    )
    rule = {"event": "task.status_changed", "arguments": {"task_id": task_id}}
    r = await client.post(f"{R}/wake-rules", json={"rule": rule}, headers=session_headers(b))
    assert r.status_code == 201, r.text
    payload = mutation_payload(
        task_id, status="assigned", assignee=a["actor_label"], assignee_agent_key=a["agent_key"]
    )
    intent = await intend(client, a, "task_claim", payload, task_id=task_id)
    assert (await decide(client, b, intent["id"])).status_code == 200
    page = await client.get(f"{R}/messages", headers=session_headers(b))
    woke = [m["text"] for m in page.json()["messages"] if m["source"] == "wake_rule"]
    assert len(woke) == 1
    assert f"{task_id} moved to assigned" in woke[0]
