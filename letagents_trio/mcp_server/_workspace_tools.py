"""Workspace captures: record a repository before editing it, then share the work.

``begin_workspace_capture`` and ``publish_workspace_capture`` run the host
layer's :class:`~letagents_trio.workers._workspace.WorkspaceCaptures` as this
worker: the capture belongs to the worker (its room, agent key and worker
id, read from its record in the state file) and to this room API. Only a
worker this process registered with the owner's credential captures: a
worker bearer's process has its supervisor's own capture, and a local room
has nowhere to share it (both answer the Node server's texts).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Annotated, Any, Final

# Tool signatures are evaluated at run time (the SDK reads them).
from mcp_types import CallToolResult  # noqa: TC002
from pydantic import Field

from .._errors import WorkerError
from ..workers._workspace import CaptureOwner
from ._facade import (
    SessionId,
    ToolContext,
    Who,
    WorkerId,
    call_as,
    expected_errors,
    local_refusal,
    ok,
    require_worker,
    server_state,
)
from ._profiles import OWNER
from ._reasoning_tool import stored_record

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..workers._room_work import Acting
    from ._facade import ServerState

__all__ = ["begin_workspace_capture", "publish_workspace_capture"]

# The Node server's texts.
SUPERVISED_TEXT: Final = (
    "Desktop-supervised agents already have automatic capture. These tools require an"
    " independent MCP worker."
)
LOCAL_TEXT: Final = (
    "Workspace sharing requires a hosted LetAgents room. Join the shared room before capturing."
)
RECONNECT_TEXT: Final = "Reconnect this worker with register_agent_session first."

CaptureRoom = Annotated[
    str, Field(min_length=1, max_length=512, description="The room the work is shared in.")
]


def _owner(state: ServerState, acting: Acting) -> CaptureOwner:
    worker = require_worker(acting.session)
    record = stored_record(state, worker)
    key, instance = record.get("agent_key"), record.get("agent_instance_id")
    if not isinstance(key, str) or not isinstance(instance, str) or not key or not instance:
        raise WorkerError(RECONNECT_TEXT)
    return CaptureOwner(
        api_url=state.config.api_url,
        room_id=acting.room_id,
        agent_key=key,
        agent_instance_id=instance,
    )


async def _run(state: ServerState, who: Who, call: Any) -> CallToolResult:
    if state.config.mode != OWNER:
        raise WorkerError(SUPERVISED_TEXT)
    _, session, answer = await call_as(
        state, who, remote=call, local=local_refusal(LOCAL_TEXT), write=True
    )
    return ok(state, answer, session)


@expected_errors
async def begin_workspace_capture(
    ctx: ToolContext,
    room_id: CaptureRoom,
    agent_session_id: SessionId = None,
    cwd: Annotated[
        str | None,
        Field(description="The repository (or worktree) folder; this server's folder if unset."),
    ] = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Before editing a repository for work shared in this room, record its starting files
    (tracked and non-ignored untracked). Nothing is posted: the files are read here. Keep
    the capture_id for publish_workspace_capture; asking again before publishing gives the
    same capture back."""
    state = server_state(ctx)
    who = Who(room_id=room_id, agent_session_id=agent_session_id, worker_id=worker_id)

    async def remote(acting: Acting) -> dict[str, Any]:
        return await state.captures.begin(_owner(state, acting), cwd or os.getcwd())

    return await _run(state, who, remote)


@expected_errors
async def publish_workspace_capture(
    ctx: ToolContext,
    room_id: CaptureRoom,
    capture_id: Annotated[
        str,
        Field(
            pattern=r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$",
            description="The id begin_workspace_capture gave for this piece of work.",
        ),
    ],
    summary: Annotated[
        str, Field(min_length=1, max_length=400, description="What changed, in plain words.")
    ],
    agent_session_id: SessionId = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """After editing, share this capture in the room as this worker: your summary as a
    message (do not post it again yourself), the changed files and the saved review. If
    it answers uploading, or fails, call it again with the same capture_id: it reuses
    the saved bytes and carries on."""
    state = server_state(ctx)
    who = Who(room_id=room_id, agent_session_id=agent_session_id, worker_id=worker_id)

    async def remote(acting: Acting) -> dict[str, Any]:
        owner = _owner(state, acting)
        label = stored_record(state, require_worker(acting.session)).get("actor_label")

        async def send(method: str, route: str, body: Mapping[str, Any]) -> dict[str, Any]:
            return await state.work.call(acting, method, route, body=dict(body))

        return await state.captures.publish(
            owner, capture_id.lower(), summary, sender=str(label or ""), send=send
        )

    return await _run(state, who, remote)
