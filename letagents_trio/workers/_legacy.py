"""The legacy registration path (PROTOCOL §5.8): a session of this process, not a worker.

``register_agent_session`` without ``worker_id``, ``registration_key`` or
``recover_lost_worker`` (older prompts, and every controller) does not make a
durable worker. The Node client sends it down this path, and so do we:

* **With a worker bearer** (``LETAGENTS_AGENT_SESSION_BEARER``: not owner
  mode, §4.1) nothing is sent and nothing stored: the bearer already stands
  for a session the room made, so the answer is the Node client's marker
  session ``worker_bearer`` (``runtime/agent-sessions.ts``,
  ``resolveWorkerToolIdentity``), named after this process's identity, which
  room tools may name as their ``agent_session_id``; the bearer stays the only
  credential.
* **Otherwise** one ``POST /rooms/{room}/agent-sessions`` (through the busy
  retries) names the *process identity*, one per process as the Node client's
  (``identity/state.ts``, ``identity/names.ts``): its key is
  ``instance:<instance id>``, ``agent_instance_id`` being a random UUID made
  once per process (:attr:`LegacyRegistrar.instance_id`); its name is the
  codename of that key, moved on past the names the account's agents already
  have (``GET /agents/me``, asked once, best effort); ``actor_key`` is the
  canonical key ``POST /agents`` gives that name, ``actor_label`` is built
  from the identity's name, the owner and the IDE. Two processes are two
  actors, so nothing keyed on identity (lease adoption) crosses between them.
  The identity is made on the first registration and kept for the process's
  life. A live stored session of the same
  instance in the room is named as the one replaced
  (``replace_agent_session_id`` / ``_token``), so registering again in the same
  process replaces its session instead of meeting "already active". There is
  no ``connection_token``: the room makes the session's token.
* The 201 is checked (a session id and token, this room, this instance, not
  ended), then, under the state lock, the replaced record is ended, the new
  one stored (without ``worker_bearer`` or ``adopted_task_leases``) and made
  the room's current session; its process connection is held (a worker's)
  and the replaced one's released.

Local rooms have no legacy sessions here: the path is refused there with
:data:`LEGACY_LOCAL_TEXT` (a worker handle works in every room).
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, final

import attrs
import trio

from .._client import encode_room_path
from .._errors import ApiError, RoomUnreachable, WorkerError
from .._session import AgentSession
from ._git import git_branch
from ._identity import local_host_id, process_host_id, registration_liveness
from ._names import (
    AGENT_CODENAME_SPACE,
    Codename,
    actor_label,
    codename,
    js_trim,
    normalize_agent_base_name,
)
from ._owner import no_sign_in
from ._records import read_leases, stored_session
from ._results import WorkerRegistration
from ._stateparts import ensure_mapping, iso_now, mapping_at
from ._wire import (
    EMBEDDER_WORDING,
    NO_CANONICAL_IDENTITY_TEXT,
    NOT_CONFIRMED_TEXT,
    HostWording,
)

if TYPE_CHECKING:
    from .._client import RoomClient
    from .._manager import ConnectionManager
    from ._owner import Owner
    from ._state import LocalStateStore

__all__ = [
    "LEGACY_LOCAL_TEXT",
    "WORKER_BEARER_SESSION_ID",
    "LegacyRegistrar",
    "hold_connection",
    "process_agent_name",
]

logger = logging.getLogger("letagents_trio.workers")

# Ours (upstream's local legacy sessions were not read): the path is refused there.
LEGACY_LOCAL_TEXT: Final = (
    "This room keeps its chat on this machine (chat storage: local): register a worker"
    " with a registration_key to join it."
)
# The Node client's marker session of a worker bearer (runtime/agent-sessions.ts).
WORKER_BEARER_SESSION_ID: Final = "worker_bearer"
# The 201 fields a stored legacy record never keeps (as for durable workers, §5.3).
_NOT_STORED: Final = ("worker_bearer", "adopted_task_leases", "assigned_base_display_name")
# Hex digits of the key's hash a name gets when every codename is taken.
_FALLBACK_HEX: Final = 4


def process_agent_name(identity_key: str, taken: frozenset[str] = frozenset()) -> Codename:
    """The process identity's name: the first codename of ``identity_key`` not ``taken``.

    ``taken`` holds the account's agent names, normalized
    (:func:`~._names.normalize_agent_base_name`). Should every codename be
    taken, the first one with four hex digits of the key's hash appended.
    """
    for offset in range(AGENT_CODENAME_SPACE):
        candidate = codename(identity_key, offset)
        if candidate.slug not in taken:
            return candidate
    suffix = hashlib.sha256(identity_key.encode("utf-8")).hexdigest()[:_FALLBACK_HEX]
    first = codename(identity_key)
    return Codename(
        display_name=f"{first.display_name} {suffix.upper()}", slug=f"{first.slug}-{suffix}"
    )


def _replaceable(data: Mapping[str, Any], instance_id: str, room_id: str) -> AgentSession | None:
    """A live stored session of this process's instance in the room: the one to replace."""
    sessions = mapping_at(data, "agent_sessions") or {}
    for session_id in sessions:
        stored = stored_session(data, session_id)
        if (
            stored is not None
            and not stored.ended_at
            and stored.room_id == room_id
            and stored.extra.get("agent_instance_id") == instance_id
        ):
            return stored
    return None


def _save(
    state: dict[str, Any], record: dict[str, Any], replaced: AgentSession | None, now: str
) -> None:
    """End the replaced record, store the new one, make it the room's current session."""
    sessions = ensure_mapping(state, "agent_sessions")
    if replaced is not None:
        old = sessions.get(replaced.session_id)
        old = old if isinstance(old, dict) else {}
        if old.get("session_token") == replaced.session_token and not old.get("ended_at"):
            old["ended_at"] = old["updated_at"] = old["last_seen_at"] = now
    sessions[record["session_id"]] = record
    current = ensure_mapping(state, "current_agent_session_ids")
    current[record["room_id"]] = record["session_id"]


def hold_connection(manager: ConnectionManager | None, session: AgentSession) -> None:
    """Have ``manager`` hold ``session``'s process connection, if it takes it (§4.1)."""
    if manager is None or not manager.is_eligible(session):
        return
    try:
        manager.hold(session)
    except trio.ClosedResourceError:
        logger.info("not holding %s: the connection manager is closing", session.session_id)


@final
@attrs.define(eq=False, kw_only=True)
class LegacyRegistrar:
    """This process's legacy path (PROTOCOL §5.8): its identity and its sessions.

    Args:
        client: the room client.
        state: the shared state file.
        runtime_label: the runtime label when a registration names none.
        ide_label: the IDE label of the actor label.
        manager: holds the process connections of registered workers (and
            releases those of replaced ones); ``None`` holds none.
        owner_label: the owner part of the worker-bearer marker's actor label.
        wording: how the host's user gives the owner token, named without a sign-in.
        instance_id: this process's instance UUID; a fresh one by default.
    """

    client: RoomClient
    state: LocalStateStore
    runtime_label: str
    ide_label: str
    manager: ConnectionManager | None = None
    owner_label: str = ""
    wording: HostWording = EMBEDDER_WORDING
    instance_id: str = attrs.field(factory=lambda: str(uuid.uuid4()))
    # The process identity (name, then canonical key), made by the first registration.
    _identity: tuple[Codename, str] | None = attrs.field(default=None, init=False)

    @property
    def identity_key(self) -> str:
        """``instance:<instance_id>``: what the process identity's name is made from."""
        return f"instance:{self.instance_id}"

    async def _process_identity(self, owner: Owner) -> tuple[Codename, str]:
        """The process identity's name and canonical key, made once (``POST /agents``)."""
        if self._identity is not None:
            await trio.lowlevel.checkpoint()
            return self._identity
        name = process_agent_name(self.identity_key, await self._agent_names())
        answer = await self.client.call(
            "POST",
            "/agents",
            json={"name": name.slug, "display_name": name.display_name, "owner_label": owner.label},
        )
        actor_key = answer.get("canonical_key") if isinstance(answer, Mapping) else None
        if not isinstance(actor_key, str) or not actor_key:
            raise WorkerError(NO_CANONICAL_IDENTITY_TEXT)
        shown = answer.get("display_name")
        if isinstance(shown, str) and shown:
            name = attrs.evolve(name, display_name=shown)
        self._identity = (name, actor_key)
        return self._identity

    async def _agent_names(self) -> frozenset[str]:
        """The account's agent names (normalized), or none when the room will not say."""
        try:
            answer = await self.client.call("GET", "/agents/me")
        except (ApiError, RoomUnreachable) as exc:
            logger.info("could not list the account's agents: %s", type(exc).__name__)
            return frozenset()
        agents = answer.get("agents") if isinstance(answer, Mapping) else None
        return frozenset(
            normalize_agent_base_name(agent["name"])
            for agent in (agents if isinstance(agents, list) else [])
            if isinstance(agent, Mapping) and isinstance(agent.get("name"), str)
        )

    def worker_bearer_session(self, room_id: str, *, runtime: str | None = None) -> AgentSession:
        """The marker session of a worker bearer in ``room_id``: nothing sent, nothing stored.

        As the Node client's (``resolveWorkerToolIdentity``): id ``worker_bearer``,
        no token (the bearer is the credential), this process's identity (the
        codename of ``instance:<uuid>``, its key), no host facts, now as every time.
        """
        name = process_agent_name(self.identity_key)
        now = iso_now(self.state.wall_clock)
        return AgentSession(
            session_id=WORKER_BEARER_SESSION_ID,
            session_token="",
            room_id=room_id,
            display_name=name.display_name,
            extra={
                "runtime": runtime or self.runtime_label,
                "host_id": None,
                "host_kind": None,
                "host_label": None,
                "liveness_capability": None,
                "tool_bridge_id": None,
                "actor_label": actor_label(name.display_name, self.owner_label, self.ide_label),
                "agent_key": self.identity_key,
                "agent_instance_id": self.instance_id,
                "owner_label": self.owner_label,
                "ide_label": self.ide_label,
                "repo_branch": None,
                "created_at": now,
                "updated_at": now,
                "last_seen_at": now,
            },
        )

    async def register(
        self,
        owner: Owner,
        room_id: str,
        *,
        local: bool,
        session_kind: str,
        display_name: str | None,
        runtime: str | None,
        cwd: str | None,
    ) -> WorkerRegistration:
        """Register one session and hold its connection; release the one it replaced.

        Returns:
            The session (``worker_id`` ``""``) and the leases it adopted.

        Raises:
            WorkerError: a local room, no sign-in, no canonical identity, or
                the room's answer did not confirm the session.
            ApiError, RoomUnreachable: the room refused or did not answer.
            StateUnavailable, StateLockTimeout: the state file.

        Cancellation:
            A checkpoint. Cancelled while the request is in flight, the room
            may have made the session; the next call replaces it only once the
            room counts it stale (nothing was stored here to prove it).
        """
        if local:
            raise WorkerError(LEGACY_LOCAL_TEXT)
        if owner.login is None:
            raise no_sign_in(self.state, self.wording)
        host_id = await local_host_id(self.state)
        name, actor_key = await self._process_identity(owner)
        display = js_trim(display_name or "") or name.display_name
        runtime_label = runtime or self.runtime_label
        replaced = _replaceable(self.state.read().data, self.instance_id, room_id)
        body = {
            "actor_key": actor_key,
            "actor_label": actor_label(name.display_name, owner.label, self.ide_label),
            "agent_instance_id": self.instance_id,
            "display_name": display,
            "requested_base_display_name": display,
            "session_kind": session_kind,
            "runtime": runtime_label,
            "repo_branch": git_branch(cwd),
            "registration_liveness": dict(registration_liveness(host_id, runtime_label)),
            "process_host_id": process_host_id(host_id),
            "replace_agent_session_id": replaced.session_id if replaced else None,
            "replace_agent_session_token": replaced.session_token if replaced else None,
        }
        created = await self.client.call_when_free(
            "POST", f"/rooms/{encode_room_path(room_id)}/agent-sessions", json=body
        )
        record = self._confirmed(created, room_id, display)
        leases = read_leases(created.get("adopted_task_leases"))
        now = iso_now(self.state.wall_clock)
        await self.state.update(lambda state: _save(state, record, replaced, now))
        logger.info(
            "legacy %s session %s registered in %s", session_kind, record["session_id"], room_id
        )
        session = AgentSession.from_json(record)
        if replaced is not None and self.manager is not None:
            self.manager.release(replaced.session_id)
        hold_connection(self.manager, session)
        return WorkerRegistration(worker_id="", session=session, adopted_task_leases=leases)

    def _confirmed(self, created: object, room_id: str, display: str) -> dict[str, Any]:
        """The record to store from the room's 201, or :data:`NOT_CONFIRMED_TEXT`."""
        if not isinstance(created, Mapping):
            raise WorkerError(NOT_CONFIRMED_TEXT)
        session_id, token = created.get("session_id"), created.get("session_token")
        if not (
            isinstance(session_id, str)
            and session_id
            and isinstance(token, str)
            and token
            and created.get("room_id") == room_id
            and created.get("agent_instance_id") == self.instance_id
            and not created.get("ended_at")
        ):
            raise WorkerError(NOT_CONFIRMED_TEXT)
        record = {k: v for k, v in created.items() if k not in _NOT_STORED}
        assigned = created.get("assigned_base_display_name")
        record["requested_base_display_name"] = assigned if isinstance(assigned, str) else display
        return record
