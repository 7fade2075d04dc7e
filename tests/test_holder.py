"""Process-connection holders against the fake room, at exact virtual times.

Every test runs under ``autojump_clock`` over the in-process transport, so
``trio.current_time()`` is the only clock and each assertion is exact.
"""

from __future__ import annotations

import math
import re
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs
import pytest
import trio
import trio.testing

from letagents_trio import (
    AgentSession,
    ConnectionManager,
    EventKind,
    HolderStatus,
    HoldPolicy,
    IneligibleSession,
    Outcome,
    ProcessConnector,
    ProcessStream,
    SSEConnector,
    StreamNews,
    open_connection_manager,
)
from letagents_trio._unknown import SUMMARY_WINDOW
from letagents_trio.testing import FakeRoom, ProcessMode, open_fake_room
from letagents_trio.workers import LocalStateStore

from .events import Delegating, ScriptedStream, drain

if TYPE_CHECKING:
    from trio.testing import MockClock


@pytest.fixture
def state(tmp_path: Path) -> LocalStateStore:
    """A real state file: the default hooks (still ours, mark ended) read and write it."""
    return LocalStateStore(tmp_path / "mcp-state.json")


async def stored_worker(
    fake_room: FakeRoom, state: LocalStateStore, display_name: str = "Juniper", **kw: Any
) -> AgentSession:
    """Register a worker at the room and remember it in the state file, as a handle does."""
    session = await fake_room.add_worker(display_name=display_name, **kw)

    def remember(data: dict[str, Any]) -> None:
        data.setdefault("agent_sessions", {})[session.session_id] = session.to_json()

    await state.update(remember)
    return session


@attrs.frozen
class Hooks:
    """The manager's state hooks: the test's callables, else the store's, else none."""

    state: LocalStateStore | None
    on_ended: Callable[[AgentSession], Awaitable[object]] | None = None
    still_ours: Callable[[AgentSession], Awaitable[bool]] | None = None

    async def mark_ended(self, session: AgentSession) -> object:
        if self.on_ended is not None:
            return await self.on_ended(session)
        if self.state is not None:
            await self.state.mark_ended(session)
            return None
        await trio.lowlevel.checkpoint()
        return None

    async def is_still_ours(self, session: AgentSession) -> bool:
        if self.still_ours is not None:
            return await self.still_ours(session)
        if self.state is not None:
            return await self.state.is_still_ours(session)
        await trio.lowlevel.checkpoint()
        return True


@asynccontextmanager
async def managed(
    fake_room: FakeRoom,
    state: LocalStateStore | None = None,
    *,
    policy: HoldPolicy | None = None,
    on_ended: Callable[[AgentSession], Awaitable[object]] | None = None,
    still_ours: Callable[[AgentSession], Awaitable[bool]] | None = None,
) -> AsyncIterator[ConnectionManager]:
    async with (
        fake_room.client() as client,
        open_connection_manager(
            client,
            policy=policy,
            state=Hooks(state, on_ended, still_ours),
        ) as manager,
    ):
        yield manager


def attempt_times(fake_room: FakeRoom, session: AgentSession) -> list[float]:
    return [r.time for r in fake_room.process_requests(session.session_id)]


async def wait_attempts(fake_room: FakeRoom, session: AgentSession, count: int) -> None:
    await fake_room.wait_until(lambda: len(attempt_times(fake_room, session)) >= count)


# --- opening and the first attempt -----------------------------------------------------


async def test_opens_one_process_connection_with_the_session_token(
    autojump_clock: MockClock, fake_room: FakeRoom, state: LocalStateStore
) -> None:
    """§8.1.1: exactly one GET …/process, for that session, with a non-empty token."""
    session = await stored_worker(fake_room, state, display_name="Juniper")
    async with managed(fake_room, state) as manager:
        holder = manager.hold(session)
        await holder.wait_status(HolderStatus.OPEN)
        await trio.sleep(100)
        requests = fake_room.process_requests()
        assert len(requests) == 1
        assert requests[0].session_id == session.session_id
        assert requests[0].has_session_token
        assert holder.connection_id is not None
        assert (
            holder.connection_id
            == fake_room.room.process_streams(session.session_id)[0].connection_id
        )


async def test_status_and_statistics_follow_the_stream(
    autojump_clock: MockClock, fake_room: FakeRoom, state: LocalStateStore
) -> None:
    session = await stored_worker(fake_room, state)
    async with managed(fake_room, state) as manager:
        holder = manager.hold(session)
        assert holder.status is HolderStatus.CONNECTING
        await holder.wait_status(HolderStatus.OPEN)
        stats = holder.statistics()
        assert stats.status is HolderStatus.OPEN
        assert stats.opens == 1
        assert stats.opened_at == 0
        assert stats.next_attempt_at is None
        await trio.sleep(7)
        fake_room.drop(session.session_id)
        await holder.wait_status(HolderStatus.WAITING)
        stats = holder.statistics()
        assert stats.attempts[Outcome.DROPPED] == 1
        assert stats.last_outcome is Outcome.DROPPED
        assert stats.next_attempt_at == 8
        assert stats.connection_id is None
        await holder.wait_status(HolderStatus.OPEN)
        assert trio.current_time() == 8
        assert holder.statistics().opens == 2


# --- schedules -------------------------------------------------------------------------


async def test_drop_reopens_after_one_second_each_time_it_reopens(
    autojump_clock: MockClock, fake_room: FakeRoom, state: LocalStateStore
) -> None:
    """§8.1.2: a destroyed stream is reopened; a successful open resets the counter."""
    session = await stored_worker(fake_room, state)
    async with managed(fake_room, state) as manager:
        holder = manager.hold(session)
        for expected in (0, 1, 2, 3):
            await holder.wait_status(HolderStatus.OPEN)
            assert trio.current_time() == expected
            assert fake_room.drop(session.session_id) == 1
            await holder.wait_status(HolderStatus.WAITING)


@pytest.mark.parametrize(
    ("mode", "times"),
    [
        # 503: dropped, waits 1, 2, 5, 5.
        (ProcessMode.ERROR, [0, 1, 3, 8, 13]),
        # 404: unsupported, waits 10, 60, 300, 300.
        (ProcessMode.UNKNOWN, [0, 10, 70, 370, 670]),
        # 401: refused, waits 5, 15, 60, 60.
        (ProcessMode.REFUSED, [0, 5, 20, 80, 140]),
    ],
    ids=["dropped", "unsupported", "refused"],
)
async def test_each_outcome_backs_off_on_its_own_schedule(
    autojump_clock: MockClock,
    fake_room: FakeRoom,
    state: LocalStateStore,
    mode: ProcessMode,
    times: list[float],
) -> None:
    session = await stored_worker(fake_room, state)
    fake_room.set_process_mode(mode)
    async with managed(fake_room, state) as manager:
        manager.hold(session)
        await wait_attempts(fake_room, session, len(times))
        assert attempt_times(fake_room, session) == times


async def test_counters_are_independent_and_reset_only_on_open(
    autojump_clock: MockClock, fake_room: FakeRoom, state: LocalStateStore
) -> None:
    session = await stored_worker(fake_room, state)
    sid = session.session_id
    fake_room.set_process_mode(ProcessMode.REFUSED, sid)
    async with managed(fake_room, state) as manager:
        holder = manager.hold(session)
        await wait_attempts(fake_room, session, 2)  # refused at 0 (wait 5), at 5 (wait 15)
        fake_room.set_process_mode(ProcessMode.ERROR, sid)
        await wait_attempts(fake_room, session, 3)  # at 20: dropped, its own counter: wait 1
        fake_room.set_process_mode(ProcessMode.REFUSED, sid)
        await wait_attempts(fake_room, session, 4)  # at 21: refused again: third wait, 60
        fake_room.set_process_mode(ProcessMode.SERVED, sid)
        await holder.wait_status(HolderStatus.OPEN)  # at 81: open resets everything
        assert trio.current_time() == 81
        fake_room.set_process_mode(ProcessMode.REFUSED, sid)
        fake_room.drop(sid)  # dropped at 81: wait 1
        await wait_attempts(fake_room, session, 7)  # 82 refused (wait 5), 87
        assert attempt_times(fake_room, session) == [0, 5, 20, 21, 81, 82, 87]


# --- timeouts --------------------------------------------------------------------------


async def test_silence_drops_exactly_45_seconds_after_the_last_byte(
    autojump_clock: MockClock, fake_room: FakeRoom, state: LocalStateStore, both_transports: str
) -> None:
    # A WebSocket sees the dead peer as soon: its ping at 40 s (longer than two of
    # the room's 15 s intervals) goes unanswered for the 5 s pong timeout, which
    # ends with the holder's own silence deadline.
    dead_at, detail = 45, "silence"
    session = await stored_worker(fake_room, state)
    fake_room.set_process_mode(ProcessMode.SILENT)
    async with managed(fake_room, state) as manager:
        with manager.subscribe(math.inf) as events:
            manager.hold(session)
            await wait_attempts(fake_room, session, 2)
            closed = [e for e in drain(events) if e.kind is EventKind.CLOSED]
        assert [(e.time, e.outcome, e.detail) for e in closed] == [
            (dead_at, Outcome.DROPPED, detail)
        ]
        assert attempt_times(fake_room, session) == [0, dead_at + 1]


async def test_silence_counts_from_the_last_byte_of_a_served_stream(
    autojump_clock: MockClock, both_transports: str
) -> None:
    # Heartbeats every 100 s: the stream goes quiet after its opening bytes at 0.
    async with open_fake_room(heartbeat_interval=100.0) as quiet_room:
        if both_transports == "sse":
            await _silence_from_last_byte(quiet_room)
        else:
            await _quiet_but_alive_socket(quiet_room)


async def _silence_from_last_byte(fake_room: FakeRoom) -> None:
    session = await fake_room.add_worker()
    async with managed(fake_room) as manager:
        holder = manager.hold(session)
        await holder.wait_status(HolderStatus.OPEN)
        await holder.wait_status(HolderStatus.WAITING)
        assert trio.current_time() == 45
        assert holder.statistics().last_outcome is Outcome.DROPPED


async def _quiet_but_alive_socket(fake_room: FakeRoom) -> None:
    # The client's pings (every 10 s of quiet) are answered: a quiet room
    # that is still there is never dropped.
    session = await fake_room.add_worker()
    async with managed(fake_room) as manager:
        holder = manager.hold(session)
        await trio.sleep(300)
        assert holder.status is HolderStatus.OPEN
        assert holder.statistics().attempts[Outcome.DROPPED] == 0


async def test_heartbeats_keep_a_stream_open_forever(
    autojump_clock: MockClock, fake_room: FakeRoom, state: LocalStateStore
) -> None:
    session = await stored_worker(fake_room, state)
    async with managed(fake_room, state) as manager:
        holder = manager.hold(session)
        await trio.sleep(3600)
        assert holder.status is HolderStatus.OPEN
        assert len(attempt_times(fake_room, session)) == 1
        assert holder.statistics().attempts[Outcome.DROPPED] == 0


async def test_answer_timeout_is_ten_seconds(
    autojump_clock: MockClock, fake_room: FakeRoom, state: LocalStateStore
) -> None:
    session = await stored_worker(fake_room, state)
    fake_room.set_process_mode(ProcessMode.SLOW)
    fake_room.slow_headers = 30
    async with managed(fake_room, state) as manager:
        with manager.subscribe(math.inf) as events:
            manager.hold(session)
            await wait_attempts(fake_room, session, 3)
            closed = [(e.time, e.detail) for e in drain(events) if e.kind is EventKind.CLOSED]
        assert closed == [(10, "answer timeout"), (21, "answer timeout")]
        assert attempt_times(fake_room, session) == [0, 11, 23]


async def test_slow_headers_within_the_answer_timeout_open(
    autojump_clock: MockClock, fake_room: FakeRoom, state: LocalStateStore
) -> None:
    session = await stored_worker(fake_room, state)
    fake_room.set_process_mode(ProcessMode.SLOW)
    fake_room.slow_headers = 9.5
    async with managed(fake_room, state) as manager:
        holder = manager.hold(session)
        await holder.wait_status(HolderStatus.OPEN)
        assert trio.current_time() == 9.5


# --- turns: at most open_concurrency attempts wait for the room at once ---------------


async def slow_workers(
    fake_room: FakeRoom, state: LocalStateStore, count: int, *, answer_after: float
) -> list[AgentSession]:
    """``count`` stored workers, in a room that answers each attempt ``answer_after`` s late."""
    fake_room.set_process_mode(ProcessMode.SLOW)
    fake_room.slow_headers = answer_after
    return [await stored_worker(fake_room, state, display_name=f"W{i}") for i in range(count)]


def asked_at(fake_room: FakeRoom) -> list[float]:
    return sorted(r.time for r in fake_room.process_requests())


async def test_at_most_open_concurrency_attempts_wait_for_the_room_at_once(
    autojump_clock: MockClock, fake_room: FakeRoom, state: LocalStateStore
) -> None:
    """Two turns, five holders, a room answering after 4 s: two by two, and
    each answer timeout (5 s) starts with its turn, so none runs out."""
    sessions = await slow_workers(fake_room, state, 5, answer_after=4)
    policy = HoldPolicy(open_concurrency=2, answer_timeout=5)
    async with managed(fake_room, state, policy=policy) as manager:
        holders = [manager.hold(s) for s in sessions]
        await trio.sleep(1)
        assert [h.status for h in holders] == [HolderStatus.CONNECTING] * 5
        assert manager.statistics().waiting_for_turn == 3
        opened_at: list[float] = []
        for holder in holders:
            await holder.wait_status(HolderStatus.OPEN)
            opened = holder.statistics().opened_at
            assert opened is not None
            opened_at.append(opened)
        await trio.sleep(100)
        assert sorted(opened_at) == [4, 4, 8, 8, 12]
        # The turn ends as the stream opens, not as it closes: all five stay open.
        assert asked_at(fake_room) == [0, 0, 4, 4, 8]
        assert all(h.statistics().opens == 1 for h in holders)
        assert manager.statistics().waiting_for_turn == 0


async def test_an_attempt_that_fails_gives_its_turn_to_the_next(
    autojump_clock: MockClock, fake_room: FakeRoom, state: LocalStateStore
) -> None:
    """One turn, a room that never answers in time: each attempt's answer timeout
    (10 s) passes its turn on; the first holder asks again after its 1 s wait."""
    sessions = await slow_workers(fake_room, state, 2, answer_after=30)
    async with managed(fake_room, state, policy=HoldPolicy(open_concurrency=1)) as manager:
        for session in sessions:
            manager.hold(session)
        await trio.sleep(25)
        assert asked_at(fake_room) == [0, 10, 20]


async def test_a_holder_stopped_while_waiting_for_its_turn_never_asks(
    autojump_clock: MockClock, fake_room: FakeRoom, state: LocalStateStore
) -> None:
    first, second = await slow_workers(fake_room, state, 2, answer_after=4)
    async with managed(fake_room, state, policy=HoldPolicy(open_concurrency=1)) as manager:
        opened = manager.hold(first)
        await wait_attempts(fake_room, first, 1)
        waiting = manager.hold(second)
        await trio.sleep(1)
        assert manager.release(second.session_id)
        await waiting.wait_status(HolderStatus.STOPPED)
        assert trio.current_time() == 1
        await opened.wait_status(HolderStatus.OPEN)
        await trio.sleep(100)
        assert [r.session_id for r in fake_room.process_requests()] == [first.session_id]


async def test_a_goodbye_does_not_wait_for_the_turns_of_holders_that_never_asked(
    autojump_clock: MockClock, fake_room: FakeRoom, state: LocalStateStore
) -> None:
    sessions = await slow_workers(fake_room, state, 3, answer_after=4)
    async with managed(fake_room, state, policy=HoldPolicy(open_concurrency=1)) as manager:
        holders = [manager.hold(s) for s in sessions]
        await trio.sleep(2)
    assert trio.current_time() <= 2 + manager.policy.exit_deadline
    assert [h.status for h in holders] == [HolderStatus.STOPPED] * 3
    assert asked_at(fake_room) == [0]


async def test_without_a_cap_every_attempt_asks_at_once(
    autojump_clock: MockClock, fake_room: FakeRoom, state: LocalStateStore
) -> None:
    sessions = await slow_workers(fake_room, state, 3, answer_after=4)
    async with managed(fake_room, state, policy=HoldPolicy(open_concurrency=None)) as manager:
        holders = [manager.hold(s) for s in sessions]
        for holder in holders:
            await holder.wait_status(HolderStatus.OPEN)
        assert trio.current_time() == 4
        assert asked_at(fake_room) == [0, 0, 0]


# --- ended -----------------------------------------------------------------------------


async def test_410_ends_the_session_without_reconnecting(
    autojump_clock: MockClock, fake_room: FakeRoom, state: LocalStateStore
) -> None:
    session = await stored_worker(fake_room, state)
    fake_room.set_process_mode(ProcessMode.ENDED)
    ended: list[tuple[float, str]] = []

    async def on_ended(s: AgentSession) -> None:
        await trio.lowlevel.checkpoint()
        ended.append((trio.current_time(), s.session_id))

    async with managed(fake_room, state, on_ended=on_ended) as manager:
        holder = manager.hold(session)
        await holder.wait_status(HolderStatus.ENDED)
        await trio.sleep(1000)
        assert ended == [(0, session.session_id)]
        assert session.session_id not in manager.holders
        assert len(attempt_times(fake_room, session)) == 1


async def test_ended_event_ends_the_session_without_reconnecting(
    autojump_clock: MockClock, fake_room: FakeRoom, state: LocalStateStore
) -> None:
    """§8.1.3: the room writes ``event: ended`` and closes; the holder stops for good."""
    session = await stored_worker(fake_room, state)
    ended: list[float] = []

    async def on_ended(s: AgentSession) -> None:
        await trio.lowlevel.checkpoint()
        ended.append(trio.current_time())

    async with managed(fake_room, state, on_ended=on_ended) as manager:
        with manager.subscribe(math.inf) as events:
            holder = manager.hold(session)
            await trio.sleep(5)
            fake_room.end(session.session_id)
            await holder.wait_status(HolderStatus.ENDED)
            await trio.sleep(1000)
            kinds = [(e.time, e.kind, e.detail) for e in drain(events)]
        assert ended == [5]
        assert (5, EventKind.CLOSED, "ended event") in kinds
        assert (5, EventKind.ENDED, "") in kinds
        assert len(attempt_times(fake_room, session)) == 1


async def test_a_failing_on_ended_hook_is_logged_not_raised(
    autojump_clock: MockClock,
    fake_room: FakeRoom,
    state: LocalStateStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    session = await stored_worker(fake_room, state)
    fake_room.set_process_mode(ProcessMode.ENDED)

    async def on_ended(s: AgentSession) -> None:
        await trio.lowlevel.checkpoint()
        raise OSError("disk full")

    async with managed(fake_room, state, on_ended=on_ended) as manager:
        holder = manager.hold(session)
        await holder.wait_status(HolderStatus.ENDED)
    assert "on_ended hook failed" in caplog.text


def answering_still_ours(
    answer: bool,
) -> tuple[Callable[[AgentSession], Awaitable[bool]], list[float]]:
    """A ``still_ours`` hook that always gives ``answer``, and the times it was asked."""
    asked: list[float] = []

    async def still_ours(session: AgentSession) -> bool:
        await trio.lowlevel.checkpoint()
        asked.append(trio.current_time())
        return answer

    return still_ours, asked


# --- still ours ------------------------------------------------------------------------


@pytest.mark.parametrize("mode", [ProcessMode.REFUSED, ProcessMode.UNKNOWN])
async def test_holder_stops_when_the_session_is_no_longer_ours(
    autojump_clock: MockClock, fake_room: FakeRoom, state: LocalStateStore, mode: ProcessMode
) -> None:
    session = await stored_worker(fake_room, state)
    fake_room.set_process_mode(mode)
    still_ours, asked = answering_still_ours(False)

    async with managed(fake_room, state, still_ours=still_ours) as manager:
        holder = manager.hold(session)
        await holder.wait_status(HolderStatus.STOPPED)
        await trio.sleep(1000)
        assert asked == [0]
        assert session.session_id not in manager.holders
        assert len(attempt_times(fake_room, session)) == 1


async def test_still_ours_is_not_asked_after_a_drop(
    autojump_clock: MockClock, fake_room: FakeRoom, state: LocalStateStore
) -> None:
    session = await stored_worker(fake_room, state)
    fake_room.set_process_mode(ProcessMode.ERROR)
    still_ours, asked = answering_still_ours(False)

    async with managed(fake_room, state, still_ours=still_ours) as manager:
        manager.hold(session)
        await wait_attempts(fake_room, session, 3)
        assert asked == []


async def test_a_failing_still_ours_hook_counts_as_not_ours(
    autojump_clock: MockClock, fake_room: FakeRoom, state: LocalStateStore
) -> None:
    session = await stored_worker(fake_room, state)
    fake_room.set_process_mode(ProcessMode.REFUSED)

    async def still_ours(s: AgentSession) -> bool:
        await trio.lowlevel.checkpoint()
        raise OSError("state file unreadable")

    async with managed(fake_room, state, still_ours=still_ours) as manager:
        holder = manager.hold(session)
        assert await holder.wait_status(HolderStatus.STOPPED) is HolderStatus.STOPPED
        assert session.session_id not in manager.holders


# --- the §8.1 route-coming-back scenarios ----------------------------------------------


async def test_unknown_route_then_served_opens_at_ten_seconds(
    autojump_clock: MockClock, fake_room: FakeRoom, state: LocalStateStore
) -> None:
    """§8.1.6–7: after a 404 no new attempt for 10 s, and not ended; then it opens."""
    session = await stored_worker(fake_room, state, display_name="Cedar")
    fake_room.set_process_mode(ProcessMode.UNKNOWN)
    async with managed(fake_room, state) as manager:
        holder = manager.hold(session)
        await trio.sleep(1.5)
        assert len(attempt_times(fake_room, session)) == 1
        assert holder.status is HolderStatus.WAITING
        fake_room.set_process_mode(ProcessMode.SERVED)
        await holder.wait_status(HolderStatus.OPEN)
        assert trio.current_time() == 10


def holder_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "letagents_trio.holder" and r.levelname == "WARNING"
    ]


async def test_a_room_that_forgot_the_session_is_named_once_per_run_of_404s(
    autojump_clock: MockClock,
    fake_room: FakeRoom,
    state: LocalStateStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 29: after an in-memory room restarted, every holder met 404 and
    waited 10, 60, 300 s for ever with nothing saying why."""
    session = await stored_worker(fake_room, state)
    sid = session.session_id
    async with managed(fake_room, state) as manager:
        holder = manager.hold(session)
        await holder.wait_status(HolderStatus.OPEN)
        fake_room.set_process_mode(ProcessMode.UNKNOWN)
        fake_room.drop(sid)
        await wait_attempts(fake_room, session, 4)  # the open, then 404s at 1, 11, 71
        await trio.testing.wait_all_tasks_blocked()  # the last 404 judged too
        assert holder_warnings(caplog) == [
            f"the room no longer knows 1 session it served before: {session.display_name}. A"
            " room restarted without its store forgets its sessions: register each worker"
            " again with its registration_key or worker_id, and the room makes it a new"
            " session. Retrying after 10, 60, 300 s"
        ]


async def test_twenty_forgotten_sessions_make_one_warning_naming_the_workers(
    autojump_clock: MockClock,
    fake_room: FakeRoom,
    state: LocalStateStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Issue 42 finding 5: a room that forgot twenty sessions is one line with the count
    and the workers' names (ten, then how many more), not twenty lines of session ids."""
    names = [f"Worker{n:02}" for n in range(20)]
    sessions = [await stored_worker(fake_room, state, display_name=name) for name in names]
    async with managed(fake_room, state) as manager:
        holders = [manager.hold(session) for session in sessions]
        for holder in holders:
            await holder.wait_status(HolderStatus.OPEN)
        fake_room.set_process_mode(ProcessMode.UNKNOWN)
        fake_room.drop()
        for session in sessions:
            await wait_attempts(fake_room, session, 2)
        await trio.testing.wait_all_tasks_blocked()
        await trio.sleep(2 * SUMMARY_WINDOW)
        (warning,) = holder_warnings(caplog)
    match = re.fullmatch(r"(.*before: )(.*)( and 10 more\..*)", warning)
    assert match is not None, warning
    head, named, tail = match.groups()
    assert head == "the room no longer knows 20 sessions it served before: "
    assert len(set(named.split(", ")) & set(names)) == 10  # in the order the 404s came
    assert tail == (
        " and 10 more. A room restarted without its store forgets its sessions: register each"
        " worker again with its registration_key or worker_id, and the room makes it a new"
        " session. Retrying after 10, 60, 300 s"
    )


async def test_a_404_before_any_open_names_the_address_or_the_route_once(
    autojump_clock: MockClock,
    fake_room: FakeRoom,
    state: LocalStateStore,
    caplog: pytest.LogCaptureFixture,
) -> None:
    session = await stored_worker(fake_room, state)
    fake_room.set_process_mode(ProcessMode.UNKNOWN)
    async with managed(fake_room, state) as manager:
        manager.hold(session)
        await wait_attempts(fake_room, session, 1)
        await trio.testing.wait_all_tasks_blocked()  # the 404 judged
        await trio.sleep(2 * SUMMARY_WINDOW)  # and summed up, before the next attempt
        said_at_once = holder_warnings(caplog)  # at the first 404, not at a later one
        await wait_attempts(fake_room, session, 3)
        await trio.testing.wait_all_tasks_blocked()
    assert said_at_once == holder_warnings(caplog)
    assert said_at_once == [
        f"no process route for 1 session at this address: {session.display_name} (a wrong"
        " API URL, a room without the route, or one that does not know the sessions)."
        " Retrying after 10, 60, 300 s"
    ]


async def test_refused_then_served_opens_fifteen_seconds_later(
    autojump_clock: MockClock, fake_room: FakeRoom, state: LocalStateStore
) -> None:
    """§8.1.8–9: refusals 5 s apart; served again, the next attempt comes 15 s later."""
    session = await stored_worker(fake_room, state, display_name="Rowan")
    fake_room.set_process_mode(ProcessMode.REFUSED)
    async with managed(fake_room, state) as manager:
        holder = manager.hold(session)
        await wait_attempts(fake_room, session, 2)
        assert attempt_times(fake_room, session) == [0, 5]
        fake_room.set_process_mode(ProcessMode.SERVED)
        await holder.wait_status(HolderStatus.OPEN)
        assert trio.current_time() == 20


async def test_room_restart_brings_every_holder_back(
    autojump_clock: MockClock, fake_room: FakeRoom, state: LocalStateStore
) -> None:
    sessions = [await stored_worker(fake_room, state, display_name=f"W{i}") for i in range(3)]
    async with managed(fake_room, state) as manager:
        holders = [manager.hold(s) for s in sessions]
        for h in holders:
            await h.wait_status(HolderStatus.OPEN)
        await trio.sleep(2)
        fake_room.restart()
        await trio.testing.wait_all_tasks_blocked()
        assert [h.status for h in holders] == [HolderStatus.WAITING] * 3
        for h in holders:
            await h.wait_status(HolderStatus.OPEN)
        assert trio.current_time() == 3
        assert all(h.statistics().opens == 2 for h in holders)


# --- steering --------------------------------------------------------------------------


async def test_release_during_a_backoff_stops_at_once(
    autojump_clock: MockClock, fake_room: FakeRoom, state: LocalStateStore
) -> None:
    session = await stored_worker(fake_room, state)
    fake_room.set_process_mode(ProcessMode.REFUSED)
    async with managed(fake_room, state) as manager:
        holder = manager.hold(session)
        await holder.wait_status(HolderStatus.WAITING)
        await trio.sleep(2)
        assert manager.release(session.session_id)
        await holder.wait_status(HolderStatus.STOPPED)
        assert trio.current_time() == 2
        await trio.sleep(1000)
        assert len(attempt_times(fake_room, session)) == 1
        assert not manager.release(session.session_id)
    assert fake_room.exits == []


async def test_stopping_a_holder_whose_task_has_ended_cancels_nothing(
    autojump_clock: MockClock,
    fake_room: FakeRoom,
    state: LocalStateStore,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A goodbye stops thousands of holders its closes already ended: no cancel for any."""
    session = await stored_worker(fake_room, state)
    cancels: list[str | None] = []
    real_cancel = trio.CancelScope.cancel

    def counted(scope: trio.CancelScope, reason: str | None = None) -> None:
        cancels.append(reason)
        real_cancel(scope, reason)

    async with managed(fake_room, state) as manager:
        holder = manager.hold(session)
        await holder.wait_status(HolderStatus.OPEN)
        with monkeypatch.context() as patched:
            patched.setattr(trio.CancelScope, "cancel", counted)
            assert manager.release(session.session_id)
        await holder.wait_status(HolderStatus.STOPPED)
        assert cancels == ["process holder: released"]
        with monkeypatch.context() as patched:
            patched.setattr(trio.CancelScope, "cancel", counted)
            holder.stop("process exit")
            holder.stop("again")
        assert cancels == ["process holder: released"]
        assert holder.status is HolderStatus.STOPPED


async def test_release_of_an_open_stream_closes_it(
    autojump_clock: MockClock, fake_room: FakeRoom, state: LocalStateStore
) -> None:
    session = await stored_worker(fake_room, state)
    async with managed(fake_room, state) as manager:
        holder = manager.hold(session)
        await holder.wait_status(HolderStatus.OPEN)
        manager.release(session.session_id)
        await holder.wait_status(HolderStatus.STOPPED)
        await trio.testing.wait_all_tasks_blocked()
        assert fake_room.room.process_streams(session.session_id) == []
        row = fake_room.room.session(session.session_id)
        assert row is not None
        assert row.process_disconnected_at is not None


async def test_reconnect_now_cuts_the_backoff_short(
    autojump_clock: MockClock, fake_room: FakeRoom, state: LocalStateStore
) -> None:
    session = await stored_worker(fake_room, state)
    fake_room.set_process_mode(ProcessMode.UNKNOWN)
    async with managed(fake_room, state) as manager:
        holder = manager.hold(session)
        assert not holder.reconnect_now()
        await holder.wait_status(HolderStatus.WAITING)
        await trio.sleep(3)
        fake_room.set_process_mode(ProcessMode.SERVED)
        assert holder.reconnect_now()
        await holder.wait_status(HolderStatus.OPEN)
        assert trio.current_time() == 3


async def test_hold_is_idempotent_for_the_same_token_and_replaces_for_a_new_one(
    autojump_clock: MockClock,
    fake_room: FakeRoom,
) -> None:
    session = await fake_room.add_worker()
    # No state file here: the room refuses the made-up token, and the point is
    # only that the new holder replaces the old one.
    async with managed(fake_room) as manager:
        first = manager.hold(session)
        assert manager.hold(session) is first
        await first.wait_status(HolderStatus.OPEN)
        rotated = AgentSession(
            session_id=session.session_id,
            session_token="another-token-value",
            room_id=session.room_id,
        )
        second = manager.hold(rotated)
        assert second is not first
        assert await first.wait_status(HolderStatus.STOPPED) is HolderStatus.STOPPED
        assert manager.holders[session.session_id] is second


@pytest.mark.parametrize(
    ("session", "rule", "reason"),
    [
        (
            AgentSession(
                session_id="s1", session_token="t", room_id="r", session_kind="controller"
            ),
            "not-a-worker",
            "only worker sessions are held, not 'controller'",
        ),
        (
            AgentSession(
                session_id="s1", session_token="t", room_id="r", ended_at="2026-01-01T00:00:00.000Z"
            ),
            "ended",
            "the room ended the session",
        ),
        (
            AgentSession(session_id="s1", session_token="", room_id="r"),
            "no-token",
            "the session has no token",
        ),
        (
            AgentSession(session_id="local_abc", session_token="t", room_id="r"),
            "local-room",
            "local rooms have no process connection",
        ),
    ],
    ids=["controller", "ended", "no-token", "local"],
)
async def test_ineligible_sessions_are_refused_naming_the_rule(
    autojump_clock: MockClock, fake_room: FakeRoom, session: AgentSession, rule: str, reason: str
) -> None:
    """§4.1: hold() raises for a session it never holds, and says which rule refused it."""
    async with managed(fake_room) as manager:
        assert not manager.is_eligible(session)
        with pytest.raises(IneligibleSession) as refused:
            manager.hold(session)
        assert refused.value.rule == rule
        assert str(refused.value) == f"session {session.session_id!r} is not held: {reason}"
        assert dict(manager.holders) == {}
        await trio.sleep(10)
    assert fake_room.process_requests() == []


async def test_nothing_is_held_outside_owner_mode(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    async with (
        fake_room.client() as client,
        open_connection_manager(client, owner_mode=False) as manager,
    ):
        assert not manager.is_eligible(session)
        with pytest.raises(IneligibleSession) as refused:
            manager.hold(session)
        assert refused.value.rule == "not-owner"
        assert str(refused.value) == (
            f"session {session.session_id!r} is not held:"
            " this process does not act for the owner (a worker bearer is set)"
        )


async def test_the_manager_never_reads_the_environment(
    autojump_clock: MockClock, fake_room: FakeRoom, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Owner mode is the caller's to give (the MCP server reads the bearer at start-up)."""
    monkeypatch.setenv("LETAGENTS_AGENT_SESSION_BEARER", "lasb_x")
    session = await fake_room.add_worker()
    async with fake_room.client() as client, open_connection_manager(client) as manager:
        assert manager.is_eligible(session)
        await manager.hold(session).wait_status(HolderStatus.OPEN)


async def test_wait_status_checkpoints_and_needs_a_status(
    autojump_clock: MockClock, fake_room: FakeRoom, state: LocalStateStore
) -> None:
    session = await stored_worker(fake_room, state)
    async with managed(fake_room, state) as manager:
        holder = manager.hold(session)
        with pytest.raises(ValueError, match="at least one"):
            await holder.wait_status()
        with trio.CancelScope() as scope:
            scope.cancel()
            await holder.wait_status(HolderStatus.CONNECTING)
        assert scope.cancelled_caught


async def test_holder_repr_hides_the_token(
    autojump_clock: MockClock, fake_room: FakeRoom, state: LocalStateStore
) -> None:
    session = await stored_worker(fake_room, state)
    async with managed(fake_room, state) as manager:
        holder = manager.hold(session)
        assert session.session_token not in repr(holder)
        assert session.session_token not in repr(holder.statistics())
        assert session.session_token not in repr(session)


@pytest.fixture(autouse=True)
def _each_transport(both_transports: str) -> str:
    """Every test here runs over SSE and over the WebSocket form."""
    return both_transports


class KeptHeartbeatStream(ScriptedStream):
    """Names its connection at once; at 10 s hands over a heartbeat kept since 3 s."""

    def __init__(self) -> None:
        super().__init__(StreamNews(connection_id="conn-1"), StreamNews())

    async def __anext__(self) -> StreamNews:
        if len(self._news) == 1:
            await trio.sleep_until(10)
            news = await super().__anext__()
            self.heard_at = 3.0
            return news
        return await super().__anext__()


class KeptHeartbeatConnector(Delegating):
    """SSE, but every stream opened is a :class:`KeptHeartbeatStream`."""

    @asynccontextmanager
    async def open(self, session: AgentSession) -> AsyncIterator[ProcessStream]:
        await trio.lowlevel.checkpoint()
        yield KeptHeartbeatStream()


async def test_silence_counts_from_when_bytes_kept_by_the_kernel_arrived(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    """A quiet read hands over at 10 s a heartbeat that came at 3 s: silent from 48 s, not 55."""
    session = await fake_room.add_worker()
    async with (
        fake_room.client() as client,
        open_connection_manager(
            client, connector=KeptHeartbeatConnector(SSEConnector(client))
        ) as manager,
    ):
        with manager.subscribe(math.inf) as events:
            holder = manager.hold(session)
            await holder.wait_status(HolderStatus.WAITING)
            closed = [e for e in drain(events) if e.kind is EventKind.CLOSED]
    assert [(e.time, e.outcome, e.detail) for e in closed] == [(48, Outcome.DROPPED, "silence")]


class AnsweredAtOnceStream(ScriptedStream):
    """Names its connection; its exit goes at once, and the room's answer ends its reading."""

    def __init__(self) -> None:
        super().__init__(StreamNews(connection_id="conn-1"))
        self.answered_exits: list[str] = []

    def leave_nowait(self, connection_id: str) -> bool | None:
        self.answered_exits.append(connection_id)
        self.closed.set()  # the answer came: the reader ends
        return True

    async def leave(self, connection_id: str) -> bool | None:
        await trio.lowlevel.checkpoint()
        return True


class AnsweredAtOnceConnector(Delegating):
    """Every stream opened is an :class:`AnsweredAtOnceStream`; a POSTed exit is noted."""

    def __init__(self, inner: ProcessConnector) -> None:
        super().__init__(inner)
        self.stream = AnsweredAtOnceStream()
        self.posted: list[str | None] = []

    @asynccontextmanager
    async def open(self, session: AgentSession) -> AsyncIterator[ProcessStream]:
        await trio.lowlevel.checkpoint()
        yield self.stream

    async def announce_exit(self, session: AgentSession, connection_id: str | None) -> bool:
        self.posted.append(connection_id)
        return await super().announce_exit(session, connection_id)


async def test_a_leaving_holder_asks_its_stream_for_the_answer_after_the_reading_ended(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    """The room's answer to an exit written at once ends the holder's reading before the
    goodbye asks for it: ``leave`` still asks the stream, which has the answer, and
    POSTs nothing."""
    session = await fake_room.add_worker()
    async with fake_room.client() as client:
        connector = AnsweredAtOnceConnector(SSEConnector(client))
        async with open_connection_manager(client, connector=connector) as manager:
            holder = manager.hold(session)
            await holder.wait_status(HolderStatus.OPEN)
            await trio.testing.wait_all_tasks_blocked()
            assert holder.leave_nowait() is True
            await holder.wait_status(HolderStatus.STOPPED)
            assert await holder.leave() is True
    assert (connector.stream.answered_exits, connector.posted) == (["conn-1"], [])
