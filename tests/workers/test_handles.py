"""PROTOCOL §8.3 (worker-handles-stdio): the handle scenarios that need no MCP layer.

A "process" is a :class:`~tests.workers.helpers.Proc`: its own state-store
object, room client, connection manager and worker handles, on the one state
file the test shares between them. Scenario 2 (tool schemas) and 14 (the local
chat database) belong to the MCP layer; 11 (SIGKILL) is in ``test_loopback.py``.
"""

from __future__ import annotations

import json
import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing

from letagents_trio import ApiError, HolderStatus, RoomUnreachable
from letagents_trio.workers import WorkerError, WorkerRegistration
from letagents_trio.workers._chat_storage import ChatStorage
from letagents_trio.workers._wire import (
    AMBIGUOUS_ROOM_TEXT,
    CONNECTION_REPLACED_OR_DISCONNECTED_TEXT,
    CONNECTION_REPLACED_TEXT,
    NO_CONNECTION_TEXT,
    ROOM_REQUIRED_TEXT,
    UNKNOWN_WORKER_TEXT,
)

from .helpers import (
    BEARER,
    LOCAL_ROOM,
    OTHER_ROOM,
    OWNER_TOKEN,
    REGISTRATIONS,
    ROOM,
    open_proc,
    read_bytes,
    read_json,
    registration_bodies,
    registrations,
    requests,
    write_text,
)

if TYPE_CHECKING:
    from trio.testing import MockClock

    from letagents_trio.testing import FakeRoom


@pytest.fixture
def chat_storage(tmp_path: Path) -> ChatStorage:
    """Cloud storage, with ``room_local`` overridden to local (as upstream's test)."""
    settings = tmp_path / "chat-storage.json"
    write_text(settings, json.dumps({"mode": "cloud", "roomOverrides": {LOCAL_ROOM: "local"}}))
    return ChatStorage(settings)


async def test_1_a_registration_key_without_a_room_is_refused(
    autojump_clock: MockClock, fake_room: FakeRoom, path: Path
) -> None:
    async with open_proc(fake_room.transport, path) as p:
        with pytest.raises(WorkerError) as caught:
            await p.handles.register(room_id=None, registration_key="k")
    assert str(caught.value) == ROOM_REQUIRED_TEXT


async def test_3_concurrent_identical_creates_send_one_registration(
    autojump_clock: MockClock, fake_room: FakeRoom, path: Path
) -> None:
    results: list[WorkerRegistration] = []
    async with open_proc(fake_room.transport, path) as p:

        async def create() -> None:
            results.append(
                await p.handles.register(room_id=ROOM, registration_key="k", display_name="Same")
            )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(create)
            nursery.start_soon(create)
    assert len(results) == 2
    assert results[0].worker_id == results[1].worker_id
    assert results[0].session == results[1].session
    assert len(registrations(fake_room)) == 1


async def test_4_5_different_keys_are_different_identities_acting_by_worker_id_alone(
    autojump_clock: MockClock, fake_room: FakeRoom, path: Path
) -> None:
    async with open_proc(fake_room.transport, path) as p:
        one = await p.handles.register(room_id=ROOM, registration_key="k1", display_name="One")
        two = await p.handles.register(room_id=ROOM, registration_key="k2", display_name="Two")
        assert one.worker_id != two.worker_id
        key_one, key_two = one.session.extra["agent_key"], two.session.extra["agent_key"]
        assert key_one != key_two
        assert key_one == "owner/worker-" + one.worker_id.removeprefix("worker_")
        first = await p.send("from one", worker_id=one.worker_id)
        second = await p.send("from two", worker_id=two.worker_id)
    assert first["agent_session_id"] == one.session.session_id
    assert second["agent_session_id"] == two.session.session_id


async def test_6_no_token_or_bearer_is_returned_or_stored(
    autojump_clock: MockClock, fake_room: FakeRoom, path: Path
) -> None:
    async with open_proc(fake_room.transport, path) as p:
        fake_room.on("POST", REGISTRATIONS).rewrite(lambda body: {**body, "worker_bearer": BEARER})
        reg = await p.handles.register(room_id=ROOM, registration_key="k")
    result = json.dumps({"worker_id": reg.worker_id, "agent_session": reg.public_session()})
    for secret in ("session_token", reg.session.session_token, OWNER_TOKEN, BEARER):
        assert secret not in result
        assert secret not in repr(reg)
    assert BEARER.encode() not in read_bytes(path)
    assert b"worker_bearer" not in read_bytes(path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # noqa: ASYNC240


@pytest.mark.parametrize("failure", ["503", "drop", "empty"])
async def test_7_an_unverifiable_account_changes_nothing_and_sends_nothing(
    autojump_clock: MockClock,
    fake_room: FakeRoom,
    path: Path,
    chat_storage: ChatStorage,
    failure: str,
) -> None:
    async with open_proc(fake_room.transport, path, chat_storage=chat_storage) as first:
        reg = await first.handles.register(
            room_id=ROOM, registration_key="k", display_name="Juniper"
        )
        await first.handles.register(room_id=LOCAL_ROOM, registration_key="local-k")
    before = read_bytes(path)
    sent = len(registrations(fake_room))
    me = fake_room.on("GET", "/agents/me")
    if failure == "503":
        me.respond(503, {"error": "Service unavailable"}, times=None)
    elif failure == "drop":
        me.drop_after_commit(times=None)
    else:
        me.respond(200, {}, times=None)
    causes = {
        "503": "HTTP 503. The room is failing; retry once it answers again.",
        "drop": "the room did not answer (",
        "empty": "its answer named no account login. Check that the address is a letagents room",
    }
    async with open_proc(fake_room.transport, path, chat_storage=chat_storage) as second:
        calls: list[dict[str, Any]] = [
            {"room_id": ROOM, "worker_id": reg.worker_id},
            {"room_id": ROOM, "registration_key": "k", "display_name": "Juniper"},
            {"room_id": LOCAL_ROOM, "registration_key": "a-new-key"},
        ]
        for call in calls:
            with pytest.raises(WorkerError) as caught:
                await second.handles.register(**call)
            text = str(caught.value)
            assert text.startswith(
                f"Could not verify your LetAgents account at http://room.test: {causes[failure]}"
            )
            assert text.endswith(" Saved worker identities have not been changed.")
            assert "same worker_id or registration_key" in text
            assert "Unknown worker_id" not in text
    assert read_bytes(path) == before
    assert len(registrations(fake_room)) == sent


async def test_8_a_second_process_reconnects_and_the_first_can_no_longer_act(
    autojump_clock: MockClock, fake_room: FakeRoom, path: Path
) -> None:
    async with open_proc(fake_room.transport, path) as first:
        one = await first.handles.register(
            room_id=ROOM, registration_key="k1", display_name="Juniper"
        )
        other = await first.handles.register(
            room_id=ROOM, registration_key="k2", display_name="Cedar"
        )
        old_holder = first.manager.holders[one.session.session_id]
        async with open_proc(fake_room.transport, path) as second:
            with pytest.raises(WorkerError) as caught:
                await second.send("too early", worker_id=one.worker_id)
            assert str(caught.value) == NO_CONNECTION_TEXT
            moved = await second.handles.register(room_id=ROOM, worker_id=one.worker_id)
            assert moved.session.session_id == one.session.session_id
            assert moved.session.display_name == "Juniper"
            sent = await second.send("now mine", worker_id=one.worker_id)
            assert sent["agent_session_id"] == one.session.session_id
            for target in (
                {"worker_id": one.worker_id},
                {"agent_session_id": one.session.session_id},
            ):
                with pytest.raises(WorkerError) as caught:
                    await first.send("still me?", **target)
                assert str(caught.value) == CONNECTION_REPLACED_TEXT
            still = await first.send("the other one", worker_id=other.worker_id)
            assert still["agent_session_id"] == other.session.session_id
            # The first process's holder learns the session is not its own any more.
            await old_holder.wait_status(HolderStatus.STOPPED)
            assert first.manager.holders[other.session.session_id].session == other.session
            assert second.manager.holders[one.session.session_id].session == moved.session


async def test_8_a_block_that_outlives_its_connection_is_told_so(
    autojump_clock: MockClock, fake_room: FakeRoom, path: Path
) -> None:
    """§6.6 after-check: a call that ran while another process took the worker over fails."""
    async with open_proc(fake_room.transport, path) as first:
        one = await first.handles.register(room_id=ROOM, registration_key="k1")

        async def call_while_taken_over() -> None:
            async with first.handles.acting_as(worker_id=one.worker_id):
                async with open_proc(fake_room.transport, path) as second:
                    await second.handles.register(room_id=ROOM, worker_id=one.worker_id)

        with pytest.raises(WorkerError) as caught:
            await call_while_taken_over()
        assert str(caught.value) == CONNECTION_REPLACED_OR_DISCONNECTED_TEXT


async def test_9_a_refused_send_keeps_the_owner_signed_in_and_the_worker_usable(
    autojump_clock: MockClock, fake_room: FakeRoom, path: Path
) -> None:
    async with open_proc(fake_room.transport, path) as p:
        reg = await p.handles.register(room_id=ROOM, registration_key="k")
        fake_room.on("POST", "/rooms/{room}/messages").respond(401, {"error": "Unauthorized"})
        with pytest.raises(ApiError) as caught:
            await p.send("hello", worker_id=reg.worker_id)
        assert caught.value.status == 401
        assert read_json(path)["auth"]["token"] == OWNER_TOKEN
        async with p.handles.acting_as(worker_id=reg.worker_id) as session:
            page = await p.client.call("GET", f"/rooms/{ROOM}/messages", session=session)
        assert page["messages"] == []


async def test_10_a_late_disconnect_answer_never_ends_the_successor(
    autojump_clock: MockClock, fake_room: FakeRoom, path: Path
) -> None:
    outcome: list[BaseException] = []
    async with open_proc(fake_room.transport, path) as first:
        reg = await first.handles.register(room_id=ROOM, registration_key="k")
        sid = reg.session.session_id
        disconnects = fake_room.on("POST", "/rooms/{room}/agent-sessions/{sid}/disconnect")
        held = disconnects.hold()

        async def disconnect() -> None:
            try:
                await first.handles.disconnect(worker_id=reg.worker_id)
            except WorkerError as exc:
                outcome.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(disconnect)
            await held.wait_held()
            async with open_proc(fake_room.transport, path) as third:
                again = await third.handles.register(room_id=ROOM, worker_id=reg.worker_id)
                assert again.session.session_id == sid
                held.release()
                await trio.testing.wait_all_tasks_blocked()
                stored = third.store.stored_session(sid)
                assert stored is not None
                assert stored.ended_at is None
                assert stored.session_token == again.session.session_token
                sent = await third.send("still here", worker_id=reg.worker_id)
                assert sent["agent_session_id"] == sid
    assert [str(e) for e in outcome] == [CONNECTION_REPLACED_OR_DISCONNECTED_TEXT]


async def test_12_a_lost_registration_answer_is_finished_with_the_same_token(
    autojump_clock: MockClock, fake_room: FakeRoom, path: Path
) -> None:
    async with open_proc(fake_room.transport, path) as p:
        fake_room.on("POST", REGISTRATIONS).drop_after_commit()
        with pytest.raises(RoomUnreachable):
            await p.handles.register(room_id=ROOM, registration_key="k", display_name="Juniper")
        # The room stored the session; we kept the operation.
        assert len(fake_room.room.store.room_sessions(ROOM)) == 1
        workers = read_json(path)["mcp_workers"]
        (worker,) = workers.values()
        pending = worker["rooms"][ROOM]["pending"]
        reg = await p.handles.register(room_id=ROOM, registration_key="k", display_name="Juniper")
        assert reg.worker_id == worker["worker_id"]
        sent, retried = registration_bodies(fake_room)
        assert sent["connection_token"] == retried["connection_token"]
        assert pending["connection_token"] == retried["connection_token"]
        assert reg.session.session_token == pending["connection_token"]
        # No extra identity: still one session in the room.
        assert len(fake_room.room.store.room_sessions(ROOM)) == 1
        assert "pending" not in read_json(path)["mcp_workers"][reg.worker_id]["rooms"][ROOM]
        await p.send("hello", worker_id=reg.worker_id)
        # The same worker in a second room: calls must now say which room.
        await p.handles.register(room_id=OTHER_ROOM, worker_id=reg.worker_id)
        with pytest.raises(WorkerError) as caught:
            await p.send("which room?", worker_id=reg.worker_id)
        assert str(caught.value) == AMBIGUOUS_ROOM_TEXT
        await p.send("this room", worker_id=reg.worker_id, room_id=OTHER_ROOM)
        with pytest.raises(WorkerError) as caught:
            await p.handles.register(room_id=ROOM, worker_id="worker_" + "0" * 32)
        assert str(caught.value).startswith(UNKNOWN_WORKER_TEXT)


async def test_12_a_lost_answer_is_finished_by_the_next_process(
    autojump_clock: MockClock, fake_room: FakeRoom, path: Path
) -> None:
    """The pending operation is in the file, so a restarted server finishes it."""
    async with open_proc(fake_room.transport, path) as first:
        fake_room.on("POST", REGISTRATIONS).drop_after_commit()
        with pytest.raises(RoomUnreachable):
            await first.handles.register(room_id=ROOM, registration_key="k")
    async with open_proc(fake_room.transport, path) as second:
        reg = await second.handles.register(room_id=ROOM, registration_key="k")
    sent, retried = registration_bodies(fake_room)
    assert sent["connection_token"] == retried["connection_token"]
    assert reg.session.session_token == sent["connection_token"]
    assert len(fake_room.room.store.room_sessions(ROOM)) == 1


async def test_13_local_rooms_register_without_the_room_and_dedupe_names(
    autojump_clock: MockClock, fake_room: FakeRoom, path: Path, chat_storage: ChatStorage
) -> None:
    async with open_proc(fake_room.transport, path, chat_storage=chat_storage) as first:
        one = await first.handles.register(
            room_id=LOCAL_ROOM, registration_key="k1", display_name="Cedar"
        )
        two = await first.handles.register(
            room_id=LOCAL_ROOM, registration_key="k2", display_name="Cedar"
        )
        assert first.handles.is_local_room(LOCAL_ROOM)
        assert one.session.session_id.startswith("local_")
        assert one.session.display_name == "Cedar"
        assert two.session.display_name != "Cedar"
        assert re.fullmatch(r"[A-Z][a-z]+[A-Z][a-z]+", two.session.display_name)
        assert two.session.extra["actor_label"].startswith(two.session.display_name + " | ")
        # No HTTP but the account lookup, and no process connection.
        assert requests(fake_room) == ["GET /agents/me"]
        assert dict(first.manager.holders) == {}
        async with open_proc(fake_room.transport, path, chat_storage=chat_storage) as second:
            moved = await second.handles.register(room_id=LOCAL_ROOM, worker_id=one.worker_id)
            assert moved.session.session_id == one.session.session_id
            assert moved.session.display_name == "Cedar"
            legacy = one.session.session_id
            with pytest.raises(WorkerError, match=re.escape(CONNECTION_REPLACED_TEXT)):
                async with first.handles.acting_as(agent_session_id=legacy):
                    pass
            with pytest.raises(WorkerError, match=re.escape(CONNECTION_REPLACED_TEXT)):
                await first.handles.disconnect(agent_session_id=legacy)
            async with second.handles.acting_as(worker_id=one.worker_id) as session:
                assert session.session_token == moved.session.session_token
            ended = await second.handles.disconnect(worker_id=one.worker_id)
            assert ended.ended_at is not None
            back = await second.handles.register(room_id=LOCAL_ROOM, worker_id=one.worker_id)
            assert back.session.session_id == one.session.session_id
            assert back.session.display_name == "Cedar"
            assert back.session.ended_at is None
    assert requests(fake_room) == ["GET /agents/me"] * 2


async def test_13_local_rooms_need_no_sign_in(
    autojump_clock: MockClock, fake_room: FakeRoom, tmp_path: Path, chat_storage: ChatStorage
) -> None:
    path = tmp_path / "fresh.json"
    async with open_proc(
        fake_room.transport, path, owner_token=None, chat_storage=chat_storage
    ) as p:
        reg = await p.handles.register(room_id=LOCAL_ROOM, registration_key="k")
    assert fake_room.requests == []
    worker = read_json(path)["mcp_workers"][reg.worker_id]
    assert worker["scope"].startswith(f"{fake_room.api_url}\nlocal:")
    slug = worker["scope"].rsplit(":", 1)[1]
    assert reg.session.extra["agent_key"] == f"{slug}/worker-{reg.worker_id[7:]}"
