"""What the board's writes add in a governed room: the intent gate, artifacts, the record.

:class:`~._taskboard.TaskBoard` calls :class:`BoardHooks` at two points of
each write (creating a task, moving one, a work-lease action):

1. before anything is written, :meth:`BoardHooks.create`, :meth:`BoardHooks.patch`
   or :meth:`BoardHooks.lease` check what the governance and the record need
   (an agent's approved intent, :mod:`._intents`; a ``PATCH``'s
   ``workflow_artifacts``, :mod:`._record`) and refuse, or answer a
   :class:`Prepared`;
2. inside the write's atomic block, :meth:`BoardHooks.written` marks the
   intent used, marks ``superseded`` the open intents the change made moot
   (:func:`~._governance.supersede_reason`), stores the task's artifacts
   (with its PR link as a pull request artifact) linked to it, and adds the
   change to the room's record.

So an action refused by the gate writes nothing, and one that is written
uses its approval, links its artifacts and records itself, or none of those.
The payload an action is checked against is built from what it sends, as the
letagents API builds it (:mod:`._governance`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, final

import attrs

from ...workers._intent_payloads import (
    create_intent_payload,
    lease_intent_payload,
    mutation_intent_payload,
)
from ._governance import action_for_status
from ._leases import work_lease
from ._record import parse_artifacts, pr_artifact

if TYPE_CHECKING:
    from .._auth._accounts import Actor
    from .._storage._board_rows import BoardIntentRow
    from .._storage._rows import LeaseRow, TaskRow
    from ._intents import BoardGovernance
    from ._leases import LeaseAction
    from ._record import RecordBoard
    from ._tasks import NewTask, TaskPatch

__all__ = ["BoardHooks", "Prepared"]


@final
@attrs.frozen(kw_only=True)
class Prepared:
    """What a checked write carries into its atomic block.

    Attributes:
        intent: the approved intent it uses, if it needed one.
        artifacts: checked workflow artifacts to link to the task.
    """

    intent: BoardIntentRow | None = None
    artifacts: tuple[dict[str, Any], ...] = ()


@final
@attrs.define(eq=False)
class BoardHooks:
    """The governance and record steps of the board's writes.

    Args:
        governance: the rooms' Board Manager settings and intents.
        record: the rooms' artifacts and events.
    """

    governance: BoardGovernance
    record: RecordBoard

    def create(self, room_id: str, actor: Actor, body: Mapping[str, Any], new: NewTask) -> Prepared:
        """Check a task creation (``task_create``), or refuse."""
        payload = create_intent_payload(new.title, new.description, new.source_message_id)
        return Prepared(intent=self.governance.gate(room_id, actor, body, "task_create", payload))

    def patch(
        self, room_id: str, actor: Actor, task: TaskRow, patch: TaskPatch, body: Mapping[str, Any]
    ) -> Prepared:
        """Check a task move (a claim, close or reopen needs an intent) and its artifacts."""
        raw = body.get("workflow_artifacts")
        artifacts = () if raw is None else tuple(parse_artifacts(raw))
        action = action_for_status(patch.status)
        if action is None:
            return Prepared(artifacts=artifacts)
        payload = mutation_intent_payload(
            task.task_id,
            status=patch.status,
            assignee=patch.assignee_or_none() if patch.names_assignee else None,
            assignee_agent_key=patch.key_or_none() if patch.names_assignee_key else None,
            pr_url=patch.pr_url,
        )
        intent = self.governance.gate(room_id, actor, body, action, payload, task)
        return Prepared(intent=intent, artifacts=artifacts)

    def lease(
        self,
        room_id: str,
        actor: Actor,
        task: TaskRow,
        lease: LeaseRow,
        action: LeaseAction,
        body: Mapping[str, Any],
    ) -> Prepared:
        """Check a work-lease release or handoff (``task_override``), or refuse."""
        payload = lease_intent_payload(
            task.task_id,
            action.action,
            lease.lease_id,
            action.target_key,
            action.target_session_id,
        )
        return Prepared(
            intent=self.governance.gate(room_id, actor, body, "task_override", payload, task)
        )

    def written(
        self, prepared: Prepared, before: TaskRow | None, after: TaskRow, actor: Actor
    ) -> None:
        """Inside the write's atomic block: use the intent, link artifacts, record the change."""
        self.governance.consume(prepared.intent, after.task_id)
        room_id, task_id = after.room_id, after.task_id
        now = self.governance.clock.now_ms()
        for artifact in prepared.artifacts:
            if any(artifact.get(k) is not None for k in ("url", "id", "number", "ref")):
                self.record.upsert(room_id, artifact, [task_id], by=actor.label, source="task")
        linked = after.pr_url is not None and (before is None or before.pr_url != after.pr_url)
        if linked and after.pr_url is not None:
            self.record.upsert(
                room_id, pr_artifact(after.pr_url), [task_id], by=actor.label, source="task"
            )
            self.record.note(
                room_id,
                "pull_request",
                "linked",
                actor=actor.label,
                object_url=after.pr_url,
                title=after.title,
                task_id=task_id,
            )
        if before is not None:
            changed = (before.status, before.assignee_agent_key) != (
                after.status,
                after.assignee_agent_key,
            )
            lease = work_lease(self.governance.store.active_leases(room_id), task_id, now)
            self.governance.supersede(
                after, task_changed=changed, work_lease_id=None if lease is None else lease.lease_id
            )
        if before is None or before.status != after.status:
            self.record.note(
                room_id,
                "task",
                "created" if before is None else after.status,
                actor=actor.label,
                object_id=task_id,
                title=after.title,
                state=after.status,
                task_id=task_id,
            )
