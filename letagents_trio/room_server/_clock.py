"""The room's clock: every time-based rule reads one injected clock.

The room stores and compares times as integer epoch milliseconds, as upstream
does, so the thresholds of PROTOCOL.md §7 (15 000 ms, 600 000 ms, ...) are
checked exactly, to the millisecond. Timers (heartbeats, refreshes, the name
wait, long polls) are ``trio.sleep`` calls, so they run on trio's clock.

:class:`TrioClock` ties the two together: it reads ``trio.current_time()``, so
under ``trio.testing.MockClock`` the stored times move exactly as the mock
clock does, and a test can assert that a heartbeat came at 15 s and that a
holder counts as exited at exactly 15 000 ms after its close.
:class:`SystemClock` reads the wall clock for a real server.
"""

from __future__ import annotations

import time
from typing import Protocol, final, runtime_checkable

import attrs
import trio

__all__ = ["RoomClock", "SystemClock", "TrioClock"]


@runtime_checkable
class RoomClock(Protocol):
    """What the room needs from a clock: the time now, in epoch milliseconds."""

    def now_ms(self) -> int:
        """Return the current time as integer milliseconds since the Unix epoch."""
        ...


@final
@attrs.frozen
class SystemClock:
    """The wall clock (``time.time()``), for a real server."""

    def now_ms(self) -> int:
        """Return the wall-clock time in epoch milliseconds."""
        return int(time.time() * 1000)


@final
@attrs.frozen
class TrioClock:
    """``epoch_ms`` plus trio's clock, in whole milliseconds.

    Under ``MockClock`` (which starts at 0) ``now_ms()`` is ``epoch_ms`` plus the
    virtual seconds elapsed times 1000, so stored times are exact.

    Attributes:
        epoch_ms: the epoch time that ``trio.current_time() == 0`` stands for.
    """

    epoch_ms: int = 1_800_000_000_000

    def now_ms(self) -> int:
        """Return ``epoch_ms + round(trio.current_time() * 1000)``.

        Must be called inside ``trio.run``.
        """
        return self.epoch_ms + round(trio.current_time() * 1000)
