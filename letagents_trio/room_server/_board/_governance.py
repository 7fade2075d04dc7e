"""Board governance, the pure rules: Board Manager modes, intents, their payloads and checks.

A room may govern its board (the letagents API's Board Manager). Its mode
(:data:`MODES`, default ``manager_optional``):

* ``off``: no agent action needs approval;
* ``manager_optional``: an agent's high-impact action needs an approved
  intent while a Board Manager is assigned;
* ``intent_required``: it always does.

The high-impact actions and the intent action type each needs
(:func:`action_for_status`): creating a task (``task_create``), claiming one
(``task_claim``, a move to ``assigned``), closing one (``task_close``: to
``merged``, ``done`` or ``cancelled``), reopening one (``task_override``, to
``accepted``), and releasing or handing off a work lease (``task_override``).
People (the room's admins) act without intents.

An intent carries the exact payload of the later action (the letagents API's
shapes, built by :mod:`letagents_trio.workers._intent_payloads`, which the MCP
tools register with and the board rebuilds an action's payload with);
the room keeps its SHA-256 over a canonical JSON form (:func:`payload_hash`:
keys sorted, no spaces), so the action must send the same fields with the same
values. Statuses (:data:`INTENT_STATUSES`): an intent is ``pending`` for
:data:`PENDING_TTL_MS`; a decision makes it ``approved`` (usable for
:data:`APPROVAL_TTL_MS`) or ``denied``; an unused one past its time is
``expired``; the action it approved makes it ``used``; a task change that makes
it moot makes it ``superseded``.

Who may decide: the room's admins as people, or the active Board Manager with
its own worker session (any other worker is refused, :data:`MANAGER_ONLY_TEXT`).

An approval is carried out (:func:`check_approval`) by naming the intent
(``board_intent_id``) with either its approval token (``board_approval_token``,
returned once, to the decider) or, without a token, the proposer's own worker
session. The refusals, in the order they are checked, and their codes and
texts are the letagents API's.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

import attrs

from .._wire import iso

if TYPE_CHECKING:
    from .._storage._board_rows import BoardIntentRow, BoardManagerRow, BoardSettingsRow

__all__ = [
    "ACTION_TYPES",
    "APPROVAL_TTL_MS",
    "CLOSE_STATUSES",
    "DEFAULT_FAILOVER",
    "DEFAULT_MODE",
    "FAILOVERS",
    "INTENT_STATUSES",
    "MANAGER_ONLY_TEXT",
    "MODES",
    "PENDING_TTL_MS",
    "RUNTIME_SOURCES",
    "Denial",
    "action_for_status",
    "check_approval",
    "expire",
    "intent_json",
    "manager_json",
    "payload_hash",
    "settings_json",
    "supersede_reason",
]

MODES: Final = ("off", "manager_optional", "intent_required")
DEFAULT_MODE: Final = "manager_optional"
# What the liveness sweep does when the manager goes offline (recorded; the
# reference room announces nothing and promotes no one).
FAILOVERS: Final = ("off", "announce", "auto")
DEFAULT_FAILOVER: Final = "auto"
RUNTIME_SOURCES: Final = ("desktop_managed", "open_model", "external", "unknown")
ACTION_TYPES: Final = ("task_create", "task_claim", "task_close", "task_override", "task_update")
INTENT_STATUSES: Final = ("pending", "approved", "denied", "expired", "used", "superseded")
CLOSE_STATUSES: Final = frozenset({"merged", "done", "cancelled"})
# The letagents API's lifetimes: a pending intent lasts a day, an approval half an hour.
PENDING_TTL_MS: Final = 24 * 60 * 60 * 1000
APPROVAL_TTL_MS: Final = 30 * 60 * 1000
# The letagents API's 403 for a decision by a worker that is not the manager.
MANAGER_ONLY_TEXT: Final = (
    "Only the active Board Manager can decide board intents with worker credentials."
)


def payload_hash(payload: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the payload's canonical JSON (keys sorted, no spaces)."""
    canonical = json.dumps(payload, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def action_for_status(status: str | None) -> str | None:
    """The intent action type a move to ``status`` needs, or ``None`` (no approval needed)."""
    if status == "assigned":
        return "task_claim"
    if status in CLOSE_STATUSES:
        return "task_close"
    if status == "accepted":
        return "task_override"
    return None


def expire(intent: BoardIntentRow, now: int) -> BoardIntentRow | None:
    """``intent`` made ``expired`` when it is pending or approved past its time; else None."""
    if intent.status not in ("pending", "approved") or intent.expires_at is None:
        return None
    if intent.expires_at > now:
        return None
    return attrs.evolve(intent, status="expired", updated_at=now)


@attrs.frozen(kw_only=True)
class Denial:
    """Why an approval cannot be used: the letagents API's code and text."""

    code: str
    error: str


def check_approval(
    intent: BoardIntentRow | None,
    *,
    intent_id: str | None,
    token_hash: str | None,
    worker: tuple[str, str] | None,
    action_type: str,
    payload_digest: str,
    now: int,
    task_state: tuple[str, str | None] | None,
    manager_live: bool,
    mode_on: bool,
) -> Denial | None:
    """May this action use ``intent``? ``None`` when it may, else the :class:`Denial`.

    Args:
        intent: the stored intent the action names (``None``: not found).
        intent_id: the id the action names.
        token_hash: the SHA-256 of the approval token it sent, if any.
        worker: ``(session id, agent key)`` of the worker session making the
            action, when it is one (it may carry out its own approved intent).
        action_type: the action's intent type.
        payload_digest: :func:`payload_hash` of the action's payload.
        now: the room's time.
        task_state: ``(status, assignee key)`` of the task now, for task actions.
        manager_live: the approving manager's assignment is still active (or a person approved).
        mode_on: the room's mode is not ``off`` (a manager's approval lapses with it).
    """
    if not intent_id or (token_hash is None and worker is None):
        return Denial(
            code="board_intent_required",
            error="Board Manager approval is required for this board action.",
        )
    if intent is None:
        return Denial(code="board_intent_not_found", error="Board intent approval was not found.")
    if intent.status == "expired":
        what = "approval has" if intent.approval_token_hash else "has"
        return Denial(
            code="board_intent_expired", error=f"Board intent {intent_id} {what} expired."
        )
    if intent.status != "approved":
        return Denial(
            code="board_intent_not_approved",
            error=f"Board intent {intent_id} is {intent.status}, not approved.",
        )
    if intent.action_type != action_type:
        return Denial(
            code="board_intent_action_mismatch",
            error=f"Board intent {intent_id} does not approve {action_type}.",
        )
    if intent.payload_hash != payload_digest:
        return Denial(
            code="board_intent_payload_mismatch",
            error="Board intent approval does not match this action payload.",
        )
    if intent.expires_at is not None and intent.expires_at <= now:
        return Denial(
            code="board_intent_expired", error=f"Board intent {intent_id} approval has expired."
        )
    denial = _check_bearer(intent, token_hash, worker, action_type)
    if denial is not None:
        return denial
    if (
        task_state is not None
        and intent.approved_task_status is not None
        and (intent.approved_task_status, intent.approved_task_assignee_agent_key) != task_state
    ):
        return Denial(
            code="board_intent_task_changed",
            error=f"The task changed after board intent {intent_id} was approved;"
            " request approval again.",
        )
    if intent.approved_manager_id is not None and not manager_live:
        return Denial(
            code="board_intent_manager_changed",
            error=f"The Board Manager who approved board intent {intent_id} is no longer"
            " assigned; request approval again.",
        )
    if intent.approved_manager_id is not None and not mode_on:
        return Denial(
            code="board_manager_mode_off",
            error=f"Board Manager mode is off, so the manager's approval of board intent"
            f" {intent_id} no longer applies.",
        )
    return None


def _check_bearer(
    intent: BoardIntentRow,
    token_hash: str | None,
    worker: tuple[str, str] | None,
    action_type: str,
) -> Denial | None:
    """The token must be the intent's; without one, the worker must be its proposer."""
    if token_hash is not None:
        if intent.approval_token_hash != token_hash:
            return Denial(
                code="board_intent_token_invalid", error="Board intent approval token is invalid."
            )
        return None
    assert worker is not None
    if (intent.proposer_agent_session_id, intent.proposer_actor_key) != worker:
        return Denial(
            code="board_intent_worker_mismatch",
            error="Board intent approval belongs to a different worker session.",
        )
    if action_type != "task_claim" and not intent.proposer_worker:
        return Denial(
            code="board_intent_worker_unverified",
            error="Board intent was not registered by an authenticated worker session.",
        )
    return None


# How far along a task is, for a pending move's "already passed" check.
_PROGRESS: Final = {
    "proposed": 0,
    "accepted": 1,
    "assigned": 2,
    "in_progress": 3,
    "blocked": 3,
    "in_review": 4,
    "merged": 5,
}
# From a closed status a task takes only these steps; anything else needs a reopen.
_CLOSED_NEXT: Final = {
    "merged": ("done", "accepted"),
    "done": ("accepted",),
    "cancelled": ("accepted",),
}


def supersede_reason(
    intent: BoardIntentRow,
    *,
    task_id: str,
    status: str,
    assignee_agent_key: str | None,
    work_lease_id: str | None,
    task_changed: bool,
) -> str | None:
    """Why an open intent no longer applies to its task after a change, or ``None``.

    The letagents API's rules: an approval granted for the task as it stood is
    moot once its status or assignee changed; a lease action is bound to the
    lease it names; a pending move is moot once the task reached, passed, or
    (for a claim) left the status it asks for.
    """
    if intent.action_type == "task_create":
        return None
    if intent.status == "approved" and task_changed:
        by = intent.decision_by or "the manager"
        return f"Superseded: {task_id} moved to {status} after {by} approved it."
    payload = intent.payload
    if isinstance(payload.get("action"), str):
        lease_id = payload.get("lease_id")
        if isinstance(lease_id, str) and lease_id != work_lease_id:
            return f"Superseded: the work lease it names is no longer active on {task_id}."
        return None
    target = payload.get("status")
    if not isinstance(target, str) or intent.status == "approved":
        return None
    moved = f"Superseded: {task_id} moved to {status}."
    if intent.action_type == "task_claim":
        own = status == "assigned" and assignee_agent_key == intent.proposer_actor_key
        return None if status == "accepted" or own else moved
    if target == "accepted":
        return moved if status == "accepted" else None
    if status == target:
        return moved
    if status in _CLOSED_NEXT:
        return None if target in _CLOSED_NEXT[status] else moved
    passed = _PROGRESS.get(status, -1) > _PROGRESS.get(target, len(_PROGRESS))
    return moved if passed else None


# --- answers -------------------------------------------------------------------------


def settings_json(room_id: str, row: BoardSettingsRow | None, now: int) -> dict[str, Any]:
    """A room's board settings as the letagents API shows them (defaults when never set)."""
    if row is None:
        return {
            "room_id": room_id,
            "manager_mode": DEFAULT_MODE,
            "manager_failover": DEFAULT_FAILOVER,
            "updated_by": None,
            "created_at": iso(now),
            "updated_at": iso(now),
        }
    return {
        "room_id": room_id,
        "manager_mode": row.manager_mode,
        "manager_failover": row.manager_failover,
        "updated_by": row.updated_by,
        "created_at": iso(row.created_at),
        "updated_at": iso(row.updated_at),
    }


def manager_json(row: BoardManagerRow) -> dict[str, Any]:
    """A Board Manager assignment as the letagents API shows it."""
    return {
        "id": row.manager_id,
        "room_id": row.room_id,
        "agent_session_id": row.agent_session_id,
        "agent_key": row.agent_key,
        "actor_label": row.actor_label,
        "runtime_source": row.runtime_source,
        "assigned_by": row.assigned_by,
        "status": row.status,
        "last_heartbeat_at": iso(row.last_heartbeat_at),
        "released_by": row.released_by,
        "release_reason": row.release_reason,
        "released_at": iso(row.released_at),
        "created_at": iso(row.created_at),
        "updated_at": iso(row.updated_at),
    }


def intent_json(row: BoardIntentRow) -> dict[str, Any]:
    """An intent as the letagents API shows it (never its token's hash)."""
    return {
        "id": row.intent_id,
        "room_id": row.room_id,
        "task_id": row.task_id,
        "action_type": row.action_type,
        "payload": row.payload,
        "payload_hash": row.payload_hash,
        "status": row.status,
        "proposer_actor_label": row.proposer_actor_label,
        "proposer_actor_key": row.proposer_actor_key,
        "proposer_actor_instance_id": row.proposer_actor_instance_id,
        "proposer_agent_session_id": row.proposer_agent_session_id,
        "decision_by": row.decision_by,
        "decision_reason": row.decision_reason,
        "decided_at": iso(row.decided_at),
        "expires_at": iso(row.expires_at),
        "created_at": iso(row.created_at),
        "updated_at": iso(row.updated_at),
    }
