"""The intent tools: ask a governed room's approval for a high-impact board action.

In a room whose board is governed (see ``_board_tools``), a worker registers an
intent for what it means to do, the Board Manager (or a room admin) decides
it, and the approval is carried out:

* ``register_task_create_intent``: approval creates the task (no ``add_task``);
* ``register_task_claim_intent``: approval assigns the task to this worker
  with its work lease (no ``claim_task``);
* ``register_task_close_intent`` and ``register_task_lease_action_intent``:
  approval is followed up by the exact action (``update_task``,
  ``release_task_lease``, ``handoff_task_lease``) with ``board_intent_id``;
  this worker's own session carries it out, or the ``board_approval_token``
  the decider received;
* ``register_board_intent``: any action type with a payload given as is.

The typed tools build the payload the room later rebuilds from the action
(:mod:`letagents_trio.workers._intent_payloads`), so the two hash alike: pass the
same values to the follow-up. Every registration needs a worker session.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

# Tool signatures are evaluated at run time (the SDK reads them).
from mcp_types import CallToolResult  # noqa: TC002
from pydantic import Field

from .._errors import WorkerError
from ..workers._board_work import active_work_lease_id
from ..workers._intent_payloads import (
    create_intent_payload,
    lease_intent_payload,
    mutation_intent_payload,
)
from ._board_tools import board_call
from ._facade import Deprecated, RoomId, SessionId, ToolContext, Who, WorkerId, expected_errors

if TYPE_CHECKING:
    from ..workers._board_work import BoardWork
    from ..workers._room_work import Acting

__all__ = [
    "HANDOFF_TARGET_TEXT",
    "NO_WORK_LEASE_TEXT",
    "register_board_intent",
    "register_task_claim_intent",
    "register_task_close_intent",
    "register_task_create_intent",
    "register_task_lease_action_intent",
]

# The Node tools' texts.
HANDOFF_TARGET_TEXT = "target_agent_key is required for handoff intent."
NO_WORK_LEASE_TEXT = (
    "No active work lease exists for this task; pass lease_id if you are approving a specific"
    " lease action."
)

TaskId = Annotated[str, Field(description="The task's id, e.g. 'task_12'.")]


async def _register(
    ctx: ToolContext,
    who: Who,
    action_type: str,
    payload: dict[str, Any],
    task_id: str | None = None,
) -> CallToolResult:
    fields: dict[str, Any] = {"action_type": action_type, "payload": payload}
    if task_id is not None:
        fields["task_id"] = task_id

    async def remote(board: BoardWork, acting: Acting) -> dict[str, Any]:
        return await board.register(acting, fields)

    return await board_call(ctx, who, remote, write=True)


@expected_errors
async def register_board_intent(
    ctx: ToolContext,
    action_type: Annotated[
        Literal["task_create", "task_claim", "task_close", "task_override", "task_update"],
        Field(description="The high-impact board action proposed."),
    ],
    payload: Annotated[
        dict[str, Any],
        Field(
            description="The exact payload of the later action: it must match it field by field."
        ),
    ],
    task_id: Annotated[str | None, Field(description="The task, for a task's intent.")] = None,
    room_id: RoomId = None,
    conversation_id: Deprecated = None,
    agent_session_id: SessionId = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Advanced: register a board intent with an exact payload. Prefer the typed
    register_task_*_intent tools, whose payloads match the later action's."""
    who = Who(room_id=room_id, agent_session_id=agent_session_id, worker_id=worker_id)
    return await _register(ctx, who, action_type, payload, task_id)


@expected_errors
async def register_task_create_intent(
    ctx: ToolContext,
    title: Annotated[str, Field(description="The task's title, as add_task would send it.")],
    description: Annotated[str | None, Field(description="Its description.")] = None,
    source_message_id: Annotated[
        str | None, Field(description="The message where the work was agreed.")
    ] = None,
    room_id: RoomId = None,
    conversation_id: Deprecated = None,
    agent_session_id: SessionId = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Ask approval to add a task, instead of add_task when the room needs Board Manager
    approval (for example when its coordinator is offline). Approval creates the task."""
    who = Who(room_id=room_id, agent_session_id=agent_session_id, worker_id=worker_id)
    payload = create_intent_payload(title, description, source_message_id)
    return await _register(ctx, who, "task_create", payload)


@expected_errors
async def register_task_claim_intent(
    ctx: ToolContext,
    task_id: TaskId,
    room_id: RoomId = None,
    conversation_id: Deprecated = None,
    agent_session_id: SessionId = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Ask approval to claim an accepted task as this worker. Approval assigns the task and
    its work lease to this worker at once: no claim_task call is needed afterwards."""
    who = Who(room_id=room_id, agent_session_id=agent_session_id, worker_id=worker_id)

    async def remote(board: BoardWork, acting: Acting) -> dict[str, Any]:
        extra = {} if acting.session is None else acting.session.extra
        label, key = extra.get("actor_label"), extra.get("agent_key")
        payload = mutation_intent_payload(
            task_id,
            status="assigned",
            assignee=label if isinstance(label, str) and label else None,
            assignee_agent_key=key if isinstance(key, str) and key else None,
        )
        fields = {"action_type": "task_claim", "payload": payload, "task_id": task_id}
        return await board.register(acting, fields)

    return await board_call(ctx, who, remote, write=True)


@expected_errors
async def register_task_close_intent(
    ctx: ToolContext,
    task_id: TaskId,
    status: Annotated[
        Literal["merged", "done", "cancelled"],
        Field(description="The closing status update_task will set."),
    ],
    pr_url: Annotated[
        str | None, Field(description="The PR link update_task will send with it, if any.")
    ] = None,
    room_id: RoomId = None,
    conversation_id: Deprecated = None,
    agent_session_id: SessionId = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Ask approval to close a task (merged, done or cancelled). Once approved, call
    update_task with the same status and pr_url and board_intent_id."""
    who = Who(room_id=room_id, agent_session_id=agent_session_id, worker_id=worker_id)
    payload = mutation_intent_payload(task_id, status=status, pr_url=pr_url)
    return await _register(ctx, who, "task_close", payload, task_id)


@expected_errors
async def register_task_lease_action_intent(
    ctx: ToolContext,
    task_id: TaskId,
    action: Annotated[Literal["release", "handoff"], Field(description="The lease action.")],
    lease_id: Annotated[
        str | None,
        Field(description="The work lease it acts on (default: the task's active one)."),
    ] = None,
    target_agent_key: Annotated[
        str | None, Field(description="The agent key of the worker taking over (handoff).")
    ] = None,
    target_agent_session_id: Annotated[
        str | None, Field(description="Its session, as handoff_task_lease will send it.")
    ] = None,
    room_id: RoomId = None,
    conversation_id: Deprecated = None,
    agent_session_id: SessionId = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Ask approval to release or hand off a task's work lease. Once approved, call
    release_task_lease or handoff_task_lease with the same values and board_intent_id."""
    if action == "handoff" and not target_agent_key:
        raise WorkerError(HANDOFF_TARGET_TEXT)
    who = Who(room_id=room_id, agent_session_id=agent_session_id, worker_id=worker_id)

    async def remote(board: BoardWork, acting: Acting) -> dict[str, Any]:
        lease = lease_id or active_work_lease_id(await board.work.task(acting, task_id))
        if not lease:
            raise WorkerError(NO_WORK_LEASE_TEXT)
        payload = lease_intent_payload(
            task_id, action, lease, target_agent_key, target_agent_session_id
        )
        fields = {"action_type": "task_override", "payload": payload, "task_id": task_id}
        return await board.register(acting, fields)

    return await board_call(ctx, who, remote, write=True)
