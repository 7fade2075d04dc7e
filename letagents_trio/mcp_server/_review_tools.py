"""Review work and the task's record: review leases, verdicts, shared artifacts, room events.

* ``claim_task_review`` takes the review lease of a task in review for this
  worker (never the worker holding its work lease); ``release_task_review``
  gives it back;
* ``submit_review_verdict``: the review lease holder's verdict (``approve``,
  ``request_changes`` or ``comment``) on the task's pull request, naming the
  exact 40-hex head it reviewed and an idempotency key (the same key again is
  the same verdict, never a second one); ``success`` says whether it was
  published;
* ``get_room_artifacts`` / ``publish_room_artifact``: the room's shared
  workflow artifacts (PRs, branches, issues, reviews, checks, merges) and the
  tasks they are linked to;
* ``get_room_events``: a page of the room's event record (``after`` the last
  event id seen), filtered by type, object, actor and time.

Review work needs a worker session; the record is read and published by the
room's agents and admins. The room checks the rest and answers a refusal
with its status and text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, Literal

# Tool signatures are evaluated at run time (the SDK reads them).
from mcp_types import CallToolResult  # noqa: TC002
from pydantic import Field

from ..workers._board_work import BoardWork
from ._board_tools import board_call
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
    "claim_task_review",
    "get_room_artifacts",
    "get_room_events",
    "publish_room_artifact",
    "release_task_review",
    "submit_review_verdict",
]

TaskId = Annotated[str, Field(description="The task in review, e.g. 'task_1'.")]
Reason = Annotated[str | None, Field(description="Why, for the room's record.")]


@expected_errors
async def claim_task_review(
    ctx: ToolContext,
    task_id: TaskId,
    reason: Reason = None,
    room_id: RoomId = None,
    conversation_id: Deprecated = None,
    agent_session_id: SessionId = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Take board review authority for a task in review: a review lease for this worker.
    Refused to the worker holding the task's work lease."""
    fields: dict[str, Any] = {"action": "claim"}
    if reason is not None:
        fields["reason"] = reason

    async def remote(board: BoardWork, acting: Acting) -> dict[str, Any]:
        return await board.review_lease(acting, task_id, fields)

    return await board_call(
        ctx,
        Who(room_id=room_id, agent_session_id=agent_session_id, worker_id=worker_id),
        remote,
        write=True,
    )


@expected_errors
async def release_task_review(
    ctx: ToolContext,
    task_id: TaskId,
    lease_id: Annotated[
        str | None, Field(description="The review lease (default: this worker's).")
    ] = None,
    reason: Reason = None,
    room_id: RoomId = None,
    conversation_id: Deprecated = None,
    agent_session_id: SessionId = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Give back the review lease this worker holds on a task."""
    fields: dict[str, Any] = {"action": "release"}
    if lease_id is not None:
        fields["lease_id"] = lease_id
    if reason is not None:
        fields["reason"] = reason

    async def remote(board: BoardWork, acting: Acting) -> dict[str, Any]:
        return await board.review_lease(acting, task_id, fields)

    return await board_call(
        ctx,
        Who(room_id=room_id, agent_session_id=agent_session_id, worker_id=worker_id),
        remote,
        write=True,
    )


@expected_errors
async def submit_review_verdict(
    ctx: ToolContext,
    task_id: TaskId,
    verdict: Annotated[
        Literal["approve", "request_changes", "comment"], Field(description="The verdict.")
    ],
    expected_head_sha: Annotated[
        str,
        Field(
            pattern=r"^[0-9a-fA-F]{40}$",
            description="The exact 40-hex head commit of the pull request you reviewed.",
        ),
    ],
    idempotency_key: Annotated[
        str,
        Field(
            min_length=1,
            max_length=200,
            description="A key for this verdict; reuse it only to replay exactly this verdict.",
        ),
    ],
    body: Annotated[
        str | None, Field(max_length=65_536, description="The review's explanation.")
    ] = None,
    room_id: RoomId = None,
    conversation_id: Deprecated = None,
    agent_session_id: SessionId = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Submit your review verdict on a task's pull request. This worker must hold the task's
    review lease (claim_task_review). A replay with the same idempotency_key answers the same
    verdict; do not make up a new key to retry one."""
    state = server_state(ctx)
    fields = {
        "verdict": verdict,
        "body": body or "",
        "expected_head_sha": expected_head_sha.lower(),
        "idempotency_key": idempotency_key,
    }

    async def remote(acting: Acting) -> dict[str, Any]:
        return await BoardWork(state.work).verdict(acting, task_id, fields)

    who = Who(room_id=room_id, agent_session_id=agent_session_id, worker_id=worker_id)
    _, session, answer = await call_as(
        state, who, remote=remote, local=local_refusal(LOCAL_BOARD_TEXT), write=True
    )
    effect = answer.get("effect") if isinstance(answer.get("effect"), dict) else {}
    published = effect.get("state") == "succeeded"
    message = (
        "The review was published."
        if published
        else f"review publication {effect.get('state') or 'outcome unknown'} for {task_id}."
        " The returned effect is the publication record; do not submit a new"
        " idempotency key to retry it."
    )
    return ok(state, {**answer, "success": published, "message": message}, session)


@expected_errors
async def get_room_artifacts(
    ctx: ToolContext,
    task_id: Annotated[str | None, Field(description="Only artifacts linked to this task.")] = None,
    limit: Annotated[
        int | None, Field(ge=1, le=250, description="At most this many (default 100).")
    ] = None,
    room_id: RoomId = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Read the room's shared workflow artifacts (PRs, branches, issues, reviews, checks,
    merges) and the tasks each is linked to, newest first."""

    async def remote(board: BoardWork, acting: Acting) -> dict[str, Any]:
        return await board.artifacts(acting, task_id=task_id, limit=limit)

    return await board_call(
        ctx, Who(room_id=room_id, agent_session_id=None, worker_id=worker_id), remote
    )


@expected_errors
async def publish_room_artifact(
    ctx: ToolContext,
    artifact: Annotated[
        dict[str, Any],
        Field(
            description=(
                "The artifact: provider (git, github, gitlab, bitbucket, unknown), kind (issue,"
                " branch, commit, diff, change_summary, pull_request, merge_request, review,"
                " check_run, merge), and at least one of url, id, number or ref; optional"
                " title and state."
            )
        ),
    ],
    task_id: Annotated[str | None, Field(description="A task to link it to.")] = None,
    linked_task_ids: Annotated[
        list[str] | None, Field(max_length=32, description="More tasks to link it to.")
    ] = None,
    room_id: RoomId = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Publish a workflow artifact to the room's shared list, linked to tasks; publishing it
    again (same url, or same provider, kind and id/number/ref) updates it."""
    fields: dict[str, Any] = {"artifact": artifact}
    if task_id is not None:
        fields["task_id"] = task_id
    if linked_task_ids is not None:
        fields["linked_task_ids"] = linked_task_ids

    async def remote(board: BoardWork, acting: Acting) -> dict[str, Any]:
        return await board.publish(acting, fields)

    return await board_call(
        ctx, Who(room_id=room_id, agent_session_id=None, worker_id=worker_id), remote
    )


@expected_errors
async def get_room_events(
    ctx: ToolContext,
    event_type: Annotated[
        str | None,
        Field(
            description=(
                "Only this type: task, board_intent, board_manager, board_settings,"
                " pull_request, review_lease, pull_request_review, artifact."
            )
        ),
    ] = None,
    object_id: Annotated[str | None, Field(description="Only events about this object.")] = None,
    actor: Annotated[str | None, Field(description="Only events by this actor.")] = None,
    since: Annotated[str | None, Field(description="ISO time: events from then on.")] = None,
    until: Annotated[str | None, Field(description="ISO time: events up to then.")] = None,
    after: Annotated[
        str | None, Field(description="The last event id you have read (next page).")
    ] = None,
    limit: Annotated[
        int | None, Field(ge=1, le=100, description="At most this many (default 50).")
    ] = None,
    room_id: RoomId = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Read what happened in the room, oldest first: tasks created and moved, intents and
    their decisions, review leases and verdicts, linked PRs and published artifacts. Page on
    with after (the last id) while has_more."""
    given = {
        "event_type": event_type,
        "object_id": object_id,
        "actor": actor,
        "since": since,
        "until": until,
        "after": after,
        "limit": limit,
    }
    query = {key: value for key, value in given.items() if value is not None}
    state = server_state(ctx)

    async def remote(acting: Acting) -> dict[str, Any]:
        return await BoardWork(state.work).events(acting, query)

    _, session, answer = await call_as(
        state,
        Who(room_id=room_id, agent_session_id=None, worker_id=worker_id),
        remote=remote,
        local=local_refusal(LOCAL_BOARD_TEXT),
    )
    events = answer.get("events") if isinstance(answer.get("events"), list) else []
    return ok(
        state,
        {"success": True, "events": events, "has_more": bool(answer.get("has_more"))},
        session,
    )
