"""A connection's keep-alive timer: hypercorn's contract, one task, a sliding deadline.

MockClock, no sockets: ``close`` records the trio time it was called at, and
the timer's task runs in the test's nursery (as in hypercorn's task group).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs
import trio
import trio.testing

from letagents_trio.room_server._idle import IdleTimer

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

KEEP_ALIVE = 5.0


@attrs.define
class _Group:
    """Hypercorn's TaskGroup as the timer sees it: ``spawn`` starts a task."""

    nursery: trio.Nursery

    def spawn(self, func: Callable[..., Awaitable[object]], *args: object) -> None:
        self.nursery.start_soon(func, *args)


@attrs.define
class _Terminated:
    event: trio.Event = attrs.field(factory=trio.Event)

    def is_set(self) -> bool:
        return self.event.is_set()

    async def wait(self) -> None:
        await self.event.wait()


@attrs.define
class _Rig:
    timer: IdleTimer
    group: _Group
    terminated: _Terminated
    closed_at: list[float]

    async def idle(self) -> None:
        await self.timer.restart(self.group, _unused)

    async def busy(self) -> None:
        await self.timer.stop()


async def _unused() -> None:
    await trio.lowlevel.checkpoint()
    raise AssertionError("the action is hypercorn's; the timer closes by itself")


def _rig(nursery: trio.Nursery) -> _Rig:
    closed_at: list[float] = []
    terminated = _Terminated()

    async def close() -> None:
        closed_at.append(trio.current_time())
        await trio.lowlevel.checkpoint()

    timer = IdleTimer(KEEP_ALIVE, terminated, close)
    return _Rig(timer, _Group(nursery), terminated, closed_at)


async def test_an_idle_connection_closes_after_the_keep_alive_timeout(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    rig = _rig(nursery)
    await rig.idle()
    await trio.sleep(60)
    assert rig.closed_at == [KEEP_ALIVE]


async def test_each_request_moves_the_deadline_and_one_task_serves_them_all(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    """A busy connection is never closed; idle again, it has the whole timeout again."""
    rig = _rig(nursery)
    await rig.idle()
    for _ in range(100):  # a hundred requests, each 3 s after the last fell idle
        await trio.sleep(3)
        await rig.busy()
        await trio.sleep(30)  # busy for long: kept
        await rig.idle()
    assert len(nursery.child_tasks) == 1  # hypercorn's timer: a new task each time
    assert rig.closed_at == []
    await trio.sleep(60)
    assert rig.closed_at == [100 * 33 + KEEP_ALIVE]


async def test_the_server_stopping_closes_an_idle_connection_at_once(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    rig = _rig(nursery)
    await rig.idle()
    await trio.sleep(1)
    rig.terminated.event.set()
    await trio.testing.wait_all_tasks_blocked()
    assert rig.closed_at == [1]


async def test_the_server_stopping_closes_a_busy_connection_once_it_is_answered(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    rig = _rig(nursery)
    await rig.idle()
    await rig.busy()
    rig.terminated.event.set()
    await trio.sleep(2)
    assert rig.closed_at == []  # the request still runs
    await rig.idle()
    await trio.testing.wait_all_tasks_blocked()
    assert rig.closed_at == [2]


async def test_ending_the_timer_closes_nothing_and_ends_its_task(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    rig = _rig(nursery)
    await rig.idle()
    rig.timer.end()
    await trio.testing.wait_all_tasks_blocked()
    assert nursery.child_tasks == frozenset()
    await trio.sleep(60)
    assert rig.closed_at == []
