"""What worker handles say and send on the wire: texts, ids, the registration body.

The exact texts of PROTOCOL §5.2 (numbered as there) and §5.5, the durable
handle and token formats, the one body a durable registration sends
(``POST …/agent-sessions``, §5.3 step 8) and the public projection of a
session. Worker handles, the local chat, the MCP tools, the testing kit and
the demo all take these from here, so the room and the chat see one shape and
one wording everywhere.

Nothing here does I/O or keeps state: ids and tokens are fresh random values,
everything else is a pure function of its arguments.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, final

import attrs

from ._identity import DEFAULT_RUNTIME_LABEL
from ._names import DEFAULT_IDE_LABEL

if TYPE_CHECKING:
    from .._session import AgentSession

__all__ = [
    "ACCOUNT_UNVERIFIED_TEXT",
    "AMBIGUOUS_ROOM_TEXT",
    "BOTH_HANDLES_TEXT",
    "BOTH_TARGETS_TEXT",
    "CONNECTION_REPLACED_OR_DISCONNECTED_TEXT",
    "CONNECTION_REPLACED_TEXT",
    "CONNECTION_TOKEN_BYTES",
    "CONTROLLER_TEXT",
    "DAMAGED_STATE_SIGN_IN_TEXT",
    "EMBEDDER_WORDING",
    "IN_PROGRESS_TEXT",
    "MCP_SERVER_WORDING",
    "NEW_CHAT_KEY_TEXT",
    "NOT_A_ROOM_ADVICE",
    "NOT_CONFIRMED_TEXT",
    "NO_ACCOUNT_ADVICE",
    "NO_CANONICAL_IDENTITY_TEXT",
    "NO_CONNECTION_TEXT",
    "PUBLIC_SESSION_FIELDS",
    "RECOVER_ARGUMENTS_TEXT",
    "RESTART_ADVICE",
    "ROOM_FAILING_ADVICE",
    "ROOM_REQUIRED_TEXT",
    "SIGN_IN_AGAIN_ADVICE",
    "SIGN_IN_TEXT",
    "SUPERSEDED_LOCAL_TEXT",
    "SUPERSEDED_TEXT",
    "SUPERVISED_TEXT",
    "TOKEN_REFUSED_ADVICE",
    "UNKNOWN_SESSION_TEXT",
    "UNKNOWN_WORKER_TEXT",
    "UNREACHABLE_ADVICE",
    "WORKER_KIND_REQUIRED_TEXT",
    "WORKER_OR_SESSION_TEXT",
    "WORKER_SESSION_REQUIRED_TEXT",
    "HostWording",
    "durable_registration_body",
    "new_connection_token",
    "new_worker_id",
    "public_session",
    "recover_ambiguous_text",
    "recover_none_text",
    "sign_in_text",
    "unknown_worker_text",
    "worker_agent_name",
]


@final
@attrs.frozen(kw_only=True)
class HostWording:
    """What a user of this host changes, as the worker handles' error texts name it.

    The handles serve an embedder's program and the MCP server alike: each
    names its own settings, so an embedder is never told to set a variable of
    a server it does not run, nor a chat to edit a ``RoomClient``.

    Attributes:
        holder: what has (or lacks) the owner token.
        api_url: where the room's address is set.
        owner_token: how else to give the owner token than in the state file.
        register: the call that creates or resumes a worker.
        sign_in: how this host signs in by itself, said before ``owner_token``
            when there is no sign-in (empty: it cannot).
    """

    holder: str
    api_url: str
    owner_token: str
    register: str
    sign_in: str = ""


# A program of the embedder's: the RoomClient and WorkerHandles it built.
EMBEDDER_WORDING: Final = HostWording(
    holder="this RoomClient",
    api_url="the RoomClient's api_url",
    owner_token="pass it to the RoomClient (owner_token=)",
    register="WorkerHandles.register",
)
# letagents-trio mcp: settings from the environment, workers through a tool.
MCP_SERVER_WORDING: Final = HostWording(
    holder="this MCP server",
    api_url="the MCP server's LETAGENTS_API_URL",
    owner_token="set LETAGENTS_TOKEN to it and restart the MCP server",
    sign_in="sign in from the chat with start_device_auth and poll_device_auth, or ",
    register="register_agent_session",
)

# --- exact texts (PROTOCOL §5.2, numbered as there) ---------------------------
# 1.
CONTROLLER_TEXT: Final = "Durable handles identify workers, not controllers."
# 2.
ROOM_REQUIRED_TEXT: Final = (
    "Pass room_id explicitly when registering or reconnecting this chat's worker."
)
# 3.
RECOVER_ARGUMENTS_TEXT: Final = (
    "To recover a lost worker pass room_id and the display_name it registered under,"
    " and neither worker_id nor registration_key."
)
# 4.
SUPERVISED_TEXT: Final = (
    "Worker handles are for independent MCP chats;"
    " supervised identity is supplied by its supervisor."
)
# Upstream's words, with the cause and the next step filled in (upstream's
# "Check your connection or sign-in" left a user guessing which).
ACCOUNT_UNVERIFIED_TEXT: Final = (
    "Could not verify your LetAgents account at {api_url}: {cause}. {advice}"
    " Then retry with the same worker_id or registration_key."
    " Saved worker identities have not been changed."
)
# The advice for each cause of an unverified account.
UNREACHABLE_ADVICE: Final = "Check that the room is running at that address ({api_url})."
TOKEN_REFUSED_ADVICE: Final = (
    "The owner token came from {origin}: replace it with a valid owner token for this room{then}."
)
# How a replaced token takes effect: the variable is read at start, the state
# file at every request (so a new sign-in needs no restart).
RESTART_ADVICE: Final = " and restart the MCP server"
SIGN_IN_AGAIN_ADVICE: Final = " (sign in again: it is read at the next call)"
ROOM_FAILING_ADVICE: Final = "The room is failing; retry once it answers again."
NO_ACCOUNT_ADVICE: Final = "Check that the address is a letagents room API ({api_url})."
# A 404 or 405 for GET /agents/me: the URL, not the room's health, is wrong.
NOT_A_ROOM_ADVICE: Final = (
    "No letagents room API answers at that address: a server that is not a room, or a path"
    " the room API does not have, answers so. Correct the address ({api_url}): it is the"
    " room API's base URL, such as http://127.0.0.1:3001 for letagents-trio room."
)
# 5.
BOTH_HANDLES_TEXT: Final = "Use worker_id to resume or registration_key to create, not both."
# 6.
NEW_CHAT_KEY_TEXT: Final = (
    "A new chat must supply its own registration_key and retain the returned worker_id."
)
# 7.
UNKNOWN_WORKER_TEXT: Final = (
    "Unknown worker_id for this account and API."
    " Create a worker for this chat or explicitly resume its saved handle."
)
# 9.
SIGN_IN_TEXT: Final = (
    "Sign in before registering a worker in a hosted room: {holder} has no owner token."
    " Store it as auth.token in {state_path} (the Node letagents client's sign-in writes it"
    " there; it is read at the next call), or {sign_in}{owner_token}."
    " Rooms marked local in the chat-storage settings need no sign-in."
)
# 9, ours: no owner token because the state file that would hold it is damaged.
DAMAGED_STATE_SIGN_IN_TEXT: Final = (
    "Cannot read the sign-in: the state file {state_path} is damaged ({problem})."
    " Nothing was written over it. Restore or repair it; meanwhile {holder} has no owner"
    " token: {owner_token}."
)
# 10.
NOT_CONFIRMED_TEXT: Final = (
    "The server did not confirm this worker connection."
    " Upgrade the API before using durable worker handles."
)
# 11.
SUPERSEDED_TEXT: Final = "Worker registration was superseded; retry explicitly."
IN_PROGRESS_TEXT: Final = "Another registration is in progress for this worker; retry explicitly."
# §5.3 step 9: a local finish whose record another process re-registered.
SUPERSEDED_LOCAL_TEXT: Final = "Worker registration was superseded."
# §2.1 R2.
NO_CANONICAL_IDENTITY_TEXT: Final = "Worker identity registration returned no canonical identity."
# 13.
NO_CONNECTION_TEXT: Final = (
    "This worker has no current connection in this process."
    " Reconnect explicitly with register_agent_session(worker_id, room_id)."
)
CONNECTION_REPLACED_OR_DISCONNECTED_TEXT: Final = (
    "This worker connection was replaced or disconnected. Reconnect explicitly with its worker_id."
)
CONNECTION_REPLACED_TEXT: Final = (
    "This worker connection was replaced. Reconnect explicitly with its worker_id."
)
# §5.1 facade.
BOTH_TARGETS_TEXT: Final = "Choose worker_id or agent_session_id, not both."
# Our own texts (upstream's were not read): a worker in several rooms called
# without room_id, a call naming no worker, and an agent_session_id never stored.
AMBIGUOUS_ROOM_TEXT: Final = (
    "This worker is registered in more than one room; pass room_id to choose one."
)
WORKER_OR_SESSION_TEXT: Final = "Pass worker_id (or a legacy agent_session_id) to act as a worker."
# Upstream's requireWorkerAgentSession (runtime/agent-sessions.ts): a write
# action (send_message, ...) without a session, or as a controller. The first
# sentence is upstream's; the advice is ours: a host keeps the worker_id that
# register_agent_session returns, not a session id (issue 42).
WORKER_SESSION_REQUIRED_TEXT: Final = (
    "Registered worker agent_session_id is required for this write action."
    " Call register_agent_session for this room first, then pass the returned"
    " worker_id (or a legacy session's agent_session_id) explicitly."
)
WORKER_KIND_REQUIRED_TEXT: Final = "Worker agent_session_id is required for this write action."
UNKNOWN_SESSION_TEXT: Final = (
    "Unknown agent_session_id for this MCP server. Register with register_agent_session first."
)


def sign_in_text(state_path: object, wording: HostWording) -> str:
    """§5.2.9 for this host: no owner token, and where to give one."""
    return SIGN_IN_TEXT.format(
        holder=wording.holder,
        owner_token=wording.owner_token,
        sign_in=wording.sign_in,
        state_path=state_path,
    )


def unknown_worker_text(why: str, wording: HostWording) -> str:
    """§5.2.7, then why this worker_id is unknown and how to create or resume one."""
    return (
        f"{UNKNOWN_WORKER_TEXT} {why} To create a worker for this chat, call"
        f" {wording.register} with a new registration_key; to resume one, pass a worker_id"
        f" that {wording.register} returned for this account and API."
    )


def recover_none_text(name: str) -> str:
    """§5.2.12: no worker of this process lives under ``name`` in the room."""
    return (
        f'This MCP server holds no worker named "{name}" in this room, so there is nothing'
        " to recover. Register as a new worker with a registration_key."
    )


def recover_ambiguous_text(name: str) -> str:
    """§5.2.12: several workers of this process live under ``name`` in the room."""
    return (
        f'This MCP server holds more than one worker named "{name}" in this room and cannot'
        " tell which one this chat is. Register as a new worker with a registration_key."
    )


# --- formats --------------------------------------------------------------------
# 32 random bytes, base64url without padding: 43 characters of [A-Za-z0-9_-].
CONNECTION_TOKEN_BYTES: Final = 32
# Worker handles are ``worker_`` + 32 hex; their agent names ``worker-`` + the same hex.
_WORKER_ID_PREFIX: Final = "worker_"
_AGENT_NAME_PREFIX: Final = "worker-"
# The public projection of a session (§5.3): never a token or a bearer.
PUBLIC_SESSION_FIELDS: Final = (
    "session_id",
    "room_id",
    "session_kind",
    "runtime",
    "host_id",
    "host_kind",
    "host_label",
    "liveness_capability",
    "tool_bridge_id",
    "actor_label",
    "agent_key",
    "agent_instance_id",
    "display_name",
    "owner_label",
    "ide_label",
    "repo_branch",
    "created_at",
    "updated_at",
    "last_seen_at",
    "ended_at",
)


def new_worker_id() -> str:
    """A fresh durable worker handle: ``worker_`` + a UUID v4 in 32 hex digits."""
    return _WORKER_ID_PREFIX + uuid.uuid4().hex


def new_connection_token() -> str:
    """A fresh connection token: 32 random bytes, base64url, 43 characters."""
    return secrets.token_urlsafe(CONNECTION_TOKEN_BYTES)


def worker_agent_name(worker_id: str) -> str:
    """The agent name a worker's canonical identity is made from (``worker-`` + its hex).

    Hosted rooms are asked for the canonical key of this name (R2); local rooms
    use ``<owner>/<name>`` directly.
    """
    return _AGENT_NAME_PREFIX + worker_id.removeprefix(_WORKER_ID_PREFIX)


def durable_registration_body(
    *,
    actor_key: str,
    worker_id: str,
    display_name: str,
    connection_token: str,
    process_host_id: str | None,
    registration_liveness: Mapping[str, str | None] | None = None,
    runtime: str = DEFAULT_RUNTIME_LABEL,
    ide_label: str = DEFAULT_IDE_LABEL,
    repo_branch: str | None = None,
    predecessor: tuple[str, str] | None = None,
) -> dict[str, Any]:
    """The body of a durable worker's registration (``POST …/agent-sessions``, §5.3 step 8).

    The one place this body is built: worker handles, the testing kit, the demo
    and the MCP server all send it, so the room sees one shape everywhere.

    Args:
        actor_key: the worker's canonical key (``<owner>/worker-<hex>``).
        worker_id: the worker handle, sent as ``agent_instance_id``.
        display_name: the name asked for, sent as both ``display_name`` and
            ``requested_base_display_name``.
        connection_token: the prepared operation's token; the room's
            ``session_token`` will equal it.
        process_host_id: names this machine (§6.2); None sends none.
        registration_liveness: the §6.2 liveness object, or None to send none.
        runtime: the runtime label.
        ide_label: the IDE label.
        repo_branch: the git branch of the working directory, if any.
        predecessor: ``(session_id, session_token)`` of the session this one
            replaces, the proof a resumed worker keeps its session and name with.

    Returns:
        A new JSON-ready dict; the caller may change it.
    """
    replace_id, replace_token = predecessor if predecessor is not None else (None, None)
    return {
        "actor_key": actor_key,
        "agent_instance_id": worker_id,
        "display_name": display_name,
        "requested_base_display_name": display_name,
        "session_kind": "worker",
        "runtime": runtime,
        "ide_label": ide_label,
        "repo_branch": repo_branch,
        "registration_liveness": (
            dict(registration_liveness) if registration_liveness is not None else None
        ),
        "process_host_id": process_host_id,
        "connection_token": connection_token,
        "replace_agent_session_id": replace_id,
        "replace_agent_session_token": replace_token,
    }


def public_session(session: AgentSession) -> dict[str, Any]:
    """The public projection of a session (§5.3): no token, no bearer, ever."""
    data = session.to_json()
    return {key: data.get(key) for key in PUBLIC_SESSION_FIELDS}
