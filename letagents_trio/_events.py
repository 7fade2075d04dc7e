"""The timeline a connection manager tells: frozen events, stamped with trio's clock.

Each event carries two times: ``time`` on trio's clock (what tests assert on,
exact under ``MockClock``; its zero is arbitrary, so ``152479.29`` means
nothing to a person) and ``wall_time``, the system clock when it was made,
for logs and screens (:attr:`HolderEvent.wall_clock` as a local datetime).

Every change a host or a test may care about becomes one :class:`HolderEvent`:
an attempt starting, the room accepting it, the room naming the connection,
the attempt ending (with its :class:`~letagents_trio.Outcome`), a backoff wait,
the session ending, a holder stopping, an exit announcement. Read in order,
they are the virtual-time timeline that ``nurseries/mock_clock_timeline.py``
prints. Events carry ids and times only, never a token.
"""

from __future__ import annotations

import datetime
import enum
from time import time as system_time
from typing import TYPE_CHECKING, final

import attrs

if TYPE_CHECKING:
    from ._policy import Outcome

__all__ = ["EventKind", "HolderEvent"]


class EventKind(enum.Enum):
    """What a :class:`HolderEvent` reports."""

    ATTEMPT = "attempt"
    """A new attempt to open the process connection starts."""
    OPEN = "open"
    """The room accepted the connection and the stream is open."""
    CONNECTION = "connection"
    """The room named the open connection (``connection_id``)."""
    CLOSED = "closed"
    """An attempt ended; ``outcome`` and ``detail`` say how."""
    BACKOFF = "backoff"
    """The holder waits ``delay`` seconds before the next attempt."""
    ENDED = "ended"
    """The room ended the session; the holder is done for good."""
    STOPPED = "stopped"
    """The holder stopped (released, replaced, shut down or no longer ours)."""
    EXIT = "exit"
    """The exit announcement for the session finished (``detail`` says how)."""

    def __repr__(self) -> str:
        return f"EventKind.{self.name}"


@final
@attrs.frozen(kw_only=True)
class HolderEvent:
    """One entry of the manager's timeline.

    Attributes:
        time: when it happened, in seconds on trio's clock.
        session_id: the session it concerns.
        kind: what happened.
        outcome: for ``CLOSED`` and ``BACKOFF``, the attempt's outcome.
        delay: for ``BACKOFF``, the wait in seconds.
        connection_id: the connection concerned, when one is known.
        detail: a short, secret-free explanation (``"silence"``, ``"HTTP 401"``…).
        wall_time: when it happened on the system clock (``time.time()``), for
            people; not compared and not in ``repr``, so timelines stay exact.
    """

    time: float
    session_id: str
    kind: EventKind
    outcome: Outcome | None = None
    delay: float | None = None
    connection_id: str | None = None
    detail: str = ""
    wall_time: float = attrs.field(factory=system_time, eq=False, repr=False)

    @property
    def wall_clock(self) -> datetime.datetime:
        """:attr:`wall_time` as a local, timezone-aware datetime (print it for people)."""
        return datetime.datetime.fromtimestamp(self.wall_time).astimezone()
