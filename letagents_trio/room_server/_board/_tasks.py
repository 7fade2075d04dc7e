"""The board's rules: task statuses and their transitions, who may move a task, and when.

Pure functions of the task, the request body, the caller and the task's active
leases (no I/O, no clock): :class:`~._taskboard.TaskBoard` reads the rows,
calls these in the letagents API's order, and writes what they decide. A
refusal is raised (:func:`~.._wire.refuse`) from the check that makes it.

Statuses (:data:`TASK_STATUSES`) and the moves allowed between them
(:data:`VALID_TRANSITIONS`) are the letagents API's; a task starts
``proposed``, an admin accepts it, an agent claims it (``assigned``), works it
(``in_progress``, ``blocked``), submits it (``in_review``), and an admin closes
it (``merged``, ``done``, or ``cancelled``). A move outside the table is 400
``Invalid transition: <from> → <to>. Allowed: …``, whatever the status named.

Who may move a task (a ``PATCH``), in the order the checks run:

1. ``accepted``, ``cancelled``, ``merged`` and ``done`` are the room's admins'
   (:data:`ADMIN_STATUSES`). In the reference room admins act as people (a
   person's bearer, no session credentials), never through an agent nor an
   owner token (every agent of the owner holds it), unless the agent carries
   a board intent approved for that move (:mod:`._hooks`).
2. An agent's request to move a task from ``in_review`` back to ``blocked`` (a
   reviewer asking for changes) may change nothing else.
3. Ownership (:func:`ownership`): an agent claims only for itself, never
   reassigns a claimed task, and only the assigned agent moves it further.
4. ``in_review`` → ``merged`` needs a board reviewer: an active review lease
   on the task (``…/review-lease-action``, :mod:`._reviews`).
5. The work lease (:func:`classify`, :func:`coordinate`): claiming, working,
   submitting and linking a PR are done by the holder of the task's active
   work lease. A claim of an ``accepted`` task takes a new work lease; so does
   the assigned agent acting on a task whose lease is gone.
6. The transition table.

People (admins) pass 2-5: those are the rules of agents.

Who may change a task's text (``title``, ``description``; :func:`text_edit`):
the letagents API checks only its form (nonblank, 512 and 100,000 characters)
and leaves the rest to its room's coordination; ours gives the text to whoever
the work is: while an agent holds the task (``assigned`` to ``in_review``) the
holder of its work lease (the assignee whose lease is gone takes a new one,
as for a status move), before and after that its creator; and always the
room's admins, as people. Anyone else's edit is 409: the text of a task is its
instructions, and another agent must not rewrite the work it gave someone.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, Final, final

import attrs

from .._storage._rows import task_id_of
from .._wire import MAX_ROUTING_ID_CHARS, iso, refuse

if TYPE_CHECKING:
    from .._auth._accounts import Actor
    from .._storage._rows import LeaseRow, TaskRow

__all__ = [
    "ADMIN_STATUSES",
    "ADMIN_TEXT",
    "BOARD_REVIEW_CODE",
    "BOARD_REVIEW_TEXT",
    "DEFAULT_TASK_PAGE",
    "LEASE_RECOVERY_STATUSES",
    "MAX_DESCRIPTION_CHARS",
    "MAX_TASK_PAGE",
    "MAX_TITLE_CHARS",
    "OPEN_STATUSES",
    "REVIEW_DECISION_CODE",
    "REVIEW_DECISION_TEXT",
    "TASK_NOT_FOUND_TEXT",
    "TASK_STATUSES",
    "TEXT_NOT_YOURS_CODE",
    "TEXT_NOT_YOURS_TEXT",
    "TITLE_AND_CREATOR_TEXT",
    "UPDATE_FAILED_TEXT",
    "VALID_TRANSITIONS",
    "Coordination",
    "Mutation",
    "TaskPatch",
    "classify",
    "coordinate",
    "invalid_transition_text",
    "ownership",
    "parse_new_task",
    "parse_patch",
    "parse_task_number",
    "resolve_assignment",
    "task_json",
    "text_edit",
]

# The letagents API's statuses, in board order. (The MCP tools' schema lists them
# too, in workers/_room_work.py, which the room may not import: a test keeps the
# two lists equal.)
TASK_STATUSES: Final = (
    "proposed",
    "accepted",
    "assigned",
    "in_progress",
    "blocked",
    "in_review",
    "merged",
    "done",
    "cancelled",
)
# Where each status may go next.
VALID_TRANSITIONS: Final[Mapping[str, tuple[str, ...]]] = {
    "proposed": ("accepted", "cancelled"),
    "accepted": ("assigned", "cancelled"),
    "assigned": ("in_progress", "in_review", "cancelled"),
    "in_progress": ("blocked", "in_review", "done", "cancelled"),
    "blocked": ("in_progress", "in_review", "cancelled"),
    "in_review": ("merged", "in_progress", "blocked", "done", "cancelled"),
    "merged": ("done", "accepted"),
    "done": ("accepted",),
    "cancelled": ("accepted",),
}
# Statuses only the room's admins may set.
ADMIN_STATUSES: Final = frozenset({"accepted", "cancelled", "merged", "done"})
# Statuses an agent owns once it claimed the task.
AGENT_OWNED_STATUSES: Final = frozenset({"assigned", "in_progress", "blocked", "in_review"})
# While a task is in one of these, its work lease can be released or handed off,
# and a released task goes back to ``accepted``.
LEASE_RECOVERY_STATUSES: Final = AGENT_OWNED_STATUSES
# What an open board shows: everything not closed.
OPEN_STATUSES: Final = tuple(s for s in TASK_STATUSES if s not in ("done", "cancelled"))
# A board page: the letagents API's default and largest list sizes.
DEFAULT_TASK_PAGE: Final = 200
MAX_TASK_PAGE: Final = 500
# The letagents API's bounds on a task's text.
MAX_TITLE_CHARS: Final = 512
MAX_DESCRIPTION_CHARS: Final = 100_000

# The letagents API's texts.
TASK_NOT_FOUND_TEXT: Final = "Task not found"
TITLE_AND_CREATOR_TEXT: Final = "title and created_by are required"
UPDATE_FAILED_TEXT: Final = "Task update could not be completed."
REVIEW_DECISION_TEXT: Final = (
    "Requesting changes can only update task status. Work metadata requires the active work lease."
)
REVIEW_DECISION_CODE: Final = "coordination_review_decision_only"
BOARD_REVIEW_TEXT: Final = (
    "Assign a board reviewer separate from the active work holder before marking this task merged."
)
BOARD_REVIEW_CODE: Final = "coordination_board_review_required"
# Ours: the reference room's admins act as people (its 403 for anyone else).
ADMIN_TEXT: Final = (
    "Only the room's admins, signed in as people (a person's bearer without agent session"
    " credentials), can accept, cancel, merge or close tasks."
)
# Ours: a source message id longer than any id is not one.
_SOURCE_TEXT: Final = "source_message_id must be a message id"
# Ours: an agent's edit of a task's text it does not hold (see the module docstring).
TEXT_NOT_YOURS_TEXT: Final = (
    "Only the task's creator (while no agent holds it), the holder of its work lease,"
    " or the room's admins as people can change its title and description."
)
TEXT_NOT_YOURS_CODE: Final = "task_text_not_yours"


def parse_task_number(task_id: str) -> int | None:
    """The number in ``task_<n>``, or ``None`` for anything else."""
    prefix, _, digits = task_id.partition("_")
    if prefix != "task" or not (digits.isascii() and digits.isdigit()) or len(digits) > 12:
        return None
    number = int(digits)
    return number if number > 0 else None


def invalid_transition_text(current: str, wanted: str) -> str:
    """The letagents API's 400 for a move the table refuses."""
    allowed = ", ".join(VALID_TRANSITIONS.get(current, ())) or "none"
    return f"Invalid transition: {current} → {wanted}. Allowed: {allowed}"


def _title(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        refuse(400, "title must be a nonblank string")
    if len(value) > MAX_TITLE_CHARS:
        refuse(400, f"title must be at most {MAX_TITLE_CHARS} characters")
    _no_nul("title", value)
    return value.strip()


def _description(value: object) -> str:
    if not isinstance(value, str):
        refuse(400, "description must be a string")
    if len(value) > MAX_DESCRIPTION_CHARS:
        refuse(400, f"description must be at most {MAX_DESCRIPTION_CHARS} characters")
    _no_nul("description", value)
    return value


def _no_nul(name: str, value: str) -> None:
    """Ours: a NUL is no text (the letagents API's PostgreSQL refuses it in any text
    column), and cut at it by C readers and terminals, it would hide what follows."""
    if "\x00" in value:
        refuse(400, f"{name} must not contain NUL characters")


@final
@attrs.frozen(kw_only=True)
class NewTask:
    """A checked task creation."""

    title: str
    description: str | None
    source_message_id: str | None


def parse_new_task(body: Mapping[str, Any], created_by: str | None) -> NewTask:
    """Check a ``POST …/tasks`` body (the creator is the caller's label), or refuse 400."""
    title = body.get("title")
    if not title or not created_by:
        refuse(400, TITLE_AND_CREATOR_TEXT)
    description = body.get("description")
    source = body.get("source_message_id")
    if source is not None and (not isinstance(source, str) or len(source) > MAX_ROUTING_ID_CHARS):
        refuse(400, _SOURCE_TEXT)
    return NewTask(
        title=_title(title),
        description=None if description is None else _description(description),
        source_message_id=source or None,
    )


_UNSET: Final = object()


@final
@attrs.frozen(kw_only=True)
class TaskPatch:
    """A checked ``PATCH`` body: only what it names changes (``None`` clears an assignee)."""

    title: str | None = None
    description: str | None = None
    status: str | None = None
    assignee: object = _UNSET
    assignee_agent_key: object = _UNSET
    pr_url: str | None = None

    @property
    def names_assignee(self) -> bool:
        """Whether the patch sets the assignee (possibly to nobody)."""
        return self.assignee is not _UNSET

    @property
    def names_assignee_key(self) -> bool:
        """Whether the patch sets the assignee's agent key (possibly to none)."""
        return self.assignee_agent_key is not _UNSET

    def assignee_or_none(self) -> str | None:
        """The assignee the patch names (``None`` when it names none, or nobody)."""
        return self.assignee if isinstance(self.assignee, str) else None

    def key_or_none(self) -> str | None:
        """The agent key the patch names (``None`` when it names none, or none)."""
        return self.assignee_agent_key if isinstance(self.assignee_agent_key, str) else None


def _person_field(body: Mapping[str, Any], key: str) -> object:
    if key not in body:
        return _UNSET
    value = body[key]
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        refuse(400, UPDATE_FAILED_TEXT)
    return value.strip() or None


def _text_or_none(body: Mapping[str, Any], key: str) -> str | None:
    """A field that is a string or absent (``null``: absent); anything else refused 400."""
    value = body.get(key)
    if value is not None and not isinstance(value, str):
        refuse(400, UPDATE_FAILED_TEXT)
    return value


def parse_patch(body: Mapping[str, Any]) -> TaskPatch:
    """Check a ``PATCH …/tasks/{t}`` body, or refuse 400."""
    return TaskPatch(
        title=_title(body["title"]) if "title" in body else None,
        description=_description(body["description"]) if "description" in body else None,
        status=_text_or_none(body, "status"),
        assignee=_person_field(body, "assignee"),
        assignee_agent_key=_person_field(body, "assignee_agent_key"),
        pr_url=_text_or_none(body, "pr_url"),
    )


def resolve_assignment(task: TaskRow, patch: TaskPatch) -> tuple[str, str | None, str | None]:
    """The task's ``(status, assignee, assignee_agent_key)`` after ``patch``.

    Naming an assignee without a key clears the key; naming only a key keeps
    the assignee.
    """
    status = patch.status or task.status
    if patch.names_assignee:
        key = patch.key_or_none() if patch.names_assignee_key else None
        return status, patch.assignee_or_none(), key
    if patch.names_assignee_key:
        return status, task.assignee, patch.key_or_none()
    return status, task.assignee, task.assignee_agent_key


def ownership(task: TaskRow, patch: TaskPatch, actor: Actor) -> str | None:
    """The letagents API's ownership rule for an agent's move; the refusal (409) or ``None``."""
    if not (
        (patch.status is not None and patch.status in AGENT_OWNED_STATUSES)
        or patch.names_assignee
        or patch.names_assignee_key
    ):
        return None
    if patch.status == "assigned":
        if patch.assignee_or_none() != actor.label or patch.key_or_none() != actor.agent_key:
            return "Agents can only claim tasks for themselves"
        return None
    if patch.names_assignee or patch.names_assignee_key:
        return "Agents cannot reassign a task after claim"
    if task.assignee_agent_key == actor.agent_key:
        return None
    if not task.assignee_agent_key and task.assignee == actor.label:
        return None
    return f"Only the assigned agent can move this task to {patch.status}"


@final
@attrs.frozen(kw_only=True)
class Mutation:
    """What a move is, for the work-lease rules: its name, the lease kind it needs,
    and whether it is a claim."""

    name: str
    kind: str = "work"
    claim: bool = False


def classify(patch: TaskPatch, *, review_request: bool) -> Mutation | None:
    """The lease-bound mutation an agent's patch is, or ``None`` when it needs no lease."""
    if review_request:
        return Mutation(name="task_update", kind="review")
    if patch.status == "assigned":
        return Mutation(name="task_claim", claim=True)
    if patch.status == "in_review":
        return Mutation(name="task_complete")
    if patch.pr_url is not None:
        return Mutation(name="workflow_artifact_attach")
    if patch.status in ("in_progress", "blocked"):
        return Mutation(name="task_update")
    return None


def holds(lease: LeaseRow, actor: Actor) -> bool:
    """Whether ``lease`` is ``actor``'s: the same agent key, and instance when it has one."""
    if not actor.agent_key or lease.agent_key != actor.agent_key:
        return False
    return lease.agent_instance_id is None or lease.agent_instance_id == actor.instance_id


@final
@attrs.frozen(kw_only=True)
class Coordination:
    """The work-lease decision: allowed (perhaps with a new lease), or refused."""

    allowed: bool
    take_lease: bool = False
    code: str | None = None
    reason: str | None = None


def coordinate(
    task: TaskRow, mutation: Mutation, actor: Actor, leases: Iterable[LeaseRow]
) -> Coordination:
    """May ``actor`` make ``mutation`` given the task's active ``leases``?"""
    active = list(leases)
    if any(lease.kind == mutation.kind and holds(lease, actor) for lease in active):
        return Coordination(allowed=True)
    other_kind = next((lease for lease in active if holds(lease, actor)), None)
    if other_kind is not None:
        return Coordination(
            allowed=False,
            code="coordination_wrong_lease_kind",
            reason=f"Mutation {mutation.name} requires a {mutation.kind} lease, but actor"
            f" holds {other_kind.kind} lease {other_kind.lease_id}.",
        )
    held = next((lease for lease in active if lease.kind == mutation.kind), None)
    if held is not None:
        return Coordination(
            allowed=False,
            code="coordination_wrong_actor",
            reason=f"Mutation {mutation.name} requires lease {held.lease_id},"
            " which belongs to a different agent.",
        )
    if mutation.kind == "work" and (
        (mutation.claim and task.status == "accepted")
        or (not mutation.claim and _assigned_to(task, actor))
    ):
        return Coordination(allowed=True, take_lease=True)
    return Coordination(
        allowed=False,
        code="coordination_missing_lease",
        reason=f"Mutation {mutation.name} requires an active {mutation.kind} lease.",
    )


def text_edit(
    task: TaskRow, patch: TaskPatch, actor: Actor, leases: Iterable[LeaseRow]
) -> Coordination | None:
    """May the agent ``actor`` change ``task``'s text as ``patch`` asks? ``None`` when the
    patch leaves the text alone; else the decision (a new work lease when the assignee
    whose lease is gone edits it)."""
    if patch.title is None and patch.description is None:
        return None
    if task.status in AGENT_OWNED_STATUSES and (task.assignee or task.assignee_agent_key):
        return coordinate(task, Mutation(name="task_update"), actor, leases)
    if task.created_by == actor.label:
        return Coordination(allowed=True)
    return Coordination(allowed=False, code=TEXT_NOT_YOURS_CODE, reason=TEXT_NOT_YOURS_TEXT)


def _assigned_to(task: TaskRow, actor: Actor) -> bool:
    if task.assignee_agent_key:
        return task.assignee_agent_key == actor.agent_key
    return task.assignee is not None and task.assignee == actor.label


def task_json(task: TaskRow, leases: Iterable[dict[str, Any]] = ()) -> dict[str, Any]:
    """A task as the letagents API shows it, with its active leases."""
    return {
        "id": task_id_of(task.number),
        "room_id": task.room_id,
        "title": task.title,
        "description": task.description,
        "status": task.status,
        "assignee": task.assignee,
        "assignee_agent_key": task.assignee_agent_key,
        "created_by": task.created_by,
        "source_message_id": task.source_message_id,
        "pr_url": task.pr_url,
        "created_at": iso(task.created_at),
        "updated_at": iso(task.updated_at),
        "active_leases": list(leases),
    }
