"""The worker records' rules at their edges: damaged parts, odd ids, the whole codename space.

The rules themselves are in ``test_records.py``; these hold what happens when
the state file (written by us, the Node client, or by hand) holds something
unusual, and at the bounds of the local rooms' name allocation.
"""

from __future__ import annotations

import itertools
from typing import TYPE_CHECKING, Any

import pytest

from letagents_trio.workers import WorkerError
from letagents_trio.workers._acting import held_session
from letagents_trio.workers._names import AGENT_CODENAME_SPACE, CODENAME_WORDS, codename, name_key
from letagents_trio.workers._records import (
    Operation,
    drop_operation,
    held_under,
    local_session_id,
    store_local_session,
    stored_session,
    worker_in_scope,
)

from .test_records import (
    KEY,
    NOW,
    OPERATION,
    ROOM,
    SCOPE,
    WORDING,
    WORKER,
    facts,
    pin,
    session_json,
    state_with,
)

if TYPE_CHECKING:
    from letagents_trio import AgentSession

OTHER_WORKER = "worker_" + "c" * 32

# --- reading damaged or unusual parts --------------------------------------------------


@pytest.mark.parametrize("theirs", [None, 5, "no newline"])
def test_a_worker_of_an_unreadable_scope_is_of_another_account_or_api(theirs: object) -> None:
    state = state_with()
    state["mcp_workers"][WORKER]["scope"] = theirs
    with pytest.raises(WorkerError) as caught:
        worker_in_scope(state, WORKER, SCOPE, WORDING)
    assert (
        f"Worker {WORKER} was created for another account or API; this call is for owner at"
        " http://room.test." in str(caught.value)
    )


def test_an_operation_is_dropped_only_from_a_room_record_of_the_right_shape() -> None:
    damaged: object
    for damaged in ([], "rooms", None):
        state = state_with(pending=OPERATION.to_json())
        state["mcp_workers"][WORKER]["rooms"] = damaged
        assert not drop_operation(state, WORKER, ROOM, OPERATION)
        assert state["mcp_workers"][WORKER]["rooms"] == damaged


def test_a_session_is_read_only_under_a_non_empty_string_id() -> None:
    # A well-formed record filed under the empty key (a hand-edited file).
    state = {"agent_sessions": {"": session_json("s1", "token")}}
    assert stored_session(state, "") is None


@pytest.mark.parametrize(
    ("operation_id", "connection_token"), [("op-1", 5), (5, "token"), ("", "token"), ("op-1", "")]
)
def test_a_pending_operation_needs_a_string_id_and_token(
    operation_id: object, connection_token: object
) -> None:
    data = {"operation_id": operation_id, "connection_token": connection_token}
    assert Operation.from_json(data) is None


@pytest.mark.parametrize("bad", ["", 5, None])
def test_half_a_predecessor_proof_of_the_wrong_type_or_empty_is_none(bad: object) -> None:
    data = {"operation_id": "op-1", "connection_token": "token"}
    read = Operation.from_json({**data, "predecessor_id": bad, "predecessor_token": bad})
    assert read == Operation(operation_id="op-1", connection_token="token")


# --- recovery by name ----------------------------------------------------------------------


def test_held_under_goes_on_past_another_scopes_worker_and_reports_the_records_id() -> None:
    live = session_json("s1", "token", display_name="Field Meadow")
    state = state_with(session=live)
    ours = state["mcp_workers"].pop(WORKER)
    theirs = dict(ours, scope="http://other.test\nbob", worker_id=OTHER_WORKER)
    # Another scope's worker first, in the file's order; ours under a key that
    # is not its id (a hand-edited file): the record's own id is reported.
    state["mcp_workers"] = {OTHER_WORKER: theirs, "renamed": ours}
    found = held_under(state, pin(live), name="fieldmeadow", scope=SCOPE, room_id=ROOM)
    assert found == [(WORKER, "Field Meadow")]
    del ours["worker_id"]
    found = held_under(state, pin(live), name="fieldmeadow", scope=SCOPE, room_id=ROOM)
    assert found == [("renamed", "Field Meadow")]


def test_held_under_compares_the_stored_name_not_the_pins() -> None:
    # The pin is what this process registered; the room renamed the session since.
    stored = session_json("s1", "token", display_name="Field Meadow")
    pinned: dict[str, AgentSession] = pin({**stored, "display_name": "Old Name"})
    state = state_with(session=stored)
    where: dict[str, Any] = {"scope": SCOPE, "room_id": ROOM}
    assert held_under(state, pinned, name="Field Meadow", **where) == [(WORKER, "Field Meadow")]
    assert held_under(state, pinned, name="Old Name", **where) == []


# --- local rooms: the session made here ---------------------------------------------------


def local_state(**room: Any) -> dict[str, Any]:
    state = state_with(pending=OPERATION.to_json())
    state["mcp_workers"][WORKER]["rooms"][ROOM].update(room)
    state["agent_sessions"] = {}
    return state


def test_a_local_session_is_labelled_with_the_ide() -> None:
    record = store_local_session(
        local_state(), WORKER, ROOM, OPERATION, facts(ide_label="claude-code")
    )
    assert record["actor_label"] == "Juniper | owner's agent | Claude Code"


@pytest.mark.parametrize("prior_id", ["", 5])
def test_a_room_record_without_a_string_session_id_is_a_first_registration(
    prior_id: object,
) -> None:
    state = local_state(session_id=prior_id)
    record = store_local_session(state, WORKER, ROOM, OPERATION, facts())
    assert record["session_id"] == local_session_id(WORKER, ROOM)


def test_a_local_reregistration_keeps_the_session_id_it_has() -> None:
    state = local_state(session_id="local_kept")
    state["agent_sessions"]["local_kept"] = session_json("local_kept", "token-new")
    record = store_local_session(state, WORKER, ROOM, OPERATION, facts())
    assert record["session_id"] == "local_kept"
    assert state["mcp_workers"][WORKER]["rooms"][ROOM] == {"session_id": "local_kept"}


def test_a_prior_session_without_a_creation_time_is_created_now() -> None:
    state = local_state(session_id="local_kept")
    prior = session_json("local_kept", "token-new")
    prior.pop("created_at", None)
    state["agent_sessions"]["local_kept"] = prior
    record = store_local_session(state, WORKER, ROOM, OPERATION, facts())
    assert record["created_at"] == NOW


def test_a_first_registration_allocates_anew_over_a_leftover_session() -> None:
    # The room record was lost, the session at the local id was not: the name
    # is allocated again from the worker's, not taken from the leftover.
    state = local_state()
    leftover_id = local_session_id(WORKER, ROOM)
    state["agent_sessions"][leftover_id] = session_json(
        leftover_id, "token-new", display_name="Leftover"
    )
    record = store_local_session(state, WORKER, ROOM, OPERATION, facts())
    assert record["display_name"] == "Juniper"


def test_only_named_sessions_of_this_room_hold_a_local_name() -> None:
    state = local_state()
    state["agent_sessions"] = {
        "unnamed": session_json("unnamed", "t", display_name=None),
        "elsewhere": session_json("elsewhere", "t", display_name="XXXX", room_id="room_other"),
    }
    record = store_local_session(state, WORKER, ROOM, OPERATION, facts(worker_name="XXXX"))
    assert record["display_name"] == "XXXX"


def test_a_local_room_scans_the_whole_codename_space_then_takes_the_last_candidate() -> None:
    # Past the hosted room's 1 024 offsets: the first free codename after them.
    held = {name_key("Juniper")} | {
        name_key(codename(f"{KEY}:{k}").display_name) for k in range(1, 1025)
    }
    state = local_state()
    for n, key in enumerate(sorted(held)):
        state["agent_sessions"][f"s{n}"] = session_json(f"s{n}", "t", display_name=key)
    record = store_local_session(state, WORKER, ROOM, OPERATION, facts())
    expected = next(
        name
        for k in itertools.count(1025)
        if name_key(name := codename(f"{KEY}:{k}").display_name) not in held
    )
    assert record["display_name"] == expected
    # Every codename held: a local room never refuses, the last candidate is taken.
    state = local_state()
    every = ["Juniper"] + [a + b for a, b in itertools.product(CODENAME_WORDS, repeat=2)]
    for n, name in enumerate(every):
        state["agent_sessions"][f"s{n}"] = session_json(f"s{n}", "t", display_name=name)
    record = store_local_session(state, WORKER, ROOM, OPERATION, facts())
    assert record["display_name"] == codename(f"{KEY}:{AGENT_CODENAME_SPACE}").display_name


# --- the one worker held in a room ---------------------------------------------------------


def test_the_worker_held_in_a_room_is_found_past_damaged_records_and_never_ended() -> None:
    live = session_json("s1", "token")
    state = state_with(session=live)
    # Before ours in the file: a record that is no object, and one without rooms.
    state["mcp_workers"] = {
        "worker_" + "d" * 32: "damaged",
        OTHER_WORKER: {"worker_id": OTHER_WORKER, "scope": SCOPE},
        **state["mcp_workers"],
    }
    pins = pin(live)
    held = held_session(state, pins.get, ROOM)
    assert held is not None
    assert held.session_id == "s1"
    state["agent_sessions"]["s1"]["ended_at"] = NOW
    assert held_session(state, pins.get, ROOM) is None
