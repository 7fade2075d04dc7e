"""The board tools: read the board, add tasks, claim and move them, give back their leases.

The room's task routes, through the host layer's
:class:`~letagents_trio.workers._room_work.RoomWork`; every write needs a worker
session, and the room's rules decide (the letagents API's):

* a task starts ``proposed``; a room admin accepts it; a worker claims an
  ``accepted`` task (``claim_task``), which assigns it to that worker and takes
  the task's work lease;
* the lease holder moves it on: ``in_progress``, ``blocked``, ``in_review``
  (``complete_task``, with a PR link); an admin closes it (``merged``,
  ``done``, ``cancelled``); every move follows the room's transition table;
* ``release_task_lease`` gives the work lease back (the task returns to
  ``accepted``), ``handoff_task_lease`` passes it to another live worker.

``get_board`` reads every page of ``GET …/tasks``; by default only open tasks
(not done or cancelled). ``claim_task`` reads the task first
(``GET …/tasks/{t}``) and refuses, naming its status, a task that is not
accepted. A refusal by the room is answered as the room's status and body.
Local rooms keep no board: every tool here answers :data:`LOCAL_BOARD_TEXT`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Annotated, Any, Final

# Tool signatures are evaluated at run time (the SDK reads them).
from mcp_types import CallToolResult  # noqa: TC002
from pydantic import Field

from ..workers._room_work import TaskStatus  # noqa: TC001 - read by the SDK at run time
from ._facade import (
    Deprecated,
    RoomId,
    SessionId,
    ToolContext,
    Who,
    WorkerId,
    call_as,
    expected_errors,
    failed,
    local_refusal,
    ok,
    server_state,
)

if TYPE_CHECKING:
    from ..workers._room_work import Acting

__all__ = [
    "BLANK_TITLE_TEXT",
    "LOCAL_BOARD_TEXT",
    "add_task",
    "claim_task",
    "complete_task",
    "get_board",
    "handoff_task_lease",
    "release_task_lease",
    "update_task",
]

# Ours: the room's refusal of a blank title also names created_by, which the tool fills in.
BLANK_TITLE_TEXT: Final = "title is empty: pass a short title for the task."
# Ours: local rooms keep their chat on this machine and nothing else.
LOCAL_BOARD_TEXT: Final = (
    "This room keeps its chat on this machine (chat storage: local), so it has no room server"
    " and no task board, task leases, room memory or requests for people. Coordinate with"
    " send_message and post_status."
)

TaskId = Annotated[str, Field(description="The task's id, e.g. 'task_3'.")]
LeaseId = Annotated[
    str | None,
    Field(description="The active work lease you expect (refused if it changed meanwhile)."),
]
Reason = Annotated[str | None, Field(description="Why, for the room's record.")]
# A governed room's approval (see _board_tools): the intent, and the decider's token if any.
BoardIntentId = Annotated[
    str | None,
    Field(description="The approved board intent this action carries out (governed rooms)."),
]
BoardApprovalToken = Annotated[
    str | None,
    Field(description="Its approval token; not needed when this worker registered the intent."),
]


def _approval(intent_id: str | None, token: str | None) -> dict[str, Any]:
    """The approval fields an action sends, those given."""
    given = {"board_intent_id": intent_id, "board_approval_token": token}
    return {key: value for key, value in given.items() if value is not None}


async def _board_call(
    ctx: ToolContext,
    who: Who,
    remote: Callable[[Acting], Awaitable[dict[str, Any]]],
    *,
    write: bool = True,
    key: str | None = "task",
) -> CallToolResult:
    """One board call as ``who``; the room's answer under ``key`` (or spread, for ``None``)."""
    state = server_state(ctx)
    _, session, answer = await call_as(
        state, who, remote=remote, local=local_refusal(LOCAL_BOARD_TEXT), write=write
    )
    payload: dict[str, Any] = {"success": True}
    if key is None:
        payload.update(answer)
    else:
        payload[key] = answer
    return ok(state, payload, session)


@expected_errors
async def get_board(
    ctx: ToolContext,
    status: Annotated[
        TaskStatus | None, Field(description="Only tasks in this status (needs open_only false).")
    ] = None,
    open_only: Annotated[
        bool | None,
        Field(description="Only tasks not done or cancelled (the default); false for all."),
    ] = None,
    room_id: RoomId = None,
    agent_session_id: SessionId = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Read the room's task board. Check it when you start and whenever you are idle:
    accepted tasks nobody holds are work you may claim."""
    state = server_state(ctx)
    who = Who(room_id=room_id, agent_session_id=agent_session_id, worker_id=worker_id)

    async def remote(acting: Acting) -> dict[str, Any]:
        return await state.work.board(acting, status=status, open_only=open_only is not False)

    return await _board_call(ctx, who, remote, write=False, key=None)


@expected_errors
async def add_task(
    ctx: ToolContext,
    title: Annotated[str, Field(description="A short title, e.g. 'Wire up the test runner'.")],
    description: Annotated[str | None, Field(description="What needs doing, in full.")] = None,
    source_message_id: Annotated[
        str | None, Field(description="The message where this work was agreed.")
    ] = None,
    created_by: Deprecated = None,
    room_id: RoomId = None,
    conversation_id: Deprecated = None,
    agent_session_id: SessionId = None,
    board_intent_id: BoardIntentId = None,
    board_approval_token: BoardApprovalToken = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Add a task to the room's board. It starts proposed: a room admin accepts it before
    anyone can claim it. Where the board needs approval, use register_task_create_intent."""
    state = server_state(ctx)
    if not title.strip():
        # The room's own text names created_by too, which a worker never passes.
        return failed(state, BLANK_TITLE_TEXT)
    who = Who(room_id=room_id, agent_session_id=agent_session_id, worker_id=worker_id)
    fields: dict[str, Any] = {"title": title, **_approval(board_intent_id, board_approval_token)}
    if description is not None:
        fields["description"] = description
    if source_message_id is not None:
        fields["source_message_id"] = source_message_id

    async def remote(acting: Acting) -> dict[str, Any]:
        return await state.work.add_task(acting, fields)

    return await _board_call(ctx, who, remote)


@expected_errors
async def claim_task(
    ctx: ToolContext,
    task_id: TaskId,
    assignee: Deprecated = None,
    room_id: RoomId = None,
    conversation_id: Deprecated = None,
    agent_session_id: SessionId = None,
    board_intent_id: BoardIntentId = None,
    board_approval_token: BoardApprovalToken = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Claim an accepted task: it is assigned to this worker, which takes its work lease.
    Only accepted tasks can be claimed; a proposed one waits for a room admin. Where the board
    needs approval, use register_task_claim_intent (approval claims it for you)."""
    state = server_state(ctx)
    who = Who(room_id=room_id, agent_session_id=agent_session_id, worker_id=worker_id)
    approval = _approval(board_intent_id, board_approval_token)

    async def remote(acting: Acting) -> dict[str, Any]:
        return await state.work.claim_task(acting, task_id, approval)

    return await _board_call(ctx, who, remote)


@expected_errors
async def update_task(
    ctx: ToolContext,
    task_id: TaskId,
    status: Annotated[
        TaskStatus | None,
        Field(
            description=(
                "The next status. Only moves the room allows are made (for example"
                " in_progress -> in_review, never proposed -> in_progress)."
            )
        ),
    ] = None,
    assignee: Annotated[str | None, Field(description="The task's assignee.")] = None,
    pr_url: Annotated[str | None, Field(description="A pull request to link.")] = None,
    workflow_artifacts: Annotated[
        list[dict[str, Any]] | None,
        Field(
            max_length=32,
            description=(
                "Workflow artifacts to link to the task (each: provider, kind, and id, number,"
                " title, url, ref or state); see publish_room_artifact."
            ),
        ),
    ] = None,
    title: Annotated[str | None, Field(description="A new title.")] = None,
    description: Annotated[str | None, Field(description="A new description.")] = None,
    room_id: RoomId = None,
    conversation_id: Deprecated = None,
    agent_session_id: SessionId = None,
    board_intent_id: BoardIntentId = None,
    board_approval_token: BoardApprovalToken = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Move a task you hold to another status, link its pull request and artifacts, or edit
    its text. Where the board needs approval, a close carries its approved board_intent_id."""
    state = server_state(ctx)
    who = Who(room_id=room_id, agent_session_id=agent_session_id, worker_id=worker_id)
    changes = {
        "status": status,
        "assignee": assignee,
        "pr_url": pr_url,
        "workflow_artifacts": workflow_artifacts,
        "title": title,
        "description": description,
    }
    fields = {key: value for key, value in changes.items() if value is not None}
    fields.update(_approval(board_intent_id, board_approval_token))

    async def remote(acting: Acting) -> dict[str, Any]:
        return await state.work.update_task(acting, task_id, fields)

    return await _board_call(ctx, who, remote)


@expected_errors
async def complete_task(
    ctx: ToolContext,
    task_id: TaskId,
    pr_url: Annotated[str | None, Field(description="The pull request with the work.")] = None,
    room_id: RoomId = None,
    conversation_id: Deprecated = None,
    agent_session_id: SessionId = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Submit a task you hold for review (in_review), with its pull request. A room admin
    closes it once the work is merged."""
    state = server_state(ctx)
    who = Who(room_id=room_id, agent_session_id=agent_session_id, worker_id=worker_id)
    fields: dict[str, Any] = {"status": "in_review"}
    if pr_url is not None:
        fields["pr_url"] = pr_url

    async def remote(acting: Acting) -> dict[str, Any]:
        return await state.work.update_task(acting, task_id, fields)

    return await _board_call(ctx, who, remote)


def _lease_fields(
    action: str, lease_id: str | None, reason: str | None, approval: dict[str, Any]
) -> dict[str, Any]:
    fields: dict[str, Any] = {"action": action, **approval}
    if lease_id is not None:
        fields["lease_id"] = lease_id
    if reason is not None:
        fields["reason"] = reason
    return fields


@expected_errors
async def release_task_lease(
    ctx: ToolContext,
    task_id: TaskId,
    lease_id: LeaseId = None,
    reason: Reason = None,
    room_id: RoomId = None,
    conversation_id: Deprecated = None,
    agent_session_id: SessionId = None,
    board_intent_id: BoardIntentId = None,
    board_approval_token: BoardApprovalToken = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Give back the work lease you hold on a task, so it can be claimed again (it returns
    to accepted). Use it when you are blocked or stop the work."""
    state = server_state(ctx)
    who = Who(room_id=room_id, agent_session_id=agent_session_id, worker_id=worker_id)
    fields = _lease_fields(
        "release", lease_id, reason, _approval(board_intent_id, board_approval_token)
    )

    async def remote(acting: Acting) -> dict[str, Any]:
        return await state.work.lease_action(acting, task_id, fields)

    return await _board_call(ctx, who, remote, key=None)


@expected_errors
async def handoff_task_lease(
    ctx: ToolContext,
    task_id: TaskId,
    target_agent_key: Annotated[
        str, Field(description="The agent key of the worker that takes the work over.")
    ],
    target_actor_instance_id: Annotated[
        str | None, Field(description="Its instance, when the key has several live sessions.")
    ] = None,
    target_agent_session_id: Annotated[
        str | None, Field(description="Its session, when the key has several live sessions.")
    ] = None,
    lease_id: LeaseId = None,
    reason: Reason = None,
    room_id: RoomId = None,
    conversation_id: Deprecated = None,
    agent_session_id: SessionId = None,
    board_intent_id: BoardIntentId = None,
    board_approval_token: BoardApprovalToken = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Hand the work lease you hold on a task to another live worker in the room: the task
    is assigned to it, with a fresh work lease."""
    state = server_state(ctx)
    who = Who(room_id=room_id, agent_session_id=agent_session_id, worker_id=worker_id)
    fields = _lease_fields(
        "handoff", lease_id, reason, _approval(board_intent_id, board_approval_token)
    )
    fields["target_actor_key"] = target_agent_key
    if target_actor_instance_id is not None:
        fields["target_actor_instance_id"] = target_actor_instance_id
    if target_agent_session_id is not None:
        fields["target_agent_session_id"] = target_agent_session_id

    async def remote(acting: Acting) -> dict[str, Any]:
        return await state.work.lease_action(acting, task_id, fields)

    return await _board_call(ctx, who, remote, key=None)
