"""The message tools: send (in a thread or not), read the newest, post a status, guidelines.

Each resolves whom it acts as through the ``worker_id`` facade and makes its
room calls with the host layer's :class:`~letagents_trio.workers._room_work.RoomWork`
(:func:`~._facade.call_as`); writes need a worker session.

* ``send_message`` and ``send_thread_message`` post ``POST …/messages``. A
  reply names ``reply_to`` (a message it answers) or ``thread_parent_id`` (a
  thread, by any of its messages: the tool finds the root, ``GET …/messages``);
  the post then carries the root as ``reply_to``, so the reply joins that thread.
* ``read_messages`` answers the newest ``limit`` messages (100 unless given;
  0 for the whole history), oldest of them first, paging back from
  ``GET …/messages?before=latest``; ``truncated`` says older ones were left out.
* ``post_status`` posts ``[status] <text>`` as a message.
* ``get_room_guidelines`` reads ``GET …/agent-guidelines``.

Messages are answered as the room sends them; a reply inside a thread also
gets ``thread_parent_id``, its thread's root, the id to pass back to
``send_thread_message``.

Local rooms (the chat-storage settings say ``local``): messages and statuses
go to the local chat (SQLite), with the worker's connection checked again
inside its write lock; reads take its newest page. The local chat keeps no
threads and no guidelines: those tools answer :data:`LOCAL_THREAD_TEXT` and
:data:`LOCAL_GUIDELINES_TEXT`.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import TYPE_CHECKING, Annotated, Any, Final

# Tool signatures are evaluated at run time (the SDK reads them).
from mcp_types import CallToolResult  # noqa: TC002
from pydantic import Field

from .._errors import LocalChatError, WorkerError
from .._protocol import MAX_MESSAGE_CHARS
from ..workers._local_chat import MAX_MESSAGE_PAGE
from ..workers._room_work import DEFAULT_READ, MAX_READ, Acting
from ._facade import (
    Deprecated,
    RoomId,
    SessionId,
    ToolContext,
    Who,
    WorkerId,
    blank,
    call_as,
    expected_errors,
    failed,
    local_refusal,
    ok,
    recheck,
    require_worker,
    server_state,
)

if TYPE_CHECKING:
    from .._session import AgentSession
    from ..workers._local_chat import LocalChat
    from ._facade import ServerState

__all__ = [
    "LOCAL_GUIDELINES_TEXT",
    "LOCAL_THREAD_TEXT",
    "REPLY_MISMATCH_TEXT",
    "STATUS_PREFIX",
    "get_room_guidelines",
    "messages_payload",
    "post_status",
    "read_messages",
    "recent_messages",
    "send_message",
    "send_thread_message",
]

# Our own texts for local rooms: there is no room server to keep guidelines,
# and the local chat keeps no threads.
LOCAL_GUIDELINES_TEXT: Final = (
    "This room keeps its chat on this machine (chat storage: local), so it has no room server"
    " and no guidelines to read."
)
LOCAL_THREAD_TEXT: Final = (
    "This room keeps its chat on this machine (chat storage: local), which keeps no threads:"
    " send the reply with send_message, without reply_to or thread_parent_id."
)
# The Node client's text for a reply naming two different targets.
REPLY_MISMATCH_TEXT: Final = "reply_to and thread_parent_id must match when both are provided."
# A status is a message with this prefix (the Node client's reserved form).
STATUS_PREFIX: Final = "[status] "
STATUS_TOO_LONG_TEXT: Final = (
    f"status is too long: at most {MAX_MESSAGE_CHARS - len(STATUS_PREFIX)} characters"
)
# A blank status would post "[status] " and say nothing.
BLANK_STATUS_TEXT: Final = "status is empty: pass a short line saying what this worker is doing."


def _readable(message: Mapping[str, Any]) -> dict[str, Any]:
    """A message as the tools answer it: a reply in a thread names its root as
    ``thread_parent_id`` (what to pass to ``send_thread_message``)."""
    readable = dict(message)
    root = message.get("thread_root_id")
    if isinstance(root, str) and root and root != message.get("id"):
        readable["thread_parent_id"] = root
    return readable


def messages_payload(answer: object, room: str, after: str | None = None) -> dict[str, Any]:
    """A page of messages as the tools answer it, the same four fields also when
    none came: ``messages``, ``room_id``, ``truncated`` (older or newer ones were
    left out) and ``last_observed_message_id``, the cursor to wait after: the
    last message's id, else the cursor given (``after``), so a host that reads
    it after an empty wait keeps its place (None only before any)."""
    body = answer if isinstance(answer, Mapping) else {}
    raw = body.get("messages")
    messages = (
        [_readable(m) for m in raw if isinstance(m, Mapping)] if isinstance(raw, list) else []
    )
    ids = [m["id"] for m in messages if isinstance(m.get("id"), str)]
    return {
        "messages": messages,
        "room_id": body.get("room_id") or room,
        "truncated": bool(body.get("truncated") or body.get("has_more")),
        "last_observed_message_id": ids[-1] if ids else after,
    }


async def _local_recent(chat: LocalChat, room: str, limit: int) -> dict[str, Any]:
    """A local room's newest ``limit`` messages (0: all, at most :data:`MAX_READ`)."""
    if 0 < limit <= MAX_MESSAGE_PAGE:
        page = await chat.latest(room, limit=limit)
        return {**page, "truncated": bool(page["has_older"]), "has_more": False}
    wanted = MAX_READ if limit <= 0 else min(limit, MAX_READ)
    collected: list[dict[str, Any]] = []
    cursor: int | None = None
    left_out = False
    while True:
        page = await chat.read(room, after=cursor, limit=MAX_MESSAGE_PAGE)
        collected.extend(page["messages"])
        left_out = left_out or len(collected) > wanted
        del collected[:-wanted]
        if not page["has_more"] or not page["messages"]:
            break
        cursor = int(page["messages"][-1]["id"])
    return {"messages": collected, "room_id": room, "truncated": left_out}


async def recent_messages(
    state: ServerState, who: Who, limit: int
) -> tuple[dict[str, Any], AgentSession | None]:
    """The newest ``limit`` messages as ``who``, hosted or local, as the tools answer
    them, and the session they were read as.

    Cancellation:
        A checkpoint; nothing to undo.
    """

    async def local(room: str, session: AgentSession | None) -> dict[str, Any]:
        return await _local_recent(state.chat, room, limit)

    async def remote(acting: Acting) -> dict[str, Any]:
        return await state.work.recent_messages(acting, limit)

    room, session, answer = await call_as(state, who, remote=remote, local=local)
    return messages_payload(answer, room), session


async def _send_locally(
    state: ServerState, who: Who, room: str, session: AgentSession, text: str
) -> dict[str, Any]:
    """Post to a local room's chat, the worker's connection checked again inside the
    chat's write lock (a send that waited while the worker was reconnected elsewhere
    writes nothing, PROTOCOL §8.3.14)."""
    return await state.chat.send(
        session, text, check=functools.partial(recheck, state, who, room, session)
    )


# --- the tools --------------------------------------------------------------------------

Text = Annotated[str, Field(description="The message.", min_length=1, max_length=MAX_MESSAGE_CHARS)]
ReplyTo = Annotated[
    str | None,
    Field(description="A message id this answers (it joins that message's thread)."),
]
ThreadParent = Annotated[
    str,
    Field(
        description=(
            "The thread to post into: its root message id, or any message of it"
            " (the tool finds the root)."
        )
    ),
]


async def _send(
    ctx: ToolContext,
    who: Who,
    text: str,
    *,
    reply_to: str | None,
    thread_parent_id: str | None,
) -> CallToolResult:
    """Post ``text`` as ``who``'s worker, as a reply when a target is named."""
    state = server_state(ctx)
    reply = None if blank(reply_to) else (reply_to or "").strip()
    parent = None if blank(thread_parent_id) else (thread_parent_id or "").strip()
    if reply is not None and parent is not None and reply != parent:
        raise WorkerError(REPLY_MISMATCH_TEXT)

    async def local(room: str, session: AgentSession | None) -> dict[str, Any]:
        if reply is not None or parent is not None:
            raise LocalChatError(LOCAL_THREAD_TEXT)
        return await _send_locally(state, who, room, require_worker(session), text)

    async def remote(acting: Acting) -> dict[str, Any]:
        target = reply if parent is None else await state.work.thread_root(acting, parent)
        return await state.work.send(acting, text, reply_to=target)

    _, session, message = await call_as(state, who, remote=remote, local=local, write=True)
    return ok(state, {"success": True, "message": _readable(message)}, session)


@expected_errors
async def send_message(
    ctx: ToolContext,
    text: Text,
    room_id: RoomId = None,
    reply_to: ReplyTo = None,
    thread_parent_id: Annotated[
        str | None,
        Field(description="Post into this thread (any of its message ids; the root is found)."),
    ] = None,
    sender: Deprecated = None,
    conversation_id: Deprecated = None,
    agent_session_id: SessionId = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Send a message to a room as this chat's worker. To answer inside a thread and keep
    the main room clear, pass thread_parent_id (or use send_thread_message)."""
    who = Who(room_id=room_id, agent_session_id=agent_session_id, worker_id=worker_id)
    return await _send(ctx, who, text, reply_to=reply_to, thread_parent_id=thread_parent_id)


@expected_errors
async def send_thread_message(
    ctx: ToolContext,
    text: Text,
    thread_parent_id: ThreadParent,
    room_id: RoomId = None,
    conversation_id: Deprecated = None,
    agent_session_id: SessionId = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Reply inside a message's thread, not as a new top-level room message. Pass the
    thread's root (a message's thread_parent_id, or thread.root_message_id) or any
    message of the thread."""
    who = Who(room_id=room_id, agent_session_id=agent_session_id, worker_id=worker_id)
    return await _send(ctx, who, text, reply_to=None, thread_parent_id=thread_parent_id)


@expected_errors
async def read_messages(
    ctx: ToolContext,
    room_id: RoomId = None,
    limit: Annotated[
        int | None,
        Field(
            description=(
                f"How many of the newest messages (default {DEFAULT_READ}); 0 for the whole"
                f" history (at most {MAX_READ}). truncated=true says older ones were left out."
            ),
            ge=0,
        ),
    ] = None,
    agent_session_id: SessionId = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Read a room's newest messages, oldest of them first. To follow the room over time,
    call wait_for_messages with after_message_id instead."""
    state = server_state(ctx)
    who = Who(room_id=room_id, agent_session_id=agent_session_id, worker_id=worker_id)
    payload, session = await recent_messages(state, who, DEFAULT_READ if limit is None else limit)
    return ok(state, payload, session)


@expected_errors
async def post_status(
    ctx: ToolContext,
    status: Annotated[
        str, Field(description="What this worker is doing now, e.g. 'reviewing PR #2'.")
    ],
    room_id: RoomId = None,
    sender: Deprecated = None,
    conversation_id: Deprecated = None,
    agent_session_id: SessionId = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Tell the room what this worker is doing now: a short status line, posted as a
    '[status] …' message that people and agents can tell apart from chat."""
    state = server_state(ctx)
    if not status.strip():
        return failed(state, BLANK_STATUS_TEXT)
    if len(STATUS_PREFIX + status) > MAX_MESSAGE_CHARS:
        # The room's refusal would name its own field, text.
        return failed(state, STATUS_TOO_LONG_TEXT)
    who = Who(room_id=room_id, agent_session_id=agent_session_id, worker_id=worker_id)
    text = STATUS_PREFIX + status

    async def local(room: str, session: AgentSession | None) -> dict[str, Any]:
        return await _send_locally(state, who, room, require_worker(session), text)

    async def remote(acting: Acting) -> dict[str, Any]:
        return await state.work.send(acting, text)

    _, session, message = await call_as(state, who, remote=remote, local=local, write=True)
    payload = {
        "success": True,
        "status_posted": status,
        "sender": message.get("sender"),
        "message_id": message.get("id"),
        "timestamp": message.get("timestamp") or message.get("created_at"),
    }
    return ok(state, payload, session)


@expected_errors
async def get_room_guidelines(
    ctx: ToolContext,
    room_id: RoomId = None,
    agent_session_id: SessionId = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Read the room's guidelines: how its people want agents to work there."""
    state = server_state(ctx)
    who = Who(room_id=room_id, agent_session_id=agent_session_id, worker_id=worker_id)
    _, session, answer = await call_as(
        state,
        who,
        remote=state.work.guidelines,
        local=local_refusal(LOCAL_GUIDELINES_TEXT),
    )
    return ok(state, answer, session)
