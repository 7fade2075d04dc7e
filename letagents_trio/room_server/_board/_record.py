"""A room's record: shared workflow artifacts (``…/artifacts``) and its events (``…/events``).

**Artifacts** are provider-neutral references to the work (a pull request, a
branch, an issue, a review, a check, a merge), published by agents or linked
from a task's update, each linked to the tasks it belongs to. The rules are
the letagents API's: a provider (:data:`PROVIDERS`) and a kind (:data:`KINDS`),
only the fields :data:`ARTIFACT_KEYS` (strings, ``number`` a non-negative
integer), at most :data:`MAX_ARTIFACTS` in one update and
:data:`MAX_LINKED_TASKS` linked tasks in one publication, and a stable identity
(a url, an id, a number or a ref) that keys it: publishing it again updates it
and adds links. Ours: each text field is at most :data:`MAX_FIELD_CHARS`
characters, and every linked task must exist. A read lists the room's (or one
task's) newest first, :data:`DEFAULT_ARTIFACTS` unless asked for up to
:data:`MAX_ARTIFACTS_LISTED`.

**Events.** The letagents API serves a room's GitHub events here; the reference
room has no GitHub, so its record is what the room itself saw happen to the
board (ours): intents registered and decided (``board_intent``), managers
assigned and released (``board_manager``), the mode changed
(``board_settings``), tasks created and moved (``task``), pull requests linked
(``pull_request``), review leases (``review_lease``), verdicts
(``pull_request_review``) and artifacts published (``artifact``). Each has the
letagents API's fields (``event_type``, ``action``, ``object_id``, ``state``,
``actor``...); a page is :data:`DEFAULT_EVENTS` (at most :data:`MAX_EVENTS`)
after an ``after`` cursor, filtered by type, object, actor and time.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, Final, final

import attrs

from .._storage._board_rows import ArtifactRow, EventFilter, RoomEventRow
from .._wire import Credentials, Refusal, Reply, iso, refuse
from ._tasks import TASK_NOT_FOUND_TEXT, parse_task_number

if TYPE_CHECKING:
    from .._auth._accounts import Accounts, Actor
    from .._clock import RoomClock
    from .._storage._store import RoomStore

__all__ = [
    "ARTIFACT_KEYS",
    "KINDS",
    "MAX_ARTIFACTS",
    "PROVIDERS",
    "RecordBoard",
    "artifact_json",
    "parse_artifacts",
    "pr_artifact",
]

PROVIDERS: Final = frozenset({"git", "github", "gitlab", "bitbucket", "unknown"})
KINDS: Final = frozenset(
    {
        "issue",
        "branch",
        "commit",
        "diff",
        "change_summary",
        "pull_request",
        "merge_request",
        "review",
        "check_run",
        "merge",
    }
)
ARTIFACT_KEYS: Final = ("provider", "kind", "id", "number", "title", "url", "ref", "state")
# The letagents API's bounds.
MAX_ARTIFACTS: Final = 32
MAX_LINKED_TASKS: Final = 32
DEFAULT_ARTIFACTS: Final = 100
MAX_ARTIFACTS_LISTED: Final = 250
DEFAULT_EVENTS: Final = 50
MAX_EVENTS: Final = 100
# Ours: a field of an artifact is a label or a link, not a document.
MAX_FIELD_CHARS: Final = 2048
# Ours: the 403 for someone who is neither an agent of the room nor its admin.
RECORD_ADMIN_TEXT: Final = "Only the room's agents and admins can read or publish its record."
_TEXT_FIELDS: Final = ("id", "title", "url", "ref", "state")


def _field(record: Mapping[str, Any], key: str, where: str) -> object:
    value = record.get(key)
    if value is None:
        return None
    if key == "number":
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            refuse(400, f"{where}.number must be a non-negative integer")
        return value
    if not isinstance(value, str):
        refuse(400, f"{where}.{key} must be a string")
    if len(value) > MAX_FIELD_CHARS:
        refuse(400, f"{where}.{key} must be at most {MAX_FIELD_CHARS} characters")
    return value.strip() or None


def parse_artifacts(raw: object, field: str = "workflow_artifacts") -> list[dict[str, Any]]:
    """Check a list of artifacts (the letagents API's rules and texts), or refuse 400."""
    if not isinstance(raw, list):
        refuse(400, f"{field} must be an array")
    if len(raw) > MAX_ARTIFACTS:
        refuse(400, f"{field} cannot contain more than {MAX_ARTIFACTS} entries")
    checked: list[dict[str, Any]] = []
    for index, value in enumerate(raw):
        where = f"{field}[{index}]"
        if not isinstance(value, Mapping):
            refuse(400, f"{where} must be an object")
        for key in value:
            if key not in ARTIFACT_KEYS:
                refuse(400, f'{where} has unsupported key "{str(key)[:64]}"')
        if value.get("provider") not in PROVIDERS:
            refuse(400, f"{where}.provider is invalid")
        if value.get("kind") not in KINDS:
            refuse(400, f"{where}.kind is invalid")
        artifact = {"provider": value["provider"], "kind": value["kind"]}
        for key in ("id", "number", "title", "url", "ref", "state"):
            artifact[key] = _field(value, key, where)
        checked.append(artifact)
    return checked


def _identity(artifact: Mapping[str, Any]) -> str | None:
    """The artifact's identity key, from its url, else its provider, kind and id/number/ref."""
    if artifact.get("url"):
        basis = f"url\n{artifact['url']}"
    elif artifact.get("id") or artifact.get("number") is not None or artifact.get("ref"):
        parts = (artifact["provider"], artifact["kind"], artifact.get("id"), artifact.get("number"))
        basis = "\n".join(str(p) for p in (*parts, artifact.get("ref")))
    else:
        return None
    return "art_" + hashlib.sha256(basis.encode("utf-8")).hexdigest()[:32]


def pr_artifact(pr_url: str) -> dict[str, Any]:
    """The artifact a task's PR link stands for (a GitHub pull request when the URL is one)."""
    parts = pr_url.split("/")
    github = len(parts) == 7 and parts[:3] == ["https:", "", "github.com"] and parts[5] == "pull"
    number = int(parts[6]) if github and parts[6].isascii() and parts[6].isdigit() else None
    return {
        "provider": "github" if number is not None else "unknown",
        "kind": "pull_request",
        "id": None,
        "number": number,
        "title": None,
        "url": pr_url,
        "ref": None,
        "state": None,
    }


def artifact_json(row: ArtifactRow) -> dict[str, Any]:
    """A shared artifact as the room shows it."""
    return {
        "identity_key": row.identity_key,
        "room_id": row.room_id,
        "provider": row.provider,
        "kind": row.kind,
        "id": row.artifact_id,
        "number": row.number,
        "title": row.title,
        "url": row.url,
        "ref": row.ref,
        "state": row.state,
        "source": row.source,
        "published_by": row.published_by,
        "linked_task_ids": list(row.linked_task_ids),
        "created_at": iso(row.created_at),
        "updated_at": iso(row.updated_at),
    }


def event_json(row: RoomEventRow) -> dict[str, Any]:
    """An event as the letagents API's events route shows one."""
    return {
        "id": str(row.event_id),
        "event_type": row.event_type,
        "action": row.action,
        "object_id": row.object_id,
        "object_url": row.object_url,
        "title": row.title,
        "state": row.state,
        "actor": row.actor,
        "metadata": row.metadata,
        "linked_task_id": row.linked_task_id,
        "created_at": iso(row.created_at),
    }


def _limit(value: str | None, default: int, most: int) -> int:
    if value and value.isascii() and value.isdigit() and int(value[:6]) > 0:
        return min(int(value[:6]), most)
    return default


def _time(value: str | None, name: str) -> int | None:
    if value is None:
        return None
    try:
        return int(datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        refuse(400, f"{name} must be an ISO timestamp")


@final
@attrs.define(eq=False)
class RecordBoard:
    """Every room's shared artifacts and event record.

    Args:
        store: the room's rows.
        clock: the room's clock (epoch ms).
        accounts: who is calling.
    """

    store: RoomStore
    clock: RoomClock
    accounts: Accounts

    def _caller(self, room_id: str, creds: Credentials, *, reading: bool) -> Actor:
        self.accounts.require_room(room_id)
        return self.accounts.actor(room_id, creds, RECORD_ADMIN_TEXT, reading=reading)

    # --- events ------------------------------------------------------------------------

    def note(
        self,
        room_id: str,
        event_type: str,
        action: str,
        *,
        actor: str | None,
        object_id: str | None = None,
        object_url: str | None = None,
        title: str | None = None,
        state: str | None = None,
        task_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        """Add an event to the room's record (inside the caller's atomic write)."""
        self.store.board.add_event(
            RoomEventRow(
                room_id=room_id,
                event_type=event_type,
                action=action,
                object_id=object_id,
                object_url=object_url,
                title=title,
                state=state,
                actor=actor,
                metadata=dict(metadata or {}),
                linked_task_id=task_id,
                created_at=self.clock.now_ms(),
            )
        )

    def events(self, room_id: str, creds: Credentials, query: Mapping[str, str | None]) -> Reply:
        """``GET …/events``: a page of the room's record, oldest first after ``after``."""
        try:
            self._caller(room_id, creds, reading=True)
            match = EventFilter(
                event_type=query.get("event_type") or None,
                object_id=query.get("object_id") or None,
                actor=query.get("actor") or None,
                since=_time(query.get("since"), "since"),
                until=_time(query.get("until"), "until"),
            )
        except Refusal as refusal:
            return refusal.reply
        after = query.get("after") or ""
        size = _limit(query.get("limit"), DEFAULT_EVENTS, MAX_EVENTS)
        rows = self.store.board.events_page(
            room_id,
            after=int(after[:18]) if after.isascii() and after.isdigit() else 0,
            limit=size + 1,
            match=match,
        )
        body = {
            "room_id": room_id,
            "events": [event_json(row) for row in rows[:size]],
            "has_more": len(rows) > size,
        }
        return Reply(status=200, body=body)

    # --- artifacts ---------------------------------------------------------------------

    def artifacts(
        self, room_id: str, creds: Credentials, *, task_id: str | None, limit: str | None
    ) -> Reply:
        """``GET …/artifacts``: the room's shared artifacts (or one task's), newest first."""
        try:
            self._caller(room_id, creds, reading=True)
        except Refusal as refusal:
            return refusal.reply
        rows = self.store.board.room_rows(ArtifactRow, room_id)
        if task_id:
            rows = [row for row in rows if task_id in row.linked_task_ids]
        rows.sort(key=lambda row: (row.updated_at, row.identity_key), reverse=True)
        size = _limit(limit, DEFAULT_ARTIFACTS, MAX_ARTIFACTS_LISTED)
        body = {"room_id": room_id, "artifacts": [artifact_json(row) for row in rows[:size]]}
        return Reply(status=200, body=body)

    def _linked_tasks(self, room_id: str, body: Mapping[str, Any]) -> list[str]:
        found: list[str] = []
        named: list[object] = [body.get("task_id")]
        linked = body.get("linked_task_ids")
        if linked is not None:
            if not isinstance(linked, list):
                refuse(400, "linked_task_ids must be an array")
            if len(linked) > MAX_LINKED_TASKS:
                refuse(400, f"linked_task_ids cannot contain more than {MAX_LINKED_TASKS} entries")
            named.extend(linked)
        for value in named:
            if value is None or value == "":
                continue
            if not isinstance(value, str):
                refuse(400, "task_id must be a string")
            number = parse_task_number(value.strip())
            if number is None or self.store.get_task(room_id, number) is None:
                refuse(404, TASK_NOT_FOUND_TEXT)
            if value.strip() not in found:
                found.append(value.strip())
        return found

    def publish(self, room_id: str, creds: Credentials, body: Mapping[str, Any]) -> Reply:
        """``POST …/artifacts``: publish one artifact (again: the same one, more links)."""
        try:
            actor = self._caller(room_id, creds, reading=False)
            raw = body.get("artifact")
            if not isinstance(raw, Mapping):
                raw = {key: body[key] for key in ARTIFACT_KEYS if key in body}
            (artifact,) = parse_artifacts([raw], "artifact")
            if _identity(artifact) is None:
                refuse(
                    400, "artifact requires at least one stable identity: url, id, number, or ref"
                )
            tasks = self._linked_tasks(room_id, body)
        except Refusal as refusal:
            return refusal.reply
        with self.store.atomic():  # the artifact and its event, or nothing
            row = self.upsert(room_id, artifact, tasks, by=actor.label, source="manual")
            self.note(
                room_id,
                "artifact",
                "published",
                actor=actor.label,
                object_id=row.identity_key,
                object_url=row.url,
                title=row.title,
                state=row.state,
                task_id=tasks[0] if tasks else None,
                metadata={"provider": row.provider, "kind": row.kind},
            )
        return Reply(status=200, body={"room_id": room_id, "artifact": artifact_json(row)})

    def upsert(
        self,
        room_id: str,
        artifact: Mapping[str, Any],
        task_ids: list[str],
        *,
        by: str,
        source: str,
    ) -> ArtifactRow:
        """Store ``artifact`` (checked, with an identity), adding links to ``task_ids``."""
        key = _identity(artifact)
        assert key is not None
        now = self.clock.now_ms()
        old = self.store.board.get_row(ArtifactRow, room_id, key)
        fields = {
            "provider": artifact["provider"],
            "kind": artifact["kind"],
            "artifact_id": artifact.get("id"),
            "number": artifact.get("number"),
            "title": artifact.get("title"),
            "url": artifact.get("url"),
            "ref": artifact.get("ref"),
            "state": artifact.get("state"),
        }
        if old is None:
            row = ArtifactRow(
                room_id=room_id,
                identity_key=key,
                source=source,
                published_by=by,
                linked_task_ids=tuple(task_ids),
                created_at=now,
                updated_at=now,
                **fields,
            )
        else:
            kept = {
                name: value if value is not None else getattr(old, name)
                for name, value in fields.items()
            }
            links = (*old.linked_task_ids, *(t for t in task_ids if t not in old.linked_task_ids))
            row = attrs.evolve(old, linked_task_ids=links, updated_at=now, **kept)
        self.store.board.put_row(row)
        return row
