"""PROTOCOL §8.2 (worker-name-recovery-stdio): name_held_here, recover_lost_worker, ended sessions.

Each numbered scenario of §8.2 that needs no MCP layer is a test here (the
tool texts built from these results, ``name_notice`` and ``resumed_work``, are
the MCP layer's). The reference room gives a held name a codename where the
upstream fake answered ``Substitute<n>``; "duplicate names allowed" (scenario 7)
is simulated by rewriting the name in a 201.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing

from letagents_trio import ApiError
from letagents_trio._protocol import AGENT_SESSION_ENDED_ADVICE
from letagents_trio.room_server._wire import Credentials
from letagents_trio.testing import ProcessMode
from letagents_trio.workers._wire import (
    RECOVER_ARGUMENTS_TEXT,
    recover_ambiguous_text,
    recover_none_text,
)

from .helpers import (
    REGISTRATIONS,
    ROOM,
    Proc,
    open_proc,
    read_bytes,
    read_json,
    registrations,
)

if TYPE_CHECKING:
    from trio.testing import MockClock

    from letagents_trio.testing import FakeRoom
    from letagents_trio.workers import WorkerRegistration


async def _juniper_and_second(p: Proc) -> tuple[WorkerRegistration, WorkerRegistration]:
    a = await p.handles.register(room_id=ROOM, registration_key="K1", display_name="Juniper")
    b = await p.handles.register(room_id=ROOM, registration_key="K2", display_name="juniper")
    return a, b


async def test_1_2_a_new_key_under_a_held_name_is_a_new_worker_told_the_name_is_held(
    autojump_clock: MockClock, fake_room: FakeRoom, path: Path
) -> None:
    async with open_proc(fake_room.transport, path) as p:
        a, b = await _juniper_and_second(p)
    assert a.name_held_here is None
    assert a.session.display_name == "Juniper"
    assert b.worker_id != a.worker_id
    assert b.name_held_here == "Juniper"
    # The room gave the second chat another name (a codename, never "Juniper 1").
    assert b.session.display_name != "Juniper"
    assert re.fullmatch(r"[A-Z][a-z]+[A-Z][a-z]+", b.session.display_name)
    # Nothing handed to the second chat names the first worker.
    shown = json.dumps(
        {"worker_id": b.worker_id, "session": b.public_session(), "held": b.name_held_here}
    ) + repr(b)
    assert a.worker_id not in shown


async def test_3_recovering_by_name_returns_the_held_worker_once_the_room_confirms_it(
    autojump_clock: MockClock, fake_room: FakeRoom, path: Path
) -> None:
    async with open_proc(fake_room.transport, path) as p:
        a, _ = await _juniper_and_second(p)
        await trio.testing.wait_all_tasks_blocked()
        sent = len(registrations(fake_room))
        got = await p.handles.register(
            room_id=ROOM, display_name=" Juniper ", recover_lost_worker=True
        )
        assert got.worker_id == a.worker_id
        assert got.session.session_id == a.session.session_id
        assert got.session.display_name == "Juniper"
        assert len(registrations(fake_room)) == sent + 1
        message = await p.send("back again", worker_id=got.worker_id)
        assert message["agent_session_id"] == a.session.session_id


async def test_4_5_recovery_errors(
    autojump_clock: MockClock, fake_room: FakeRoom, path: Path
) -> None:
    async with open_proc(fake_room.transport, path) as p:
        await _juniper_and_second(p)
        with pytest.raises(Exception, match="no worker named") as caught:
            await p.handles.register(room_id=ROOM, display_name="Nobody", recover_lost_worker=True)
        assert str(caught.value) == recover_none_text("Nobody")
        for extra in ({"registration_key": "K9"}, {"display_name": None}, {"display_name": ""}):
            kwargs: dict[str, Any] = {"display_name": "Juniper", **extra}
            with pytest.raises(Exception, match=re.escape(RECOVER_ARGUMENTS_TEXT)):
                await p.handles.register(room_id=ROOM, recover_lost_worker=True, **kwargs)


async def test_6_recovery_matches_the_name_the_worker_lives_under(
    autojump_clock: MockClock, fake_room: FakeRoom, path: Path
) -> None:
    async with open_proc(fake_room.transport, path) as p:
        _, b = await _juniper_and_second(p)
        got = await p.handles.register(
            room_id=ROOM, display_name=b.session.display_name.lower(), recover_lost_worker=True
        )
        assert got.worker_id == b.worker_id


async def test_7_two_workers_under_one_name_cannot_be_told_apart(
    autojump_clock: MockClock, fake_room: FakeRoom, path: Path
) -> None:
    async with open_proc(fake_room.transport, path) as p:
        a, _ = await _juniper_and_second(p)
        # A room that allows duplicate names.
        fake_room.on("POST", REGISTRATIONS).rewrite(
            lambda body: {**body, "display_name": "Juniper"}
        )
        third = await p.handles.register(
            room_id=ROOM, registration_key="K3", display_name="Juniper"
        )
        assert third.session.display_name == "Juniper"
        with pytest.raises(Exception, match="more than one") as caught:
            await p.handles.register(room_id=ROOM, display_name="Juniper", recover_lost_worker=True)
        assert str(caught.value) == recover_ambiguous_text("Juniper")
        assert a.worker_id not in str(caught.value)
        await p.handles.disconnect(worker_id=third.worker_id)
        got = await p.handles.register(
            room_id=ROOM, display_name="Juniper", recover_lost_worker=True
        )
        assert got.worker_id == a.worker_id


async def test_8_no_notice_for_other_names_no_name_or_the_same_key(
    autojump_clock: MockClock, fake_room: FakeRoom, path: Path
) -> None:
    async with open_proc(fake_room.transport, path) as p:
        a, _ = await _juniper_and_second(p)
        cedar = await p.handles.register(room_id=ROOM, registration_key="K4", display_name="Cedar")
        nameless = await p.handles.register(room_id=ROOM, registration_key="K5")
        again = await p.handles.register(
            room_id=ROOM, registration_key="K1", display_name="Juniper"
        )
    assert cedar.name_held_here is None
    assert nameless.name_held_here is None
    assert again.name_held_here is None
    assert again.worker_id == a.worker_id


async def test_9_another_process_holds_nothing_to_recover_or_notice(
    autojump_clock: MockClock, fake_room: FakeRoom, path: Path
) -> None:
    async with open_proc(fake_room.transport, path) as first:
        await _juniper_and_second(first)
        await first.handles.register(room_id=ROOM, registration_key="K4", display_name="Cedar")
        async with open_proc(fake_room.transport, path) as second:
            other = await second.handles.register(
                room_id=ROOM, registration_key="K8", display_name="Juniper"
            )
            assert other.name_held_here is None
            with pytest.raises(Exception, match="no worker named"):
                await second.handles.register(
                    room_id=ROOM, display_name="Cedar", recover_lost_worker=True
                )


async def test_10_a_disconnected_worker_is_not_recoverable(
    autojump_clock: MockClock, fake_room: FakeRoom, path: Path
) -> None:
    async with open_proc(fake_room.transport, path) as p:
        cedar = await p.handles.register(room_id=ROOM, registration_key="K4", display_name="Cedar")
        await p.handles.disconnect(worker_id=cedar.worker_id)
        with pytest.raises(Exception, match="no worker named"):
            await p.handles.register(room_id=ROOM, display_name="Cedar", recover_lost_worker=True)


async def _ended_by_the_room(fake_room: FakeRoom, p: Proc) -> tuple[WorkerRegistration, ApiError]:
    """§8.2.11: Juniper sent a message; the room ends it; the next send is refused."""
    juniper = await p.handles.register(room_id=ROOM, registration_key="K1", display_name="Juniper")
    await p.send("hello", worker_id=juniper.worker_id)
    fake_room.end(juniper.session.session_id)
    with pytest.raises(ApiError) as caught:
        await p.send("still there?", worker_id=juniper.worker_id)
    return juniper, caught.value


async def test_11_a_send_refused_as_ended_marks_the_stored_session_ended(
    autojump_clock: MockClock, fake_room: FakeRoom, path: Path
) -> None:
    fake_room.set_process_mode(ProcessMode.UNKNOWN)  # as upstream: no stream tells us first
    async with open_proc(fake_room.transport, path) as p:
        juniper, error = await _ended_by_the_room(fake_room, p)
        assert error.status == 401
        assert "register_agent_session" in str(error)
        stored = read_json(path)["agent_sessions"][juniper.session.session_id]
        assert stored["ended_at"]
        assert read_json(path)["auth"]["token"]  # a worker 401 never logs the owner out


async def test_12_resuming_an_ended_worker_returns_adopted_leases_once_and_never_stores_them(
    autojump_clock: MockClock, fake_room: FakeRoom, path: Path
) -> None:
    fake_room.set_process_mode(ProcessMode.UNKNOWN)
    async with open_proc(fake_room.transport, path) as p:
        juniper = await p.handles.register(
            room_id=ROOM, registration_key="K1", display_name="Juniper"
        )
        async with p.handles.acting_as(worker_id=juniper.worker_id) as session:
            tasks = f"/rooms/{ROOM}/tasks"
            task = await p.client.call("POST", tasks, json={"title": "task 7"}, session=session)
            task_path = f"{tasks}/{task['id']}"
            admin = Credentials(owner_token=fake_room.person_token)
            fake_room.room.work.tasks.patch(ROOM, task["id"], admin, {"status": "accepted"})
            claim = {"status": "assigned", "assignee": session.extra["actor_label"]}
            claimed = await p.client.call("PATCH", task_path, json=claim, session=session)
            (lease,) = claimed["active_leases"]
        fake_room.end(juniper.session.session_id)
        with pytest.raises(ApiError):
            await p.send("still there?", worker_id=juniper.worker_id)
        before = len(registrations(fake_room))
        again = await p.handles.register(room_id=ROOM, worker_id=juniper.worker_id)
        assert len(registrations(fake_room)) == before + 1
        assert again.worker_id == juniper.worker_id
        assert again.session.session_id == juniper.session.session_id
        assert again.adopted_task_leases == (
            {"lease_id": lease["id"], "task_id": task["id"], "kind": "work"},
        )
        assert b"adopted_task_leases" not in read_bytes(path)
        await p.send("carrying on", worker_id=juniper.worker_id)
        # Returned once: the fast path returns none.
        once_more = await p.handles.register(room_id=ROOM, worker_id=juniper.worker_id)
        assert once_more.adopted_task_leases == ()


@pytest.mark.parametrize(
    ("status", "text"),
    [(403, AGENT_SESSION_ENDED_ADVICE), (401, "Invalid agent session credentials.")],
)
async def test_13_other_refusals_leave_the_session_live(
    autojump_clock: MockClock, fake_room: FakeRoom, path: Path, status: int, text: str
) -> None:
    async with open_proc(fake_room.transport, path) as p:
        rowan = await p.handles.register(room_id=ROOM, registration_key="K6", display_name="Rowan")
        fake_room.on("POST", "/rooms/{room}/messages").respond(status, {"error": text})
        with pytest.raises(ApiError) as caught:
            await p.send("hello", worker_id=rowan.worker_id)
        assert caught.value.status == status
        stored = read_json(path)["agent_sessions"][rowan.session.session_id]
        assert not stored["ended_at"]
        assert read_json(path)["auth"]["token"]
