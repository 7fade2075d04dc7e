"""The room's work API for a worker chat: messages, threads, the board, leases, memory, requests.

The host layer's client of the letagents room routes a worker uses once it is
registered (the MCP tools call these; an embedder may too). Each method is one
route, or one bounded walk over a route's pages, made with the core client's
rules (:meth:`~letagents_trio.RoomClient.call`: its deadline, its answer cap,
its refusal translation, ``ApiError`` with the room's status and body).

**Who a call acts as** is an :class:`Acting`: a room and the worker session
the call speaks for, or no session for the owner's own call. The one place
that turns it into credentials is :meth:`RoomWork.credentials`: the session's
id and token headers beside the bearer the client always adds (the owner's
token), or, when the client's bearer is a worker's own
(``bearer_only``: a supervisor minted it, ``LETAGENTS_AGENT_SESSION_BEARER``),
that bearer alone, as the Node client sends it. Nothing else here names a
credential.

**Walks over pages** follow the Node client, bounded:

* :meth:`RoomWork.recent_messages` reads the newest ``limit`` messages by
  paging back from ``GET …/messages?before=latest`` (0 means the whole
  history), at most :data:`MAX_READ` messages: the newest, so that a history
  longer than the bound loses its oldest messages, never its newest;
* :meth:`RoomWork.board` reads ``GET …/tasks`` page after page (``after`` the
  last task), at most :data:`MAX_BOARD_PAGES` pages;
* :meth:`RoomWork.thread_root` finds the root of a message's thread: the
  message's ``thread_root_id`` when the room gives one, else up its
  ``reply_to`` chain, looking messages up in the newest pages (at most
  :data:`MAX_SCAN_PAGES` pages a lookup, :data:`MAX_THREAD_HOPS` hops).

A walk stops early (``truncated``) at its bound, or when a page would not move
its cursor (the same cursor again, or no record with an id to page from), so a
room that answers ``has_more`` forever costs a bounded time.

**Presence** (:meth:`RoomWork.sync_presence`, the rules in :mod:`._presence`):
``POST …/presence`` for the acting worker, what was sent remembered per room
and worker in :attr:`RoomWork.presence`; a room without the route is skipped.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, Literal, final, get_args
from urllib.parse import quote, urlencode

import attrs
import trio

from .._client import encode_room_path
from .._errors import ApiError, RoomUnreachable, WorkerError
from ._identity import PROCESS_INSTANCE_ID
from ._presence import Presence, PresenceMemory, presence_body

if TYPE_CHECKING:
    from .._client import RoomClient
    from .._session import AgentSession

__all__ = [
    "DEFAULT_READ",
    "MAX_BOARD_PAGES",
    "MAX_READ",
    "MAX_SCAN_PAGES",
    "MAX_THREAD_HOPS",
    "PAGE",
    "TASK_STATUSES",
    "Acting",
    "RoomWork",
    "TaskStatus",
    "claim_refusal",
]

# read_messages without a limit: the newest 100 (the Node client's default).
DEFAULT_READ: Final = 100
# The most messages one read collects (ours: a whole history of a busy room
# would not fit a tool result anyway).
MAX_READ: Final = 10_000
# One page asked for: the letagents API's largest (a room may answer fewer).
PAGE: Final = 500
# The most board pages one read walks (500 tasks each from the letagents API).
MAX_BOARD_PAGES: Final = 50
# The most pages one message lookup scans, newest first.
MAX_SCAN_PAGES: Final = 20
# The most messages a thread-root walk looks up (the Node client's bound on
# thread context lookups).
MAX_THREAD_HOPS: Final = 16
# A room that answers these to a route it does not have: the call is skipped.
MISSING_ROUTE_STATUSES: Final = frozenset({404, 405})
# Messages one long poll asks for (the Node client's MAX_WAIT_MESSAGES_PER_CALL).
POLL_LIMIT: Final = 100
# A task's statuses, the letagents API's, in board order (the room's transition
# table decides the moves between them; the reference room's rules use these).
TaskStatus = Literal[
    "proposed",
    "accepted",
    "assigned",
    "in_progress",
    "blocked",
    "in_review",
    "merged",
    "done",
    "cancelled",
]
TASK_STATUSES: Final[tuple[str, ...]] = get_args(TaskStatus)


@final
@attrs.frozen(kw_only=True)
class Acting:
    """Whom a room-work call acts as.

    Attributes:
        room_id: the room.
        session: the worker session whose credentials go out; ``None`` for
            the owner's own call (reads; the room decides what it allows).
    """

    room_id: str
    session: AgentSession | None = None


def claim_refusal(task: Mapping[str, Any], task_id: str, agent_key: str | None) -> str | None:
    """Why a worker may not claim ``task`` (only accepted tasks are claimed), or ``None``.

    A task already assigned to this agent may be claimed again: it is
    answered as it is, with nothing sent.
    """
    status = task.get("status")
    if status == "accepted":
        return None
    if status == "assigned" and agent_key and task.get("assignee_agent_key") == agent_key:
        return None
    return (
        f"{task_id} is {status}, not accepted: only accepted tasks can be claimed"
        " (a room admin accepts proposed ones). Check get_board for accepted tasks."
    )


def _dict(answer: object) -> dict[str, Any]:
    return dict(answer) if isinstance(answer, Mapping) else {}


def _records(answer: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
    raw = answer.get(key)
    return [dict(x) for x in raw if isinstance(x, Mapping)] if isinstance(raw, list) else []


def _id(message: Mapping[str, Any]) -> str | None:
    value = message.get("id")
    return value if isinstance(value, str) and value.strip() else None


def reply_to_id(message: Mapping[str, Any]) -> str | None:
    """The id of the message ``message`` answers: ``reply_to`` as an id or a reference."""
    reply = message.get("reply_to")
    if isinstance(reply, str) and reply.strip():
        return reply.strip()
    return _id(reply) if isinstance(reply, Mapping) else None


@final
@attrs.define(eq=False)
class RoomWork:
    """The room-work routes, over one :class:`~letagents_trio.RoomClient`.

    Every method raises what :meth:`RoomClient.call` raises: ``ApiError`` (the
    room refused: its status and body), ``RoomUnreachable`` (no answer in
    time), ``StateUnavailable`` never (nothing here reads the state file).

    Args:
        client: the client whose bearer every call carries.
        bearer_only: the client's bearer is a worker's own, sent alone (no
            session headers); see :meth:`credentials`.

    Cancellation:
        Every method is a checkpoint; cancelled, the request in flight is
        closed (the room may have acted on a write).
    """

    client: RoomClient
    bearer_only: bool = False
    # The presence last sent per worker (``_presence.py``).
    presence: PresenceMemory = attrs.field(factory=PresenceMemory, init=False)

    # --- the one place credentials are chosen -------------------------------------------

    def credentials(self, acting: Acting) -> AgentSession | None:
        """The session whose credentials a call made for ``acting`` carries (``None``:
        the client's bearer alone). With ``bearer_only`` the bearer is the whole
        credential, whoever the call acts as."""
        return None if self.bearer_only else acting.session

    async def _call(
        self,
        acting: Acting,
        method: str,
        route: str,
        *,
        query: Mapping[str, str | int] | None = None,
        body: object = None,
    ) -> dict[str, Any]:
        path = f"/rooms/{encode_room_path(acting.room_id)}/{route}"
        if query:
            path += "?" + urlencode(query)
        answer = await self.client.call(method, path, json=body, session=self.credentials(acting))
        return _dict(answer)

    async def call(
        self,
        acting: Acting,
        method: str,
        route: str,
        *,
        query: Mapping[str, str | int] | None = None,
        body: object = None,
    ) -> dict[str, Any]:
        """One call of the room route ``…/rooms/<room>/<route>`` for ``acting``: a route
        the other host-layer modules name (wake rules, reasoning, workspace captures, a
        governed board's routes)."""
        return await self._call(acting, method, route, query=query, body=body)

    # --- messages ----------------------------------------------------------------------

    async def send(
        self,
        acting: Acting,
        text: str,
        *,
        reply_to: str | None = None,
        thread_root_id: str | None = None,
    ) -> dict[str, Any]:
        """``POST …/messages``: post ``text`` as the acting worker (``sender``: its actor
        label), answering ``reply_to``, in the thread rooted at ``thread_root_id``."""
        session = acting.session
        label = None if session is None else session.extra.get("actor_label")
        body: dict[str, Any] = {"sender": label} if isinstance(label, str) and label else {}
        body["text"] = text
        if reply_to is not None:
            body["reply_to"] = reply_to
        if thread_root_id is not None:
            body["thread_root_id"] = thread_root_id
        return await self._call(acting, "POST", "messages", body=body)

    async def recent_messages(self, acting: Acting, limit: int) -> dict[str, Any]:
        """The newest ``limit`` messages, oldest of them first (``0``: the whole history).

        Returns:
            ``{"messages": [...], "room_id": ..., "truncated": bool}``; ``truncated``
            when older messages were left out (``limit`` or :data:`MAX_READ`, or a page
            that leads no further back while the room says older ones remain).
        """
        wanted = MAX_READ if limit <= 0 else min(limit, MAX_READ)
        collected: list[dict[str, Any]] = []
        before = "latest"
        room_id = acting.room_id
        while True:
            query: dict[str, str | int] = {
                "before": before,
                "limit": min(wanted - len(collected), PAGE),
                "include_prompt_only": 1,
            }
            page = await self._call(acting, "GET", "messages", query=query)
            room_id = str(page.get("room_id") or room_id)
            messages = _records(page, "messages")
            collected[:0] = messages
            if not page.get("has_older", page.get("has_more")):
                truncated = len(collected) > wanted
                break
            oldest = _id(messages[0]) if messages else None
            if oldest is None or oldest == before or len(collected) >= wanted:
                truncated = True
                break
            before = oldest
        return {"messages": collected[-wanted:], "room_id": room_id, "truncated": truncated}

    async def _forward(
        self,
        acting: Acting,
        route: str,
        query: Mapping[str, str | int],
        *,
        max_pages: int,
        max_items: int,
    ) -> tuple[list[dict[str, Any]], str, bool]:
        """Every item of ``GET route`` page after page (``after`` the last one), with the
        room's id and whether the walk stopped at a bound before the room's end.

        The items are the page's list named like the route (``messages``, ``tasks``).
        """
        items: list[dict[str, Any]] = []
        after: str | None = None
        room_id = acting.room_id
        for _ in range(max_pages):
            page_query = dict(query) if after is None else {**query, "after": after}
            page = await self._call(acting, "GET", route, query=page_query)
            room_id = str(page.get("room_id") or room_id)
            found = _records(page, route)
            items.extend(found)
            if not page.get("has_more"):
                return items, room_id, len(items) > max_items
            last = _id(found[-1]) if found else None
            if last is None or last == after or len(items) >= max_items:
                break
            after = last
        return items, room_id, True

    async def poll(
        self, acting: Acting, *, after: str | None, timeout_ms: int, abort_ms: int
    ) -> dict[str, Any]:
        """``GET …/messages/poll``: wait up to ``timeout_ms`` for messages after ``after``
        (``None``: any new message), abandoned after ``abort_ms``.

        Raises:
            RoomUnreachable: the room did not answer within ``abort_ms``.
        """
        query: dict[str, str | int] = {}
        if after is not None:
            query["after"] = after
        query.update(limit=POLL_LIMIT, timeout=timeout_ms, include_prompt_only=1)
        path = f"/rooms/{encode_room_path(acting.room_id)}/messages/poll?{urlencode(query)}"
        # A long poll keeps its own deadline, instead of the client's.
        with trio.move_on_after(abort_ms / 1000):
            answer = await self.client.call(
                "GET", path, session=self.credentials(acting), bounded=False
            )
            return _dict(answer)
        raise RoomUnreachable(f"The room did not answer the long poll within {abort_ms} ms.")

    async def _find(self, acting: Acting, message_id: str) -> dict[str, Any] | None:
        """The message with this id, looked up in the newest pages, or ``None``."""
        before = "latest"
        for _ in range(MAX_SCAN_PAGES):
            query: dict[str, str | int] = {
                "before": before,
                "limit": PAGE,
                "include_prompt_only": 1,
            }
            page = await self._call(acting, "GET", "messages", query=query)
            messages = _records(page, "messages")
            for message in messages:
                if message.get("id") == message_id:
                    return message
            oldest = _id(messages[0]) if messages else None
            if not page.get("has_older", page.get("has_more")) or oldest in (None, before):
                return None
            before = str(oldest)
        return None

    async def thread_root(self, acting: Acting, message_id: str) -> str:
        """The root of ``message_id``'s thread (itself when it is in none, or not found)."""
        current = message_id
        seen: set[str] = set()
        for _ in range(MAX_THREAD_HOPS):
            if current in seen:
                return current
            seen.add(current)
            message = await self._find(acting, current)
            if message is None:
                return current
            root = message.get("thread_root_id")
            if isinstance(root, str) and root and root != current:
                return root
            parent = reply_to_id(message)
            if parent is None:
                return current
            current = parent
        return current

    async def guidelines(self, acting: Acting) -> dict[str, Any]:
        """``GET …/agent-guidelines``: the room's guidelines for its agents."""
        return await self._call(acting, "GET", "agent-guidelines")

    # --- presence ----------------------------------------------------------------------

    async def sync_presence(self, acting: Acting, presence: Presence | None = None) -> None:
        """``POST …/presence``: the acting worker's ``presence`` (``None``: the one last
        sent, remembered), remembered as sent. An owner's own call has no presence and
        sends nothing; a room without the route (404, 405) is skipped.
        """
        session = acting.session
        if session is None:
            await trio.lowlevel.checkpoint()
            return
        sent = self.presence.remembered(acting.room_id, session) if presence is None else presence
        self.presence.remember(acting.room_id, session, sent)
        try:
            await self._call(acting, "POST", "presence", body=presence_body(session, sent))
        except ApiError as exc:
            if exc.status not in MISSING_ROUTE_STATUSES:
                raise

    # --- the board ---------------------------------------------------------------------

    async def board(self, acting: Acting, *, status: str | None, open_only: bool) -> dict[str, Any]:
        """``GET …/tasks``, every page: ``{"tasks": [...], "room_id": ..., "truncated": bool}``.

        ``open_only`` asks for every task not done or cancelled (the room then
        ignores ``status``, as the letagents API does).
        """
        query: dict[str, str | int] = {}
        if status:
            query["status"] = status
        if open_only:
            query["open"] = "true"
        tasks, room_id, truncated = await self._forward(
            acting, "tasks", query, max_pages=MAX_BOARD_PAGES, max_items=MAX_BOARD_PAGES * PAGE
        )
        return {"tasks": tasks, "room_id": room_id, "truncated": truncated}

    def _task_route(self, task_id: str, suffix: str = "") -> str:
        return f"tasks/{quote(task_id, safe='')}{suffix}"

    async def task(self, acting: Acting, task_id: str) -> dict[str, Any]:
        """``GET …/tasks/{t}``: one task, with its active leases."""
        return await self._call(acting, "GET", self._task_route(task_id))

    async def add_task(self, acting: Acting, fields: Mapping[str, Any]) -> dict[str, Any]:
        """``POST …/tasks``: a new task (``proposed``), answered as the task.

        A worker's task names its creator as the Node client does, after the
        title and description: ``created_by`` and ``actor_label`` (its actor
        label), ``actor_key`` (its agent key), ``actor_instance_id`` (its
        instance id, else this process's).
        """
        body = dict(fields)
        session = acting.session
        if session is not None:
            extra = session.extra
            label = extra.get("actor_label")
            first: dict[str, Any] = {k: body.pop(k) for k in ("title", "description") if k in body}
            instance = extra.get("agent_instance_id")
            body = {
                **first,
                "created_by": label,
                "actor_label": label,
                "actor_key": extra.get("agent_key"),
                "actor_instance_id": instance if instance else PROCESS_INSTANCE_ID,
                **body,
            }
        return await self._call(acting, "POST", "tasks", body=body)

    async def update_task(
        self, acting: Acting, task_id: str, fields: Mapping[str, Any]
    ) -> dict[str, Any]:
        """``PATCH …/tasks/{t}``: change a task under the room's rules."""
        return await self._call(acting, "PATCH", self._task_route(task_id), body=dict(fields))

    async def claim_task(
        self, acting: Acting, task_id: str, extra_fields: Mapping[str, Any] | None = None
    ) -> dict[str, Any]:
        """Claim a task as the acting worker: read it (``GET``), then ``PATCH`` it to
        ``assigned`` for this worker, which takes its work lease (``extra_fields``, a
        governed room's approval, go with it). A task already assigned to this worker is
        answered as read.

        Raises:
            WorkerError: the task is not accepted (:func:`claim_refusal`); nothing was changed.
        """
        session = acting.session
        extra = {} if session is None else session.extra
        label, key = extra.get("actor_label"), extra.get("agent_key")
        task = await self.task(acting, task_id)
        refusal = claim_refusal(task, task_id, key if isinstance(key, str) else None)
        if refusal is not None:
            raise WorkerError(refusal)
        if task.get("status") == "assigned":
            return task
        fields: dict[str, Any] = {"status": "assigned", **(extra_fields or {})}
        if isinstance(label, str) and label:
            fields["assignee"] = label
        if isinstance(key, str) and key:
            fields["assignee_agent_key"] = key
        return await self.update_task(acting, task_id, fields)

    async def lease_action(
        self, acting: Acting, task_id: str, fields: Mapping[str, Any]
    ) -> dict[str, Any]:
        """``POST …/tasks/{t}/lease-action``: release or hand off the task's work lease."""
        route = self._task_route(task_id, "/lease-action")
        return await self._call(acting, "POST", route, body=dict(fields))

    # --- memory and requests for people ------------------------------------------------

    async def knowledge(self, acting: Acting, kind: str) -> dict[str, Any]:
        """``GET …/memory`` or ``…/attention``: the room's records of that kind."""
        return await self._call(acting, "GET", kind)

    async def save_knowledge(
        self, acting: Acting, kind: str, fields: Mapping[str, Any]
    ) -> dict[str, Any]:
        """``POST …/memory`` or ``…/attention``: save a record (again: the same record)."""
        return await self._call(acting, "POST", kind, body=dict(fields))
