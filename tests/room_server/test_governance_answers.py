"""A governed board's answers whole and its approvals' refusals, on both stores.

The settings, a manager assignment and an intent as the letagents API shows
them (every field, every time); what the settings keep when a change leaves a
field out; who may be made manager; each refusal of an approval an action
carries (its code and text, the letagents API's); and which open intents a
change to their task makes moot.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

import trio
import trio.testing

from letagents_trio.room_server._board._governance import payload_hash
from letagents_trio.room_server._wire import iso
from letagents_trio.workers._intent_payloads import create_intent_payload as create_payload
from letagents_trio.workers._intent_payloads import lease_intent_payload as lease_payload
from letagents_trio.workers._intent_payloads import mutation_intent_payload as mutation_payload

from .helpers import ROOM, disconnect, person_headers, registered, registration, session_headers
from .test_board_governance import decide, governed, intend

if TYPE_CHECKING:
    import httpx2

    from letagents_trio.room_server import Room

R = f"/rooms/{ROOM}"


async def events(client: httpx2.AsyncClient, event_type: str) -> list[dict[str, Any]]:
    r = await client.get(f"{R}/events?event_type={event_type}", headers=person_headers())
    assert r.status_code == 200, r.text
    found: list[dict[str, Any]] = r.json()["events"]
    return found


async def new_task(client: httpx2.AsyncClient, status: str = "accepted") -> str:
    r = await client.post(f"{R}/tasks", json={"title": "x"}, headers=person_headers())
    task_id: str = r.json()["id"]
    if status != "proposed":
        r = await client.patch(
            f"{R}/tasks/{task_id}", json={"status": status}, headers=person_headers()
        )
        assert r.status_code == 200, r.text
    return task_id


async def close_intent(
    client: httpx2.AsyncClient, who: dict[str, Any], task_id: str
) -> dict[str, Any]:
    """``who``'s intent to cancel ``task_id``, pending."""
    return await intend(
        client, who, "task_close", mutation_payload(task_id, status="cancelled"), task_id=task_id
    )


def denial(code: str, error: str) -> dict[str, str]:
    return {"error": error, "code": code}


async def test_the_settings_keep_their_creation_and_failover_and_record_each_change(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    start = iso(room.clock.now_ms())
    r = await client.get(f"{R}/board-settings", headers=session_headers(a))
    assert r.json() == {
        "room_id": ROOM,
        "settings": {
            "room_id": ROOM,
            "manager_mode": "manager_optional",
            "manager_failover": "auto",
            "updated_by": None,
            "created_at": start,
            "updated_at": start,
        },
        "active_manager": None,
        "pending_intent_count": 0,
    }
    await trio.sleep(5)
    first = iso(room.clock.now_ms())
    body = {"manager_mode": " intent_required ", "manager_failover": " announce "}
    r = await client.patch(f"{R}/board-settings", json=body, headers=person_headers())
    assert (r.status_code, r.json()) == (
        200,
        {
            "room_id": ROOM,
            "settings": {
                "room_id": ROOM,
                "manager_mode": "intent_required",
                "manager_failover": "announce",
                "updated_by": "owner",
                "created_at": first,
                "updated_at": first,
            },
        },
    )
    await trio.sleep(5)
    later = iso(room.clock.now_ms())
    r = await client.patch(
        f"{R}/board-settings", json={"manager_mode": "off"}, headers=person_headers()
    )
    settings = r.json()["settings"]
    assert (settings["manager_failover"], settings["created_at"], settings["updated_at"]) == (
        "announce",
        first,
        later,
    )
    got = (await client.get(f"{R}/board-settings", headers=session_headers(a))).json()
    assert got["settings"] == settings
    recorded = [
        (e["action"], e["actor"], e["state"]) for e in await events(client, "board_settings")
    ]
    assert recorded == [
        ("mode_changed", "owner", "intent_required"),
        ("mode_changed", "owner", "off"),
    ]


async def test_a_manager_is_shown_whole_replaced_and_released_with_its_reasons(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    await trio.sleep(5)
    now = iso(room.clock.now_ms())
    body = {"agent_session_id": f" {a['session_id']} ", "runtime_source": "open_model"}
    r = await client.post(f"{R}/board-managers", json=body, headers=person_headers())
    assert r.status_code == 201, r.text
    manager = r.json()["manager"]
    assert r.json() == {"room_id": ROOM, "manager": manager}
    assert manager == {
        "id": manager["id"],
        "room_id": ROOM,
        "agent_session_id": a["session_id"],
        "agent_key": a["agent_key"],
        "actor_label": a["actor_label"],
        "runtime_source": "open_model",
        "assigned_by": "owner",
        "status": "active",
        "last_heartbeat_at": iso(room.store.get_session(a["session_id"]).last_seen_at),  # type: ignore[union-attr]
        "released_by": None,
        "release_reason": None,
        "released_at": None,
        "created_at": now,
        "updated_at": now,
    }
    assert manager["id"].startswith("bm_")
    shown = (await client.get(f"{R}/board-settings", headers=person_headers())).json()
    assert shown["active_manager"] == manager
    # An unknown runtime source is recorded as the desktop's; the new manager replaces A.
    await trio.sleep(5)
    replaced_at = iso(room.clock.now_ms())
    body = {"agent_session_id": b["session_id"], "runtime_source": "cloud"}
    r = await client.post(f"{R}/board-managers", json=body, headers=person_headers())
    assert r.json()["manager"]["runtime_source"] == "desktop_managed"
    shown = (await client.get(f"{R}/board-settings", headers=person_headers())).json()
    assert shown["active_manager"]["agent_session_id"] == b["session_id"]
    replaced = {"reason": "Replaced by a new Board Manager assignment."}
    managed = await events(client, "board_manager")
    assert [(e["action"], e["object_id"], e["metadata"]) for e in managed] == [
        ("assigned", manager["id"], {"agent_session_id": a["session_id"]}),
        ("released", manager["id"], replaced),
        ("assigned", r.json()["manager"]["id"], {"agent_session_id": b["session_id"]}),
    ]
    assert {(e["actor"], e["title"]) for e in managed[:2]} == {("owner", a["actor_label"])}
    # Released without a reason: the room's own.
    await trio.sleep(5)
    released_at = iso(room.clock.now_ms())
    r = await client.request("DELETE", f"{R}/board-managers/active", headers=person_headers())
    released = r.json()["manager"]
    assert (r.status_code, released["status"], released["release_reason"]) == (
        200,
        "released",
        "Board Manager released.",
    )
    assert (released["released_by"], released["released_at"], released["updated_at"]) == (
        "owner",
        released_at,
        released_at,
    )
    assert replaced_at != released_at
    r = await client.request("DELETE", f"{R}/board-managers/active", headers=person_headers())
    assert (r.status_code, r.json()) == (200, {"room_id": ROOM, "manager": None})


async def test_only_a_live_worker_session_of_the_room_is_made_manager(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    elsewhere = await registered(client, registration(name="E"), room="room_other")
    gone = await registered(client, registration(name="G"))
    r = await client.post(
        f"{R}/agent-sessions/{gone['session_id']}/disconnect",
        json={"agent_session_id": gone["session_id"], "agent_session_token": gone["session_token"]},
    )
    assert r.status_code == 200, r.text
    not_found = {"error": "Active agent session not found"}
    for session_id in (elsewhere["session_id"], gone["session_id"], "x" * 129):
        r = await client.post(
            f"{R}/board-managers", json={"agent_session_id": session_id}, headers=person_headers()
        )
        assert (r.status_code, r.json()) == (404, not_found)
    assert (await client.get(f"{R}/board-settings", headers=person_headers())).json()[
        "active_manager"
    ] is None


async def test_an_intent_is_shown_whole_and_listed_oldest_first_by_status(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a, b = await governed(client)
    task_id = await new_task(client)
    now = room.clock.now_ms()
    payload = mutation_payload(task_id, status="cancelled")
    r = await client.post(
        f"{R}/board-intents",
        json={"action_type": "task_close", "payload": payload, "task_id": f" {task_id} "},
        headers=session_headers(a),
    )
    intent = r.json()["intent"]
    assert intent == {
        "id": intent["id"],
        "room_id": ROOM,
        "task_id": task_id,
        "action_type": "task_close",
        "payload": payload,
        "payload_hash": payload_hash(payload),
        "status": "pending",
        "proposer_actor_label": a["actor_label"],
        "proposer_actor_key": a["agent_key"],
        "proposer_actor_instance_id": a["agent_instance_id"],
        "proposer_agent_session_id": a["session_id"],
        "decision_by": None,
        "decision_reason": None,
        "decided_at": None,
        "expires_at": iso(now + 24 * 60 * 60 * 1000),
        "created_at": iso(now),
        "updated_at": iso(now),
    }
    assert "approval_token_hash" not in intent
    second = await intend(client, a, "task_create", create_payload("y", None, None))
    await decide(client, b, second["id"], "deny")
    listed = (await client.get(f"{R}/board-intents", headers=session_headers(b))).json()
    assert [i["id"] for i in listed["intents"]] == [intent["id"], second["id"]]
    assert listed["intents"][0] == intent
    r = await client.get(f"{R}/board-intents?status=denied", headers=session_headers(b))
    assert [i["id"] for i in r.json()["intents"]] == [second["id"]]
    shown = (await client.get(f"{R}/board-settings", headers=person_headers())).json()
    assert shown["pending_intent_count"] == 1


async def test_the_intent_list_shows_at_most_200(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a, _ = await governed(client)
    made = [
        (await intend(client, a, "task_create", create_payload(f"t{n}", None, None)))["id"]
        for n in range(201)
    ]
    listed = (await client.get(f"{R}/board-intents", headers=person_headers())).json()["intents"]
    assert [i["id"] for i in listed] == made[:200]


async def test_an_approval_is_refused_for_another_action_worker_or_manager(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a, b = await governed(client)
    c = await registered(client, registration(name="C"))
    task_id = await new_task(client)
    close = await close_intent(client, a, task_id)
    assert (await decide(client, b, close["id"])).status_code == 200
    cancel = {"status": "cancelled", "board_intent_id": close["id"]}
    # Without a token, only the proposer's own session carries it out.
    r = await client.patch(f"{R}/tasks/{task_id}", json=cancel, headers=session_headers(c))
    assert (r.status_code, r.json()) == (
        409,
        denial(
            "board_intent_worker_mismatch",
            "Board intent approval belongs to a different worker session.",
        ),
    )
    # The intent approves a close, not a claim.
    claim = {"status": "assigned", "assignee": a["actor_label"], "board_intent_id": close["id"]}
    r = await client.patch(f"{R}/tasks/{task_id}", json=claim, headers=session_headers(a))
    assert (r.status_code, r.json()) == (
        409,
        denial(
            "board_intent_action_mismatch",
            f"Board intent {close['id']} does not approve task_claim.",
        ),
    )
    unknown = {"status": "cancelled", "board_intent_id": "bi_nope", "board_approval_token": "t"}
    r = await client.patch(f"{R}/tasks/{task_id}", json=unknown, headers=session_headers(a))
    assert (r.status_code, r.json()) == (
        409,
        denial("board_intent_not_found", "Board intent approval was not found."),
    )
    # An id that is no text, or blank, names no intent.
    for named in (7, "   "):
        body = {"status": "cancelled", "board_intent_id": named, "board_approval_token": "t"}
        r = await client.patch(f"{R}/tasks/{task_id}", json=body, headers=session_headers(a))
        assert r.json()["code"] == "board_intent_required"
    # The manager who approved it is released: the approval lapses.
    r = await client.request("DELETE", f"{R}/board-managers/active", headers=person_headers())
    assert r.status_code == 200
    r = await client.patch(
        f"{R}/tasks/{task_id}",
        json={**cancel, "board_approval_token": " "},
        headers=session_headers(a),
    )
    assert (r.status_code, r.json()) == (
        409,
        denial(
            "board_intent_manager_changed",
            f"The Board Manager who approved board intent {close['id']} is no longer assigned;"
            " request approval again.",
        ),
    )


async def test_an_admins_approval_outlives_the_manager_and_its_token_is_trimmed(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a, _ = await governed(client)
    task_id = await new_task(client)
    close = await close_intent(client, a, task_id)
    token = (await decide(client, None, close["id"])).json()["approval_token"]
    r = await client.request("DELETE", f"{R}/board-managers/active", headers=person_headers())
    assert r.status_code == 200
    body = {
        "status": "cancelled",
        "board_intent_id": f" {close['id']} ",
        "board_approval_token": f" {token} ",
    }
    r = await client.patch(f"{R}/tasks/{task_id}", json=body, headers=session_headers(a))
    assert (r.status_code, r.json()["status"]) == (200, "cancelled"), r.text
    used = await events(client, "board_intent")
    assert [(e["action"], e["state"]) for e in used][-1] == ("used", "used")
    assert (used[-1]["object_id"], used[-1]["actor"], used[-1]["linked_task_id"]) == (
        close["id"],
        a["actor_label"],
        task_id,
    )
    assert used[-1]["metadata"] == {"action_type": "task_close"}


async def test_an_expired_intent_says_whether_its_approval_or_itself_expired(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a, b = await governed(client)
    task_id = await new_task(client)
    pending = await intend(
        client, a, "task_close", mutation_payload(task_id, status="done"), task_id=task_id
    )
    approved = await intend(
        client, a, "task_close", mutation_payload(task_id, status="cancelled"), task_id=task_id
    )
    assert (await decide(client, b, approved["id"])).status_code == 200
    # At exactly half an hour the approval is over; a second before, it is not.
    await trio.sleep(30 * 60 - 1)
    listed = (await client.get(f"{R}/board-intents", headers=person_headers())).json()["intents"]
    assert [i["status"] for i in listed] == ["pending", "approved"]
    await trio.sleep(1)
    listed = (await client.get(f"{R}/board-intents", headers=person_headers())).json()["intents"]
    assert [i["status"] for i in listed] == ["pending", "expired"]
    await trio.sleep(24 * 60 * 60)
    for intent, status, what in ((approved, "cancelled", "approval has"), (pending, "done", "has")):
        body = {"status": status, "board_intent_id": intent["id"]}
        r = await client.patch(f"{R}/tasks/{task_id}", json=body, headers=session_headers(a))
        assert (r.status_code, r.json()) == (
            409,
            denial("board_intent_expired", f"Board intent {intent['id']} {what} expired."),
        )


async def test_a_payloads_hash_is_sha256_of_its_canonical_json(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    """Keys sorted, no spaces, text as UTF-8 (not escaped): the letagents API's digest."""
    a, _ = await governed(client)
    intent = await intend(client, a, "task_create", create_payload("Café", None, None))
    canonical = '{"description":null,"source_message_id":null,"title":"Café"}'
    assert intent["payload_hash"] == hashlib.sha256(canonical.encode("utf-8")).hexdigest()


async def test_a_tokens_and_a_payloads_refusals_are_whole(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a, b = await governed(client)
    task_id = await new_task(client)
    close = await close_intent(client, a, task_id)
    token = (await decide(client, b, close["id"])).json()["approval_token"]
    body = {"status": "cancelled", "board_intent_id": close["id"], "board_approval_token": "bad"}
    r = await client.patch(f"{R}/tasks/{task_id}", json=body, headers=session_headers(a))
    assert (r.status_code, r.json()) == (
        409,
        denial("board_intent_token_invalid", "Board intent approval token is invalid."),
    )
    body = {**body, "status": "done", "board_approval_token": token}
    r = await client.patch(f"{R}/tasks/{task_id}", json=body, headers=session_headers(a))
    assert (r.status_code, r.json()) == (
        409,
        denial(
            "board_intent_payload_mismatch",
            "Board intent approval does not match this action payload.",
        ),
    )


async def test_an_approved_reopen_lets_an_agent_reopen_a_closed_task(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a, b = await governed(client)
    task_id = await new_task(client, "cancelled")
    reopen = {"status": "accepted"}
    r = await client.patch(f"{R}/tasks/{task_id}", json=reopen, headers=session_headers(a))
    assert r.json()["code"] == "board_intent_required"
    intent = await intend(
        client, a, "task_override", mutation_payload(task_id, status="accepted"), task_id=task_id
    )
    assert (await decide(client, b, intent["id"])).status_code == 200
    body = {**reopen, "board_intent_id": intent["id"]}
    r = await client.patch(f"{R}/tasks/{task_id}", json=body, headers=session_headers(a))
    assert (r.status_code, r.json()["status"]) == (200, "accepted"), r.text


async def test_an_approval_given_before_its_task_existed_is_carried_out(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    """The approval kept no state of a task that did not exist: nothing to have changed."""
    a, b = await governed(client)
    close = await close_intent(client, a, "task_1")
    assert (await decide(client, b, close["id"])).status_code == 200
    task_id = await new_task(client, "proposed")
    assert task_id == "task_1"
    body = {"status": "cancelled", "board_intent_id": close["id"]}
    r = await client.patch(f"{R}/tasks/{task_id}", json=body, headers=session_headers(a))
    assert (r.status_code, r.json()["status"]) == (200, "cancelled"), r.text


async def test_a_decided_intent_never_expires_and_an_expiry_is_stamped_when_seen(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a, b = await governed(client)
    denied = await intend(client, a, "task_create", create_payload("d", None, None))
    assert (await decide(client, b, denied["id"], "deny")).status_code == 200
    pending = await intend(client, a, "task_create", create_payload("p", None, None))
    await trio.sleep(24 * 60 * 60 + 7)
    seen = iso(room.clock.now_ms())
    listed = (await client.get(f"{R}/board-intents", headers=person_headers())).json()["intents"]
    assert [(i["id"], i["status"]) for i in listed] == [
        (denied["id"], "denied"),
        (pending["id"], "expired"),
    ]
    assert listed[1]["updated_at"] == seen


def _states(listed: list[dict[str, Any]]) -> dict[str, tuple[str, str | None]]:
    return {i["id"]: (i["status"], i["decision_reason"]) for i in listed}


async def test_a_claim_stays_open_while_its_task_is_accepted_or_its_proposers(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a, b = await governed(client)
    c = await registered(client, registration(name="C"))
    task_id = await new_task(client, "proposed")

    def claim_of(who: dict[str, Any]) -> dict[str, Any]:
        return mutation_payload(
            task_id,
            status="assigned",
            assignee=who["actor_label"],
            assignee_agent_key=who["agent_key"],
        )

    own = await intend(client, a, "task_claim", claim_of(a), task_id=task_id)
    other = await intend(client, c, "task_claim", claim_of(c), task_id=task_id)
    close = await close_intent(client, a, task_id)
    assert (await decide(client, b, close["id"])).status_code == 200

    async def move(**body: Any) -> dict[str, tuple[str, str | None]]:
        r = await client.patch(f"{R}/tasks/{task_id}", json=body, headers=person_headers())
        assert r.status_code == 200, r.text
        got = await client.get(f"{R}/board-intents", headers=person_headers())
        return _states(got.json()["intents"])

    states = await move(status="accepted")
    assert (states[own["id"]], states[other["id"]]) == (("pending", None), ("pending", None))
    assert states[close["id"]] == (
        "superseded",
        f"Superseded: {task_id} moved to accepted after {b['actor_label']} approved it.",
    )
    states = await move(
        status="assigned", assignee=a["actor_label"], assignee_agent_key=a["agent_key"]
    )
    assert states[own["id"]] == ("pending", None)
    assert states[other["id"]] == ("superseded", f"Superseded: {task_id} moved to assigned.")
    # An approved move is kept across an edit that changes neither status nor assignee.
    back = await intend(
        client, a, "task_update", mutation_payload(task_id, status="proposed"), task_id=task_id
    )
    assert (await decide(client, b, back["id"])).status_code == 200
    states = await move(title="Renamed")
    assert states[back["id"]] == ("approved", None)


async def test_a_move_supersedes_the_pending_moves_it_reached_or_passed(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    """The letagents API's rules: a move is moot once its task reached or passed its status;
    from a closed status, once the task can no longer take that step; a reopen, once the
    task is accepted; a lease action, once the lease it names is no longer the work lease."""
    a, b = await governed(client)
    task_id = await new_task(client)

    async def intent(action: str, payload: dict[str, Any]) -> str:
        made = await intend(client, a, action, payload, task_id=task_id)
        return str(made["id"])

    def to(status: str | None) -> dict[str, Any]:
        return mutation_payload(task_id, status=status)

    done = await intent("task_close", to("done"))
    cancel = await intent("task_close", to("cancelled"))
    reopen = await intent("task_override", to("accepted"))
    progress = await intent("task_update", to("in_progress"))
    blocked = await intent("task_update", to("blocked"))
    aimless = await intent("task_close", to(None))
    # A creation names no task to be superseded by, whatever its payload holds.
    create = await intent("task_create", {"title": "c", "task_id": task_id, "status": "assigned"})

    async def states() -> dict[str, tuple[str, str | None]]:
        got = await client.get(f"{R}/board-intents", headers=person_headers())
        return _states(got.json()["intents"])

    async def move(who: dict[str, str], **body: Any) -> dict[str, tuple[str, str | None]]:
        r = await client.patch(f"{R}/tasks/{task_id}", json=body, headers=who)
        assert r.status_code == 200, r.text
        return await states()

    def moved(status: str) -> tuple[str, str]:
        return ("superseded", f"Superseded: {task_id} moved to {status}.")

    open_ = ("pending", None)
    s = await move(
        person_headers(),
        status="assigned",
        assignee=a["actor_label"],
        assignee_agent_key=a["agent_key"],
    )
    assert [s[i] for i in (done, cancel, reopen, progress, blocked, aimless, create)] == [open_] * 7
    r = await client.patch(
        f"{R}/tasks/{task_id}", json={"status": "in_progress"}, headers=session_headers(a)
    )
    assert r.status_code == 200, r.text
    (lease,) = r.json()["active_leases"]
    s = await states()
    assert s[progress] == moved("in_progress")
    assert [s[i] for i in (done, cancel, reopen, blocked, aimless, create)] == [open_] * 6
    named = await intent("task_override", lease_payload(task_id, "release", lease["id"]))
    stale = await intent("task_override", lease_payload(task_id, "release", "tl_old"))
    unnamed = await intent("task_override", lease_payload(task_id, "release", None))
    s = await move(session_headers(a), status="in_review")
    assert s[blocked] == moved("in_review")
    assert s[stale] == (
        "superseded",
        f"Superseded: the work lease it names is no longer active on {task_id}.",
    )
    assert [s[i] for i in (named, unnamed, done, cancel, reopen, aimless)] == [open_] * 6
    r = await client.post(
        f"{R}/tasks/{task_id}/review-lease-action",
        json={"action": "claim"},
        headers=session_headers(b),
    )
    assert r.status_code == 200, r.text
    s = await move(person_headers(), status="merged")
    assert s[cancel] == moved("merged")
    assert [s[i] for i in (done, reopen, aimless, create)] == [open_] * 4
    s = await move(person_headers(), status="done")
    assert s[done] == moved("done")
    assert [s[i] for i in (reopen, aimless, create)] == [open_] * 3
    s = await move(person_headers(), status="accepted")
    assert s[reopen] == moved("accepted")
    assert [s[i] for i in (aimless, create)] == [open_] * 2


async def test_a_used_intent_names_its_task_and_a_superseded_one_is_recorded(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    """An intent registered without a task id takes the task it was used on."""
    a, b = await governed(client)
    task_id = await new_task(client)
    elsewhere = await new_task(client)
    close = await intend(client, a, "task_close", mutation_payload(task_id, status="cancelled"))
    moot = await intend(client, a, "task_close", mutation_payload(task_id, status="done"))
    denied = await intend(client, a, "task_update", mutation_payload(task_id, status="done"))
    other = await intend(client, a, "task_close", mutation_payload(elsewhere, status="done"))
    assert close["task_id"] is None
    assert (await decide(client, b, close["id"])).status_code == 200
    assert (await decide(client, b, denied["id"], "deny")).status_code == 200
    await trio.sleep(5)
    now = iso(room.clock.now_ms())
    body = {"status": "cancelled", "board_intent_id": close["id"]}
    r = await client.patch(f"{R}/tasks/{task_id}", json=body, headers=session_headers(a))
    assert r.status_code == 200, r.text
    listed = (await client.get(f"{R}/board-intents", headers=person_headers())).json()["intents"]
    assert [(i["id"], i["status"], i["task_id"]) for i in listed] == [
        (close["id"], "used", task_id),
        (moot["id"], "superseded", None),
        (denied["id"], "denied", None),
        (other["id"], "pending", None),
    ]
    assert listed[0]["updated_at"] == now
    assert (listed[1]["decision_by"], listed[1]["decided_at"], listed[1]["updated_at"]) == (
        "LetAgents",
        now,
        now,
    )
    recorded = [e for e in await events(client, "board_intent") if e["action"] == "superseded"]
    reason = f"Superseded: {task_id} moved to cancelled."
    assert [
        (e["object_id"], e["actor"], e["state"], e["linked_task_id"], e["metadata"])
        for e in recorded
    ] == [(moot["id"], "LetAgents", "superseded", task_id, {"reason": reason})]


async def test_a_decisions_and_a_releases_reasons_are_cut_at_2000_characters(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a, _ = await governed(client)
    intent = await intend(client, a, "task_create", create_payload("x", None, None))
    r = await client.post(
        f"{R}/board-intents/{intent['id']}/deny",
        json={"reason": "d" * 2001},
        headers=person_headers(),
    )
    assert r.json()["intent"]["decision_reason"] == "d" * 2000
    r = await client.request(
        "DELETE",
        f"{R}/board-managers/active",
        json={"reason": "r" * 2001},
        headers=person_headers(),
    )
    assert r.json()["manager"]["release_reason"] == "r" * 2000


async def test_a_room_is_governed_by_its_mode_and_a_live_manager(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    """``off`` governs nothing; ``manager_optional`` governs while its manager's session
    lives (an ended session stops counting without anyone releasing it)."""
    a, b = await governed(client, "manager_optional")
    r = await client.post(f"{R}/tasks", json={"title": "x"}, headers=session_headers(a))
    assert r.json()["code"] == "board_intent_required"
    await disconnect(client, b)
    shown = (await client.get(f"{R}/board-settings", headers=person_headers())).json()
    assert shown["active_manager"] is None
    r = await client.post(f"{R}/tasks", json={"title": "y"}, headers=session_headers(a))
    assert r.status_code == 201, r.text
    r = await client.patch(
        f"{R}/board-settings", json={"manager_mode": "intent_required"}, headers=person_headers()
    )
    r = await client.post(f"{R}/tasks", json={"title": "z"}, headers=session_headers(a))
    assert r.json()["code"] == "board_intent_required"
    r = await client.patch(
        f"{R}/board-settings", json={"manager_mode": "off"}, headers=person_headers()
    )
    r = await client.post(f"{R}/tasks", json={"title": "z"}, headers=session_headers(a))
    assert r.status_code == 201, r.text
