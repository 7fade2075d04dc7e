"""A connection's keep-alive timer: one task for the connection's life, a sliding deadline.

Hypercorn closes a kept-alive connection that stays idle (between two
requests, or before its first) for ``keep_alive_timeout`` seconds, and an idle
one at once when the server stops; a busy one is left to finish. Its timer
(``TrioSingleTask``) is a task started afresh every time the connection falls
idle and cancelled every time a request arrives: a lock, a task to spawn and
wait for, a task to cancel and unwind, for every request. In a goodbye a
thousand exits are a thousand requests on kept-alive connections.

:class:`IdleTimer` keeps that contract with one task, started when the
connection starts, waiting in one cancel scope whose deadline moves: falling
idle (``restart``) sets it to now + the keep-alive timeout, a request
(``stop``) to infinity, which costs no task switch. The task closes the
connection when the deadline passes, or when the server stops while the
connection is idle (a request still running when the server stops: as soon
as it has been answered). :meth:`IdleTimer.end` ends the task when the
connection is over.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Protocol, final

import trio
from hypercorn.trio.worker_context import TrioSingleTask

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = ["IdleTimer"]


class _Terminated(Protocol):
    """Hypercorn's "the server stops" event."""

    def is_set(self) -> bool: ...

    async def wait(self) -> None: ...


@final
class IdleTimer(TrioSingleTask):
    """Hypercorn's keep-alive timer as one task with a sliding deadline.

    Args:
        keep_alive: seconds an idle connection is kept.
        terminated: set when the server stops (idle connections close at once).
        close: closes the connection (hypercorn's ``_initiate_server_close``).
    """

    def __init__(
        self,
        keep_alive: float,
        terminated: _Terminated,
        close: Callable[[], Awaitable[None]],
    ) -> None:
        super().__init__()
        self._keep_alive = keep_alive
        self._terminated = terminated
        self._close = close
        self._idle = False
        self._started = False
        # Waiting: its deadline is now + keep_alive while idle, infinity while busy.
        self._waiting = trio.CancelScope()
        self._life = trio.CancelScope()

    async def restart(self, task_group: Any, action: Callable[[], Awaitable[None]]) -> None:
        """The connection fell idle: close it after the keep-alive timeout (``action`` unused).

        The first call starts the timer's task in ``task_group`` (hypercorn's
        public ``spawn``); the deadline set here holds once the task enters
        its scope, as a cancel scope keeps a deadline set before it is entered.

        Cancellation:
            Not a checkpoint (hypercorn's interface is async; this never waits).
        """
        self._idle = True
        if not self._started:
            self._started = True
            task_group.spawn(self._watch_idle)
        if self._terminated.is_set():
            self._waiting.cancel(reason="idle while the server stops")
        else:
            self._waiting.deadline = trio.current_time() + self._keep_alive

    async def stop(self) -> None:
        """A request arrived: the connection is busy, kept however long it takes.

        Cancellation:
            Not a checkpoint (hypercorn's interface is async; this never waits).
        """
        self._idle = False
        self._waiting.deadline = math.inf

    def end(self) -> None:
        """The connection is over: end the timer's task without closing anything."""
        self._life.cancel(reason="the connection is over")

    async def _watch_idle(self) -> None:
        with self._life:
            with self._waiting:
                await self._terminated.wait()
                if not self._idle:
                    # Busy as the server stops: closed once idle (restart cancels the wait).
                    await trio.sleep_forever()
            with trio.CancelScope(shield=True):
                await self._close()
