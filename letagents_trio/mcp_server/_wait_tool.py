"""``wait_for_messages``: the long poll a worker loops on (PROTOCOL §7.6).

With a cursor (``after_message_id``), the tool long-polls ``GET …/messages/poll``
for messages after it, up to the clamped timeout (:func:`clamp_poll_timeout`),
abandoning the poll :func:`poll_abort_after` the room's own timeout. Without a
cursor it first catches up on the room's recent tail: the newest
:data:`~letagents_trio.workers._room_work.DEFAULT_READ` messages
(``GET …/messages?before=latest``), answered at once when there are any; only
an empty room is long-polled without a cursor. The answer's
``last_observed_message_id`` is the next cursor.

Local rooms wait on the local chat (:meth:`LocalChat.wait
<letagents_trio.workers.LocalChat.wait>`) for the clamped timeout, asking on
every look whether this process still holds the worker's connection, so a
wait whose worker was reconnected elsewhere fails and never returns its
successor's messages. Without a cursor they too start from the newest page.

Long waits: a wait may last the poll maximum (180 s by default), longer than
the 60 s an MCP client SDK gives a request unless progress arrives. While it
waits, the tool sends ``notifications/progress`` every
15 s (``_progress.PROGRESS_INTERVAL``) when the call carried
``_meta.progressToken``, so a host that resets its timeout on progress keeps
the wait. A call the host cancels is cancelled with its room request, so the
room stops counting the poll at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Final

import trio

# Tool signatures are evaluated at run time (the SDK reads them).
from mcp_types import CallToolResult  # noqa: TC002
from pydantic import Field

from .._errors import WorkerError
from ..workers._local_chat import message_cursor
from ..workers._room_work import DEFAULT_READ, Acting
from ._facade import (
    RoomId,
    SessionId,
    ToolContext,
    Who,
    WorkerId,
    blank,
    call_as,
    expected_errors,
    ok,
    recheck,
    server_state,
)
from ._message_tools import messages_payload
from ._progress import with_progress

if TYPE_CHECKING:
    from .._session import AgentSession
    from ._facade import ServerState

__all__ = [
    "DEFAULT_WAIT_MS",
    "clamp_poll_timeout",
    "poll_abort_after",
    "wait_for_messages",
]

# wait_for_messages without a timeout (upstream's client default).
DEFAULT_WAIT_MS: Final = 30_000
# A long poll shorter than this is a busy loop.
MIN_WAIT_MS: Final = 1_000
# The client gives the room this much beyond the poll before it gives up;
# waits over 120 s get 120 s (proxies may hold a long request's answer).
WAIT_ABORT_MARGIN_MS: Final = 5_000
LONG_WAIT_MS: Final = 120_000
LONG_WAIT_ABORT_MARGIN_MS: Final = 120_000
# Messages one call returns at most (upstream's MAX_WAIT_MESSAGES_PER_CALL).
MESSAGE_LIMIT: Final = 100


def clamp_poll_timeout(timeout_ms: float | None, poll_max_ms: int) -> int:
    """The poll timeout sent to the room: ``clamp(timeout or 30 000, 1 000, cap)`` ms."""
    wanted = timeout_ms if timeout_ms else DEFAULT_WAIT_MS
    return int(min(max(wanted, MIN_WAIT_MS), poll_max_ms))


def poll_abort_after(server_timeout_ms: int) -> int:
    """Milliseconds after which the client abandons a poll of ``server_timeout_ms``."""
    margin = LONG_WAIT_ABORT_MARGIN_MS if server_timeout_ms > LONG_WAIT_MS else WAIT_ABORT_MARGIN_MS
    return server_timeout_ms + margin


async def _wait_locally(
    state: ServerState,
    who: Who,
    room: str,
    session: AgentSession | None,
    after_message_id: str | None,
    server_timeout: int,
) -> dict[str, Any]:
    """The wait in a local room: the newest page without a cursor, else the local long poll."""
    if after_message_id is None:
        tail = await state.chat.latest(room, limit=DEFAULT_READ)
        if tail["messages"]:
            return tail
    cursor = message_cursor(after_message_id)

    async def still_valid() -> bool:
        if session is None:
            await trio.lowlevel.checkpoint()
            return True
        try:
            await recheck(state, who, room, session)
        except WorkerError:
            return False
        return True

    with trio.move_on_after(server_timeout / 1000):
        return await state.chat.wait(
            room, after=cursor, limit=MESSAGE_LIMIT, still_valid=still_valid
        )
    return await state.chat.read(room, after=cursor, limit=MESSAGE_LIMIT)


@expected_errors
async def wait_for_messages(
    ctx: ToolContext,
    room_id: RoomId = None,
    after_message_id: Annotated[
        str | None,
        Field(
            description=(
                "Only messages after this message id; pass the last one you processed, or"
                " last_observed_message_id. Without it, the newest messages are answered at once"
                f" (at most {DEFAULT_READ}), and only an empty room is waited on."
            )
        ),
    ] = None,
    # The MCP argument's upstream name, not a trio-style timeout parameter.
    timeout: Annotated[  # noqa: ASYNC109
        float | None,
        Field(
            description=(
                "Maximum wait in milliseconds (min 1000, capped by LETAGENTS_POLL_MAX_MS);"
                " 0 means the default, 30000."
            )
        ),
    ] = None,
    agent_session_id: SessionId = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Wait for new messages in a room (HTTP long poll). Call it in a loop, passing the last
    message you processed as after_message_id: an empty answer means nothing new yet, not
    that the work is over."""
    state = server_state(ctx)
    server_timeout = clamp_poll_timeout(timeout, state.config.poll_max_ms)
    after = None if blank(after_message_id) else after_message_id
    who = Who(room_id=room_id, agent_session_id=agent_session_id, worker_id=worker_id)

    async def local(room: str, session: AgentSession | None) -> dict[str, Any]:
        return await _wait_locally(state, who, room, session, after, server_timeout)

    async def remote(acting: Acting) -> dict[str, Any]:
        if after is None:
            tail = await state.work.recent_messages(acting, DEFAULT_READ)
            if tail["messages"]:
                return tail
        return await state.work.poll(
            acting,
            after=after,
            timeout_ms=server_timeout,
            abort_ms=poll_abort_after(server_timeout),
        )

    async def wait() -> tuple[str, AgentSession | None, dict[str, Any]]:
        return await call_as(state, who, remote=remote, local=local)

    room, session, answer = await with_progress(ctx, wait)
    return ok(state, messages_payload(answer, room, after), session)
