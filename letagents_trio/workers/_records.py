"""Worker records in the state file: every read of them and every change to them.

The state file (PROTOCOL §6.3) keeps, besides the sessions under
``agent_sessions``, one record per durable worker::

    mcp_workers[worker_id] = {
        "worker_id", "scope", "registration_key_hash", "display_name",
        "rooms": {room_id: {"session_id"?, "pending"?: {operation_id,
                  connection_token, predecessor_id?, predecessor_token?}}},
    }

Each *change* is a pure function of the parsed state object and its
arguments: it changes the object in place and returns what the orchestration
needs next. :class:`~letagents_trio.workers.WorkerHandles` runs it inside
:meth:`LocalStateStore.update` (under the lock, with no checkpoint), so it
either happens whole or not at all. Each *read* is a pure function of a
snapshot (and of this process's pins, where §6.4 says so). Nothing here does
I/O, draws a random value or reads a clock: ids, tokens and times are
arguments, which is what makes every rule testable on a plain dict.

A change that finds the record moved on under it raises the §5.2 text that
says so (``SUPERSEDED_TEXT``, ``IN_PROGRESS_TEXT``, ...) and writes nothing.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, final

import attrs

from .._errors import WorkerError
from ._names import (
    AGENT_CODENAME_SPACE,
    actor_label,
    allocate_name,
    codename,
    is_durable_worker_id,
    name_key,
)
from ._stateparts import ensure_mapping, mapping_at, session_in
from ._wire import (
    IN_PROGRESS_TEXT,
    NOT_CONFIRMED_TEXT,
    SUPERSEDED_LOCAL_TEXT,
    SUPERSEDED_TEXT,
    UNKNOWN_WORKER_TEXT,
    unknown_worker_text,
)

if TYPE_CHECKING:
    from .._session import AgentSession
    from ._wire import HostWording

__all__ = [
    "LOCAL_SESSION_PREFIX",
    "LocalSessionFacts",
    "Operation",
    "confirmed_record",
    "create_or_reuse_worker",
    "drop_operation",
    "held_under",
    "known_key",
    "known_worker",
    "local_session_id",
    "pending_operation",
    "pending_room",
    "pinned_current",
    "prepare_operation",
    "read_leases",
    "registration_key_hash",
    "room_record",
    "same_token",
    "store_hosted_session",
    "store_local_session",
    "stored_session",
    "worker_in_scope",
    "worker_record",
]

# A local room's session ids: ``local_`` + sha256_hex(worker_id + "\n" + room).
LOCAL_SESSION_PREFIX: Final = "local_"
# Fields of the registration answer that are never stored (§5.3 step 8).
_NOT_STORED: Final = ("assigned_base_display_name", "worker_bearer", "adopted_task_leases")
# The fields of an adopted task lease kept (and returned once) from the answer.
_LEASE_FIELDS: Final = ("lease_id", "task_id", "kind")


# --- values ------------------------------------------------------------------------


@final
@attrs.frozen(kw_only=True)
class Operation:
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
        """The ``pending`` object as stored."""
        data = {"operation_id": self.operation_id, "connection_token": self.connection_token}
        if self.predecessor is not None:
            data["predecessor_id"], data["predecessor_token"] = self.predecessor
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Operation | None:
        """The stored ``pending`` object, or ``None`` when it lacks an id or a token."""
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
@attrs.frozen(kw_only=True)
class LocalSessionFacts:
    """What a local room's session record says beyond the operation (§5.3 step 9).

    Attributes:
        canonical_key: ``<owner>/worker-<hex>``; seeds the codenames a taken
            name falls back to.
        worker_name: the worker's stored display name (the name asked for).
        owner_label: the owner part of the actor label.
        ide_label: the IDE label.
        runtime: the runtime label.
        repo_branch: the git branch of the chat's working directory, if any.
        now: the ISO time of the registration.
    """

    canonical_key: str
    worker_name: str
    owner_label: str
    ide_label: str
    runtime: str
    repo_branch: str | None
    now: str


# --- small pure helpers --------------------------------------------------------------


def _sha256_hex(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def registration_key_hash(scope: str, registration_key: str) -> str:
    """``sha256_hex(scope + "\\n" + key)``: what names a created worker (the key as given)."""
    return _sha256_hex(f"{scope}\n{registration_key}")


def local_session_id(worker_id: str, room_id: str) -> str:
    """A local room's session id for a worker: ``local_`` + sha256_hex(worker + "\\n" + room)."""
    return LOCAL_SESSION_PREFIX + _sha256_hex(f"{worker_id}\n{room_id}")


def same_token(a: str, b: str) -> bool:
    """Whether two tokens are equal, compared in constant time."""
    return secrets.compare_digest(a.encode("utf-8"), b.encode("utf-8"))


def read_leases(value: object) -> tuple[dict[str, str], ...]:
    """The well-formed ``{lease_id, task_id, kind}`` entries of ``adopted_task_leases``."""
    if not isinstance(value, list):
        return ()
    return tuple(
        {k: entry[k] for k in _LEASE_FIELDS}
        for entry in value
        if isinstance(entry, Mapping) and all(isinstance(entry.get(k), str) for k in _LEASE_FIELDS)
    )


def _dicts(parent: Mapping[str, Any] | None, key: str) -> Mapping[str, Any]:
    child = None if parent is None else mapping_at(parent, key)
    return {} if child is None else child


def _dict_at(parent: dict[str, Any] | None, key: str) -> dict[str, Any] | None:
    """The object under ``key`` for writing, or ``None`` when absent or not an object."""
    child = None if parent is None else parent.get(key)
    return child if isinstance(child, dict) else None


def stored_session(data: Mapping[str, Any], session_id: object) -> AgentSession | None:
    """The well-formed session stored under ``session_id`` (a non-empty string), or ``None``."""
    return session_in(data, session_id) if isinstance(session_id, str) and session_id else None


# --- reads ---------------------------------------------------------------------------


def worker_record(data: Mapping[str, Any], worker_id: str) -> Mapping[str, Any] | None:
    """``mcp_workers[worker_id]``, or ``None``."""
    return mapping_at(_dicts(data, "mcp_workers"), worker_id)


def room_record(worker: Mapping[str, Any], room_id: str) -> Mapping[str, Any]:
    """The worker's record of a room (``{}`` when it has none)."""
    return mapping_at(_dicts(worker, "rooms"), room_id) or {}


def known_key(data: Mapping[str, Any], scope: str, key_hash: str) -> bool:
    """Whether a worker of ``scope`` was already created with this key hash."""
    return any(
        isinstance(w, Mapping)
        and w.get("scope") == scope
        and w.get("registration_key_hash") == key_hash
        for w in _dicts(data, "mcp_workers").values()
    )


def worker_in_scope(
    data: Mapping[str, Any], worker_id: str, scope: str, wording: HostWording
) -> Mapping[str, Any]:
    """The record of ``worker_id`` when it belongs to ``scope``.

    Raises:
        WorkerError: ``UNKNOWN_WORKER_TEXT``, then which of the three it is: a
            malformed id, a worker not stored here, or one of another account
            or API (both named).
    """
    record = known_worker(data, worker_id, wording)
    theirs = record.get("scope")
    if theirs != scope:
        why = (
            f"Worker {worker_id} was created for {_scope_text(theirs)}; this call is for"
            f" {_scope_text(scope)}."
        )
        raise WorkerError(unknown_worker_text(why, wording))
    return record


def known_worker(
    data: Mapping[str, Any], worker_id: str, wording: HostWording
) -> Mapping[str, Any]:
    """The stored record of ``worker_id``, of any scope.

    Raises:
        WorkerError: ``UNKNOWN_WORKER_TEXT`` and why: a malformed id, or no such
            worker in the state file.
    """
    if not is_durable_worker_id(worker_id):
        why = f"{worker_id!r} is not a worker handle (worker_ and 32 hex digits)."
        raise WorkerError(unknown_worker_text(why, wording))
    record = worker_record(data, worker_id)
    if record is None:
        why = f"No worker {worker_id} is stored in this state file."
        raise WorkerError(unknown_worker_text(why, wording))
    return record


def _scope_text(scope: object) -> str:
    """``alice at http://…`` for a scope string (``<api_url>\n<login or local:slug>``)."""
    if not isinstance(scope, str) or "\n" not in scope:
        return "another account or API"
    api_url, _, who = scope.partition("\n")
    return f"{who} at {api_url}"


def _live_pin(
    data: Mapping[str, Any], pins: Mapping[str, AgentSession], session_id: object
) -> tuple[AgentSession, AgentSession] | None:
    """``(stored, pin)`` of a stored, live session pinned here with the stored token."""
    stored = stored_session(data, session_id)
    if stored is None or stored.ended_at:
        return None
    pin = pins.get(stored.session_id)
    if pin is None or not same_token(pin.session_token, stored.session_token):
        return None
    return stored, pin


def held_under(
    data: Mapping[str, Any],
    pins: Mapping[str, AgentSession],
    *,
    name: str,
    scope: str,
    room_id: str,
) -> list[tuple[str, str]]:
    """Workers this process holds live under ``name`` in the room: ``(worker_id, name)``.

    "Holds" means a pin of the worker's current, live session there, with the
    stored token. The name compared is the one it lives under now (its
    session's ``display_name``), by name key, not the one it asked for.
    """
    if not name:
        return []
    wanted = name_key(name)
    found: list[tuple[str, str]] = []
    for worker_id, record in _dicts(data, "mcp_workers").items():
        if not isinstance(record, Mapping) or record.get("scope") != scope:
            continue
        live = _live_pin(data, pins, room_record(record, room_id).get("session_id"))
        if live is None or name_key(live[0].display_name) != wanted:
            continue
        found.append((str(record.get("worker_id") or worker_id), live[0].display_name))
    return found


def pinned_current(
    data: Mapping[str, Any], pins: Mapping[str, AgentSession], room: Mapping[str, Any]
) -> AgentSession | None:
    """The pinned fast path (§5.3 step 2): the pin to return without asking the room.

    Only when this process pinned the room's current session, the stored
    record is live, its token equals the pin's, and no operation is pending.
    """
    if mapping_at(room, "pending") is not None:
        return None
    live = _live_pin(data, pins, room.get("session_id"))
    return None if live is None else live[1]


def pending_operation(room: Mapping[str, Any]) -> Operation | None:
    """The operation a lost response left under ``pending``, to finish with its token."""
    pending = mapping_at(room, "pending")
    return Operation.from_json(pending) if pending is not None else None


def confirmed_record(
    created: object,
    *,
    operation: Operation,
    worker_id: str,
    canonical_key: str,
    room_id: str,
    display_name: str,
) -> tuple[dict[str, Any], tuple[dict[str, str], ...]]:
    """The session record to store from a registration's 201, and its adopted leases.

    The answer must confirm us field by field: ``session_token`` echoes the
    operation's token, ``agent_instance_id``, ``agent_key`` and ``room_id``
    are ours, and it is not ended. ``worker_bearer`` and the leases are never
    stored; ``requested_base_display_name`` is the name the room assigned as
    base (else the one asked for).

    Raises:
        WorkerError: ``NOT_CONFIRMED_TEXT`` (§5.2.10).
    """
    if not (
        isinstance(created, Mapping)
        and isinstance(created.get("session_id"), str)
        and created["session_id"]
        and isinstance(created.get("session_token"), str)
        and same_token(created["session_token"], operation.connection_token)
        and created.get("agent_instance_id") == worker_id
        and created.get("agent_key") == canonical_key
        and created.get("room_id") == room_id
        and not created.get("ended_at")
    ):
        raise WorkerError(NOT_CONFIRMED_TEXT)
    record = {k: v for k, v in created.items() if k not in _NOT_STORED}
    assigned = created.get("assigned_base_display_name")
    record["requested_base_display_name"] = assigned if assigned is not None else display_name
    return record, read_leases(created.get("adopted_task_leases"))


# --- changes (run inside LocalStateStore.update) -------------------------------------


def create_or_reuse_worker(
    state: dict[str, Any], *, scope: str, key_hash: str, display_name: str | None, new_id: str
) -> tuple[str, bool]:
    """The worker of ``scope`` created with ``key_hash``, else a new one stored as ``new_id``.

    A new worker goes by the trimmed ``display_name``, or the codename of its id.

    Returns:
        ``(worker_id, created)``.
    """
    records = ensure_mapping(state, "mcp_workers")
    for record in records.values():
        if (
            isinstance(record, dict)
            and record.get("scope") == scope
            and record.get("registration_key_hash") == key_hash
            and isinstance(record.get("worker_id"), str)
        ):
            return str(record["worker_id"]), False
    records[new_id] = {
        "worker_id": new_id,
        "scope": scope,
        "registration_key_hash": key_hash,
        "display_name": display_name or codename(new_id).display_name,
        "rooms": {},
    }
    return new_id, True


def prepare_operation(
    state: dict[str, Any],
    worker_id: str,
    room_id: str,
    *,
    operation_id: str,
    connection_token: str,
    prove: bool = True,
) -> Operation:
    """Store a new pending operation, with the predecessor's id and token as proof.

    ``prove=False`` stores none: the room no longer knows the predecessor (it
    forgot the worker's sessions), so a proof would only be refused.

    Raises:
        WorkerError: ``UNKNOWN_WORKER_TEXT`` (the record is gone), or
            ``IN_PROGRESS_TEXT`` (another operation is pending).
    """
    record = _dict_at(ensure_mapping(state, "mcp_workers"), worker_id)
    if record is None:
        raise WorkerError(UNKNOWN_WORKER_TEXT)
    room = ensure_mapping(ensure_mapping(record, "rooms"), room_id)
    if room.get("pending") is not None:
        raise WorkerError(IN_PROGRESS_TEXT)
    predecessor = stored_session(state, room.get("session_id")) if prove else None
    operation = Operation(
        operation_id=operation_id,
        connection_token=connection_token,
        predecessor_id=predecessor.session_id if predecessor else None,
        predecessor_token=predecessor.session_token if predecessor else None,
    )
    room["pending"] = operation.to_json()
    return operation


def pending_room(
    state: dict[str, Any], worker_id: str, room_id: str, operation: Operation
) -> dict[str, Any]:
    """The room record whose ``pending`` is still ``operation``, for writing.

    Raises:
        WorkerError: ``SUPERSEDED_TEXT`` (§5.2.11): it is gone or another one.
    """
    room = _dict_at(_dict_at(_dict_at(state, "mcp_workers"), worker_id), "rooms")
    room = _dict_at(room, room_id)
    pending = _dict_at(room, "pending")
    if room is None or pending is None or pending.get("operation_id") != operation.operation_id:
        raise WorkerError(SUPERSEDED_TEXT)
    return room


def drop_operation(
    state: dict[str, Any], worker_id: str, room_id: str, operation: Operation
) -> bool:
    """Remove ``operation`` from ``pending`` if it is still there (the room refused it).

    Returns:
        Whether it was removed.
    """
    try:
        room = pending_room(state, worker_id, room_id, operation)
    except WorkerError:
        return False
    del room["pending"]
    return True


def store_hosted_session(
    state: dict[str, Any],
    worker_id: str,
    room_id: str,
    operation: Operation,
    record: Mapping[str, Any],
    *,
    now: str,
) -> None:
    """Finish ``operation`` with the room's session: store it, make it current, drop ``pending``.

    A room that forgot the worker's session answers with another session id:
    the session it replaces is then ended here at ``now``, as it is no longer
    the room's.

    Raises:
        WorkerError: ``SUPERSEDED_TEXT``, as :func:`pending_room`.
    """
    room = pending_room(state, worker_id, room_id, operation)
    session_id = str(record["session_id"])
    sessions = ensure_mapping(state, "agent_sessions")
    prior_id = room.get("session_id")
    if isinstance(prior_id, str) and prior_id != session_id:
        prior = _dict_at(sessions, prior_id)
        if prior is not None and not prior.get("ended_at"):
            prior["ended_at"] = prior["updated_at"] = prior["last_seen_at"] = now
    sessions[session_id] = dict(record)
    room["session_id"] = session_id
    del room["pending"]


def store_local_session(
    state: dict[str, Any],
    worker_id: str,
    room_id: str,
    operation: Operation,
    facts: LocalSessionFacts,
) -> dict[str, Any]:
    """Finish ``operation`` in a local room: the session is made here, with no HTTP.

    The session id is :func:`local_session_id`, kept across registrations. A
    stored session may only be replaced with its own token or the operation's
    (another process re-registered it otherwise). A first registration takes
    the worker's name unless another session of the room holds its name key,
    then the first free codename of the canonical key (:func:`allocate_name`,
    never a number suffix); a later one keeps the name it has. The actor label
    is kept while the name is.

    Returns:
        The stored session record.

    Raises:
        WorkerError: ``SUPERSEDED_TEXT``, as :func:`pending_room`, or
            ``SUPERSEDED_LOCAL_TEXT``: another process's token is stored.
    """
    room = pending_room(state, worker_id, room_id, operation)
    sessions = ensure_mapping(state, "agent_sessions")
    prior_id = room.get("session_id")
    first = not isinstance(prior_id, str) or not prior_id
    session_id = local_session_id(worker_id, room_id) if first else str(prior_id)
    prior = mapping_at(sessions, session_id)
    if prior is not None:
        allowed = {operation.predecessor_token, operation.connection_token}
        if prior.get("session_token") not in allowed:
            raise WorkerError(SUPERSEDED_LOCAL_TEXT)
    name = str(prior["display_name"]) if prior and prior.get("display_name") else None
    if name is None or first:
        used = {
            name_key(str(other.get("display_name") or ""))
            for other_id, other in sessions.items()
            if isinstance(other, dict)
            and other.get("room_id") == room_id
            and other_id != session_id
        }
        name = allocate_name(
            facts.worker_name,
            facts.canonical_key,
            lambda candidate: name_key(candidate) in used,
            max_offset=AGENT_CODENAME_SPACE,
        )
        if name is None:
            # The whole codename space is held: a local room never refuses, so
            # the last candidate is taken anyway.
            name = codename(f"{facts.canonical_key}:{AGENT_CODENAME_SPACE}").display_name
    label = (
        str(prior["actor_label"])
        if prior and prior.get("actor_label") and prior.get("display_name") == name
        else actor_label(name, facts.owner_label, facts.ide_label)
    )
    now = facts.now
    record: dict[str, Any] = {
        "session_id": session_id,
        "session_token": operation.connection_token,
        "room_id": room_id,
        "session_kind": "worker",
        "runtime": facts.runtime,
        "actor_label": label,
        "agent_key": facts.canonical_key,
        "agent_instance_id": worker_id,
        "display_name": name,
        "requested_base_display_name": facts.worker_name,
        "owner_label": facts.owner_label,
        "ide_label": facts.ide_label,
        "repo_branch": facts.repo_branch,
        "created_at": prior.get("created_at", now) if prior else now,
        "updated_at": now,
        "last_seen_at": now,
        "ended_at": None,
    }
    sessions[session_id] = record
    room["session_id"] = session_id
    del room["pending"]
    return record
