"""The board: every room's tasks and their leases, behind authenticated calls.

:class:`TaskBoard` answers the task routes of the letagents API:

* ``GET …/tasks?status=&open=true&limit=&after=``: one page of the board
  (``open=true``: every task not ``done`` or ``cancelled``, whatever ``status``
  says), ``{room_id, tasks, has_more}``; a page is 200 tasks unless ``limit``
  asks for fewer (500 at most), after the task ``after`` names;
* ``POST …/tasks``: a new task, ``proposed``, answered as the task (201);
* ``GET …/tasks/{t}`` and ``PATCH …/tasks/{t}``: one task, and a change to it
  under the rules of :mod:`._tasks`; a claim takes the task's work lease;
* ``POST …/tasks/{t}/lease-action``: ``release`` or ``handoff`` of the task's
  work lease (:mod:`._leases`).

A task is answered with its active leases (``active_leases``). Callers are
:class:`~.._auth._accounts.Actor` values: agents by their session credentials, or the
room's admins as people. Each call reads, decides with the pure rules and
writes with no ``await`` in between, so it is atomic (see :mod:`.._room`).

Each write first passes the board's :class:`~._hooks.BoardHooks` (in a
governed room an agent's approved board intent; a move's workflow artifacts),
and the atomic write then also uses the intent and adds the change to the
room's record (:mod:`._hooks`).

It also keeps the two lease facts the rest of the room needs: which leases a
new registration adopts (§7.3) and which work leases a session holds (§7.5).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, final

import attrs

from .._auth._accounts import Actor
from .._messaging._citations import check_source
from .._storage._rows import LeaseRow, TaskRow
from .._wire import Credentials, Refusal, Reply, refuse
from ._leases import (
    NOT_HOLDER_TEXT,
    LeaseAction,
    adopted,
    adopts,
    check_lease,
    choose_target,
    ended_lease,
    lease_json,
    new_work_lease,
    parse_lease_action,
    work_lease,
    work_task_ids,
)
from ._tasks import (
    ADMIN_STATUSES,
    ADMIN_TEXT,
    BOARD_REVIEW_CODE,
    BOARD_REVIEW_TEXT,
    DEFAULT_TASK_PAGE,
    LEASE_RECOVERY_STATUSES,
    MAX_TASK_PAGE,
    OPEN_STATUSES,
    REVIEW_DECISION_CODE,
    REVIEW_DECISION_TEXT,
    TASK_NOT_FOUND_TEXT,
    VALID_TRANSITIONS,
    TaskPatch,
    classify,
    coordinate,
    holds,
    invalid_transition_text,
    ownership,
    parse_new_task,
    parse_patch,
    parse_task_number,
    resolve_assignment,
    task_json,
    text_edit,
)

if TYPE_CHECKING:
    from .._auth._accounts import Accounts
    from .._clock import RoomClock
    from .._storage._rows import SessionRow
    from .._storage._store import RoomStore
    from ._hooks import BoardHooks

__all__ = ["REVIEW_WORKER_TEXT", "TaskBoard"]

# The letagents API's 403 for a person asking for changes on a task in review.
REVIEW_WORKER_TEXT = "Registered review worker session is required to request changes."
REVIEW_WORKER_CODE = "coordination_review_worker_required"


def _page_size(limit: str | None) -> int:
    """The page size asked for: a positive integer, at most 500; else 200."""
    if limit and limit.isascii() and limit.isdigit() and int(limit[:6]) > 0:
        return min(int(limit[:6]), MAX_TASK_PAGE)
    return DEFAULT_TASK_PAGE


@final
@attrs.define(eq=False)
class TaskBoard:
    """Every room's tasks and leases.

    Args:
        store: the room's rows.
        clock: the room's clock (epoch ms).
        accounts: who is calling.
        reachable: whether a session can be reached in its room now (a held
            process stream or a delivery connection): a handoff needs its target
            reachable.
        hooks: the governance and record steps of each write (:mod:`._hooks`).
    """

    store: RoomStore
    clock: RoomClock
    accounts: Accounts
    reachable: Callable[[str], bool]
    hooks: BoardHooks
    # Told of each task whose status the board changed, right after it is written.
    status_changed: list[Callable[[TaskRow], None]] = attrs.field(init=False, factory=list)

    # --- reads -------------------------------------------------------------------------

    def _task(self, room_id: str, task_id: str) -> TaskRow:
        number = parse_task_number(task_id)
        task = None if number is None else self.store.get_task(room_id, number)
        if task is None:
            refuse(404, TASK_NOT_FOUND_TEXT)
        return task

    def _caller_and_task(
        self, room_id: str, task_id: str, creds: Credentials, *, reading: bool = False
    ) -> tuple[Actor, TaskRow]:
        """Who calls, and the task the route names; or refuse (404 room, 401/403, 404 task)."""
        self.accounts.require_room(room_id)
        actor = self.accounts.actor(room_id, creds, ADMIN_TEXT, reading=reading)
        return actor, self._task(room_id, task_id)

    def _leases_of(self, room_id: str, now: int) -> dict[str, list[LeaseRow]]:
        found: dict[str, list[LeaseRow]] = {}
        for lease in self.store.active_leases(room_id):
            if lease.active(now):
                found.setdefault(lease.task_id, []).append(lease)
        return found

    def _json(self, task: TaskRow, leases: Mapping[str, list[LeaseRow]]) -> dict[str, Any]:
        return task_json(task, (lease_json(x) for x in leases.get(task.task_id, ())))

    def board(
        self,
        room_id: str,
        creds: Credentials,
        *,
        status: str | None,
        open_only: bool,
        limit: str | None,
        after: str | None,
    ) -> Reply:
        """``GET …/tasks``: one page of the board."""
        try:
            self.accounts.require_room(room_id)
            self.accounts.actor(room_id, creds, ADMIN_TEXT, reading=True)
        except Refusal as refusal:
            return refusal.reply
        size = _page_size(limit)
        statuses = OPEN_STATUSES if open_only else ((status,) if status else None)
        rows = self.store.tasks_page(
            room_id,
            after=(parse_task_number(after) or 0) if after else 0,
            limit=size + 1,
            statuses=statuses,
        )
        leases = self._leases_of(room_id, self.clock.now_ms())
        tasks = [self._json(task, leases) for task in rows[:size]]
        return Reply(
            status=200, body={"room_id": room_id, "tasks": tasks, "has_more": len(rows) > size}
        )

    def get(self, room_id: str, task_id: str, creds: Credentials) -> Reply:
        """``GET …/tasks/{t}``: one task, with its active leases."""
        try:
            _, task = self._caller_and_task(room_id, task_id, creds, reading=True)
        except Refusal as refusal:
            return refusal.reply
        return Reply(
            status=200, body=self._json(task, self._leases_of(room_id, self.clock.now_ms()))
        )

    # --- writes ------------------------------------------------------------------------

    def create(self, room_id: str, creds: Credentials, body: Mapping[str, Any]) -> Reply:
        """``POST …/tasks``: a new ``proposed`` task, created by the caller (201, the task)."""
        try:
            self.accounts.require_room(room_id)
            actor = self.accounts.actor(room_id, creds, ADMIN_TEXT)
            new = parse_new_task(body, actor.label)
            check_source(self.store, room_id, new.source_message_id)
            prepared = self.hooks.create(room_id, actor, body, new)
        except Refusal as refusal:
            return refusal.reply
        now = self.clock.now_ms()
        with self.store.atomic():  # the task and what the hooks add, or nothing
            task = self.store.add_task(
                TaskRow(
                    room_id=room_id,
                    title=new.title,
                    description=new.description,
                    created_by=actor.label,
                    source_message_id=new.source_message_id,
                    created_at=now,
                    updated_at=now,
                )
            )
            self.hooks.written(prepared, None, task, actor)
        return Reply(status=201, body=task_json(task))

    def patch(
        self, room_id: str, task_id: str, creds: Credentials, body: Mapping[str, Any]
    ) -> Reply:
        """``PATCH …/tasks/{t}``: change a task under the board's rules (:mod:`._tasks`)."""
        now = self.clock.now_ms()
        try:
            actor, task = self._caller_and_task(room_id, task_id, creds)
            patch = parse_patch(body)
            claims_self = actor.agent_key and patch.assignee_or_none() == actor.label
            if claims_self and not patch.names_assignee_key:
                patch = attrs.evolve(patch, assignee_agent_key=actor.agent_key)
            leases = self._leases_of(room_id, now).get(task.task_id, [])
            prepared = self.hooks.patch(room_id, actor, task, patch, body)
            approved = prepared.intent is not None
            take_lease = self._check_patch(task, patch, actor, leases, approved=approved)
        except Refusal as refusal:
            return refusal.reply
        status, assignee, key = resolve_assignment(task, patch)
        updated = attrs.evolve(
            task,
            title=patch.title or task.title,
            description=task.description if patch.description is None else patch.description,
            status=status,
            assignee=assignee,
            assignee_agent_key=key,
            pr_url=task.pr_url if patch.pr_url is None else patch.pr_url,
            updated_at=now,
        )
        with self.store.atomic():  # the task and its lease, or nothing
            self.store.put_task(updated)
            if take_lease:
                self.store.put_lease(new_work_lease(updated, actor, now=now, pr_url=patch.pr_url))
            elif patch.pr_url is not None:
                for lease in leases:
                    if lease.kind == "work" and holds(lease, actor):
                        self.store.put_lease(
                            attrs.evolve(lease, pr_url=patch.pr_url, updated_at=now)
                        )
            self.hooks.written(prepared, task, updated, actor)
        self._moved(task, updated)
        return Reply(status=200, body=self._json(updated, self._leases_of(room_id, now)))

    def _moved(self, before: TaskRow, after: TaskRow) -> None:
        if after.status != before.status:
            for listener in self.status_changed:
                listener(after)

    def _check_patch(
        self,
        task: TaskRow,
        patch: TaskPatch,
        actor: Actor,
        leases: list[LeaseRow],
        *,
        approved: bool = False,
    ) -> bool:
        """Refuse a patch the rules refuse; whether it takes a new work lease. An agent's
        move to an admin status needs an approved board intent (``approved``)."""
        if patch.status in ADMIN_STATUSES and not actor.person and not approved:
            refuse(403, ADMIN_TEXT)
        review_request = patch.status == "blocked" and task.status == "in_review"
        take_lease = False
        if review_request and actor.person:
            refuse(403, REVIEW_WORKER_TEXT, code=REVIEW_WORKER_CODE)
        if not actor.person:
            changes_more = patch.names_assignee or patch.names_assignee_key or patch.pr_url
            if review_request and changes_more:
                refuse(409, REVIEW_DECISION_TEXT, code=REVIEW_DECISION_CODE)
            denied = None if review_request else ownership(task, patch, actor)
            if denied is not None:
                refuse(409, denied)
        reviewed = any(lease.kind == "review" for lease in leases)
        if patch.status == "merged" and task.status == "in_review" and not reviewed:
            refuse(409, BOARD_REVIEW_TEXT, code=BOARD_REVIEW_CODE)
        mutation = None if actor.person else classify(patch, review_request=review_request)
        if mutation is not None:
            decision = coordinate(task, mutation, actor, leases)
            if not decision.allowed:
                refuse(409, decision.reason or "", code=decision.code)
            take_lease = decision.take_lease
        text = None if actor.person else text_edit(task, patch, actor, leases)
        if text is not None and not text.allowed:
            refuse(409, text.reason or "", code=text.code)
        take_lease = take_lease or (text is not None and text.take_lease)
        if patch.status is not None and patch.status not in VALID_TRANSITIONS.get(task.status, ()):
            refuse(400, invalid_transition_text(task.status, patch.status))
        return take_lease

    def lease_action(
        self, room_id: str, task_id: str, creds: Credentials, body: Mapping[str, Any]
    ) -> Reply:
        """``POST …/tasks/{t}/lease-action``: release or hand off the task's work lease."""
        now = self.clock.now_ms()
        try:
            actor, task = self._caller_and_task(room_id, task_id, creds)
            action = parse_lease_action(body)
            active = work_lease(self.store.active_leases(room_id), task.task_id, now)
            lease = check_lease(active, action.lease_id)
            holder = holds(lease, actor)
            if not holder and not actor.person:
                refuse(403, NOT_HOLDER_TEXT)
            target = None
            if action.action == "handoff":
                target = choose_target(
                    action, task, self.store.room_sessions(room_id), self.reachable
                )
            prepared = self.hooks.lease(room_id, actor, task, lease, action, body)
        except Refusal as refusal:
            return refusal.reply
        released, updated, new_lease = self._act(task, lease, action, actor, target, now)
        with self.store.atomic():  # the old lease, the task and the new lease, or nothing
            self.store.put_lease(released)
            self.store.put_task(updated)
            if new_lease is not None:
                self.store.put_lease(new_lease)
            self.hooks.written(prepared, task, updated, actor)
        self._moved(task, updated)
        body_out = {
            "room_id": room_id,
            "action": action.action,
            "task": self._json(updated, self._leases_of(room_id, now)),
            "released_lease": lease_json(released),
            "new_lease": None if new_lease is None else lease_json(new_lease),
        }
        return Reply(status=200, body=body_out)

    @staticmethod
    def _act(
        task: TaskRow,
        lease: LeaseRow,
        action: LeaseAction,
        actor: Actor,
        target: SessionRow | None,
        now: int,
    ) -> tuple[LeaseRow, TaskRow, LeaseRow | None]:
        """The released lease, the task after the action, and the target's new lease."""
        verb = "handed off" if target is not None else "released"
        reason = action.reason or f"Lease {lease.lease_id} {verb} for {task.task_id}."
        released = ended_lease(lease, holder=holds(lease, actor), reason=reason, now=now)
        if target is None:
            if task.status not in LEASE_RECOVERY_STATUSES:
                return released, task, None
            back = attrs.evolve(
                task, status="accepted", assignee=None, assignee_agent_key=None, updated_at=now
            )
            return released, back, None
        label = target.actor_label or target.display_name
        updated = attrs.evolve(
            task,
            status="assigned",
            assignee=label,
            assignee_agent_key=target.agent_key,
            updated_at=now,
        )
        receiver = Actor(label=label, account_id=target.owner_account_id, session=target)
        new_lease = attrs.evolve(
            new_work_lease(updated, receiver, now=now, pr_url=lease.pr_url or task.pr_url),
            created_by=actor.label,
        )
        return released, updated, new_lease

    # --- leases for the rest of the room ------------------------------------------------

    def adopt(
        self, row: SessionRow, before: SessionRow | None, *, exited: Callable[[SessionRow], bool]
    ) -> list[LeaseRow]:
        """Move to the new session ``row`` the active leases it adopts (``_leases.adopts``).

        Args:
            row: the session just registered (stored).
            before: the row it was, when a durable worker's row was kept.
            exited: whether a holder's process has exited, seen by the registrant.
        """
        now = self.clock.now_ms()
        moved: list[LeaseRow] = []
        live_keys = {s.agent_key for s in self.store.room_sessions(row.room_id) if s.live}
        for lease in self.store.active_leases(row.room_id):
            if not lease.active(now) or lease.agent_session_id is None:
                continue
            holder = (
                before
                if before is not None and lease.agent_session_id == before.session_id
                else self.store.get_session(lease.agent_session_id)
            )
            if holder is None or not adopts(lease, holder, row, live_keys=live_keys, exited=exited):
                continue
            lease = adopted(lease, row, now=now)
            self.store.put_lease(lease)
            moved.append(lease)
        return moved

    def work_task_ids(self, session_id: str) -> list[str]:
        """Task ids of the active work leases a session holds, oldest lease first."""
        row = self.store.get_session(session_id)
        if row is None:
            return []
        leases = self.store.active_leases(row.room_id)
        return work_task_ids(leases, session_id, self.clock.now_ms())
