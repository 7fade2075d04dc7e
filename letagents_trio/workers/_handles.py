"""Worker handles: create, resume, recover and disconnect durable room workers.

A chat in an MCP host becomes a room worker through a *handle*, ``worker_`` +
32 hex, that it keeps and passes back. The handle lives in the shared state
file (``mcp_workers``), so it survives MCP restarts; the room session it
stands for is re-registered with proof of its predecessor, so a restart keeps
the same ``session_id`` and name. PROTOCOL §5 is the specification; this is
the algorithm.

Scope
    Every handle belongs to one account on one API: ``<api_url>\\n<login>``
    (login lower-cased, from ``GET /agents/me``, cached once it succeeds), or
    ``<api_url>\\nlocal:<slug>`` without an owner token. When an owner token
    exists but the account cannot be read, every call fails *before anything
    is written or sent* ("Could not verify your LetAgents account…").

Create (``registration_key``)
    ``sha256_hex(scope + "\\n" + key)`` names the worker: under the state lock
    an existing worker with that hash in this scope is reused, else a new
    ``worker_<uuid4 hex>`` is stored with the trimmed display name (or the
    codename of its id). Two chats never share a key, so a retried create is
    the same worker, never a second identity.

Connect (create and resume share it)
    1. *In-flight de-duplication*: concurrent calls for one (worker, room) in
       this process share one operation; exactly one registration is sent.
    2. *Pinned fast path*: if this process pinned the worker's current session
       in the room, the stored record is live, its token equals the pin, and no
       operation is pending, the pin is returned (and its process connection
       held) **without asking the room**.
    3. Otherwise: the canonical identity (``POST /agents``, hosted only), then
       a *prepared operation* ``{operation_id, connection_token}`` (43-char
       base64url) is stored under ``rooms[room].pending`` together with the
       predecessor's id and token, **before** anything is sent. A pending
       operation left by a lost response is finished first, with its stored
       token: the room recognises the token and answers with the session it
       already made, so a lost response never becomes a second session.
    4. *Finish (hosted)*: ``POST /rooms/{room}/agent-sessions`` through the
       busy-retry wrapper, carrying ``process_host_id`` and
       ``registration_liveness``. The 201 is validated field by field
       (``session_token`` echoes our token, ``agent_instance_id``,
       ``agent_key``, ``room_id``, not ended); ``worker_bearer`` is dropped and
       ``adopted_task_leases`` kept in memory, returned once. Under the lock,
       and only if ``pending`` is still this operation, the session is stored,
       made the room's current one, and ``pending`` removed.
       *Finish (local room)*: no HTTP. The session id is
       ``local_ + sha256_hex(worker_id + "\\n" + room)``; a first registration
       de-duplicates its name against the room's other sessions by name key,
       with codenames (never numbered suffixes).
    5. The session is pinned in memory and, for hosted rooms, its process
       connection is held by the :class:`~letagents_trio.ConnectionManager`.
    A definite refusal (4xx) of a finish removes the pending operation (the
    room stored nothing); a lost answer, a 5xx or a cancellation keeps it, to
    be finished later with the same token.

Recover (``recover_lost_worker``)
    A chat that lost its handle names the display name it lives under. If this
    process pins exactly one live worker in the room whose *current* name has
    that name key, it is resumed as if its ``worker_id`` had been passed (the
    fast path: nothing is sent). A create whose key is new reports the same
    match as ``name_held_here`` so the MCP layer can say how to recover, never
    naming the other handle.

Acting as a worker (``acting_as``)
    Before a room call: the pinned session, the stored record, no pending
    operation, not ended, and equal tokens. After it, the same check from disk:
    a worker re-registered by another process (the token changed) can no
    longer act here.

Disconnect
    ``POST …/disconnect`` with the worker's own credentials (nothing for local
    rooms), then stop holding its process connection, then end the stored
    record guarded by the token: a late answer about a predecessor never ends
    its successor.

Only pins, the in-flight map and adopted leases live in memory (§6.4);
everything else is in the state file, written only through
:meth:`LocalStateStore.update`.
"""

from __future__ import annotations

import getpass
import hashlib
import logging
import re
import secrets
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, final

import attrs
import trio

from .._client import encode_room_path
from .._errors import ApiError, LetAgentsError, StateError, StateUnavailable, WorkerError
from .._session import AgentSession
from ._identity import (
    DEFAULT_RUNTIME_LABEL,
    detect_ide_label,
    detect_runtime_label,
    local_host_id,
    process_host_id,
    registration_liveness,
)
from ._names import (
    AGENT_CODENAME_SPACE,
    DEFAULT_IDE_LABEL,
    actor_label,
    codename,
    is_durable_worker_id,
    js_trim,
    name_key,
)
from ._state import (
    STATE_UNAVAILABLE_MESSAGE,
    ensure_mapping,
    iso_now,
    mapping_at,
    session_in,
)

if TYPE_CHECKING:
    from .._client import RoomClient
    from .._manager import ConnectionManager
    from ._chat_storage import ChatStorage
    from ._state import LocalStateStore

__all__ = [
    "ACCOUNT_UNVERIFIED_TEXT",
    "AMBIGUOUS_ROOM_TEXT",
    "BOTH_HANDLES_TEXT",
    "CONNECTION_REPLACED_OR_DISCONNECTED_TEXT",
    "CONNECTION_REPLACED_TEXT",
    "CONTROLLER_TEXT",
    "IN_PROGRESS_TEXT",
    "NEW_CHAT_KEY_TEXT",
    "NOT_CONFIRMED_TEXT",
    "NO_CANONICAL_IDENTITY_TEXT",
    "NO_CONNECTION_TEXT",
    "RECOVER_ARGUMENTS_TEXT",
    "ROOM_REQUIRED_TEXT",
    "SIGN_IN_TEXT",
    "SUPERSEDED_LOCAL_TEXT",
    "SUPERSEDED_TEXT",
    "SUPERVISED_TEXT",
    "UNKNOWN_SESSION_TEXT",
    "UNKNOWN_WORKER_TEXT",
    "WORKER_OR_SESSION_TEXT",
    "WorkerHandles",
    "WorkerHandlesStatistics",
    "WorkerRegistration",
    "durable_registration_body",
    "new_connection_token",
    "new_worker_id",
    "public_session",
    "recover_ambiguous_text",
    "recover_none_text",
    "worker_agent_name",
]

logger = logging.getLogger("letagents_trio.workers")

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
ACCOUNT_UNVERIFIED_TEXT: Final = (
    "Could not verify your LetAgents account. Check your connection or sign-in,"
    " then retry with the same worker_id or registration_key."
    " Saved worker identities have not been changed."
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
SIGN_IN_TEXT: Final = "Sign in before registering a worker in a hosted room."
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
UNKNOWN_SESSION_TEXT: Final = (
    "Unknown agent_session_id for this MCP server. Register with register_agent_session first."
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


# --- constants ------------------------------------------------------------------
# 32 random bytes, base64url without padding: 43 characters of [A-Za-z0-9_-].
CONNECTION_TOKEN_BYTES: Final = 32
# Worker handles are ``worker_`` + 32 hex; their agent names ``worker-`` + the same hex.
_WORKER_ID_PREFIX: Final = "worker_"
_AGENT_NAME_PREFIX: Final = "worker-"
# Fields of the registration answer that are never stored (§5.3 step 8).
_NOT_STORED: Final = ("assigned_base_display_name", "worker_bearer", "adopted_task_leases")
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
# A local owner slug keeps only what a key segment may hold.
_SLUG_DROP: Final = re.compile(r"[^a-z0-9-]+")
# Used when the user name gives nothing usable.
_DEFAULT_LOCAL_SLUG: Final = "local"
# A .git file (worktree, submodule) points at the real git directory.
_GITDIR_PREFIX: Final = "gitdir:"
_HEAD_REF_PREFIX: Final = "ref: refs/heads/"


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


def _freeze_leases(
    value: tuple[Mapping[str, str], ...] | list[Mapping[str, str]],
) -> tuple[Mapping[str, str], ...]:
    return tuple(dict(lease) for lease in value)


@final
@attrs.frozen(kw_only=True)
class WorkerRegistration:
    """What :meth:`WorkerHandles.register` gives back.

    Attributes:
        worker_id: the handle the chat keeps (``worker_`` + 32 hex).
        session: the stored session (its token is hidden from ``repr``).
        name_held_here: on a create with a new key, the display name of a live
            worker this process already holds under the same name in the room
            (§5.5), else ``None``. Never the other worker's handle.
        adopted_task_leases: ``{lease_id, task_id, kind}`` of leases the room
            moved to this session, returned once and never stored.
    """

    worker_id: str
    session: AgentSession
    name_held_here: str | None = None
    adopted_task_leases: tuple[Mapping[str, str], ...] = attrs.field(
        default=(), converter=_freeze_leases
    )

    def public_session(self) -> dict[str, Any]:
        """The session's public projection (§5.3): never a token or a bearer."""
        return public_session(self.session)


@final
@attrs.frozen(kw_only=True)
class WorkerHandlesStatistics:
    """A snapshot of a :class:`WorkerHandles`.

    Attributes:
        pinned_sessions: sessions this process pinned (the fast path and
            ``acting_as`` work for these only).
        registrations_in_flight: (worker, room) registrations running now.
        account_cached: whether the account login is cached.
    """

    pinned_sessions: int
    registrations_in_flight: int
    account_cached: bool


@final
@attrs.frozen(kw_only=True)
class _Owner:
    """Who registers: the scope string, and the names used for local identities."""

    scope: str
    login: str | None
    key_owner: str  # the first segment of local canonical keys: login or slug
    label: str  # the owner part of local actor labels


@final
@attrs.frozen(kw_only=True)
class _Operation:
    """A prepared registration (``rooms[room].pending``)."""

    operation_id: str
    connection_token: str = attrs.field(repr=False)
    predecessor_id: str | None = None
    predecessor_token: str | None = attrs.field(default=None, repr=False)

    @property
    def predecessor(self) -> tuple[str, str] | None:
        """``(session_id, session_token)`` of the session this replaces; half a proof is none."""
        if self.predecessor_id is None or self.predecessor_token is None:
            return None
        return self.predecessor_id, self.predecessor_token

    def to_json(self) -> dict[str, str]:
        data = {"operation_id": self.operation_id, "connection_token": self.connection_token}
        if self.predecessor is not None:
            data["predecessor_id"], data["predecessor_token"] = self.predecessor
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> _Operation | None:
        op_id, token = data.get("operation_id"), data.get("connection_token")
        if not isinstance(op_id, str) or not isinstance(token, str) or not op_id or not token:
            return None
        pid, ptoken = data.get("predecessor_id"), data.get("predecessor_token")
        return cls(
            operation_id=op_id,
            connection_token=token,
            predecessor_id=pid if isinstance(pid, str) and pid else None,
            predecessor_token=ptoken if isinstance(ptoken, str) and ptoken else None,
        )


@final
@attrs.define(eq=False)
class _Flight:
    """One registration in progress, shared by concurrent identical calls."""

    done: trio.Event = attrs.field(factory=trio.Event)
    session: AgentSession | None = None
    error: Exception | None = None


@final
@attrs.frozen(kw_only=True)
class _Target:
    """Whom a worker call acts as: a durable worker in a room, or a legacy session."""

    worker_id: str | None
    room_id: str
    legacy_session_id: str | None = None


def _sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def local_owner_slug(name: str | None = None) -> str:
    """The owner slug of local identities: the user name, lower-cased, ``[a-z0-9-]`` only.

    Args:
        name: the name to slugify; ``None`` means the current user's.
    """
    if name is None:
        try:
            name = getpass.getuser()
        except (KeyError, OSError):  # no passwd entry, no LOGNAME
            name = ""
    slug = _SLUG_DROP.sub("-", name.lower()).strip("-")
    return slug or _DEFAULT_LOCAL_SLUG


def git_branch(cwd: str | None) -> str | None:
    """The current branch of the git work tree holding ``cwd``, or ``None``.

    Reads ``HEAD`` directly (no subprocess): ``None`` for no ``cwd``, no
    repository, a detached head, or anything unreadable.
    """
    if not cwd:
        return None
    try:
        here = Path(cwd).resolve()
        for directory in (here, *here.parents):
            dot_git = directory / ".git"
            if dot_git.is_dir():
                git_dir = dot_git
            elif dot_git.is_file():
                pointer = dot_git.read_text("utf-8").strip()
                if not pointer.startswith(_GITDIR_PREFIX):
                    return None
                git_dir = (directory / pointer[len(_GITDIR_PREFIX) :].strip()).resolve()
            else:
                continue
            head = (git_dir / "HEAD").read_text("utf-8").strip()
            if head.startswith(_HEAD_REF_PREFIX):
                return head[len(_HEAD_REF_PREFIX) :] or None
            return None
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return None


def _dicts(parent: Mapping[str, Any] | None, key: str) -> Mapping[str, Any]:
    child = None if parent is None else mapping_at(parent, key)
    return {} if child is None else child


def _dict_at(parent: dict[str, Any] | None, key: str) -> dict[str, Any] | None:
    """The object under ``key`` for writing, or ``None`` when absent or not an object."""
    child = None if parent is None else parent.get(key)
    return child if isinstance(child, dict) else None


def _stored(data: Mapping[str, Any], session_id: str | None) -> AgentSession | None:
    return session_in(data, session_id) if session_id else None


def _same_token(a: str, b: str) -> bool:
    return secrets.compare_digest(a.encode("utf-8"), b.encode("utf-8"))


def _read_leases(value: object) -> tuple[dict[str, str], ...]:
    if not isinstance(value, list):
        return ()
    leases: list[dict[str, str]] = []
    for entry in value:
        if isinstance(entry, Mapping) and all(
            isinstance(entry.get(k), str) for k in ("lease_id", "task_id", "kind")
        ):
            leases.append({k: entry[k] for k in ("lease_id", "task_id", "kind")})
    return tuple(leases)


@final
@attrs.define(eq=False, kw_only=True)
class WorkerHandles:
    """Durable worker handles for one process (one per MCP server).

    Owns the pinned connections and the in-flight registration map (both in
    memory only), and asks the connection manager to hold or release process
    connections.

    Args:
        client: the room client (its owner token decides whether an account
            must be verified).
        state: the shared state file.
        manager: holds process connections of hosted workers; ``None`` holds none.
        chat_storage: decides which rooms are local (§6.1); ``None`` means
            every room is hosted.
        owner_mode: false when the process runs under a supervisor or worker
            bearer: worker handles are then refused.
        local_owner: the owner slug of local identities when no account is
            signed in; default: the user name (:func:`local_owner_slug`).
    """

    client: RoomClient
    state: LocalStateStore
    manager: ConnectionManager | None = None
    chat_storage: ChatStorage | None = None
    owner_mode: bool = True
    local_owner: str | None = None
    _account_login: str | None = attrs.field(default=None, init=False)
    _pins: dict[str, AgentSession] = attrs.field(factory=dict, init=False)
    _in_flight: dict[tuple[str, str], _Flight] = attrs.field(factory=dict, init=False)

    def __repr__(self) -> str:
        return (
            f"<WorkerHandles state={str(self.state.path)!r} pins={len(self._pins)}"
            f" in_flight={len(self._in_flight)}>"
        )

    # --- small questions -------------------------------------------------------------

    def is_local_room(self, room_id: str) -> bool:
        """Whether ``room_id`` keeps its chat on this machine (no HTTP, no process connection)."""
        return self.chat_storage is not None and self.chat_storage.is_local(room_id)

    def pinned(self, session_id: str) -> AgentSession | None:
        """This process's pinned copy of a session, or ``None`` (§6.4)."""
        return self._pins.get(session_id)

    def statistics(self) -> WorkerHandlesStatistics:
        """A frozen snapshot: pins, registrations in flight, whether the account is cached."""
        return WorkerHandlesStatistics(
            pinned_sessions=len(self._pins),
            registrations_in_flight=len(self._in_flight),
            account_cached=self._account_login is not None,
        )

    def forget_account(self) -> None:
        """Drop the cached account (call after the owner signs in or out)."""
        self._account_login = None

    def _snapshot(self) -> Mapping[str, Any]:
        snapshot = self.state.read()
        if not snapshot.complete:
            error = StateUnavailable(STATE_UNAVAILABLE_MESSAGE)
            error.add_note(f"state file {self.state.path}: {snapshot.problem}")
            raise error
        return snapshot.data

    # --- account and scope -------------------------------------------------------------

    async def _login(self) -> str | None:
        """The account login (``GET /agents/me``, cached once it succeeds), or ``None``."""
        if not self.client.has_owner_token:
            await trio.lowlevel.checkpoint()
            return None
        if self._account_login is not None:
            await trio.lowlevel.checkpoint()
            return self._account_login
        try:
            answer = await self.client.call("GET", "/agents/me")
        except LetAgentsError as exc:
            logger.warning("could not read the account: %s", type(exc).__name__)
            return None
        account = answer.get("account") if isinstance(answer, Mapping) else None
        login = account.get("login") if isinstance(account, Mapping) else None
        if not isinstance(login, str) or not login.strip():
            logger.warning("the room answered /agents/me without an account login")
            return None
        self._account_login = login
        return login

    async def _owner(self) -> _Owner:
        if not self.owner_mode:
            raise WorkerError(SUPERVISED_TEXT)
        login = await self._login()
        if self.client.has_owner_token and login is None:
            raise WorkerError(ACCOUNT_UNVERIFIED_TEXT)
        if login is not None:
            return _Owner(
                scope=f"{self.client.api_url}\n{login.lower()}",
                login=login,
                key_owner=login,
                label=login,
            )
        slug = self.local_owner or local_owner_slug()
        return _Owner(
            scope=f"{self.client.api_url}\nlocal:{slug}", login=None, key_owner=slug, label=slug
        )

    # --- register ----------------------------------------------------------------------

    async def register(
        self,
        *,
        room_id: str | None,
        worker_id: str | None = None,
        registration_key: str | None = None,
        display_name: str | None = None,
        runtime: str | None = None,
        cwd: str | None = None,
        recover_lost_worker: bool = False,
        session_kind: str | None = None,
    ) -> WorkerRegistration:
        """Create, resume or recover a worker and connect it to a room (PROTOCOL §5.3).

        Exactly one of ``worker_id`` (resume), ``registration_key`` (create) or
        ``recover_lost_worker`` with ``display_name`` (recover) says which worker.

        Args:
            room_id: the room; required.
            worker_id: a saved handle, to resume.
            registration_key: this chat's own key, to create (or find again).
            display_name: the name to ask for (create), or to recover by.
            runtime: the runtime label; default :func:`detect_runtime_label`.
            cwd: the chat's working directory, for ``repo_branch``.
            recover_lost_worker: recover the one worker this process holds under
                ``display_name`` in the room.
            session_kind: only ``"worker"`` (or ``None``) is accepted.

        Returns:
            The worker's handle and session; ``name_held_here`` and
            ``adopted_task_leases`` as described on :class:`WorkerRegistration`.

        Raises:
            WorkerError: a rule of §5.2 refused the call (the message is the
                exact upstream text).
            StateUnavailable: the state file is damaged; nothing was written.
            ApiError: the room refused the registration.
            RoomUnreachable: the room did not answer; a prepared registration
                stays stored and the next call finishes it with the same token.

        Cancellation:
            A checkpoint. Cancelled before the registration was sent, nothing
            but the worker record (and perhaps the prepared operation) was
            stored. Cancelled while it was in flight, the prepared operation
            stays stored, and the next call finishes it with the same token, so
            the room never makes a second session. Concurrent identical calls
            that were waiting on a cancelled call start their own.
        """
        if session_kind == "controller":
            raise WorkerError(CONTROLLER_TEXT)
        if room_id is None or not js_trim(room_id):
            raise WorkerError(ROOM_REQUIRED_TEXT)
        recover_name = js_trim(display_name or "")
        if recover_lost_worker and (worker_id or registration_key or not recover_name):
            raise WorkerError(RECOVER_ARGUMENTS_TEXT)
        owner = await self._owner()
        if recover_lost_worker:
            held = self._held_under(recover_name, owner.scope, room_id)
            if not held:
                raise WorkerError(recover_none_text(recover_name))
            if len(held) > 1:
                raise WorkerError(recover_ambiguous_text(recover_name))
            worker_id = held[0][0]
            logger.info("recovered worker %s by its name in %s", worker_id, room_id)
        if worker_id and registration_key:
            raise WorkerError(BOTH_HANDLES_TEXT)
        name_held_here: str | None = None
        if not worker_id:
            if not registration_key or not js_trim(registration_key):
                raise WorkerError(NEW_CHAT_KEY_TEXT)
            worker_id, name_held_here = await self._create(
                owner, registration_key, display_name, room_id
            )
        worker = self._worker(worker_id, owner.scope)
        local = self.is_local_room(room_id)
        session, leases, led = await self._connect_once(
            owner, worker, room_id, local=local, runtime=runtime, cwd=cwd
        )
        return WorkerRegistration(
            worker_id=worker_id,
            session=session,
            name_held_here=name_held_here,
            adopted_task_leases=leases if led else (),
        )

    async def _create(
        self, owner: _Owner, registration_key: str, display_name: str | None, room_id: str
    ) -> tuple[str, str | None]:
        key_hash = _sha256_hex(f"{owner.scope}\n{registration_key}")
        workers = _dicts(self._snapshot(), "mcp_workers")
        known = any(
            isinstance(w, Mapping)
            and w.get("scope") == owner.scope
            and w.get("registration_key_hash") == key_hash
            for w in workers.values()
        )
        name_held_here: str | None = None
        if not known:
            held = self._held_under(js_trim(display_name or ""), owner.scope, room_id)
            name_held_here = held[0][1] if held else None

        def create_or_reuse(state: dict[str, Any]) -> str:
            records = ensure_mapping(state, "mcp_workers")
            for record in records.values():
                if (
                    isinstance(record, dict)
                    and record.get("scope") == owner.scope
                    and record.get("registration_key_hash") == key_hash
                    and isinstance(record.get("worker_id"), str)
                ):
                    return str(record["worker_id"])
            new_id = new_worker_id()
            records[new_id] = {
                "worker_id": new_id,
                "scope": owner.scope,
                "registration_key_hash": key_hash,
                "display_name": js_trim(display_name or "") or codename(new_id).display_name,
                "rooms": {},
            }
            logger.info("created worker %s", new_id)
            return new_id

        return await self.state.update(create_or_reuse), name_held_here

    def _worker(self, worker_id: str, scope: str) -> Mapping[str, Any]:
        if not is_durable_worker_id(worker_id):
            raise WorkerError(UNKNOWN_WORKER_TEXT)
        record = mapping_at(_dicts(self._snapshot(), "mcp_workers"), worker_id)
        if record is None or record.get("scope") != scope:
            raise WorkerError(UNKNOWN_WORKER_TEXT)
        return record

    def _held_under(self, name: str, scope: str, room_id: str) -> list[tuple[str, str]]:
        """Workers this process holds live under ``name`` in the room: (worker_id, name)."""
        if not name:
            return []
        wanted = name_key(name)
        data = self._snapshot()
        found: list[tuple[str, str]] = []
        for worker_id, record in _dicts(data, "mcp_workers").items():
            if not isinstance(record, Mapping) or record.get("scope") != scope:
                continue
            room = mapping_at(_dicts(record, "rooms"), room_id)
            session_id = room.get("session_id") if room is not None else None
            session = _stored(data, session_id if isinstance(session_id, str) else None)
            if session is None or session.ended_at:
                continue
            pin = self._pins.get(session.session_id)
            if pin is None or not _same_token(pin.session_token, session.session_token):
                continue
            # The name it lives under now, not the one it asked for.
            if name_key(session.display_name) != wanted:
                continue
            found.append((str(record.get("worker_id") or worker_id), session.display_name))
        return found

    async def _connect_once(
        self,
        owner: _Owner,
        worker: Mapping[str, Any],
        room_id: str,
        *,
        local: bool,
        runtime: str | None,
        cwd: str | None,
    ) -> tuple[AgentSession, tuple[dict[str, str], ...], bool]:
        """Run (or join) the one connect of (worker, room); returns (session, leases, led)."""
        key = (str(worker["worker_id"]), room_id)
        while (flight := self._in_flight.get(key)) is not None:
            await flight.done.wait()
            if flight.error is not None:
                raise flight.error
            if flight.session is not None:
                return flight.session, (), False
            # The call we waited on was cancelled: run our own.
        flight = _Flight()
        self._in_flight[key] = flight
        try:
            session, leases = await self._connect(
                owner, worker, room_id, local=local, runtime=runtime, cwd=cwd
            )
        except Exception as exc:
            flight.error = exc
            raise
        else:
            flight.session = session
        finally:
            del self._in_flight[key]
            flight.done.set()
        return session, leases, True

    async def _connect(
        self,
        owner: _Owner,
        worker: Mapping[str, Any],
        room_id: str,
        *,
        local: bool,
        runtime: str | None,
        cwd: str | None,
    ) -> tuple[AgentSession, tuple[dict[str, str], ...]]:
        worker_id = str(worker["worker_id"])
        data = self._snapshot()
        record = mapping_at(_dicts(data, "mcp_workers"), worker_id) or worker
        room = mapping_at(_dicts(record, "rooms"), room_id) or {}
        current_id = room.get("session_id")
        current = _stored(data, current_id if isinstance(current_id, str) else None)
        pending_json = mapping_at(room, "pending")
        pin = self._pins.get(current.session_id) if current is not None else None
        if (
            pin is not None
            and current is not None
            and not current.ended_at
            and _same_token(pin.session_token, current.session_token)
            and pending_json is None
        ):
            logger.debug("worker %s in %s: pinned fast path", worker_id, room_id)
            if not local:
                self._hold(pin)
            await trio.lowlevel.checkpoint()
            return pin, ()
        if not local and owner.login is None:
            raise WorkerError(SIGN_IN_TEXT)
        canonical_key = await self._canonical_key(owner, record, local=local)
        operation = _Operation.from_json(pending_json) if pending_json is not None else None
        if operation is not None:
            logger.info(
                "worker %s in %s: finishing operation %s left pending",
                worker_id,
                room_id,
                operation.operation_id,
            )
        else:
            operation = await self._prepare(worker_id, room_id)
        if local:
            session = await self._finish_local(
                owner, record, room_id, operation, canonical_key, runtime=runtime, cwd=cwd
            )
            leases: tuple[dict[str, str], ...] = ()
        else:
            session, leases = await self._finish_hosted(
                record, room_id, operation, canonical_key, runtime=runtime, cwd=cwd
            )
        self._pins[session.session_id] = session
        if not local:
            self._hold(session)
        return session, leases

    async def _canonical_key(self, owner: _Owner, worker: Mapping[str, Any], *, local: bool) -> str:
        name = worker_agent_name(str(worker["worker_id"]))
        if local:
            await trio.lowlevel.checkpoint()
            return f"{owner.key_owner}/{name}"
        answer = await self.client.call(
            "POST",
            "/agents",
            json={
                "name": name,
                "display_name": worker.get("display_name"),
                "owner_label": owner.label,
            },
        )
        key = answer.get("canonical_key") if isinstance(answer, Mapping) else None
        if not isinstance(key, str) or not key:
            raise WorkerError(NO_CANONICAL_IDENTITY_TEXT)
        return key

    async def _prepare(self, worker_id: str, room_id: str) -> _Operation:
        """Store a new pending operation (with the predecessor proof) before sending it."""
        token = new_connection_token()
        operation_id = str(uuid.uuid4())

        def prepare(state: dict[str, Any]) -> _Operation:
            record = _dict_at(ensure_mapping(state, "mcp_workers"), worker_id)
            if record is None:
                raise WorkerError(UNKNOWN_WORKER_TEXT)
            room = ensure_mapping(ensure_mapping(record, "rooms"), room_id)
            if room.get("pending") is not None:
                raise WorkerError(IN_PROGRESS_TEXT)
            predecessor = _stored(state, room.get("session_id"))
            operation = _Operation(
                operation_id=operation_id,
                connection_token=token,
                predecessor_id=predecessor.session_id if predecessor else None,
                predecessor_token=predecessor.session_token if predecessor else None,
            )
            room["pending"] = operation.to_json()
            return operation

        return await self.state.update(prepare)

    async def _abandon(self, worker_id: str, room_id: str, operation: _Operation) -> None:
        """Remove ``operation`` from ``pending`` (if it is still there): the room refused it."""

        def drop(state: dict[str, Any]) -> None:
            record = _dict_at(_dict_at(state, "mcp_workers"), worker_id)
            room = _dict_at(_dict_at(record, "rooms"), room_id)
            pending = _dict_at(room, "pending")
            if (
                room is not None
                and pending is not None
                and pending.get("operation_id") == operation.operation_id
            ):
                del room["pending"]

        try:
            await self.state.update(drop)
        except StateError as exc:
            # The room's refusal is the news; a pending left behind is
            # finished (and refused again) by the next call.
            logger.warning("could not drop a refused operation: %s", type(exc).__name__)

    async def _finish_hosted(
        self,
        worker: Mapping[str, Any],
        room_id: str,
        operation: _Operation,
        canonical_key: str,
        *,
        runtime: str | None,
        cwd: str | None,
    ) -> tuple[AgentSession, tuple[dict[str, str], ...]]:
        worker_id = str(worker["worker_id"])
        display_name = str(worker.get("display_name") or codename(worker_id).display_name)
        runtime_label = runtime or detect_runtime_label()
        host_id = await local_host_id(self.state)
        body = durable_registration_body(
            actor_key=canonical_key,
            worker_id=worker_id,
            display_name=display_name,
            connection_token=operation.connection_token,
            process_host_id=process_host_id(host_id),
            registration_liveness=registration_liveness(host_id, runtime_label),
            runtime=runtime_label,
            ide_label=detect_ide_label(),
            repo_branch=git_branch(cwd),
            predecessor=operation.predecessor,
        )
        refusal: ApiError | None = None
        try:
            created = await self.client.call_when_free(
                "POST", f"/rooms/{encode_room_path(room_id)}/agent-sessions", json=body
            )
        except ApiError as exc:
            refusal = exc
        if refusal is not None:
            if 400 <= refusal.status < 500:
                # A definite refusal: the room stored nothing for this token.
                await self._abandon(worker_id, room_id, operation)
            raise refusal
        if not (
            isinstance(created, Mapping)
            and isinstance(created.get("session_id"), str)
            and created["session_id"]
            and isinstance(created.get("session_token"), str)
            and _same_token(created["session_token"], operation.connection_token)
            and created.get("agent_instance_id") == worker_id
            and created.get("agent_key") == canonical_key
            and created.get("room_id") == room_id
            and not created.get("ended_at")
        ):
            raise WorkerError(NOT_CONFIRMED_TEXT)
        record = {k: v for k, v in created.items() if k not in _NOT_STORED}
        assigned = created.get("assigned_base_display_name")
        record["requested_base_display_name"] = assigned if assigned is not None else display_name
        leases = _read_leases(created.get("adopted_task_leases"))
        session_id = str(record["session_id"])

        def commit(state: dict[str, Any]) -> None:
            room = self._pending_room(state, worker_id, room_id, operation)
            ensure_mapping(state, "agent_sessions")[session_id] = record
            room["session_id"] = session_id
            del room["pending"]

        await self.state.update(commit)
        logger.info(
            "worker %s registered in %s as session %s (%r)",
            worker_id,
            room_id,
            session_id,
            record.get("display_name"),
        )
        return AgentSession.from_json(record), leases

    @staticmethod
    def _pending_room(
        state: dict[str, Any], worker_id: str, room_id: str, operation: _Operation
    ) -> dict[str, Any]:
        """The room record whose ``pending`` is still ``operation``; else error 11."""
        room = _dict_at(_dict_at(_dict_at(state, "mcp_workers"), worker_id), "rooms")
        room = _dict_at(room, room_id)
        pending = _dict_at(room, "pending")
        if room is None or pending is None or pending.get("operation_id") != operation.operation_id:
            raise WorkerError(SUPERSEDED_TEXT)
        return room

    async def _finish_local(
        self,
        owner: _Owner,
        worker: Mapping[str, Any],
        room_id: str,
        operation: _Operation,
        canonical_key: str,
        *,
        runtime: str | None,
        cwd: str | None,
    ) -> AgentSession:
        worker_id = str(worker["worker_id"])
        worker_name = str(worker.get("display_name") or codename(worker_id).display_name)
        ide = detect_ide_label()
        branch = git_branch(cwd)
        runtime_label = runtime or detect_runtime_label()
        now = iso_now(self.state.wall_clock)

        def commit(state: dict[str, Any]) -> dict[str, Any]:
            room = self._pending_room(state, worker_id, room_id, operation)
            sessions = ensure_mapping(state, "agent_sessions")
            prior_id = room.get("session_id")
            first = not isinstance(prior_id, str) or not prior_id
            session_id = (
                str(prior_id) if not first else "local_" + _sha256_hex(f"{worker_id}\n{room_id}")
            )
            prior = mapping_at(sessions, session_id)
            if prior is not None:
                prior_token = prior.get("session_token")
                allowed = {operation.predecessor_token, operation.connection_token}
                if prior_token not in allowed:
                    raise WorkerError(SUPERSEDED_LOCAL_TEXT)
            name = str(prior["display_name"]) if prior and prior.get("display_name") else None
            if name is None or first:
                name = worker_name
                used = {
                    name_key(str(other.get("display_name") or ""))
                    for other_id, other in sessions.items()
                    if isinstance(other, dict)
                    and other.get("room_id") == room_id
                    and other_id != session_id
                }
                offset = 1
                while name_key(name) in used and offset <= AGENT_CODENAME_SPACE:
                    name = codename(f"{canonical_key}:{offset}").display_name
                    offset += 1
            label = (
                str(prior["actor_label"])
                if prior and prior.get("actor_label") and prior.get("display_name") == name
                else actor_label(name, owner.label, ide)
            )
            record: dict[str, Any] = {
                "session_id": session_id,
                "session_token": operation.connection_token,
                "room_id": room_id,
                "session_kind": "worker",
                "runtime": runtime_label,
                "actor_label": label,
                "agent_key": canonical_key,
                "agent_instance_id": worker_id,
                "display_name": name,
                "requested_base_display_name": worker_name,
                "owner_label": owner.label,
                "ide_label": ide,
                "repo_branch": branch,
                "created_at": prior.get("created_at", now) if prior else now,
                "updated_at": now,
                "last_seen_at": now,
                "ended_at": None,
            }
            sessions[session_id] = record
            room["session_id"] = session_id
            del room["pending"]
            return record

        record = await self.state.update(commit)
        logger.info(
            "worker %s registered in local room %s as %r",
            worker_id,
            room_id,
            record["display_name"],
        )
        return AgentSession.from_json(record)

    def _hold(self, session: AgentSession) -> None:
        if self.manager is None or not self.manager.is_eligible(session):
            return
        try:
            self.manager.hold(session)
        except trio.ClosedResourceError:
            logger.info("not holding %s: the connection manager is closing", session.session_id)

    # --- acting as a worker ------------------------------------------------------------

    def _target(
        self, worker_id: str | None, agent_session_id: str | None, room_id: str | None
    ) -> _Target:
        if worker_id and agent_session_id:
            raise WorkerError(BOTH_TARGETS_TEXT)
        data = self._snapshot()
        if not worker_id:
            if not agent_session_id:
                raise WorkerError(WORKER_OR_SESSION_TEXT)
            stored = _stored(data, agent_session_id)
            if stored is None:
                raise WorkerError(UNKNOWN_SESSION_TEXT)
            instance = stored.extra.get("agent_instance_id")
            if not (isinstance(instance, str) and is_durable_worker_id(instance)):
                return _Target(
                    worker_id=None, room_id=stored.room_id, legacy_session_id=stored.session_id
                )
            worker_id, room_id = instance, stored.room_id
        if not is_durable_worker_id(worker_id):
            raise WorkerError(UNKNOWN_WORKER_TEXT)
        record = mapping_at(_dicts(data, "mcp_workers"), worker_id)
        if record is None:
            raise WorkerError(UNKNOWN_WORKER_TEXT)
        if not room_id:
            rooms = list(_dicts(record, "rooms"))
            if len(rooms) > 1:
                raise WorkerError(AMBIGUOUS_ROOM_TEXT)
            if not rooms:
                raise WorkerError(NO_CONNECTION_TEXT)
            room_id = rooms[0]
        return _Target(worker_id=worker_id, room_id=room_id)

    def _check(self, target: _Target, *, allow_ended: bool) -> AgentSession | None:
        """The stored session when ``target`` may act now (§6.6), else ``None``.

        Raises:
            WorkerError: the pinned token differs from the stored one (replaced).
        """
        data = self._snapshot()
        if target.worker_id is None:
            stored = _stored(data, target.legacy_session_id)
            if stored is None or (stored.ended_at and not allow_ended):
                return None
            return stored
        record = mapping_at(_dicts(data, "mcp_workers"), target.worker_id)
        room = mapping_at(_dicts(record, "rooms"), target.room_id) if record else None
        if room is None or room.get("pending") is not None:
            return None
        session_id = room.get("session_id")
        stored = _stored(data, session_id if isinstance(session_id, str) else None)
        pin = self._pins.get(stored.session_id) if stored is not None else None
        if stored is None or pin is None or (stored.ended_at and not allow_ended):
            return None
        if not _same_token(pin.session_token, stored.session_token):
            raise WorkerError(CONNECTION_REPLACED_TEXT)
        return stored

    @asynccontextmanager
    async def acting_as(
        self,
        *,
        worker_id: str | None = None,
        agent_session_id: str | None = None,
        room_id: str | None = None,
        allow_ended: bool = False,
    ) -> AsyncIterator[AgentSession]:
        """Run a room call as a worker, guarded before and after (PROTOCOL §6.6).

        Before the block: this process pinned the worker's current session in
        the room, the stored record exists, no registration is pending, it is
        not ended (unless ``allow_ended``), and its token equals the pin. After
        the block (when it exits normally) the same check runs again from disk.

        Args:
            worker_id: the worker's handle.
            agent_session_id: a legacy session id instead of ``worker_id``; a
                durable worker's session is guarded the same way.
            room_id: the room; may be omitted when the worker has exactly one.
            allow_ended: allow an ended session (disconnect only).

        Yields:
            The stored session to act as (its credentials for the request).

        Raises:
            WorkerError: ``NO_CONNECTION_TEXT`` or ``CONNECTION_REPLACED_TEXT``
                before the block; ``CONNECTION_REPLACED_OR_DISCONNECTED_TEXT``
                after it; the unknown-worker, ambiguous-room and both-targets
                texts for bad arguments.
            StateUnavailable: the state file is damaged.

        Cancellation:
            A checkpoint before the block; nothing to clean up. A block that
            is cancelled (or raises) skips the after-check.
        """
        target = self._target(worker_id, agent_session_id, room_id)
        session = self._check(target, allow_ended=allow_ended)
        if session is None:
            raise WorkerError(NO_CONNECTION_TEXT)
        await trio.lowlevel.checkpoint()
        yield session
        try:
            after = self._check(target, allow_ended=allow_ended)
        except WorkerError:
            after = None
        if after is None or not _same_token(after.session_token, session.session_token):
            raise WorkerError(CONNECTION_REPLACED_OR_DISCONNECTED_TEXT)

    # --- disconnect --------------------------------------------------------------------

    async def disconnect(
        self,
        *,
        worker_id: str | None = None,
        agent_session_id: str | None = None,
        room_id: str | None = None,
    ) -> AgentSession:
        """End a worker's session at the room and here (R6, PROTOCOL §6.5).

        Runs inside :meth:`acting_as` with ``allow_ended=True``: the room is
        told with the worker's own credentials (local rooms: nothing is sent),
        the process connection is released, then the stored record is ended,
        guarded by the token, so a late answer never ends a successor that
        another process registered meanwhile; that case then raises the
        after-check error.

        Returns:
            The ended session.

        Raises:
            WorkerError: as :meth:`acting_as`.
            ApiError, RoomUnreachable: the room refused or did not answer;
                nothing was changed here.

        Cancellation:
            A checkpoint. Cancelled while the request is in flight, the room
            may have ended the session while the local record is still live;
            the next room call is then refused with the ended advice, which
            ends the record.
        """
        async with self.acting_as(
            worker_id=worker_id,
            agent_session_id=agent_session_id,
            room_id=room_id,
            allow_ended=True,
        ) as session:
            ended_at = iso_now(self.state.wall_clock)
            if not session.is_local:
                answer = await self.client.call(
                    "POST",
                    self.client.session_url(session, "/disconnect"),
                    json={
                        "agent_session_id": session.session_id,
                        "agent_session_token": session.session_token,
                    },
                )
                row = answer.get("agent_session") if isinstance(answer, Mapping) else None
                stamp = row.get("ended_at") if isinstance(row, Mapping) else None
                if isinstance(stamp, str) and stamp:
                    ended_at = stamp
                if self.manager is not None:
                    self.manager.release(session.session_id)
            await self.state.end_session(session.session_id, ended_at, session.session_token)
            logger.info("session %s disconnected", session.session_id)
        return attrs.evolve(session, ended_at=ended_at)
