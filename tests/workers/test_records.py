"""The worker records' reads and changes, on plain dicts: no file, no room, no clock.

Each change in :mod:`letagents_trio.workers._records` is what
:class:`WorkerHandles` runs inside ``LocalStateStore.update``; each read is
what it asks of a snapshot. The scenarios over a real room and state file are
in ``test_core.py``, ``test_handles.py`` and ``test_recovery.py``; these pin
the rules themselves, one at a time.
"""

from __future__ import annotations

import copy
import hashlib
import re
from typing import Any, Final

import pytest

from letagents_trio import AgentSession
from letagents_trio.workers import WorkerError
from letagents_trio.workers._acting import Target, acting_session, resolve_target
from letagents_trio.workers._names import allocate_name, codename, name_key
from letagents_trio.workers._records import (
    LocalSessionFacts,
    Operation,
    confirmed_record,
    create_or_reuse_worker,
    drop_operation,
    held_under,
    known_key,
    local_session_id,
    pending_operation,
    pinned_current,
    prepare_operation,
    read_leases,
    registration_key_hash,
    room_record,
    same_token,
    store_hosted_session,
    store_local_session,
    worker_in_scope,
)
from letagents_trio.workers._wire import (
    AMBIGUOUS_ROOM_TEXT,
    BOTH_TARGETS_TEXT,
    CONNECTION_REPLACED_TEXT,
    EMBEDDER_WORDING,
    IN_PROGRESS_TEXT,
    NO_CONNECTION_TEXT,
    NOT_CONFIRMED_TEXT,
    SUPERSEDED_LOCAL_TEXT,
    SUPERSEDED_TEXT,
    UNKNOWN_SESSION_TEXT,
    UNKNOWN_WORKER_TEXT,
    WORKER_OR_SESSION_TEXT,
)

SCOPE: Final = "http://room.test\nowner"
WORDING: Final = EMBEDDER_WORDING
ROOM: Final = "room_shared"
WORKER: Final = "worker_" + "a" * 32
OTHER: Final = "worker_" + "b" * 32
KEY: Final = "owner/worker-" + "a" * 32
NOW: Final = "2026-01-01T00:00:00.000Z"


def session_json(session_id: str, token: str, **fields: Any) -> dict[str, Any]:
    return {
        "session_id": session_id,
        "session_token": token,
        "room_id": ROOM,
        "display_name": "Juniper",
        "agent_instance_id": WORKER,
        "ended_at": None,
        **fields,
    }


def state_with(
    *, session: dict[str, Any] | None = None, pending: dict[str, str] | None = None
) -> dict[str, Any]:
    """One worker of SCOPE in ROOM; its current session and pending operation as given."""
    room: dict[str, Any] = {}
    state: dict[str, Any] = {
        "mcp_workers": {
            WORKER: {
                "worker_id": WORKER,
                "scope": SCOPE,
                "registration_key_hash": registration_key_hash(SCOPE, "k"),
                "display_name": "Juniper",
                "rooms": {ROOM: room},
            }
        }
    }
    if session is not None:
        state["agent_sessions"] = {session["session_id"]: session}
        room["session_id"] = session["session_id"]
    if pending is not None:
        room["pending"] = pending
    return state


def pin(record: dict[str, Any]) -> dict[str, AgentSession]:
    session = AgentSession.from_json(record)
    return {session.session_id: session}


OPERATION: Final = Operation(operation_id="op-1", connection_token="token-new")


def facts(**changes: Any) -> LocalSessionFacts:
    values: dict[str, Any] = {
        "canonical_key": KEY,
        "worker_name": "Juniper",
        "owner_label": "owner",
        "ide_label": "Agent",
        "runtime": "python",
        "repo_branch": None,
        "now": NOW,
        **changes,
    }
    return LocalSessionFacts(**values)


# --- small helpers ---------------------------------------------------------------------


def test_hashes_and_ids_are_the_protocols() -> None:
    assert (
        registration_key_hash(SCOPE, " k ") == hashlib.sha256(f"{SCOPE}\n k ".encode()).hexdigest()
    )
    digest = hashlib.sha256(f"{WORKER}\n{ROOM}".encode()).hexdigest()
    assert local_session_id(WORKER, ROOM) == "local_" + digest
    assert same_token("abc", "abc")
    assert not same_token("abc", "abd")


def test_only_well_formed_leases_are_read() -> None:
    good = {"lease_id": "l1", "task_id": "t1", "kind": "claim", "extra": "dropped"}
    assert read_leases([good, {"lease_id": "l2"}, "nope", {**good, "kind": 3}]) == (
        {"lease_id": "l1", "task_id": "t1", "kind": "claim"},
    )
    assert read_leases(None) == ()
    assert read_leases({"lease_id": "l1"}) == ()


@pytest.mark.parametrize(
    ("stored", "proof"),
    [
        ({"predecessor_id": "s1", "predecessor_token": "t1"}, ("s1", "t1")),
        ({"predecessor_id": "s1"}, None),  # half a proof is none: the room would refuse it
        ({"predecessor_token": "t1"}, None),
        ({}, None),
    ],
)
def test_an_operation_sends_its_predecessor_proof_whole_or_not_at_all(
    stored: dict[str, str], proof: tuple[str, str] | None
) -> None:
    operation = Operation.from_json({"operation_id": "op", "connection_token": "tok", **stored})
    assert operation is not None
    assert operation.predecessor == proof
    # What is stored again keeps the same proof.
    again = Operation.from_json(operation.to_json())
    assert again is not None
    assert again.predecessor == proof


def test_an_operation_without_id_or_token_is_none_and_its_token_is_not_in_its_repr() -> None:
    assert Operation.from_json({"operation_id": "op"}) is None
    assert Operation.from_json({"connection_token": "tok", "operation_id": ""}) is None
    assert "token-new" not in repr(OPERATION)


# --- create -----------------------------------------------------------------------------


def test_a_new_key_stores_a_worker_and_the_same_key_finds_it_again() -> None:
    state: dict[str, Any] = {}
    key_hash = registration_key_hash(SCOPE, "k")
    assert not known_key(state, SCOPE, key_hash)
    args = {"scope": SCOPE, "key_hash": key_hash}
    assert create_or_reuse_worker(state, display_name="Juniper", new_id=WORKER, **args) == (
        WORKER,
        True,
    )
    assert state["mcp_workers"][WORKER] == {
        "worker_id": WORKER,
        "scope": SCOPE,
        "registration_key_hash": key_hash,
        "display_name": "Juniper",
        "rooms": {},
    }
    assert known_key(state, SCOPE, key_hash)
    # The same key again: the same worker, its name unchanged, nothing added.
    assert create_or_reuse_worker(state, display_name="Other", new_id=OTHER, **args) == (
        WORKER,
        False,
    )
    assert list(state["mcp_workers"]) == [WORKER]
    assert state["mcp_workers"][WORKER]["display_name"] == "Juniper"


def test_another_scope_is_another_worker_and_a_blank_name_is_the_ids_codename() -> None:
    state = state_with()
    key_hash = registration_key_hash(SCOPE, "k")
    other_scope = "http://room.test\nlocal:me"
    assert not known_key(state, other_scope, key_hash)
    created = create_or_reuse_worker(
        state, scope=other_scope, key_hash=key_hash, display_name="", new_id=OTHER
    )
    assert created == (OTHER, True)
    assert state["mcp_workers"][OTHER]["display_name"] == codename(OTHER).display_name


def test_a_worker_is_known_only_in_its_own_scope() -> None:
    state = state_with()
    assert worker_in_scope(state, WORKER, SCOPE, WORDING)["worker_id"] == WORKER
    for worker_id, scope, why in [
        (
            WORKER,
            "http://other.test\nbob",
            f"Worker {WORKER} was created for owner at http://room.test; this call is for bob"
            " at http://other.test.",
        ),
        (OTHER, SCOPE, f"No worker {OTHER} is stored in this state file."),
        (
            "worker_nothex",
            SCOPE,
            "'worker_nothex' is not a worker handle (worker_ and 32 hex digits).",
        ),
    ]:
        with pytest.raises(WorkerError) as caught:
            worker_in_scope(state, worker_id, scope, WORDING)
        # Issue 29: upstream's text, then the real cause, then the call to make.
        assert str(caught.value) == (
            f"{UNKNOWN_WORKER_TEXT} {why} To create a worker for this chat, call"
            " WorkerHandles.register with a new registration_key; to resume one, pass a"
            " worker_id that WorkerHandles.register returned for this account and API."
        )


# --- the prepared operation ---------------------------------------------------------------


def test_preparing_stores_the_operation_with_the_predecessors_proof() -> None:
    state = state_with(session=session_json("s1", "token-old"))
    operation = prepare_operation(
        state, WORKER, ROOM, operation_id="op-1", connection_token="token-new"
    )
    assert operation.predecessor == ("s1", "token-old")
    assert state["mcp_workers"][WORKER]["rooms"][ROOM]["pending"] == {
        "operation_id": "op-1",
        "connection_token": "token-new",
        "predecessor_id": "s1",
        "predecessor_token": "token-old",
    }
    assert pending_operation(room_record(state["mcp_workers"][WORKER], ROOM)) == operation


def test_a_first_preparation_has_no_proof_and_creates_the_room_record() -> None:
    state = state_with()
    del state["mcp_workers"][WORKER]["rooms"][ROOM]
    operation = prepare_operation(state, WORKER, ROOM, operation_id="op", connection_token="t")
    assert operation.predecessor is None
    assert state["mcp_workers"][WORKER]["rooms"][ROOM]["pending"] == operation.to_json()


def test_a_second_preparation_or_a_lost_worker_is_refused_and_writes_nothing() -> None:
    state = state_with(pending=OPERATION.to_json())
    before = copy.deepcopy(state)
    with pytest.raises(WorkerError, match=re.escape(IN_PROGRESS_TEXT)):
        prepare_operation(state, WORKER, ROOM, operation_id="op-2", connection_token="t2")
    with pytest.raises(WorkerError, match=re.escape(UNKNOWN_WORKER_TEXT)):
        prepare_operation(state, OTHER, ROOM, operation_id="op-2", connection_token="t2")
    assert state == before


def test_a_refused_operation_is_dropped_only_while_it_is_still_pending() -> None:
    state = state_with(pending=OPERATION.to_json())
    other = Operation(operation_id="op-2", connection_token="t2")
    assert not drop_operation(state, WORKER, ROOM, other)
    assert "pending" in state["mcp_workers"][WORKER]["rooms"][ROOM]
    assert drop_operation(state, WORKER, ROOM, OPERATION)
    assert "pending" not in state["mcp_workers"][WORKER]["rooms"][ROOM]
    assert not drop_operation(state, WORKER, ROOM, OPERATION)
    assert not drop_operation({}, WORKER, ROOM, OPERATION)


# --- finish (hosted) --------------------------------------------------------------------


def answer(**changes: Any) -> dict[str, Any]:
    return {
        **session_json("s1", "token-new", agent_key=KEY),
        "worker_bearer": "bearer-secret",
        "assigned_base_display_name": "Juniper",
        "adopted_task_leases": [{"lease_id": "l1", "task_id": "t1", "kind": "claim"}],
        **changes,
    }


def confirm(created: object) -> tuple[dict[str, Any], tuple[dict[str, str], ...]]:
    return confirmed_record(
        created,
        operation=OPERATION,
        worker_id=WORKER,
        canonical_key=KEY,
        room_id=ROOM,
        display_name="Asked",
    )


def test_a_confirmed_answer_is_stored_without_bearer_or_leases() -> None:
    record, leases = confirm(answer())
    assert leases == ({"lease_id": "l1", "task_id": "t1", "kind": "claim"},)
    for dropped in ("worker_bearer", "adopted_task_leases", "assigned_base_display_name"):
        assert dropped not in record
    assert record["requested_base_display_name"] == "Juniper"
    record, _ = confirm(answer(assigned_base_display_name=None))
    assert record["requested_base_display_name"] == "Asked"


@pytest.mark.parametrize(
    "changes",
    [
        {"session_id": ""},
        {"session_token": "token-other"},
        {"session_token": None},
        {"agent_instance_id": OTHER},
        {"agent_key": "owner/worker-other"},
        {"room_id": "room_other"},
        {"ended_at": NOW},
    ],
    ids=lambda changes: next(iter(changes)),
)
def test_an_answer_that_does_not_confirm_us_is_refused(changes: dict[str, Any]) -> None:
    with pytest.raises(WorkerError, match=re.escape(NOT_CONFIRMED_TEXT)):
        confirm(answer(**changes))


def test_a_non_object_answer_is_refused() -> None:
    with pytest.raises(WorkerError, match=re.escape(NOT_CONFIRMED_TEXT)):
        confirm(["not", "an", "object"])


def test_the_hosted_session_becomes_current_while_its_operation_is_pending() -> None:
    state = state_with(pending=OPERATION.to_json())
    record, _ = confirm(answer())
    store_hosted_session(state, WORKER, ROOM, OPERATION, record, now=NOW)
    assert state["agent_sessions"]["s1"] == record
    assert state["mcp_workers"][WORKER]["rooms"][ROOM] == {"session_id": "s1"}


def test_a_superseded_operation_stores_nothing() -> None:
    state = state_with(pending={"operation_id": "someone-else", "connection_token": "t"})
    before = copy.deepcopy(state)
    record, _ = confirm(answer())
    with pytest.raises(WorkerError, match=re.escape(SUPERSEDED_TEXT)):
        store_hosted_session(state, WORKER, ROOM, OPERATION, record, now=NOW)
    with pytest.raises(WorkerError, match=re.escape(SUPERSEDED_TEXT)):
        store_local_session(state, WORKER, ROOM, OPERATION, facts())
    assert state == before


# --- finish (local room) --------------------------------------------------------------


def test_a_first_local_registration_makes_the_session_here() -> None:
    state = state_with(pending=OPERATION.to_json())
    record = store_local_session(state, WORKER, ROOM, OPERATION, facts(repo_branch="main"))
    session_id = local_session_id(WORKER, ROOM)
    assert state["agent_sessions"][session_id] is record
    assert state["mcp_workers"][WORKER]["rooms"][ROOM] == {"session_id": session_id}
    assert record == {
        "session_id": session_id,
        "session_token": "token-new",
        "room_id": ROOM,
        "session_kind": "worker",
        "runtime": "python",
        "actor_label": "Juniper | owner's agent | Agent",
        "agent_key": KEY,
        "agent_instance_id": WORKER,
        "display_name": "Juniper",
        "requested_base_display_name": "Juniper",
        "owner_label": "owner",
        "ide_label": "Agent",
        "repo_branch": "main",
        "created_at": NOW,
        "updated_at": NOW,
        "last_seen_at": NOW,
        "ended_at": None,
    }


def test_a_taken_local_name_falls_back_to_the_keys_first_free_codename() -> None:
    state = state_with(pending=OPERATION.to_json())
    first_codename = codename(f"{KEY}:1").display_name
    state["agent_sessions"] = {
        "local_a": session_json("local_a", "t", display_name="juniper"),
        "local_b": session_json("local_b", "t", display_name=first_codename),
        "elsewhere": session_json("elsewhere", "t", display_name="Other", room_id="room_other"),
    }
    record = store_local_session(state, WORKER, ROOM, OPERATION, facts())
    held = {"juniper", name_key(first_codename)}
    expected = allocate_name("Juniper", KEY, lambda name: name_key(name) in held)
    assert record["display_name"] == expected == codename(f"{KEY}:2").display_name
    assert record["requested_base_display_name"] == "Juniper"


def test_a_local_reregistration_keeps_its_name_label_and_creation_time() -> None:
    prior = session_json(
        local_session_id(WORKER, ROOM),
        "token-old",
        display_name="RiverValley",
        actor_label="kept label",
        created_at="2025-01-01T00:00:00.000Z",
    )
    operation = Operation(
        operation_id="op-1",
        connection_token="token-new",
        predecessor_id=prior["session_id"],
        predecessor_token="token-old",
    )
    state = state_with(session=prior, pending=operation.to_json())
    record = store_local_session(state, WORKER, ROOM, operation, facts())
    assert record["display_name"] == "RiverValley"
    assert record["actor_label"] == "kept label"
    assert record["created_at"] == "2025-01-01T00:00:00.000Z"
    assert record["session_token"] == "token-new"


def test_a_local_session_another_process_reregistered_is_not_overwritten() -> None:
    prior = session_json(local_session_id(WORKER, ROOM), "token-theirs")
    operation = Operation(
        operation_id="op-1",
        connection_token="token-new",
        predecessor_id=prior["session_id"],
        predecessor_token="token-old",
    )
    state = state_with(session=prior, pending=operation.to_json())
    before = copy.deepcopy(state)
    with pytest.raises(WorkerError, match=re.escape(SUPERSEDED_LOCAL_TEXT)):
        store_local_session(state, WORKER, ROOM, operation, facts())
    assert state == before


# --- the pinned fast path and recovery by name ------------------------------------------


def test_the_fast_path_needs_a_live_pinned_current_session_and_nothing_pending() -> None:
    live = session_json("s1", "token")
    state = state_with(session=live)
    room = room_record(state["mcp_workers"][WORKER], ROOM)
    assert pinned_current(state, pin(live), room) == AgentSession.from_json(live)
    assert pinned_current(state, {}, room) is None
    assert pinned_current(state, pin({**live, "session_token": "old"}), room) is None
    ended = state_with(session={**live, "ended_at": NOW})
    assert pinned_current(ended, pin(live), room_record(ended["mcp_workers"][WORKER], ROOM)) is None
    pending = state_with(session=live, pending=OPERATION.to_json())
    room = room_record(pending["mcp_workers"][WORKER], ROOM)
    assert pinned_current(pending, pin(live), room) is None
    assert pending_operation(room) == OPERATION


def test_held_under_matches_the_name_a_pinned_worker_lives_under_now() -> None:
    live = session_json("s1", "token", display_name="Field Meadow")
    state = state_with(session=live)
    where = {"scope": SCOPE, "room_id": ROOM}
    assert held_under(state, pin(live), name="fieldmeadow", **where) == [(WORKER, "Field Meadow")]
    assert held_under(state, pin(live), name="Juniper", **where) == []
    assert held_under(state, pin(live), name="", **where) == []
    assert held_under(state, {}, name="fieldmeadow", **where) == []
    assert held_under(state, pin(live), name="fieldmeadow", scope="other", room_id=ROOM) == []
    stale = pin({**live, "session_token": "old"})
    assert held_under(state, stale, name="fieldmeadow", **where) == []


# --- acting as a worker (§6.6) -----------------------------------------------------------


def test_a_target_is_a_worker_in_its_one_room_or_a_legacy_session() -> None:
    live = session_json("s1", "token")
    state = state_with(session=live)
    assert resolve_target(
        state, wording=WORDING, worker_id=WORKER, agent_session_id=None, room_id=None
    ) == Target(worker_id=WORKER, room_id=ROOM)
    # A durable worker's session named by its id is that worker.
    assert resolve_target(
        state, wording=WORDING, worker_id=None, agent_session_id="s1", room_id=None
    ) == Target(worker_id=WORKER, room_id=ROOM)
    state["agent_sessions"]["legacy"] = session_json("legacy", "t", agent_instance_id="old-agent")
    assert resolve_target(
        state, wording=WORDING, worker_id=None, agent_session_id="legacy", room_id=None
    ) == Target(worker_id=None, room_id=ROOM, legacy_session_id="legacy")


@pytest.mark.parametrize(
    ("worker_id", "agent_session_id", "text"),
    [
        (WORKER, "s1", BOTH_TARGETS_TEXT),
        (None, None, WORKER_OR_SESSION_TEXT),
        (None, "unknown", UNKNOWN_SESSION_TEXT),
        (OTHER, None, UNKNOWN_WORKER_TEXT),
        ("worker_nothex", None, UNKNOWN_WORKER_TEXT),
    ],
)
def test_bad_targets_are_refused(
    worker_id: str | None, agent_session_id: str | None, text: str
) -> None:
    state = state_with(session=session_json("s1", "token"))
    with pytest.raises(WorkerError, match=re.escape(text)):
        resolve_target(
            state,
            wording=WORDING,
            worker_id=worker_id,
            agent_session_id=agent_session_id,
            room_id=None,
        )


def test_a_worker_in_several_rooms_or_none_needs_its_room() -> None:
    state = state_with()
    state["mcp_workers"][WORKER]["rooms"] = {}
    with pytest.raises(WorkerError, match=re.escape(NO_CONNECTION_TEXT)):
        resolve_target(
            state, wording=WORDING, worker_id=WORKER, agent_session_id=None, room_id=None
        )
    state["mcp_workers"][WORKER]["rooms"] = {ROOM: {}, "room_other": {}}
    with pytest.raises(WorkerError, match=re.escape(AMBIGUOUS_ROOM_TEXT)):
        resolve_target(
            state, wording=WORDING, worker_id=WORKER, agent_session_id=None, room_id=None
        )
    target = resolve_target(
        state, wording=WORDING, worker_id=WORKER, agent_session_id=None, room_id="room_other"
    )
    assert target == Target(worker_id=WORKER, room_id="room_other")


def test_a_worker_acts_only_through_its_pinned_live_current_session() -> None:
    live = session_json("s1", "token")
    target = Target(worker_id=WORKER, room_id=ROOM)
    state = state_with(session=live)
    assert acting_session(state, pin(live), target, allow_ended=False) == AgentSession.from_json(
        live
    )
    assert acting_session(state, {}, target, allow_ended=False) is None
    pending = state_with(session=live, pending=OPERATION.to_json())
    assert acting_session(pending, pin(live), target, allow_ended=False) is None
    ended = state_with(session={**live, "ended_at": NOW})
    assert acting_session(ended, pin(live), target, allow_ended=False) is None
    assert acting_session(ended, pin(live), target, allow_ended=True) is not None
    replaced = state_with(session={**live, "session_token": "theirs"})
    with pytest.raises(WorkerError, match=re.escape(CONNECTION_REPLACED_TEXT)):
        acting_session(replaced, pin(live), target, allow_ended=False)


def test_a_worker_whose_record_room_or_session_is_gone_has_no_acting_session() -> None:
    # The check after a room call reads the file afresh: another process may
    # have removed any part of the record meanwhile.
    live = session_json("s1", "token")
    target = Target(worker_id=WORKER, room_id=ROOM)
    no_worker = state_with(session=live)
    del no_worker["mcp_workers"][WORKER]
    no_rooms = state_with(session=live)
    del no_rooms["mcp_workers"][WORKER]["rooms"]
    no_session = state_with(session=live)
    del no_session["agent_sessions"]["s1"]
    for state in (no_worker, no_rooms, no_session):
        assert acting_session(state, pin(live), target, allow_ended=True) is None


def test_a_legacy_session_acts_while_it_is_stored_and_live() -> None:
    record = session_json("legacy", "t", agent_instance_id="old-agent")
    state = {"agent_sessions": {"legacy": record}}
    target = Target(worker_id=None, room_id=ROOM, legacy_session_id="legacy")
    assert acting_session(state, {}, target, allow_ended=False) == AgentSession.from_json(record)
    record["ended_at"] = NOW
    assert acting_session(state, {}, target, allow_ended=False) is None
    assert acting_session(state, {}, target, allow_ended=True) is not None
    assert acting_session({}, {}, target, allow_ended=True) is None


def test_a_session_the_room_forgot_is_ended_when_its_replacement_is_stored() -> None:
    """Issue 42: a room that forgot ``s0`` answers a new ``s1``; ``s0`` is ended, ``s1`` current."""
    state = state_with(session=session_json("s0", "token-old"), pending=OPERATION.to_json())
    record, _ = confirm(answer())
    store_hosted_session(state, WORKER, ROOM, OPERATION, record, now=NOW)
    assert state["mcp_workers"][WORKER]["rooms"][ROOM] == {"session_id": "s1"}
    assert state["agent_sessions"]["s0"]["ended_at"] == NOW
    assert state["agent_sessions"]["s1"] == record


def test_a_prepared_operation_without_proof_names_no_predecessor() -> None:
    """Issue 42: the proof of a session the room forgot is left out, not sent to be refused."""
    state = state_with(session=session_json("s0", "token-old"))
    operation = prepare_operation(
        state, WORKER, ROOM, operation_id="op", connection_token="t", prove=False
    )
    assert operation.predecessor is None
    assert state["mcp_workers"][WORKER]["rooms"][ROOM]["pending"] == {
        "operation_id": "op",
        "connection_token": "t",
    }
