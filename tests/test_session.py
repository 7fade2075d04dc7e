"""AgentSession: built from the room's JSON, round-tripped, and never showing its token."""

from __future__ import annotations

import json
from typing import Any

import attrs
import pytest

from letagents_trio import AgentSession

TOKEN = "sess-token-5f2c9a"

ROOM_JSON: dict[str, Any] = {
    "session_id": "wsess_abc",
    "session_token": TOKEN,
    "room_id": "owner/repo",
    "session_kind": "worker",
    "ended_at": None,
    "display_name": "Juniper",
    "runtime": "python",
    "host_id": "phost_1",
    "adopted_task_leases": [{"lease_id": "l1", "task_id": "t1", "kind": "work"}],
    "assigned_base_display_name": "Juniper",
}


def test_from_json_reads_the_typed_fields() -> None:
    session = AgentSession.from_json(ROOM_JSON)
    assert session.session_id == "wsess_abc"
    assert session.session_token == TOKEN
    assert session.room_id == "owner/repo"
    assert session.session_kind == "worker"
    assert session.ended_at is None
    assert session.display_name == "Juniper"


def test_from_json_keeps_every_unknown_key_in_extra() -> None:
    session = AgentSession.from_json(ROOM_JSON)
    assert dict(session.extra) == {
        "runtime": "python",
        "host_id": "phost_1",
        "adopted_task_leases": [{"lease_id": "l1", "task_id": "t1", "kind": "work"}],
        "assigned_base_display_name": "Juniper",
    }


@pytest.mark.parametrize("key", ["session_id", "session_token", "room_id"])
@pytest.mark.parametrize("bad", ["<missing>", None, "", 7, ["x"], {"a": 1}])
def test_from_json_requires_the_three_strings(key: str, bad: object) -> None:
    data = dict(ROOM_JSON)
    if bad == "<missing>":
        del data[key]
    else:
        data[key] = bad
    with pytest.raises(ValueError, match=repr(key)) as info:
        AgentSession.from_json(data)
    assert TOKEN not in str(info.value)


def test_from_json_defaults_for_missing_or_odd_optional_fields() -> None:
    minimal = {"session_id": "s", "session_token": TOKEN, "room_id": "r"}
    session = AgentSession.from_json(minimal)
    assert (session.session_kind, session.ended_at, session.display_name) == ("worker", None, "")
    assert dict(session.extra) == {}
    odd = AgentSession.from_json(minimal | {"session_kind": 3, "ended_at": "", "display_name": 9})
    assert (odd.session_kind, odd.ended_at, odd.display_name) == ("worker", None, "")
    ended = AgentSession.from_json(minimal | {"ended_at": "2026-01-01T00:00:00.000Z"})
    assert ended.ended_at == "2026-01-01T00:00:00.000Z"


def test_to_json_round_trips() -> None:
    session = AgentSession.from_json(ROOM_JSON)
    as_json = session.to_json()
    assert as_json == ROOM_JSON
    assert AgentSession.from_json(as_json) == session
    # Through real JSON text too, as the state file stores it.
    assert AgentSession.from_json(json.loads(json.dumps(as_json))) == session


def test_to_json_of_a_constructed_session_round_trips() -> None:
    session = AgentSession(
        session_id="s1",
        session_token=TOKEN,
        room_id="r",
        session_kind="controller",
        ended_at="2026-01-01T00:00:00.000Z",
        display_name="Oak",
        extra={"runtime": "python"},
    )
    assert AgentSession.from_json(session.to_json()) == session


def test_typed_fields_win_over_extra_in_to_json() -> None:
    session = AgentSession(session_id="s1", session_token=TOKEN, room_id="r", extra={"x": 1})
    assert session.to_json()["session_id"] == "s1"


def test_repr_hides_the_token_and_extra() -> None:
    session = AgentSession.from_json(ROOM_JSON | {"worker_bearer": "lasb_secret_bearer"})
    text = repr(session)
    assert TOKEN not in text
    assert "session_token" not in text
    assert "lasb_secret_bearer" not in text
    assert "wsess_abc" in text
    assert TOKEN not in str(session)


def test_is_frozen_and_extra_is_read_only() -> None:
    passed = {"runtime": "python"}
    session = AgentSession(session_id="s", session_token=TOKEN, room_id="r", extra=passed)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        session.session_token = "other"  # type: ignore[misc]
    with pytest.raises(TypeError):
        session.extra["runtime"] = "node"  # type: ignore[index]
    passed["runtime"] = "changed by the caller"
    assert session.extra["runtime"] == "python"


def test_is_hashable_and_equal_values_hash_equal() -> None:
    one = AgentSession.from_json(ROOM_JSON)
    two = AgentSession.from_json(dict(ROOM_JSON))
    assert one == two
    assert hash(one) == hash(two)
    assert len({one, two}) == 1
    assert one != attrs.evolve(one, extra={"runtime": "node"})
    assert one != attrs.evolve(one, session_token="another-token")


@pytest.mark.parametrize(
    ("session_id", "local"),
    [("local_abc", True), ("local_", True), ("wsess_local_x", False), ("Local_abc", False)],
)
def test_is_local(session_id: str, local: bool) -> None:
    session = AgentSession(session_id=session_id, session_token=TOKEN, room_id="r")
    assert session.is_local is local
