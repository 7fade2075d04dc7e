"""The cyclic garbage collector paused for bounded stretches, when an embedder opts in.

The collector is the whole process's, so a library leaves it alone unless
told: ``open_connection_manager(..., pause_collector=True)`` is that opt-in,
for a process holding thousands of sessions (``docs/performance.md``).

A full pass walks every object alive (dozens per held stream), and the
collector starts one each time the objects alive have grown by a quarter.
Two moments would set off dozens of passes, and both are bounded:

- **the goodbye** (:class:`CollectorPause`, held by the manager): thousands of
  holders stopping and exits starting allocate fast; the exit deadline, then
  the holders' unwinding, bound it;
- **a burst of opening** (:class:`OpeningBurst`): thousands of holders
  connecting at once (a process starting with thousands of sessions, or all
  of them reconnecting after the room restarted) grow the objects alive from
  nothing to their full count, so the collector walks them again and again.
  Paused while at least :data:`OPENING_BURST`
  attempts are waiting for the room's answer, and ended by the first change of
  their count after :data:`MAX_OPENING_PAUSE` (every attempt waits at most
  the answer timeout, 10 s by default, so a stretch lasts at most the longer
  of the two).

Pauses are counted across the process: the collector is enabled again when
the last one ends, and only if a pause disabled it. An embedder that disabled
it keeps it disabled. Nothing is lost by waiting: the garbage is collected
once the collector runs again.
"""

from __future__ import annotations

import gc
import threading
from typing import Final, final

import trio

__all__ = ["MAX_OPENING_PAUSE", "OPENING_BURST", "CollectorPause", "OpeningBurst"]

# Attempts waiting for the room's answer at once from which the collector pauses:
# below this, what the passes cost is a few milliseconds.
OPENING_BURST: Final = 256
# The longest one opening pause lasts (seconds on trio's clock); after it the
# collector runs for as long again before another may begin, however the
# burst goes on (a room that keeps dropping thousands of streams at once).
MAX_OPENING_PAUSE: Final = 10.0

_lock = threading.Lock()
_pauses = 0
_disabled_by_us = False


def _pause() -> None:
    global _pauses, _disabled_by_us
    with _lock:
        if _pauses == 0 and gc.isenabled():
            gc.disable()
            _disabled_by_us = True
        _pauses += 1


def _resume() -> None:
    global _pauses, _disabled_by_us
    with _lock:
        _pauses -= 1
        if _pauses == 0 and _disabled_by_us:
            _disabled_by_us = False
            gc.enable()


@final
class CollectorPause:
    """One pause of the cyclic GC: from :meth:`pause` until :meth:`resume`.

    The goodbye holds one: stopping thousands of holders and starting as many
    exits allocates fast (every cancellation is an exception with a traceback;
    every exit a task, a socket and a parser that live until answered), so the
    collector would run dozens of times. Both methods may be called any
    number of times.
    """

    def __init__(self) -> None:
        self._paused = False

    @property
    def paused(self) -> bool:
        """Whether this pause is on (the collector itself may be disabled by another)."""
        return self._paused

    def pause(self) -> None:
        """Pause the collector, unless this pause already does (or its owner disabled it)."""
        if not self._paused:
            self._paused = True
            _pause()

    def resume(self) -> None:
        """End this pause; the collector runs again once no other pause is on."""
        if self._paused:
            self._paused = False
            _resume()


@final
class OpeningBurst:
    """Counts the attempts waiting for the room's answer; pauses the collector in a burst.

    A holder calls :meth:`started` when an attempt begins and :meth:`settled`
    once it opened or ended. From :data:`OPENING_BURST` attempts waiting at
    once the collector is paused, until fewer than half that many wait (then,
    if no other pause holds it, one full collection runs at once), or
    :data:`MAX_OPENING_PAUSE` has passed (then it runs for as long before
    pausing again). No task and no timer: every change of the count looks at
    trio's clock, and an attempt waits at most the answer timeout, so a
    pause lasts at most the longer of the two.

    Args:
        pause: whether a burst pauses the collector at all (the embedder's
            opt-in); False only counts.
    """

    def __init__(self, *, pause: bool = True) -> None:
        self._enabled = pause
        self._waiting = 0
        self._pause = CollectorPause()
        self._paused_at = 0.0
        self._not_before = -float("inf")

    def __repr__(self) -> str:
        return f"<OpeningBurst waiting={self._waiting} paused={self._pause.paused}>"

    @property
    def waiting(self) -> int:
        """Attempts waiting for the room's answer now."""
        return self._waiting

    def started(self) -> None:
        """An attempt began: it waits for the room's answer."""
        self._waiting += 1
        self._update()

    def settled(self) -> None:
        """An attempt opened, or ended without opening."""
        self._waiting -= 1
        self._update()

    def close(self) -> None:
        """End any pause for good (the manager's block is left)."""
        self._pause.resume()
        self._not_before = float("inf")

    def _update(self) -> None:
        if not self._enabled:
            return
        now = trio.current_time()
        if self._pause.paused:
            if now - self._paused_at >= MAX_OPENING_PAUSE:
                self._pause.resume()
                self._not_before = now + MAX_OPENING_PAUSE
            elif self._waiting < OPENING_BURST // 2:
                self._pause.resume()
                if gc.isenabled():
                    # One full pass now over what the burst made, rather than the
                    # three the collector would make as those objects age through
                    # its generations.
                    gc.collect()
        elif self._waiting >= OPENING_BURST and now >= self._not_before:
            self._pause.pause()
            self._paused_at = now
