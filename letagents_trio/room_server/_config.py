"""The reference room's settings, in one frozen value.

Intervals are seconds on trio's clock (they drive ``trio.sleep``); the two
settings that upstream reads from the environment are milliseconds, as their
environment variables are. The defaults are the protocol's
(:mod:`letagents_trio._protocol`); :meth:`RoomConfig.from_env` applies the two
environment overrides with upstream's rules (PROTOCOL.md §1). Only an entry
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

__all__ = [
    "BODY_TIMEOUT",
    "LIVENESS_SWEEP_INTERVAL",
    "MAX_BODY_BYTES",
    "MAX_PENDING_BODIES",
    "MAX_SILENT_CONNECTIONS",
    "RoomConfig",
]

# Liveness notices are due at minute granularity (§7.5): sweeping once a minute
# posts each within a minute of its moment, for one pass over the sessions.
LIVENESS_SWEEP_INTERVAL: Final = 60.0
# No request of the room API needs more than a MiB; larger bodies answer 413.
MAX_BODY_BYTES: Final = 1024 * 1024
# A request body (at most a MiB) that has not fully arrived this long after its
# headers is an attacker holding a connection open: answer 408 and close.
BODY_TIMEOUT: Final = 10.0
# Requests whose bodies are still arriving, at most, room-wide: over this the
# oldest is answered 503 and its connection closed, so slow-body attackers
# cannot take every file descriptor. Clients send a body right after its
# headers, so a legitimate request is counted for a moment only; completed
# requests (process streams, polls) are never counted.
MAX_PENDING_BODIES: Final = 256
# Connections that have not sent a request head (new, or idle between two
# requests), at most: one more closes the oldest, so idle attackers cannot take
# every file descriptor. A client sends its request right after connecting, so
# a legitimate one is counted for a moment only; with the bodies' cap, attackers
# hold at most 512 descriptors, half the common default limit of 1,024. Held
# process streams, polls and bodies are never counted.
MAX_SILENT_CONNECTIONS: Final = 256


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
            oldest. Served by :func:`~letagents_trio.room_server.serve_room` only.
        max_name_offset: the last codename offset a registration scans
            (upstream's 1 024); a test may lower it to reach "exhausted".
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
    max_silent_connections: int = attrs.field(
        default=MAX_SILENT_CONNECTIONS, validator=attrs.validators.ge(1)
    )
    max_name_offset: int = MAX_DISPLAY_NAME_COLLISION_OFFSET

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
        )
