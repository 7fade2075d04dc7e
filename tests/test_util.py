"""Notifier: a predicate wait that re-checks on each notify, parks in between, cancels cleanly."""

from __future__ import annotations

import trio
import trio.testing

from letagents_trio._util import Notifier


async def test_a_predicate_that_holds_returns_at_once_after_a_checkpoint() -> None:
    with trio.testing.assert_checkpoints():
        await Notifier().wait_until(lambda: True)


async def test_waiters_re_check_on_each_notify_and_park_in_between(
    autojump_clock: trio.testing.MockClock,
) -> None:
    changed = Notifier()
    state = {"n": 0}
    woke_at: list[float] = []

    async def waiter() -> None:
        await changed.wait_until(lambda: state["n"] >= 2)
        woke_at.append(trio.current_time())

    async with trio.open_nursery() as nursery:
        nursery.start_soon(waiter)
        for _ in range(2):
            await trio.sleep(1)
            await trio.testing.wait_all_tasks_blocked()
            assert changed.waiting == 1
            state["n"] += 1
            changed.notify()
    assert woke_at == [2]
    assert changed.waiting == 0


async def test_cancelled_waiters_leave_nothing_parked(
    autojump_clock: trio.testing.MockClock,
) -> None:
    changed = Notifier()
    with trio.move_on_after(5) as scope:
        await changed.wait_until(lambda: False)
    assert scope.cancelled_caught
    assert trio.current_time() == 5
    assert changed.waiting == 0
