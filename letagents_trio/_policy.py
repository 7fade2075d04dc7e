"""How a holder waits and gives up: the outcomes of an attempt and the policy.

Every attempt to hold a process connection ends with one :class:`Outcome`. The
holder then waits before the next attempt, and the wait depends only on the
outcome and on how many attempts in a row have ended that way:

* ``dropped`` (the stream ended, a network error, a timeout, a 5xx):
  1, 2, 5, 5, … seconds;
* ``refused`` (any other non-2xx, or a body that is not an event stream):
  5, 15, 60, 60, … seconds;
* ``unsupported`` (404 or 405, a room without the route): 10, 60, 300, 300, …;
* ``ended`` (410, or an ``ended`` event): no next attempt at all.

The three counters are independent and all reset when a stream opens. The
delay is a pure function of (outcome, count, policy, random source), kept apart
from sleeping, so it is tested without a clock. With ``jitter`` > 0 each delay
is drawn uniformly from ``[delay * (1 - jitter), delay]``: never longer than the
Node client would wait, so the room's 15 s same-host window still holds.

The policy is timing and limits only. How the connection is held (SSE or the
WebSocket form) and each transport's own knobs are the connector's
(:class:`~letagents_trio.SSEConnector`, :class:`~letagents_trio.WebSocketConnector`).
"""

from __future__ import annotations

import enum
import math
import random
from typing import TYPE_CHECKING, Any, Final, final

import attrs

from . import _protocol

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["HoldPolicy", "Outcome"]

# HoldPolicy.open_concurrency's default: a process holding up to a thousand
# sessions asks for every one at once, as the Node client does; more wait their
# turn, so that a room opening them more slowly than that many per answer
# timeout never answers an attempt its client has given up on.
OPEN_CONCURRENCY: Final = 1024


class Outcome(enum.Enum):
    """How one attempt to hold a process connection ended."""

    DROPPED = "dropped"
    """The stream ended or broke, the room failed (5xx), or it was too slow."""
    REFUSED = "refused"
    """The room answered with a refusal (e.g. 401, 403) or not with an event stream."""
    UNSUPPORTED = "unsupported"
    """The room does not know the route (404 or 405)."""
    ENDED = "ended"
    """The room says the session has ended (410, or an ``ended`` event)."""

    def __repr__(self) -> str:
        return f"Outcome.{self.name}"


def _delays(value: Sequence[float]) -> tuple[float, ...]:
    return tuple(float(v) for v in value)


def _check_delays(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    assert isinstance(value, tuple)
    if not value:
        raise ValueError(f"HoldPolicy.{attribute.name} needs at least one delay")
    for delay in value:
        if not math.isfinite(delay) or delay < 0:
            raise ValueError(
                f"HoldPolicy.{attribute.name} delays must be finite and >= 0, got {delay!r}"
            )


def _check_positive(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    assert isinstance(value, float)
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"HoldPolicy.{attribute.name} must be finite and > 0, got {value!r}")


def _check_jitter(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    assert isinstance(value, float)
    if not (0.0 <= value <= 1.0):
        raise ValueError(f"HoldPolicy.jitter must be between 0 and 1, got {value!r}")


def _check_concurrency(instance: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"HoldPolicy.{attribute.name} must be None or an int >= 1, got {value!r}")


@final
@attrs.frozen(kw_only=True)
class HoldPolicy:
    """Timing of process-connection holders, in seconds on trio's clock.

    The defaults are exactly the Node client's (letagents 0.12.31), but for
    ``open_concurrency``, a cap the Node client does not have, which changes
    nothing below 1,024 sessions. Every value is checked on construction, with
    an error that names the field.

    Attributes:
        dropped_delays: waits after successive ``dropped`` outcomes; the last repeats.
        refused_delays: waits after successive ``refused`` outcomes.
        unsupported_delays: waits after successive ``unsupported`` outcomes.
        answer_timeout: how long the room may take to send response headers,
            counted from the attempt's turn (see ``open_concurrency``).
        silence_timeout: how long an open stream may stay silent (no bytes at
            all, comments included) before the attempt counts as dropped.
        exit_deadline: one deadline for closing every stream and sending every
            exit announcement when the manager stops; the exits still waiting
            for an answer are cancelled early enough to unwind by then.
        jitter: 0 (the default) waits exactly; ``j`` > 0 draws each wait from
            ``[delay * (1 - j), delay]``.
        rng: the random source for jitter; inject a seeded one for tests.
        exit_concurrency: None (the default) says every goodbye (close the
            stream, announce the exit) at once, as the Node client does: a slow
            room then answers them all within one round trip, and each costs
            little CPU. An int caps how many run at once, for a room that must
            not see more connections than that.
        open_concurrency: how many of a manager's attempts wait for the room's
            answer at once (1,024 by default); the others wait their turn,
            first come first served, as ``CONNECTING``, and their answer
            timeout starts with it. A turn ends as the stream opens or the
            attempt fails. A room that opens connections more slowly than this
            many per answer timeout then answers every attempt while its client
            still waits, instead of opening some the client gave up on. None
            asks for every one at once, as the Node client does.
    """

    dropped_delays: tuple[float, ...] = attrs.field(
        default=_protocol.DROPPED_DELAYS, converter=_delays, validator=_check_delays
    )
    refused_delays: tuple[float, ...] = attrs.field(
        default=_protocol.REFUSED_DELAYS, converter=_delays, validator=_check_delays
    )
    unsupported_delays: tuple[float, ...] = attrs.field(
        default=_protocol.UNSUPPORTED_DELAYS, converter=_delays, validator=_check_delays
    )
    answer_timeout: float = attrs.field(
        default=_protocol.ANSWER_TIMEOUT, converter=float, validator=_check_positive
    )
    silence_timeout: float = attrs.field(
        default=_protocol.SILENCE_TIMEOUT, converter=float, validator=_check_positive
    )
    exit_deadline: float = attrs.field(
        default=_protocol.EXIT_DEADLINE, converter=float, validator=_check_positive
    )
    jitter: float = attrs.field(default=0.0, converter=float, validator=_check_jitter)
    rng: random.Random = attrs.field(factory=random.Random, eq=False, repr=False)
    exit_concurrency: int | None = attrs.field(default=None, validator=_check_concurrency)
    open_concurrency: int | None = attrs.field(
        default=OPEN_CONCURRENCY, validator=_check_concurrency
    )

    def delays_for(self, outcome: Outcome) -> tuple[float, ...]:
        """The table of waits for ``outcome``.

        Raises:
            ValueError: for :attr:`Outcome.ENDED`, after which nothing is retried.
        """
        if outcome is Outcome.DROPPED:
            return self.dropped_delays
        if outcome is Outcome.REFUSED:
            return self.refused_delays
        if outcome is Outcome.UNSUPPORTED:
            return self.unsupported_delays
        raise ValueError("an ended session is never retried")

    def delay(self, outcome: Outcome, count: int) -> float:
        """The wait after ``outcome`` when ``count`` earlier waits followed it.

        ``count`` is the holder's counter for that outcome (0 for the first).
        """
        if count < 0:
            raise ValueError(f"count must be >= 0, got {count!r}")
        table = self.delays_for(outcome)
        delay = table[min(count, len(table) - 1)]
        if self.jitter and delay:
            delay = self.rng.uniform(delay * (1.0 - self.jitter), delay)
        return delay
