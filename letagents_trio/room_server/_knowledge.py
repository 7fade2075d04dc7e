"""Room memory and requests for people (``…/memory``, ``…/attention``): knowledge records.

A room keeps two kinds of attributed records, as the letagents API does:
``memory`` (goals, decisions, constraints, terms, references an agent should
read before working) and ``attention`` (a question, decision, approval or
review that needs a person; its answer, once a person gives it, is kept with
it and posted to the room).

The rules (pure, :func:`parse_record`, :func:`replay_of`):

1. a record names a category of its type and has a title (at most 160
   characters) and a body (at most 8 000), trimmed and not blank; a request
   may add a recommendation (2 000) and what it unblocks (1 000); either may
   cite an HTTP(S) link without credentials (2 048) and a message of the same
   room;
2. the client chooses the record's id (8-80 letters, digits, ``_`` or ``-``)
   once, so a retry after a lost answer is the same record: posting the same
   id with the same author and content answers the stored record again;
   with anything else it is 409;
3. agents write as agents, with their session credentials; only people answer
   a request (``POST …/attention/{id}/respond``, the room's admins here), once,
   naming the version they saw.

Reading either list answers the room's records of that kind (at most
:data:`MAX_LISTED`, ``truncated`` beyond): live before archived, unanswered
before answered, most recently changed first; the requests list adds the
room's tasks that wait on someone (``blocked`` or ``in_review``).

Texts and limits are the letagents API's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, final
from urllib.parse import urlsplit

import attrs

from ._messaging._citations import (
    check_source,
    source_number,
)
from ._storage._rows import KnowledgeRow
from ._wire import Credentials, Refusal, Reply, iso, refuse

if TYPE_CHECKING:
    from ._auth._accounts import Accounts, Actor
    from ._clock import RoomClock
    from ._messaging._messages import MessageBoard
    from ._storage._store import RoomStore

__all__ = [
    "ATTENTION",
    "ATTENTION_CATEGORIES",
    "MAX_LISTED",
    "MEMORY",
    "MEMORY_CATEGORIES",
    "KnowledgeBoard",
    "parse_record",
    "record_json",
    "replay_of",
]

MEMORY: Final = "memory"
ATTENTION: Final = "attention"
MEMORY_CATEGORIES: Final = ("goal", "decision", "constraint", "term", "reference")
ATTENTION_CATEGORIES: Final = ("question", "decision", "approval", "review")
# A list answers at most this many records.
MAX_LISTED: Final = 200
# The letagents API's bounds, in characters.
MAX_TITLE: Final = 160
MAX_BODY: Final = 8000
MAX_RECOMMENDATION: Final = 2000
MAX_UNBLOCKS: Final = 1000
MAX_SOURCE_URL: Final = 2048
MAX_SOURCE_MESSAGE: Final = 40
_RECORD_ID: Final = re.compile(r"[a-zA-Z0-9_-]{8,80}")
# The statuses of tasks that wait on someone, listed beside the requests.
_WAITING_STATUSES: Final = ("blocked", "in_review")
# The letagents API's texts.
RECORD_REQUIRED_TEXT: Final = "A record is required."
CATEGORY_TEXT: Final = "Choose a valid category."
RECORD_ID_TEXT: Final = "Use a stable client ID of 8–80 letters, numbers, underscores or hyphens."
URL_TEXT: Final = "Source URL must be an HTTP or HTTPS link."
URL_CREDENTIALS_TEXT: Final = "Source URL must be an HTTP or HTTPS link without credentials."
REUSED_ID_TEXT: Final = (
    "This client ID was already used for different content. Use a new ID for a new record."
)
NOT_FOUND_TEXT: Final = "Record not found."
STALE_VERSION_TEXT: Final = "This changed since you opened it. Refresh to see the latest version."
ANSWERED_TEXT: Final = "This request has already been answered."
# Ours: who may answer a request in the reference room.
NOT_ADMIN_TEXT: Final = "Only the room's admins, as people, can answer requests for input."
# The content a replay must repeat exactly.
_REPLAY_KEYS: Final = (
    "type",
    "category",
    "title",
    "body",
    "recommendation",
    "unblocks",
    "source_url",
    "source_message_id",
)


def _text(value: object, name: str, limit: int, *, required: bool = False) -> str:
    """A field's trimmed text, or refuse 400 with the letagents API's wording."""
    if value is None and not required:
        return ""
    if not isinstance(value, str) or len(value) > limit or (required and not value.strip()):
        kind = "nonempty text" if required else "text"
        refuse(400, f"{name} must be {kind} of at most {limit} characters.")
    return value.strip()


def _source_url(value: object) -> str:
    url = _text(value, "Source URL", MAX_SOURCE_URL)
    if not url:
        return url
    try:
        parts = urlsplit(url)
        hostname = parts.hostname
    except ValueError:
        refuse(400, URL_TEXT)
    if parts.scheme not in ("http", "https") or not hostname:
        refuse(400, URL_TEXT)
    if parts.username or parts.password:
        refuse(400, URL_CREDENTIALS_TEXT)
    return url


@final
@attrs.frozen(kw_only=True)
class RecordInput:
    """A checked record body (the content a replay compares)."""

    record_id: str
    type: str
    category: str
    title: str
    body: str
    recommendation: str
    unblocks: str
    source_url: str
    source_message_id: str


def parse_record(kind: str, body: Mapping[str, Any]) -> RecordInput:
    """Check a ``POST …/memory`` or ``…/attention`` body, or refuse 400."""
    categories = MEMORY_CATEGORIES if kind == MEMORY else ATTENTION_CATEGORIES
    if not body:
        refuse(400, RECORD_REQUIRED_TEXT)
    if body.get("category") not in categories:
        refuse(400, CATEGORY_TEXT)
    attention = kind == ATTENTION
    parsed = RecordInput(
        record_id="",
        type=kind,
        category=str(body["category"]),
        title=_text(body.get("title"), "Title", MAX_TITLE, required=True),
        body=_text(body.get("body"), "Context", MAX_BODY, required=True),
        recommendation=(
            _text(body.get("recommendation"), "Recommendation", MAX_RECOMMENDATION)
            if attention
            else ""
        ),
        unblocks=_text(body.get("unblocks"), "What this unblocks", MAX_UNBLOCKS)
        if attention
        else "",
        source_url=_source_url(body.get("source_url")),
        source_message_id=_text(
            body.get("source_message_id"), "Source message", MAX_SOURCE_MESSAGE
        ),
    )
    record_id = body.get("client_id")
    if not isinstance(record_id, str) or _RECORD_ID.fullmatch(record_id) is None:
        refuse(400, RECORD_ID_TEXT)
    return attrs.evolve(parsed, record_id=record_id)


def author_of(actor: Actor) -> dict[str, str]:
    """``{id, label, kind}`` of the caller: an agent by its key, a person by account."""
    if actor.person:
        return {"id": actor.account_id, "label": actor.label, "kind": "human"}
    return {"id": actor.agent_key or "", "label": actor.label, "kind": "agent"}


def new_record(room_id: str, parsed: RecordInput, author: dict[str, str], now: int) -> KnowledgeRow:
    """The stored record a first post creates (version 1)."""
    return KnowledgeRow(
        room_id=room_id,
        record_id=parsed.record_id,
        type=parsed.type,
        category=parsed.category,
        title=parsed.title,
        body=parsed.body,
        recommendation=parsed.recommendation,
        unblocks=parsed.unblocks,
        source_url=parsed.source_url,
        source_message_id=parsed.source_message_id,
        author=author,
        updated_by=author,
        created_at=now,
        updated_at=now,
    )


def replay_of(stored: KnowledgeRow, candidate: KnowledgeRow) -> KnowledgeRow:
    """``stored`` when ``candidate`` repeats it (same author, same content); else refuse 409."""
    same_author = (stored.author.get("id"), stored.author.get("kind")) == (
        candidate.author.get("id"),
        candidate.author.get("kind"),
    )
    same = all(getattr(stored, key) == getattr(candidate, key) for key in _REPLAY_KEYS)
    if not (same_author and same):
        refuse(409, REUSED_ID_TEXT)
    return stored


def record_json(row: KnowledgeRow) -> dict[str, Any]:
    """A record as the letagents API shows it."""
    response = None
    if row.response is not None:
        response = {**row.response, "at": iso(row.response.get("at"))}
    return {
        "id": row.record_id,
        "room_id": row.room_id,
        "type": row.type,
        "category": row.category,
        "title": row.title,
        "body": row.body,
        "recommendation": row.recommendation,
        "unblocks": row.unblocks,
        "source_url": row.source_url,
        "source_message_id": row.source_message_id,
        "version": row.version,
        "author": row.author,
        "updated_by": row.updated_by,
        "created_at": iso(row.created_at),
        "updated_at": iso(row.updated_at),
        "archived": row.archived,
        "response": response,
    }


def listed(rows: Sequence[KnowledgeRow]) -> list[KnowledgeRow]:
    """The list order: live first, unanswered first, most recently changed first."""
    return sorted(
        rows,
        key=lambda r: (r.archived, r.response is not None, -r.updated_at, r.record_id),
    )


def response_text(row: KnowledgeRow) -> str:
    """The room message an answer posts: it wakes the agent that asked, by its key."""
    assert row.response is not None
    handle = ""
    if row.author.get("kind") == "agent":
        key = row.author.get("id", "").lower()
        handle = re.sub(r"[^a-z0-9_.:/-]+", "", key)
    prefix = f"@agent:{handle}\n\n" if handle else ""
    return f"{prefix}Human response ({row.record_id}):\n\n{row.response['body']}"


@final
@attrs.define(eq=False)
class KnowledgeBoard:
    """Every room's memory and requests for people, behind authenticated calls.

    Args:
        store: the room's rows.
        clock: the room's clock (epoch ms).
        accounts: who is calling.
        board: the room's messages (a cited message must exist; an answer is posted).
    """

    store: RoomStore
    clock: RoomClock
    accounts: Accounts
    board: MessageBoard

    def read(self, room_id: str, kind: str, creds: Credentials) -> Reply:
        """``GET …/memory`` or ``…/attention``: the room's records of that kind."""
        try:
            self.accounts.require_room(room_id)
            self.accounts.actor(room_id, creds, NOT_ADMIN_TEXT, reading=True)
        except Refusal as refusal:
            return refusal.reply
        rows = listed(self.store.room_knowledge(room_id, kind))
        body: dict[str, Any] = {
            "room_id": room_id,
            "records": [record_json(r) for r in rows[:MAX_LISTED]],
            "truncated": len(rows) > MAX_LISTED,
        }
        if kind == ATTENTION:
            waiting = self.store.tasks_page(
                room_id, after=0, limit=MAX_LISTED, statuses=_WAITING_STATUSES
            )
            body["tasks"] = [
                {
                    "id": task.task_id,
                    "title": task.title,
                    "status": task.status,
                    "description": task.description,
                    "updated_at": iso(task.updated_at),
                }
                for task in waiting
            ]
        return Reply(status=200, body=body)

    def post(self, room_id: str, kind: str, creds: Credentials, body: Mapping[str, Any]) -> Reply:
        """``POST …/memory`` or ``…/attention``: save a record (201), or answer it again."""
        try:
            self.accounts.require_room(room_id)
            actor = self.accounts.actor(room_id, creds, NOT_ADMIN_TEXT)
            parsed = parse_record(kind, body)
            self._check_source(room_id, parsed.source_message_id)
            now = self.clock.now_ms()
            record = new_record(room_id, parsed, author_of(actor), now)
            stored = self.store.get_knowledge(room_id, record.record_id)
            if stored is not None:
                record = replay_of(stored, record)
            else:
                self.store.put_knowledge(record)
        except Refusal as refusal:
            return refusal.reply
        return Reply(status=201, body={"record": record_json(record)})

    def respond(
        self, room_id: str, record_id: str, creds: Credentials, body: Mapping[str, Any]
    ) -> Reply:
        """``POST …/attention/{id}/respond``: a person answers a request, once."""
        try:
            self.accounts.require_room(room_id)
            if creds.session_id or creds.session_token:
                refuse(403, NOT_ADMIN_TEXT)
            actor = self.accounts.actor(room_id, creds, NOT_ADMIN_TEXT)
            if _RECORD_ID.fullmatch(record_id) is None:
                refuse(400, RECORD_ID_TEXT)
            row = self.store.get_knowledge(room_id, record_id)
            if row is None or row.type != ATTENTION:
                refuse(404, NOT_FOUND_TEXT)
            answer = _text(body.get("response"), "Response", MAX_BODY, required=True)
            person = author_of(actor)
            if _repeats_answer(row, person, answer, body.get("expected_version")):
                return Reply(status=200, body={"record": record_json(row)})
            if body.get("expected_version") != row.version:
                refuse(409, STALE_VERSION_TEXT)
            if row.response is not None:
                refuse(409, ANSWERED_TEXT)
        except Refusal as refusal:
            return refusal.reply
        now = self.clock.now_ms()
        row = attrs.evolve(
            row,
            version=row.version + 1,
            updated_at=now,
            updated_by=person,
            response={"body": answer, "actor": person, "at": now},
        )
        with self.store.atomic():  # the answer and its message, or nothing
            self.store.put_knowledge(row)
            self.board.post_person(
                room_id, response_text(row), sender=actor.label, reply_to=_message_number(row)
            )
        return Reply(status=200, body={"record": record_json(row)})

    def _check_source(self, room_id: str, source: str) -> None:
        check_source(self.store, room_id, source)


def _message_number(row: KnowledgeRow) -> int | None:
    return source_number(row.source_message_id) if row.source_message_id else None


def _repeats_answer(row: KnowledgeRow, person: dict[str, str], answer: str, seen: object) -> bool:
    """Whether this answer was already recorded (a retry after a lost response)."""
    response = row.response
    return (
        response is not None
        and response.get("actor", {}).get("id") == person["id"]
        and response.get("body") == answer
        and seen == row.version - 1
    )
