"""Registering and deciding board intents: approval (and what it carries out) and denial.

``POST R/board-intents`` registers one (201; the same proposer registering
the same pending payload again gets the same intent; the room is told in a
notice naming the active manager, once per intent), ``POST
R/board-intents/{id}/approve`` and ``…/deny`` decide it (the letagents API's
``board.ts``). Who may decide (:meth:`IntentDecisions.decider`): with worker
credentials, only the active Board Manager's own session
(:data:`~._governance.MANAGER_ONLY_TEXT`); otherwise a room admin as a person.
Only a pending intent is decided (404 ``Pending board intent not found``);
deciding it again the same way answers the decision as it stands.

What approval does:

* ``task_create``: the task is created at once, ``accepted`` (the decision is
  its acceptance), and the intent is ``used`` (``result.kind`` ``task_created``);
* ``task_claim`` registered by a worker with its own session: the task is
  assigned to that session's agent with a fresh work lease, and the intent is
  ``used`` (``task_claimed``, ``requires_follow_up`` false). The proposer's
  session must still be live, the task accepted (or already that agent's), and
  no other session may hold its work lease (409 ``board_intent_claim_conflict``);
* anything else: the intent is ``approved`` for half an hour and a one-time
  approval token is answered (``approval_token``, ``requires_follow_up``
  true); the room keeps only its hash, and the task's state at approval, so
  the approval lapses if the task changes.

Each decision is posted to the room as a notice naming the proposer (once per
intent and outcome) and added to the room's record.
"""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, final

import attrs

from ...workers._intent_payloads import mutation_intent_payload
from .._auth._accounts import Actor
from .._storage._board_rows import BoardIntentRow
from .._storage._rows import TaskRow
from .._wire import Credentials, Refusal, Reply, hash_token, refuse
from ._governance import (
    ACTION_TYPES,
    APPROVAL_TTL_MS,
    MANAGER_ONLY_TEXT,
    PENDING_TTL_MS,
    intent_json,
    payload_hash,
)
from ._intents import ID_CHARS, PENDING_NOT_FOUND_TEXT, SETTINGS_ADMIN_TEXT, text_field
from ._leases import lease_json, new_work_lease, work_lease
from ._tasks import parse_new_task, parse_task_number, task_json

if TYPE_CHECKING:
    from .._auth._accounts import Accounts
    from .._clock import RoomClock
    from .._storage._board_rows import BoardManagerRow
    from .._storage._store import RoomStore
    from ._intents import BoardGovernance
    from ._record import RecordBoard

__all__ = ["CLAIM_CONFLICT_CODE", "IntentDecisions"]

# The letagents API's code for a claim approval that cannot be carried out.
CLAIM_CONFLICT_CODE: Final = "board_intent_claim_conflict"


@final
@attrs.define(eq=False)
class IntentDecisions:
    """Register, approve and deny board intents.

    Args:
        store: the room's rows.
        clock: the room's clock (epoch ms).
        accounts: who is calling.
        record: the room's event record.
        governance: the rooms' settings, managers and intents.
    """

    store: RoomStore
    clock: RoomClock
    accounts: Accounts
    record: RecordBoard
    governance: BoardGovernance
    # Told of each task whose status an approval changed (a claim), after it is written.
    status_changed: list[Callable[[TaskRow], None]] = attrs.field(factory=list)

    def register(self, room_id: str, creds: Credentials, body: Mapping[str, Any]) -> Reply:
        """``POST R/board-intents``: register an intent (201 ``{room_id, intent,
        manager_notification}``)."""
        try:
            actor = self.governance.participant(room_id, creds, reading=False)
            action_type = body.get("action_type")
            if action_type not in ACTION_TYPES:
                refuse(400, "action_type is invalid")
            payload = body.get("payload")
            if not isinstance(payload, Mapping):
                refuse(400, "payload must be an object")
            title = payload.get("title")
            if action_type == "task_create":
                if not isinstance(title, str) or not title.strip():
                    refuse(400, "task_create payload must include a title")
                # The task it creates must fit the board's bounds (ours: refused now, not
                # cut at approval).
                parse_new_task(payload, actor.label)
        except Refusal as refusal:
            return refusal.reply
        task_id = text_field(body, "task_id")
        digest = payload_hash(payload)
        now = self.clock.now_ms()
        for row in self.governance.intents_of(room_id):
            if (row.status, row.action_type, row.payload_hash) == (
                "pending",
                action_type,
                digest,
            ) and (
                row.proposer_agent_session_id,
                row.proposer_actor_key,
            ) == (actor.session_id, actor.agent_key):
                intent = row
                break
        else:
            intent = BoardIntentRow(
                intent_id="bi_" + uuid.uuid4().hex,
                room_id=room_id,
                task_id=None if task_id is None else task_id[:ID_CHARS],
                action_type=action_type,
                payload=dict(payload),
                payload_hash=digest,
                proposer_actor_label=actor.label,
                proposer_actor_key=actor.agent_key,
                proposer_actor_instance_id=actor.instance_id,
                proposer_agent_session_id=actor.session_id,
                proposer_worker=not actor.person,
                expires_at=now + PENDING_TTL_MS,
                created_at=now,
                updated_at=now,
            )
            with self.store.atomic():  # the intent and its event, or nothing
                self.store.board.put_row(intent)
                self.record.note(
                    room_id,
                    "board_intent",
                    "registered",
                    actor=actor.label,
                    object_id=intent.intent_id,
                    state="pending",
                    task_id=intent.task_id,
                    metadata={"action_type": action_type},
                )
        manager = self.governance.active_manager(room_id)
        what = "Create task" if action_type == "task_create" else action_type.replace("_", " ")
        who = manager.actor_label if manager is not None else None
        text = (
            f"{who}: new board intent {intent.intent_id} from {actor.label}: {what}."
            " Decide it with approve_board_intent or deny_board_intent."
            if who
            else f"New board intent {intent.intent_id} from {actor.label}: {what}."
            " It is pending, but no Board Manager is assigned."
        )
        notice = self.governance.notify(
            room_id, text, f"board_intent:{intent.intent_id}:manager_notify"
        )
        notice["target_manager_agent_session_id"] = (
            None if manager is None else manager.agent_session_id
        )
        body_out = {
            "room_id": room_id,
            "intent": intent_json(intent),
            "manager_notification": notice,
        }
        return Reply(status=201, body=body_out)

    def decider(self, room_id: str, creds: Credentials) -> tuple[str, BoardManagerRow | None]:
        """Who decides: the active manager by its worker session, or an admin as a person."""
        self.accounts.require_room(room_id)
        if creds.session_id or creds.session_token:
            row = self.accounts.authenticate(room_id, creds)
            manager = self.governance.active_manager(room_id)
            if manager is None or manager.agent_session_id != row.session_id:
                refuse(403, MANAGER_ONLY_TEXT)
            return row.actor_label or row.display_name, manager
        return self.accounts.room_admin(room_id, creds.owner_token, SETTINGS_ADMIN_TEXT).login, None

    def _decision_notice(self, intent: BoardIntentRow) -> dict[str, Any]:
        outcome = "denied" if intent.status == "denied" else "approved"
        if outcome == "denied":
            follow = "Do not perform the requested action."
        elif intent.action_type == "task_create":
            follow = "The approved task was created; read the board for its current state."
        elif intent.status == "used":
            follow = (
                "The approved action was already applied; read the board for its current state."
            )
        else:
            follow = "Continue the exact approved action with board_intent_id."
        who = intent.proposer_actor_label or "proposer"
        text = f"{who}: board intent {intent.intent_id} was {outcome}. {follow}"
        dedupe = f"board_intent:{intent.intent_id}:{outcome}:proposer_notify"
        return self.governance.notify(intent.room_id, text, dedupe)

    def approve(
        self, room_id: str, intent_id: str, creds: Credentials, body: Mapping[str, Any]
    ) -> Reply:
        """``POST R/board-intents/{id}/approve`` (see the module docstring)."""
        try:
            decided_by, manager = self.decider(room_id, creds)
            intent = self.governance.intent(room_id, intent_id)
            if intent is not None and intent.status in ("used", "approved"):
                return self._already_approved(intent)
            if intent is None or intent.status != "pending":
                refuse(404, PENDING_NOT_FOUND_TEXT)
            now = self.clock.now_ms()
            decided = attrs.evolve(
                intent,
                status="approved",
                decision_by=decided_by,
                decision_reason=text_field(body, "reason"),
                decided_at=now,
                expires_at=now + APPROVAL_TTL_MS,
                updated_at=now,
                approved_manager_id=None if manager is None else manager.manager_id,
            )
            if intent.action_type == "task_create":
                return self._approve_create(decided, now)
            if intent.action_type == "task_claim" and intent.proposer_worker:
                return self._approve_claim(decided, now)
        except Refusal as refusal:
            return refusal.reply
        return self._approve_token(decided, now)

    def _already_approved(self, intent: BoardIntentRow) -> Reply:
        task = None
        if intent.action_type == "task_create" and intent.task_id:
            number = parse_task_number(intent.task_id)
            task = None if number is None else self.store.get_task(intent.room_id, number)
        result: dict[str, Any] = (
            {"kind": "task_created", "task": task_json(task)}
            if task is not None
            else {"kind": "approval_recorded", "requires_follow_up": intent.status == "approved"}
        )
        body = {
            "room_id": intent.room_id,
            "intent": intent_json(intent),
            "proposer_notification": self._decision_notice(intent),
            "result": result,
        }
        return Reply(status=200, body=body)

    def _decided(self, intent: BoardIntentRow, result: dict[str, Any], **extra: Any) -> Reply:
        body = {
            "room_id": intent.room_id,
            "intent": intent_json(intent),
            "proposer_notification": self._decision_notice(intent),
            "result": result,
            **extra,
        }
        return Reply(status=200, body=body)

    def _note_decision(self, intent: BoardIntentRow) -> None:
        self.record.note(
            intent.room_id,
            "board_intent",
            "denied" if intent.status == "denied" else "approved",
            actor=intent.decision_by,
            object_id=intent.intent_id,
            state=intent.status,
            task_id=intent.task_id,
            metadata={"action_type": intent.action_type},
        )

    def _approve_create(self, intent: BoardIntentRow, now: int) -> Reply:
        payload = intent.payload
        title = payload.get("title")
        if not isinstance(title, str) or not title.strip():
            refuse(400, f"Board intent {intent.intent_id} has an invalid task creation payload.")
        description, source = payload.get("description"), payload.get("source_message_id")
        with self.store.atomic():  # the task, the used intent and the events, or nothing
            task = self.store.add_task(
                TaskRow(
                    room_id=intent.room_id,
                    title=title.strip(),
                    description=description if isinstance(description, str) else None,
                    status="accepted",
                    created_by=intent.proposer_actor_label or intent.decision_by,
                    source_message_id=source if isinstance(source, str) else None,
                    created_at=now,
                    updated_at=now,
                )
            )
            used = attrs.evolve(intent, status="used", task_id=task.task_id)
            self.store.board.put_row(used)
            self._note_decision(used)
            self.record.note(
                intent.room_id,
                "task",
                "created",
                actor=intent.proposer_actor_label,
                object_id=task.task_id,
                title=task.title,
                state=task.status,
                task_id=task.task_id,
            )
        return self._decided(used, {"kind": "task_created", "task": task_json(task)})

    def _approve_claim(self, intent: BoardIntentRow, now: int) -> Reply:
        conflict = 409
        task_id = intent.task_id or intent.payload.get("task_id")
        number = parse_task_number(task_id) if isinstance(task_id, str) else None
        task = None if number is None else self.store.get_task(intent.room_id, number)
        session = (
            None
            if intent.proposer_agent_session_id is None
            else self.store.get_session(intent.proposer_agent_session_id)
        )
        expected = mutation_intent_payload(
            str(task_id),
            status="assigned",
            assignee=intent.proposer_actor_label,
            assignee_agent_key=intent.proposer_actor_key,
        )
        if task is None or payload_hash(expected) != intent.payload_hash:
            refuse(
                conflict,
                "The claim must name the exact registered proposer and task.",
                code=CLAIM_CONFLICT_CODE,
            )
        if session is None or not session.live or session.agent_key != intent.proposer_actor_key:
            refuse(
                conflict,
                "The exact proposing or approving worker session is no longer active.",
                code=CLAIM_CONFLICT_CODE,
            )
        own = task.status == "assigned" and task.assignee_agent_key == session.agent_key
        if task.status != "accepted" and not own:
            refuse(
                conflict,
                "Claim an accepted task, or recover the same worker's assigned task.",
                code=CLAIM_CONFLICT_CODE,
            )
        held = work_lease(self.store.active_leases(intent.room_id), task.task_id, now)
        if held is not None and held.agent_session_id != session.session_id:
            refuse(
                conflict,
                "The existing work lease cannot be replaced by claim approval.",
                code=CLAIM_CONFLICT_CODE,
            )
        proposer = Actor(
            label=intent.proposer_actor_label or session.actor_label,
            account_id=session.owner_account_id,
            session=session,
        )
        claimed = attrs.evolve(
            task,
            status="assigned",
            assignee=proposer.label,
            assignee_agent_key=session.agent_key,
            updated_at=now,
        )
        used = attrs.evolve(intent, status="used", task_id=task.task_id)
        with self.store.atomic():  # the task, its lease, the used intent and events, or nothing
            self.store.put_task(claimed)
            lease = held or new_work_lease(claimed, proposer, now=now, pr_url=task.pr_url)
            if held is None:
                self.store.put_lease(lease)
            self.store.board.put_row(used)
            self._note_decision(used)
            self.governance.supersede(claimed, task_changed=True, work_lease_id=lease.lease_id)
            self.record.note(
                intent.room_id,
                "task",
                "assigned",
                actor=proposer.label,
                object_id=task.task_id,
                title=task.title,
                state="assigned",
                task_id=task.task_id,
            )
        for listener in self.status_changed:
            listener(claimed)
        leases = [
            lease
            for lease in self.store.active_leases(intent.room_id)
            if lease.task_id == task.task_id
        ]
        task_out = task_json(claimed, (lease_json(x) for x in leases if x.active(now)))
        return self._decided(
            used, {"kind": "task_claimed", "task": task_out, "requires_follow_up": False}
        )

    def _approve_token(self, intent: BoardIntentRow, now: int) -> Reply:
        token = secrets.token_urlsafe(32)
        task = None
        if isinstance(intent.payload.get("task_id"), str):
            number = parse_task_number(intent.payload["task_id"])
            task = None if number is None else self.store.get_task(intent.room_id, number)
        approved = attrs.evolve(
            intent,
            approval_token_hash=hash_token(token),
            approved_task_status=None if task is None else task.status,
            approved_task_assignee_agent_key=None if task is None else task.assignee_agent_key,
        )
        with self.store.atomic():  # the decision and its event, or nothing
            self.store.board.put_row(approved)
            self._note_decision(approved)
        result = {"kind": "approval_token", "requires_follow_up": True}
        return self._decided(approved, result, approval_token=token)

    def deny(
        self, room_id: str, intent_id: str, creds: Credentials, body: Mapping[str, Any]
    ) -> Reply:
        """``POST R/board-intents/{id}/deny``: deny a pending intent (again: the same answer)."""
        try:
            decided_by, _ = self.decider(room_id, creds)
            intent = self.governance.intent(room_id, intent_id)
            if intent is not None and intent.status == "denied":
                return self._denied(intent)
            if intent is None or intent.status != "pending":
                refuse(404, PENDING_NOT_FOUND_TEXT)
        except Refusal as refusal:
            return refusal.reply
        now = self.clock.now_ms()
        denied = attrs.evolve(
            intent,
            status="denied",
            decision_by=decided_by,
            decision_reason=text_field(body, "reason"),
            decided_at=now,
            updated_at=now,
        )
        with self.store.atomic():  # the decision and its event, or nothing
            self.store.board.put_row(denied)
            self._note_decision(denied)
        return self._denied(denied)

    def _denied(self, intent: BoardIntentRow) -> Reply:
        body = {
            "room_id": intent.room_id,
            "intent": intent_json(intent),
            "proposer_notification": self._decision_notice(intent),
        }
        return Reply(status=200, body=body)
