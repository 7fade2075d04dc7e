"""Accounts (R1, R2) and registration (R3): PROTOCOL.md §2.1, §5.3, §7.1, §7.3, §10."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import pytest
import trio
import trio.testing

from letagents_trio.room_server._sessions import _registration
from letagents_trio.room_server._sessions._presence import Holder, evidence_of
from letagents_trio.room_server._sessions._registration import (
    Plan,
    parse_registration,
    plan_registration,
)
from letagents_trio.room_server._storage._rows import Account, SessionRow
from letagents_trio.room_server._wire import Refusal, hash_token
from letagents_trio.workers._wire import (
    PUBLIC_SESSION_FIELDS,
    durable_registration_body,
    new_connection_token,
    new_worker_id,
    worker_agent_name,
)

from .helpers import (
    EPOCH,
    ROOM,
    connection_token,
    open_process,
    owner_headers,
    register,
    registered,
    registration,
    worker_id,
)

if TYPE_CHECKING:
    import httpx2

    from letagents_trio.room_server import Room

# The 201 body: the public projection, plus the room's own columns and what
# only the registrant may see (its token, a bearer, the assigned base name).
SESSION_FIELDS = {
    *PUBLIC_SESSION_FIELDS,
    "assigned_base_display_name",
    "owner_account_id",
    "supervisor_grant_id",
    "end_reason",
    "session_token",
    "worker_bearer",
}
BUSY = {"error": "Agent session registration is busy. Retry shortly."}


async def test_agents_me_and_canonical_key(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    r = await client.get("/agents/me", headers=owner_headers())
    assert r.status_code == 200
    me = r.json()
    assert me["account"]["login"] == "owner"
    assert me["account"]["id"].startswith("acct_")
    assert me["agents"] == []
    r = await client.post(
        "/agents",
        json={"name": "worker-abc", "display_name": "FieldMeadow", "owner_label": "Owner"},
        headers=owner_headers(),
    )
    assert r.status_code == 200
    assert r.json()["canonical_key"] == "owner/worker-abc"
    r = await client.get("/agents/me", headers=owner_headers())
    assert [a["canonical_key"] for a in r.json()["agents"]] == ["owner/worker-abc"]
    assert (await client.get("/agents/me")).status_code == 401
    assert (await client.get("/agents/me", headers=owner_headers("wrong"))).status_code == 401
    r = await client.post("/agents", json={}, headers=owner_headers())
    assert (r.status_code, r.json()) == (400, {"error": "name is required"})


async def test_the_body_worker_handles_send_registers_and_resumes(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    """The client's one registration body (§5.3 step 8) is what the room reads, field by field."""
    worker = new_worker_id()
    liveness = {
        "host_id": "host_a",
        "host_kind": "linux",
        "host_label": None,
        "liveness_capability": "session_activity",
        "tool_bridge_id": "host_a:bridge",
    }

    def body(predecessor: tuple[str, str] | None = None) -> dict[str, Any]:
        return durable_registration_body(
            actor_key=f"owner/{worker_agent_name(worker)}",
            worker_id=worker,
            display_name="FieldMeadow",
            connection_token=new_connection_token(),
            process_host_id="phost_" + "1" * 32,
            registration_liveness=liveness,
            runtime="codex",
            ide_label="Cursor",
            repo_branch="main",
            predecessor=predecessor,
        )

    first = body()
    assert first["agent_instance_id"] == worker
    assert first["actor_key"] == f"owner/worker-{worker.removeprefix('worker_')}"
    assert first["replace_agent_session_id"] is first["replace_agent_session_token"] is None
    r = await register(client, first)
    assert r.status_code == 201
    data = r.json()
    assert data["session_token"] == first["connection_token"]
    assert {k: data[k] for k in ("runtime", "ide_label", "repo_branch")} == {
        "runtime": "codex",
        "ide_label": "Cursor",
        "repo_branch": "main",
    }
    assert {k: data[k] for k in liveness} == liveness
    resumed = body((data["session_id"], data["session_token"]))
    assert resumed["replace_agent_session_id"] == data["session_id"]
    assert resumed["replace_agent_session_token"] == data["session_token"]
    r = await register(client, resumed)
    assert r.status_code == 201
    assert r.json()["session_id"] == data["session_id"]
    assert r.json()["display_name"] == "FieldMeadow"


async def test_201_body_of_a_durable_worker(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    body = registration(name="FieldMeadow")
    r = await register(client, body)
    assert r.status_code == 201
    data = r.json()
    assert set(data) == SESSION_FIELDS
    assert data["session_token"] == body["connection_token"]
    assert data["worker_bearer"] is None
    assert data["agent_instance_id"] == body["agent_instance_id"]
    assert data["agent_key"] == body["actor_key"]
    assert data["room_id"] == ROOM
    assert data["ended_at"] is None
    assert data["display_name"] == "FieldMeadow"
    assert data["assigned_base_display_name"] == "FieldMeadow"
    assert data["actor_label"] == "FieldMeadow | owner's agent | Claude Code"
    assert data["created_at"] == "2027-01-15T08:00:00.000Z"
    assert data["host_id"] == "host_a"
    assert data["owner_label"] == "owner"  # the owner's login
    row = room.session(data["session_id"])
    assert row is not None
    assert row.agent_heard_at == EPOCH
    assert row.process_host_id == "host_a"
    assert row.process_seen_at is None
    assert body["connection_token"] not in repr(row)


async def test_lost_response_retry_returns_the_same_session(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    body = registration()
    first = await registered(client, body)
    await trio.sleep(3)
    again = await registered(client, body)
    assert again == first
    assert len(room.store.room_sessions(ROOM)) == 1


async def test_durable_reregistration_with_proof_rotates_the_same_row(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    instance = worker_id()
    first = await registered(client, registration(instance=instance))
    async with open_process(client, first) as reader:
        assert await reader.next() == ": connected"
    await trio.testing.wait_all_tasks_blocked()
    room.end_session(first["session_id"])
    await trio.sleep(2)
    token = connection_token()
    second = await registered(
        client, registration(instance=instance, token=token, replace=first, host="host_z")
    )
    assert second["session_id"] == first["session_id"]
    assert second["session_token"] == token
    assert second["ended_at"] is None
    row = room.session(first["session_id"])
    assert row is not None
    assert (row.process_seen_at, row.process_connection_id, row.process_disconnected_at) == (
        None,
        None,
        None,
    )
    assert row.process_host_id == "host_z"
    assert row.agent_heard_at == EPOCH + 2_000
    assert row.ended_at is None
    assert len(room.store.room_sessions(ROOM)) == 1


async def test_durable_without_proof_is_409(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    instance = worker_id()
    first = await registered(client, registration(instance=instance))
    r = await register(client, registration(instance=instance))
    assert r.status_code == 409
    assert r.json() == {
        "error": "This exact agent instance is already active on another live transport.",
        "code": "agent_instance_already_active",
        "active_session_id": first["session_id"],
    }
    wrong = dict(first, session_token=connection_token())
    r = await register(client, registration(instance=instance, replace=wrong))
    assert r.status_code == 409


async def test_a_wrong_replacement_proof_is_409_naming_the_live_session_if_any(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    instance = worker_id()
    first = await registered(client, registration(instance=instance))
    wrong = dict(first, session_token=connection_token())
    r = await register(client, registration(instance=instance, replace=wrong))
    assert (r.status_code, r.json()["active_session_id"]) == (409, first["session_id"])
    room.end_session(first["session_id"])
    r = await register(client, registration(instance=instance, replace=wrong))
    assert (r.status_code, r.json()["code"], r.json()["active_session_id"]) == (
        409,
        "agent_instance_already_active",
        None,
    )


async def test_lost_response_retry_of_an_ended_row_is_409(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    body = registration()
    first = await registered(client, body)
    room.end_session(first["session_id"])
    r = await register(client, body)
    assert r.status_code == 409
    assert r.json()["code"] == "agent_instance_already_active"
    assert r.json()["active_session_id"] == first["session_id"]


async def test_non_durable_instance_replacement(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    instance = "3f0c9f57-6f44-4a55-9e0e-3d0c1c4f2a11"
    body = registration(instance=instance, actor="owner/legacy")
    del body["connection_token"]
    first = await registered(client, body)
    r = await register(client, body)
    assert r.status_code == 409
    assert r.json()["active_session_id"] == first["session_id"]
    # With proof: a new session, the predecessor ended.
    second = await registered(client, dict(body, **_proof(first)))
    assert second["session_id"] != first["session_id"]
    old = room.session(first["session_id"])
    assert old is not None
    assert old.ended_at == EPOCH
    # Without proof once the predecessor has been unseen for 100 s.
    await trio.sleep(99.999)
    assert (await register(client, body)).status_code == 409
    await trio.sleep(0.001)
    third = await registered(client, body)
    assert third["session_id"] not in (first["session_id"], second["session_id"])


def _proof(session: dict[str, str]) -> dict[str, str]:
    return {
        "replace_agent_session_id": session["session_id"],
        "replace_agent_session_token": session["session_token"],
    }


@pytest.mark.parametrize(
    ("change", "status", "expected"),
    [
        ({"actor_key": None}, 400, {"error": "actor_key is required"}),
        ({"actor_key": "  "}, 400, {"error": "actor_key is required"}),
        (
            {"connection_token": None},
            400,
            {"error": "A durable worker requires a valid prepared connection credential."},
        ),
        (
            {"connection_token": "short"},
            400,
            {"error": "A durable worker requires a valid prepared connection credential."},
        ),
        (
            {"replace_agent_session_id": "abc"},
            400,
            {
                "error": "replace_agent_session_id and replace_agent_session_token must be"
                " supplied together.",
                "code": "invalid_agent_session_replacement_proof",
            },
        ),
        (
            {"display_name": "x" * 129},
            400,
            {
                "error": "Agent identity fields exceed the supported message-routing bounds.",
                "code": "agent_identity_too_long",
            },
        ),
        (
            {"actor_key": "owner/" + "k" * 300},
            400,
            {
                "error": "Agent identity fields exceed the supported message-routing bounds.",
                "code": "agent_identity_too_long",
            },
        ),
        ({"actor_key": "other/worker-1"}, 403, {"error": "actor_key is not owned by this account"}),
    ],
)
async def test_registration_refusals(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    change: dict[str, object],
    status: int,
    expected: dict[str, str],
) -> None:
    r = await register(client, dict(registration(), **change))
    assert (r.status_code, r.json()) == (status, expected)
    assert room.store.room_sessions(ROOM) == []


@pytest.mark.parametrize(
    ("field", "bound", "prefix"),
    [
        # MAX_ACTOR_KEY_CHARS, MAX_INSTANCE_ID_CHARS, MAX_DISPLAY_NAME_CHARS (room-server.md).
        ("actor_key", 256, "owner/"),
        ("agent_instance_id", 128, "instance-"),
        ("display_name", 128, ""),
        ("requested_base_display_name", 128, ""),
    ],
)
async def test_identity_bounds_take_exactly_their_length_and_refuse_one_more(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    field: str,
    bound: int,
    prefix: str,
) -> None:
    at_bound = prefix + "x" * (bound - len(prefix))
    r = await register(client, dict(registration(), **{field: at_bound + "x"}))
    assert (r.status_code, r.json()["code"]) == (400, "agent_identity_too_long")
    assert room.store.room_sessions(ROOM) == []
    got = await registered(client, dict(registration(), **{field: at_bound}))
    stored = room.session(got["session_id"])
    assert stored is not None
    if field == "actor_key":
        assert stored.agent_key == at_bound
    elif field == "agent_instance_id":
        assert stored.agent_instance_id == at_bound


async def test_registration_needs_an_owner(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    for headers in ({}, owner_headers("wrong-token"), {"Authorization": "Basic abc"}):
        r = await client.post(f"/rooms/{ROOM}/agent-sessions", json=registration(), headers=headers)
        assert (r.status_code, r.json()) == (
            401,
            {"error": "Agent session registration requires authenticated owner context."},
        )
    assert room.store.room_sessions(ROOM) == []


async def test_busy_when_the_registration_lock_is_held_5_s(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    body = registration()
    async with room.registration_lock(ROOM):
        r = await register(client, body)
        assert (r.status_code, r.json(), r.headers["retry-after"]) == (503, BUSY, "1")
        assert trio.current_time() == 5
    assert room.store.room_sessions(ROOM) == []
    assert (await register(client, body)).status_code == 201


async def test_concurrent_registrations_for_one_name(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    instance = worker_id()
    body = registration(instance=instance, name="Alpha")
    others = [registration(name="Alpha") for _ in range(3)]
    replies: list[tuple[int, httpx2.Response]] = []

    async def one(index: int, b: dict[str, object]) -> None:
        replies.append((index, await register(client, dict(b))))

    async with trio.open_nursery() as nursery:
        for index, b in enumerate([body, body, *others]):
            nursery.start_soon(one, index, b)
    assert all(r.status_code == 201 for _, r in replies)
    durable = {r.json()["session_id"] for i, r in replies if i < 2}
    assert len(durable) == 1  # one instance, one session (the second is a lost-response retry)
    live = [s for s in room.store.room_sessions(ROOM) if s.live]
    assert len(live) == 4
    names = [s.display_name for s in live]
    assert names.count("Alpha") == 1
    assert len(set(names)) == 4


async def test_bad_json_and_sizes(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    path = f"/rooms/{ROOM}/agent-sessions"
    headers = dict(owner_headers(), **{"Content-Type": "application/json"})
    r = await client.post(path, content=b"{not json", headers=headers)
    assert (r.status_code, r.json()) == (400, {"error": "Request body must be valid JSON."})
    r = await client.post(path, content=b"[1, 2]", headers=headers)
    assert (r.status_code, r.json()) == (400, {"error": "Request body must be a JSON object."})
    r = await client.post(path, content=b"\xff\xfe", headers=headers)
    assert r.status_code == 400
    r = await client.post(path, content=b"[" * 100_000, headers=headers)
    assert r.status_code == 400
    r = await client.post(path, content=b"{" + b" " * (1024 * 1024) + b"}", headers=headers)
    # Issue 29: the refusal says the limit.
    too_large = {"error": "Request body is too large: at most 1048576 bytes."}
    assert (r.status_code, r.json()) == (413, too_large)
    r = await client.post(
        f"/rooms/{'r' * 300}/agent-sessions", json=registration(), headers=headers
    )
    assert (r.status_code, r.json()) == (404, {"error": "Room not found"})
    r = await client.get(path, headers=headers)
    assert r.status_code == 405
    assert r.headers["allow"] == "POST"
    r = await client.get("/nothing/here")
    assert r.status_code == 404
    assert room.store.room_ids() == []


# --- the pure plan ---------------------------------------------------------------------------

ACCOUNT = Account(account_id="acct_owner", login="owner")
NOW = 1_000_000


def _planned(
    body: dict[str, Any],
    sessions: list[SessionRow],
    *,
    releasable: bool = False,
    proof: SessionRow | None = None,
) -> Plan:
    def holder_of(row: SessionRow) -> Holder:
        # Gone (releasable) or present, as the test needs: no delivery, long silent.
        evidence = evidence_of(row, delivery_connected=not releasable)
        return _registration.holder(row, evidence)

    return plan_registration(
        parse_registration(ACCOUNT, body),
        account=ACCOUNT,
        room_id=ROOM,
        sessions=sessions,
        proof=proof,
        now=NOW,
        holder_of=holder_of,
        max_offset=1024,
    )


def _row(body: dict[str, Any], session_id: str, name: str, **change: Any) -> SessionRow:
    fields: dict[str, Any] = {
        "token_hash": hash_token(body["connection_token"]),
        "agent_key": body["actor_key"],
        "agent_instance_id": body["agent_instance_id"],
        "display_name": name,
        "assigned_base_display_name": name,
        "owner_account_id": ACCOUNT.account_id,
    }
    return SessionRow(session_id=session_id, room_id=ROOM, **{**fields, **change})


def test_the_plan_answers_a_lost_response_with_the_row_it_made() -> None:
    body = registration(name="Alpha")
    row = _row(body, "s1", "Alpha")
    assert _planned(body, [row]) == Plan(retry=row)


def test_the_plan_refuses_a_durable_worker_that_does_not_prove_its_row() -> None:
    body = registration(name="Alpha")
    row = _row(body, "s1", "Alpha", token_hash=hash_token("another-token"))
    with pytest.raises(Refusal) as caught:
        _planned(body, [row])
    assert caught.value.reply.body["active_session_id"] == "s1"


def test_the_plan_takes_over_a_gone_holder_of_the_same_owner_and_codenames_past_others() -> None:
    other = registration(name="Alpha")
    held = _row(other, "s0", "Alpha", last_seen_at=0, process_seen_at=0)
    body = registration(name="Alpha")
    taken = _planned(body, [held], releasable=True)
    assert (taken.name, taken.base, taken.takeover) == ("Alpha", "Alpha", (held,))
    kept = _planned(body, [held], releasable=False)
    assert kept.name != "Alpha"
    assert (kept.base, kept.takeover) == ("Alpha", ())


def test_ended_non_durable_workers_and_controllers_hold_no_name() -> None:
    # §7.3 holders: live worker sessions, and durable workers even ended.
    ended_legacy = _row(
        registration(name="Alpha"), "s0", "Alpha", agent_instance_id="legacy-1", ended_at=NOW
    )
    controller = _row(registration(name="Alpha"), "s1", "Alpha", session_kind="controller")
    ended_durable = _row(registration(name="Alpha"), "s2", "Alpha", ended_at=NOW)
    body = registration(name="Alpha")
    assert _planned(body, [ended_legacy, controller]).name == "Alpha"
    assert _planned(body, [ended_legacy, controller, ended_durable]).name != "Alpha"


def test_the_one_wait_is_for_the_name_on_the_durable_workers_own_row() -> None:
    # A durable worker registering again waits for the holders of the name its
    # own (agent key, instance) row first asked for, whatever it sends now.
    body = registration(name="Whatever")
    req = parse_registration(ACCOUNT, body)
    own = _row(body, "s2", "RiverValley", assigned_base_display_name="Alpha")
    same_key = _row(body, "s0", "Beta", agent_instance_id=worker_id())
    same_instance = _row(body, "s1", "Gamma", agent_key="owner/another")
    rows = [same_key, same_instance, own]
    assert _registration.wanted_name(req, rows) == "Alpha"
    unassigned = attrs.evolve(own, assigned_base_display_name=None)
    assert _registration.wanted_name(req, [same_key, same_instance, unassigned]) == "RiverValley"
    assert _registration.wanted_name(req, [same_key, same_instance]) == "Whatever"


@pytest.mark.parametrize(
    ("sent", "kind"),
    [("controller", "controller"), ("worker", "worker"), ("robot", "worker"), (None, "worker")],
)
def test_a_session_is_a_controller_when_it_says_so_else_a_worker(
    sent: str | None, kind: str
) -> None:
    body = dict(registration(), session_kind=sent)
    assert parse_registration(ACCOUNT, body).session_kind == kind


def test_the_registration_liveness_is_kept_field_by_field() -> None:
    liveness = {
        "host_id": "host_a",
        "host_kind": "machine",
        "host_label": "laptop",
        "liveness_capability": "process_connection",
        "tool_bridge_id": "bridge-1",
    }
    body = dict(registration(), registration_liveness=liveness)
    req = parse_registration(ACCOUNT, body)
    assert {field: getattr(req, field) for field in liveness} == liveness


LEGACY_INSTANCE = "3f0c9f57-6f44-4a55-9e0e-3d0c1c4f2a11"


def test_a_non_durable_instance_is_stale_100_s_after_it_was_last_seen_else_created() -> None:
    body = registration(instance=LEGACY_INSTANCE, actor="owner/legacy")
    asked = {k: v for k, v in body.items() if k != "connection_token"}
    seen = _row(body, "s0", "Alpha", created_at=NOW - 200_000, last_seen_at=NOW - 99_999)
    with pytest.raises(Refusal):
        _planned(asked, [seen])
    never_seen = attrs.evolve(seen, created_at=NOW - 100_000, last_seen_at=None)
    assert _planned(asked, [never_seen]).replace == (never_seen,)
    with pytest.raises(Refusal):
        _planned(asked, [attrs.evolve(never_seen, created_at=NOW - 99_999)])


def test_a_proven_replacement_still_judges_the_instances_other_live_rows() -> None:
    body = registration(instance=LEGACY_INSTANCE, actor="owner/legacy")
    proven = _row(body, "s0", "Alpha", token_hash=hash_token("proof"), last_seen_at=NOW)
    stale = _row(body, "s1", "Alpha 2", token_hash=hash_token("t1"), last_seen_at=NOW - 100_000)
    asked = {k: v for k, v in body.items() if k != "connection_token"}
    asked |= {"replace_agent_session_id": "s0", "replace_agent_session_token": "proof"}
    assert _planned(asked, [proven, stale], proof=proven).replace == (proven, stale)
    recent = attrs.evolve(stale, last_seen_at=NOW - 99_999)
    with pytest.raises(Refusal) as caught:
        _planned(asked, [proven, recent], proof=proven)
    assert caught.value.reply.body["active_session_id"] == "s1"


def test_an_actor_key_of_the_login_and_a_slash_alone_is_not_owned() -> None:
    with pytest.raises(Refusal) as caught:
        parse_registration(ACCOUNT, dict(registration(), actor_key="owner/"))
    assert (caught.value.reply.status, caught.value.reply.body) == (
        403,
        {"error": "actor_key is not owned by this account"},
    )


def test_an_instance_is_its_agent_keys_own_another_key_with_that_id_is_not() -> None:
    body = registration(instance=LEGACY_INSTANCE, actor="owner/legacy")
    asked = {k: v for k, v in body.items() if k != "connection_token"}
    another = _row(body, "s0", "Alpha", agent_key="owner/another", last_seen_at=NOW)
    plan = _planned(asked, [another])
    assert (plan.replace, plan.rotate, plan.retry) == ((), None, None)


# --- choose_name: who holds a name (§7.3) ------------------------------------------------


def _choose(
    body: dict[str, Any],
    others: list[SessionRow],
    *,
    rotate: SessionRow | None = None,
    gone: frozenset[str] = frozenset(),
) -> _registration.NameChoice:
    """The name ``body`` gets among ``others`` (in session-id order, as the room reads them)."""
    return _registration.choose_name(
        parse_registration(ACCOUNT, body),
        rotate=rotate,
        others=others,
        sessions=[*others, *([rotate] if rotate is not None else [])],
        releasable=lambda s: s.session_id in gone,
        max_offset=1024,
    )


def _holding(session_id: str, name: str, **change: Any) -> SessionRow:
    """A live durable worker of the owner (another agent) holding ``name``."""
    return _row(registration(name=name), session_id, name, **change)


def test_the_name_asked_for_is_the_display_name_else_the_requested_base() -> None:
    body = dict(registration(name="Alpha"), requested_base_display_name="Beta")
    assert _choose(body, []).name == "Alpha"
    del body["display_name"]
    assert _choose(body, []).name == "Beta"


def test_a_name_passes_only_when_every_holder_of_it_may_release_it() -> None:
    body = registration(name="Alpha")
    gone, present = _holding("s0", "Alpha"), _holding("s1", "Alpha")
    kept = _choose(body, [gone, present], gone=frozenset({"s0"}))
    assert (kept.name != "Alpha", kept.takeover) == (True, ())
    taken = _choose(body, [gone, present], gone=frozenset({"s0", "s1"}))
    assert (taken.name, taken.takeover) == ("Alpha", (gone, present))


def test_seniority_an_older_live_holder_still_holds_after_a_younger_one_is_passed_over() -> None:
    # The rotating worker is the middle one: the younger holder (first in
    # session-id order) is passed over, the older still holds the name.
    body = registration(name="Alpha")
    rotate = _row(body, "s5", "Alpha", created_at=5)
    younger = _holding("s0", "Alpha", created_at=10)
    older = _holding("s9", "Alpha", created_at=0)
    assert _choose(body, [younger, older], rotate=rotate).name != "Alpha"
    alone = _choose(body, [younger], rotate=rotate)
    assert (alone.name, alone.takeover) == ("Alpha", ())


def test_an_ended_holder_passed_over_does_not_hide_a_live_one_behind_it() -> None:
    body = registration(name="Alpha")
    rotate = _row(body, "s5", "Alpha", created_at=5)
    ended = _holding("s0", "Alpha", ended_at=NOW)  # first in session-id order
    older = _holding("s1", "Alpha", created_at=0)
    assert _choose(body, [ended, older], rotate=rotate).name != "Alpha"


def test_only_live_holders_contest_a_durable_workers_current_name() -> None:
    body = registration(name="Alpha")
    rotate = _row(body, "s5", "Alpha")
    ended = _holding("s0", "Alpha", ended_at=NOW)  # a durable holder, ended, not gone
    assert _choose(body, [ended], rotate=rotate) == _registration.NameChoice(
        name="Alpha", base="Alpha"
    )


def test_a_gone_live_holder_of_a_durable_workers_current_name_is_taken_over() -> None:
    # The worker was given RiverValley because Alpha, asked for first, was
    # held; Alpha still is, and RiverValley's other holder is gone: taken over.
    body = registration(name="Alpha")
    rotate = _row(body, "s5", "RiverValley", assigned_base_display_name="Alpha")
    alpha = _holding("s0", "Alpha")
    sharer = _holding("s1", "RiverValley")
    choice = _choose(body, [alpha, sharer], rotate=rotate, gone=frozenset({"s1"}))
    assert choice == _registration.NameChoice(name="RiverValley", base="Alpha", takeover=(sharer,))


def test_names_reserved_by_agent_keys_are_other_live_agents_last_segments() -> None:
    river = registration(name="River", actor="owner/river")
    # Another live agent's key reserves its last segment, however many segments.
    team = _holding("s0", "Someone", agent_key="owner/team/river")
    assert _choose(river, [team]).name != "River"
    assert _choose(registration(name="Team"), [team]).name == "Team"
    # An ended agent's key reserves nothing.
    ended = _holding("s0", "Someone", agent_key="owner/river", ended_at=NOW)
    assert _choose(registration(name="River"), [ended]).name == "River"
    # Nor does the registrant's own key, when it registers again.
    own = _row(river, "s5", "River")
    assert _choose(river, [], rotate=own).name == "River"
