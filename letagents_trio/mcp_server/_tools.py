"""The MCP tools, the worker_id facade, and the one registration path.

Every tool is registered by :func:`register_tools`, and nothing else decides
which tools exist: the server registers through it, and
:func:`registered_tool_names` runs it against a recorder, so the readiness
resource and ``--letagents-runtime-contract`` list exactly what a client can
call (upstream's rule: discover through the production registration path).

What a tool does: it resolves whom it acts as through the ``worker_id``
facade, makes one room call with that session's credentials, and answers
compact JSON, its expected failures as ``isError`` results (all three in
:mod:`._facade`). A room the chat-storage settings mark ``local``
(:meth:`WorkerHandles.is_local_room`) never sees HTTP: its chat is the
server's one :class:`~letagents_trio.workers.LocalChat` (a SQLite file shared
by every MCP server of the user):

* ``send_message`` is :meth:`LocalChat.send` with a ``check`` that runs the
  §6.6 connection check again *inside* the database's write lock, so a send
  that waited behind another process's write while its worker was
  re-registered elsewhere fails and writes nothing (PROTOCOL §8.3.14);
* ``read_messages`` is :meth:`LocalChat.read`;
* ``wait_for_messages`` is :meth:`LocalChat.wait` for the clamped timeout
  (``trio.move_on_after``), answered with a read when it expires; on every
  look it asks whether this process still holds the worker's connection, so
  a wait whose worker was reconnected elsewhere fails and never returns its
  successor's messages;
* ``get_room_guidelines`` fails with :data:`LOCAL_GUIDELINES_TEXT`;
* a send with no worker (no ``worker_id`` or ``agent_session_id``) fails with
  :data:`LOCAL_SENDER_TEXT`: a local message needs a session to be from.
  Reads and waits without one are the owner's, as in hosted rooms.

Long waits: a ``wait_for_messages`` may last the poll maximum (180 s by
default), longer than the 60 s an MCP client SDK gives a request unless
progress arrives. While it waits, the tool sends ``notifications/progress``
every :data:`PROGRESS_INTERVAL` seconds when the call carried
``_meta.progressToken``, so a host that resets its timeout on progress keeps
the wait.

Cancellation: a tool call the host cancels (``notifications/cancelled``) is
cancelled at the handler's scope by the SDK; the room request in flight is
closed with it, so the room stops counting it (a long poll ends at once).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Annotated, Any, Final, NoReturn, Protocol, TypeVar, final
from urllib.parse import urlencode

import trio

# Tool signatures are evaluated at run time (the SDK and _without_parameter read them).
from mcp_types import CallToolResult  # noqa: TC002
from pydantic import Field

from .._errors import LocalChatError, WorkerError
from .._protocol import MAX_MESSAGE_CHARS
from ..workers._legacy import WORKER_BEARER_SESSION_ID
from ..workers._local_chat import message_cursor
from ..workers._wire import public_session
from ._facade import (
    ToolContext,
    ToolFn,
    Who,
    blank,
    call_as,
    expected_errors,
    ok,
    recheck,
    server_state,
)
from ._profiles import CURSOR_PROVIDER, FACADE_PROFILES, tool_surface
from ._turn_tools import complete_room_turn, set_reply_thread

if TYPE_CHECKING:
    from .._session import AgentSession
    from ..workers._results import WorkerRegistration
    from ._facade import ServerState

T = TypeVar("T")

__all__ = [
    "INSTRUCTION",
    "LOCAL_GUIDELINES_TEXT",
    "LOCAL_SENDER_TEXT",
    "PROGRESS_INTERVAL",
    "ToolRegistrar",
    "clamp_poll_timeout",
    "poll_abort_after",
    "register_tools",
    "registered_tool_names",
]

# --- texts and numbers (PROTOCOL §5.1, §5.3, §7.6) ---------------------------------

INSTRUCTION: Final = (
    "Keep worker_id for this chat and pass it to room tools. After an MCP restart, reconnect"
    " with register_agent_session(worker_id, room_id). A separate chat needs its own"
    " registration_key. Credentials stay private to MCP."
)
NAME_NOTICE: Final = (
    '"{held}" is the name of a worker this MCP server registered in this room earlier and still'
    ' holds, so this chat was registered as "{given}". If this is a chat of its own, carry on'
    ' under that name. Only if this same chat registered as "{held}" before and lost its'
    " worker_id: call register_agent_session with recover_lost_worker true, this room_id and"
    ' display_name "{held}", then disconnect_agent_session for worker_id "{worker_id}".'
)
RESUMED_WORK: Final = (
    "An earlier session of this agent held these leases, and this session holds them now:"
    " {items}. Carry on with that work, or release what is not yours to do."
)
# The legacy path's hint (PROTOCOL §5.8 names the field; its text is ours).
# The Node server's texts of the legacy path (tools/agent-sessions.ts).
USE_AGENT_SESSION_ID: Final = (
    "Pass this exact agent_session_id to wait_for_messages, send_message,"
    " send_thread_message, post_status, and task tools for this specific worker."
    " Do not rely on a shared current session."
)
USE_WORKER_BEARER_MARKER: Final = (
    "This local worker-bearer session marker may be passed to room tools. The supplied"
    " bearer remains the only server credential."
)
NO_CURRENT_ROOM: Final = {
    "success": False,
    "error": "No room_id provided and not currently in a room.",
    "hint": "Join a room first, or pass room_id explicitly.",
}
# Our own texts for local rooms (upstream's local-room tools were not read):
# there is no room server to keep guidelines, and a message must be from a session.
LOCAL_GUIDELINES_TEXT: Final = (
    "This room keeps its chat on this machine (chat storage: local), so it has no room server"
    " and no guidelines to read."
)
LOCAL_SENDER_TEXT: Final = (
    "Messages in a local room are sent as a registered worker: pass worker_id"
    " (or a legacy agent_session_id)."
)
# wait_for_messages without a timeout (upstream's client default).
DEFAULT_WAIT_MS: Final = 30_000
# A long poll shorter than this is a busy loop.
MIN_WAIT_MS: Final = 1_000
# The client gives the room this much beyond the poll before it gives up;
# waits over 120 s get 120 s (proxies may hold a long request's answer).
WAIT_ABORT_MARGIN_MS: Final = 5_000
LONG_WAIT_MS: Final = 120_000
LONG_WAIT_ABORT_MARGIN_MS: Final = 120_000
# Messages one call returns at most (upstream's MAX_WAIT_MESSAGES_PER_CALL).
MESSAGE_LIMIT: Final = 100
# MCP client SDKs time a request out after 60 s unless progress arrives, and a
# wait may last the poll maximum (180 s): a wait whose call carries
# _meta.progressToken reports progress this often, well inside 60 s.
PROGRESS_INTERVAL: Final = 15.0
WAIT_PROGRESS: Final = "waiting for messages"
# A registration the room holds while a name passes on (up to 15.5 s, PROTOCOL
# §7.3) would otherwise be seconds of silence: progress says why, early.
REGISTRATION_PROGRESS_INTERVAL: Final = 2.0
REGISTRATION_PROGRESS: Final = (
    "waiting for the room's answer: a name passing on from a session whose process just"
    " stopped takes up to 15.5 s"
)


def clamp_poll_timeout(timeout_ms: float | None, poll_max_ms: int) -> int:
    """The poll timeout sent to the room: ``clamp(timeout or 30 000, 1 000, cap)`` ms."""
    wanted = timeout_ms if timeout_ms else DEFAULT_WAIT_MS
    return int(min(max(wanted, MIN_WAIT_MS), poll_max_ms))


def poll_abort_after(server_timeout_ms: int) -> int:
    """Milliseconds after which the client abandons a poll of ``server_timeout_ms``."""
    margin = LONG_WAIT_ABORT_MARGIN_MS if server_timeout_ms > LONG_WAIT_MS else WAIT_ABORT_MARGIN_MS
    return server_timeout_ms + margin


async def _report_progress(ctx: ToolContext, message: str, interval: float) -> NoReturn:
    """Send ``notifications/progress`` (1, 2, 3, …) with ``message`` every ``interval`` seconds.

    The SDK sends nothing when the call carried no ``_meta.progressToken``.
    """
    beat = 0
    while True:
        await trio.sleep(interval)
        beat += 1
        await ctx.report_progress(beat, message=message)


async def _with_progress(
    ctx: ToolContext,
    wait: Callable[[], Awaitable[T]],
    *,
    message: str = WAIT_PROGRESS,
    interval: float = PROGRESS_INTERVAL,
) -> T:
    """``await wait()`` while reporting progress, so hosts that reset their timeout keep waiting.

    An exception of ``wait`` leaves as itself (not in a group), so the tool's
    expected errors still become ``isError`` results.
    """
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_report_progress, ctx, message, interval)
            result = await wait()
            nursery.cancel_scope.cancel(reason="the wait is over")
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            # Deliberate: the tool's caller sees the one error, not a group of one.
            [sole] = group.exceptions
            raise sole from None
        raise
    return result


def _without_parameter(fn: ToolFn, name: str) -> ToolFn:
    """``fn`` as a tool whose schema lacks ``name`` (it is then always None)."""
    signature = inspect.signature(fn, eval_str=True)

    @functools.wraps(fn)
    async def call(**kwargs: Any) -> CallToolResult:
        return await fn(**kwargs)

    call.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[p for p in signature.parameters.values() if p.name != name]
    )
    return call


# --- argument types (descriptions are part of the schema) --------------------------

RoomId = Annotated[str | None, Field(description="Room ID. Optional with worker_id.")]
WorkerId = Annotated[
    str | None,
    Field(description="This chat's worker handle (worker_ + 32 hex), from register_agent_session."),
]
SessionId = Annotated[
    str | None, Field(description="Legacy: a registered agent session id. Prefer worker_id.")
]


# --- the tools --------------------------------------------------------------------------


@expected_errors
async def register_agent_session(
    ctx: ToolContext,
    worker_id: Annotated[
        str | None, Field(description="A saved handle (worker_ + 32 hex) to resume.")
    ] = None,
    registration_key: Annotated[
        str | None,
        Field(
            description="A key of this chat's own, to create its worker once.",
            min_length=1,
            max_length=200,
        ),
    ] = None,
    room_id: Annotated[str | None, Field(description="The room to register in.")] = None,
    session_kind: Annotated[
        str | None, Field(description='"worker" or "controller".', pattern="^(worker|controller)$")
    ] = None,
    runtime: Annotated[str | None, Field(description="The agent runtime label.")] = None,
    display_name: Annotated[str | None, Field(description="The name to go by.")] = None,
    cwd: Annotated[str | None, Field(description="Working directory (for the git branch).")] = None,
    recover_lost_worker: Annotated[
        bool | None,
        Field(description="Recover the worker this server holds under display_name."),
    ] = None,
) -> CallToolResult:
    """Register this chat's worker in a room, or reconnect it by its worker_id."""
    state = server_state(ctx)
    if not recover_lost_worker and worker_id is None and registration_key is None:
        return await _register_legacy(state, room_id, session_kind, display_name, runtime, cwd)
    registration = await _with_progress(
        ctx,
        functools.partial(
            state.handles.register,
            room_id=room_id,
            worker_id=worker_id,
            registration_key=registration_key,
            display_name=display_name,
            runtime=runtime,
            cwd=cwd,
            recover_lost_worker=bool(recover_lost_worker),
            session_kind=session_kind,
        ),
        message=REGISTRATION_PROGRESS,
        interval=REGISTRATION_PROGRESS_INTERVAL,
    )
    session = registration.session
    payload: dict[str, Any] = {
        "success": True,
        "worker_id": registration.worker_id,
        "agent_session": registration.public_session(),
    }
    if registration.name_held_here:
        payload["name_notice"] = NAME_NOTICE.format(
            held=registration.name_held_here,
            given=session.display_name,
            worker_id=registration.worker_id,
        )
    if registration.adopted_task_leases:
        payload["resumed_work"] = _resumed_work(registration)
    payload["instruction"] = INSTRUCTION
    return ok(state, payload, session)


def _resumed_work(registration: WorkerRegistration) -> str:
    items = ", ".join(
        f"{lease['task_id']} ({lease['kind']})" for lease in registration.adopted_task_leases
    )
    return RESUMED_WORK.format(items=items)


async def _register_legacy(
    state: ServerState,
    room_id: str | None,
    session_kind: str | None,
    display_name: str | None,
    runtime: str | None,
    cwd: str | None,
) -> CallToolResult:
    """The legacy path (PROTOCOL §5.8): a session of this process, answered pretty-printed.

    Without a room (this server joins none, so none is current) the answer is
    the Node server's ``success: false``; with a worker bearer, its marker.
    """
    if blank(room_id):
        await trio.lowlevel.checkpoint()
        return ok(state, NO_CURRENT_ROOM, pretty=True)
    registration = await state.handles.register_legacy(
        room_id=room_id,
        session_kind=session_kind,
        display_name=display_name,
        runtime=runtime,
        cwd=cwd,
    )
    session = registration.session
    marker = session.session_id == WORKER_BEARER_SESSION_ID
    payload: dict[str, Any] = {"success": True}
    if marker:
        payload["worker_bearer_mode"] = True
    payload["agent_session"] = registration.public_session()
    payload["agent_session_id"] = session.session_id
    if registration.adopted_task_leases:
        payload["resumed_work"] = _resumed_work(registration)
    payload["use_agent_session_id"] = USE_WORKER_BEARER_MARKER if marker else USE_AGENT_SESSION_ID
    return ok(state, payload, session, pretty=True)


@expected_errors
async def disconnect_agent_session(
    ctx: ToolContext,
    room_id: RoomId = None,
    agent_session_id: SessionId = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """End this chat's worker session in its room and stop holding its connection."""
    state = server_state(ctx)
    ended = await state.handles.disconnect(
        worker_id=None if blank(worker_id) else worker_id,
        agent_session_id=None if blank(agent_session_id) else agent_session_id,
        room_id=None if blank(room_id) else room_id,
    )
    return ok(state, {"success": True, "agent_session": public_session(ended)}, ended)


@expected_errors
async def send_message(
    ctx: ToolContext,
    text: Annotated[
        str, Field(description="The message.", min_length=1, max_length=MAX_MESSAGE_CHARS)
    ],
    room_id: RoomId = None,
    agent_session_id: SessionId = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Send a message to a room, as this chat's worker."""
    state = server_state(ctx)
    who = Who(room_id=room_id, agent_session_id=agent_session_id, worker_id=worker_id)

    async def local(room: str, session: AgentSession | None) -> dict[str, Any]:
        if session is None:
            raise LocalChatError(LOCAL_SENDER_TEXT)
        return await state.chat.send(
            session, text, check=functools.partial(recheck, state, who, room, session)
        )

    _, session, message = await call_as(
        state, who, "POST", "messages", body={"text": text}, local=local, write=True
    )
    return ok(state, {"success": True, "message": message}, session)


def _messages_payload(answer: object, room: str, after: str | None) -> dict[str, Any]:
    """The same four fields for every read and wait, also when no message came.

    ``last_observed_message_id`` is the cursor to pass next: the last message's
    id, or the cursor given (``after``) when there was none, so a host that
    reads it after an empty wait keeps its place (None only before any).
    """
    body = answer if isinstance(answer, Mapping) else {}
    raw = body.get("messages")
    messages = [m for m in raw if isinstance(m, Mapping)] if isinstance(raw, list) else []
    ids = [m["id"] for m in messages if isinstance(m.get("id"), str)]
    return {
        "messages": messages,
        "room_id": body.get("room_id") or room,
        "truncated": bool(body.get("has_more")),
        "last_observed_message_id": ids[-1] if ids else (None if blank(after) else after),
    }


@expected_errors
async def read_messages(
    ctx: ToolContext,
    room_id: RoomId = None,
    after_message_id: Annotated[
        str | None, Field(description="Only messages after this message id.")
    ] = None,
    limit: Annotated[
        int | None, Field(description="At most this many messages (1-100).", ge=1, le=100)
    ] = None,
    agent_session_id: SessionId = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Read a room's messages after a cursor, without waiting."""
    state = server_state(ctx)
    query: dict[str, str | int] = {}
    if not blank(after_message_id):
        assert after_message_id is not None
        query["after"] = after_message_id
    query["limit"] = limit or MESSAGE_LIMIT
    query["include_prompt_only"] = 1
    who = Who(room_id=room_id, agent_session_id=agent_session_id, worker_id=worker_id)

    async def local(room: str, session: AgentSession | None) -> dict[str, Any]:
        cursor = message_cursor(after_message_id)
        return await state.chat.read(room, after=cursor, limit=limit or MESSAGE_LIMIT)

    room, session, answer = await call_as(
        state, who, "GET", f"messages?{urlencode(query)}", local=local
    )
    return ok(state, _messages_payload(answer, room, after_message_id), session)


@expected_errors
async def wait_for_messages(
    ctx: ToolContext,
    room_id: RoomId = None,
    after_message_id: Annotated[
        str | None,
        Field(description="Only messages after this message id; pass the last one you processed."),
    ] = None,
    # The MCP argument's upstream name, not a trio-style timeout parameter.
    timeout: Annotated[  # noqa: ASYNC109
        float | None,
        Field(
            description=(
                "Maximum wait in milliseconds (min 1000, capped by LETAGENTS_POLL_MAX_MS);"
                " 0 means the default, 30000."
            )
        ),
    ] = None,
    agent_session_id: SessionId = None,
    worker_id: WorkerId = None,
) -> CallToolResult:
    """Wait for new messages in a room (HTTP long poll); call it in a loop with a cursor."""
    state = server_state(ctx)
    server_timeout = clamp_poll_timeout(timeout, state.config.poll_max_ms)
    abort_ms = poll_abort_after(server_timeout)
    query: dict[str, str | int] = {}
    if not blank(after_message_id):
        assert after_message_id is not None
        query["after"] = after_message_id
    query.update(limit=MESSAGE_LIMIT, timeout=server_timeout, include_prompt_only=1)
    who = Who(room_id=room_id, agent_session_id=agent_session_id, worker_id=worker_id)

    async def local(room: str, session: AgentSession | None) -> dict[str, Any]:
        cursor = message_cursor(after_message_id)

        async def still_valid() -> bool:
            if session is None:
                await trio.lowlevel.checkpoint()
                return True
            try:
                await recheck(state, who, room, session)
            except WorkerError:
                return False
            return True

        with trio.move_on_after(server_timeout / 1000):
            return await state.chat.wait(
                room, after=cursor, limit=MESSAGE_LIMIT, still_valid=still_valid
            )
        return await state.chat.read(room, after=cursor, limit=MESSAGE_LIMIT)

    room, session, answer = await _with_progress(
        ctx,
        functools.partial(
            call_as,
            state,
            who,
            "GET",
            f"messages/poll?{urlencode(query)}",
            abort_ms=abort_ms,
            local=local,
        ),
    )
    return ok(state, _messages_payload(answer, room, after_message_id), session)


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

    async def local(room: str, session: AgentSession | None) -> Any:
        await trio.lowlevel.checkpoint()
        raise LocalChatError(LOCAL_GUIDELINES_TEXT)

    _, session, answer = await call_as(state, who, "GET", "agent-guidelines", local=local)
    return ok(state, answer, session)


# --- registration ------------------------------------------------------------------------


class ToolRegistrar(Protocol):
    """Anything tools can be registered on: the MCP server, or a recorder."""

    def add_tool(self, fn: Callable[..., Any], name: str | None = None) -> None: ...


# Session lifecycle tools: served unless a supervisor owns the lifecycle.
_SESSION_TOOLS: Final[tuple[tuple[str, ToolFn], ...]] = (
    ("register_agent_session", register_agent_session),
    ("disconnect_agent_session", disconnect_agent_session),
)
# Room tools: every one has room_id, so every one gets the facade.
_ROOM_TOOLS: Final[tuple[tuple[str, ToolFn], ...]] = (
    ("get_room_guidelines", get_room_guidelines),
    ("send_message", send_message),
    ("read_messages", read_messages),
)


def register_tools(registrar: ToolRegistrar, profile: str, provider: str | None = None) -> None:
    """Register every tool ``profile`` serves (under ``provider``): the only place that decides.

    Order is upstream's (``register-tools.ts``): agent-session tools (when the
    profile's surface has the session lifecycle), room inspection, message
    tools (``wait_for_messages`` only with the delivery loop), then the room
    turn's ``set_reply_thread`` and, for the provider ``cursor``,
    ``complete_room_turn``.
    """
    surface = tool_surface(profile)
    tools: list[tuple[str, ToolFn]] = []
    if surface.session_lifecycle:
        tools.extend(_SESSION_TOOLS)
    tools.extend(_ROOM_TOOLS)
    if surface.delivery_loop:
        tools.append(("wait_for_messages", wait_for_messages))
    if surface.reply_thread:
        tools.append(("set_reply_thread", set_reply_thread))
        if provider == CURSOR_PROVIDER:
            tools.append(("complete_room_turn", complete_room_turn))
    for name, fn in tools:
        facade = profile in FACADE_PROFILES and name != "register_agent_session"
        has_worker_id = "worker_id" in inspect.signature(fn).parameters
        if has_worker_id and not facade and name != "register_agent_session":
            fn = _without_parameter(fn, "worker_id")
        registrar.add_tool(fn, name=name)


@final
class _Recorder:
    def __init__(self) -> None:
        self.names: list[str] = []

    def add_tool(self, fn: Callable[..., Any], name: str | None = None) -> None:
        self.names.append(name or fn.__name__)


def registered_tool_names(profile: str, provider: str | None = None) -> list[str]:
    """The sorted names of the tools :func:`register_tools` registers for ``profile``."""
    recorder = _Recorder()
    register_tools(recorder, profile, provider)
    return sorted(recorder.names)
