"""Review work: review leases (``…/review-lease-action``) and verdicts (``…/review-verdict``).

A task in review (``in_review``, or ``blocked`` by requested changes) gets a
board reviewer: a worker session holding the task's *review* lease, never the
holder of its work lease. The rules, texts and codes are the letagents API's:

* ``claim``: a worker session takes review authority for itself (a worker
  already holding one answers it as it is);
* ``assign``: a room admin gives it to a live, reachable worker session of
  ``target_actor_key`` (chosen as a work-lease handoff chooses its target);
* ``release``: the holder, or a room admin, gives it back (a holder's lease is
  ``released``, an admin's taking ``revoked``).

A verdict (``approve``, ``request_changes`` or ``comment``) is submitted by the
exact worker session holding the task's review lease, on a task whose PR link
is a GitHub pull request, naming the 40-hex head it reviewed and an
idempotency key. The letagents API publishes it to GitHub through its effect
journal; the reference room has no GitHub, so its journal is its own record:
the verdict is kept as a ``succeeded`` effect (no ``external_url``) and added
to the room's events. The same key again with the same verdict answers the
same effect; with a different one, 409.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, final

import attrs

from .._storage._board_rows import ReviewEffectRow
from .._storage._rows import LeaseRow
from .._wire import Credentials, Refusal, Reply, iso, refuse
from ._leases import LeaseAction, choose_target, ended_lease, lease_json, work_lease
from ._tasks import ADMIN_TEXT, TASK_NOT_FOUND_TEXT, parse_task_number, task_json

if TYPE_CHECKING:
    from .._auth._accounts import Accounts, Actor
    from .._clock import RoomClock
    from .._storage._rows import TaskRow
    from .._storage._store import RoomStore
    from ._record import RecordBoard

__all__ = ["REVIEW", "REVIEW_STATUSES", "VERDICTS", "ReviewBoard"]

# The kind of lease a board reviewer holds.
REVIEW: Final = "review"
# Statuses in which a task has (or may get) a reviewer.
REVIEW_STATUSES: Final = frozenset({"in_review", "blocked"})
VERDICTS: Final = ("approve", "request_changes", "comment")
# The letagents API's bounds.
MAX_VERDICT_BODY: Final = 65_536
MAX_IDEMPOTENCY_KEY: Final = 200
_HEAD_SHA: Final = re.compile(r"[0-9a-f]{40}")
_GITHUB_PULL: Final = re.compile(r"https://github\.com/[^/]+/[^/]+/pull/[1-9][0-9]{0,9}/?")
_WORKER_CODE: Final = "coordination_worker_required"
_STATUS_CODE: Final = "coordination_invalid_task_status"


def _text(body: Mapping[str, Any], key: str, limit: int = 512) -> str | None:
    value = body.get(key)
    return value.strip()[:limit] or None if isinstance(value, str) else None


def effect_json(row: ReviewEffectRow) -> dict[str, Any]:
    """A verdict's effect as the letagents API answers it."""
    return {
        "id": row.effect_id,
        "state": row.state,
        "correlation_key": f"{row.task_id}:{row.idempotency_key}",
        "attempt_count": 1,
        "external_id": None,
        "external_url": None,
        "last_error": None,
        "quarantined_at": None,
        "quarantine_reason": None,
        "verdict": row.verdict,
        "expected_head_sha": row.expected_head_sha,
        "created_at": iso(row.created_at),
    }


@final
@attrs.define(eq=False)
class ReviewBoard:
    """Every room's review leases and verdicts.

    Args:
        store: the room's rows.
        clock: the room's clock (epoch ms).
        accounts: who is calling.
        record: the room's event record.
        reachable: whether a session can be reached in its room now.
    """

    store: RoomStore
    clock: RoomClock
    accounts: Accounts
    record: RecordBoard
    reachable: Callable[[str], bool]

    def _task(self, room_id: str, task_id: str) -> TaskRow:
        number = parse_task_number(task_id)
        task = None if number is None else self.store.get_task(room_id, number)
        if task is None:
            refuse(404, TASK_NOT_FOUND_TEXT)
        return task

    def _leases(self, room_id: str, task_id: str, now: int) -> list[LeaseRow]:
        return [
            lease
            for lease in self.store.active_leases(room_id)
            if lease.task_id == task_id and lease.active(now)
        ]

    def _task_json(self, task: TaskRow, now: int) -> dict[str, Any]:
        leases = self._leases(task.room_id, task.task_id, now)
        return task_json(task, (lease_json(lease) for lease in leases))

    # --- review leases -------------------------------------------------------------------

    def lease_action(
        self, room_id: str, task_id: str, creds: Credentials, body: Mapping[str, Any]
    ) -> Reply:
        """``POST …/tasks/{t}/review-lease-action``: claim, assign or release review authority."""
        now = self.clock.now_ms()
        try:
            self.accounts.require_room(room_id)
            actor = self.accounts.actor(room_id, creds, ADMIN_TEXT)
            task = self._task(room_id, task_id)
            action = body.get("action")
            if action not in ("assign", "claim", "release"):
                refuse(400, "action must be one of: assign, claim, release")
            leases = self._leases(room_id, task.task_id, now)
            if action == "release":
                return self._release(task, actor, body, leases, now)
            return self._take(task, actor, str(action), body, leases, now)
        except Refusal as refusal:
            return refusal.reply

    def _release(
        self,
        task: TaskRow,
        actor: Actor,
        body: Mapping[str, Any],
        leases: list[LeaseRow],
        now: int,
    ) -> Reply:
        named = _text(body, "lease_id")
        reviews = [lease for lease in leases if lease.kind == REVIEW]
        lease = next(
            (
                x
                for x in reviews
                if (x.lease_id == named if named else x.agent_key == actor.agent_key)
            ),
            None,
        )
        if lease is None:
            refuse(404, "Active review lease not found")
        holder = lease.agent_key == actor.agent_key and not actor.person
        if not holder and not actor.person:
            refuse(
                403,
                "Only the review lease holder or a room admin can release this review assignment.",
                code="coordination_review_lease_forbidden",
            )
        reason = (
            _text(body, "reason") or f"Released review lease {lease.lease_id} for {task.task_id}."
        )
        released = ended_lease(lease, holder=holder, reason=reason, now=now)
        with self.store.atomic():  # the lease and its event, or nothing
            self.store.put_lease(released)
            self.record.note(
                task.room_id,
                "review_lease",
                "released",
                actor=actor.label,
                object_id=lease.lease_id,
                state=released.status,
                task_id=task.task_id,
                metadata={"reason": reason},
            )
        out = {
            "room_id": task.room_id,
            "action": "release",
            "task": self._task_json(task, now),
            "released_lease": lease_json(released),
        }
        return Reply(status=200, body=out)

    def _take(
        self,
        task: TaskRow,
        actor: Actor,
        action: str,
        body: Mapping[str, Any],
        leases: list[LeaseRow],
        now: int,
    ) -> Reply:
        if task.status not in REVIEW_STATUSES:
            refuse(
                409,
                f"Cannot assign review authority while task is {task.status}."
                " Move the task to in_review first.",
                code=_STATUS_CODE,
            )
        if action == "claim":
            if actor.session is None:
                refuse(
                    403,
                    "Registered worker session is required to claim review authority.",
                    code=_WORKER_CODE,
                )
            target = actor.session
        else:
            if not actor.person:
                refuse(
                    403,
                    "Only room admins can assign review authority to another worker.",
                    code="coordination_review_assignment_admin_required",
                )
            key = _text(body, "target_actor_key")
            if key is None:
                refuse(400, "target_actor_key is required for review assignment")
            wanted = LeaseAction(
                action="handoff",
                lease_id=None,
                reason=None,
                target_key=key,
                target_instance_id=_text(body, "target_actor_instance_id"),
                target_session_id=_text(body, "target_agent_session_id"),
            )
            sessions = self.store.room_sessions(task.room_id)
            target = choose_target(wanted, task, sessions, self.reachable)
        work = work_lease(leases, task.task_id, now)
        if work is not None and work.agent_key == target.agent_key:
            refuse(
                409,
                "The active work lease holder cannot also hold review authority for the same task.",
                code="coordination_work_lease_holder",
            )
        existing = next(
            (x for x in leases if x.kind == REVIEW and x.agent_key == target.agent_key), None
        )
        if existing is None:
            existing = LeaseRow(
                lease_id="tl_" + uuid.uuid4().hex,
                room_id=task.room_id,
                task_id=task.task_id,
                kind=REVIEW,
                agent_session_id=target.session_id,
                agent_key=target.agent_key,
                agent_instance_id=target.agent_instance_id,
                actor_label=target.actor_label or target.display_name,
                branch_ref=None if work is None else work.branch_ref,
                pr_url=(None if work is None else work.pr_url) or task.pr_url,
                created_by=actor.label,
                output_intent=f"Review {task.task_id}: {task.title}",
                created_at=now,
                updated_at=now,
            )
            with self.store.atomic():  # the lease and its event, or nothing
                self.store.put_lease(existing)
                self.record.note(
                    task.room_id,
                    "review_lease",
                    "claimed" if action == "claim" else "assigned",
                    actor=actor.label,
                    object_id=existing.lease_id,
                    state="active",
                    task_id=task.task_id,
                    title=existing.actor_label,
                )
        out = {
            "room_id": task.room_id,
            "action": action,
            "task": self._task_json(task, now),
            "lease": lease_json(existing),
        }
        return Reply(status=200, body=out)

    # --- verdicts ------------------------------------------------------------------------

    def verdict(
        self, room_id: str, task_id: str, creds: Credentials, body: Mapping[str, Any]
    ) -> Reply:
        """``POST …/tasks/{t}/review-verdict``: a board reviewer's verdict on the task's PR."""
        now = self.clock.now_ms()
        try:
            self.accounts.require_room(room_id)
            actor = self.accounts.actor(room_id, creds, ADMIN_TEXT)
            if actor.session is None:
                refuse(
                    403,
                    "Registered worker session is required to submit a review verdict.",
                    code=_WORKER_CODE,
                )
            checked = self._check_verdict(body)
            task = self._task(room_id, task_id)
            if task.status not in REVIEW_STATUSES:
                refuse(
                    409,
                    f"Review verdicts require a task that is in review or blocked;"
                    f" {task.task_id} is {task.status}.",
                    code=_STATUS_CODE,
                )
            if task.pr_url is None or not _GITHUB_PULL.fullmatch(task.pr_url):
                refuse(
                    409,
                    "Task must have a canonical GitHub pull request URL before a verdict can be"
                    " submitted.",
                    code="workflow_effect_pull_request_required",
                )
            lease = next(
                (
                    x
                    for x in self._leases(room_id, task.task_id, now)
                    if x.kind == REVIEW
                    and x.agent_key == actor.session.agent_key
                    and x.agent_session_id == actor.session.session_id
                ),
                None,
            )
            if lease is None:
                refuse(
                    409,
                    "An active review lease held by this exact worker session is required.",
                    code="coordination_review_lease_required",
                )
            effect = self._effect(task, lease, actor, checked, now)
        except Refusal as refusal:
            return refusal.reply
        out = {"room_id": room_id, "task_id": task.task_id, "effect": effect_json(effect)}
        return Reply(status=200, body=out)

    @staticmethod
    def _check_verdict(body: Mapping[str, Any]) -> tuple[str, str, str, str]:
        """``(verdict, body, idempotency key, head sha)``, or refuse 400."""
        raw = body.get("verdict")
        verdict = raw.strip().lower() if isinstance(raw, str) else ""
        if verdict not in VERDICTS:
            refuse(400, "verdict must be one of: approve, request_changes, comment")
        text = body.get("body") if isinstance(body.get("body"), str) else ""
        assert isinstance(text, str)
        if len(text) > MAX_VERDICT_BODY:
            refuse(400, f"body must be at most {MAX_VERDICT_BODY} characters")
        raw_key = body.get("idempotency_key")
        key = raw_key.strip() if isinstance(raw_key, str) else ""
        if not key or len(key) > MAX_IDEMPOTENCY_KEY:
            refuse(400, "idempotency_key is required and must be at most 200 characters")
        raw_sha = body.get("expected_head_sha")
        sha = raw_sha.strip().lower() if isinstance(raw_sha, str) else ""
        if not _HEAD_SHA.fullmatch(sha):
            refuse(
                400,
                "expected_head_sha is required and must be an exact 40-hex commit SHA",
                code="workflow_effect_invalid_head_sha",
            )
        return verdict, text, key, sha

    def _effect(
        self,
        task: TaskRow,
        lease: LeaseRow,
        actor: Actor,
        checked: tuple[str, str, str, str],
        now: int,
    ) -> ReviewEffectRow:
        """The stored effect of this verdict (a replay's), or a new one; refuse a reuse."""
        verdict, text, key, sha = checked
        assert actor.session is not None
        stored = self.store.board.get_row(ReviewEffectRow, task.room_id, f"{task.task_id}\n{key}")
        if stored is not None:
            if (stored.verdict, stored.body, stored.expected_head_sha) != (verdict, text, sha):
                refuse(
                    409,
                    f"idempotency_key {key[:64]} was already used for a different verdict on"
                    f" {task.task_id}.",
                    code="workflow_effect_idempotency_conflict",
                )
            return stored
        effect = ReviewEffectRow(
            effect_id="we_" + uuid.uuid4().hex,
            room_id=task.room_id,
            task_id=task.task_id,
            idempotency_key=key,
            lease_id=lease.lease_id,
            verdict=verdict,
            body=text,
            expected_head_sha=sha,
            pull_request_url=task.pr_url or "",
            agent_key=actor.session.agent_key,
            agent_session_id=actor.session.session_id,
            actor_label=actor.label,
            created_at=now,
            updated_at=now,
        )
        with self.store.atomic():  # the effect and its event, or nothing
            self.store.board.put_row(effect)
            self.record.note(
                task.room_id,
                "pull_request_review",
                "submitted",
                actor=actor.label,
                object_id=effect.effect_id,
                object_url=task.pr_url,
                state=verdict,
                task_id=task.task_id,
                title=f"Review of {task.task_id}",
                metadata={"expected_head_sha": sha, "body": text[:2000]},
            )
        return effect
