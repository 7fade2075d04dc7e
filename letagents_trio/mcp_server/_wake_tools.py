"""Wake rules: wait for something without polling, and be woken by the room.

``add_wake_rule`` posts ``POST …/wake-rules`` ``{rule}`` as this worker;
``list_wake_rules`` reads ``GET …/wake-rules`` (``agent_key`` narrows it);
``cancel_wake_rule`` posts ``POST …/wake-rules/{rule_id}/cancel``. The room
checks the rule (events, arguments, limits) and keeps it; when it fires or
expires the room posts a message addressed to the agent, which
``wait_for_messages`` delivers. A refusal comes back with the room's text.

Local rooms keep no wake rules (nothing online would fire them): adding or
cancelling answers :data:`LOCAL_ROOM_NOTE` as an error, listing answers it as
a note beside empty lists, as the Node server does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Final, Literal

import trio

# Tool signatures are evaluated at run time (the SDK reads them).
from mcp_types import CallToolResult  # noqa: TC002
from pydantic import Field

from ._facade import (
    RoomId,
    SessionId,
    ToolContext,
    Who,
    WorkerId,
    call_as,
    expected_errors,
    local_refusal,
    ok,
    server_state,
)

if TYPE_CHECKING:
    from .._session import AgentSession
    from ..workers._room_work import Acting

__all__ = ["LOCAL_ROOM_NOTE", "add_wake_rule", "cancel_wake_rule", "list_wake_rules"]

# The Node server's text for a room kept on this device.
LOCAL_ROOM_NOTE: Final = "Wake rules need a room shared online; this room is stored on this device."

Event = Literal[
    "timer",
    "task.status_changed",
    "github.check_completed",
    "github.review_submitted",
    "github.pr_closed",
]


@expected_errors
async def add_wake_rule(
    ctx: ToolContext,
    event: Annotated[Event, Field(description="What to wait for (see the tool's description).")],
    arguments: Annotated[
        dict[str, Any] | None,
        Field(description='The event\'s arguments, e.g. {"after_ms": 600000} for a timer.'),
    ] = None,
    note: Annotated[
        str | None,
        Field(
            max_length=280,
            description="Why you wait; people see it and it comes back to you when you wake.",
        ),
    ] = None,
    repeat: Annotated[
        bool | None,
        Field(description="Keep watching after a wake (one wake a minute at most); not timers."),
    ] = None,
    expires_at: Annotated[
        str | None,
        Field(description="ISO time to stop waiting (7 days at most); you are woken then too."),
    ] = None,
    room_id: RoomId = None,
    agent_session_id: SessionId = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Wait for something without polling: name it, then end your turn. The room wakes you
    with a message addressed to you when it happens or when the rule expires (24 hours
    unless expires_at says otherwise). Use it rather than promising to check back later.
    Events: timer {at: ISO time | after_ms}; task.status_changed {task_id, to?: [statuses]};
    github.check_completed {branch | pr | mine: true, conclusions?};
    github.review_submitted {pr | mine: true, states?}; github.pr_closed {pr | mine: true,
    merged_only?}. Asking for the same thing twice gives back the rule you already have;
    people can see and cancel your rules."""
    state = server_state(ctx)
    who = Who(room_id=room_id, agent_session_id=agent_session_id, worker_id=worker_id)
    rule: dict[str, Any] = {"event": event, "arguments": arguments or {}}
    extra = {"note": note, "repeat": repeat, "expires_at": expires_at}
    rule.update({key: value for key, value in extra.items() if value is not None})

    async def remote(acting: Acting) -> dict[str, Any]:
        return await state.work.call(acting, "POST", "wake-rules", body={"rule": rule})

    _, session, answer = await call_as(
        state, who, remote=remote, local=local_refusal(LOCAL_ROOM_NOTE), write=True
    )
    return ok(state, answer, session)


@expected_errors
async def list_wake_rules(
    ctx: ToolContext,
    room_id: RoomId = None,
    agent_session_id: SessionId = None,
    agent_key: Annotated[str | None, Field(description="Only this agent's rules.")] = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """List what this room's agents wait for, and the rules that recently fired, expired,
    were cancelled or ended (ended_reason says why). Look here when you resume."""
    state = server_state(ctx)
    who = Who(room_id=room_id, agent_session_id=agent_session_id, worker_id=worker_id)
    query = {"agent_key": agent_key} if agent_key else None

    async def remote(acting: Acting) -> dict[str, Any]:
        return await state.work.call(acting, "GET", "wake-rules", query=query)

    async def local(room: str, session: AgentSession | None) -> dict[str, Any]:
        await trio.lowlevel.checkpoint()
        return {"note": LOCAL_ROOM_NOTE, "active": [], "recent": []}

    _, session, answer = await call_as(state, who, remote=remote, local=local)
    return ok(state, answer, session)


@expected_errors
async def cancel_wake_rule(
    ctx: ToolContext,
    rule_id: Annotated[
        str, Field(pattern=r"^wake_[a-z0-9]{1,40}$", description="The rule's id (wake_…).")
    ],
    room_id: RoomId = None,
    agent_session_id: SessionId = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Stop waiting: cancel one of your wake rules once you no longer need it."""
    state = server_state(ctx)
    who = Who(room_id=room_id, agent_session_id=agent_session_id, worker_id=worker_id)

    async def remote(acting: Acting) -> dict[str, Any]:
        return await state.work.call(acting, "POST", f"wake-rules/{rule_id}/cancel", body={})

    _, session, answer = await call_as(
        state, who, remote=remote, local=local_refusal(LOCAL_ROOM_NOTE), write=True
    )
    return ok(state, answer, session)
