"""Agents' visible reasoning: one replace-in-place snapshot per agent, with its history.

:class:`ReasoningBoard` answers the letagents API's reasoning routes:

* ``GET …/reasoning-sessions?open=&actor_label=&task_id=&limit=`` (and the
  same at ``GET …/reasoning``): ``{room_id, sessions}``, newest first, open
  ones only unless ``open=false``;
* ``POST …/reasoning-sessions``: a worker session opens its reasoning with a
  first snapshot; 201 ``{room_id, session, update}``;
* ``POST …/reasoning-sessions/{id}/updates``: a new snapshot replaces the
  session's latest; 201 ``{room_id, session, update}``;
* ``GET …/reasoning-sessions/{id}?limit=``: ``{room_id, session, updates}``.

A snapshot is ``summary`` (required) and, each when given, ``goal``,
``checking``, ``hypothesis``, ``blocker``, ``next_action``, ``milestone``
(strings, trimmed, empty meaning none), ``status`` (``idle``, ``working``,
``reviewing``, ``blocked``) and ``confidence`` (0 to 1). Writes need a worker
session; the session's actor label names the writer.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, final

import attrs

from .._board._tasks import ADMIN_TEXT
from .._storage._agent_rows import ReasoningRow, ReasoningUpdateRow
from .._wire import Credentials, Refusal, Reply, iso, refuse

if TYPE_CHECKING:
    from .._auth._accounts import Accounts
    from .._clock import RoomClock
    from .._storage._store import RoomStore

__all__ = ["PRESENCE_STATUSES", "ReasoningBoard", "parse_snapshot"]

PRESENCE_STATUSES: Final = ("idle", "working", "reviewing", "blocked")
_TEXT_FIELDS: Final = ("goal", "checking", "hypothesis", "blocker", "next_action", "milestone")
# A page of sessions or updates unless ``limit`` asks for fewer (the API's parseLimit).
DEFAULT_PAGE: Final = 50
MAX_PAGE: Final = 200
NOT_FOUND_TEXT: Final = "Reasoning session not found"
SUMMARY_REQUIRED_TEXT: Final = "summary is required"


def _text(value: object) -> str | None:
    return (value.strip() or None) if isinstance(value, str) else None


def parse_snapshot(body: Mapping[str, Any]) -> dict[str, Any]:
    """The snapshot a request carries, or refuse 400 with the API's text."""
    summary = _text(body.get("summary"))
    if summary is None:
        refuse(400, SUMMARY_REQUIRED_TEXT)
    snapshot: dict[str, Any] = {"summary": summary}
    for name in _TEXT_FIELDS:
        if name in body:
            snapshot[name] = _text(body[name])
    if "status" in body and body["status"] is not None:
        if body["status"] not in PRESENCE_STATUSES:
            refuse(400, f"status must be one of: {', '.join(PRESENCE_STATUSES)}")
        snapshot["status"] = body["status"]
    if "confidence" in body and body["confidence"] is not None:
        value = body["confidence"]
        number = value if isinstance(value, int | float) and not isinstance(value, bool) else None
        if number is None or not math.isfinite(number) or not 0 <= number <= 1:
            refuse(400, "confidence must be a number between 0 and 1")
        snapshot["confidence"] = number
    return snapshot


def _limit(raw: str | None) -> int:
    # Leading zeros are no digits of the number; more than the largest page's
    # three digits is the largest page, however long (no huge int is made).
    digits = (raw or "").lstrip("0")
    if raw and raw.isascii() and raw.isdigit() and digits:
        return MAX_PAGE if len(digits) > len(str(MAX_PAGE)) else min(int(digits), MAX_PAGE)
    return DEFAULT_PAGE


def session_json(row: ReasoningRow) -> dict[str, Any]:
    """A reasoning session as the API renders it."""
    return {
        "id": row.reasoning_id,
        "room_id": row.room_id,
        "task_id": row.task_id,
        "anchor_message_id": row.anchor_message_id,
        "actor_label": row.actor_label,
        "agent_key": row.agent_key,
        "status": row.status,
        "summary": row.summary,
        "latest_payload": row.latest_payload,
        "created_at": iso(row.created_at),
        "updated_at": iso(row.updated_at),
        "closed_at": iso(row.closed_at),
    }


def update_json(row: ReasoningUpdateRow) -> dict[str, Any]:
    """One snapshot of a session's history."""
    return {
        "id": row.update_id,
        "session_id": row.reasoning_id,
        "actor_label": row.actor_label,
        "payload": row.payload,
        "created_at": iso(row.created_at),
    }


@final
@attrs.define(eq=False)
class ReasoningBoard:
    """Every room's reasoning sessions.

    Args:
        store: the room's rows.
        clock: the room's clock (epoch ms).
        accounts: who is calling.
    """

    store: RoomStore
    clock: RoomClock
    accounts: Accounts

    def sessions(
        self,
        room_id: str,
        creds: Credentials,
        *,
        open_only: bool,
        actor_label: str | None,
        task_id: str | None,
        limit: str | None,
    ) -> Reply:
        """``GET …/reasoning-sessions``: the room's sessions, newest first."""
        try:
            self.accounts.require_room(room_id)
            self.accounts.actor(room_id, creds, ADMIN_TEXT, reading=True)
        except Refusal as refusal:
            return refusal.reply
        label, task = (actor_label or "").strip(), (task_id or "").strip()
        rows = [
            r
            for r in self.store.agents.in_room(ReasoningRow, room_id)
            if (not open_only or r.closed_at is None)
            and (not label or r.actor_label == label)
            and (not task or r.task_id == task)
        ]
        rows.sort(key=lambda r: (r.updated_at, r.reasoning_id), reverse=True)
        shown = [session_json(r) for r in rows[: _limit(limit)]]
        return Reply(status=200, body={"room_id": room_id, "sessions": shown})

    def session(
        self, room_id: str, reasoning_id: str, creds: Credentials, limit: str | None
    ) -> Reply:
        """``GET …/reasoning-sessions/{id}``: one session and its newest updates."""
        try:
            self.accounts.require_room(room_id)
            self.accounts.actor(room_id, creds, ADMIN_TEXT, reading=True)
            row = self._find(room_id, reasoning_id)
        except Refusal as refusal:
            return refusal.reply
        updates = [
            u
            for u in self.store.agents.in_room(ReasoningUpdateRow, room_id)
            if u.reasoning_id == row.reasoning_id
        ]
        updates.sort(key=lambda u: (u.created_at, u.update_id), reverse=True)
        body = {
            "room_id": room_id,
            "session": session_json(row),
            "updates": [update_json(u) for u in updates[: _limit(limit)]],
        }
        return Reply(status=200, body=body)

    def _find(self, room_id: str, reasoning_id: str) -> ReasoningRow:
        row = self.store.agents.get(ReasoningRow, reasoning_id)
        if row is None or row.room_id != room_id:
            refuse(404, NOT_FOUND_TEXT)
        return row

    def create(self, room_id: str, creds: Credentials, body: Mapping[str, Any]) -> Reply:
        """``POST …/reasoning-sessions``: a worker's new session with its first snapshot."""
        try:
            self.accounts.require_room(room_id)
            agent = self.accounts.authenticate(room_id, creds)
            snapshot = parse_snapshot(body)
        except Refusal as refusal:
            return refusal.reply
        now = self.clock.now_ms()
        row = ReasoningRow(
            reasoning_id=str(uuid.uuid4()),
            room_id=room_id,
            actor_label=agent.actor_label or agent.display_name,
            agent_key=agent.agent_key,
            task_id=_text(body.get("task_id")),
            anchor_message_id=_text(body.get("anchor_message_id")),
            status=snapshot.get("status"),
            summary=snapshot["summary"],
            latest_payload=snapshot,
            created_at=now,
            updated_at=now,
        )
        return self._record(row, snapshot, now, status=201)

    def append(
        self, room_id: str, reasoning_id: str, creds: Credentials, body: Mapping[str, Any]
    ) -> Reply:
        """``POST …/reasoning-sessions/{id}/updates``: a new snapshot replaces the latest."""
        try:
            self.accounts.require_room(room_id)
            agent = self.accounts.authenticate(room_id, creds)
            row = self._find(room_id, reasoning_id)
            snapshot = parse_snapshot(body)
        except Refusal as refusal:
            return refusal.reply
        now = self.clock.now_ms()
        updated = attrs.evolve(
            row,
            actor_label=agent.actor_label or row.actor_label,
            status=snapshot.get("status", row.status),
            summary=snapshot["summary"],
            latest_payload=snapshot,
            updated_at=now,
        )
        return self._record(updated, snapshot, now, status=201)

    def _record(
        self, row: ReasoningRow, snapshot: dict[str, Any], now: int, *, status: int
    ) -> Reply:
        """Store the session and its new update together."""
        row = attrs.evolve(row, update_count=row.update_count + 1)
        update = ReasoningUpdateRow(
            update_id=f"{row.reasoning_id}:{row.update_count:08d}",
            reasoning_id=row.reasoning_id,
            room_id=row.room_id,
            actor_label=row.actor_label,
            payload=snapshot,
            created_at=now,
        )
        with self.store.atomic():
            self.store.agents.put(row)
            self.store.agents.put(update)
        body = {"room_id": row.room_id, "session": session_json(row), "update": update_json(update)}
        return Reply(status=status, body=body)
