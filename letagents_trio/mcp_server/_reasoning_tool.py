"""``post_reasoning``: the worker's visible reasoning, replaced in place, not chat.

The tool finds this worker's open reasoning session in the room
(``GET …/reasoning-sessions?open=true&actor_label=``) and posts the snapshot
to it (``POST …/reasoning-sessions/{id}/updates``), or opens one
(``POST …/reasoning-sessions``) when it has none. A ``milestone`` is also
posted as a chat message, to stay in the room's history. Writes need a worker
session; the worker's actor label comes from its record in the state file.

In a local room nothing is sent: a milestone goes to the local chat, and the
answer describes the snapshot as kept locally (``local: true``).
"""

from __future__ import annotations

import functools
import uuid
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal

# Tool signatures are evaluated at run time (the SDK reads them).
from mcp_types import CallToolResult  # noqa: TC002
from pydantic import Field

from ..workers._stateparts import iso_now, mapping_at
from ._facade import (
    RoomId,
    SessionId,
    ToolContext,
    Who,
    WorkerId,
    call_as,
    expected_errors,
    ok,
    recheck,
    require_worker,
    server_state,
)

if TYPE_CHECKING:
    from .._session import AgentSession
    from ..workers._room_work import Acting
    from ._facade import ServerState

__all__ = ["post_reasoning"]

_FIELDS: Final = ("goal", "checking", "hypothesis", "blocker", "next_action", "milestone")


def _text(value: str | None) -> str | None:
    return (value.strip() or None) if value is not None else None


def stored_record(state: ServerState, session: AgentSession) -> dict[str, Any]:
    """This worker's record in the state file (actor label, agent key), or ``{}``."""
    sessions = mapping_at(state.store.read().data, "agent_sessions") or {}
    record = sessions.get(session.session_id)
    return dict(record) if isinstance(record, dict) else {}


@expected_errors
async def post_reasoning(
    ctx: ToolContext,
    summary: Annotated[str, Field(description="Your reasoning now, in a line or two.")],
    goal: Annotated[str | None, Field(description="What you are trying to achieve.")] = None,
    checking: Annotated[str | None, Field(description="What you are verifying.")] = None,
    hypothesis: Annotated[str | None, Field(description="Your working theory.")] = None,
    blocker: Annotated[str | None, Field(description="What blocks you, if anything.")] = None,
    next_action: Annotated[str | None, Field(description="Your next step.")] = None,
    milestone: Annotated[
        str | None, Field(description="Something durable that changed: also posted to chat.")
    ] = None,
    confidence: Annotated[float | None, Field(ge=0, le=1, description="From 0 to 1.")] = None,
    status: Annotated[
        Literal["idle", "working", "reviewing", "blocked"] | None,
        Field(description="Your presence state, if it changed."),
    ] = None,
    room_id: RoomId = None,
    conversation_id: Annotated[
        str | None, Field(description="Deprecated: the worker session names the writer.")
    ] = None,
    agent_session_id: SessionId = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Show the room what you are thinking without filling its chat: a structured trace
    (goal, hypothesis, what you check, blockers, next step) that each call replaces. Pass
    milestone when something durable changed, to keep it in the room's history too."""
    state = server_state(ctx)
    who = Who(room_id=room_id, agent_session_id=agent_session_id, worker_id=worker_id)
    given = {"goal": goal, "checking": checking, "hypothesis": hypothesis, "blocker": blocker}
    given.update({"next_action": next_action, "milestone": milestone})
    snapshot: dict[str, Any] = {"summary": summary.strip()}
    snapshot.update({name: _text(given[name]) for name in _FIELDS})
    snapshot.update({"confidence": confidence, "status": status})
    text = snapshot["milestone"]

    async def local(room: str, session: AgentSession | None) -> dict[str, Any]:
        worker = require_worker(session)
        message_id = None
        if text:
            check = functools.partial(recheck, state, who, room, worker)
            message_id = (await state.chat.send(worker, text, check=check)).get("id")
        label = stored_record(state, worker).get("actor_label") or worker.display_name
        now = iso_now()
        shown = {"id": f"local_reasoning:{label}", "actor_label": label, "summary": summary}
        shown.update({"status": status or "working", "latest_payload": snapshot})
        update = {"id": f"local_reasoning_update:{uuid.uuid4()}", "payload": snapshot}
        return {
            "room_id": room,
            "local": True,
            "session": {**shown, "updated_at": now},
            "update": {**update, "created_at": now},
            "milestone_message_id": message_id,
        }

    async def remote(acting: Acting) -> dict[str, Any]:
        worker = require_worker(acting.session)
        label = stored_record(state, worker).get("actor_label")
        found: list[Any] = []
        if label:
            query = {"open": "true", "actor_label": label}
            listed = await state.work.call(acting, "GET", "reasoning-sessions", query=query)
            found = [s for s in listed.get("sessions", ()) if isinstance(s, dict)]
        body = {key: value for key, value in snapshot.items() if value is not None}
        route = f"reasoning-sessions/{found[0]['id']}/updates" if found else "reasoning-sessions"
        answer = await state.work.call(acting, "POST", route, body=body)
        message_id = None
        if text:
            message_id = (await state.work.send(acting, text)).get("id")
        return {
            "room_id": answer.get("room_id", acting.room_id),
            "session": answer.get("session"),
            "update": answer.get("update"),
            "milestone_message_id": message_id,
        }

    if not snapshot["summary"]:
        return ok(state, {"success": False, "error": "summary is required"})
    _, session, answer = await call_as(state, who, remote=remote, local=local, write=True)
    return ok(state, {"success": True, **answer}, session)
