"""Finding, joining and making rooms from a chat, and what its repository says about them.

The Node server's room tools, over the host layer's joining
(:mod:`letagents_trio.workers._joining`) and repository context
(:mod:`letagents_trio.workers._repo_context`):

* ``create_room`` (and its legacy alias ``create_project``): a new invite room
  (``POST /projects``), joined by its code;
* ``join_code`` (alias ``join_project``) and ``join_room``: ``POST
  /rooms/{room}/join`` by invite code or by name (a named room is made on its
  first join); a code no room has is a tool error naming the code;
* ``resume_room_session``: rejoin the room saved in the state file (the last
  joined, or ``room_id``'s), e.g. after a restart;
* ``get_current_room``: the room joined in this process, and the sign-in;
* ``check_repo``, ``initialize_repo`` and ``check_repo_visibility``: the
  repository around ``cwd`` (git root, ``.letagents.json``, the rooms its
  remote and branch point at), writing ``.letagents.json`` (never over an
  existing one), and whether the repository is public.

A join is remembered in the state file (``room_sessions``, ``current_room``)
and in this process (:class:`~._chat_context.ChatContext`). ``session_mode``
``live`` asks the Node server for a detached local Codex worker, which this
server does not run: it is refused. A worker is registered in the joined
room afterwards, with ``register_agent_session``; every join answer says so.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final, Literal
from urllib.parse import urlsplit

import trio

# Tool signatures are evaluated at run time (the SDK reads them).
from mcp_types import CallToolResult  # noqa: TC002
from pydantic import Field

from .._client import encode_room_path
from .._errors import LetAgentsError, WorkerError
from ..workers._joining import create_invite_room, saved_room
from ..workers._joining import join_room as join_by
from ..workers._repo_context import (
    CONFIG_FILE,
    config_room,
    find_config_dir,
    git_branches,
    git_remote_room,
    git_root,
    read_config,
    repo_visibility,
    room_context,
)
from ._facade import ToolContext, WorkerId, blank, expected_errors, ok, server_state
from ._profiles import SUPERVISED, SUPERVISED_CREDENTIAL_TEXT

if TYPE_CHECKING:
    from ._facade import ServerState

__all__ = [
    "LIVE_MODE_TEXT",
    "check_repo",
    "check_repo_visibility",
    "create_project",
    "create_room",
    "get_current_room",
    "initialize_repo",
    "join_code",
    "join_project",
    "join_room",
    "public_room",
    "resume_room_session",
    "room_link",
]

# Ours: the Node server's live mode starts a local Codex worker, which is not ours to run.
LIVE_MODE_TEXT: Final = (
    "session_mode 'live' starts a detached local Codex worker in the Node server; this server"
    " does not run one. Join with session_mode 'current' (the default)."
)
# Ours: what a chat does once it joined.
NEXT_STEP: Final = (
    "Register this chat's worker here with register_agent_session (room_id {room_id!r} and a"
    " registration_key of your own), then pass its worker_id to the room tools."
)
NO_SAVED_ROOM_TEXT: Final = "No saved room session found."
NOT_A_REPO_TEXT: Final = "Not inside a git repository"
NO_REMOTE_TEXT: Final = "Not in a git repository or no remote configured"

Code = Annotated[str, Field(description="The invite code shared for the room (e.g. 'ABCX-7291').")]
SessionMode = Annotated[
    Literal["live", "current"] | None,
    Field(description="'current' (the default) joins inline; 'live' is not supported here."),
]
Cwd = Annotated[
    str | None, Field(description="Directory to inspect. Defaults to the server's directory.")
]


def room_link(state: ServerState, room_id: str) -> dict[str, str]:
    """``room_path`` and ``room_url`` of a room's page (``/in/<room>`` on the API's host)."""
    path = "/in/" + encode_room_path(room_id)
    parts = urlsplit(state.config.api_url)
    return {"room_path": path, "room_url": f"{parts.scheme}://{parts.netloc}{path}"}


def public_room(state: ServerState, room: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """A joined room as the tools show it, with its page's address."""
    if room is None:
        return None
    room_id = str(room["room_id"])
    return {
        "room_id": room_id,
        "code": room.get("code"),
        "display_name": room.get("display_name"),
        "joined_via": room.get("joined_via"),
        **room_link(state, room_id),
    }


def _check_can_call(state: ServerState) -> None:
    if state.config.mode == SUPERVISED:
        raise WorkerError(SUPERVISED_CREDENTIAL_TEXT)


def _remember_here(state: ServerState, session: Mapping[str, Any]) -> dict[str, Any]:
    state.context.current_room = {
        key: session.get(key)
        for key in ("room_id", "project_id", "code", "display_name", "joined_via")
    }
    return state.context.current_room


async def join_identifier(state: ServerState, identifier: str, joined_via: str) -> dict[str, Any]:
    """Join a room by ``identifier`` and remember it (file and process); the room's session."""
    _check_can_call(state)
    session, _ = await join_by(state.client, state.store, identifier, joined_via)
    return _remember_here(state, session)


def _join_answer(
    state: ServerState, answer: Mapping[str, Any], room_id: str, joined_via: str, mode: str
) -> dict[str, Any]:
    shown = {k: v for k, v in answer.items() if k not in ("id", "project_id")}
    return {
        **shown,
        **room_link(state, room_id),
        "room_id": room_id,
        "joined_via": joined_via,
        "session_mode": mode,
        "next_step": NEXT_STEP.format(room_id=room_id),
    }


async def _join(
    ctx: ToolContext, identifier: str, joined_via: str, mode: str | None
) -> CallToolResult:
    state = server_state(ctx)
    if mode == "live":
        raise WorkerError(LIVE_MODE_TEXT)
    _check_can_call(state)
    session, answer = await join_by(state.client, state.store, identifier, joined_via)
    room = _remember_here(state, session)
    return ok(state, _join_answer(state, answer, room["room_id"], joined_via, mode or "current"))


async def _create(ctx: ToolContext) -> CallToolResult:
    state = server_state(ctx)
    _check_can_call(state)
    session, answer = await create_invite_room(state.client, state.store)
    room = _remember_here(state, session)
    return ok(state, _join_answer(state, answer, room["room_id"], "join_code", "current"))


@expected_errors
async def create_room(ctx: ToolContext) -> CallToolResult:
    """Create a new invite room on Let Agents Chat. Returns the room ID and join code."""
    return await _create(ctx)


@expected_errors
async def create_project(ctx: ToolContext) -> CallToolResult:
    """Legacy alias for create_room. Creates a new invite room and returns its join code."""
    return await _create(ctx)


@expected_errors
async def join_code(
    ctx: ToolContext, code: Code, session_mode: SessionMode = None
) -> CallToolResult:
    """Join an existing room using an invite code."""
    return await _join(ctx, code, "join_code", session_mode)


@expected_errors
async def join_project(
    ctx: ToolContext, code: Code, session_mode: SessionMode = None
) -> CallToolResult:
    """Legacy alias for join_code. Join an existing room using an invite code."""
    return await _join(ctx, code, "join_code", session_mode)


@expected_errors
async def join_room(
    ctx: ToolContext,
    name: Annotated[
        str, Field(description="The room name to join (e.g. 'github.com/owner/repo').")
    ],
    session_mode: SessionMode = None,
) -> CallToolResult:
    """Join a named room on Let Agents Chat. Creates the room if it doesn't exist. Use this for
    repo-based room joining."""
    return await _join(ctx, name, "join_room", session_mode)


async def worker_room(state: ServerState, worker_id: str | None, room_id: str | None) -> str | None:
    """``room_id``, or with ``worker_id`` the room of that worker's session (the facade's rule)."""
    if blank(worker_id):
        return None if blank(room_id) else room_id
    async with state.handles.acting_as(
        worker_id=worker_id, room_id=None if blank(room_id) else room_id
    ) as session:
        return session.room_id


@expected_errors
async def resume_room_session(
    ctx: ToolContext,
    room_id: Annotated[
        str | None,
        Field(description="Optional saved room ID to resume. Defaults to the last current room."),
    ] = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Rejoin the last locally saved room context, or a specific saved room, after a restart.
    This recreates participation in the room; it does not preserve a prior server-side session
    ID."""
    state = server_state(ctx)
    wanted = await worker_room(state, worker_id, room_id)
    saved = saved_room(state.store.read().data, wanted)
    if saved is None or (wanted is not None and saved.get("room_id") != wanted):
        raise WorkerError(
            NO_SAVED_ROOM_TEXT if wanted is None else f"{NO_SAVED_ROOM_TEXT} ({wanted})"
        )
    via = saved.get("joined_via")
    joined_via = via if isinstance(via, str) else "join_room"
    room = await join_identifier(state, str(saved["room_id"]), joined_via)
    return ok(
        state,
        {
            "success": True,
            "rejoined_from_local_state": True,
            "server_session_resumed": False,
            "last_message_id_before_restart": saved.get("last_message_id"),
            "room": public_room(state, room),
            "next_step": NEXT_STEP.format(room_id=room["room_id"]),
        },
    )


def _auth_summary(state: ServerState) -> dict[str, Any] | None:
    auth = state.store.auth()
    if auth is None and not state.config.token:
        return None
    return {
        "source": "env" if state.config.token else "local_state",
        "expires_at": None if auth is None else auth.expires_at,
        "account": None if auth is None or auth.account is None else dict(auth.account),
    }


@expected_errors
async def get_current_room(
    ctx: ToolContext,
    conversation_id: Annotated[
        str | None,
        Field(description="Optional conversation ID to report the conversation-scoped identity."),
    ] = None,
) -> CallToolResult:
    """Get information about the currently joined room, including how it was joined."""
    await trio.lowlevel.checkpoint()
    state = server_state(ctx)
    current = state.context.current_room
    if current is None:
        return ok(state, {"connected": False, "message": "Not currently in any room"})
    identity = state.context.conversation_identities.get(
        conversation_id or ""
    ) or state.store.read().data.get("agent_identity")
    return ok(
        state,
        {
            "connected": True,
            **(public_room(state, current) or {}),
            "agent_identity": identity if isinstance(identity, Mapping) else None,
            "auth": _auth_summary(state),
        },
    )


def _start_dir(cwd: str | None) -> str:
    return os.getcwd() if blank(cwd) else str(cwd)


@expected_errors
async def check_repo(ctx: ToolContext, cwd: Cwd = None) -> CallToolResult:
    """Inspect the current repository context for Let Agents Chat. Shows the git repo root,
    detected .letagents.json path, auto-derived Git Room from git remote and active branch, and
    current room state. Useful for troubleshooting auto-join issues."""
    state = server_state(ctx)
    start = _start_dir(cwd)
    root = await git_root(start)
    config_dir = find_config_dir(start) if root else None
    config_path = None if config_dir is None else config_dir / CONFIG_FILE
    configured = config_room(start) if root else None
    current_branch, default_branch = await git_branches(root) if root else (None, None)
    git = room_context(
        await git_remote_room(root) if root else None, current_branch, default_branch
    )
    from_config = room_context(configured, current_branch, default_branch) if configured else None
    detected = (from_config.active_room if from_config else None) or git.active_room
    current = state.context.current_room
    matches = bool(current and detected and current["room_id"] == detected)
    return ok(
        state,
        {
            "cwd": start,
            "repo_context_status": "git_repo_detected" if root else "not_inside_git_repo",
            "git_repo_root": root,
            "config_file": None if config_path is None else str(config_path),
            "config_contents": None if config_path is None else read_config(config_path),
            "configured_room_from_file": configured,
            "configured_active_room_from_context": from_config.active_room if from_config else None,
            "derived_room_from_git": git.active_room,
            "derived_repo_room_from_git": git.repo_room,
            "derived_branch_room_from_git": git.active_ref_room,
            "git_current_branch": git.current_branch,
            "git_default_branch": git.default_branch,
            "detected_room_from_context": detected,
            "current_room": public_room(state, current),
            "current_room_scope": (
                "none"
                if current is None
                else "matches_detected_repo_context"
                if matches
                else "existing_joined_session_not_derived_from_inspected_cwd"
            ),
            "join_hint": _join_hint(root, detected, matches),
        },
    )


def _join_hint(root: str | None, detected: str | None, matches: bool) -> str | None:
    if not root:
        return (
            "Not inside a git repo. Use create_room, join_code, or join_room to connect manually."
        )
    if not detected:
        return (
            "Run initialize_repo to set up .letagents.json, or use join_room/join_code to connect."
        )
    if matches:
        return None
    return (
        "Use join_room with detected_room_from_context to switch this MCP session to the"
        " detected Git Room."
    )


def _write_new(path: Path, text: str) -> None:
    """Write ``text`` to a new file ``path``: never over an existing one, never half a file."""
    with path.open("x", encoding="utf-8") as file:
        try:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        except BaseException:
            file.close()
            with contextlib.suppress(OSError):
                path.unlink()
            raise


@expected_errors
async def initialize_repo(
    ctx: ToolContext,
    room: Annotated[
        str | None,
        Field(description="Custom room name. If omitted, derived from the git remote."),
    ] = None,
    cwd: Annotated[
        str | None,
        Field(description="Working directory hint for repo detection. Defaults to the server's."),
    ] = None,
) -> CallToolResult:
    """Initialize the current repo for Let Agents Chat by creating a .letagents.json config
    file naming its room (from the git remote, or the room given), then join that room. Will NOT
    overwrite an existing .letagents.json; always writes to the repo root."""
    state = server_state(ctx)
    start = _start_dir(cwd)
    root = await git_root(start)
    if root is None:
        raise WorkerError(f"{NOT_A_REPO_TEXT}: {start}. Pass a cwd inside a git repository.")
    path = Path(root) / CONFIG_FILE
    existing = find_config_dir(start)
    if existing is not None or path.exists():
        shown = path if existing is None else existing / CONFIG_FILE
        raise WorkerError(
            f".letagents.json already exists: {shown}. Delete it first to initialize again."
        )
    name = room.strip() if room and room.strip() else await git_remote_room(root)
    if not name:
        raise WorkerError(
            "Cannot derive room name: no git remote found and no custom room name provided."
            " Pass room, or add an origin remote."
        )
    try:
        _write_new(path, json.dumps({"room": name}, indent=2, ensure_ascii=False) + "\n")
    except OSError as exc:
        raise WorkerError(f"Failed to write {path}: {exc.strerror or exc}") from None
    answer: dict[str, Any] = {"success": True, "created": str(path), "room_id": name}
    try:
        joined = await join_identifier(state, name, "config")
    except LetAgentsError as exc:  # the file stays: joining again is join_room's
        answer.update(joined=False, error=f"Config created but auto-join failed: {exc}")
        answer["hint"] = "The .letagents.json was created. Use join_room to connect."
        return ok(state, answer)
    answer.update(room_id=joined["room_id"], code=joined.get("code"), joined=True)
    answer["hint"] = (
        "Consider adding .letagents.json to git so other contributors join the same room."
    )
    return ok(state, answer)


@expected_errors
async def check_repo_visibility(ctx: ToolContext, cwd: Cwd = None) -> CallToolResult:
    """Detect the current repo's git remote and check whether its Git Room should be
    public/discoverable or private/auth-gated. Returns the canonical key, provider, visibility,
    accessMode, and legacy roomType hint."""
    state = server_state(ctx)
    start = _start_dir(cwd)
    key = await git_remote_room(start)
    if key is None:
        raise WorkerError(
            f"{NO_REMOTE_TEXT}: {start}. Pass a cwd inside a git repo with an origin remote,"
            " or join/create a room by name or code."
        )
    return ok(state, await repo_visibility(key))
