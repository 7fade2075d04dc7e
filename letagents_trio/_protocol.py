"""The letagents wire protocol's constants, in one place (PROTOCOL §1).

"PROTOCOL §N" (or a bare "§N"), here and throughout the code and the tests,
means section N of ``docs/protocol.md``: the protocol as this project
implements it.

Upstream states times in milliseconds; letagents-trio states every time in
seconds on trio's clock, so each constant here is the upstream value / 1000 and
is named without the ``_MS`` suffix; the exceptions are the environment
variables upstream reads, which are milliseconds as written. Header names, paths
and error texts are kept byte for byte: compatibility with the Node client and
the room needs them.

Besides constants, two small pure functions live here because both sides of the
wire need them: :func:`format_iso` (JavaScript's ``toISOString``, the form of
every timestamp on the wire and in the state file) and the parsers of the two
environment variables that room and client both read with upstream's rules.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Final

# --- process connection (client side) ---------------------------------------

# Waits after a dropped stream; the last value repeats. 5 s is the longest, so
# a living process always reopens inside the room's 15 s same-host window.
DROPPED_DELAYS: Final = (1.0, 2.0, 5.0)
# A room that refused us will likely refuse again: ask seldom.
REFUSED_DELAYS: Final = (5.0, 15.0, 60.0)
# A room without the route may be one of several behind an address, not all
# upgraded yet: ask more seldom still, but never give up for good.
UNSUPPORTED_DELAYS: Final = (10.0, 60.0, 300.0)
# How long the room may take to send response headers for the process stream.
ANSWER_TIMEOUT: Final = 10.0
# The room writes at least every 15 s; 45 s of silence means the link is dead.
SILENCE_TIMEOUT: Final = 45.0
# One deadline shared by every exit announcement when the process stops.
EXIT_DEADLINE: Final = 1.5
# Lines or events larger than this end an attempt: memory stays bounded.
MAX_EVENT_BYTES: Final = 1024 * 1024
# The WebSocket form (our extension, PROTOCOL §3.1): the room pings every
# 15 s, and the client pings only after hearing nothing for longer than two of
# those intervals (a lone ping may wait in the kernel for the next), so a room
# that pings is never pinged back (each ping is a wake-up, a parse and a write
# on both sides)...
WEBSOCKET_PING_INTERVAL: Final = 40.0
# ...and a socket silent this long after the client's ping is dead: a
# half-open connection is seen within 45 s, as on SSE.
WEBSOCKET_PONG_TIMEOUT: Final = 5.0

# A connection id is a UUID; a longer value is not one and is never kept: it
# goes back to the room in the exit and into logs.
MAX_CONNECTION_ID_CHARS: Final = 128


def connection_id_or_none(value: object) -> str | None:
    """``value`` when it can name a process connection, else None (PROTOCOL §3).

    A connection id comes from the room (the ``open`` event's or frame's
    ``connection_id``) and goes back to it in the exit, so only a printable
    string of 1 to :data:`MAX_CONNECTION_ID_CHARS` characters is kept: a lone
    surrogate could not even be encoded for the exit request.
    """
    if isinstance(value, str) and 0 < len(value) <= MAX_CONNECTION_ID_CHARS:
        return value if value.isprintable() else None
    return None


# --- room API calls ----------------------------------------------------------

# Waits before retrying a registration the room turned away as busy (503).
BUSY_RETRY_DELAYS: Final = (1.0, 2.0)
# A Retry-After may ask for more than our own delay, but never more than this.
BUSY_RETRY_MAX_DELAY: Final = 30.0
# Finite connect timeout for every request; reads on the process stream are
# unbounded because the holder owns silence.
CONNECT_TIMEOUT: Final = 10.0
# The deadline of one ordinary call, request to last body byte. The slowest
# answer a room gives on purpose is a registration waiting for a name to come
# free (at most 15.5 s) behind the registration lock (5 s); a long poll names
# its own deadline instead (wait_for_messages: the poll plus a margin).
CALL_TIMEOUT: Final = 30.0
# The largest answer body a call reads. The largest a room sends on purpose is
# a page of 200 messages of 64 Ki characters (about 13 MiB as ASCII, 75 MiB if
# every character were JSON-escaped); anything larger is refused unread, so a
# hostile answer costs at most this much memory.
MAX_ANSWER_BYTES: Final = 96 * 1024 * 1024
# Calls ask for this content coding: answers are read as sent, so a small
# compressed body cannot inflate into gigabytes; any other coding is refused.
IDENTITY_ENCODING: Final = "identity"

# --- room server (server side) -----------------------------------------------

# Comment lines keep idle streams alive through proxies (WHATWG §9.2.7).
SSE_HEARTBEAT_INTERVAL: Final = 15.0
# While a process stream is open the room refreshes process_seen_at this often.
PROCESS_REFRESH_INTERVAL: Final = 30.0
# The longest a living client waits before reopening; the same-host grace is 3x this.
RECONNECT_MAX_DELAY: Final = 5.0
# A closed stream not reopened this long, by a registrant on the same host, has
# exited: three times the longest client reconnect wait (5 s).
PROCESS_GONE_ON_SAME_HOST_AFTER: Final = 15.0
# Silence after which a process that once had a stream is gone, seen from
# anywhere: twenty missed 30 s refreshes cannot be a hiccup.
PROCESS_GONE_AFTER: Final = 600.0
# Silence after which a session that never opened a stream (an older client) is
# gone, when it can recover: it has no better evidence, so it gets a long window.
WITHOUT_EVIDENCE_GONE_AFTER: Final = 3600.0
# After its last message request closes, delivery still counts as open this long:
# the 10 s delivery reconnect grace plus 2 s of slack.
DELIVERY_LINGERS: Final = 12.0
# Added to the moment a name comes free before a registration re-reads the room,
# so the re-read lands after the holder's deadline rather than on it.
NAME_WAIT_MARGIN: Final = 0.5
# A non-durable live session of the same instance unseen this long may be
# replaced without proof (upstream's 90 s presence window + 10 s grace).
SAME_INSTANCE_RECLAIM_STALE_AFTER: Final = 100.0
# Liveness notices (§7.5): sessions quiet longer than this are never announced.
OFFLINE_ANNOUNCE_MAX_AGE: Final = 3600.0
# A long poll that names no timeout waits this long (upstream's older default).
DEFAULT_POLL_TIMEOUT: Final = 30.0
# Stored in place of process_connection_id once a process announced its exit.
AGENT_PROCESS_EXITED: Final = "exited"
# How long a registration waits for the room's registration lock before the
# room answers 503 busy: a stuck registration must not hold every other one.
REGISTRATION_LOCK_TIMEOUT: Final = 5.0

# --- messages: the same page and bounds in the room and in local chat ---------

# A page of messages when the request names no limit.
DEFAULT_MESSAGE_PAGE: Final = 50
# The largest page a request may ask for: bounds one answer's size.
MAX_MESSAGE_PAGE: Final = 200
# The longest text one message may carry, in characters.
MAX_MESSAGE_CHARS: Final = 64 * 1024

# --- headers, media types, texts ----------------------------------------------

SESSION_ID_HEADER: Final = "X-LetAgents-Agent-Session-Id"
SESSION_TOKEN_HEADER: Final = "X-LetAgents-Agent-Session-Token"
EVENT_STREAM: Final = "text/event-stream"

# The prefix a client looks for in a 401 body to learn its session ended.
AGENT_SESSION_ENDED_ERROR: Final = "This agent session has ended."
# The room's whole 401 text for the credentials of an ended session.
AGENT_SESSION_ENDED_ADVICE: Final = (
    AGENT_SESSION_ENDED_ERROR + " Call register_agent_session again to go on working in this room."
    " If the same error returns, register with a new registration_key,"
    " or have the LetAgents MCP server restarted and register once more."
)

# --- the room's refusals (PROTOCOL §2.1, R3-R6), byte for byte -----------------
# Clients match on these texts and codes, so the room must send exactly them.

BUSY_TEXT: Final = "Agent session registration is busy. Retry shortly."
REGISTRATION_AUTH_TEXT: Final = "Agent session registration requires authenticated owner context."
ACTOR_KEY_REQUIRED_TEXT: Final = "actor_key is required"
ACTOR_KEY_NOT_OWNED_TEXT: Final = "actor_key is not owned by this account"
DURABLE_CREDENTIAL_TEXT: Final = "A durable worker requires a valid prepared connection credential."
REPLACEMENT_PAIR_TEXT: Final = (
    "replace_agent_session_id and replace_agent_session_token must be supplied together."
)
IDENTITY_TOO_LONG_TEXT: Final = "Agent identity fields exceed the supported message-routing bounds."
ALREADY_ACTIVE_TEXT: Final = (
    "This exact agent instance is already active on another live transport."
)
NAMES_EXHAUSTED_TEXT: Final = (
    "Could not allocate a unique active worker display name for this room."
)
SESSION_ENDED_410_TEXT: Final = "Agent session has ended."
INVALID_CREDENTIALS_TEXT: Final = "Invalid agent session credentials."
BEARER_MISMATCH_TEXT: Final = "Invalid or mismatched agent session bearer credentials."
SESSION_REQUIRED_TEXT: Final = "Registered worker session is required for agent write actions."
WORKER_REQUIRED_TEXT: Final = "Worker session is required for agent write actions."
# Ours, for a read without session credentials: the write text above told a
# reader it had attempted a write (PROTOCOL.md §9.7: upstream's read text was not read).
SESSION_REQUIRED_READ_TEXT: Final = (
    "Registered agent session credentials are required to read this room's messages."
)
OWN_PROCESS_TEXT: Final = "A process connection belongs to its own session."
OWN_EXIT_TEXT: Final = "A process speaks only for its own session."
OWN_DISCONNECT_TEXT: Final = "Worker sessions can only disconnect themselves."
SESSION_NOT_FOUND_TEXT: Final = "Agent session not found"
SESSION_ID_REQUIRED_TEXT: Final = "agent_session_id is required"
# Refusals of a message send or read, shared by the room and local chat (ours:
# upstream's were not read, PROTOCOL.md §9.7).
TEXT_REQUIRED_TEXT: Final = "text is required"
TEXT_TOO_LONG_TEXT: Final = f"text is too long: at most {MAX_MESSAGE_CHARS} characters"
BAD_CURSOR_TEXT: Final = "after must be a message id"

# The machine-readable ``code`` beside some of those texts.
AGENT_SESSION_ENDED_CODE: Final = "agent_session_ended"
ALREADY_ACTIVE_CODE: Final = "agent_instance_already_active"
NAMES_EXHAUSTED_CODE: Final = "agent_session_display_name_exhausted"
IDENTITY_TOO_LONG_CODE: Final = "agent_identity_too_long"
REPLACEMENT_PROOF_CODE: Final = "invalid_agent_session_replacement_proof"

# Where a client goes when neither the environment nor the caller names a room API.
DEFAULT_API_URL: Final = "http://localhost:3001"

# --- the environment variables upstream reads (milliseconds, as written) ---------
# Room and MCP server read the same variables with the same rules (PROTOCOL.md §1).

POLL_MAX_ENV: Final = "LETAGENTS_POLL_MAX_MS"
# Upstream's long-poll cap: long enough to save requests, short enough for proxies.
DEFAULT_POLL_MAX_MS: Final = 180_000
# Below a second a "long" poll is a busy loop.
POLL_MAX_FLOOR_MS: Final = 1_000
# A day: no proxy holds a request longer.
POLL_MAX_CLAMP_MS: Final = 86_400_000
LIVENESS_NOTICE_AFTER_ENV: Final = "LETAGENTS_LIVENESS_NOTICE_AFTER_MS"
# 30 min: the newest upstream test's visible "offline" grace.
DEFAULT_LIVENESS_NOTICE_AFTER_MS: Final = 1_800_000
# Upstream's accepted range for the grace; a value outside it means the default.
LIVENESS_NOTICE_MIN_MS: Final = 120_000
LIVENESS_NOTICE_MAX_MS: Final = 3_600_000
# JavaScript's white space and line terminators, which parseInt, Number() and
# String.prototype.trim skip; spelled out, as Python's str.strip skips others.
JS_SPACE: Final = "\t\n\v\f\r \u00a0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
_JS_INT: Final = re.compile(f"[{JS_SPACE}]*([+-]?)([0-9]+)")
_JS_NUMBER: Final = re.compile(
    f"[{JS_SPACE}]*(?:([+-]?(?:Infinity|(?:[0-9]+\\.?[0-9]*|\\.[0-9]+)(?:[eE][+-]?[0-9]+)?))"
    f"|0[xX]([0-9a-fA-F]+)|0[oO]([0-7]+)|0[bB]([01]+))?[{JS_SPACE}]*"
)
# Digits past which a whole number is beyond any finite cap (a double holds ~1.8e308,
# and every cap here is far below 10**18).
_JS_INT_DIGITS: Final = 18
# Integers wider than this are infinite as doubles.
_DOUBLE_MAX_BITS: Final = 1024

# --- the date format on the wire and in the state file ----------------------------


def format_iso(seconds: float) -> str:
    """Format a Unix time like JavaScript's ``Date.prototype.toISOString``.

    UTC, milliseconds (truncated, as ``Date`` keeps whole milliseconds) and a
    ``Z``: ``2026-11-30T20:41:02.123Z``. A time made of whole milliseconds
    (``ms / 1000``) prints those milliseconds, although ``seconds * 1000`` may
    land a hair below them in binary floating point.
    """
    millis = math.floor(seconds * 1000)
    if (millis + 1) / 1000 == seconds:
        millis += 1
    moment = datetime(1970, 1, 1, tzinfo=UTC) + timedelta(milliseconds=millis)
    return f"{moment:%Y-%m-%dT%H:%M:%S}.{moment.microsecond // 1000:03d}Z"


def _js_parse_int(raw: str) -> float | None:
    """JavaScript's ``Number.parseInt(raw, 10)``, or None where it gives ``NaN``.

    White space (JavaScript's), an optional sign, then the longest run of ASCII
    digits; whatever follows is ignored, so ``"5000ms"`` is 5000 and ``"1e4"``
    is 1. A run too long for a double is infinite, as there.
    """
    found = _JS_INT.match(raw)
    if found is None:
        return None
    sign, digits = found.groups()
    digits = digits.lstrip("0") or "0"
    magnitude = math.inf if len(digits) > _JS_INT_DIGITS else float(int(digits))
    return -magnitude if sign == "-" else magnitude


def _js_number(raw: str | None) -> float:
    """JavaScript's ``Number(raw)``: ``NaN`` (``math.nan``) for anything it refuses.

    The whole text, white space around it aside, must be one numeric literal:
    a decimal (``1e5``, ``.5``, ``+3``), ``Infinity``, or ``0x``/``0o``/``0b``
    digits; empty or white space alone is 0; ``undefined`` (unset) is ``NaN``.
    No separators (``200_000``), no other digits than ASCII.
    """
    if raw is None:
        return math.nan
    found = _JS_NUMBER.fullmatch(raw)
    if found is None:
        return math.nan
    decimal, *based = found.groups()
    if decimal is not None:
        return float(decimal)
    for digits, base in zip(based, (16, 8, 2), strict=True):
        if digits is not None:
            value = int(digits, base)
            return math.inf if value.bit_length() > _DOUBLE_MAX_BITS else float(value)
    return 0.0


def poll_max_from_env(environ: Mapping[str, str]) -> int:
    """Return the long-poll cap in ms from ``LETAGENTS_POLL_MAX_MS``, by upstream's rules.

    ``poll-timeout-cap.ts``: unset or empty, or what ``Number.parseInt`` reads
    as ``NaN`` or below 1 000, falls back to 180 000; above 86 400 000 is
    clamped to it. So ``5000ms`` is 5 000, ``1e4`` (1) and ``inf`` fall back.
    Room and MCP server both call this one function, so they agree (§7.6).
    """
    raw = environ.get(POLL_MAX_ENV)
    value = None if not raw else _js_parse_int(raw)
    if value is None or value < POLL_MAX_FLOOR_MS:
        return DEFAULT_POLL_MAX_MS
    return int(min(value, POLL_MAX_CLAMP_MS))


def liveness_notice_after_from_env(environ: Mapping[str, str]) -> int:
    """Return the offline-notice grace in ms from ``LETAGENTS_LIVENESS_NOTICE_AFTER_MS``.

    Upstream's ``resolveOfflineAnnounceAfterMs``: ``Number(value)``, accepted
    only when finite and between 120 000 and 3 600 000 (then floored);
    anything else (``200_000`` included) falls back to 1 800 000.
    """
    value = _js_number(environ.get(LIVENESS_NOTICE_AFTER_ENV))
    if not math.isfinite(value) or not LIVENESS_NOTICE_MIN_MS <= value <= LIVENESS_NOTICE_MAX_MS:
        return DEFAULT_LIVENESS_NOTICE_AFTER_MS
    return math.floor(value)
