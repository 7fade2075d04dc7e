"""The worker_id facade, the arguments and the results every MCP tool shares (§5.1, §6.6).

**Who a tool acts as.** In the profiles ``interactive_desktop`` and
``autonomous_mcp_worker`` every room tool except ``register_agent_session``
takes an optional ``worker_id``. Given one, no ``agent_session_id`` may be
given too; the call runs *as* the worker: :meth:`WorkerHandles.acting_as`
checks the worker's connection, yields its session (whose room replaces
``room_id``), and re-checks the connection from disk after the call. A legacy
``agent_session_id`` that names a durable worker's session goes through the
same guard. With neither, the call is the owner's own, in ``room_id``. In
other profiles ``worker_id`` is not part of any schema (see ``_tools.py``).

**Whose credential** (the config's ``mode``, ``_profiles.py``). With a worker
bearer, no ``worker_id`` and no ``agent_session_id`` (or the marker
``worker_bearer``) the call acts as the marker session, and every request
carries the bearer alone: no session headers, whoever the call acts as
(``buildAgentDeliveryHeaders``; the host layer's ``RoomWork.credentials`` is
where that is chosen). In supervised mode no request is sent at all (this
server has no supervisor bridge to borrow a credential from).

**Writes need a worker.** A tool that writes to a room (a message, a status,
a task change, a lease action, a record) runs only as a registered worker
session (``requireWorkerAgentSession``): in owner mode, with neither
``worker_id`` nor ``agent_session_id``, it fails with the Node client's text
(``WORKER_SESSION_REQUIRED_TEXT``) before
anything is sent; a controller session fails with
``WORKER_KIND_REQUIRED_TEXT``. In a local
room every write needs a worker session.

**One room call** (:func:`call_as`): the tool's ``remote`` call, made with the
host layer's :class:`~letagents_trio.workers._room_work.RoomWork` as an
:class:`~letagents_trio.workers._room_work.Acting` (the room, and the session
the call speaks for); or, in a room the chat-storage settings mark
``local``, the tool's local answer inside the same guard, with no HTTP.

**The result**: compact JSON text. Expected failures (a worker rule, a room
answer, an unreachable room, a damaged state file) become an ``isError``
result whose text is the error's message, upstream's exact text where one
exists (:func:`expected_errors`). Every result text passes a last guard that
replaces the owner token and the session token of the call, should either
ever appear (they cannot by construction; the guard is cheap).
"""

from __future__ import annotations

import functools
import hmac
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final, TypeVar, final

import attrs
import trio
from mcp.server.mcpserver import Context
from mcp_types import CallToolResult, TextContent
from pydantic import Field

from .._errors import LetAgentsError, LocalChatError, WorkerError
from .._redact import redact
from ..workers._legacy import WORKER_BEARER_SESSION_ID
from ..workers._room_work import Acting
from ..workers._wire import (
    CONNECTION_REPLACED_OR_DISCONNECTED_TEXT,
    WORKER_KIND_REQUIRED_TEXT,
    WORKER_SESSION_REQUIRED_TEXT,
)
from ..workers._workspace import WorkspaceCaptures
from ._chat_context import ChatContext
from ._profiles import OWNER, SUPERVISED, SUPERVISED_CREDENTIAL_TEXT, WORKER

if TYPE_CHECKING:
    from .._client import RoomClient
    from .._manager import ConnectionManager
    from .._session import AgentSession
    from ..workers._handles import WorkerHandles
    from ..workers._local_chat import LocalChat
    from ..workers._room_work import RoomWork
    from ..workers._state import LocalStateStore
    from ._config import ServerConfig

__all__ = [
    "NO_ROOM_TEXT",
    "Deprecated",
    "LocalCall",
    "RoomId",
    "ServerState",
    "SessionId",
    "ToolContext",
    "ToolFn",
    "Who",
    "WorkerId",
    "blank",
    "call_as",
    "expected_errors",
    "failed",
    "guarded_json",
    "local_refusal",
    "ok",
    "recheck",
    "require_worker",
    "server_state",
]

T = TypeVar("T")

logger = logging.getLogger("letagents_trio.mcp_server")

# Our own text (upstream's default-room lookup has no equivalent here).
NO_ROOM_TEXT: Final = "Pass room_id, or the worker_id of a worker registered in this process."

# --- the arguments every room tool takes (descriptions are part of the schema) -----------

RoomId = Annotated[str | None, Field(description="Room ID. Optional with worker_id.")]
WorkerId = Annotated[
    str | None,
    Field(description="This chat's worker handle (worker_ + 32 hex), from register_agent_session."),
]
SessionId = Annotated[
    str | None, Field(description="Legacy: a registered agent session id. Prefer worker_id.")
]
# A field Node's tool still takes but no longer reads (conversation_id, sender, created_by...):
# accepted and ignored, as Node does, so a Node-shaped call is never refused for it.
Deprecated = Annotated[str | None, Field(description="Deprecated; accepted and ignored.")]


@final
@attrs.define(eq=False)
class ServerState:
    """What the server's lifespan yields: one per served connection.

    Attributes:
        config: the configuration read at start.
        client: the room client (owner token inside).
        store: the shared local state file.
        manager: the connection manager holding process connections.
        handles: the worker handles (registration, the facade's guard).
        chat: the local rooms' chat (one per server; closed when the lifespan ends).
        work: the room-work routes (messages, the board, memory), over ``client``.
        context: the room joined here and the conversations' names (``_chat_context``).
        captures: the workspace captures of the state file's workers.
    """

    config: ServerConfig
    client: RoomClient
    store: LocalStateStore
    manager: ConnectionManager
    handles: WorkerHandles
    chat: LocalChat
    work: RoomWork
    context: ChatContext = attrs.field(factory=ChatContext)
    captures: WorkspaceCaptures = attrs.field(
        default=attrs.Factory(
            lambda self: WorkspaceCaptures(Path(f"{self.store.path}.workspaces")), takes_self=True
        )
    )


ToolContext = Context[ServerState, Any]


def server_state(ctx: ToolContext) -> ServerState:
    """The state the lifespan yielded, from a tool call's context."""
    return ctx.request_context.lifespan_context


# --- results -------------------------------------------------------------------------


def _compact(value: object) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _guard(text: str, state: ServerState, sessions: Sequence[AgentSession | None]) -> str:
    secrets = [state.config.token, state.config.worker_bearer, state.store.owner_token()]
    secrets.extend(s.session_token for s in sessions if s is not None)
    redacted = redact(text, secrets)
    if redacted != text:
        logger.error("a tool result carried a credential; it was redacted")
    return redacted


def guarded_json(state: ServerState, payload: object, *sessions: AgentSession | None) -> str:
    """``payload`` as compact JSON, guarded against the owner token and the sessions' tokens."""
    return _guard(_compact(payload), state, sessions)


def ok(state: ServerState, payload: object, *sessions: AgentSession | None) -> CallToolResult:
    """A successful result: ``payload`` as :func:`guarded_json` writes it."""
    text = guarded_json(state, payload, *sessions)
    return CallToolResult(content=[TextContent(type="text", text=text)])


def failed(state: ServerState, text: str) -> CallToolResult:
    """An ``isError`` result with ``text`` (guarded against the owner token)."""
    return CallToolResult(
        content=[TextContent(type="text", text=_guard(text, state, []))], is_error=True
    )


ToolFn = Callable[..., Awaitable[CallToolResult]]


def expected_errors(fn: ToolFn) -> ToolFn:
    """Turn the library's expected errors into ``isError`` results with their text.

    The text is the error's message and then its notes, one a line (a damaged
    state file's note names the file and what is wrong with it).
    """

    @functools.wraps(fn)
    async def call(*args: Any, **kwargs: Any) -> CallToolResult:
        try:
            return await fn(*args, **kwargs)
        except LetAgentsError as exc:
            ctx = kwargs["ctx"]
            logger.info("tool %s failed: %s", fn.__name__, type(exc).__name__)
            text = "\n".join([str(exc), *getattr(exc, "__notes__", ())])
            return failed(server_state(ctx), text)

    return call


# --- the facade ---------------------------------------------------------------------


def blank(value: str | None) -> bool:
    """Whether an optional argument is absent or only whitespace (then it counts as not given)."""
    return value is None or not value.strip()


@final
@attrs.frozen(kw_only=True)
class Who:
    """Who a room tool acts as: the three facade arguments, as given."""

    room_id: str | None
    agent_session_id: str | None
    worker_id: str | None


def _as_marker(state: ServerState, who: Who) -> bool:
    """Whether a worker bearer's call acts as its marker session (no worker, no other session)."""
    return (
        state.config.mode == WORKER
        and blank(who.worker_id)
        and (blank(who.agent_session_id) or who.agent_session_id == WORKER_BEARER_SESSION_ID)
    )


@asynccontextmanager
async def _acting(state: ServerState, who: Who) -> AsyncIterator[tuple[str, AgentSession | None]]:
    """Resolve who a room tool acts as; yields ``(room_id, session or None)``.

    A ``worker_id`` or ``agent_session_id`` goes through
    :meth:`WorkerHandles.acting_as` (which refuses both at once, guards
    durable workers before and after the block, and finds legacy sessions in
    the state file). With neither, the call is the owner's own, in ``room_id``.

    Raises:
        WorkerError: the facade's rules refused the call.
    """
    room = None if blank(who.room_id) else who.room_id
    if room is not None and _as_marker(state, who):
        await trio.lowlevel.checkpoint()
        yield room, state.handles.worker_bearer_session(room)
        return
    if not blank(who.worker_id) or not blank(who.agent_session_id):
        async with state.handles.acting_as(
            worker_id=None if blank(who.worker_id) else who.worker_id,
            agent_session_id=None if blank(who.agent_session_id) else who.agent_session_id,
            room_id=room,
        ) as session:
            yield session.room_id, session
        return
    if room is None:
        raise WorkerError(NO_ROOM_TEXT)
    await trio.lowlevel.checkpoint()
    yield room, None


async def recheck(state: ServerState, who: Who, room: str, session: AgentSession) -> None:
    """The §6.6 connection check again, now: is ``session`` still this worker's, here?

    Raises:
        WorkerError: the worker's connection was replaced (by another process)
            or disconnected since ``session`` was read.
        StateUnavailable: the state file is damaged.

    Cancellation:
        A checkpoint; nothing to undo.
    """
    async with state.handles.acting_as(
        worker_id=None if blank(who.worker_id) else who.worker_id,
        agent_session_id=None if blank(who.agent_session_id) else who.agent_session_id,
        room_id=room,
    ) as now:
        if not hmac.compare_digest(now.session_token, session.session_token):
            raise WorkerError(CONNECTION_REPLACED_OR_DISCONNECTED_TEXT)


def require_worker(session: AgentSession | None) -> AgentSession:
    """``session`` when it is a worker's: writes need one (the Node client's rule).

    Raises:
        WorkerError: ``WORKER_SESSION_REQUIRED_TEXT`` without a session,
            ``WORKER_KIND_REQUIRED_TEXT`` for a controller's.
    """
    if session is None:
        raise WorkerError(WORKER_SESSION_REQUIRED_TEXT)
    if session.session_kind != "worker":
        raise WorkerError(WORKER_KIND_REQUIRED_TEXT)
    return session


LocalCall = Callable[[str, "AgentSession | None"], Awaitable[T]]
"""How a tool answers in a local room: ``(room_id, session or None) -> answer``."""


def local_refusal(text: str) -> LocalCall[Any]:
    """A local answer that refuses with ``text`` (what local rooms do not keep)."""

    async def refuse(room: str, session: AgentSession | None) -> Any:
        await trio.lowlevel.checkpoint()
        raise LocalChatError(text)

    return refuse


async def call_as(
    state: ServerState,
    who: Who,
    *,
    remote: Callable[[Acting], Awaitable[T]],
    local: LocalCall[T],
    write: bool = False,
) -> tuple[str, AgentSession | None, T]:
    """One room call under the facade: ``remote`` as the resolved :class:`Acting`, or ``local``.

    Returns ``(room_id, session or None, the answer)``. With ``write``, in
    owner mode or a local room, only a worker session may make the call
    (:func:`require_worker`), checked before anything is sent or written. In a
    local room nothing is sent: ``local(room, session)`` answers instead, inside
    the same guard.

    Raises:
        WorkerError: the facade's rules refused the call (a write without a
            worker session, supervised mode: before anything is sent).
        ApiError: the room refused it.
        RoomUnreachable: the room could not be reached, or did not answer in time.
        LocalChatError: the local chat refused it (see ``local``).

    Cancellation:
        A checkpoint; cancelled, the room request is closed with it (a local
        call writes nothing it had not committed).
    """
    async with _acting(state, who) as (room, session):
        if state.handles.is_local_room(room):
            if write:
                require_worker(session)
            return room, session, await local(room, session)
        mode = state.config.mode
        if mode == SUPERVISED:
            raise WorkerError(SUPERVISED_CREDENTIAL_TEXT)
        if write and mode == OWNER:
            require_worker(session)
        return room, session, await remote(Acting(room_id=room, session=session))
