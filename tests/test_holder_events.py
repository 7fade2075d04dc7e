"""A holder's events and statistics, field by field, at exact virtual times.

The timeline (:class:`HolderEvent`) and :meth:`ProcessHolder.statistics` are
what a host shows and logs; these tests compare them whole, so a wrong
session id, connection id, outcome, delay or reason cannot pass unseen.
Some run a :class:`ProcessHolder` in a nursery of their own, to see what the
manager's shutdown hides: a holder cancelled from outside, the hooks' effects.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing

from letagents_trio import (
    AgentSession,
    EventKind,
    HolderEvent,
    HolderStatistics,
    HolderStatus,
    HoldPolicy,
    Outcome,
    ProcessHolder,
    SSEConnector,
    open_connection_manager,
)
from letagents_trio._collector import OpeningBurst
from letagents_trio._unknown import UnknownSessions
from letagents_trio.testing import FakeRoom, ProcessMode

from .events import drain

if TYPE_CHECKING:
    from trio.testing import MockClock


def ids(holder: ProcessHolder) -> tuple[str | None, str | None]:
    """The holder's connection id and held connection id, read afresh (they change)."""
    return holder.connection_id, holder.held_connection_id


def no_attempts() -> dict[Outcome, int]:
    return dict.fromkeys(Outcome, 0)


async def test_the_timeline_names_the_session_and_connection_of_every_step(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    sid = session.session_id
    with trio.fail_after(60):
        async with fake_room.client() as client, open_connection_manager(client) as manager:
            with manager.subscribe(math.inf) as events:
                holder = manager.hold(session)
                await holder.wait_status(HolderStatus.OPEN)
                await trio.testing.wait_all_tasks_blocked()  # the open event names it
                first = holder.connection_id
                await trio.sleep(7)
                fake_room.drop(sid)
                await holder.wait_status(HolderStatus.WAITING)
                await holder.wait_status(HolderStatus.OPEN)
                await trio.testing.wait_all_tasks_blocked()
                second = holder.connection_id
                manager.release(sid)
                await holder.wait_status(HolderStatus.STOPPED)
                timeline = drain(events)
    assert first is not None
    assert second is not None
    assert first != second
    assert timeline == [
        HolderEvent(time=0, session_id=sid, kind=EventKind.ATTEMPT),
        HolderEvent(time=0, session_id=sid, kind=EventKind.OPEN),
        HolderEvent(time=0, session_id=sid, kind=EventKind.CONNECTION, connection_id=first),
        HolderEvent(
            time=7,
            session_id=sid,
            kind=EventKind.CLOSED,
            outcome=Outcome.DROPPED,
            connection_id=first,
            detail="stream end",
        ),
        HolderEvent(
            time=7, session_id=sid, kind=EventKind.BACKOFF, outcome=Outcome.DROPPED, delay=1.0
        ),
        HolderEvent(time=8, session_id=sid, kind=EventKind.ATTEMPT),
        HolderEvent(time=8, session_id=sid, kind=EventKind.OPEN),
        HolderEvent(time=8, session_id=sid, kind=EventKind.CONNECTION, connection_id=second),
        HolderEvent(time=8, session_id=sid, kind=EventKind.STOPPED, detail="released"),
    ]


async def test_statistics_before_while_and_after_an_open_stream(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    sid = session.session_id
    fake_room.set_process_mode(ProcessMode.SLOW)
    fake_room.slow_headers = 2
    with trio.fail_after(60):
        async with fake_room.client() as client, open_connection_manager(client) as manager:
            holder = manager.hold(session)
            await trio.testing.wait_all_tasks_blocked()
            assert holder.statistics() == HolderStatistics(
                session_id=sid,
                status=HolderStatus.CONNECTING,
                connection_id=None,
                attempts=no_attempts(),
                opens=0,
                last_outcome=None,
                opened_at=None,
                next_attempt_at=None,
            )
            assert ids(holder) == (None, None)

            await holder.wait_status(HolderStatus.OPEN)
            await trio.testing.wait_all_tasks_blocked()
            opened = holder.connection_id
            assert opened is not None
            assert opened == fake_room.room.process_streams(sid)[0].connection_id
            assert holder.statistics() == HolderStatistics(
                session_id=sid,
                status=HolderStatus.OPEN,
                connection_id=opened,
                attempts=no_attempts(),
                opens=1,
                last_outcome=None,
                opened_at=2,
                next_attempt_at=None,
            )
            assert holder.held_connection_id == opened

            await trio.sleep(3)
            holder.stop()
            await holder.wait_status(HolderStatus.STOPPED)
            assert trio.current_time() == 5
            assert holder.connection_id is None
            assert holder.statistics().connection_id is None
            assert holder.statistics().status is HolderStatus.STOPPED
            # The exit still names the stream that was open when it stopped.
            assert holder.held_connection_id == opened


async def test_a_retry_is_connecting_again_and_counts_each_attempt(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    fake_room.set_process_mode(ProcessMode.ERROR)
    with trio.fail_after(60):
        async with fake_room.client() as client, open_connection_manager(client) as manager:
            holder = manager.hold(session)
            await holder.wait_status(HolderStatus.WAITING)
            stats = holder.statistics()
            assert (stats.status, stats.next_attempt_at, stats.last_outcome) == (
                HolderStatus.WAITING,
                1,
                Outcome.DROPPED,
            )
            # The retry at 1 waits out the answer timeout (10 s).
            fake_room.set_process_mode(ProcessMode.SLOW)
            fake_room.slow_headers = 30
            assert await holder.wait_status(HolderStatus.CONNECTING) is HolderStatus.CONNECTING
            assert trio.current_time() == 1
            await trio.testing.wait_all_tasks_blocked()
            assert holder.status is HolderStatus.CONNECTING
            stats = holder.statistics()
            assert stats.status is HolderStatus.CONNECTING
            assert stats.next_attempt_at is None
            assert dict(stats.attempts) == {**no_attempts(), Outcome.DROPPED: 1}

            await holder.wait_status(HolderStatus.WAITING)
            assert trio.current_time() == 11
            stats = holder.statistics()
            assert dict(stats.attempts) == {**no_attempts(), Outcome.DROPPED: 2}
            assert stats.next_attempt_at == 13

            holder.stop()
            await holder.wait_status(HolderStatus.STOPPED)
            assert holder.statistics().next_attempt_at is None


async def test_a_drop_while_backing_off_announces_no_connection(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    """The stream that dropped is gone: the exit names none (null), not the old id."""
    session = await fake_room.add_worker()
    with trio.fail_after(60):
        async with fake_room.client() as client, open_connection_manager(client) as manager:
            holder = manager.hold(session)
            await holder.wait_status(HolderStatus.OPEN)
            await trio.testing.wait_all_tasks_blocked()
            assert ids(holder)[1] is not None
            fake_room.set_process_mode(ProcessMode.ERROR)
            fake_room.drop(session.session_id)
            await holder.wait_status(HolderStatus.WAITING)
            assert ids(holder) == (None, None)
    assert [e.body["process_connection_id"] for e in fake_room.exits] == [None]
    assert manager.exit_report is not None
    assert [a.connection_id for a in manager.exit_report] == [None]


async def _run_holder(
    fake_room: FakeRoom,
    session: AgentSession,
    *,
    still_ours: bool = True,
    until: HolderStatus,
) -> tuple[ProcessHolder, list[HolderEvent], list[str]]:
    """Run a holder in a nursery of its own until ``until``, then cancel that nursery."""
    events: list[HolderEvent] = []
    calls: list[str] = []
    policy = HoldPolicy()

    async def on_ended(s: AgentSession) -> None:
        await trio.lowlevel.checkpoint()
        calls.append(f"ended {s.session_id}")

    async def is_still_ours(s: AgentSession) -> bool:
        await trio.lowlevel.checkpoint()
        calls.append(f"ours? {s.session_id}")
        return still_ours

    def forget(h: ProcessHolder) -> None:
        calls.append(f"forget {h.session.session_id}")

    async with fake_room.client() as client, trio.open_nursery() as nursery:
        holder = ProcessHolder(
            session,
            connector=SSEConnector(client),
            policy=policy,
            emit=events.append,
            on_ended=on_ended,
            still_ours=is_still_ours,
            forget=forget,
            opening=OpeningBurst(pause=False),
            turns=trio.CapacityLimiter(1),
            unknown=UnknownSessions(nursery, policy),
        )
        await nursery.start(holder.run)
        await holder.wait_status(until)
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    return holder, events, calls


async def test_a_holder_cancelled_from_outside_stops_as_stopped(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    with trio.fail_after(60):
        holder, events, calls = await _run_holder(fake_room, session, until=HolderStatus.OPEN)
    assert holder.status is HolderStatus.STOPPED
    assert holder.connection_id is None
    assert holder.held_connection_id is not None
    assert events[-1] == HolderEvent(
        time=0, session_id=session.session_id, kind=EventKind.STOPPED, detail="stopped"
    )
    assert calls == []


async def test_stop_without_a_reason_stops_as_stopped(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    with trio.fail_after(60):
        async with fake_room.client() as client, open_connection_manager(client) as manager:
            with manager.subscribe(math.inf) as events:
                holder = manager.hold(session)
                await holder.wait_status(HolderStatus.OPEN)
                await trio.sleep(2)
                holder.stop()
                holder.stop("too late: the first reason stays")
                await holder.wait_status(HolderStatus.STOPPED)
                stopped = [e for e in drain(events) if e.kind is EventKind.STOPPED]
    assert stopped == [
        HolderEvent(time=2, session_id=session.session_id, kind=EventKind.STOPPED, detail="stopped")
    ]


async def test_a_session_no_longer_ours_stops_saying_so(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    sid = session.session_id
    fake_room.set_process_mode(ProcessMode.REFUSED)
    with trio.fail_after(60):
        holder, events, calls = await _run_holder(
            fake_room, session, still_ours=False, until=HolderStatus.STOPPED
        )
    assert calls == [f"ours? {sid}", f"forget {sid}"]
    assert [(e.kind, e.outcome, e.detail) for e in events] == [
        (EventKind.ATTEMPT, None, ""),
        (EventKind.CLOSED, Outcome.REFUSED, "HTTP 401"),
        (EventKind.STOPPED, None, "no longer ours"),
    ]
    assert {e.session_id for e in events} == {sid}
    assert holder.statistics().last_outcome is Outcome.REFUSED


async def test_wait_status_without_a_status_says_so(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    async with fake_room.client() as client, open_connection_manager(client) as manager:
        holder = manager.hold(session)
        with pytest.raises(ValueError, match=r"^wait_status needs at least one status$"):
            await holder.wait_status()
