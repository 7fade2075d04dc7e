"""The connection manager's goodbye: streams closed, every exit announced, one deadline."""

from __future__ import annotations

import datetime
import gc
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing

from letagents_trio import (
    AgentSession,
    ConnectionManager,
    EventKind,
    HolderStatus,
    HoldPolicy,
    SSEConnector,
    open_connection_manager,
    serve_connection_manager,
)
from letagents_trio._exits import HandedExit
from letagents_trio.testing import FakeRoom, ProcessMode
from letagents_trio.workers._state import LocalStateStore

from .events import SlowToUnwind, drain

if TYPE_CHECKING:
    from trio.testing import MockClock


async def test_exit_names_the_open_connection(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    """§8.1.5: exactly one exit POST, naming the connection of the last ``open`` event."""
    session = await fake_room.add_worker()
    async with fake_room.client() as client:
        async with open_connection_manager(client) as manager:
            holder = manager.hold(session)
            await holder.wait_status(HolderStatus.OPEN)
            await trio.sleep(1)
            connection_id = holder.connection_id
            assert connection_id is not None
        assert trio.current_time() == 1
    assert len(fake_room.exits) == 1
    exit_record = fake_room.exits[0]
    assert exit_record.session_id == session.session_id
    assert exit_record.body == {
        "agent_session_id": session.session_id,
        "agent_session_token": session.session_token,
        "process_connection_id": connection_id,
    }
    assert exit_record.recorded is True
    row = fake_room.room.session(session.session_id)
    assert row is not None
    assert row.process_connection_id == "exited"
    assert row.ended_at is None


async def test_exit_sends_null_before_any_open(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    fake_room.set_process_mode(ProcessMode.UNKNOWN)
    async with fake_room.client() as client, open_connection_manager(client) as manager:
        manager.hold(session)
        await trio.sleep(3)
    assert [e.process_connection_id for e in fake_room.exits] == [None]
    assert "process_connection_id" in fake_room.exits[0].body
    assert fake_room.exits[0].recorded is False


@pytest.mark.parametrize("count", [1, 50])
async def test_streams_are_closed_by_the_time_their_exits_are_answered(
    autojump_clock: MockClock, fake_room: FakeRoom, count: int
) -> None:
    """Each stream closes as its exit is written, fifty of them pipelined too."""
    sessions = [await fake_room.add_worker(display_name=f"W{i}") for i in range(count)]
    # As each exit is answered: the streams still open of every session whose exit came.
    open_at_exit: list[int] = []

    def count_open_streams(answer: object) -> object:
        open_at_exit.append(
            sum(len(fake_room.room.process_streams(e.session_id)) for e in fake_room.exits)
        )
        return answer

    fake_room.on("POST", "/rooms/{room}/agent-sessions/{session}/process/exit").rewrite(
        count_open_streams, times=None
    )
    async with fake_room.client() as client:
        async with open_connection_manager(client) as manager:
            holders = [manager.hold(session) for session in sessions]
            for holder in holders:
                assert holder is not None
                await holder.wait_status(HolderStatus.OPEN)
    assert open_at_exit == [0] * count
    assert len(fake_room.exits) == count
    assert all(e.recorded is True for e in fake_room.exits)


async def test_black_holed_exits_end_shutdown_at_exactly_the_deadline(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    sessions = [await fake_room.add_worker(display_name=f"W{i}") for i in range(3)]
    fake_room.black_hole_exits = True
    async with fake_room.client() as client:
        async with open_connection_manager(client) as manager:
            for s in sessions:
                manager.hold(s)
            await trio.sleep(10)
            started = trio.current_time()
        # The deadline, less the time kept for the three exits in flight to unwind.
        assert trio.current_time() == started + 1.5
    # Every goodbye goes out at once.
    assert len(fake_room.exits) == 3
    assert {e.time for e in fake_room.exits} == {10}


async def test_a_custom_exit_deadline_is_the_one_used(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    fake_room.black_hole_exits = True
    async with fake_room.client() as client:
        policy = HoldPolicy(exit_deadline=0.25)
        async with open_connection_manager(client, policy=policy) as m:
            m.hold(session)
            await trio.sleep(1)
        # Less the time kept for the one exit in flight to unwind.
        assert trio.current_time() == 1.25


async def test_announce_exits_reports_each_session(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    ok = await fake_room.add_worker(display_name="Open")
    async with fake_room.client() as client, open_connection_manager(client) as manager:
        holder = manager.hold(ok)
        await holder.wait_status(HolderStatus.OPEN)
        await trio.testing.wait_all_tasks_blocked()  # the open event names it
        report = await manager.announce_exits()
        assert [(a.session_id, a.recorded, a.error) for a in report] == [
            (ok.session_id, True, None)
        ]
        assert report[0].connection_id is not None
        assert report[0].finished_at == 0
        # A second announcement sends nothing and repeats the report.
        assert await manager.announce_exits() == report
        with pytest.raises(trio.ClosedResourceError):
            manager.hold(ok)
    assert len(fake_room.exits) == 1


async def test_black_holed_report_says_deadline(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    fake_room.black_hole_exits = True
    async with fake_room.client() as client, open_connection_manager(client) as manager:
        manager.hold(session)
        report = await manager.announce_exits()
    assert [(a.recorded, a.error, a.finished_at) for a in report] == [(None, "deadline", 1.5)]


async def test_a_failing_exit_is_reported_not_raised(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    async with fake_room.client() as client, open_connection_manager(client) as manager:
        holder = manager.hold(session)
        await holder.wait_status(HolderStatus.OPEN)
        fake_room.room.end_session(session.session_id, reason="room_admin")
        await holder.wait_status(HolderStatus.ENDED)
        rotated = AgentSession(
            session_id="sess_missing", session_token="whatever-token", room_id="room_shared"
        )
        manager.hold(rotated)
        report = await manager.announce_exits()
    assert [a.session_id for a in report] == ["sess_missing"]
    assert report[0].error is not None
    assert report[0].error.startswith("HTTP ")


async def test_embedder_cancellation_still_announces(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    async with fake_room.client() as client:
        with trio.move_on_after(7) as scope:
            async with open_connection_manager(client) as manager:
                holder = manager.hold(session)
                await holder.wait_status(HolderStatus.OPEN)
                await trio.testing.wait_all_tasks_blocked()
                stream_id = holder.connection_id
                assert stream_id is not None
                try:
                    await trio.sleep_forever()
                finally:
                    # The embedder's cancellation does not reach the holders:
                    # each stream stays open until its own goodbye closes it.
                    with trio.CancelScope(shield=True):
                        await trio.testing.wait_all_tasks_blocked()
                    assert holder.status is HolderStatus.OPEN
        assert scope.cancelled_caught
        assert trio.current_time() == 7
        assert holder.status is HolderStatus.STOPPED
    # The block was cancelled; the goodbye closed the stream, then named it.
    assert [(e.time, e.process_connection_id) for e in fake_room.exits] == [(7, stream_id)]
    assert fake_room.exits[0].recorded is True


async def test_an_exception_in_the_block_still_announces(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    async with fake_room.client() as client:

        async def fail() -> None:
            async with open_connection_manager(client) as manager:
                manager.hold(session)
                await trio.sleep(2)
                raise RuntimeError("host bug")

        with pytest.raises(RuntimeError, match="host bug"):  # itself, not in a group
            await fail()
    assert [e.time for e in fake_room.exits] == [2]


async def test_keyboard_interrupt_in_the_block_still_announces(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    async with fake_room.client() as client:

        async def interrupt() -> None:
            async with open_connection_manager(client) as manager:
                manager.hold(session)
                await trio.sleep(2)
                raise KeyboardInterrupt

        with pytest.raises(KeyboardInterrupt):
            await interrupt()
    assert len(fake_room.exits) == 1


async def test_released_sessions_are_not_announced(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    a = await fake_room.add_worker(display_name="A")
    b = await fake_room.add_worker(display_name="B")
    async with fake_room.client() as client, open_connection_manager(client) as manager:
        manager.hold(a)
        manager.hold(b)
        await trio.sleep(1)
        manager.release(a.session_id)
    assert [e.session_id for e in fake_room.exits] == [b.session_id]


@pytest.mark.slow
async def test_one_thousand_holders_announce_within_one_deadline(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    sessions = [
        await fake_room.add_worker(room_id=f"room_{i % 10}", display_name=f"Worker{i}")
        for i in range(1000)
    ]
    async with fake_room.client() as client:
        async with open_connection_manager(client) as manager:
            holders = [manager.hold(s) for s in sessions]
            for h in holders:
                await h.wait_status(HolderStatus.OPEN)
            opened = trio.current_time()
            await trio.sleep(60)
            started = trio.current_time()
            assert started == opened + 60
        assert trio.current_time() - started <= 1.5
    assert len(fake_room.exits) == 1000
    assert {e.session_id for e in fake_room.exits} == {s.session_id for s in sessions}
    assert all(e.recorded for e in fake_room.exits)


async def test_serve_connection_manager_in_the_embedders_nursery(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    async with fake_room.client() as client:
        async with trio.open_nursery() as nursery:
            manager = await nursery.start(serve_connection_manager, client)
            assert isinstance(manager, ConnectionManager)
            holder = manager.hold(session)
            await holder.wait_status(HolderStatus.OPEN)
            await trio.sleep(4)
            nursery.cancel_scope.cancel()
        assert trio.current_time() == 4
    assert [e.time for e in fake_room.exits] == [4]


async def test_nursery_start_takes_the_state_positionally(
    autojump_clock: MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    """Issue 29: ``nursery.start`` passes no keywords, so ``state=store`` was a
    TypeError (in an exception group); the state is the second argument."""
    session = await fake_room.add_worker()
    store = LocalStateStore(tmp_path / "state.json")
    await store.update(
        lambda s: s.setdefault("agent_sessions", {}).update({session.session_id: session.to_json()})
    )
    fake_room.set_process_mode(ProcessMode.ENDED)
    async with fake_room.client() as client, trio.open_nursery() as nursery:
        manager = await nursery.start(serve_connection_manager, client, store)
        await manager.hold(session).wait_status(HolderStatus.ENDED)
        nursery.cancel_scope.cancel()
    # The store was the manager's: the holder marked the ended session in it.
    assert store.stored_session(session.session_id) is not None
    assert store.read().data["agent_sessions"][session.session_id]["ended_at"] is not None


async def test_your_own_cancel_scope_around_the_nursery_stops_the_manager(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    """The pattern the docs show: a scope of yours enclosing the nursery."""
    session = await fake_room.add_worker()
    async with fake_room.client() as client:
        with trio.CancelScope() as yours:
            async with trio.open_nursery() as nursery:
                manager = await nursery.start(serve_connection_manager, client)
                await manager.hold(session).wait_status(HolderStatus.OPEN)
                await trio.sleep(3)
                yours.cancel()
        assert yours.cancelled_caught
    assert [(e.session_id, e.time, e.recorded) for e in fake_room.exits] == [
        (session.session_id, 3, True)
    ]


async def test_a_scope_inside_the_nursery_does_not_reach_the_manager(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    """What docs/embedding.md warns of: only a scope around the nursery stops it."""
    session = await fake_room.add_worker()
    async with fake_room.client() as client, trio.open_nursery() as nursery:
        with trio.CancelScope() as inner:
            manager = await nursery.start(serve_connection_manager, client)
            holder = manager.hold(session)
            await holder.wait_status(HolderStatus.OPEN)
            inner.cancel()
            await trio.sleep(1)
        await trio.sleep(5)
        assert holder.status is HolderStatus.OPEN
        assert fake_room.exits == []
        nursery.cancel_scope.cancel()
    assert [e.time for e in fake_room.exits] == [5]


async def test_the_timeline_reads_as_events(autojump_clock: MockClock, fake_room: FakeRoom) -> None:
    session = await fake_room.add_worker()
    async with fake_room.client() as client, open_connection_manager(client) as manager:
        with manager.subscribe(math.inf) as events:
            holder = manager.hold(session)
            await holder.wait_status(HolderStatus.OPEN)
            await trio.sleep(2)
            fake_room.drop(session.session_id)
            await holder.wait_status(HolderStatus.WAITING)
            await holder.wait_status(HolderStatus.OPEN)
            # The open event follows the headers: let the holder read it.
            await trio.testing.wait_all_tasks_blocked()
            await manager.announce_exits()
            timeline = [(e.time, e.kind.value, e.detail) for e in drain(events)]
    assert timeline == [
        (0, "attempt", ""),
        (0, "open", ""),
        (0, "connection", ""),
        (2, "closed", "stream end"),
        (2, "backoff", ""),
        (3, "attempt", ""),
        (3, "open", ""),
        (3, "connection", ""),
        (3, "stopped", "process exit"),
        (3, "exit", "recorded"),
    ]


async def test_a_full_subscriber_misses_events_and_they_are_counted(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    async with fake_room.client() as client, open_connection_manager(client) as manager:
        with manager.subscribe(max_buffer_size=1) as events:
            holder = manager.hold(session)
            await holder.wait_status(HolderStatus.OPEN)
            await trio.testing.wait_all_tasks_blocked()
            first = events.receive_nowait()
            assert first.kind is EventKind.ATTEMPT
            # OPEN and CONNECTION found the one-slot buffer full.
            assert manager.statistics().events_dropped == 2
        stats = manager.statistics()
        assert stats.holders == 1
        assert stats.by_status[HolderStatus.OPEN] == 1
        assert not stats.closing


# --- with the local state file ---------------------------------------------------------


async def test_ended_event_marks_the_stored_session_ended(
    autojump_clock: MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    """§8.1.3: the state file soon shows ``agent_sessions[id].ended_at`` set."""
    store = LocalStateStore(tmp_path / "mcp-state.json")
    session = await fake_room.add_worker()
    await store.update(
        lambda s: s.setdefault("agent_sessions", {}).update({session.session_id: session.to_json()})
    )
    async with (
        fake_room.client() as client,
        open_connection_manager(client, state=store) as manager,
    ):
        holder = manager.hold(session)
        await holder.wait_status(HolderStatus.OPEN)
        await trio.sleep(3)
        fake_room.end(session.session_id)
        await holder.wait_status(HolderStatus.ENDED)
        await trio.testing.wait_all_tasks_blocked()
    stored = json.loads((tmp_path / "mcp-state.json").read_text())
    assert stored["agent_sessions"][session.session_id]["ended_at"]
    assert fake_room.exits == []


async def test_store_decides_still_ours_after_a_refusal(
    autojump_clock: MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    store = LocalStateStore(tmp_path / "mcp-state.json")
    ours = await fake_room.add_worker(display_name="Ours")
    taken = await fake_room.add_worker(display_name="Taken")
    await store.update(
        lambda s: s.setdefault("agent_sessions", {}).update(
            {
                ours.session_id: ours.to_json(),
                taken.session_id: {**taken.to_json(), "session_token": "a-newer-token"},
            }
        )
    )
    fake_room.set_process_mode(ProcessMode.REFUSED)
    async with (
        fake_room.client() as client,
        open_connection_manager(client, state=store) as manager,
    ):
        kept = manager.hold(ours)
        lost = manager.hold(taken)
        assert kept is not None
        assert lost is not None
        await lost.wait_status(HolderStatus.STOPPED)
        await trio.sleep(19)  # refused at 0 and 5; the next attempt is due at 20
        assert kept.status is HolderStatus.WAITING
        assert kept.statistics().next_attempt_at == 20
        assert list(manager.holders) == [ours.session_id]
        stored = json.loads((tmp_path / "mcp-state.json").read_text())
        assert not stored["agent_sessions"][ours.session_id].get("ended_at")


async def test_no_secret_reaches_a_log_line(
    autojump_clock: MockClock, fake_room: FakeRoom, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG")
    session = await fake_room.add_worker()
    fake_room.set_process_mode(ProcessMode.REFUSED)
    async with fake_room.client() as client:
        async with open_connection_manager(client) as manager:
            holder = manager.hold(session)
            await fake_room.wait_until(lambda: len(fake_room.process_requests()) == 2)
            fake_room.set_process_mode(ProcessMode.SERVED)
            await holder.wait_status(HolderStatus.OPEN)
            fake_room.drop(session.session_id)
            await holder.wait_status(HolderStatus.WAITING)
    assert caplog.records, "the story above logs something"
    logged = caplog.text + "".join(repr(r.args) for r in caplog.records)
    assert session.session_token not in logged
    assert fake_room.owner_token not in logged
    assert session.session_token not in repr(manager) + repr(client) + repr(holder)


async def test_exit_announcements_are_sent_in_turns_of_exit_concurrency(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    sessions = [await fake_room.add_worker(display_name=f"W{i}") for i in range(5)]
    fake_room.black_hole_exits = True
    policy = HoldPolicy(exit_concurrency=2)
    async with fake_room.client() as client:
        async with open_connection_manager(client, policy=policy) as manager:
            for s in sessions:
                manager.hold(s)
            await trio.sleep(1)
        # Time was kept for five exits to unwind: two in flight, three waiting their turn.
        assert trio.current_time() == 1 + 1.5
    # Two were in flight (and never answered) when the deadline ended the goodbye.
    assert len(fake_room.exits) == 2


@pytest.mark.parametrize("bad", [0, -1, 1.5, True])
def test_exit_concurrency_must_be_none_or_a_positive_int(bad: object) -> None:
    with pytest.raises(ValueError, match="exit_concurrency"):
        HoldPolicy(exit_concurrency=bad)  # type: ignore[arg-type]


def test_exit_concurrency_defaults_to_all_at_once() -> None:
    assert HoldPolicy().exit_concurrency is None


async def test_the_exit_report_is_on_the_manager_after_the_block_and_logged(
    autojump_clock: MockClock, fake_room: FakeRoom, caplog: pytest.LogCaptureFixture
) -> None:
    """After the block: one announcement per held session, and one INFO line saying so."""
    caplog.set_level("INFO", logger="letagents_trio.manager")
    sessions = [await fake_room.add_worker(display_name=name) for name in ("A", "B", "C")]
    async with fake_room.client() as client:
        async with open_connection_manager(client) as manager:
            assert not manager.exit_report
            for session in sessions:
                await manager.hold(session).wait_status(HolderStatus.OPEN)
    report = manager.exit_report
    assert report is not None
    assert sorted(a.session_id for a in report) == sorted(s.session_id for s in sessions)
    assert all(a.recorded for a in report)
    lines = [
        (r.levelname, r.getMessage()) for r in caplog.records if r.name == "letagents_trio.manager"
    ]
    assert lines == [("INFO", "announced 3 exits in 0 ms: 3 recorded")]


async def test_a_failing_assert_in_the_block_arrives_as_itself(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    """What a tester writes: ``assert`` inside the block fails as an AssertionError."""
    session = await fake_room.add_worker()
    async with fake_room.client() as client:

        async def fail() -> None:
            async with open_connection_manager(client) as manager:
                manager.hold(session)
                raise AssertionError("expected")

        with pytest.raises(AssertionError, match="expected"):
            await fail()
    assert len(fake_room.exits) == 1


async def test_events_carry_wall_clock_time_for_people(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    """``time`` is trio's clock (exact, for tests); ``wall_clock`` is a datetime for people."""
    session = await fake_room.add_worker()
    before = datetime.datetime.now().astimezone()
    async with fake_room.client() as client, open_connection_manager(client) as manager:
        with manager.subscribe() as events:
            manager.hold(session)
            event = await events.receive()
    after = datetime.datetime.now().astimezone()
    assert event.time == 0
    assert before <= event.wall_clock <= after
    assert event.wall_clock.tzinfo is not None
    assert "wall_time" not in repr(event)


@pytest.mark.slow
async def test_a_slow_room_answers_every_exit_within_one_round_trip(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    # Exit answers take 0.8 s, as from a remote room: in turns of 64, 1,000
    # goodbyes would need 16 round trips; all at once they need one.
    sessions = [await fake_room.add_worker(display_name=f"W{i}") for i in range(1000)]
    fake_room.exit_delay = 0.8
    async with fake_room.client() as client:
        async with open_connection_manager(client) as manager:
            holders = [manager.hold(s) for s in sessions]
            for holder in holders:
                assert holder is not None
                await holder.wait_status(HolderStatus.OPEN)
            await trio.sleep(5)
            started = trio.current_time()
            report = await manager.announce_exits()
        assert trio.current_time() == started + 0.8
    assert len(report) == 1000
    assert all(a.recorded and a.error is None for a in report)
    assert {a.finished_at for a in report} == {started + 0.8}
    assert {e.time for e in fake_room.exits} == {started}


@pytest.mark.slow
async def test_after_the_deadline_nothing_takes_time_at_thousands_of_sessions(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    # A black-holed room: every exit is in flight at the deadline, and the
    # goodbye ends early enough for all of them to unwind by then.
    sessions = [await fake_room.add_worker(display_name=f"W{i}") for i in range(2000)]
    fake_room.black_hole_exits = True
    async with fake_room.client() as client:
        async with open_connection_manager(client) as manager:
            for s in sessions:
                manager.hold(s)
            await trio.sleep(5)
            started = trio.current_time()
        assert trio.current_time() == started + 1.5
    assert len(fake_room.exits) == 2000
    assert {e.time for e in fake_room.exits} == {started}
    report = await manager.announce_exits()
    assert {a.error for a in report} == {"deadline"}
    assert {a.finished_at for a in report} == {started + 1.5}


async def test_the_collector_is_paused_until_every_holder_has_unwound(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    """Opted in: holders unwinding after the goodbye are garbage too, no full passes then."""
    sessions = [await fake_room.add_worker(display_name=name) for name in ("A", "B")]
    connector = SlowToUnwind()
    assert gc.isenabled()
    async with fake_room.client() as client:
        async with open_connection_manager(
            client, connector=connector, pause_collector=True
        ) as manager:
            for session in sessions:
                await manager.hold(session).wait_status(HolderStatus.OPEN)
        assert trio.current_time() == pytest.approx(0.1)
    assert connector.collector_enabled_while_closing == [False, False]
    assert gc.isenabled()
    assert [(a.recorded, a.error) for a in manager.exit_report or ()] == [(True, None)] * 2


async def test_an_embedder_that_disabled_the_collector_keeps_it_disabled(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    gc.disable()
    try:
        async with fake_room.client() as client:
            async with open_connection_manager(client, pause_collector=True) as manager:
                await manager.hold(session).wait_status(HolderStatus.OPEN)
            await manager.announce_exits()
        assert not gc.isenabled()
    finally:
        gc.enable()


async def test_an_sse_holder_leaving_closes_its_stream_then_posts_and_stops(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    """Stream closed, exit POSTed naming its connection: no wait for the holder to
    unwind, no stop from outside, and no reconnect."""
    session = await fake_room.add_worker()
    async with fake_room.client() as client:
        connector = SSEConnector(client)
        async with open_connection_manager(client, connector=connector) as manager:
            with manager.subscribe(math.inf) as events:
                holder = manager.hold(session)
                await holder.wait_status(HolderStatus.OPEN)
                await trio.sleep(1)
                connection_id = holder.connection_id
                # SSE: the exit is a request, made ready; not sent, leave() sends it.
                assert isinstance(holder.leave_nowait(), HandedExit)
                with trio.fail_after(1):
                    recorded = await holder.leave()
                assert recorded is True
                assert session.session_id not in manager.holders  # left: the goodbye skips it
                await holder.wait_status(HolderStatus.STOPPED)
                await trio.sleep(60)
                kinds = [(e.kind.value, e.detail) for e in drain(events)]
                assert [e.body["process_connection_id"] for e in fake_room.exits] == [connection_id]
    # The holder stopped on its own, before anyone stopped it, and never retried.
    assert kinds == [("attempt", ""), ("open", ""), ("connection", ""), ("stopped", "process exit")]
    assert len(fake_room.process_requests(session.session_id)) == 1


async def test_an_exit_naming_no_connection_waits_for_its_stream_to_close(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    """§2.2: a null ``process_connection_id`` is recorded only once the room saw the close.

    Leaving as soon as the stream is open, before its ``open`` event is read,
    is what the tester's quickstart does; done twenty times, the exit must be
    recorded every time.
    """
    recorded = []
    for index in range(20):
        session = await fake_room.add_worker(display_name=f"Quick{index}")
        async with fake_room.client() as client, open_connection_manager(client) as manager:
            await manager.hold(session).wait_status(HolderStatus.OPEN)
        recorded += [(a.connection_id, a.recorded) for a in manager.exit_report or ()]
    assert [r for _, r in recorded] == [True] * 20
