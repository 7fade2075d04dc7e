"""The Board Manager tools: a room's board settings, its manager, and deciding intents.

A room may govern its board: in mode ``intent_required`` (or
``manager_optional`` while a Board Manager is assigned), an agent's task
creates, claims, closes, reopens and work-lease releases or handoffs need an
approved *board intent* (registered with the tools of ``_intent_tools``).
These tools read and change that governance, through the host layer's
:class:`~letagents_trio.workers._board_work.BoardWork`:

* ``get_board_settings``: the mode, the active Board Manager, the pending count;
* ``set_board_manager_mode``, ``assign_board_manager`` (a live worker session,
  by its ``agent_session_id``: the target, not who calls; ``worker_id`` is who
  calls, as everywhere),
  ``release_board_manager``: the room's admins only (the room checks the
  owner's bearer);
* ``list_board_intents``, ``approve_board_intent``, ``deny_board_intent``: the
  active Board Manager decides with its ``worker_id``, an admin without one.

Approving a create intent creates the task, and a worker's claim intent
assigns it with its work lease (nothing to follow up); other approvals answer
a one-time ``approval_token``. The room decides who may do what; a refusal is
the room's status and text. Every answer is the room's, with ``success``.
Local rooms keep no board (:data:`~._task_tools.LOCAL_BOARD_TEXT`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, Literal

# Tool signatures are evaluated at run time (the SDK reads them).
from mcp_types import CallToolResult  # noqa: TC002
from pydantic import Field

from ..workers._board_work import BoardWork
from ._facade import (
    Deprecated,
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
from ._task_tools import LOCAL_BOARD_TEXT

if TYPE_CHECKING:
    from ..workers._room_work import Acting

__all__ = [
    "approve_board_intent",
    "assign_board_manager",
    "board_call",
    "deny_board_intent",
    "get_board_settings",
    "list_board_intents",
    "release_board_manager",
    "set_board_manager_mode",
]

IntentId = Annotated[str, Field(description="The board intent's id, e.g. 'bi_…'.")]
DecisionReason = Annotated[str | None, Field(description="A short reason, for the record.")]


async def board_call(
    ctx: ToolContext,
    who: Who,
    remote: Callable[[BoardWork, Acting], Awaitable[dict[str, Any]]],
    *,
    write: bool = False,
) -> CallToolResult:
    """One governed-board call as ``who``: the room's answer with ``success``, spread."""
    state = server_state(ctx)
    board = BoardWork(state.work)

    async def call(acting: Acting) -> dict[str, Any]:
        return await remote(board, acting)

    _, session, answer = await call_as(
        state, who, remote=call, local=local_refusal(LOCAL_BOARD_TEXT), write=write
    )
    return ok(state, {"success": True, **answer}, session)


@expected_errors
async def get_board_settings(
    ctx: ToolContext, room_id: RoomId = None, worker_id: WorkerId = None
) -> CallToolResult:
    """Read the room's Board Manager mode, the active Board Manager and how many intents are
    pending. In intent_required mode (or manager_optional with a manager), task creates, claims,
    closes and lease releases or handoffs need an approved board intent."""
    who = Who(room_id=room_id, agent_session_id=None, worker_id=worker_id)
    return await board_call(ctx, who, lambda board, acting: board.settings(acting))


@expected_errors
async def set_board_manager_mode(
    ctx: ToolContext,
    manager_mode: Annotated[
        Literal["off", "manager_optional", "intent_required"],
        Field(
            description=(
                "off: no approvals; manager_optional: approvals while a Board Manager is"
                " assigned; intent_required: agents' high-impact board actions always need one."
            )
        ),
    ],
    manager_failover: Annotated[
        Literal["off", "announce", "auto"] | None,
        Field(description="What to do when the Board Manager goes offline (recorded)."),
    ] = None,
    room_id: RoomId = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Set the room's Board Manager mode. Room admins only. Prefer manager_optional unless a
    person asked that every high-impact agent board action be approved."""
    who = Who(room_id=room_id, agent_session_id=None, worker_id=worker_id)
    fields: dict[str, Any] = {"manager_mode": manager_mode}
    if manager_failover is not None:
        fields["manager_failover"] = manager_failover
    return await board_call(ctx, who, lambda board, acting: board.set_mode(acting, fields))


@expected_errors
async def assign_board_manager(
    ctx: ToolContext,
    agent_session_id: Annotated[
        str, Field(description="The live worker session to promote (the target, not the caller).")
    ],
    runtime_source: Annotated[
        Literal["desktop_managed", "open_model", "external", "unknown"] | None,
        Field(description="Where that worker runs, for the record."),
    ] = None,
    room_id: RoomId = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Promote a live worker session of the room to Board Manager (replacing any other).
    Room admins only. The Board Manager lists and decides the room's board intents."""
    who = Who(room_id=room_id, agent_session_id=None, worker_id=worker_id)
    fields: dict[str, Any] = {"agent_session_id": agent_session_id}
    if runtime_source is not None:
        fields["runtime_source"] = runtime_source
    return await board_call(ctx, who, lambda board, acting: board.assign_manager(acting, fields))


@expected_errors
async def release_board_manager(
    ctx: ToolContext,
    reason: Annotated[str | None, Field(description="Why the manager is released.")] = None,
    room_id: RoomId = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Release the room's active Board Manager. Room admins only."""
    who = Who(room_id=room_id, agent_session_id=None, worker_id=worker_id)
    fields = {} if reason is None else {"reason": reason}
    return await board_call(ctx, who, lambda board, acting: board.release_manager(acting, fields))


@expected_errors
async def list_board_intents(
    ctx: ToolContext,
    status: Annotated[
        Literal["pending", "approved", "denied", "expired", "used", "superseded"] | None,
        Field(description="Only intents in this status."),
    ] = None,
    room_id: RoomId = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """List the room's board intents, oldest first. A Board Manager checks the pending ones
    and decides each with approve_board_intent or deny_board_intent."""
    who = Who(room_id=room_id, agent_session_id=None, worker_id=worker_id)
    return await board_call(ctx, who, lambda board, acting: board.intents(acting, status))


async def _decide(
    ctx: ToolContext, who: Who, intent_id: str, verb: str, reason: str | None
) -> CallToolResult:
    fields = {} if reason is None else {"reason": reason}
    return await board_call(
        ctx, who, lambda board, acting: board.decide(acting, intent_id, verb, fields)
    )


@expected_errors
async def approve_board_intent(
    ctx: ToolContext,
    intent_id: IntentId,
    reason: DecisionReason = None,
    room_id: RoomId = None,
    conversation_id: Deprecated = None,
    agent_session_id: SessionId = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Approve a pending board intent (the active Board Manager, or a room admin). A
    task_create intent creates the task now (result.kind task_created: do not call add_task);
    a worker's task_claim intent assigns the task and its work lease (task_claimed,
    requires_follow_up false: do not call claim_task). Other intents answer an approval_token
    for the proposer's exact follow-up; never post the token in the room."""
    who = Who(room_id=room_id, agent_session_id=agent_session_id, worker_id=worker_id)
    return await _decide(ctx, who, intent_id, "approve", reason)


@expected_errors
async def deny_board_intent(
    ctx: ToolContext,
    intent_id: IntentId,
    reason: DecisionReason = None,
    room_id: RoomId = None,
    conversation_id: Deprecated = None,
    agent_session_id: SessionId = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Deny a pending board intent, with a short reason (the active Board Manager, or a room
    admin). The proposer is told not to perform the action."""
    who = Who(room_id=room_id, agent_session_id=agent_session_id, worker_id=worker_id)
    return await _decide(ctx, who, intent_id, "deny", reason)
