"""The collector's pauses: off unless opted in, counted across the process, bounded.

What the pauses are for is measured in ``docs/performance.md``; here, that a
manager opened with the defaults never touches the collector, and, opted in
(``pause_collector=True``), that they begin and end exactly when they should
(virtual time), that an embedder which disabled the collector keeps it
disabled, and that holders opening in a burst pause it and holders opened let
it run.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing

from letagents_trio import (
    AgentSession,
    HolderStatus,
    HoldPolicy,
    ProcessConnector,
    SSEConnector,
    open_connection_manager,
)
from letagents_trio._collector import (
    MAX_OPENING_PAUSE,
    OPENING_BURST,
    CollectorPause,
    OpeningBurst,
)
from letagents_trio.testing import FakeRoom, ProcessMode

from .events import Delegating

if TYPE_CHECKING:
    from letagents_trio._exits import HandedExit


@pytest.fixture(autouse=True)
def collector_enabled() -> Iterator[None]:
    """Each test starts with the collector on, and leaves it on."""
    assert gc.isenabled()
    yield
    gc.enable()


def test_pauses_are_counted_and_the_last_to_end_lets_the_collector_run() -> None:
    first, second = CollectorPause(), CollectorPause()
    first.pause()
    first.pause()  # once per pause, however often asked
    second.pause()
    assert not gc.isenabled()
    first.resume()
    first.resume()
    assert not gc.isenabled()
    second.resume()
    assert gc.isenabled()
    second.resume()
    assert gc.isenabled()


def test_an_embedder_that_disabled_the_collector_keeps_it_disabled() -> None:
    gc.disable()
    pause = CollectorPause()
    pause.pause()
    assert not gc.isenabled()
    pause.resume()
    assert not gc.isenabled()


def test_a_pause_that_began_while_the_embedder_had_disabled_it_never_enables_it() -> None:
    gc.disable()
    pause = CollectorPause()
    pause.pause()
    gc.enable()  # the embedder's own choice, meanwhile
    gc.disable()
    pause.resume()
    assert not gc.isenabled()


def burst_of(opening: OpeningBurst, count: int) -> None:
    for _ in range(count):
        opening.started()


@pytest.fixture
def full_passes() -> Iterator[list[int]]:
    """The full collections that run meanwhile, as the collector reports them (2 each)."""
    passes: list[int] = []

    def callback(phase: str, info: dict[str, int]) -> None:
        if phase == "start" and info["generation"] == 2:
            passes.append(2)

    gc.callbacks.append(callback)
    yield passes
    gc.callbacks.remove(callback)


async def test_a_burst_of_attempts_pauses_the_collector_until_fewer_than_half_wait(  # noqa: ASYNC124 (the burst reads trio's clock)
    full_passes: list[int],
) -> None:
    opening = OpeningBurst(pause=True)
    assert repr(opening) == "<OpeningBurst waiting=0 paused=False>"
    burst_of(opening, OPENING_BURST - 1)
    assert gc.isenabled()
    opening.started()
    assert not gc.isenabled()
    full_passes.clear()  # the collector's own, before the pause
    assert repr(opening) == f"<OpeningBurst waiting={OPENING_BURST} paused=True>"
    for _ in range(OPENING_BURST - OPENING_BURST // 2):
        opening.settled()
    assert (opening.waiting, gc.isenabled()) == (OPENING_BURST // 2, False)
    assert full_passes == []
    opening.settled()
    assert gc.isenabled()
    assert repr(opening) == f"<OpeningBurst waiting={OPENING_BURST // 2 - 1} paused=False>"
    # What the burst made, collected in one full pass at once.
    assert full_passes == [2]
    # A new burst pauses it again at once: only the time bound holds it off.
    burst_of(opening, OPENING_BURST - opening.waiting)
    assert not gc.isenabled()
    opening.close()
    assert gc.isenabled()


async def test_an_opening_pause_lasts_at_most_its_bound_then_the_collector_runs_as_long(
    autojump_clock: trio.testing.MockClock, full_passes: list[int]
) -> None:
    opening = OpeningBurst(pause=True)
    burst_of(opening, OPENING_BURST)
    assert not gc.isenabled()
    full_passes.clear()
    await trio.sleep(MAX_OPENING_PAUSE - 0.001)
    opening.started()
    assert not gc.isenabled()
    await trio.sleep(0.001)
    opening.settled()  # the burst goes on, but the pause has lasted long enough
    resumed_at = trio.current_time()
    assert gc.isenabled()
    assert full_passes == []  # the burst is not over: the collector runs as it would
    await trio.sleep(MAX_OPENING_PAUSE - 0.001)
    opening.started()
    assert gc.isenabled()
    await trio.sleep_until(resumed_at + MAX_OPENING_PAUSE)
    opening.started()
    assert not gc.isenabled()
    opening.close()
    assert gc.isenabled()
    opening.started()
    assert gc.isenabled()  # closed: never again


async def test_holders_opening_in_a_burst_pause_the_collector_until_the_room_answers(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom
) -> None:
    """A process starting with thousands of sessions (or reconnecting them all
    after the room restarted) grows the objects alive from nothing; the
    collector would walk them again and again: 1.6-2.7 s of the 4 s it took
    the room to hold 10,000 streams."""
    sessions = [await fake_room.add_worker() for _ in range(OPENING_BURST)]
    fake_room.slow_headers = 3.0
    fake_room.set_process_mode(ProcessMode.SLOW)
    async with fake_room.client() as client:
        async with open_connection_manager(client, pause_collector=True) as manager:
            holders = [manager.hold(session) for session in sessions[:-1]]
            await trio.testing.wait_all_tasks_blocked()
            assert gc.isenabled()
            holders.append(manager.hold(sessions[-1]))
            assert not gc.isenabled()
            for holder in holders:
                await holder.wait_status(HolderStatus.OPEN)
            assert trio.current_time() == pytest.approx(3.0)
            assert gc.isenabled()
        assert [a.recorded for a in manager.exit_report or ()] == [True] * OPENING_BURST
    assert gc.isenabled()


async def test_attempts_the_room_never_answers_end_the_pause_with_their_answer_timeout(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom
) -> None:
    sessions = [await fake_room.add_worker() for _ in range(OPENING_BURST)]
    fake_room.slow_headers = 60.0
    fake_room.set_process_mode(ProcessMode.SLOW)
    async with fake_room.client() as client:
        async with open_connection_manager(client, pause_collector=True) as manager:
            holders = [manager.hold(session) for session in sessions]
            await trio.sleep(9.999)
            assert not gc.isenabled()
            for holder in holders:
                await holder.wait_status(HolderStatus.WAITING)
            assert trio.current_time() == pytest.approx(10.0)
            assert gc.isenabled()
    assert gc.isenabled()


async def test_holders_retrying_together_pause_it_again(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom
) -> None:
    """A room that never answers: every attempt ends at the answer timeout, and
    all of them wait for the room again together one backoff (1 s) later."""
    sessions = [await fake_room.add_worker() for _ in range(OPENING_BURST)]
    fake_room.slow_headers = 60.0
    fake_room.set_process_mode(ProcessMode.SLOW)
    async with fake_room.client() as client:
        policy = HoldPolicy(answer_timeout=4)
        async with open_connection_manager(client, policy=policy, pause_collector=True) as manager:
            holders = [manager.hold(session) for session in sessions]
            await trio.sleep(4.5)
            assert {h.status for h in holders} == {HolderStatus.WAITING}
            assert gc.isenabled()
            await trio.sleep(1)
            assert {h.status for h in holders} == {HolderStatus.CONNECTING}
            assert not gc.isenabled()
    assert gc.isenabled()


class Watching(Delegating):
    """Notes whether the collector runs as each exit is sent (after its holder stopped)."""

    def __init__(self, inner: ProcessConnector) -> None:
        super().__init__(inner)
        self.seen: list[bool] = []

    async def announce_exit(self, session: AgentSession, connection_id: str | None) -> bool:
        self.seen.append(gc.isenabled())
        return await super().announce_exit(session, connection_id)


async def test_a_goodbye_during_a_burst_keeps_the_collector_paused_until_it_ends(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Holders stopped while still waiting end the burst; the goodbye's own pause holds.

    The passes counted are the collector's own (``gc.collect``): once the
    goodbye's pause ends, the interpreter's own may run at any allocation.
    """
    full_passes: list[int] = []
    collect = gc.collect

    def counted(*args: int) -> int:
        full_passes.append(2)
        return collect(*args)

    monkeypatch.setattr(gc, "collect", counted)
    sessions = [await fake_room.add_worker() for _ in range(OPENING_BURST)]
    fake_room.slow_headers = 60.0
    fake_room.set_process_mode(ProcessMode.SLOW)
    async with fake_room.client() as client:
        connector = Watching(SSEConnector(client))
        async with open_connection_manager(
            client, connector=connector, pause_collector=True
        ) as manager:
            for session in sessions:
                manager.hold(session)
            assert not gc.isenabled()
            await trio.sleep(1)
    # Every holder stopped (each one fewer waiting) before its exit went out;
    # the burst's end ran no collection under the goodbye's pause.
    assert connector.seen == [False] * OPENING_BURST
    assert full_passes == []
    # Answered (nothing open to name, so nothing the room records): the goodbye ran whole.
    assert [a.error for a in manager.exit_report or ()] == [None] * OPENING_BURST
    assert gc.isenabled()


async def test_by_default_an_embedders_burst_and_goodbye_leave_the_collector_alone(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The collector is the whole process's: a library leaves it enabled unless told.

    An embedder holding a burst of sessions (more than ``OPENING_BURST`` waiting
    for the room at once) and leaving the block sees ``gc.isenabled()`` stay True
    at every step: while the attempts wait, as each exit goes, after the block.
    """
    sessions = [await fake_room.add_worker() for _ in range(OPENING_BURST + 4)]
    fake_room.slow_headers = 3.0
    fake_room.set_process_mode(ProcessMode.SLOW)
    seen: list[bool] = []
    async with fake_room.client() as client:
        connector = Watching(SSEConnector(client))
        # The open streams' exits are handed over by the client, not the connector.
        hand_exit = client.hand_exit

        def watched(session: AgentSession, connection_id: str, **options: Any) -> HandedExit:
            connector.seen.append(gc.isenabled())
            return hand_exit(session, connection_id, **options)

        monkeypatch.setattr(client, "hand_exit", watched)
        async with open_connection_manager(client, connector=connector) as manager:
            holders = [manager.hold(session) for session in sessions]
            await trio.testing.wait_all_tasks_blocked()
            seen.append(gc.isenabled())
            for holder in holders:
                await holder.wait_status(HolderStatus.OPEN)
            seen.append(gc.isenabled())
        seen.append(gc.isenabled())
    assert seen == [True, True, True]
    assert connector.seen == [True] * len(sessions)
    assert [a.recorded for a in manager.exit_report or ()] == [True] * len(sessions)
