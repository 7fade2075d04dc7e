"""Task leases: the work lease a claim takes, lease actions, and adoption (§7.3, §7.5).

A lease is a session's hold on a task, of a kind (``work``), active until it is
released, revoked or expires. The board never takes a lease on request: a
claim of an accepted task takes a new work lease for the claiming session
(:func:`new_work_lease`), as the letagents API does, and at most one work lease
of a task is active. The liveness notices name a session's active work leases
(:func:`work_task_ids`).

Lease actions (``POST …/tasks/{t}/lease-action``, :func:`parse_lease_action`,
:func:`choose_target`): ``release`` gives the task's active work lease back (the
task returns to ``accepted`` while it was being worked); ``handoff`` passes it
to another live worker session, reachable in the room, which gets a fresh work
lease (the task is then ``assigned`` to it). The holder may act on its own
lease; anyone else must be the room's admin, and then the lease is revoked,
not released. The texts and codes are the letagents API's.

Adoption (:func:`adopts`): a registration adopts the active leases its owner's
ended sessions left. The same agent instance always does; once the old process
has exited, the same agent key does, and so does a same-named non-durable
holder's ``work`` lease whose agent key has no live session left.
``room_admin`` ends pass nothing on.

Everything here is a pure function of rows and the time;
:class:`~._taskboard.TaskBoard` applies them.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, final

import attrs

from ...workers._names import is_durable_worker_id, name_key
from .._storage._rows import END_REASON_ROOM_ADMIN, LeaseRow
from .._wire import iso, refuse
from ._tasks import LEASE_RECOVERY_STATUSES

if TYPE_CHECKING:
    from .._auth._accounts import Actor
    from .._storage._rows import SessionRow, TaskRow

__all__ = [
    "ACTION_TEXT",
    "MISSING_LEASE_CODE",
    "MISSING_LEASE_TEXT",
    "NOT_HOLDER_TEXT",
    "STALE_REFERENCE_CODE",
    "TARGET_REQUIRED_TEXT",
    "WORK",
    "LeaseAction",
    "adopted",
    "adopts",
    "choose_target",
    "ended_lease",
    "lease_json",
    "new_work_lease",
    "parse_lease_action",
    "work_lease",
    "work_task_ids",
]

# The kind of lease claims take and liveness notices are about.
WORK: Final = "work"
# The letagents API's texts and codes.
ACTION_TEXT: Final = "action must be 'release' or 'handoff'"
MISSING_LEASE_TEXT: Final = "No active work lease exists for this task"
MISSING_LEASE_CODE: Final = "coordination_missing_lease"
STALE_REFERENCE_CODE: Final = "coordination_stale_lease_reference"
TARGET_REQUIRED_TEXT: Final = "target_actor_key is required for handoff"
TARGET_SESSION_CODE: Final = "coordination_target_session_required"
TARGET_UNREACHABLE_CODE: Final = "coordination_target_session_unreachable"
INVALID_STATUS_CODE: Final = "coordination_invalid_task_status"
# Ours: the reference room's 403 for a lease action by someone else's agent.
NOT_HOLDER_TEXT: Final = (
    "Only the holder of this task's work lease, or the room's admins as people, can release"
    " or hand it off."
)
# A reason, a key or an id is a short label, not a document.
_MAX_LABEL_CHARS: Final = 512


def new_work_lease(task: TaskRow, actor: Actor, *, now: int, pr_url: str | None) -> LeaseRow:
    """The work lease a claim takes: the claiming session's, on ``task`` (epoch 1)."""
    return LeaseRow(
        lease_id="tl_" + uuid.uuid4().hex,
        room_id=task.room_id,
        task_id=task.task_id,
        kind=WORK,
        agent_session_id=actor.session_id,
        agent_key=actor.agent_key or "",
        agent_instance_id=actor.instance_id,
        actor_label=actor.label,
        created_by=actor.label,
        output_intent=task.title,
        pr_url=pr_url,
        created_at=now,
        updated_at=now,
    )


def work_lease(leases: Iterable[LeaseRow], task_id: str, now: int) -> LeaseRow | None:
    """The task's active work lease, if any (there is at most one)."""
    for lease in leases:
        if lease.task_id == task_id and lease.kind == WORK and lease.active(now):
            return lease
    return None


def work_task_ids(leases: Iterable[LeaseRow], session_id: str, now: int) -> list[str]:
    """Task ids of the active work leases a session holds, oldest lease first."""
    held = [
        lease
        for lease in leases
        if lease.agent_session_id == session_id and lease.kind == WORK and lease.active(now)
    ]
    held.sort(key=lambda lease: (lease.created_at, lease.lease_id))
    return [lease.task_id for lease in held]


def ended_lease(lease: LeaseRow, *, holder: bool, reason: str, now: int) -> LeaseRow:
    """The lease given back by its holder (``released``) or taken by an admin (``revoked``)."""
    return attrs.evolve(
        lease,
        status="released" if holder else "revoked",
        revoked_reason=None if holder else reason,
        updated_at=now,
    )


def lease_json(lease: LeaseRow) -> dict[str, Any]:
    """A lease as the letagents API shows it."""
    return {
        "id": lease.lease_id,
        "room_id": lease.room_id,
        "task_id": lease.task_id,
        "kind": lease.kind,
        "status": lease.status,
        "agent_key": lease.agent_key,
        "agent_instance_id": lease.agent_instance_id,
        "agent_session_id": lease.agent_session_id,
        "actor_label": lease.actor_label,
        "epoch": lease.epoch,
        "branch_ref": lease.branch_ref,
        "pr_url": lease.pr_url,
        "output_intent": lease.output_intent,
        "expires_at": iso(lease.expires_at),
        "last_heartbeat_at": None,
        "revoked_reason": lease.revoked_reason,
        "created_by": lease.created_by,
        "created_at": iso(lease.created_at),
        "updated_at": iso(lease.updated_at),
    }


# --- lease actions -------------------------------------------------------------------------


def _label(body: Mapping[str, Any], key: str) -> str | None:
    value = body.get(key)
    if not isinstance(value, str) or not value.strip():
        return None
    return value.strip()[:_MAX_LABEL_CHARS]


@final
@attrs.frozen(kw_only=True)
class LeaseAction:
    """A checked lease-action body."""

    action: str
    lease_id: str | None
    reason: str | None
    target_key: str | None
    target_instance_id: str | None
    target_session_id: str | None


def parse_lease_action(body: Mapping[str, Any]) -> LeaseAction:
    """Check a ``POST …/lease-action`` body, or refuse 400."""
    action = body.get("action")
    if action not in ("release", "handoff"):
        refuse(400, ACTION_TEXT)
    parsed = LeaseAction(
        action=str(action),
        lease_id=_label(body, "lease_id"),
        reason=_label(body, "reason"),
        target_key=_label(body, "target_actor_key"),
        target_instance_id=_label(body, "target_actor_instance_id"),
        target_session_id=_label(body, "target_agent_session_id"),
    )
    if parsed.action == "handoff" and parsed.target_key is None:
        refuse(400, TARGET_REQUIRED_TEXT)
    return parsed


def check_lease(active: LeaseRow | None, named: str | None) -> LeaseRow:
    """The task's active work lease, the one the action names if it names one; or refuse 409."""
    if active is None:
        refuse(409, MISSING_LEASE_TEXT, code=MISSING_LEASE_CODE)
    if named is not None and named != active.lease_id:
        refuse(
            409,
            f"Lease {named} is no longer the active work lease for this task",
            code=STALE_REFERENCE_CODE,
        )
    return active


def choose_target(
    action: LeaseAction,
    task: TaskRow,
    sessions: Iterable[SessionRow],
    reachable: Callable[[str], bool],
) -> SessionRow:
    """The live worker session a handoff goes to, or refuse 409 (the letagents API's rules).

    ``sessions`` are the room's; the target is the one of the target key named
    by id, else by instance, else the only one; it must be ``reachable``.
    """
    key = action.target_key
    live = [s for s in sessions if s.live and s.session_kind == "worker" and s.agent_key == key]
    if action.target_session_id is not None:
        chosen = [s for s in live if s.session_id == action.target_session_id]
        missing = (
            f"No active worker session exists for target actor_key {key}"
            f" and target_agent_session_id {action.target_session_id}"
        )
    elif action.target_instance_id is not None:
        chosen = [s for s in live if s.agent_instance_id == action.target_instance_id]
        if len(chosen) > 1:
            refuse(
                409,
                f"Multiple active worker sessions exist for target actor_key {key} and"
                f" target_actor_instance_id {action.target_instance_id};"
                " target_agent_session_id is required",
                code=TARGET_SESSION_CODE,
            )
        missing = (
            f"No active worker session exists for target actor_key {key}"
            f" and target_actor_instance_id {action.target_instance_id}"
        )
    else:
        if len(live) > 1:
            refuse(
                409,
                f"Multiple active worker sessions exist for target actor_key {key};"
                " target_agent_session_id is required",
                code=TARGET_SESSION_CODE,
            )
        chosen = live
        missing = f"No active worker session exists for target actor_key {key}"
    if not chosen:
        refuse(409, missing, code=TARGET_SESSION_CODE)
    target = chosen[0]
    if not reachable(target.session_id):
        refuse(
            409,
            f"Target worker session {target.session_id} is not reachable in this room",
            code=TARGET_UNREACHABLE_CODE,
        )
    if task.status not in LEASE_RECOVERY_STATUSES:
        refuse(409, f"Cannot hand off a task in {task.status} status", code=INVALID_STATUS_CODE)
    return target


# --- adoption (§7.3) ----------------------------------------------------------------------


def adopts(
    lease: LeaseRow,
    holder: SessionRow,
    row: SessionRow,
    *,
    live_keys: set[str],
    exited: Callable[[SessionRow], bool],
) -> bool:
    """Whether the new session ``row`` adopts an active ``lease`` its ``holder`` left (§7.3).

    Only leases of ended, unsupervised sessions of the same owner not ended by
    the room's admin move. The same agent key and instance always adopts;
    otherwise, once the holder's process has ``exited``, the same agent key
    does, and so does a same-named non-durable holder's ``work`` lease whose
    agent key has no live session left.
    """
    if holder.live:
        return False
    if (
        holder.end_reason == END_REASON_ROOM_ADMIN
        or holder.supervisor_grant_id is not None
        or holder.owner_account_id != row.owner_account_id
    ):
        return False
    same_identity = holder.agent_key == row.agent_key
    if same_identity and holder.agent_instance_id == row.agent_instance_id:
        return True
    if not exited(holder):
        return False
    return same_identity or (
        lease.kind == WORK
        and not is_durable_worker_id(holder.agent_instance_id)
        and name_key(holder.display_name) == name_key(row.display_name)
        and holder.agent_key not in live_keys
    )


def adopted(lease: LeaseRow, row: SessionRow, *, now: int) -> LeaseRow:
    """The lease moved to the session ``row`` (it binds that session's identity now);
    a work lease's epoch moves on."""
    return attrs.evolve(
        lease,
        agent_session_id=row.session_id,
        agent_key=row.agent_key,
        agent_instance_id=row.agent_instance_id,
        actor_label=row.actor_label,
        epoch=lease.epoch + 1 if lease.kind == WORK else lease.epoch,
        updated_at=now,
    )
