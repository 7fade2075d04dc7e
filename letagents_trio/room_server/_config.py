"""The reference room's settings, in one frozen value.

Intervals are seconds on trio's clock (they drive ``trio.sleep``); the two
settings that upstream reads from the environment are milliseconds, as their
environment variables are, and :meth:`RoomConfig.from_env` parses them with
upstream's rules (PROTOCOL.md §1):

* ``LETAGENTS_POLL_MAX_MS``: unset, empty, not a number or below 1 000 falls
  back to 180 000; above 86 400 000 is clamped to it.
* ``LETAGENTS_LIVENESS_NOTICE_AFTER_MS``: accepted only between 120 000 and
  3 600 000 (then floored); anything else falls back to 1 800 000.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import Final, final

import attrs

from ..workers._names import MAX_DISPLAY_NAME_COLLISION_OFFSET

__all__ = [
    "DEFAULT_LIVENESS_NOTICE_AFTER_MS",
    "DEFAULT_POLL_MAX_MS",
    "RoomConfig",
    "liveness_notice_after_from_env",
    "poll_max_from_env",
]

# Upstream's long-poll cap: long enough to save requests, short enough for proxies.
DEFAULT_POLL_MAX_MS: Final = 180_000
# Below a second a "long" poll is a busy loop.
_POLL_MAX_FLOOR_MS: Final = 1_000
# A day: no proxy holds a request longer.
_POLL_MAX_CLAMP_MS: Final = 86_400_000
# 30 min: the newest upstream test's visible "offline" grace.
DEFAULT_LIVENESS_NOTICE_AFTER_MS: Final = 1_800_000
_LIVENESS_NOTICE_MIN_MS: Final = 120_000
_LIVENESS_NOTICE_MAX_MS: Final = 3_600_000


def _number(raw: str | None) -> float | None:
    if raw is None or not raw.strip():
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    return None if math.isnan(value) else value


def poll_max_from_env(environ: Mapping[str, str]) -> int:
    """Return the long-poll cap in ms from ``LETAGENTS_POLL_MAX_MS`` (upstream's rules)."""
    value = _number(environ.get("LETAGENTS_POLL_MAX_MS"))
    if value is None or value < _POLL_MAX_FLOOR_MS:
        return DEFAULT_POLL_MAX_MS
    return int(min(math.floor(value), _POLL_MAX_CLAMP_MS))


def liveness_notice_after_from_env(environ: Mapping[str, str]) -> int:
    """Return the offline-notice grace in ms from ``LETAGENTS_LIVENESS_NOTICE_AFTER_MS``."""
    value = _number(environ.get("LETAGENTS_LIVENESS_NOTICE_AFTER_MS"))
    if value is None or not _LIVENESS_NOTICE_MIN_MS <= value <= _LIVENESS_NOTICE_MAX_MS:
        return DEFAULT_LIVENESS_NOTICE_AFTER_MS
    return math.floor(value)


@final
@attrs.frozen(kw_only=True)
class RoomConfig:
    """How the reference room behaves. Defaults are upstream's.

    Attributes:
        heartbeat_interval: seconds between ``: heartbeat`` comments on a
            process stream (upstream's SSE heartbeat, 15 s).
        refresh_interval: seconds between ``process_seen_at`` refreshes of an
            open process stream (30 s).
        poll_max_ms: the long-poll cap in ms.
        liveness_notice_after_ms: the visible offline-notice grace in ms.
        liveness_sweep_interval: seconds between liveness sweeps (60 s).
        registration_lock_timeout: seconds a registration waits for the
            room's registration lock before answering 503 busy (5 s).
        max_body_bytes: request bodies above this answer 413.
        max_name_offset: the last codename offset a registration scans
            (upstream's 1 024); a test may lower it to reach "exhausted".
    """

    heartbeat_interval: float = 15.0
    refresh_interval: float = 30.0
    poll_max_ms: int = DEFAULT_POLL_MAX_MS
    liveness_notice_after_ms: int = DEFAULT_LIVENESS_NOTICE_AFTER_MS
    liveness_sweep_interval: float = 60.0
    registration_lock_timeout: float = 5.0
    max_body_bytes: int = 1024 * 1024
    max_name_offset: int = MAX_DISPLAY_NAME_COLLISION_OFFSET

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> RoomConfig:
        """Build the defaults, with the two environment overrides applied.

        Args:
            environ: the environment to read; ``os.environ`` when ``None``.
        """
        env = os.environ if environ is None else environ
        return cls(
            poll_max_ms=poll_max_from_env(env),
            liveness_notice_after_ms=liveness_notice_after_from_env(env),
        )
