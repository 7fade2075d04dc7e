"""The reference room's settings, in one frozen value.

Intervals are seconds on trio's clock (they drive ``trio.sleep``); the two
settings that upstream reads from the environment are milliseconds, as their
environment variables are. The defaults are the protocol's
(:mod:`letagents_trio._protocol`); :meth:`RoomConfig.from_env` applies the two
environment overrides with upstream's rules (PROTOCOL.md §1), and our own
``LETAGENTS_ROOM_WAKE_MIN_LEAD_MS``. Only an entry
point (the room CLI) calls it: everything below is handed its config.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Final, final

import attrs

from .._protocol import (
    DEFAULT_LIVENESS_NOTICE_AFTER_MS,
    DEFAULT_POLL_MAX_MS,
    PROCESS_REFRESH_INTERVAL,
    REGISTRATION_LOCK_TIMEOUT,
    SSE_HEARTBEAT_INTERVAL,
    liveness_notice_after_from_env,
    poll_max_from_env,
)
from ..workers._names import MAX_DISPLAY_NAME_COLLISION_OFFSET
from ._wake._rules import MIN_LEAD_MS

__all__ = [
    "BODY_TIMEOUT",
    "LIVENESS_SWEEP_INTERVAL",
    "MAX_BODY_BYTES",
    "MAX_PENDING_BODIES",
    "MAX_SILENT_CONNECTIONS",
    "SEND_TIMEOUT",
    "WAKE_MIN_LEAD_ENV",
    "RoomConfig",
    "default_silent_connections",
    "wake_min_lead_from_env",
]

# Ours: lowers the wake timers' least lead (a test on the real clock); never below a second.
WAKE_MIN_LEAD_ENV: Final = "LETAGENTS_ROOM_WAKE_MIN_LEAD_MS"
WAKE_MIN_LEAD_FLOOR_MS: Final = 1000
# Liveness notices are due at minute granularity (§7.5): sweeping once a minute
# posts each within a minute of its moment, for one pass over the sessions.
LIVENESS_SWEEP_INTERVAL: Final = 60.0
# No request of the room API needs more than a MiB; larger bodies answer 413.
MAX_BODY_BYTES: Final = 1024 * 1024
# A request body (at most a MiB) that has not fully arrived this long after its
# headers is an attacker holding a connection open: answer 408 and close.
BODY_TIMEOUT: Final = 10.0
# A write to a client that cannot be handed on this long means the client
# stopped reading (upstream's SSE drain timeout, 10 s): its connection is cut.
SEND_TIMEOUT: Final = 10.0
# Requests whose bodies are still arriving, at most, room-wide: over this the
# oldest is answered 503 and its connection closed, so slow-body attackers
# cannot take every file descriptor. Clients send a body right after its
# headers, so a legitimate request is counted for a moment only; completed
# requests (process streams, polls) are never counted.
MAX_PENDING_BODIES: Final = 256
# Connections that have not sent a request head (new, or idle between two
# requests), at most: one more closes the oldest, so idle attackers cannot take
# every file descriptor. By default a quarter of the room's open-file limit
# (default_silent_connections), and never fewer than this: at the common
# default limit of 1,024 attackers hold, with the bodies' cap, at most 512
# descriptors, half of them. A client sends its request right after
# connecting, so a legitimate one is counted for a moment only, but a burst of
# thousands connecting at once (a room's restart under thousands of held
# sessions) is thousands of such moments, which a fixed cap would cut
# (docs/performance.md). Held process streams, polls and bodies are never
# counted.
MAX_SILENT_CONNECTIONS: Final = 256
# Open-file limits above this (or none) count as this much for the default cap.
_MOST_OPEN_FILES: Final = 1 << 20


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
        body_timeout: seconds a request body may take to arrive (408 after).
        max_pending_bodies: request bodies that may be arriving at once; one
            more evicts the oldest (503).
        max_silent_connections: connections that may be waiting for a request
            head at once (new, or idle between requests); one more closes the
            oldest. None (the default): a quarter of the process's open-file
            limit when the room is served, at least 256. Served by
            :func:`~letagents_trio.room_server.serve_room` only.
        max_name_offset: the last codename offset a registration scans
            (upstream's 1 024); a test may lower it to reach "exhausted".
        wake_min_lead_ms: the least time ahead a wake timer may be, in ms
            (upstream's 30 000; ``LETAGENTS_ROOM_WAKE_MIN_LEAD_MS`` may lower
            it to 1 000 for a room a test drives on the real clock).
        send_timeout: seconds a write to a client may wait for the client to
            take it (a process stream's frame, a WebSocket's pong, an answer);
            past it the client stopped reading and its connection is cut, the
            stream recorded as dropped (10 s).
    """

    heartbeat_interval: float = SSE_HEARTBEAT_INTERVAL
    refresh_interval: float = PROCESS_REFRESH_INTERVAL
    poll_max_ms: int = DEFAULT_POLL_MAX_MS
    liveness_notice_after_ms: int = DEFAULT_LIVENESS_NOTICE_AFTER_MS
    liveness_sweep_interval: float = LIVENESS_SWEEP_INTERVAL
    registration_lock_timeout: float = REGISTRATION_LOCK_TIMEOUT
    max_body_bytes: int = MAX_BODY_BYTES
    body_timeout: float = BODY_TIMEOUT
    max_pending_bodies: int = MAX_PENDING_BODIES
    max_silent_connections: int | None = attrs.field(
        default=None, validator=attrs.validators.optional(attrs.validators.ge(1))
    )
    max_name_offset: int = MAX_DISPLAY_NAME_COLLISION_OFFSET
    wake_min_lead_ms: int = MIN_LEAD_MS
    send_timeout: float = SEND_TIMEOUT

    def silent_connections_cap(self) -> int:
        """The cap a served room keeps: ``max_silent_connections``, else this process's default."""
        if self.max_silent_connections is None:
            return default_silent_connections()
        return self.max_silent_connections

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> RoomConfig:
        """Build the defaults, with the two environment overrides applied.

        Only entry points call this; the room itself never reads the environment.

        Args:
            environ: the environment to read; ``os.environ`` when ``None``.
        """
        env = os.environ if environ is None else environ
        return cls(
            poll_max_ms=poll_max_from_env(env),
            liveness_notice_after_ms=liveness_notice_after_from_env(env),
            wake_min_lead_ms=wake_min_lead_from_env(env),
        )


def wake_min_lead_from_env(environ: Mapping[str, str]) -> int:
    """``LETAGENTS_ROOM_WAKE_MIN_LEAD_MS`` when it is a whole number from 1 000 to
    30 000; else upstream's 30 000."""
    raw = environ.get(WAKE_MIN_LEAD_ENV, "").strip()
    if raw.isascii() and raw.isdigit() and WAKE_MIN_LEAD_FLOOR_MS <= int(raw[:9]) <= MIN_LEAD_MS:
        return int(raw)
    return MIN_LEAD_MS


def default_silent_connections(open_files: int | None = None) -> int:
    """The default cap on silent connections: a quarter of ``open_files``, at least 256.

    Args:
        open_files: the room's open-file limit; this process's soft
            ``RLIMIT_NOFILE`` when None (256 where there is none to read).
    """
    if open_files is None:
        try:
            import resource
        except ImportError:  # pragma: no cover - Windows: no open-file limit to read
            return MAX_SILENT_CONNECTIONS
        open_files = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        if open_files == resource.RLIM_INFINITY:
            open_files = _MOST_OPEN_FILES
    return max(MAX_SILENT_CONNECTIONS, min(open_files, _MOST_OPEN_FILES) // 4)
