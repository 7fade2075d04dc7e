"""The goodbye's own deadline: the exit deadline, less what its tasks need to unwind.

When the exit deadline passes, every exit still waiting for the room's answer
is cancelled, and each must unwind before the manager's block is left: its
task is woken with ``Cancelled``, its frames run their ``finally`` blocks,
and it ends. That is not free, and against a black-holed room thousands are
in flight at the deadline: cancelled there, their unwinding would keep the
process past it.

So the exits are cancelled early by what their unwinding will cost:
``deadline - exit allowance * (exits running)``. Each exit that gets its
answer gives its share back (the cancellation moves later); each one started
takes one (earlier). An exit in flight has reached the room, or is written
behind others that have (:mod:`letagents_trio._http._pool`), which records
it on receipt: cancelling it a little early loses its answer, not the exit.

Holders are counted only once their exit is sent and they wait for the
room's answer to it (a WebSocket to a room that acknowledges exits): the wait
ends by :meth:`UnwindBudget.unwind_by` for as many as wait, and those still
waiting then are stopped and kept time for (:meth:`UnwindBudget.reserve`).
Holders stopped before that are not counted: cutting the goodbye short for
them would leave exits unsent, which is worse than a late end.

Two allowances, one for each kind of task (``docs/performance.md`` has the
measurements): :data:`UNWIND_ALLOWANCE` for a holder stopped late (its task,
and its socket closed, a system call that on loopback also runs the room's
side of the close); :data:`EXIT_ALLOWANCE` for an exit waiting for its
answer on a connection it shares with others (its task only).
"""

from __future__ import annotations

import sys
from typing import Final, final

import trio

__all__ = [
    "EXIT_ALLOWANCE",
    "UNWIND_ALLOWANCE",
    "UnwindBudget",
    "exit_unwind_allowance",
    "unwind_allowance",
]

# What one holder stopped late costs to unwind: its task woken with
# Cancelled, its frames' finally blocks run, its socket closed.
UNWIND_ALLOWANCE: Final = 100e-6
# What one exit still waiting for its answer at the deadline costs to unwind:
# its task woken with Cancelled and its frames' finally blocks run; its
# request waits on a connection shared with others, which it leaves open.
EXIT_ALLOWANCE: Final = 30e-6


def _real_time() -> bool:
    """Whether this run's clock follows real time (not ``trio.testing.MockClock``)."""
    # Looked up, never imported: trio.testing imports pytest, which a program
    # holding sessions should not load. A run on a MockClock has imported it.
    testing = sys.modules.get("trio.testing")
    clock = trio.lowlevel.current_clock()
    return testing is None or not isinstance(clock, testing.MockClock)


def unwind_allowance() -> float:
    """The seconds of trio time kept for each holder stopped late, on this run's clock.

    :data:`UNWIND_ALLOWANCE` on a clock that follows real time; 0 under
    ``trio.testing.MockClock``, whose time does not pass while tasks unwind,
    so that a test sees the goodbye end at the deadline exactly.
    """
    return UNWIND_ALLOWANCE if _real_time() else 0.0


def exit_unwind_allowance() -> float:
    """The seconds of trio time kept for each exit in flight, on this run's clock.

    :data:`EXIT_ALLOWANCE` on a clock that follows real time; 0 under
    ``trio.testing.MockClock`` (see :func:`unwind_allowance`).
    """
    return EXIT_ALLOWANCE if _real_time() else 0.0


@final
class UnwindBudget:
    """The cancel scope of the goodbye's exits, whose deadline keeps time for their unwinding.

    Args:
        deadline: when the exits, their unwinding included, must be done (trio's clock).
        allowance: seconds kept for each holder stopped late
            (:func:`unwind_allowance` unless told).
        exit_allowance: seconds kept for each exit still running
            (:func:`exit_unwind_allowance` unless told); 0 for both cancels them at
            ``deadline`` exactly.
    """

    def __init__(
        self, deadline: float, allowance: float | None = None, exit_allowance: float | None = None
    ) -> None:
        self._deadline = deadline
        self._allowance = unwind_allowance() if allowance is None else allowance
        self._exit_allowance = exit_unwind_allowance() if exit_allowance is None else exit_allowance
        self._running = 0
        # Holders stopped late, kept time for besides the exits.
        self._reserved = 0
        self.scope = trio.CancelScope(deadline=deadline)

    def __repr__(self) -> str:
        return f"<UnwindBudget running={self._running} exits_deadline={self.scope.deadline!r}>"

    @property
    def running(self) -> int:
        """Exits that would have to unwind if they were cancelled now."""
        return self._running

    def unwind_by(self, count: int) -> float:
        """The latest moment (trio time) from which ``count`` holders unwind by the deadline."""
        return self._deadline - self._allowance * count

    def reserve(self, count: int) -> None:
        """Keep time for ``count`` holders stopped late to unwind, besides the exits."""
        self._reserved += count
        self._update()

    def has_time(self) -> bool:
        """Whether an exit started now could still unwind by the deadline, with all kept so far."""
        return self._exits_by(self._running + 1) > trio.current_time()

    def exit_started(self) -> None:
        """A task announcing one exit was started."""
        self._running += 1
        self._update()

    def exit_ended(self) -> None:
        """A task announcing one exit has its answer (or its error)."""
        self._running -= 1
        self._update()

    def _exits_by(self, running: int) -> float:
        """When ``running`` exits are cancelled to unwind in time, the holders reserved too."""
        return self.unwind_by(self._reserved) - self._exit_allowance * running

    def _update(self) -> None:
        self.scope.deadline = self._exits_by(self._running)
