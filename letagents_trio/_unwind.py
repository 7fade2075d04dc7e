"""The goodbye's own deadline: the exit deadline, less what its exits need to unwind.

When the exit deadline passes, every exit still waiting for the room's answer
is cancelled, and each must unwind before the manager's block is left: its
task is woken with ``Cancelled``, its frames run their ``finally`` blocks, its
socket is closed (a system call that, on loopback, also runs the room's side
of the close), and it ends. That is not free, and against a black-holed room
thousands are in flight at the deadline: cancelled there, their unwinding
would keep the process past it.

So the exits are cancelled early by what their unwinding will cost:
``deadline - allowance * (exits running)``. Each exit that gets its answer
gives its share back (the cancellation moves later); each one started takes
one (earlier). An exit in flight has reached the room, which records it on
receipt: cancelling it a little early loses its answer, not the exit.

Holders are counted only once their exit is sent and they wait for the
room's answer to it (a WebSocket to a room that acknowledges exits): the wait
ends by :meth:`UnwindBudget.unwind_by` for as many as wait, and those still
waiting then are stopped and kept time for (:meth:`UnwindBudget.reserve`).
Holders stopped before that are not counted: cutting the goodbye short for
them would leave exits unsent, which is worse than a late end.
:data:`UNWIND_ALLOWANCE` is what one exit's unwinding costs
(``docs/performance.md`` has the measurement).
"""

from __future__ import annotations

import sys
from typing import Final, final

import trio

__all__ = ["UNWIND_ALLOWANCE", "UnwindBudget", "unwind_allowance"]

# What one exit still in flight at the deadline costs to unwind: its task
# woken with Cancelled, its frames' finally blocks run, its socket closed.
UNWIND_ALLOWANCE: Final = 100e-6


def unwind_allowance() -> float:
    """The seconds of trio time kept for each exit in flight, on this run's clock.

    :data:`UNWIND_ALLOWANCE` on a clock that follows real time; 0 under
    ``trio.testing.MockClock``, whose time does not pass while tasks unwind,
    so that a test sees the goodbye end at the deadline exactly.
    """
    # Looked up, never imported: trio.testing imports pytest, which a program
    # holding sessions should not load. A run on a MockClock has imported it.
    testing = sys.modules.get("trio.testing")
    clock = trio.lowlevel.current_clock()
    if testing is not None and isinstance(clock, testing.MockClock):
        return 0.0
    return UNWIND_ALLOWANCE


@final
class UnwindBudget:
    """The cancel scope of the goodbye's exits, whose deadline keeps time for their unwinding.

    Args:
        deadline: when the exits, their unwinding included, must be done (trio's clock).
        allowance: seconds kept for each exit still running
            (:func:`unwind_allowance` unless told); 0 cancels them at
            ``deadline`` exactly.
    """

    def __init__(self, deadline: float, allowance: float | None = None) -> None:
        self._deadline = deadline
        self._allowance = unwind_allowance() if allowance is None else allowance
        self._running = 0
        # Time kept for tasks that are not exits: holders stopped late.
        self._reserved = 0
        self.scope = trio.CancelScope(deadline=deadline)

    def __repr__(self) -> str:
        return f"<UnwindBudget running={self._running} exits_deadline={self.scope.deadline!r}>"

    @property
    def running(self) -> int:
        """Exits that would have to unwind if they were cancelled now."""
        return self._running

    def unwind_by(self, count: int) -> float:
        """The latest moment (trio time) from which ``count`` tasks still unwind by the deadline."""
        return self._deadline - self._allowance * count

    def reserve(self, count: int) -> None:
        """Keep time for ``count`` tasks that are not exits to unwind (holders stopped late)."""
        self._reserved += count
        self._update()

    def has_time(self) -> bool:
        """Whether an exit started now could still unwind by the deadline, with all kept so far."""
        return self.unwind_by(self._running + self._reserved + 1) > trio.current_time()

    def exit_started(self) -> None:
        """A task announcing one exit was started."""
        self._running += 1
        self._update()

    def exit_ended(self) -> None:
        """A task announcing one exit has its answer (or its error)."""
        self._running -= 1
        self._update()

    def _update(self) -> None:
        self.scope.deadline = self.unwind_by(self._running + self._reserved)
