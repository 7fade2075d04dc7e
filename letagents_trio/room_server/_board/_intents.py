"""A governed board: Board Manager settings and assignments, intents, and the gate.

The routes (the letagents API's ``board.ts``; ``R`` is ``/rooms/{room}``):

* ``GET R/board-settings``: the mode, the active manager, the pending count;
* ``PATCH R/board-settings``: set the mode (and failover), admins only;
* ``POST R/board-managers``: promote a live worker session of the room, admins
  only (replacing any active manager); ``DELETE R/board-managers/active``:
  release it (``manager`` null when there was none);
* ``GET R/board-intents``: the room's intents (at most :data:`MAX_LISTED`,
  oldest first, optionally of one status);
* ``POST R/board-intents``, ``…/approve``, ``…/deny``: registering and
  deciding intents, :mod:`._decisions`'.

 An active manager is an active
assignment whose session is still a live worker session: a manager whose
session ended stops counting (and a ``manager_optional`` room stops being
governed) without anyone releasing it.

The gate (:meth:`BoardGovernance.gate`) is what the board's writes call when
an agent creates, claims, closes or reopens a task, or releases or hands off
its work lease: in a governed room the action must carry an approval the
rules accept (:func:`~._governance.check_approval`), which the write then
marks ``used`` in the same atomic write (:meth:`BoardGovernance.consume`).
Expiry is applied whenever intents are read or decided.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, final

import attrs

from .._storage._board_rows import BoardIntentRow, BoardManagerRow, BoardSettingsRow
from .._storage._store_errors import StoreWriteError
from .._wire import Credentials, Refusal, Reply, hash_token, refuse
from ._governance import (
    DEFAULT_FAILOVER,
    DEFAULT_MODE,
    FAILOVERS,
    MODES,
    RUNTIME_SOURCES,
    check_approval,
    expire,
    intent_json,
    manager_json,
    payload_hash,
    settings_json,
    supersede_reason,
)

if TYPE_CHECKING:
    from .._auth._accounts import Accounts, Actor
    from .._clock import RoomClock
    from .._messaging._messages import MessageBoard
    from .._storage._rows import TaskRow
    from .._storage._store import RoomStore
    from ._record import RecordBoard

__all__ = ["MAX_LISTED", "BoardGovernance"]

# The letagents API lists at most this many intents.
MAX_LISTED: Final = 200
# Ours: the 403 for someone who may not change the board's governance.
SETTINGS_ADMIN_TEXT: Final = "Only the room's admins can change its Board Manager settings."
PARTICIPANT_TEXT: Final = "Only the room's agents and admins can use its board intents."
# The letagents API's texts.
PENDING_NOT_FOUND_TEXT: Final = "Pending board intent not found"
SESSION_NOT_FOUND_TEXT: Final = "Active agent session not found"
ID_CHARS: Final = 128


def text_field(body: Mapping[str, Any], key: str) -> str | None:
    """A body's string field, trimmed (blank: ``None``), cut at 2 000 characters."""
    value = body.get(key)
    return value.strip()[:2000] or None if isinstance(value, str) else None


@final
@attrs.define(eq=False)
class BoardGovernance:
    """Every room's Board Manager settings, assignments and intents.

    Args:
        store: the room's rows.
        clock: the room's clock (epoch ms).
        accounts: who is calling.
        messages: where notices are posted.
        record: the room's event record.
    """

    store: RoomStore
    clock: RoomClock
    accounts: Accounts
    messages: MessageBoard
    record: RecordBoard

    # --- state ---------------------------------------------------------------------------

    def settings_row(self, room_id: str) -> BoardSettingsRow | None:
        """The room's stored settings (``None``: the defaults)."""
        return self.store.board.get_row(BoardSettingsRow, room_id, "settings")

    def mode(self, room_id: str) -> str:
        """The room's Board Manager mode."""
        row = self.settings_row(room_id)
        return DEFAULT_MODE if row is None else row.manager_mode

    def active_manager(self, room_id: str) -> BoardManagerRow | None:
        """The active assignment whose session is still a live worker, if any."""
        for row in self.store.board.room_rows(BoardManagerRow, room_id):
            if row.status != "active":
                continue
            session = self.store.get_session(row.agent_session_id)
            if session is not None and session.live and session.session_kind == "worker":
                return row
        return None

    def required(self, room_id: str) -> bool:
        """Whether an agent's high-impact action needs an approved intent now."""
        mode = self.mode(room_id)
        return mode == "intent_required" or (
            mode == "manager_optional" and self.active_manager(room_id) is not None
        )

    def intents_of(self, room_id: str) -> list[BoardIntentRow]:
        """The room's intents, expired ones marked so (best effort: a read never fails on it)."""
        now = self.clock.now_ms()
        rows = []
        for row in self.store.board.room_rows(BoardIntentRow, room_id):
            lapsed = expire(row, now)
            if lapsed is not None:
                with contextlib.suppress(StoreWriteError):  # the store logs it
                    self.store.board.put_row(lapsed)
                row = lapsed
            rows.append(row)
        return rows

    def intent(self, room_id: str, intent_id: str) -> BoardIntentRow | None:
        if len(intent_id) > ID_CHARS:
            return None
        row = self.store.board.get_row(BoardIntentRow, room_id, intent_id)
        lapsed = None if row is None else expire(row, self.clock.now_ms())
        return row if lapsed is None else lapsed

    def participant(self, room_id: str, creds: Credentials, *, reading: bool) -> Actor:
        self.accounts.require_room(room_id)
        return self.accounts.actor(room_id, creds, PARTICIPANT_TEXT, reading=reading)

    def _admin(self, room_id: str, creds: Credentials) -> str:
        self.accounts.require_room(room_id)
        return self.accounts.room_admin(room_id, creds.owner_token, SETTINGS_ADMIN_TEXT).login

    def notify(self, room_id: str, text: str, dedupe_id: str) -> dict[str, Any]:
        posted = self.messages.post_notice(
            room_id, text, dedupe_id=dedupe_id, source="system", prompt_kind=None
        )
        row = posted or self.store.message_by_dedupe_id(room_id, dedupe_id)
        message_id = None if row is None else self.messages.render(room_id, [row])[0].get("id")
        return {"delivered": row is not None, "message_id": message_id}

    # --- settings and managers -----------------------------------------------------------

    def settings(self, room_id: str, creds: Credentials) -> Reply:
        """``GET R/board-settings``."""
        try:
            self.participant(room_id, creds, reading=True)
        except Refusal as refusal:
            return refusal.reply
        manager = self.active_manager(room_id)
        pending = sum(1 for row in self.intents_of(room_id) if row.status == "pending")
        body = {
            "room_id": room_id,
            "settings": settings_json(room_id, self.settings_row(room_id), self.clock.now_ms()),
            "active_manager": None if manager is None else manager_json(manager),
            "pending_intent_count": pending,
        }
        return Reply(status=200, body=body)

    def set_mode(self, room_id: str, creds: Credentials, body: Mapping[str, Any]) -> Reply:
        """``PATCH R/board-settings``: the mode (required) and the failover (kept if absent)."""
        try:
            login = self._admin(room_id, creds)
            mode = text_field(body, "manager_mode")
            if mode not in MODES:
                refuse(400, "manager_mode is invalid")
            failover = text_field(body, "manager_failover")
            if failover is not None and failover not in FAILOVERS:
                refuse(400, "manager_failover is invalid")
        except Refusal as refusal:
            return refusal.reply
        now = self.clock.now_ms()
        old = self.settings_row(room_id)
        row = BoardSettingsRow(
            room_id=room_id,
            manager_mode=mode,
            manager_failover=failover
            or (DEFAULT_FAILOVER if old is None else old.manager_failover),
            updated_by=login,
            created_at=now if old is None else old.created_at,
            updated_at=now,
        )
        with self.store.atomic():  # the settings and their event, or nothing
            self.store.board.put_row(row)
            self.record.note(room_id, "board_settings", "mode_changed", actor=login, state=mode)
        body_out = {"room_id": room_id, "settings": settings_json(room_id, row, now)}
        return Reply(status=200, body=body_out)

    def assign(self, room_id: str, creds: Credentials, body: Mapping[str, Any]) -> Reply:
        """``POST R/board-managers``: promote a live worker session (201, the assignment)."""
        try:
            login = self._admin(room_id, creds)
            session_id = text_field(body, "agent_session_id")
            if not session_id:
                refuse(400, "agent_session_id is required")
            session = self.store.get_session(session_id[:ID_CHARS])
            if (
                session is None
                or session.room_id != room_id
                or not session.live
                or session.session_kind != "worker"
            ):
                refuse(404, SESSION_NOT_FOUND_TEXT)
        except Refusal as refusal:
            return refusal.reply
        source = text_field(body, "runtime_source")
        now = self.clock.now_ms()
        row = BoardManagerRow(
            manager_id="bm_" + uuid.uuid4().hex,
            room_id=room_id,
            agent_session_id=session.session_id,
            agent_key=session.agent_key,
            actor_label=session.actor_label or session.display_name,
            runtime_source=source if source in RUNTIME_SOURCES else "desktop_managed",
            assigned_by=login,
            last_heartbeat_at=session.last_seen_at,
            created_at=now,
            updated_at=now,
        )
        with self.store.atomic():  # the old assignments released, the new one, or nothing
            self._release_all(room_id, login, "Replaced by a new Board Manager assignment.", now)
            self.store.board.put_row(row)
            self.record.note(
                room_id,
                "board_manager",
                "assigned",
                actor=login,
                object_id=row.manager_id,
                title=row.actor_label,
                metadata={"agent_session_id": row.agent_session_id},
            )
        return Reply(status=201, body={"room_id": room_id, "manager": manager_json(row)})

    def _release_all(self, room_id: str, by: str, reason: str, now: int) -> BoardManagerRow | None:
        released = None
        for row in self.store.board.room_rows(BoardManagerRow, room_id):
            if row.status != "active":
                continue
            released = attrs.evolve(
                row,
                status="released",
                released_by=by,
                release_reason=reason,
                released_at=now,
                updated_at=now,
            )
            self.store.board.put_row(released)
            self.record.note(
                room_id,
                "board_manager",
                "released",
                actor=by,
                object_id=row.manager_id,
                title=row.actor_label,
                metadata={"reason": reason},
            )
        return released

    def release(self, room_id: str, creds: Credentials, body: Mapping[str, Any]) -> Reply:
        """``DELETE R/board-managers/active``: release the active manager (``manager`` null
        when there was none)."""
        try:
            login = self._admin(room_id, creds)
        except Refusal as refusal:
            return refusal.reply
        reason = text_field(body, "reason") or "Board Manager released."
        with self.store.atomic():
            released = self._release_all(room_id, login, reason, self.clock.now_ms())
        manager = None if released is None else manager_json(released)
        return Reply(status=200, body={"room_id": room_id, "manager": manager})

    # --- intents -------------------------------------------------------------------------

    def intents(self, room_id: str, creds: Credentials, status: str | None) -> Reply:
        """``GET R/board-intents``: the room's intents, oldest first (of ``status``, if given)."""
        try:
            self.participant(room_id, creds, reading=True)
        except Refusal as refusal:
            return refusal.reply
        rows = [r for r in self.intents_of(room_id) if not status or r.status == status]
        body = {"room_id": room_id, "intents": [intent_json(r) for r in rows[:MAX_LISTED]]}
        return Reply(status=200, body=body)

    # --- the gate ------------------------------------------------------------------------

    def gate(
        self,
        room_id: str,
        actor: Actor,
        body: Mapping[str, Any],
        action_type: str,
        payload: Mapping[str, Any],
        task: TaskRow | None = None,
    ) -> BoardIntentRow | None:
        """The approved intent an agent's action uses; ``None`` when it needs none.

        Raises:
            Refusal: 409 with the letagents API's code and text when the room
                is governed and the action carries no approval the rules accept.
        """
        if actor.person or not self.required(room_id):
            return None
        intent_id = body.get("board_intent_id")
        token = body.get("board_approval_token")
        intent_id = intent_id.strip() if isinstance(intent_id, str) else None
        token = token.strip() if isinstance(token, str) and token.strip() else None
        intent = None if not intent_id else self.intent(room_id, intent_id)
        manager = (
            None
            if intent is None or intent.approved_manager_id is None
            else next(
                (
                    m
                    for m in self.store.board.room_rows(BoardManagerRow, room_id)
                    if m.manager_id == intent.approved_manager_id
                ),
                None,
            )
        )
        assert actor.session is not None
        denial = check_approval(
            intent,
            intent_id=intent_id,
            token_hash=None if token is None else hash_token(token),
            worker=(actor.session.session_id, actor.session.agent_key),
            action_type=action_type,
            payload_digest=payload_hash(payload),
            now=self.clock.now_ms(),
            task_state=None if task is None else (task.status, task.assignee_agent_key),
            manager_live=manager is not None
            and manager.status == "active"
            and self.active_manager(room_id) == manager,
            mode_on=self.mode(room_id) != "off",
        )
        if denial is not None:
            refuse(409, denial.error, code=denial.code)
        return intent

    def supersede(self, task: TaskRow, *, task_changed: bool, work_lease_id: str | None) -> None:
        """Mark ``superseded`` the open intents a change of ``task`` made moot (inside the
        change's atomic write)."""
        now = self.clock.now_ms()
        for row in self.store.board.room_rows(BoardIntentRow, task.room_id):
            if (
                row.status not in ("pending", "approved")
                or row.payload.get("task_id") != task.task_id
            ):
                continue
            reason = supersede_reason(
                row,
                task_id=task.task_id,
                status=task.status,
                assignee_agent_key=task.assignee_agent_key,
                work_lease_id=work_lease_id,
                task_changed=task_changed,
            )
            if reason is None:
                continue
            self.store.board.put_row(
                attrs.evolve(
                    row,
                    status="superseded",
                    decision_by="LetAgents",
                    decision_reason=reason,
                    decided_at=now,
                    updated_at=now,
                )
            )
            self.record.note(
                task.room_id,
                "board_intent",
                "superseded",
                actor="LetAgents",
                object_id=row.intent_id,
                state="superseded",
                task_id=task.task_id,
                metadata={"reason": reason},
            )

    def consume(self, intent: BoardIntentRow | None, task_id: str | None) -> None:
        """Mark the approved intent an action used (inside the action's atomic write)."""
        if intent is None:
            return
        used = attrs.evolve(
            intent, status="used", task_id=intent.task_id or task_id, updated_at=self.clock.now_ms()
        )
        self.store.board.put_row(used)
        self.record.note(
            intent.room_id,
            "board_intent",
            "used",
            actor=intent.proposer_actor_label,
            object_id=intent.intent_id,
            state="used",
            task_id=used.task_id,
            metadata={"action_type": intent.action_type},
        )
