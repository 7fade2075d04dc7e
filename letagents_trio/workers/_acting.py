"""Whom a worker call acts as, and whether it may act now (PROTOCOL §5.1, §6.6).

Every room tool of the MCP facade names a worker by ``worker_id`` (or a
legacy ``agent_session_id``) and perhaps a room. :func:`resolve_target` turns
that into a :class:`Target`: a durable worker in one room, or a legacy session
that belongs to no worker. :func:`acting_session` then answers, from a state
snapshot and this process's pins, whether the target may act: the worker's
current session in the room is stored, no registration is pending, this
process pinned it with the stored token, and it is not ended. A pin whose
token differs from the stored one means another process re-registered the
worker: that is an error of its own (the connection was replaced), not just
"no connection".

Both are pure functions of their arguments (no I/O, no clock). :func:`act_as`
runs them around a room call, before it and again after it, over a snapshot
the worker handles supply. :func:`held_session` answers a call that names only
a room (an MCP resource has no ``worker_id``): the one live worker session
this process holds there, if it holds exactly one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, final

import attrs
import trio

from .._errors import WorkerError
from ._names import is_durable_worker_id
from ._records import known_worker, same_token, stored_session, worker_record
from ._stateparts import mapping_at
from ._wire import (
    AMBIGUOUS_ROOM_TEXT,
    BOTH_TARGETS_TEXT,
    CONNECTION_REPLACED_OR_DISCONNECTED_TEXT,
    CONNECTION_REPLACED_TEXT,
    NO_CONNECTION_TEXT,
    UNKNOWN_SESSION_TEXT,
    WORKER_OR_SESSION_TEXT,
)

if TYPE_CHECKING:
    from .._session import AgentSession
    from ._wire import HostWording

__all__ = ["Target", "act_as", "acting_session", "held_session", "resolve_target"]


@final
@attrs.frozen(kw_only=True)
class Target:
    """Whom a worker call acts as: a durable worker in a room, or a legacy session."""

    worker_id: str | None
    room_id: str
    legacy_session_id: str | None = None


def resolve_target(
    data: Mapping[str, Any],
    *,
    wording: HostWording,
    worker_id: str | None,
    agent_session_id: str | None,
    room_id: str | None,
) -> Target:
    """Whom a worker call acts as (§5.1 facade): a worker in a room, or a legacy session.

    A legacy ``agent_session_id`` of a durable worker's session is that worker
    in that room. A worker called without ``room_id`` must have exactly one room.

    Raises:
        WorkerError: both targets, neither, an unknown worker or session, a
            worker in several rooms (ambiguous) or in none (no connection).
    """
    if worker_id and agent_session_id:
        raise WorkerError(BOTH_TARGETS_TEXT)
    if not worker_id:
        if not agent_session_id:
            raise WorkerError(WORKER_OR_SESSION_TEXT)
        stored = stored_session(data, agent_session_id)
        if stored is None:
            raise WorkerError(UNKNOWN_SESSION_TEXT)
        instance = stored.extra.get("agent_instance_id")
        if not (isinstance(instance, str) and is_durable_worker_id(instance)):
            return Target(
                worker_id=None, room_id=stored.room_id, legacy_session_id=stored.session_id
            )
        worker_id, room_id = instance, stored.room_id
    record = known_worker(data, worker_id, wording)
    if not room_id:
        rooms = list(mapping_at(record, "rooms") or {})
        if len(rooms) > 1:
            raise WorkerError(AMBIGUOUS_ROOM_TEXT)
        if not rooms:
            raise WorkerError(NO_CONNECTION_TEXT)
        room_id = rooms[0]
    return Target(worker_id=worker_id, room_id=room_id)


def acting_session(
    data: Mapping[str, Any],
    pins: Mapping[str, AgentSession],
    target: Target,
    *,
    allow_ended: bool,
) -> AgentSession | None:
    """The stored session when ``target`` may act now (§6.6), else ``None``.

    A legacy session only needs to be stored (and live unless ``allow_ended``).
    A worker needs its room's current session stored, no operation pending,
    a pin of that session here, and (unless ``allow_ended``) not ended.

    Raises:
        WorkerError: ``CONNECTION_REPLACED_TEXT``: the pinned token differs
            from the stored one (another process re-registered the worker).
    """
    if target.worker_id is None:
        stored = stored_session(data, target.legacy_session_id)
        if stored is None or (stored.ended_at and not allow_ended):
            return None
        return stored
    record = worker_record(data, target.worker_id)
    rooms = mapping_at(record, "rooms") if record is not None else None
    room = mapping_at(rooms, target.room_id) if rooms is not None else None
    if room is None or room.get("pending") is not None:
        return None
    stored = stored_session(data, room.get("session_id"))
    pin = pins.get(stored.session_id) if stored is not None else None
    if stored is None or pin is None or (stored.ended_at and not allow_ended):
        return None
    if not same_token(pin.session_token, stored.session_token):
        raise WorkerError(CONNECTION_REPLACED_TEXT)
    return stored


def held_session(
    data: Mapping[str, Any], pinned: Callable[[str], AgentSession | None], room_id: str
) -> AgentSession | None:
    """The one live worker session this process holds in ``room_id``, or ``None``.

    "Holds" as :func:`acting_session` means it: a worker's current session in
    the room, stored and live, no registration pending, pinned here with the
    stored token. None when there is no such session, or more than one.
    """
    found: list[AgentSession] = []
    workers = mapping_at(data, "mcp_workers") or {}
    pins = {}
    for worker_id in workers:
        record = worker_record(data, str(worker_id))
        rooms = mapping_at(record, "rooms") if record is not None else None
        room = mapping_at(rooms, room_id) if rooms is not None else None
        session_id = room.get("session_id") if room is not None else None
        pin = pinned(session_id) if isinstance(session_id, str) else None
        if pin is not None:
            pins[pin.session_id] = pin
            try:
                held = acting_session(
                    data,
                    pins,
                    Target(worker_id=str(worker_id), room_id=room_id),
                    allow_ended=False,
                )
            except WorkerError:  # replaced by another process: not held here
                held = None
            if held is not None:
                found.append(held)
    return found[0] if len(found) == 1 else None


@asynccontextmanager
async def act_as(
    snapshot: Callable[[], Mapping[str, Any]],
    pins: Mapping[str, AgentSession],
    *,
    wording: HostWording,
    worker_id: str | None,
    agent_session_id: str | None,
    room_id: str | None,
    allow_ended: bool,
) -> AsyncIterator[AgentSession]:
    """Check the target may act, yield its session, check again after the block.

    ``snapshot`` reads the state file (raising when it is damaged); the check
    after the block reads it afresh. See :meth:`WorkerHandles.acting_as
    <letagents_trio.workers.WorkerHandles.acting_as>` for the rules and errors.
    """
    if worker_id and agent_session_id:
        # An argument error, reported even when the state file is damaged.
        raise WorkerError(BOTH_TARGETS_TEXT)
    data = snapshot()
    target = resolve_target(
        data,
        wording=wording,
        worker_id=worker_id,
        agent_session_id=agent_session_id,
        room_id=room_id,
    )
    session = acting_session(data, pins, target, allow_ended=allow_ended)
    if session is None:
        raise WorkerError(NO_CONNECTION_TEXT)
    await trio.lowlevel.checkpoint()
    yield session
    try:
        after = acting_session(snapshot(), pins, target, allow_ended=allow_ended)
    except WorkerError:
        after = None
    if after is None or not same_token(after.session_token, session.session_token):
        raise WorkerError(CONNECTION_REPLACED_OR_DISCONNECTED_TEXT)
