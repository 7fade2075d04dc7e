"""Tasks and leases (minimal, PROTOCOL.md §7.3, §7.5): request checks and lease rules.

A task is a title in a room; a lease is a session's hold on a task, of a kind
(``work`` by default), active until released or expired. One active lease per
(task, kind): taking one another session holds answers 409, taking one again
returns it. The liveness notices name a session's active ``work`` leases
(:func:`work_task_ids`). A registration adopts leases its owner's ended
sessions left (:func:`adopts`, §7.3): the same agent instance always does;
once the old process has exited, the same agent key does, and so does a
same-named non-durable holder's ``work`` lease whose agent key has no live
session left. ``room_admin`` ends pass nothing on.

The checks and rules are pure functions of rows, bodies and the time; the
:class:`TaskBoard` authenticates the calls, applies them and stores the rows.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, final

import attrs

from .._protocol import MAX_MESSAGE_CHARS
from ..workers._names import is_durable_worker_id, name_key
from ._store import END_REASON_ROOM_ADMIN, LeaseRow, TaskRow
from ._wire import Credentials, Refusal, Reply, iso, refuse

if TYPE_CHECKING:
    from ._accounts import Accounts
    from ._clock import RoomClock
    from ._store import RoomStore, SessionRow

__all__ = [
    "ALREADY_LEASED_CODE",
    "ALREADY_LEASED_TEXT",
    "BAD_LEASE_KIND_TEXT",
    "BAD_TTL_TEXT",
    "LEASE_NOT_FOUND_TEXT",
    "NOT_LEASE_HOLDER_TEXT",
    "TASK_NOT_FOUND_TEXT",
    "TITLE_REQUIRED_TEXT",
    "TaskBoard",
    "active_lease",
    "adopted",
    "adopts",
    "lease_json",
    "new_lease",
    "new_task",
    "parse_lease_request",
    "task_json",
    "task_title",
    "work_task_ids",
]

# Texts of our own (upstream's were not read, PROTOCOL.md §9.7).
TITLE_REQUIRED_TEXT: Final = "title is required"
TASK_NOT_FOUND_TEXT: Final = "Task not found"
LEASE_NOT_FOUND_TEXT: Final = "Lease not found"
BAD_LEASE_KIND_TEXT: Final = "kind must be a non-empty string"
BAD_TTL_TEXT: Final = "ttl_ms must be a positive integer"
NOT_LEASE_HOLDER_TEXT: Final = "Only the lease holder can release it."
ALREADY_LEASED_TEXT: Final = "Task is already leased."
ALREADY_LEASED_CODE: Final = "task_already_leased"
# A lease kind is a short label, not a document.
_MAX_KIND_CHARS: Final = 64
# About 35 years: a ttl beyond this is a mistake, and bounded it stays an integer.
_MAX_TTL_MS: Final = 2**40
# The kind of lease liveness notices are about, and the default one.
WORK: Final = "work"


def task_title(body: Mapping[str, Any]) -> str:
    """The title a task creation carries, or refuse 400."""
    title = body.get("title")
    if not isinstance(title, str) or not title.strip() or len(title) > MAX_MESSAGE_CHARS:
        refuse(400, TITLE_REQUIRED_TEXT)
    return title


def parse_lease_request(body: Mapping[str, Any]) -> tuple[str, int | None]:
    """The kind (``work`` when absent) and optional ``ttl_ms`` of a lease request, or refuse 400."""
    kind = body.get("kind", WORK)
    if not isinstance(kind, str) or not kind or len(kind) > _MAX_KIND_CHARS:
        refuse(400, BAD_LEASE_KIND_TEXT)
    ttl = body.get("ttl_ms")
    if ttl is not None and (
        isinstance(ttl, bool) or not isinstance(ttl, int) or not 0 < ttl <= _MAX_TTL_MS
    ):
        refuse(400, BAD_TTL_TEXT)
    return kind, ttl


def new_task(room_id: str, title: str, *, session_id: str, now: int) -> TaskRow:
    """A new task row, created by ``session_id``."""
    return TaskRow(
        task_id="task_" + uuid.uuid4().hex,
        room_id=room_id,
        title=title,
        created_at=now,
        created_by_session_id=session_id,
    )


def new_lease(
    task: TaskRow, kind: str, *, session_id: str, now: int, ttl_ms: int | None
) -> LeaseRow:
    """A new lease (epoch 1) on ``task`` for ``session_id``, expiring after ``ttl_ms`` if given."""
    return LeaseRow(
        lease_id="lease_" + uuid.uuid4().hex,
        room_id=task.room_id,
        task_id=task.task_id,
        kind=kind,
        session_id=session_id,
        epoch=1,
        created_at=now,
        expires_at=None if ttl_ms is None else now + ttl_ms,
    )


def active_lease(leases: Iterable[LeaseRow], task_id: str, kind: str, now: int) -> LeaseRow | None:
    """The active lease of that kind on the task, if any (there is at most one)."""
    for lease in leases:
        if lease.task_id == task_id and lease.kind == kind and lease.active(now):
            return lease
    return None


def work_task_ids(leases: Iterable[LeaseRow], session_id: str, now: int) -> list[str]:
    """Task ids of the active work leases a session holds, oldest lease first."""
    held = [
        lease
        for lease in leases
        if lease.session_id == session_id and lease.kind == WORK and lease.active(now)
    ]
    held.sort(key=lambda lease: (lease.created_at, lease.lease_id))
    return [lease.task_id for lease in held]


@final
@attrs.define(eq=False)
class TaskBoard:
    """Every room's tasks and leases, behind authenticated calls.

    Args:
        store: the room's rows.
        clock: the room's clock (epoch ms).
        accounts: authenticates the calls.
    """

    store: RoomStore
    clock: RoomClock
    accounts: Accounts

    def create(self, room_id: str, creds: Credentials, body: Mapping[str, Any]) -> Reply:
        """Create a task (``{"title": ...}``)."""
        try:
            self.accounts.require_room(room_id)
            row = self.accounts.authenticate(room_id, creds, worker_only=False)
            title = task_title(body)
        except Refusal as refusal:
            return refusal.reply
        task = new_task(room_id, title, session_id=row.session_id, now=self.clock.now_ms())
        self.store.put_task(task)
        return Reply(status=201, body=task_json(task))

    def take(
        self, room_id: str, task_id: str, creds: Credentials, body: Mapping[str, Any]
    ) -> Reply:
        """Take a lease on a task, or get back the one the session holds; 409 if another does."""
        try:
            self.accounts.require_room(room_id)
            row = self.accounts.authenticate(room_id, creds)
            task = self.store.get_task(task_id)
            if task is None or task.room_id != room_id:
                refuse(404, TASK_NOT_FOUND_TEXT)
            kind, ttl = parse_lease_request(body)
        except Refusal as refusal:
            return refusal.reply
        now = self.clock.now_ms()
        held = active_lease(self.store.room_leases(room_id), task_id, kind, now)
        if held is not None and held.session_id == row.session_id:
            return Reply(status=200, body=lease_json(held))
        if held is not None:
            return Reply(
                status=409, body={"error": ALREADY_LEASED_TEXT, "code": ALREADY_LEASED_CODE}
            )
        lease = new_lease(task, kind, session_id=row.session_id, now=now, ttl_ms=ttl)
        self.store.put_lease(lease)
        return Reply(status=201, body=lease_json(lease))

    def release(self, room_id: str, lease_id: str, creds: Credentials) -> Reply:
        """The holder gives a lease back (again: no change)."""
        try:
            self.accounts.require_room(room_id)
            row = self.accounts.authenticate(room_id, creds)
            lease = self.store.get_lease(lease_id)
            if lease is None or lease.room_id != room_id:
                refuse(404, LEASE_NOT_FOUND_TEXT)
            if lease.session_id != row.session_id:
                refuse(403, NOT_LEASE_HOLDER_TEXT)
        except Refusal as refusal:
            return refusal.reply
        if lease.released_at is None:
            lease = attrs.evolve(lease, released_at=self.clock.now_ms())
            self.store.put_lease(lease)
        return Reply(status=200, body=lease_json(lease))

    def adopt(
        self, row: SessionRow, before: SessionRow | None, *, exited: Callable[[SessionRow], bool]
    ) -> list[LeaseRow]:
        """Move to the new session ``row`` the active leases it adopts (:func:`adopts`).

        Args:
            row: the session just registered (stored).
            before: the row it was, when a durable worker's row was kept.
            exited: whether a holder's process has exited, seen by the registrant.
        """
        now = self.clock.now_ms()
        adopted_leases: list[LeaseRow] = []
        live_keys = {s.agent_key for s in self.store.room_sessions(row.room_id) if s.live}
        for lease in self.store.room_leases(row.room_id):
            if not lease.active(now):
                continue
            holder = (
                before
                if before is not None and lease.session_id == before.session_id
                else self.store.get_session(lease.session_id)
            )
            if holder is None or not adopts(lease, holder, row, live_keys=live_keys, exited=exited):
                continue
            moved = adopted(lease, row.session_id)
            self.store.put_lease(moved)
            adopted_leases.append(moved)
        return adopted_leases

    def work_task_ids(self, session_id: str) -> list[str]:
        """Task ids of the active work leases a session holds, oldest lease first."""
        row = self.store.get_session(session_id)
        if row is None:
            return []
        return work_task_ids(self.store.room_leases(row.room_id), session_id, self.clock.now_ms())


def task_json(task: TaskRow) -> dict[str, Any]:
    """The JSON of a created task."""
    return {
        "task_id": task.task_id,
        "room_id": task.room_id,
        "title": task.title,
        "created_at": iso(task.created_at),
    }


def lease_json(lease: LeaseRow) -> dict[str, Any]:
    """The JSON of a lease."""
    return {
        "lease_id": lease.lease_id,
        "room_id": lease.room_id,
        "task_id": lease.task_id,
        "kind": lease.kind,
        "session_id": lease.session_id,
        "epoch": lease.epoch,
        "created_at": iso(lease.created_at),
        "expires_at": iso(lease.expires_at),
        "released_at": iso(lease.released_at),
    }


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
        lease.kind == "work"
        and not is_durable_worker_id(holder.agent_instance_id)
        and name_key(holder.display_name) == name_key(row.display_name)
        and holder.agent_key not in live_keys
    )


def adopted(lease: LeaseRow, session_id: str) -> LeaseRow:
    """The lease moved to ``session_id``; a work lease's epoch moves on."""
    return attrs.evolve(
        lease,
        session_id=session_id,
        epoch=lease.epoch + 1 if lease.kind == "work" else lease.epoch,
    )
