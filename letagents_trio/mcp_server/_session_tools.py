"""The session tools: a chat registers its worker, and ends it (PROTOCOL §5.1, §5.3, §5.8).

``register_agent_session`` creates, resumes or recovers this chat's durable
worker (:meth:`WorkerHandles.register <letagents_trio.workers.WorkerHandles.register>`),
or, without a ``worker_id``, ``registration_key`` or recovery, registers a
legacy session of this process (§5.8). ``disconnect_agent_session`` ends the
worker's session at the room and here. Profiles where a supervisor owns the
session lifecycle serve neither (see ``_tools.py``).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Annotated, Any, Final

import trio

# Tool signatures are evaluated at run time (the SDK reads them).
from mcp_types import CallToolResult  # noqa: TC002
from pydantic import Field

from ..workers._legacy import WORKER_BEARER_SESSION_ID
from ..workers._wire import public_session
from ._facade import (
    RoomId,
    SessionId,
    ToolContext,
    WorkerId,
    blank,
    expected_errors,
    ok,
    server_state,
)
from ._progress import REGISTRATION_PROGRESS, REGISTRATION_PROGRESS_INTERVAL, with_progress

if TYPE_CHECKING:
    from ..workers._results import WorkerRegistration
    from ._facade import ServerState

__all__ = [
    "INSTRUCTION",
    "NAME_NOTICE",
    "NO_CURRENT_ROOM",
    "RESUMED_WORK",
    "USE_AGENT_SESSION_ID",
    "USE_WORKER_BEARER_MARKER",
    "disconnect_agent_session",
    "register_agent_session",
]

# --- texts (PROTOCOL §5.1, §5.3, §5.8) -------------------------------------------------

INSTRUCTION: Final = (
    "Keep worker_id for this chat and pass it to room tools. After an MCP restart, reconnect"
    " with register_agent_session(worker_id, room_id). A separate chat needs its own"
    " registration_key. Credentials stay private to MCP."
)
NAME_NOTICE: Final = (
    '"{held}" is the name of a worker this MCP server registered in this room earlier and still'
    ' holds, so this chat was registered as "{given}". If this is a chat of its own, carry on'
    ' under that name. Only if this same chat registered as "{held}" before and lost its'
    " worker_id: call register_agent_session with recover_lost_worker true, this room_id and"
    ' display_name "{held}", then disconnect_agent_session for worker_id "{worker_id}".'
)
RESUMED_WORK: Final = (
    "An earlier session of this agent held these leases, and this session holds them now:"
    " {items}. Carry on with that work, or release what is not yours to do."
)
# The Node server's texts of the legacy path (tools/agent-sessions.ts).
USE_AGENT_SESSION_ID: Final = (
    "Pass this exact agent_session_id to wait_for_messages, send_message,"
    " send_thread_message, post_status, and task tools for this specific worker."
    " Do not rely on a shared current session."
)
USE_WORKER_BEARER_MARKER: Final = (
    "This local worker-bearer session marker may be passed to room tools. The supplied"
    " bearer remains the only server credential."
)
NO_CURRENT_ROOM: Final = {
    "success": False,
    "error": "No room_id provided and not currently in a room.",
    "hint": "Join a room first, or pass room_id explicitly.",
}


@expected_errors
async def register_agent_session(
    ctx: ToolContext,
    worker_id: Annotated[
        str | None, Field(description="A saved handle (worker_ + 32 hex) to resume.")
    ] = None,
    registration_key: Annotated[
        str | None,
        Field(
            description="A key of this chat's own, to create its worker once.",
            min_length=1,
            max_length=200,
        ),
    ] = None,
    room_id: Annotated[str | None, Field(description="The room to register in.")] = None,
    session_kind: Annotated[
        str | None, Field(description='"worker" or "controller".', pattern="^(worker|controller)$")
    ] = None,
    runtime: Annotated[str | None, Field(description="The agent runtime label.")] = None,
    display_name: Annotated[str | None, Field(description="The name to go by.")] = None,
    cwd: Annotated[str | None, Field(description="Working directory (for the git branch).")] = None,
    recover_lost_worker: Annotated[
        bool | None,
        Field(description="Recover the worker this server holds under display_name."),
    ] = None,
) -> CallToolResult:
    """Register this chat's worker in a room, or reconnect it by its worker_id."""
    state = server_state(ctx)
    if not recover_lost_worker and worker_id is None and registration_key is None:
        return await _register_legacy(state, room_id, session_kind, display_name, runtime, cwd)
    registration = await with_progress(
        ctx,
        functools.partial(
            state.handles.register,
            room_id=room_id,
            worker_id=worker_id,
            registration_key=registration_key,
            display_name=display_name,
            runtime=runtime,
            cwd=cwd,
            recover_lost_worker=bool(recover_lost_worker),
            session_kind=session_kind,
        ),
        message=REGISTRATION_PROGRESS,
        interval=REGISTRATION_PROGRESS_INTERVAL,
    )
    session = registration.session
    payload: dict[str, Any] = {
        "success": True,
        "worker_id": registration.worker_id,
        "agent_session": registration.public_session(),
    }
    if registration.name_held_here:
        payload["name_notice"] = NAME_NOTICE.format(
            held=registration.name_held_here,
            given=session.display_name,
            worker_id=registration.worker_id,
        )
    if registration.adopted_task_leases:
        payload["resumed_work"] = _resumed_work(registration)
    payload["instruction"] = INSTRUCTION
    return ok(state, payload, session)


def _resumed_work(registration: WorkerRegistration) -> str:
    items = ", ".join(
        f"{lease['task_id']} ({lease['kind']})" for lease in registration.adopted_task_leases
    )
    return RESUMED_WORK.format(items=items)


async def _register_legacy(
    state: ServerState,
    room_id: str | None,
    session_kind: str | None,
    display_name: str | None,
    runtime: str | None,
    cwd: str | None,
) -> CallToolResult:
    """The legacy path (PROTOCOL §5.8): a session of this process, answered compact
    like every other tool (Node's answer is pretty-printed).

    Without a room (this server joins none, so none is current) the answer is
    the Node server's ``success: false``; with a worker bearer, its marker.
    """
    if blank(room_id):
        await trio.lowlevel.checkpoint()
        return ok(state, NO_CURRENT_ROOM)
    registration = await state.handles.register_legacy(
        room_id=room_id,
        session_kind=session_kind,
        display_name=display_name,
        runtime=runtime,
        cwd=cwd,
    )
    session = registration.session
    marker = session.session_id == WORKER_BEARER_SESSION_ID
    payload: dict[str, Any] = {"success": True}
    if marker:
        payload["worker_bearer_mode"] = True
    payload["agent_session"] = registration.public_session()
    payload["agent_session_id"] = session.session_id
    if registration.adopted_task_leases:
        payload["resumed_work"] = _resumed_work(registration)
    payload["use_agent_session_id"] = USE_WORKER_BEARER_MARKER if marker else USE_AGENT_SESSION_ID
    return ok(state, payload, session)


@expected_errors
async def disconnect_agent_session(
    ctx: ToolContext,
    room_id: RoomId = None,
    agent_session_id: SessionId = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """End this chat's worker session in its room and stop holding its connection."""
    state = server_state(ctx)
    ended = await state.handles.disconnect(
        worker_id=None if blank(worker_id) else worker_id,
        agent_session_id=None if blank(agent_session_id) else agent_session_id,
        room_id=None if blank(room_id) else room_id,
    )
    return ok(state, {"success": True, "agent_session": public_session(ended)}, ended)
