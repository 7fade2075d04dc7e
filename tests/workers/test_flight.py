"""SingleFlight: one call per key; joiners share the leader's value or error."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from letagents_trio.workers._flight import SingleFlight


async def test_joiners_share_the_leaders_value(autojump_clock: trio.testing.MockClock) -> None:
    flight: SingleFlight[str, int] = SingleFlight()
    calls = 0
    results: list[tuple[int, bool]] = []

    async def slow() -> int:
        nonlocal calls
        calls += 1
        await trio.sleep(1)
        return 7

    async def caller() -> None:
        results.append(await flight.run("k", slow))

    async with trio.open_nursery() as nursery:
        for _ in range(3):
            nursery.start_soon(caller)
        await trio.testing.wait_all_tasks_blocked()
        assert len(flight) == 1
    assert calls == 1
    assert sorted(results) == [(7, False), (7, False), (7, True)]
    assert trio.current_time() == 1
    assert len(flight) == 0


async def test_the_leaders_error_reaches_every_joiner(
    autojump_clock: trio.testing.MockClock,
) -> None:
    flight: SingleFlight[str, int] = SingleFlight()
    errors: list[str] = []

    async def failing() -> int:
        await trio.sleep(1)
        raise ValueError("refused")

    async def caller() -> None:
        with pytest.raises(ValueError, match="refused") as caught:
            await flight.run("k", failing)
        errors.append(str(caught.value))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(caller)
        nursery.start_soon(caller)
    assert errors == ["refused", "refused"]


async def test_a_cancelled_leader_lets_a_joiner_run_its_own_call(
    autojump_clock: trio.testing.MockClock,
) -> None:
    flight: SingleFlight[str, float] = SingleFlight()
    leader_scope = trio.CancelScope()
    joined: list[tuple[float, bool]] = []

    async def slow() -> float:
        started = trio.current_time()
        await trio.sleep(5)
        return started

    async def leader() -> None:
        with leader_scope:
            await flight.run("k", slow)

    async def joiner() -> None:
        joined.append(await flight.run("k", slow))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(leader)
        await trio.testing.wait_all_tasks_blocked()
        nursery.start_soon(joiner)
        await trio.sleep(2)
        leader_scope.cancel()
    # The joiner led a call of its own, started when the first was cancelled.
    assert joined == [(2, True)]
    assert trio.current_time() == 7
