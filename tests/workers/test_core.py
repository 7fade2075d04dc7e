"""Worker handles (PROTOCOL §5, §6.3-§6.6): create, resume, recover, disconnect.

Every test runs against the reference room in-process (``FakeRoom``) under
``autojump_clock``, through the fault layer of ``helpers.py``. The acceptance
scenarios of §8.2 and §8.3 are in ``test_recovery.py`` and ``test_handles.py``;
real sockets and a SIGKILLed subprocess in ``test_loopback.py``.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import attrs
import pytest
import trio
import trio.testing

from letagents_trio import ApiError, HolderStatus, RoomUnreachable
from letagents_trio._protocol import BUSY_TEXT
from letagents_trio.workers import (
    StateUnavailable,
    WorkerError,
    WorkerHandlesStatistics,
    WorkerRegistration,
)
from letagents_trio.workers._names import codename
from letagents_trio.workers._records import prepare_operation
from letagents_trio.workers._wire import (
    BOTH_HANDLES_TEXT,
    CONTROLLER_TEXT,
    IN_PROGRESS_TEXT,
    NEW_CHAT_KEY_TEXT,
    NO_CANONICAL_IDENTITY_TEXT,
    NO_CONNECTION_TEXT,
    NOT_CONFIRMED_TEXT,
    PUBLIC_SESSION_FIELDS,
    RECOVER_ARGUMENTS_TEXT,
    ROOM_REQUIRED_TEXT,
    SUPERSEDED_TEXT,
    SUPERVISED_TEXT,
    UNKNOWN_WORKER_TEXT,
)

from .helpers import (
    OWNER_TOKEN,
    REGISTRATIONS,
    ROOM,
    open_proc,
    read_bytes,
    read_json,
    registration_bodies,
    registrations,
    requests,
    seed_state,
    write_text,
)

if TYPE_CHECKING:
    from trio.testing import MockClock

    from letagents_trio.testing import FakeRoom

TOKEN_RE = re.compile(r"[A-Za-z0-9_-]{43}")
# The room's busy answer to a registration (R3, PROTOCOL §2.1).
BUSY: Final = {"error": BUSY_TEXT}
RETRY_AFTER_1: Final = {"Retry-After": "1"}


def _session_path(sid: str, suffix: str = "") -> str:
    return f"/rooms/{ROOM}/agent-sessions/{sid}{suffix}"


# --- the request sequences the closing note quotes ------------------------------------


async def test_request_sequences_of_create_restart_resume_and_recover(
    autojump_clock: MockClock, fake_room: FakeRoom, state_path: Path
) -> None:
    """What the room sees for a create, a resume after a restart, and a recover."""
    await seed_state(state_path)
    async with open_proc(fake_room.transport, state_path) as first:
        created = await first.handles.register(
            room_id=ROOM, registration_key="chat-1", display_name="Juniper"
        )
        sid = created.session.session_id
        await fake_room.wait_until(lambda: len(fake_room.process_requests(sid)) == 1)
        assert requests(fake_room) == [
            "GET /agents/me",
            "POST /agents",
            f"POST /rooms/{ROOM}/agent-sessions",
            f"GET {_session_path(sid, '/process')}",
        ]
        mark = len(fake_room.requests)
        recovered = await first.handles.register(
            room_id=ROOM, display_name="juniper", recover_lost_worker=True
        )
        await trio.testing.wait_all_tasks_blocked()
        # Recovery confirms the pin with the room: one registration that changes nothing.
        assert requests(fake_room, mark) == [f"POST /rooms/{ROOM}/agent-sessions"]
        assert recovered.worker_id == created.worker_id
        assert recovered.session.session_id == sid
        mark = len(fake_room.requests)
    # Leaving the process announces its exit.
    assert requests(fake_room, mark) == [f"POST {_session_path(sid, '/process/exit')}"]
    mark = len(fake_room.requests)
    async with open_proc(fake_room.transport, state_path) as second:
        resumed = await second.handles.register(room_id=ROOM, worker_id=created.worker_id)
        with trio.fail_after(100):
            await fake_room.wait_until(lambda: len(fake_room.process_requests(sid)) == 2)
        assert requests(fake_room, mark) == [
            "GET /agents/me",
            "POST /agents",
            f"POST /rooms/{ROOM}/agent-sessions",
            f"GET {_session_path(sid, '/process')}",
        ]
        assert resumed.session.session_id == sid
        assert resumed.session.display_name == "Juniper"
        assert resumed.session.session_token != created.session.session_token
        body = registration_bodies(fake_room)[-1]
        # §8.1.4: one machine, one process_host_id, whichever process registers.
        assert body["process_host_id"] == registration_bodies(fake_room)[0]["process_host_id"]
        assert body["replace_agent_session_id"] == sid
        assert body["replace_agent_session_token"] == created.session.session_token


# --- create ---------------------------------------------------------------------------


async def test_create_stores_the_worker_and_its_session(
    autojump_clock: MockClock, fake_room: FakeRoom, state_path: Path
) -> None:
    await seed_state(state_path)
    async with open_proc(fake_room.transport, state_path) as p:
        reg = await p.handles.register(
            room_id=ROOM, registration_key="  key with spaces ", display_name="  Juniper "
        )
    assert re.fullmatch(r"worker_[0-9a-f]{32}", reg.worker_id)
    state = read_json(state_path)
    scope = f"{fake_room.api_url}\nowner"
    worker = state["mcp_workers"][reg.worker_id]
    assert worker == {
        "worker_id": reg.worker_id,
        "scope": scope,
        # The raw key is hashed as given, not trimmed.
        "registration_key_hash": hashlib.sha256(
            f"{scope}\n  key with spaces ".encode()
        ).hexdigest(),
        "display_name": "Juniper",
        "rooms": {ROOM: {"session_id": reg.session.session_id}},
    }
    stored = state["agent_sessions"][reg.session.session_id]
    assert stored["session_token"] == reg.session.session_token
    assert stored["agent_instance_id"] == reg.worker_id
    assert stored["agent_key"] == f"owner/worker-{reg.worker_id.removeprefix('worker_')}"
    assert stored["requested_base_display_name"] == "Juniper"
    for dropped in ("assigned_base_display_name", "worker_bearer", "adopted_task_leases"):
        assert dropped not in stored
    body = registration_bodies(fake_room)[0]
    assert body["actor_key"] == stored["agent_key"]
    assert body["agent_instance_id"] == reg.worker_id
    assert body["display_name"] == body["requested_base_display_name"] == "Juniper"
    assert body["session_kind"] == "worker"
    assert body["replace_agent_session_id"] is None
    assert body["replace_agent_session_token"] is None
    assert TOKEN_RE.fullmatch(body["connection_token"])
    assert re.fullmatch(r"phost_[0-9a-f]{32}", body["process_host_id"])
    liveness = body["registration_liveness"]
    assert liveness["host_id"] == state["local_host_id"]
    assert liveness["host_label"] is None
    assert liveness["tool_bridge_id"].startswith(state["local_host_id"] + ":")


async def test_a_create_without_a_name_takes_the_codename_of_its_worker_id(
    autojump_clock: MockClock, fake_room: FakeRoom, state_path: Path
) -> None:
    await seed_state(state_path)
    async with open_proc(fake_room.transport, state_path) as p:
        reg = await p.handles.register(room_id=ROOM, registration_key="k")
    worker = read_json(state_path)["mcp_workers"][reg.worker_id]
    assert worker["display_name"] == codename(reg.worker_id).display_name


async def test_the_same_key_finds_the_same_worker_and_keeps_its_name(
    autojump_clock: MockClock, fake_room: FakeRoom, state_path: Path
) -> None:
    await seed_state(state_path)
    async with open_proc(fake_room.transport, state_path) as p:
        first = await p.handles.register(room_id=ROOM, registration_key="k", display_name="Juniper")
    async with open_proc(fake_room.transport, state_path) as p:
        again = await p.handles.register(
            room_id=ROOM, registration_key="k", display_name="Something Else"
        )
    assert again.worker_id == first.worker_id
    assert again.session.session_id == first.session.session_id
    # An existing record's display_name is not updated.
    assert read_json(state_path)["mcp_workers"][first.worker_id]["display_name"] == "Juniper"


async def test_the_account_is_looked_up_once(
    autojump_clock: MockClock, fake_room: FakeRoom, state_path: Path
) -> None:
    await seed_state(state_path)
    async with open_proc(fake_room.transport, state_path) as p:
        await p.handles.register(room_id=ROOM, registration_key="a")
        await p.handles.register(room_id=ROOM, registration_key="b")
    assert requests(fake_room).count("GET /agents/me") == 1
    assert p.handles.statistics() == WorkerHandlesStatistics(
        pinned_sessions=2, registrations_in_flight=0, account_cached=True
    )
    p.handles.forget_account()
    assert not p.handles.statistics().account_cached


async def test_a_failed_account_lookup_is_not_cached(
    autojump_clock: MockClock, fake_room: FakeRoom, state_path: Path
) -> None:
    await seed_state(state_path)
    async with open_proc(fake_room.transport, state_path) as p:
        fake_room.on("GET", "/agents/me").respond(503, {"error": "Service unavailable"})
        with pytest.raises(
            WorkerError, match=r"Could not verify your LetAgents account at \S+: HTTP 503"
        ):
            await p.handles.register(room_id=ROOM, registration_key="a")
        await p.handles.register(room_id=ROOM, registration_key="a")
    assert requests(fake_room).count("GET /agents/me") == 2


# --- the prepared operation -------------------------------------------------------------


async def test_the_operation_is_stored_before_the_registration_is_sent(
    autojump_clock: MockClock, fake_room: FakeRoom, state_path: Path
) -> None:
    await seed_state(state_path)
    seen_pending: list[dict[str, Any]] = []

    def inspect(answer: dict[str, Any]) -> dict[str, Any]:
        # The room has answered; the client has not heard yet.
        body = registration_bodies(fake_room)[-1]
        state = read_json(state_path)
        for worker in state["mcp_workers"].values():
            pending = worker["rooms"][ROOM]["pending"]
            seen_pending.append(pending)
            assert pending["connection_token"] == body["connection_token"]
        return answer

    async with open_proc(fake_room.transport, state_path) as p:
        fake_room.on("POST", REGISTRATIONS).rewrite(inspect, times=None)
        created = await p.handles.register(room_id=ROOM, registration_key="k")
        # A resume after the session ended: the pending op names its predecessor.
        fake_room.end(created.session.session_id)
        await p.store.end_session(
            created.session.session_id, "2026-01-01T00:00:00.000Z", created.session.session_token
        )
        await p.handles.register(room_id=ROOM, worker_id=created.worker_id)
    first, second = seen_pending
    assert set(first) == {"operation_id", "connection_token"}
    assert TOKEN_RE.fullmatch(first["connection_token"])
    assert second["predecessor_id"] == created.session.session_id
    assert second["predecessor_token"] == created.session.session_token
    assert second["operation_id"] != first["operation_id"]
    # Finished: nothing pending is left.
    assert "pending" not in read_json(state_path)["mcp_workers"][created.worker_id]["rooms"][ROOM]


async def test_a_refused_registration_leaves_no_pending_operation(
    autojump_clock: MockClock, fake_room: FakeRoom, state_path: Path
) -> None:
    """A 4xx means the room stored nothing: the next call prepares a fresh operation."""
    await seed_state(state_path)
    async with open_proc(fake_room.transport, state_path) as p:
        created = await p.handles.register(room_id=ROOM, registration_key="k")
        # Another process's token is now the room's (our proof is stale).
        row = fake_room.room.session(created.session.session_id)
        assert row is not None
        fake_room.room.store.put_session(attrs.evolve(row, token_hash="x"))
        await p.store.end_session(
            created.session.session_id, "2026-01-01T00:00:00.000Z", created.session.session_token
        )
        with pytest.raises(ApiError) as caught:
            await p.handles.register(room_id=ROOM, worker_id=created.worker_id)
        assert caught.value.status == 409
    rooms = read_json(state_path)["mcp_workers"][created.worker_id]["rooms"]
    assert "pending" not in rooms[ROOM]
    assert len(registrations(fake_room)) == 2


async def test_a_pending_operation_blocks_worker_calls_and_a_second_preparation(
    autojump_clock: MockClock, fake_room: FakeRoom, state_path: Path
) -> None:
    await seed_state(state_path)
    async with open_proc(fake_room.transport, state_path) as p:
        created = await p.handles.register(room_id=ROOM, registration_key="k")
        fake_room.on("POST", REGISTRATIONS).drop_after_commit()
        await p.store.end_session(
            created.session.session_id, "2026-01-01T00:00:00.000Z", created.session.session_token
        )
        with pytest.raises(RoomUnreachable):
            await p.handles.register(room_id=ROOM, worker_id=created.worker_id)
        # Revive the record: only the pending operation stands in the way now.
        await p.store.update(
            lambda s: s["agent_sessions"][created.session.session_id].update(ended_at=None)
        )
        with pytest.raises(WorkerError, match=re.escape(NO_CONNECTION_TEXT)):
            async with p.handles.acting_as(worker_id=created.worker_id):
                pass
        # Preparing a second operation beside it is refused.
        with pytest.raises(WorkerError, match=re.escape(IN_PROGRESS_TEXT)):
            await p.store.update(
                lambda s: prepare_operation(
                    s, created.worker_id, ROOM, operation_id="op-2", connection_token="token-2"
                )
            )


async def test_an_operation_superseded_while_in_flight_is_not_written(
    autojump_clock: MockClock, fake_room: FakeRoom, state_path: Path
) -> None:
    await seed_state(state_path)

    def supersede(answer: dict[str, Any]) -> dict[str, Any]:
        raw = read_json(state_path)
        for worker in raw["mcp_workers"].values():
            worker["rooms"][ROOM]["pending"]["operation_id"] = "someone-else"
        write_text(state_path, json.dumps(raw))
        return answer

    async with open_proc(fake_room.transport, state_path) as p:
        fake_room.on("POST", REGISTRATIONS).rewrite(supersede)
        with pytest.raises(WorkerError, match=re.escape(SUPERSEDED_TEXT)):
            await p.handles.register(room_id=ROOM, registration_key="k")
    assert "agent_sessions" not in read_json(state_path)


# --- the 201 is validated field by field --------------------------------------------------


@pytest.mark.parametrize(
    "tamper",
    [
        pytest.param(lambda b: {k: v for k, v in b.items() if k != "session_id"}, id="no id"),
        pytest.param(lambda b: {**b, "session_id": ""}, id="empty session_id"),
        pytest.param(lambda b: {**b, "session_token": "A" * 43}, id="another token"),
        pytest.param(lambda b: {**b, "agent_instance_id": "worker_" + "0" * 32}, id="instance"),
        pytest.param(lambda b: {**b, "agent_key": "owner/someone"}, id="agent_key"),
        pytest.param(lambda b: {**b, "room_id": "room_elsewhere"}, id="room_id"),
        pytest.param(lambda b: {**b, "ended_at": "2026-01-01T00:00:00.000Z"}, id="ended"),
    ],
)
async def test_an_unconfirmed_registration_is_refused(
    autojump_clock: MockClock,
    fake_room: FakeRoom,
    state_path: Path,
    tamper: Any,
) -> None:
    await seed_state(state_path)
    async with open_proc(fake_room.transport, state_path) as p:
        fake_room.on("POST", REGISTRATIONS).rewrite(tamper)
        with pytest.raises(WorkerError) as caught:
            await p.handles.register(room_id=ROOM, registration_key="k")
    assert str(caught.value) == NOT_CONFIRMED_TEXT
    assert "agent_sessions" not in read_json(state_path)


async def test_no_canonical_identity_is_refused(
    autojump_clock: MockClock, fake_room: FakeRoom, state_path: Path
) -> None:
    await seed_state(state_path)
    fake_room.on("POST", "/agents").respond(200, {"canonical_key": ""})
    async with open_proc(fake_room.transport, state_path) as p:
        with pytest.raises(WorkerError) as caught:
            await p.handles.register(room_id=ROOM, registration_key="k")
    assert str(caught.value) == NO_CANONICAL_IDENTITY_TEXT
    assert len(registrations(fake_room)) == 0


async def test_a_busy_room_is_asked_again_after_one_then_two_seconds(
    autojump_clock: MockClock, fake_room: FakeRoom, state_path: Path
) -> None:
    await seed_state(state_path)
    fake_room.on("POST", REGISTRATIONS).respond(503, BUSY, headers=RETRY_AFTER_1, times=2)
    async with open_proc(fake_room.transport, state_path) as p:
        reg = await p.handles.register(room_id=ROOM, registration_key="k")
        assert [r.time for r in registrations(fake_room)] == [0, 1, 3]
        # The retries are the same operation: one token throughout.
        assert len({b["connection_token"] for b in registration_bodies(fake_room)}) == 1
        assert reg.session.session_token == registration_bodies(fake_room)[0]["connection_token"]


# --- the pinned fast path and the process connection ------------------------------------------


async def test_a_pinned_session_is_confirmed_by_the_room_and_kept_as_it_is(
    autojump_clock: MockClock, fake_room: FakeRoom, state_path: Path
) -> None:
    """A pin the room still has: one registration in the lost-response form, nothing changed."""
    await seed_state(state_path)
    async with open_proc(fake_room.transport, state_path) as p:
        reg = await p.handles.register(room_id=ROOM, registration_key="k")
        sid = reg.session.session_id
        holder = p.manager.holders[sid]
        await fake_room.wait_until(lambda: len(fake_room.process_requests(sid)) == 1)
        mark = len(fake_room.requests)
        stored = read_bytes(state_path)
        again = await p.handles.register(room_id=ROOM, worker_id=reg.worker_id)
        same_key = await p.handles.register(room_id=ROOM, registration_key="k")
        await trio.testing.wait_all_tasks_blocked()
        assert requests(fake_room, mark) == [f"POST /rooms/{ROOM}/agent-sessions"] * 2
        for body in registration_bodies(fake_room)[-2:]:
            assert body["connection_token"] == reg.session.session_token
            assert body["replace_agent_session_id"] == sid
            assert body["replace_agent_session_token"] == reg.session.session_token
        assert again.session == reg.session == same_key.session
        # The same holder, its stream never reopened, and the state file unchanged.
        assert p.manager.holders[sid] is holder
        assert len(fake_room.process_requests(sid)) == 1
        assert read_bytes(state_path) == stored


async def test_a_released_holder_is_held_again_by_the_fast_path(
    autojump_clock: MockClock, fake_room: FakeRoom, state_path: Path
) -> None:
    await seed_state(state_path)
    async with open_proc(fake_room.transport, state_path) as p:
        reg = await p.handles.register(room_id=ROOM, registration_key="k")
        sid = reg.session.session_id
        # The first stream reaches the room before it is released.
        await fake_room.wait_until(lambda: len(fake_room.process_requests(sid)) == 1)
        assert p.manager.release(sid)
        assert sid not in p.manager.holders
        await p.handles.register(room_id=ROOM, worker_id=reg.worker_id)
        assert sid in p.manager.holders
        await fake_room.wait_until(lambda: len(fake_room.process_requests(sid)) == 2)


async def test_an_ended_session_is_registered_again_and_keeps_its_id(
    autojump_clock: MockClock, fake_room: FakeRoom, state_path: Path
) -> None:
    """§8.1.3: the room ends the session; its stream says so; a resume registers again."""
    await seed_state(state_path)
    async with open_proc(fake_room.transport, state_path) as p:
        reg = await p.handles.register(room_id=ROOM, registration_key="k")
        sid = reg.session.session_id
        await fake_room.wait_until(lambda: len(fake_room.process_requests(sid)) == 1)
        holder = p.manager.holders[sid]
        fake_room.end(sid)
        await holder.wait_status(HolderStatus.ENDED)
        await trio.testing.wait_all_tasks_blocked()  # its on_ended hook has run
        stored = p.store.stored_session(sid)
        assert stored is not None
        assert stored.ended_at is not None
        before = len(registrations(fake_room))
        again = await p.handles.register(room_id=ROOM, worker_id=reg.worker_id)
        assert len(registrations(fake_room)) == before + 1
        assert again.session.session_id == sid
        with trio.fail_after(100):
            await fake_room.wait_until(lambda: len(fake_room.process_requests(sid)) == 2)


# --- disconnect ------------------------------------------------------------------------------


async def test_disconnect_ends_the_session_here_and_at_the_room(
    autojump_clock: MockClock, fake_room: FakeRoom, state_path: Path
) -> None:
    await seed_state(state_path)
    async with open_proc(fake_room.transport, state_path) as p:
        reg = await p.handles.register(room_id=ROOM, registration_key="k", display_name="Cedar")
        sid = reg.session.session_id
        await fake_room.wait_until(lambda: len(fake_room.process_requests(sid)) == 1)
        mark = len(fake_room.requests)
        ended = await p.handles.disconnect(worker_id=reg.worker_id)
        assert requests(fake_room, mark) == [f"POST {_session_path(sid, '/disconnect')}"]
        assert sid not in p.manager.holders
        row = fake_room.room.session(sid)
        assert row is not None
        assert row.ended_at is not None
        assert ended.ended_at is not None
        stored = p.store.stored_session(sid)
        assert stored is not None
        assert stored.ended_at == ended.ended_at
        # The room's own ended_at is the one kept.
        assert ended.ended_at.startswith("2026-01-01T00:00:")
        with pytest.raises(WorkerError, match=re.escape(NO_CONNECTION_TEXT)):
            async with p.handles.acting_as(worker_id=reg.worker_id):
                pass
        with pytest.raises(WorkerError, match="no worker named"):
            await p.handles.register(room_id=ROOM, display_name="Cedar", recover_lost_worker=True)
        # Released before the end: no exit announcement for it at shutdown.
        await trio.testing.wait_all_tasks_blocked()
        assert fake_room.exits == []
        back = await p.handles.register(room_id=ROOM, worker_id=reg.worker_id)
        assert back.session.session_id == sid
        assert back.session.display_name == "Cedar"
        assert back.session.ended_at is None
        with trio.fail_after(100):
            await fake_room.wait_until(lambda: len(fake_room.process_requests(sid)) == 2)


# --- validation order and exact texts ---------------------------------------------------------

# Issue 29: an unknown worker_id says why, and names the call that registers one.
HOW_TO_REGISTER = (
    " To create a worker for this chat, call WorkerHandles.register with a new"
    " registration_key; to resume one, pass a worker_id that WorkerHandles.register"
    " returned for this account and API."
)


@pytest.mark.parametrize(
    ("kwargs", "text"),
    [
        ({"room_id": ROOM, "registration_key": "k", "session_kind": "controller"}, CONTROLLER_TEXT),
        ({"room_id": None, "registration_key": "k", "session_kind": "controller"}, CONTROLLER_TEXT),
        ({"room_id": None, "registration_key": "k"}, ROOM_REQUIRED_TEXT),
        ({"room_id": "  ", "registration_key": "k"}, ROOM_REQUIRED_TEXT),
        (
            {"room_id": ROOM, "recover_lost_worker": True, "display_name": "X", "worker_id": "w"},
            RECOVER_ARGUMENTS_TEXT,
        ),
        (
            {"room_id": ROOM, "recover_lost_worker": True, "registration_key": "k"},
            RECOVER_ARGUMENTS_TEXT,
        ),
        (
            {"room_id": ROOM, "recover_lost_worker": True, "display_name": " "},
            RECOVER_ARGUMENTS_TEXT,
        ),
        ({"room_id": ROOM, "worker_id": "w", "registration_key": "k"}, BOTH_HANDLES_TEXT),
        ({"room_id": ROOM}, NEW_CHAT_KEY_TEXT),
        ({"room_id": ROOM, "registration_key": "   "}, NEW_CHAT_KEY_TEXT),
        (
            {"room_id": ROOM, "worker_id": "worker_123"},
            f"{UNKNOWN_WORKER_TEXT} 'worker_123' is not a worker handle (worker_ and 32 hex"
            f" digits).{HOW_TO_REGISTER}",
        ),
        (
            {"room_id": ROOM, "worker_id": "worker_" + "0" * 32},
            f"{UNKNOWN_WORKER_TEXT} No worker worker_{'0' * 32} is stored in this state"
            f" file.{HOW_TO_REGISTER}",
        ),
    ],
)
async def test_argument_errors_have_the_exact_texts(
    autojump_clock: MockClock,
    fake_room: FakeRoom,
    state_path: Path,
    kwargs: dict[str, Any],
    text: str,
) -> None:
    await seed_state(state_path)
    before = read_bytes(state_path)
    async with open_proc(fake_room.transport, state_path) as p:
        with pytest.raises(WorkerError) as caught:
            await p.handles.register(**kwargs)
    assert str(caught.value) == text
    assert read_bytes(state_path) == before
    assert len(registrations(fake_room)) == 0


async def test_a_worker_of_another_account_is_unknown(
    autojump_clock: MockClock, fake_room: FakeRoom, state_path: Path
) -> None:
    await seed_state(state_path)
    async with open_proc(fake_room.transport, state_path) as p:
        reg = await p.handles.register(room_id=ROOM, registration_key="k")
    await p.store.update(
        lambda s: s["mcp_workers"][reg.worker_id].update(scope="http://room.test\nsomeone")
    )
    async with open_proc(fake_room.transport, state_path) as p:
        with pytest.raises(WorkerError) as caught:
            await p.handles.register(room_id=ROOM, worker_id=reg.worker_id)
    assert str(caught.value) == (
        f"{UNKNOWN_WORKER_TEXT} Worker {reg.worker_id} was created for someone at"
        f" http://room.test; this call is for owner at http://room.test.{HOW_TO_REGISTER}"
    )


async def test_a_supervised_process_has_no_worker_handles(
    autojump_clock: MockClock, fake_room: FakeRoom, state_path: Path
) -> None:
    await seed_state(state_path)
    async with open_proc(fake_room.transport, state_path, owner_mode=False) as p:
        with pytest.raises(WorkerError) as caught:
            await p.handles.register(room_id=ROOM, registration_key="k")
    assert str(caught.value) == SUPERVISED_TEXT
    assert fake_room.requests == []


async def test_a_hosted_room_needs_a_sign_in(
    autojump_clock: MockClock, fake_room: FakeRoom, state_path: Path
) -> None:
    async with open_proc(fake_room.transport, state_path, owner_token=None) as p:
        with pytest.raises(WorkerError) as caught:
            await p.handles.register(room_id=ROOM, registration_key="k")
    # Issue 29: an embedder runs no MCP server and sets no LETAGENTS_TOKEN.
    assert str(caught.value) == (
        "Sign in before registering a worker in a hosted room: this RoomClient has no owner"
        f" token. Store it as auth.token in {state_path} (the Node letagents client's sign-in"
        " writes it there; it is read at the next call), or pass it to the RoomClient"
        " (owner_token=). Rooms marked local in the chat-storage settings need no sign-in."
    )
    assert "LETAGENTS_TOKEN" not in str(caught.value)
    assert fake_room.requests == []
    assert not state_path.exists()  # noqa: ASYNC240 - a refused registration stored no worker


async def test_a_damaged_state_file_is_refused_and_left_alone(
    autojump_clock: MockClock, fake_room: FakeRoom, state_path: Path
) -> None:
    write_text(state_path, "{not json")
    async with open_proc(fake_room.transport, state_path) as p:
        with pytest.raises(StateUnavailable) as caught:
            await p.handles.register(room_id=ROOM, registration_key="k")
        with pytest.raises(StateUnavailable):
            await p.handles.register(room_id=ROOM, worker_id="worker_" + "1" * 32)
    assert str(caught.value) == "Worker state is unavailable; restore it before reconnecting."
    assert read_bytes(state_path) == b"{not json"
    assert len(registrations(fake_room)) == 0


# --- in-flight de-duplication -------------------------------------------------------------------


async def test_a_cancelled_leader_leaves_the_waiters_to_register_themselves(
    autojump_clock: MockClock, fake_room: FakeRoom, state_path: Path
) -> None:
    await seed_state(state_path)
    results: list[WorkerRegistration] = []
    async with open_proc(fake_room.transport, state_path) as p:
        created = await p.handles.register(room_id=ROOM, registration_key="k")
        await p.store.end_session(
            created.session.session_id, "2026-01-01T00:00:00.000Z", created.session.session_token
        )
        # The leader is answered busy and waits 1 s: cancel it then.
        fake_room.on("POST", REGISTRATIONS).respond(503, BUSY, headers=RETRY_AFTER_1)
        async with trio.open_nursery() as nursery:
            leader = trio.CancelScope()

            async def lead() -> None:
                with leader:
                    await p.handles.register(room_id=ROOM, worker_id=created.worker_id)

            async def follow() -> None:
                results.append(await p.handles.register(room_id=ROOM, worker_id=created.worker_id))

            nursery.start_soon(lead)
            await trio.testing.wait_all_tasks_blocked()
            nursery.start_soon(follow)
            await trio.sleep(0.5)
            leader.cancel(reason="the chat went away")
    assert len(results) == 1
    # The follower finished the leader's operation: one token, one session.
    assert len({b["connection_token"] for b in registration_bodies(fake_room)[1:]}) == 1
    assert results[0].session.session_id == created.session.session_id


# --- public projection, secrets ----------------------------------------------------------------


async def test_the_public_projection_and_repr_hold_no_secret(
    autojump_clock: MockClock, fake_room: FakeRoom, state_path: Path
) -> None:
    await seed_state(state_path)
    async with open_proc(fake_room.transport, state_path) as p:
        reg = await p.handles.register(room_id=ROOM, registration_key="k")
    public = reg.public_session()
    assert tuple(public) == PUBLIC_SESSION_FIELDS
    text = json.dumps(public) + repr(reg) + repr(p.handles)
    assert reg.session.session_token not in text
    assert OWNER_TOKEN not in text
    assert "session_token" not in text
