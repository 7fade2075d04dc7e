"""The letagents wire protocol's constants, in one place (PROTOCOL.md §1).

Upstream states times in milliseconds; letagents-trio states every time in
seconds on trio's clock, so each constant here is the upstream value / 1000 and
is named without the ``_MS`` suffix. Header names, paths and error texts are
kept byte for byte: compatibility with the Node client and the room needs them.
"""

from __future__ import annotations

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
# Exit announcements in flight at once. Sent all together, a thousand of them
# all finish late at a busy room; in turns of 64 most finish inside the deadline.
EXIT_CONCURRENCY: Final = 64
# Lines or events larger than this end an attempt: memory stays bounded.
MAX_EVENT_BYTES: Final = 1024 * 1024

# --- room API calls ----------------------------------------------------------

# Waits before retrying a registration the room turned away as busy (503).
BUSY_RETRY_DELAYS: Final = (1.0, 2.0)
# A Retry-After may ask for more than our own delay, but never more than this.
BUSY_RETRY_MAX_DELAY: Final = 30.0
# Finite connect timeout for every request; reads on the process stream are
# unbounded because the holder owns silence.
CONNECT_TIMEOUT: Final = 10.0

# --- room server (server side) -----------------------------------------------

# Comment lines keep idle streams alive through proxies (WHATWG §9.2.7).
SSE_HEARTBEAT_INTERVAL: Final = 15.0
# While a process stream is open the room refreshes process_seen_at this often.
PROCESS_REFRESH_INTERVAL: Final = 30.0
RECONNECT_MAX_DELAY: Final = 5.0
PROCESS_GONE_ON_SAME_HOST_AFTER: Final = 15.0
PROCESS_GONE_AFTER: Final = 600.0
WITHOUT_EVIDENCE_GONE_AFTER: Final = 3600.0
DELIVERY_LINGERS: Final = 12.0
NAME_WAIT_MARGIN: Final = 0.5
SAME_INSTANCE_RECLAIM_STALE_AFTER: Final = 100.0
AGENT_PROCESS_EXITED: Final = "exited"

# --- headers, media types, texts ----------------------------------------------

SESSION_ID_HEADER: Final = "X-LetAgents-Agent-Session-Id"
SESSION_TOKEN_HEADER: Final = "X-LetAgents-Agent-Session-Token"
ORIGIN_ROOM_ID_HEADER: Final = "X-LetAgents-Origin-Room-Id"
EVENT_STREAM: Final = "text/event-stream"

AGENT_SESSION_ENDED_ERROR: Final = "This agent session has ended."
AGENT_SESSION_ENDED_ADVICE: Final = (
    AGENT_SESSION_ENDED_ERROR + " Call register_agent_session again to go on working in this room."
    " If the same error returns, register with a new registration_key,"
    " or have the LetAgents MCP server restarted and register once more."
)

DEFAULT_API_URL: Final = "http://localhost:3001"
