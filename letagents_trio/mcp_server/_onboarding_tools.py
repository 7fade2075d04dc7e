"""Onboarding a chat: what is missing, signing in with the device flow, naming the agent.

The Node server's onboarding tools, over the host layer's sign-in
(:mod:`letagents_trio.workers._sign_in`):

* ``get_onboarding_status``: the API's health (``GET /api/health`` within
  :data:`HEALTH_TIMEOUT`), whether and how this server is signed in, a
  pending sign-in, the saved and the joined room, and the rooms the
  repository around ``cwd`` points at, with ``next_step``;
* ``start_device_auth``: a device sign-in (``user_code`` and
  ``verification_uri`` for the person, who approves it there), saved as
  ``pending_device_auth``; a pending one is reused unless ``force``;
* ``poll_device_auth``: once the person approved, the owner token is stored
  where the Node client stores a sign-in (``auth``), after which every tool
  works without ``LETAGENTS_TOKEN``; with ``auto_join`` it then joins the
  room named (``room_id``, else the one the sign-in was started for, else the
  joined one);
* ``clear_saved_auth``: forget the stored sign-in and the pending one, and
  nothing else;
* ``set_agent_name``: register the agent identity ``<login>/<slug>`` with the
  account (``POST /agents``) and save it as the state file's
  ``agent_identity``, or, with ``conversation_id``, keep it for that
  conversation in this process only.

These tools work with no token configured: that is what they are for. No
answer carries a token or the sign-in's request id.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Final

import trio

# Tool signatures are evaluated at run time (the SDK reads them).
from mcp_types import CallToolResult  # noqa: TC002
from pydantic import Field

from .._errors import ApiError, RoomUnreachable, WorkerError
from ..workers._joining import saved_room
from ..workers._names import (
    actor_label,
    looks_like_invite_code,
    normalize_agent_base_name,
    owner_attribution,
)
from ..workers._owner import account_login
from ..workers._repo_context import (
    config_room,
    git_branches,
    git_remote_room,
    git_root,
    room_context,
)
from ..workers._sign_in import clear_sign_in, pending_sign_in, poll_sign_in, start_sign_in
from ..workers._stateparts import iso_now
from ._facade import RoomId, ToolContext, WorkerId, blank, expected_errors, ok, server_state
from ._profiles import OWNER
from ._room_tools import join_identifier, public_room, room_link, worker_room

if TYPE_CHECKING:
    from ._facade import ServerState

__all__ = [
    "AUTH_REQUIRED_TEXT",
    "HEALTH_TIMEOUT",
    "clear_saved_auth",
    "get_onboarding_status",
    "poll_device_auth",
    "set_agent_name",
    "start_device_auth",
]

# Seconds the health check may take: the Node server's 1.5 s.
HEALTH_TIMEOUT: Final = 1.5
HEALTH_PATH: Final = "/api/health"
# The Node server's texts.
AUTH_REQUIRED_TEXT: Final = "Authentication required. Run start_device_auth first."
NAME_LENGTH_TEXT: Final = "Name must be between 2 and 64 characters."
SIGNED_IN_HINT: Final = (
    "You can change your agent's display name anytime using the set_agent_name tool."
)
AUTH_HINT: Final = (
    "Public Git Rooms and ad-hoc rooms can be joined without auth. Private Git Rooms require"
    " start_device_auth, browser verification, then poll_device_auth to persist a LetAgents token."
)
# Ours: what the person does with a started sign-in.
APPROVE_HINT: Final = (
    "Ask the person to open verification_uri, enter user_code and approve; then call"
    " poll_device_auth (every interval_seconds) until it answers authorized."
)
# Ours: the owner tools need the owner's credential (not a worker bearer, not a supervisor's).
OWNER_ONLY_TEXT: Final = "{tool} acts for the owner; this server runs with a worker's credential."


async def _health(state: ServerState) -> dict[str, Any]:
    url = state.config.api_url + HEALTH_PATH
    health: dict[str, Any] = {"url": url, "reachable": False, "status": None, "error": None}
    with trio.move_on_after(HEALTH_TIMEOUT):
        try:
            await state.client.call("GET", HEALTH_PATH)
        except ApiError as exc:
            health.update(status=exc.status, error=f"HTTP {exc.status}")
        except RoomUnreachable as exc:
            health["error"] = str(exc)
        else:
            health.update(reachable=True, status=200)
        return health
    health["error"] = f"no answer within {HEALTH_TIMEOUT:g} s"
    return health


def _url_hint(state: ServerState, health: Mapping[str, Any]) -> str | None:
    if health["reachable"]:
        return None
    host = (state.config.api_url.split("://", 1)[-1].split("/", 1)[0]).split(":", 1)[0]
    if host in ("localhost", "127.0.0.1"):
        return (
            "The MCP server is configured for a local LetAgents API, but the health check failed."
            " Start the local API, or set LETAGENTS_API_URL to the room's address and restart the"
            " MCP server."
        )
    return (
        "The configured LetAgents API did not pass the health check. join_room and auth tools"
        " may fail until the backend is reachable."
    )


@expected_errors
async def get_onboarding_status(
    ctx: ToolContext,
    cwd: Annotated[
        str | None,
        Field(
            description="Working directory to inspect for repo context. Defaults to the server's."
        ),
    ] = None,
) -> CallToolResult:
    """Inspect local Let Agents MCP auth and room-session state so a user can finish onboarding
    without guessing what is missing."""
    state = server_state(ctx)
    start = os.getcwd() if blank(cwd) else str(cwd)
    data = state.store.read().data
    auth = state.store.auth()
    pending = pending_sign_in(data, state.store.wall_clock)
    saved = saved_room(data)
    root = await git_root(start)
    configured = config_room(start)
    current_branch, default_branch = await git_branches(root) if root else (None, None)
    git = room_context(
        await git_remote_room(root) if root else None, current_branch, default_branch
    )
    from_config = room_context(configured, current_branch, default_branch) if configured else None
    health = await _health(state)
    authenticated = bool(state.config.token or auth)
    next_step = "join_room"
    if auth is None and pending is not None:
        next_step = "poll_device_auth"
    elif saved is not None and state.context.current_room is None:
        next_step = "resume_room_session"
    identity = data.get("agent_identity")
    return ok(
        state,
        {
            "api_url": state.config.api_url,
            "api_health": health,
            "api_url_hint": _url_hint(state, health),
            "local_state_path": str(state.store.path),
            "authenticated": authenticated,
            "auth_source": "env" if state.config.token else "local_state" if auth else "none",
            "auth_hint": None if authenticated else AUTH_HINT,
            "account": None if auth is None or auth.account is None else dict(auth.account),
            "token_expires_at": None if auth is None else auth.expires_at,
            "pending_device_auth": None if pending is None else pending.public(),
            "agent_identity": identity if isinstance(identity, Mapping) else None,
            "current_room": public_room(state, state.context.current_room),
            "saved_current_room": None if saved is None else _saved_public(state, saved),
            "detected_room_from_context": (
                (from_config.active_room if from_config else None) or git.active_room
            ),
            "configured_room_from_file": configured,
            "configured_active_room_from_context": from_config.active_room if from_config else None,
            "derived_repo_room_from_git": git.repo_room,
            "derived_active_git_room": git.active_room,
            "derived_branch_room_from_git": git.active_ref_room,
            "git_current_branch": git.current_branch,
            "git_default_branch": git.default_branch,
            "repo_root": root,
            "next_step": next_step,
        },
    )


def _saved_public(state: ServerState, saved: Mapping[str, Any]) -> dict[str, Any]:
    shown = public_room(state, saved) or {}
    shown.update(
        joined_at=saved.get("joined_at"),
        last_seen_at=saved.get("last_seen_at"),
        last_message_id=saved.get("last_message_id"),
    )
    return shown


def _owner_only(state: ServerState, tool: str) -> None:
    if state.config.mode != OWNER:
        raise WorkerError(OWNER_ONLY_TEXT.format(tool=tool))


@expected_errors
async def start_device_auth(
    ctx: ToolContext,
    room_id: Annotated[
        str | None, Field(description="Optional room to join once the sign-in is approved.")
    ] = None,
    force: Annotated[
        bool | None, Field(description="If true, replaces any pending device sign-in.")
    ] = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Start a device sign-in for Let Agents Chat and save it locally: a person opens
    verification_uri, enters user_code and approves; then poll_device_auth stores the token."""
    state = server_state(ctx)
    _owner_only(state, "start_device_auth")
    current = state.context.current_room
    suggested = (
        await worker_room(state, worker_id, room_id)
        or (None if current is None else current["room_id"])
        or config_room(os.getcwd())
    )
    pending, reused = await start_sign_in(
        state.client, state.store, suggested_room_id=suggested, force=bool(force)
    )
    answer: dict[str, Any] = {"success": True}
    if reused:
        answer["reused_existing_request"] = True
    return ok(state, {**answer, **pending.public(), "hint": APPROVE_HINT})


@expected_errors
async def poll_device_auth(
    ctx: ToolContext,
    request_id: Annotated[
        str | None,
        Field(description="The device sign-in to poll. Defaults to the locally saved pending one."),
    ] = None,
    room_id: RoomId = None,
    auto_join: Annotated[
        bool | None, Field(description="If true, joins the room once the sign-in is approved.")
    ] = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Poll the pending device sign-in. Once approved this stores the LetAgents token locally
    (every tool then works without LETAGENTS_TOKEN) and can join a room at once."""
    state = server_state(ctx)
    _owner_only(state, "poll_device_auth")
    wanted = await worker_room(state, worker_id, room_id)
    outcome = await poll_sign_in(
        state.client, state.store, request_id=None if blank(request_id) else request_id
    )
    if outcome.status != "authorized":
        polled = {"status": outcome.status, "interval": outcome.interval}
        if outcome.expires_in is not None:
            polled["expires_in"] = outcome.expires_in
        return ok(state, {"success": True, **polled})
    state.handles.forget_account()
    current = state.context.current_room
    target = (
        wanted or outcome.suggested_room_id or (None if current is None else current["room_id"])
    )
    joined: dict[str, Any] | None = None
    if auto_join and target:
        via = "join_code" if looks_like_invite_code(target) else "join_room"
        joined = await join_identifier(state, target, via)
    answer: dict[str, Any] = {
        "success": True,
        "status": "authorized",
        "account": None if outcome.account is None else dict(outcome.account),
        "expires_at": outcome.expires_at,
        "auto_joined_room": public_room(state, joined),
    }
    if joined is not None:
        answer.update(room_link(state, joined["room_id"]))
    answer["hint"] = SIGNED_IN_HINT
    return ok(state, answer)


@expected_errors
async def clear_saved_auth(ctx: ToolContext) -> CallToolResult:
    """Clear any locally saved LetAgents sign-in and pending device sign-in (nothing else)."""
    state = server_state(ctx)
    removed = await clear_sign_in(state.store)
    state.handles.forget_account()
    return ok(
        state,
        {
            "success": True,
            "removed": removed,
            "env_token_still_present": bool(state.config.token),
        },
    )


@expected_errors
async def set_agent_name(
    ctx: ToolContext,
    name: Annotated[
        str,
        Field(
            min_length=2,
            max_length=64,
            description="The desired display name for this agent (2-64 characters).",
        ),
    ],
    conversation_id: Annotated[
        str | None,
        Field(description="Optional conversation ID: only that conversation uses the new name."),
    ] = None,
) -> CallToolResult:
    """Set or change the agent's display name. The agent will be known by this name in the room.
    Use this to pick a custom name instead of the auto-generated codename."""
    state = server_state(ctx)
    _owner_only(state, "set_agent_name")
    shown = name.strip()
    if not 2 <= len(shown) <= 64:
        raise WorkerError(NAME_LENGTH_TEXT)
    if not state.client.has_owner_token:
        raise WorkerError(AUTH_REQUIRED_TEXT)
    login = await account_login(state.client, token_origin=state.config.token_origin)
    slug = normalize_agent_base_name(shown)
    key: str | None = f"{login}/{slug}"
    if blank(conversation_id):
        registered = await state.client.call(
            "POST", "/agents", json={"name": slug, "display_name": shown, "owner_label": login}
        )
        if isinstance(registered, Mapping) and isinstance(registered.get("canonical_key"), str):
            key = registered["canonical_key"]
    identity = {
        "name": slug,
        "display_name": shown,
        "owner_label": login,
        "owner_attribution": owner_attribution(login),
        "ide_label": state.config.ide_label,
        "actor_label": actor_label(shown, login, state.config.ide_label),
        "canonical_key": key,
        "source": "api" if blank(conversation_id) else "local",
        "resolved_at": iso_now(state.store.wall_clock),
    }
    if blank(conversation_id):

        def save(data: dict[str, Any]) -> None:
            data["agent_identity"] = identity

        await state.store.update(save)
    else:
        state.context.conversation_identities[str(conversation_id)] = identity
    return ok(
        state,
        {
            "success": True,
            "message": f'Agent name changed to "{shown}".',
            "agent_identity": identity,
        },
    )
