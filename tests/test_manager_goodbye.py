"""The goodbye's promises, each asserted on its own, at exact virtual times.

``test_manager.py`` runs the goodbye through ``open_connection_manager``; the
tests here call :meth:`ConnectionManager.announce_exits` and
:func:`serve_connection_manager` directly, so a promise the block's own
shielded scope would keep for them (shielding, closing, the report's ids) is
seen to be kept by the method that makes it.
"""

from __future__ import annotations

import gc
import math
import re
import weakref
from collections import Counter
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, Any, cast, final

import pytest
import trio
import trio.testing

from letagents_trio import (
    AgentSession,
    ApiError,
    ConnectionManager,
    EventKind,
    ExitAnnouncement,
    HolderEvent,
    HolderStatus,
    HoldPolicy,
    ProcessConnector,
    ProcessHolder,
    ProcessStream,
    RoomClient,
    RoomUnreachable,
    SSEConnector,
    StreamNews,
    WebSocketConnector,
    _goodbye,
    open_connection_manager,
    serve_connection_manager,
)
from letagents_trio._goodbye import (
    EXIT_ALLOWANCE,
    HANDED_ALLOWANCE,
    UNWIND_ALLOWANCE,
    Allowance,
    Goodbye,
    _for_each,
    exits_deadline,
    measured_allowance,
)
from letagents_trio._http._pool import LANES
from letagents_trio.testing import FakeRoom, ProcessMode

from .events import Delegating, ScriptedStream, SlowToUnwind, drain
from .test_http_pool_handed import Spawned

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence

    from trio.testing import MockClock

    from letagents_trio.testing._socket_exits import SocketExitAnswers

EXIT_PATH = re.compile(r"/rooms/.+/agent-sessions/[^/]+/process/exit")
MANAGER_LOG = "letagents_trio.manager"


def report_of(manager: ConnectionManager) -> tuple[ExitAnnouncement, ...] | None:
    """The manager's exit report, read afresh (it changes)."""
    return manager.exit_report


async def open_holders(manager: ConnectionManager, sessions: list[AgentSession]) -> list[str]:
    """Hold every session until its stream is open and named; return the connection ids."""
    holders = [manager.hold(s) for s in sessions]
    for holder in holders:
        await holder.wait_status(HolderStatus.OPEN)
    await trio.testing.wait_all_tasks_blocked()  # the open events name them
    ids = [holder.connection_id for holder in holders]
    assert None not in ids
    return [i for i in ids if i is not None]


async def test_announce_exits_is_shielded_from_a_cancelled_caller(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    fake_room.exit_delay = 0.5
    async with fake_room.client() as client, open_connection_manager(client) as manager:
        [connection_id] = await open_holders(manager, [session])
        report: tuple[ExitAnnouncement, ...] | None = None
        with trio.CancelScope() as scope:
            scope.cancel()
            report = await manager.announce_exits()
            await trio.lowlevel.checkpoint()  # the caller's cancellation, delivered now
        assert scope.cancelled_caught
        assert trio.current_time() == 0.5
    assert report == (
        ExitAnnouncement(
            session_id=session.session_id,
            connection_id=connection_id,
            recorded=True,
            error=None,
            finished_at=0.5,
        ),
    )
    assert [(e.session_id, e.process_connection_id) for e in fake_room.exits] == [
        (session.session_id, connection_id)
    ]


async def test_the_manager_is_closing_during_the_goodbye_and_holds_nothing_after(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    sessions = [await fake_room.add_worker(display_name=f"W{i}") for i in range(2)]
    late = await fake_room.add_worker(display_name="Late")
    held = fake_room.on("POST", EXIT_PATH).hold(times=None)
    async with fake_room.client() as client, open_connection_manager(client) as manager:
        await open_holders(manager, sessions)
        assert not manager.statistics().closing
        assert report_of(manager) is None
        async with trio.open_nursery() as nursery:
            nursery.start_soon(manager.announce_exits)
            await held.wait_held(2)
            stats = manager.statistics()
            assert stats.closing
            assert stats.holders == 0
            assert dict(stats.by_status) == dict.fromkeys(HolderStatus, 0)
            assert dict(manager.holders) == {}
            assert manager.exit_report is not None
            assert "closing=True" in repr(manager)
            with pytest.raises(
                trio.ClosedResourceError, match=r"^the connection manager is shutting down$"
            ):
                manager.hold(late)
            await trio.sleep(1)
            held.release()
    assert trio.current_time() == 1
    stats = manager.statistics()
    assert (stats.closing, stats.holders) == (True, 0)
    assert dict(manager.holders) == {}
    assert manager.exit_report is not None
    assert [(a.recorded, a.error, a.finished_at) for a in manager.exit_report] == [
        (True, None, 1),
        (True, None, 1),
    ]
    assert late.session_id not in {e.session_id for e in fake_room.exits}


async def test_after_the_goodbye_its_holders_are_freed_without_the_collector(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    """Once the report is made, nothing the manager keeps refers to a holder.

    The report is plain data. A holder refers to its manager (the callbacks
    it was given), so a goodbye keeping the holders would make a reference
    cycle of the two, left for the collector's next full pass: at ten
    thousand sessions, 110,000 objects walked as the process exits
    (docs/performance.md).
    """
    session = await fake_room.add_worker()
    gc.collect()
    gc.disable()
    try:
        async with fake_room.client() as client, open_connection_manager(client) as manager:
            holder = manager.hold(session)
            await holder.wait_status(HolderStatus.OPEN)
            held = weakref.ref(holder)
            del holder
        assert manager.exit_report is not None
        assert [a.recorded for a in manager.exit_report] == [True]
        assert "sessions=1" in repr(manager._goodbye)
        assert held() is None
    finally:
        gc.enable()


async def test_by_status_counts_every_holder_in_each_status(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    sessions = [await fake_room.add_worker(display_name=f"W{i}") for i in range(3)]
    refused = await fake_room.add_worker(display_name="Refused")
    fake_room.set_process_mode(ProcessMode.REFUSED, refused.session_id)
    async with fake_room.client() as client, open_connection_manager(client) as manager:
        await open_holders(manager, sessions)
        await manager.hold(refused).wait_status(HolderStatus.WAITING)
        stats = manager.statistics()
        assert stats.holders == 4
        assert dict(stats.by_status) == {
            **dict.fromkeys(HolderStatus, 0),
            HolderStatus.OPEN: 3,
            HolderStatus.WAITING: 1,
        }
        assert stats.events_dropped == 0
        assert not stats.closing
        assert repr(manager) == "<ConnectionManager holders=4 closing=False>"


async def test_a_subscription_ends_with_its_block(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    async with fake_room.client() as client, open_connection_manager(client) as manager:
        with manager.subscribe(math.inf) as events:
            pass
        holder = manager.hold(session)
        await holder.wait_status(HolderStatus.OPEN)
        with pytest.raises(trio.EndOfChannel):
            await events.receive()
        # Nobody listens any more: nothing is counted as dropped.
        assert manager.statistics().events_dropped == 0


async def test_an_unreachable_room_at_exit_is_reported_as_unreachable(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    fake_room.on("POST", EXIT_PATH).drop_before_commit()
    async with fake_room.client() as client, open_connection_manager(client) as manager:
        [connection_id] = await open_holders(manager, [session])
        with manager.subscribe(math.inf) as events:
            await trio.sleep(2)
            report = await manager.announce_exits()
            exits = [e for e in drain(events) if e.kind is EventKind.EXIT]
    assert report == (
        ExitAnnouncement(
            session_id=session.session_id,
            connection_id=connection_id,
            recorded=None,
            error="unreachable",
            finished_at=2,
        ),
    )
    assert exits == [
        HolderEvent(
            time=2,
            session_id=session.session_id,
            kind=EventKind.EXIT,
            connection_id=connection_id,
            detail="unreachable",
        )
    ]


async def test_a_refused_exit_is_reported_with_its_status(
    autojump_clock: MockClock, fake_room: FakeRoom, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("DEBUG", logger="letagents_trio.manager")
    session = await fake_room.add_worker()
    fake_room.on("POST", EXIT_PATH).respond(503, {"error": "busy"})
    async with fake_room.client() as client, open_connection_manager(client) as manager:
        [connection_id] = await open_holders(manager, [session])
        report = await manager.announce_exits()
    assert [(a.connection_id, a.recorded, a.error) for a in report] == [
        (connection_id, None, "HTTP 503")
    ]
    logged = [(r.levelname, r.getMessage()) for r in caplog.records]
    assert ("DEBUG", f"exit of {session.session_id} not announced: HTTP 503") in logged
    assert ("WARNING", "announced 1 exits in 0 ms: 1 HTTP 503") in logged


async def test_failed_exits_make_one_warning_not_one_a_session(
    autojump_clock: MockClock, fake_room: FakeRoom, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 29: a room that forgot 50 sessions gave 50 warnings at shutdown
    (printed even with logging unconfigured); now one line says it all."""
    sessions = [await fake_room.add_worker(display_name=f"W{n}") for n in range(50)]
    fake_room.on("POST", EXIT_PATH).respond(404, {"error": "Room not found"}, times=50)
    async with fake_room.client() as client, open_connection_manager(client) as manager:
        await open_holders(manager, sessions)
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == ["announced 50 exits in 0 ms: 50 HTTP 404"]


async def test_deadline_entries_name_each_session_and_its_connection(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    opened = await fake_room.add_worker(display_name="Open")
    unknown = await fake_room.add_worker(display_name="Unknown")
    fake_room.set_process_mode(ProcessMode.UNKNOWN, unknown.session_id)
    fake_room.black_hole_exits = True
    async with fake_room.client() as client, open_connection_manager(client) as manager:
        [connection_id] = await open_holders(manager, [opened])
        await manager.hold(unknown).wait_status(HolderStatus.WAITING)
        await trio.sleep(3)
        with manager.subscribe(math.inf) as events:
            report = await manager.announce_exits()
            assert [e for e in drain(events) if e.kind is EventKind.EXIT] == []
    assert sorted(report, key=lambda a: a.session_id) == sorted(
        [
            ExitAnnouncement(
                session_id=opened.session_id,
                connection_id=connection_id,
                recorded=None,
                error="deadline",
                finished_at=4.5,
            ),
            ExitAnnouncement(
                session_id=unknown.session_id,
                connection_id=None,
                recorded=None,
                error="deadline",
                finished_at=4.5,
            ),
        ],
        key=lambda a: a.session_id,
    )


# --- the deadline keeps time for the unwinding ---------------------------------------------


@pytest.fixture
def allowed(monkeypatch: pytest.MonkeyPatch) -> HoldPolicy:
    """The default policy, with a sixty-fourth of a second kept per exit in flight or holder.

    Under MockClock no time is kept (its time stands still while exits
    unwind, so the measured allowance is nothing); on the system clock each
    exit in flight keeps :data:`~letagents_trio._goodbye.EXIT_ALLOWANCE`, each
    holder stopped late :data:`~letagents_trio._goodbye.UNWIND_ALLOWANCE`. A
    sixty-fourth of a second is exact in binary, so the times below are exact.
    """
    monkeypatch.setattr(
        _goodbye,
        "measured_allowance",
        lambda *_: Allowance(holder=1 / 64, exit=1 / 64, handed=1 / 64),
    )
    return HoldPolicy()


async def goodbye_at_ten(
    fake_room: FakeRoom,
    count: int,
    policy: HoldPolicy,
    opened: list[str] | None = None,
    *,
    websocket: bool = False,
) -> tuple[float, tuple[ExitAnnouncement, ...]]:
    """Hold ``count`` sessions, leave the manager at t=10; when the block ended, and the report.

    ``opened`` receives the connection ids the room named.
    """
    sessions = [await fake_room.add_worker(display_name=f"W{i}") for i in range(count)]
    async with fake_room.client() as client:
        connector = WebSocketConnector(client) if websocket else SSEConnector(client)
        async with open_connection_manager(client, policy=policy, connector=connector) as manager:
            connection_ids = await open_holders(manager, sessions)
            if opened is not None:
                opened.extend(connection_ids)
            await trio.sleep_until(10)
        ended = trio.current_time()
    report = manager.exit_report
    assert report is not None
    return ended, report


async def test_a_black_holed_goodbye_ends_early_by_what_its_exits_need_to_unwind(
    autojump_clock: MockClock, fake_room: FakeRoom, allowed: HoldPolicy
) -> None:
    fake_room.black_hole_exits = True
    ended, report = await goodbye_at_ten(fake_room, 32, allowed)
    # 32 exits handed to the room client, each allowed 1/64 s, and the
    # client's delivery of them (a task), 1/64 s: given up 33/64 s before
    # the deadline.
    assert ended == 10 + 1.5 - 33 / 64
    assert {(a.error, a.finished_at) for a in report} == {("deadline", 11.5 - 33 / 64)}
    assert len(fake_room.exits) == 32


class FakeHolder:
    """What the goodbye reads of a holder: its session, the connection it held, its status.

    Stopping it does nothing; the fakes below say how each leaves.
    """

    held_connection_id = "connection"
    status = HolderStatus.OPEN

    def __init__(self, session: AgentSession) -> None:
        self.session = session

    def stop(self, reason: str) -> None:
        pass


@final
class UnansweredSocket(FakeHolder):
    """A holder whose exit went over its socket, and whose room never answers it.

    Its first ``leave`` (the wait for the answer) ends only with the holder's stop
    (its socket closed), unanswered, or at ``closed_at`` when the room closes the
    socket unanswered; called again once stopped, it POSTs the exit, answered,
    black-holed, or failing with ``post_fails``. ``at_once``: whether its exit was
    written at once (else it goes by ``leave``, in a task).
    """

    def __init__(
        self,
        session: AgentSession,
        *,
        posts_answered: bool = True,
        at_once: bool = True,
        closed_at: float | None = None,
        post_fails: Exception | None = None,
    ) -> None:
        super().__init__(session)
        self._posts_answered = posts_answered
        self._at_once = at_once
        self._closed_at = closed_at
        self._post_fails = post_fails
        self._stopped = trio.Event()
        self.stopped_at: float | None = None
        self.stopped_for: str | None = None
        self.posted_at: float | None = None

    def leave_nowait(self) -> bool | None:
        return self._at_once  # written (its answer to come), or not yet

    def stop(self, reason: str) -> None:
        if self.stopped_at is None:
            self.stopped_at, self.stopped_for = trio.current_time(), reason
            self._stopped.set()

    async def leave(self) -> bool | None:
        if self.stopped_at is None:
            with trio.move_on_at(math.inf if self._closed_at is None else self._closed_at):
                await self._stopped.wait()
            return None
        await trio.lowlevel.checkpoint()
        # Its socket was closed first: its POSTed exit follows the close.
        self.posted_at = trio.current_time()
        if self._post_fails is not None:
            raise self._post_fails
        if not self._posts_answered:
            await trio.sleep_forever()
        await trio.lowlevel.checkpoint()
        return True


async def unanswered_goodbye(
    fake_room: FakeRoom, count: int, allowance: Allowance, **options: Any
) -> tuple[list[UnansweredSocket], tuple[ExitAnnouncement, ...]]:
    """``count`` exits sent over sockets at t=10 and never answered, the deadline at 11.5.

    ``options`` go to each :class:`UnansweredSocket`.
    """
    holders = [
        UnansweredSocket(await fake_room.add_worker(display_name=f"W{i}"), **options)
        for i in range(count)
    ]
    return holders, await goodbye_at_ten_of(holders, allowance)


async def goodbye_at_ten_of(
    holders: Sequence[FakeHolder], allowance: Allowance
) -> tuple[ExitAnnouncement, ...]:
    """The goodbye of ``holders`` from t=10, its deadline at 11.5; its report."""
    await trio.sleep_until(10)
    goodbye = Goodbye(
        cast("Sequence[ProcessHolder]", holders),
        deadline=11.5,
        concurrency=None,
        emit=lambda _: None,
        allowance=allowance,
    )
    await goodbye.run()
    return goodbye.report


async def test_the_wait_for_answers_ends_in_time_for_the_waiting_holders_to_unwind(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    """64 exits over sockets, none answered: at 1/64 s each the waiting holders
    need a second to unwind, so the wait ends and they are stopped at 10.5
    rather than at half the deadline (10.75); no POST could still unwind in
    time: each is cut at once, before it is sent, and each exit is reported
    sent, unconfirmed."""
    holders, report = await unanswered_goodbye(
        fake_room, 64, Allowance(holder=1 / 64, exit=1 / 64, handed=0)
    )
    assert trio.current_time() == 10.5
    assert {(h.stopped_at, h.stopped_for, h.posted_at) for h in holders} == {
        (10.5, "process exit", None)
    }
    assert {(a.connection_id, a.recorded, a.error, a.finished_at) for a in report} == {
        ("connection", None, None, 10.5)
    }


async def test_unanswered_exits_are_posted_once_their_answers_are_due(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    """32 exits unanswered at half the deadline (10.75): their holders are stopped
    then, keeping half a second (32/64) to unwind, and their POSTs an eighth more
    (32/256): each is POSTed, and answered."""
    holders, report = await unanswered_goodbye(
        fake_room, 32, Allowance(holder=1 / 64, exit=1 / 256, handed=0)
    )
    assert trio.current_time() == 10.75
    assert {(h.stopped_at, h.stopped_for, h.posted_at) for h in holders} == {
        (10.75, "process exit", 10.75)
    }
    assert {(a.recorded, a.error, a.finished_at) for a in report} == {(True, None, 10.75)}


async def test_a_post_after_an_unanswered_exit_is_cut_in_time_to_unwind(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    """The POSTs are black-holed too: cut at 11.5 - 32/64 - 32/256, where the
    holders stopped late and the POSTs still running unwind by the deadline.
    Each exit went over its socket first: reported sent, unconfirmed, not cut."""
    holders, report = await unanswered_goodbye(
        fake_room, 32, Allowance(holder=1 / 64, exit=1 / 256, handed=0), posts_answered=False
    )
    assert trio.current_time() == 10.875
    assert {h.posted_at for h in holders} == {10.75}
    assert {(a.recorded, a.error, a.finished_at) for a in report} == {(None, None, 10.875)}


async def test_only_the_posts_that_can_still_unwind_in_time_are_sent(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    """32 holders stopped late at 10.75 keep half a second: the exits' bound is then at 11.0,
    and each black-holed POST keeps 1/64 s more. A 16th POST would move it to 10.75,
    now: it could not unwind in time, so 15 are sent; every exit went over its socket
    and is reported sent, unconfirmed, when the bound cuts the POSTs (11.0 - 15/64)."""
    holders, report = await unanswered_goodbye(
        fake_room, 32, Allowance(holder=1 / 64, exit=1 / 64, handed=0), posts_answered=False
    )
    assert trio.current_time() == 11 - 15 / 64
    assert Counter(h.posted_at for h in holders) == {10.75: 15, None: 17}
    assert {(a.recorded, a.error) for a in report} == {(None, None)}


async def test_an_exit_the_room_closed_unanswered_is_posted_at_once(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    """The rooms closed the sockets at 10.25 without an answer: with nothing else to
    wait for, each exit is POSTed then, not at the answers' share of the time."""
    holders, report = await unanswered_goodbye(
        fake_room, 2, Allowance(holder=0, exit=0, handed=0), closed_at=10.25
    )
    assert trio.current_time() == 10.25
    assert {(h.stopped_at, h.posted_at) for h in holders} == {(10.25, 10.25)}
    assert {(a.recorded, a.error, a.finished_at) for a in report} == {(True, None, 10.25)}


@pytest.mark.parametrize(
    ("failure", "error"),
    [
        (RoomUnreachable("POST …/process/exit failed: ConnectError"), "unreachable"),
        (ApiError(503, "busy"), "HTTP 503"),
    ],
)
async def test_a_post_after_an_unanswered_exit_that_fails_is_reported(
    autojump_clock: MockClock, fake_room: FakeRoom, failure: Exception, error: str
) -> None:
    holders, report = await unanswered_goodbye(
        fake_room, 2, Allowance(holder=0, exit=0, handed=0), post_fails=failure
    )
    assert {h.posted_at for h in holders} == {10.75}
    assert {(a.recorded, a.error, a.finished_at) for a in report} == {(None, error, 10.75)}


async def test_an_exit_in_a_task_unanswered_when_due_is_posted_and_reported_sent_if_cut(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    """A socket that could not take its exit at once writes it in a task, whose answer
    never comes: stopped late at 10.75, the task POSTs the exit as well, black-holed;
    cut by the deadline, the exit is still reported sent over its socket."""
    holders, report = await unanswered_goodbye(
        fake_room, 2, Allowance(holder=0, exit=0, handed=0), at_once=False, posts_answered=False
    )
    assert trio.current_time() == 11.5
    assert {(h.stopped_at, h.posted_at) for h in holders} == {(10.75, 10.75)}
    assert {(a.recorded, a.error, a.finished_at) for a in report} == {(None, None, 11.5)}


@final
class AnsweredInTask(FakeHolder):
    """A holder whose exit goes by a task, answered at once; its status never changes."""

    def __init__(self, session: AgentSession) -> None:
        super().__init__(session)
        self.stops = 0

    def leave_nowait(self) -> bool | None:
        return False

    def stop(self, reason: str) -> None:
        self.stops += 1

    async def leave(self) -> bool | None:
        await trio.lowlevel.checkpoint()
        return True


async def test_a_holder_whose_task_ended_is_not_stopped_late_again(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    """Its exit's task ended at once (and stopped it): at the answers' share it is not
    among the holders stopped late, so the bound keeps no time for it (11.5 - 32/64 -
    32/256, as for the 32 sockets alone)."""
    answered = AnsweredInTask(await fake_room.add_worker(display_name="Answered"))
    sockets = [
        UnansweredSocket(await fake_room.add_worker(display_name=f"W{i}"), posts_answered=False)
        for i in range(32)
    ]
    report = await goodbye_at_ten_of(
        [answered, *sockets], Allowance(holder=1 / 64, exit=1 / 256, handed=0)
    )
    assert trio.current_time() == 10.875
    assert answered.stops == 1
    assert report[0] == ExitAnnouncement(
        session_id=answered.session.session_id,
        connection_id="connection",
        recorded=True,
        error=None,
        finished_at=10,
    )


@final
class BlackHoledExit(FakeHolder):
    """A holder whose exit needs a task (SSE: a POST), and whose room never answers it."""

    def leave_nowait(self) -> bool | None:
        return False  # its exit goes by leave(), in a task

    async def leave(self) -> bool | None:
        await trio.sleep_forever()


async def test_one_bound_keeps_time_for_every_task_it_would_cancel(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    """32 exits over sockets whose answers are awaited, and 32 exits in tasks that
    never end, at 1/64 s each: cut by the deadline, the 32 holders and the 32 tasks
    need a second to unwind, so the goodbye's one bound ends at 10.5, before the
    answers' share (10.75). A wait for the answers bounded apart from the exits
    (each bound keeping time for its own tasks only) would end at 10.75, and leave
    half a second of unwinding past the deadline."""
    sessions = [await fake_room.add_worker(display_name=f"W{i}") for i in range(64)]
    sockets = [UnansweredSocket(s) for s in sessions[:32]]
    tasks = [BlackHoledExit(s) for s in sessions[32:]]
    report = await goodbye_at_ten_of(
        [*sockets, *tasks], Allowance(holder=1 / 64, exit=1 / 64, handed=0)
    )
    assert trio.current_time() == 10.5
    assert {(h.stopped_at, h.stopped_for, h.posted_at) for h in sockets} == {
        (10.5, "process exit", None)
    }
    # The exits over sockets went (sent, unconfirmed); those in tasks were cut.
    assert Counter((a.recorded, a.error, a.finished_at) for a in report) == {
        (None, None, 10.5): 32,
        (None, "deadline", 10.5): 32,
    }


async def test_a_goodbye_with_nothing_held_says_so(
    autojump_clock: MockClock, fake_room: FakeRoom, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger=MANAGER_LOG)
    async with fake_room.client() as client, open_connection_manager(client) as manager:
        pass
    assert manager.exit_report == ()
    assert [r.getMessage() for r in caplog.records if r.name == MANAGER_LOG] == [
        "announced 0 exits in 0 ms: none held"
    ]


async def test_under_a_mock_clock_the_goodbye_ends_at_the_deadline_exactly(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    """Unwinding takes no MockClock time, so none is kept for it: timelines stay exact."""
    fake_room.black_hole_exits = True
    ended, report = await goodbye_at_ten(fake_room, 32, HoldPolicy())
    assert ended == 11.5
    assert {(a.error, a.finished_at) for a in report} == {("deadline", 11.5)}


async def test_each_answered_exit_gives_its_share_back(
    autojump_clock: MockClock,
    fake_room: FakeRoom,
    caplog: pytest.LogCaptureFixture,
    allowed: HoldPolicy,
) -> None:
    caplog.set_level("INFO", logger=MANAGER_LOG)
    # Half the exits are answered at once, the half after them never (an answer
    # waits for those before it on its connection, so the held come last).
    fake_room.on("POST", EXIT_PATH).rewrite(lambda answer: answer, times=16)
    fake_room.on("POST", EXIT_PATH).hold(times=16)
    ended, report = await goodbye_at_ten(fake_room, 32, allowed)
    # The 16 never answered, and the room client's delivery of them (a task).
    assert ended == 11.5 - 17 / 64
    assert Counter((a.recorded, a.error, a.finished_at) for a in report) == {
        (True, None, 10.0): 16,
        (None, "deadline", 11.5 - 17 / 64): 16,
    }
    # Said once, with how many the deadline cut.
    warning, summary = [r.getMessage() for r in caplog.records if r.name == MANAGER_LOG]
    assert warning == "exit deadline of 1.5 s passed before 16 of 32 exits were announced"
    head, kinds = summary.split(": ")
    assert head == "announced 32 exits in 1234 ms"
    assert sorted(kinds.split(", ")) == ["16 deadline", "16 recorded"]


async def test_answers_before_the_work_is_cancelled_are_all_recorded(
    autojump_clock: MockClock, fake_room: FakeRoom, allowed: HoldPolicy
) -> None:
    # Answered after 0.75 s; the work would be cancelled at 11.0 only.
    fake_room.exit_delay = 0.75
    ended, report = await goodbye_at_ten(fake_room, 32, allowed)
    assert ended == 10.75
    assert {(a.recorded, a.error) for a in report} == {(True, None)}


async def test_exits_waiting_their_turn_keep_time_for_their_unwinding_too(
    autojump_clock: MockClock, fake_room: FakeRoom, allowed: HoldPolicy
) -> None:
    # One goodbye at a time against a black hole: the first exit never comes
    # back, and 31 wait their turn.
    fake_room.black_hole_exits = True
    policy = HoldPolicy(exit_concurrency=1)
    ended, report = await goodbye_at_ten(fake_room, 32, policy)
    assert ended == 11.5 - 32 / 64
    assert len(fake_room.exits) == 1
    assert {a.error for a in report} == {"deadline"}


async def test_holders_keep_no_time_only_exits_do(
    autojump_clock: MockClock, fake_room: FakeRoom, allowed: HoldPolicy
) -> None:
    """Over a WebSocket an exit is a frame on its open socket, answered over it: nothing
    waits for a POST's answer, so no time is kept for one (the POSTs are black-holed)."""
    fake_room.black_hole_exits = True
    opened: list[str] = []
    ended, report = await goodbye_at_ten(fake_room, 32, allowed, opened, websocket=True)
    assert ended == 10
    assert {(a.recorded, a.error) for a in report} == {(True, None)}
    # Each names the connection its frame named.
    assert sorted(a.connection_id or "" for a in report) == sorted(opened)


class StepsOf(trio.abc.Instrument):
    """Calls ``note`` each time ``task`` stops running (at each of its checkpoints)."""

    def __init__(self, task: trio.lowlevel.Task, note: Callable[[], None]) -> None:
        self.task = task
        self.note = note

    def after_task_step(self, task: trio.lowlevel.Task) -> None:
        if task is self.task:
            self.note()


async def test_the_goodbyes_loops_let_the_program_run_after_every_256_sessions() -> None:
    done: list[int] = []
    yielded_after: list[int] = []
    steps = StepsOf(trio.lowlevel.current_task(), lambda: yielded_after.append(len(done)))
    trio.lowlevel.add_instrument(steps)
    try:
        await _for_each(range(767), done.append)
    finally:
        trio.lowlevel.remove_instrument(steps)
    assert done == list(range(767))
    assert yielded_after == [256, 512]


class LeftAtOnce(FakeHolder):
    """A holder whose exit is done at once."""

    def leave_nowait(self) -> bool | None:
        return None


async def run_goodbye_of(holders: Sequence[FakeHolder]) -> Goodbye:
    goodbye = Goodbye(
        cast("list[ProcessHolder]", list(holders)),
        deadline=trio.current_time() + 1.5,
        concurrency=None,
        emit=lambda _: None,
    )
    await goodbye.run()
    return goodbye


class LeavesInATask(FakeHolder):
    """A holder whose exit goes in a task (SSE's way); notes when each step of it happens."""

    def __init__(self, session: AgentSession, begun: list[str], ran: list[int]) -> None:
        super().__init__(session)
        self.begun = begun
        self.ran = ran

    def leave_nowait(self) -> bool | None:
        self.begun.append(self.session.session_id)
        return False

    async def leave(self) -> bool | None:
        # How many sessions had begun to leave when this exit's task first ran.
        self.ran.append(len(self.begun))
        await trio.lowlevel.checkpoint()
        return True


async def test_every_exits_task_starts_before_any_of_them_runs(
    autojump_clock: MockClock,
) -> None:
    """Started part way, the first exits' holders would unwind before the last exits start."""
    begun: list[str] = []
    ran: list[int] = []
    holders = [
        LeavesInATask(AgentSession(session_id=f"s{i}", session_token="t", room_id="r"), begun, ran)
        for i in range(600)
    ]
    goodbye = await run_goodbye_of(holders)
    assert ran == [600] * 600
    assert [a.recorded for a in goodbye.report] == [True] * 600
    assert trio.current_time() == 0


def test_the_allowance_is_kept_at_the_rate_the_clock_moved() -> None:
    """Real time kept on trio's clock: whole where it follows real time, none where it stands."""
    whole = Allowance(holder=UNWIND_ALLOWANCE, exit=EXIT_ALLOWANCE, handed=HANDED_ALLOWANCE)
    assert (UNWIND_ALLOWANCE, EXIT_ALLOWANCE, HANDED_ALLOWANCE) == (100e-6, 30e-6, 15e-6)
    assert measured_allowance(0.25, 0.25) == whole
    assert measured_allowance(0.0, 0.25) == Allowance(holder=0, exit=0, handed=0)
    assert measured_allowance(0.125, 0.25) == Allowance(holder=50e-6, exit=15e-6, handed=7.5e-6)
    assert measured_allowance(0.0, 0.0) == whole  # too short to tell: kept whole


async def test_on_the_system_clock_the_goodbye_keeps_the_whole_allowance() -> None:
    sessions = [
        AgentSession(session_id=f"s{i}", session_token="t", room_id="r") for i in range(300)
    ]
    goodbye = await run_goodbye_of([LeftAtOnce(s) for s in sessions])
    allowance = goodbye._allowance
    assert allowance is not None
    assert 0.5 * UNWIND_ALLOWANCE < allowance.holder <= UNWIND_ALLOWANCE * 1.001
    assert 0.5 * EXIT_ALLOWANCE < allowance.exit <= EXIT_ALLOWANCE * 1.001
    assert 0.5 * HANDED_ALLOWANCE < allowance.handed <= HANDED_ALLOWANCE * 1.001


async def test_under_a_mock_clock_the_goodbye_keeps_none(autojump_clock: MockClock) -> None:
    sessions = [
        AgentSession(session_id=f"s{i}", session_token="t", room_id="r") for i in range(300)
    ]
    goodbye = await run_goodbye_of([LeftAtOnce(s) for s in sessions])
    assert goodbye._allowance == Allowance(holder=0, exit=0, handed=0)


@final
class HungUpOn(FakeHolder):
    """A holder whose exit went at once, and whose room hung up without an answer:
    the POST that follows fails with ``failure``."""

    def __init__(self, session: AgentSession, failure: Exception) -> None:
        super().__init__(session)
        self.failure = failure

    def leave_nowait(self) -> bool | None:
        return True

    async def leave(self) -> bool | None:
        await trio.lowlevel.checkpoint()
        raise self.failure


@pytest.mark.parametrize(
    ("failure", "error"),
    [
        (RoomUnreachable("POST …/process/exit failed: ConnectError"), "unreachable"),
        (ApiError(503, "busy"), "HTTP 503"),
    ],
)
async def test_a_failure_while_the_answers_are_read_is_reported_not_raised(
    autojump_clock: MockClock, failure: Exception, error: str
) -> None:
    sessions = [AgentSession(session_id=f"s{i}", session_token="t", room_id="r") for i in range(2)]
    goodbye = Goodbye(
        cast("list[ProcessHolder]", [HungUpOn(s, failure) for s in sessions]),
        deadline=1.5,
        concurrency=None,
        emit=lambda _: None,
    )
    await goodbye.run()
    assert [(a.recorded, a.error, a.finished_at) for a in goodbye.report] == [(None, error, 0)] * 2


def test_the_exits_are_cut_early_by_the_allowance_of_each_task_they_would_cancel() -> None:
    """An exit waiting on a shared connection unwinds cheaper than a holder and its socket."""
    allowance = Allowance(holder=0.5, exit=0.125, handed=0.03125)
    assert exits_deadline(10.0, allowance, holders=0, exits=0) == 10.0
    assert exits_deadline(10.0, allowance, holders=0, exits=2) == 9.75
    assert exits_deadline(10.0, allowance, holders=1, exits=2) == 9.25
    assert exits_deadline(10.0, allowance, holders=3, exits=0) == 8.5
    # An exit handed to its carrier has no task to unwind: it is only given up.
    assert exits_deadline(10.0, allowance, holders=0, exits=1, handed=4) == 9.75


# --- serve_connection_manager passes each option on ------------------------------------


class RecordingConnector(Delegating):
    """SSE, with a log of what the manager asked of it."""

    def __init__(self, inner: ProcessConnector) -> None:
        super().__init__(inner)
        self.log: list[str] = []

    @asynccontextmanager
    async def open(self, session: AgentSession) -> AsyncIterator[ProcessStream]:
        self.log.append(f"open {session.session_id}")
        async with self.inner.open(session) as stream:
            yield stream

    async def announce_exit(self, session: AgentSession, connection_id: str | None) -> bool:
        self.log.append(f"exit {session.session_id}")
        return await super().announce_exit(session, connection_id)


class RecordingState:
    """State hooks that say every session is someone else's."""

    def __init__(self) -> None:
        self.log: list[str] = []

    async def mark_ended(self, session: AgentSession) -> None:
        await trio.lowlevel.checkpoint()
        self.log.append(f"ended {session.session_id}")

    async def is_still_ours(self, session: AgentSession) -> bool:
        await trio.lowlevel.checkpoint()
        self.log.append(f"ours? {session.session_id}")
        return False


async def test_serve_connection_manager_passes_each_option_on(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    sid = session.session_id
    fake_room.set_process_mode(ProcessMode.REFUSED)
    fake_room.black_hole_exits = True
    policy = HoldPolicy(exit_deadline=2.5)
    state = RecordingState()
    async with fake_room.client() as client:
        connector = RecordingConnector(SSEConnector(client))
        async with trio.open_nursery() as nursery:
            manager = await nursery.start(
                partial(
                    serve_connection_manager,
                    client,
                    policy=policy,
                    state=state,
                    connector=connector,
                    owner_mode=True,
                )
            )
            assert manager.policy is policy
            holder = manager.hold(session)
            # Refused, then asked: the state's hook says not ours, so it stops.
            await holder.wait_status(HolderStatus.STOPPED)
            assert state.log == [f"ours? {sid}"]
            fake_room.set_process_mode(ProcessMode.SERVED)
            await manager.hold(session).wait_status(HolderStatus.OPEN)
            await trio.sleep(1)
            nursery.cancel_scope.cancel()
        # The black-holed exit ends at this policy's deadline (less its unwinding).
        assert trio.current_time() == 1 + 2.5
    # The stream's own exit: POSTed through the client, not the connector.
    assert connector.log == [f"open {sid}", f"open {sid}"]
    assert [e.session_id for e in fake_room.exits] == [sid]


@pytest.mark.parametrize("pause_collector", [None, True])
async def test_serve_connection_manager_pauses_the_collector_only_when_asked(
    autojump_clock: MockClock, fake_room: FakeRoom, pause_collector: bool | None
) -> None:
    """None: the default, which pauses nothing."""
    session = await fake_room.add_worker()
    connector = SlowToUnwind()
    async with fake_room.client() as client, trio.open_nursery() as nursery:
        serve = partial(serve_connection_manager, client, connector=connector)
        if pause_collector is not None:
            serve = partial(serve, pause_collector=pause_collector)
        manager = await nursery.start(serve)
        await manager.hold(session).wait_status(HolderStatus.OPEN)
        nursery.cancel_scope.cancel()
    assert connector.collector_enabled_while_closing == [not pause_collector]
    assert gc.isenabled()


async def test_serve_connection_manager_passes_owner_mode_on(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    async with fake_room.client() as client, trio.open_nursery() as nursery:
        manager = await nursery.start(partial(serve_connection_manager, client, owner_mode=False))
        assert not manager.is_eligible(session)
        nursery.cancel_scope.cancel()
    fresh = await fake_room.add_worker(display_name="Fresh")
    async with fake_room.client() as client, trio.open_nursery() as nursery:
        manager = await nursery.start(serve_connection_manager, client)
        assert manager.is_eligible(fresh)
        assert manager.policy == HoldPolicy()
        nursery.cancel_scope.cancel()


# --- exceptions leaving the block --------------------------------------------------------


async def _fail_on(go: trio.Event, exc: Exception) -> None:
    await go.wait()
    raise exc


async def embedders_nursery_failing(client: RoomClient, *failures: Exception) -> None:
    """A block with a nursery of the embedder's whose tasks all fail at once.

    They wake together: each raises before a cancel can reach the others.
    """
    go = trio.Event()
    async with open_connection_manager(client), trio.open_nursery() as nursery:
        nursery.start_soon(trio.sleep_forever)
        for failure in failures:
            nursery.start_soon(_fail_on, go, failure)
        await trio.testing.wait_all_tasks_blocked()
        go.set()


async def test_the_one_failure_of_an_embedders_nursery_leaves_as_itself(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    """A nursery of the embedder's inside the block adds a group; one failure is unwrapped."""
    async with fake_room.client() as client:
        with pytest.raises(ValueError, match=r"^one$"):
            await embedders_nursery_failing(client, ValueError("one"))


class _BuggyStream(ScriptedStream):
    def leave_nowait(self, connection_id: str) -> bool:
        raise RuntimeError("a bug in leave_nowait")


class LeavesWithABug:
    """A connector whose streams have a bug where the goodbye begins."""

    @asynccontextmanager
    async def open(self, session: AgentSession) -> AsyncIterator[ProcessStream]:
        await trio.lowlevel.checkpoint()
        yield _BuggyStream(StreamNews(connection_id="conn-1"))

    async def announce_exit(self, session: AgentSession, connection_id: str | None) -> bool:
        raise AssertionError("the goodbye failed before any exit")


async def hold_one_then_leave(
    client: RoomClient,
    connector: ProcessConnector,
    session: AgentSession,
    holders: list[ProcessHolder],
) -> None:
    """Hold ``session`` until its stream is open, then leave the manager's block."""
    async with open_connection_manager(client, connector=connector) as manager:
        holders.append(manager.hold(session))
        await holders[0].wait_status(HolderStatus.OPEN)


async def test_a_goodbye_that_fails_still_stops_every_holder_and_leaves_with_the_error(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    """The holders' nursery is shielded: only the manager ends it, however the goodbye went."""
    session = await fake_room.add_worker()
    async with fake_room.client() as client:
        holders: list[ProcessHolder] = []
        with (
            trio.fail_after(60),
            pytest.raises(RuntimeError, match=r"^a bug in leave_nowait$"),
        ):
            await hold_one_then_leave(client, LeavesWithABug(), session, holders)
    assert [holder.status for holder in holders] == [HolderStatus.STOPPED]


async def test_several_failures_leave_as_a_group_holding_each(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    async with fake_room.client() as client:
        with pytest.RaisesGroup(
            pytest.RaisesGroup(
                pytest.RaisesExc(ValueError, match=r"^one$"),
                pytest.RaisesExc(KeyError),
            )
        ):
            await embedders_nursery_failing(client, ValueError("one"), KeyError("two"))


# --- a session the room ends just as the goodbye begins ----------------------------------


class EndingNews(ScriptedStream):
    """A stream that names the connection, then says ``ended`` once ``end`` is set."""

    def __init__(
        self, end: trio.Event, post: Callable[[str | None], Awaitable[bool]] | None = None
    ) -> None:
        super().__init__(StreamNews(connection_id="conn-1"), post=post)
        self._end = end

    async def __anext__(self) -> StreamNews:
        if self._news:
            return await super().__anext__()
        await self._end.wait()
        return StreamNews(ended=True)


class EndingConnector:
    """A stream that names its connection, then says ``ended`` when told to."""

    def __init__(self) -> None:
        self.end = trio.Event()
        self.goodbyes: list[str | None] = []

    @asynccontextmanager
    async def open(self, session: AgentSession) -> AsyncIterator[ProcessStream]:
        await trio.lowlevel.checkpoint()
        yield EndingNews(self.end, partial(self.announce_exit, session))

    async def announce_exit(self, session: AgentSession, connection_id: str | None) -> bool:
        await trio.lowlevel.checkpoint()
        self.goodbyes.append(connection_id)
        return True


async def test_a_session_ended_as_the_goodbye_begins_still_says_goodbye_at_once(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    """The room ends the session just as the goodbye begins: whichever the holder
    sees first, the exit goes out at once (not at the deadline), naming the
    connection held when the goodbye began."""
    session = await fake_room.add_worker()
    connector = EndingConnector()
    async with (
        fake_room.client() as client,
        open_connection_manager(client, connector=connector) as manager,
    ):
        holder = manager.hold(session)
        await holder.wait_status(HolderStatus.OPEN)
        await trio.testing.wait_all_tasks_blocked()
        connector.end.set()  # the holder has its news, and runs after the goodbye began
        report = await manager.announce_exits()
        assert trio.current_time() == 0
        await holder.wait_status(HolderStatus.ENDED, HolderStatus.STOPPED)
    assert [(a.connection_id, a.recorded, a.error, a.finished_at) for a in report] == [
        ("conn-1", True, None, 0)
    ]
    assert connector.goodbyes == ["conn-1"]


class EndsOnItsExit(EndingNews):
    """A stream whose room answers exits: it records the exit, then ends the session."""

    def __init__(self) -> None:
        super().__init__(trio.Event())

    async def leave(self, connection_id: str) -> bool | None:
        self._end.set()
        await trio.lowlevel.checkpoint()
        return True


class EndsOnItsExitConnector(EndingConnector):
    @asynccontextmanager
    async def open(self, session: AgentSession) -> AsyncIterator[ProcessStream]:
        await trio.lowlevel.checkpoint()
        yield EndsOnItsExit()


async def goodbye_of_one(
    fake_room: FakeRoom, connector: ProcessConnector, policy: HoldPolicy
) -> tuple[ProcessHolder, tuple[ExitAnnouncement, ...], float]:
    """Hold one session until its stream is open and idle, then say goodbye.

    Returns the holder, the report, and when the goodbye ended.
    """
    session = await fake_room.add_worker()
    async with (
        fake_room.client() as client,
        open_connection_manager(client, connector=connector, policy=policy) as manager,
    ):
        holder = manager.hold(session)
        await holder.wait_status(HolderStatus.OPEN)
        await trio.testing.wait_all_tasks_blocked()
        report = await manager.announce_exits()
        return holder, report, trio.current_time()


@pytest.mark.parametrize("exit_concurrency", [None, 1])
async def test_a_session_the_room_ends_in_answer_to_its_exit_leaves_with_the_answer_at_once(
    autojump_clock: MockClock, fake_room: FakeRoom, exit_concurrency: int | None
) -> None:
    """The holder ends rather than stops: its answer is in, so no wait until the answer time."""
    connector = EndsOnItsExitConnector()
    policy = HoldPolicy(exit_concurrency=exit_concurrency)
    holder, report, ended_at = await goodbye_of_one(fake_room, connector, policy)
    assert (ended_at, holder.status) == (0, HolderStatus.ENDED)
    assert [(a.connection_id, a.recorded, a.error, a.finished_at) for a in report] == [
        ("conn-1", True, None, 0)
    ]
    assert connector.goodbyes == []  # answered over the stream: nothing POSTed


async def test_a_holder_replaced_by_a_new_token_stops_saying_so(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    rotated = AgentSession(
        session_id=session.session_id, session_token="another-token", room_id=session.room_id
    )
    async with fake_room.client() as client, open_connection_manager(client) as manager:
        with manager.subscribe(math.inf) as events:
            first = manager.hold(session)
            await first.wait_status(HolderStatus.OPEN)
            manager.hold(rotated)
            await first.wait_status(HolderStatus.STOPPED)
            stopped = [e for e in drain(events) if e.kind is EventKind.STOPPED]
    assert stopped == [
        HolderEvent(
            time=0,
            session_id=session.session_id,
            kind=EventKind.STOPPED,
            detail="replaced by a new token",
        )
    ]


@pytest.mark.parametrize(
    ("answers", "recorded", "detail"),
    [("answered", True, "recorded"), ("not offered", None, "sent over the socket")],
)
async def test_a_websocket_goodbye_stops_its_holder_for_the_process_exit(
    autojump_clock: MockClock,
    fake_room: FakeRoom,
    answers: SocketExitAnswers,
    recorded: bool | None,
    detail: str,
) -> None:
    """The exit goes over the socket (confirmed by a room that answers it): the
    holder stops for the process exit, and says why."""
    fake_room.socket_exit_answers = answers
    session = await fake_room.add_worker()
    async with (
        fake_room.client() as client,
        open_connection_manager(client, connector=WebSocketConnector(client)) as manager,
    ):
        with manager.subscribe(math.inf) as events:
            [connection_id] = await open_holders(manager, [session])
            holder = manager.holders[session.session_id]
            await trio.sleep(1)
            report = await manager.announce_exits()
            await holder.wait_status(HolderStatus.STOPPED)
            ends = {
                (e.time, e.kind, e.connection_id, e.detail)
                for e in drain(events)
                if e.kind in (EventKind.EXIT, EventKind.STOPPED)
            }
    assert [(a.connection_id, a.recorded, a.error) for a in report] == [
        (connection_id, recorded, None)
    ]
    assert ends == {
        (1, EventKind.EXIT, connection_id, detail),
        (1, EventKind.STOPPED, None, "process exit"),
    }


async def test_one_goodbye_at_a_time_still_names_each_connection(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    """``exit_concurrency=1``, the smallest cap: one round trip after another."""
    sessions = [await fake_room.add_worker(display_name=f"W{i}") for i in range(3)]
    fake_room.exit_delay = 0.25
    policy = HoldPolicy(exit_concurrency=1)
    async with (
        fake_room.client() as client,
        open_connection_manager(client, policy=policy) as manager,
    ):
        ids = await open_holders(manager, sessions)
        report = await manager.announce_exits()
        assert trio.current_time() == 0.75
    named = dict(zip([s.session_id for s in sessions], ids, strict=True))
    assert {e.session_id: e.process_connection_id for e in fake_room.exits} == named
    assert sorted(e.time for e in fake_room.exits) == [0, 0.25, 0.5]
    assert {(a.session_id, a.connection_id, a.recorded) for a in report} == {
        (sid, cid, True) for sid, cid in named.items()
    }


async def test_a_session_without_a_stream_is_stopped_for_the_process_exit_then_announced(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    """No stream to close and no connection to name: the holder is stopped first, then
    the exit goes out naming none."""
    session = await fake_room.add_worker()
    fake_room.set_process_mode(ProcessMode.UNKNOWN)
    async with fake_room.client() as client, open_connection_manager(client) as manager:
        with manager.subscribe(math.inf) as events:
            holder = manager.hold(session)
            await holder.wait_status(HolderStatus.WAITING)
            await trio.sleep(2)
            report = await manager.announce_exits()
            ends = [
                (e.time, e.kind, e.connection_id, e.detail)
                for e in drain(events)
                if e.kind in (EventKind.STOPPED, EventKind.EXIT)
            ]
    assert holder.status is HolderStatus.STOPPED
    assert ends == [
        (2, EventKind.STOPPED, None, "process exit"),
        (2, EventKind.EXIT, None, "not recorded"),
    ]
    assert [(a.connection_id, a.recorded, a.error) for a in report] == [(None, False, None)]


class _LeavesAtOnce:
    """Every exit goes at once (as over open sockets); notes what the holders were doing."""

    def __init__(self) -> None:
        self.holders: list[ProcessHolder] = []
        self.statuses_seen: set[HolderStatus] = set()
        self.left: list[str | None] = []

    @asynccontextmanager
    async def open(self, session: AgentSession) -> AsyncIterator[ProcessStream]:
        await trio.lowlevel.checkpoint()
        yield _AtOnce(self, f"conn-{session.session_id}")

    async def announce_exit(self, session: AgentSession, connection_id: str | None) -> bool:
        raise AssertionError("every exit went at once")


class _AtOnce(ScriptedStream):
    def __init__(self, connector: _LeavesAtOnce, connection_id: str) -> None:
        super().__init__(StreamNews(connection_id=connection_id))
        self._connector = connector

    def leave_nowait(self, connection_id: str) -> bool | None:
        self._connector.statuses_seen.update(holder.status for holder in self._connector.holders)
        self._connector.left.append(connection_id)
        return None

    async def leave(self, connection_id: str) -> bool | None:
        raise AssertionError("every exit went at once")


async def test_every_exit_sent_at_once_goes_before_any_holder_is_stopped(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    """Unwinding thousands of holders takes longer than writing their exits: the
    exits go first, although the loop checkpoints between batches of sessions."""
    sessions = [
        AgentSession(session_id=f"s{i}", session_token="t", room_id="r", session_kind="worker")
        for i in range(600)
    ]
    connector = _LeavesAtOnce()
    async with fake_room.client() as client:
        async with open_connection_manager(client, connector=connector) as manager:
            with manager.subscribe(math.inf) as events:
                connector.holders = [manager.hold(session) for session in sessions]
                await trio.testing.wait_all_tasks_blocked()
                assert {h.status for h in connector.holders} == {HolderStatus.OPEN}
                report = await manager.announce_exits()
                await trio.testing.wait_all_tasks_blocked()
                assert trio.current_time() == 0
                stopped = [e.detail for e in drain(events) if e.kind is EventKind.STOPPED]
    assert connector.statuses_seen == {HolderStatus.OPEN}
    assert connector.left == [f"conn-{s.session_id}" for s in sessions]
    assert [(a.connection_id, a.recorded, a.error) for a in report] == [
        (f"conn-{s.session_id}", None, None) for s in sessions
    ]
    assert {h.status for h in connector.holders} == {HolderStatus.STOPPED}
    assert stopped == ["process exit"] * 600


class _Unanswered(ScriptedStream):
    """An exit over the stream to a room that answers exits, which never answers this one:
    waited for until the stream closes (the holder stopped), then POSTed."""

    async def leave(self, connection_id: str) -> bool | None:
        await self.closed.wait()
        return await super().leave(connection_id)


class _PostsWhatWasNotAnswered(EndingConnector):
    @asynccontextmanager
    async def open(self, session: AgentSession) -> AsyncIterator[ProcessStream]:
        await trio.lowlevel.checkpoint()
        stream = _Unanswered(
            StreamNews(connection_id="conn-1"), post=partial(self.announce_exit, session)
        )
        try:
            yield stream
        finally:
            stream.closed.set()


async def test_an_exit_written_at_once_and_not_answered_by_the_answer_time_is_posted(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    """Half the deadline waits for the room's answer; then the exit is POSTed, naming its
    connection, in the half left."""
    connector = _PostsWhatWasNotAnswered()
    _, report, ended_at = await goodbye_of_one(fake_room, connector, HoldPolicy(exit_deadline=4))
    assert ended_at == 2
    assert connector.goodbyes == ["conn-1"]
    assert [(a.connection_id, a.recorded, a.error, a.finished_at) for a in report] == [
        ("conn-1", True, None, 2)
    ]


async def test_an_sse_goodbye_hands_its_exits_over_with_no_task_each(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    """300 SSE sessions: their exits go to the room client's pipelined connections,
    carried by one task per connection and the client's one delivery, not a task per
    exit; every one is recorded, and reported so."""
    sessions = [await fake_room.add_worker(display_name=f"W{i}") for i in range(300)]
    spawned = Spawned()
    async with fake_room.client() as client:
        async with open_connection_manager(client) as manager:
            await open_holders(manager, sessions)
            trio.lowlevel.add_instrument(spawned)
        trio.lowlevel.remove_instrument(spawned)
    names = Counter(spawned.names)
    assert (names["_leave"], names["_deliver"]) == (0, 1)
    assert 1 <= names["_await"] <= LANES
    assert len(fake_room.exits) == 300
    report = manager.exit_report
    assert report is not None
    assert {(a.recorded, a.error) for a in report} == {(True, None)}
    assert trio.current_time() == 0


async def test_with_exits_in_turns_an_sse_exit_is_not_handed_over(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    """``exit_concurrency`` counts the exits' tasks: each SSE exit then goes in its own,
    in turn, as before (the POST made by its stream's leave)."""
    sessions = [await fake_room.add_worker(display_name=f"W{i}") for i in range(4)]
    spawned = Spawned()
    async with fake_room.client() as client:
        policy = HoldPolicy(exit_concurrency=2)
        async with open_connection_manager(client, policy=policy) as manager:
            await open_holders(manager, sessions)
            trio.lowlevel.add_instrument(spawned)
        trio.lowlevel.remove_instrument(spawned)
    names = Counter(spawned.names)
    assert (names["_leave"], names["_deliver"]) == (4, 0)
    assert len(fake_room.exits) == 4
