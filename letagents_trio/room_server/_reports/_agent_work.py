"""Published workspace captures: an agent's summary of its work and the review's pages.

:class:`AgentWorkBoard` answers ``POST …/agent-work`` as the letagents API
does for a worker publishing a capture: the body names the room message
holding the capture's short summary (``source_message_id``, a message this
agent posted), the capture's bounded preview (``summary``, version 3) and, when
the capture has a review, one page of it (``review_page``: ``digest``,
``index``, ``total``, ``data``: 64 KiB of base64 of the gzipped review, the
last page shorter). The first post makes the attempt (a UUID); every later
post for the same message is the same attempt, so a retry is harmless, and
the review is complete once every page arrived. The answer is ``{work}``.

``GET …/agent-work`` lists the room's attempts (newest first, 50), and the
summary message itself carries ``agent_work`` (the changed files and their
line counts) wherever the room renders it, so any chat reading the room sees
what changed (:meth:`AgentWorkBoard.attachments`).

Limits (the API's): a preview of at most 480 KiB and 200 files, a review of
at most 128 MiB in 64 KiB pages.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, final

import attrs

from .._board._tasks import ADMIN_TEXT
from .._storage._agent_rows import AgentWorkRow, WorkPageRow
from .._wire import Credentials, Refusal, Reply, iso, refuse

if TYPE_CHECKING:
    from .._auth._accounts import Accounts
    from .._clock import RoomClock
    from .._storage._store import RoomStore

__all__ = ["PREVIEW_LIMIT", "REVIEW_LIMIT", "REVIEW_PAGE_SIZE", "AgentWorkBoard"]

# The letagents API's bounds on a capture (workspace-review, workspace-change-summary).
REVIEW_LIMIT: Final = 128 * 1024 * 1024
REVIEW_PAGE_SIZE: Final = 64 * 1024
REVIEW_MAX_PAGES: Final = REVIEW_LIMIT // REVIEW_PAGE_SIZE
PREVIEW_LIMIT: Final = 480 * 1024
PREVIEW_FILES: Final = 200
LIST_LIMIT: Final = 50
_DIGEST: Final = re.compile(r"[a-f0-9]{64}")
_BASE64: Final = re.compile(r"[A-Za-z0-9+/]+={0,2}")

SUMMARY_INVALID_TEXT: Final = "summary must be a workspace capture summary (version 3)."
PAGE_INVALID_TEXT: Final = "review_page is not a valid review page."
OTHER_REVIEW_TEXT: Final = "review_page belongs to a different review of this capture."
SOURCE_MISSING_TEXT: Final = "source_message_id must name a message of this room."
SOURCE_NOT_YOURS_TEXT: Final = "source_message_id must name a message this worker posted."


def _message_number(value: object) -> int | None:
    if not isinstance(value, str):
        return None
    digits = value.strip().removeprefix("msg_")
    return int(digits) if digits.isascii() and digits.isdigit() and len(digits) <= 18 else None


def _check_summary(value: object) -> dict[str, Any]:
    if not isinstance(value, Mapping) or value.get("version") != 3:
        refuse(400, SUMMARY_INVALID_TEXT)
    if len(json.dumps(value, separators=(",", ":")).encode("utf-8")) > PREVIEW_LIMIT:
        refuse(400, SUMMARY_INVALID_TEXT)
    for part in ("workspace", "contribution"):
        found = value.get(part)
        files = found.get("files") if isinstance(found, Mapping) else None
        if found is not None and (not isinstance(files, list) or len(files) > PREVIEW_FILES):
            refuse(400, SUMMARY_INVALID_TEXT)
    return dict(value)


def _check_page(value: object) -> tuple[str, int, int, str]:
    """``(digest, index, total, data)`` of a review page, or refuse 400."""
    if not isinstance(value, Mapping) or sorted(value) != ["data", "digest", "index", "total"]:
        refuse(400, PAGE_INVALID_TEXT)
    digest, index, total, data = value["digest"], value["index"], value["total"], value["data"]
    ints = all(isinstance(n, int) and not isinstance(n, bool) for n in (index, total))
    if not (isinstance(digest, str) and _DIGEST.fullmatch(digest) and ints):
        refuse(400, PAGE_INVALID_TEXT)
    if not (1 <= total <= REVIEW_MAX_PAGES and 0 <= index < total):
        refuse(400, PAGE_INVALID_TEXT)
    if not (isinstance(data, str) and len(data) <= REVIEW_PAGE_SIZE and _BASE64.fullmatch(data)):
        refuse(400, PAGE_INVALID_TEXT)
    if index < total - 1 and len(data) != REVIEW_PAGE_SIZE:
        refuse(400, PAGE_INVALID_TEXT)
    return digest, index, total, data


def _files(summary: Mapping[str, Any]) -> dict[str, Any]:
    """What changed, from a summary's contribution: its files and line counts."""
    part = summary.get("contribution")
    part = part if isinstance(part, Mapping) else {}
    return {
        "files": part.get("files", []),
        "additions": part.get("additions", 0),
        "deletions": part.get("deletions", 0),
    }


def work_json(row: AgentWorkRow) -> dict[str, Any]:
    """An attempt as the room renders it."""
    return {
        "attempt_id": row.attempt_id,
        "room_id": row.room_id,
        "agent_key": row.agent_key,
        "actor_label": row.actor_label,
        "source_message_id": row.source_message_id,
        "summary": row.summary,
        "review": {
            "digest": row.review_digest,
            "total": row.review_total,
            "received": len(row.review_pages),
            "complete": row.review_complete,
        },
        "created_at": iso(row.created_at),
        "updated_at": iso(row.updated_at),
    }


@final
@attrs.define(eq=False)
class AgentWorkBoard:
    """Every room's published workspace captures.

    Args:
        store: the room's rows.
        clock: the room's clock (epoch ms).
        accounts: who is calling.
    """

    store: RoomStore
    clock: RoomClock
    accounts: Accounts

    def post(self, room_id: str, creds: Credentials, body: Mapping[str, Any]) -> Reply:
        """``POST …/agent-work``: record (again) a capture, and a page of its review."""
        try:
            self.accounts.require_room(room_id)
            agent = self.accounts.authenticate(room_id, creds)
            number = _message_number(body.get("source_message_id"))
            message = None if number is None else self.store.get_message(room_id, number)
            if message is None:
                refuse(400, SOURCE_MISSING_TEXT)
            poster = self.store.get_session(message.agent_session_id or "")
            if poster is None or poster.agent_key != agent.agent_key:
                refuse(403, SOURCE_NOT_YOURS_TEXT)
            summary = _check_summary(body.get("summary"))
            page = None if body.get("review_page") is None else _check_page(body["review_page"])
            row = self._attempt(room_id, agent.agent_key, str(message.message_id))
            if page is not None and row is not None and row.review_digest not in (None, page[0]):
                refuse(409, OTHER_REVIEW_TEXT)
        except Refusal as refusal:
            return refusal.reply
        now = self.clock.now_ms()
        if row is None:
            row = AgentWorkRow(
                attempt_id=str(uuid.uuid4()),
                room_id=room_id,
                agent_key=agent.agent_key,
                actor_label=agent.actor_label or agent.display_name,
                session_id=agent.session_id,
                source_message_id=str(message.message_id),
                summary=summary,
                created_at=now,
                updated_at=now,
            )
        with self.store.atomic():  # the page and the attempt that counts it, or neither
            if page is not None:
                digest, index, total, data = page
                self.store.agents.put(
                    WorkPageRow(attempt_id=row.attempt_id, index=index, room_id=room_id, data=data)
                )
                received = tuple(sorted({*row.review_pages, index}))
                row = attrs.evolve(
                    row, review_digest=digest, review_total=total, review_pages=received
                )
            row = attrs.evolve(row, updated_at=now)
            self.store.agents.put(row)
        return Reply(status=200, body={"work": work_json(row)})

    def _attempt(self, room_id: str, agent_key: str, message_id: str) -> AgentWorkRow | None:
        for row in self.store.agents.in_room(AgentWorkRow, room_id):
            if row.agent_key == agent_key and row.source_message_id == message_id:
                return row
        return None

    def listing(self, room_id: str, creds: Credentials) -> Reply:
        """``GET …/agent-work``: the room's newest captures."""
        try:
            self.accounts.require_room(room_id)
            self.accounts.actor(room_id, creds, ADMIN_TEXT, reading=True)
        except Refusal as refusal:
            return refusal.reply
        rows = sorted(
            self.store.agents.in_room(AgentWorkRow, room_id),
            key=lambda r: (r.created_at, r.attempt_id),
            reverse=True,
        )
        work = [work_json(r) for r in rows[:LIST_LIMIT]]
        return Reply(status=200, body={"room_id": room_id, "work": work})

    def attachments(self, room_id: str) -> dict[int, dict[str, Any]]:
        """What each summary message of the room carries: its capture's changed files."""
        found: dict[int, dict[str, Any]] = {}
        for row in self.store.agents.in_room(AgentWorkRow, room_id):
            shown = {"attempt_id": row.attempt_id, **_files(row.summary)}
            shown["review_complete"] = row.review_complete
            found[int(row.source_message_id)] = {"agent_work": shown}
        return found
