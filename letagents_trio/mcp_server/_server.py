"""The letagents MCP server: the SDK's server, a lifespan, and a trio stdio loop.

:func:`create_server` builds a :class:`LetAgentsMCPServer` (the SDK's
``MCPServer``) from a :class:`ServerConfig`: the tools of
:func:`register_tools`, the readiness resource, the ``room_messages``
resource (``letagents://rooms/{room_id}/messages``: a room's whole history,
paged as ``read_messages`` with ``limit`` 0 pages it (at most its
``MAX_READ`` newest), read as the one worker this server holds in that room,
else as the owner; a room the room server does not know is a not-found error,
``-32602``), and a lifespan that owns the connection
manager. Nothing is global: two servers in one process share nothing but the
state file.

Arguments a tool's schema refuses are answered as an ``isError`` result that
names each field and what is wrong with it (:func:`arguments_refused_text`),
never the validator's report; so is an argument no field of the tool takes
(:func:`unknown_arguments_text`), which is never silently dropped.

The lifespan, entered by the SDK around each served connection, opens in order
the local rooms' chat (:class:`~letagents_trio.LocalChat`, whose SQLite file is
opened by its first call), the room client, :func:`open_connection_manager`
(its nursery holds every process connection) and the worker handles, and
yields a :class:`ServerState` to the tools. Leaving it, for whatever reason,
unwinds in reverse: the manager closes every held stream, then announces every
exit under ONE shielded 1.5 s deadline, then the client closes, then the chat
database.

:meth:`LetAgentsMCPServer.run_stdio_async` is the host-facing loop, meant for
``trio.run(server.run_stdio_async)``:

* stdin is read by trio (:func:`claim_stdin`), so every wait is cancellable;
  stdout is the SDK's (diverted to stderr for anything but protocol);
* SIGINT and SIGTERM cancel the serving scope: the dispatcher stops taking
  calls and cancels those in flight, then the lifespan unwinds as above. The
  signal receiver stays open until the goodbye is over, so a second signal
  (a host, or a user, pressing Ctrl-C again) is logged and changes nothing;
  a third forces an exit at once, 128 + its number, and says so;
* stdin at end of file (the host closed it) ends the SDK's read loop, which
  cancels in-flight calls and leaves the lifespan the same way.

Either way the coroutine returns normally, so the process exits 0, at most
the exit deadline after the trigger.
"""

from __future__ import annotations

import json
import logging
import os
import signal
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import TYPE_CHECKING, Any, Final, NoReturn, cast, final

import trio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import (
    ResourceError,
    ResourceNotFoundError,
    ToolError,
    UnexpectedToolError,
)
from mcp.server.runner import serve_dual_era_loop
from mcp.server.stdio import stdio_server
from pydantic import ValidationError

from .._client import RoomClient
from .._errors import ApiError, LetAgentsError
from .._manager import open_connection_manager
from .._version import __version__
from ..workers._acting import held_session
from ..workers._chat_storage import ChatStorage
from ..workers._handles import WorkerHandles
from ..workers._local_chat import LocalChat
from ..workers._room_work import RoomWork
from ..workers._state import LocalStateStore
from ..workers._wire import MCP_SERVER_WORDING
from ._config import ServerConfig
from ._facade import (
    ServerState,
    ToolContext,
    Who,
    guarded_json,
    server_state,
)
from ._instructions import INSTRUCTIONS, instructions_for
from ._message_tools import recent_messages
from ._profiles import WORKER
from ._stdio import claim_stdin
from ._tools import STRICT_TOOLS, register_tools, registered_tool_names

if TYPE_CHECKING:
    import httpx2
    from mcp_types import CallToolResult, InputRequiredResult
    from mcp_types import Tool as MCPTool

__all__ = [
    "INSTRUCTIONS",
    "READINESS_RESOURCE_NAME",
    "READINESS_URI",
    "ROOM_MESSAGES_NAME",
    "ROOM_MESSAGES_URI",
    "SERVER_NAME",
    "LetAgentsMCPServer",
    "arguments_refused_text",
    "create_server",
    "readiness_text",
    "unknown_arguments_text",
]

logger = logging.getLogger("letagents_trio.mcp_server")

# The name hosts show for this server.
SERVER_NAME: Final = "letagents"
# Upstream's readiness resource (PROTOCOL §5.1).
READINESS_URI: Final = "letagents://runtime/readiness"
READINESS_RESOURCE_NAME: Final = "runtime_readiness"
# Upstream's room messages resource.
ROOM_MESSAGES_URI: Final = "letagents://rooms/{room_id}/messages"
ROOM_MESSAGES_NAME: Final = "room_messages"
# The room's answer for a room it does not know.
NOT_FOUND: Final = 404
# The signals a host stops its MCP server with.
SHUTDOWN_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM)
# The signal that forces an exit without waiting for the goodbye (the first
# stops, the second is patience, the third is an order), as servers commonly do.
FORCE_EXIT_SIGNAL_COUNT: Final = 3
# Exit status of a forced exit: the shell's 128 + signal number.
SIGNAL_EXIT_BASE: Final = 128


def arguments_refused_text(tool: str, error: ValidationError) -> str:
    """``send_message: text: String should have at least 1 character. …``: each argument's fault."""
    faults = "; ".join(
        f"{'.'.join(str(part) for part in item['loc']) or 'arguments'}: {item['msg']}"
        for item in error.errors(include_url=False)
    )
    return f"{tool}: {faults}. Correct the arguments and call {tool} again."


# An unknown argument's name is shown at most this long, and at most this many names.
_SHOWN_NAME_CHARS: Final = 64
_SHOWN_NAMES: Final = 8


def unknown_arguments_text(tool: str, names: list[str]) -> str:
    """``update_task: no argument named 'statsu' ...``: the arguments no field of ``tool`` takes."""
    shown = ", ".join(repr(name[:_SHOWN_NAME_CHARS]) for name in names[:_SHOWN_NAMES])
    more = f" and {len(names) - _SHOWN_NAMES} more" if len(names) > _SHOWN_NAMES else ""
    plural = "s" if len(names) > 1 else ""
    return (
        f"{tool}: unknown argument{plural} {shown}{more}: {tool} takes no such field."
        f" Correct the arguments and call {tool} again."
    )


def readiness_text(config: ServerConfig) -> str:
    """The readiness resource's text: compact JSON naming the registered tools."""
    return json.dumps(
        {
            "format": 1,
            "profile": config.profile,
            "provider": config.provider,
            "tools": registered_tool_names(config.profile, config.provider),
        },
        separators=(",", ":"),
    )


@contextmanager
def _root_logging_kept() -> Iterator[None]:
    """Undo what the SDK's server does to the root logger while it is built.

    ``MCPServer()`` calls ``logging.basicConfig`` (a rich handler on stderr, at
    INFO): a host that builds the server in-process, and had not configured
    logging yet, would find every library's INFO lines on its stderr. A
    library leaves process-wide logging to the program (``letagents-trio mcp``
    configures its own, before building the server).
    """
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    try:
        yield
    finally:
        root.setLevel(level)
        root.handlers[:] = handlers


@final
class LetAgentsMCPServer(MCPServer[ServerState]):
    """The letagents MCP server. Build it with :func:`create_server`.

    Attributes:
        config: the configuration it was built from.
        refusal: why the configuration cannot work (every tool call answers
            it as an error), or None.
    """

    def __init__(
        self,
        config: ServerConfig,
        *,
        transport: httpx2.AsyncBaseTransport | None = None,
        refusal: str | None = None,
    ) -> None:
        self.config = config
        self.refusal = refusal
        self._transport = transport
        with _root_logging_kept():
            super().__init__(
                SERVER_NAME,
                version=__version__,
                instructions=instructions_for(config.profile, config.provider),
                lifespan=self._lifespan,
            )
        register_tools(self, config.profile, config.provider)
        text = readiness_text(config)

        @self.resource(
            READINESS_URI,
            name=READINESS_RESOURCE_NAME,
            description="Public capability metadata; reading it grants nothing.",
            mime_type="application/json",
        )
        def runtime_readiness() -> str:
            return text

        @self.resource(
            ROOM_MESSAGES_URI,
            name=ROOM_MESSAGES_NAME,
            description=(
                "A room's whole message history, oldest first, as read_messages answers it:"
                " read as the one worker this server holds in that room, else as the owner."
            ),
            mime_type="application/json",
        )
        async def room_messages(room_id: str, ctx: ToolContext) -> str:
            if self.refusal is not None:
                raise ResourceError(self.refusal)
            return await _room_messages(server_state(ctx), room_id)

    def __repr__(self) -> str:
        return (
            f"<LetAgentsMCPServer api_url={self.config.api_url!r} profile={self.config.profile!r}>"
        )

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[ServerState, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        """The SDK's, but arguments the tool's schema refuses are answered in plain words.

        The SDK answers pydantic's report (types, a link to its docs) as the
        tool's error, and drops an argument no field takes; a chat reads which
        argument and what is wrong instead, and nothing is called.

        A server built with a ``refusal`` answers every call with it instead.
        """
        if self.refusal is not None:
            raise ToolError(self.refusal)
        schema = self._tool_input_schema(name)
        if schema is not None:
            unknown = sorted(set(arguments) - set(schema.get("properties", {})))
            if unknown:
                raise ToolError(unknown_arguments_text(name, unknown))
        try:
            return await super().call_tool(name, arguments, context)
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(exc, UnexpectedToolError) or not isinstance(cause, ValidationError):
                raise
            raise ToolError(arguments_refused_text(name, cause)) from cause

    async def list_tools(self) -> list[MCPTool]:
        """The SDK's, with ``additionalProperties: false`` in the schema of a strict tool."""
        tools = await super().list_tools()
        return [
            tool.model_copy(
                update={"input_schema": {**tool.input_schema, "additionalProperties": False}}
            )
            if tool.name in STRICT_TOOLS
            else tool
            for tool in tools
        ]

    @asynccontextmanager
    async def _lifespan(self, server: MCPServer[ServerState]) -> AsyncIterator[ServerState]:
        config = self.config
        store = LocalStateStore(config.state_path)
        snapshot = store.read()
        if not snapshot.complete:
            logger.error(
                "the state file %s is damaged (%s): the sign-in and worker handles stored"
                " there cannot be read, and nothing is written over it; restore or repair it",
                config.state_path,
                snapshot.problem,
            )
        chat = LocalChat(config.local_chat_path)
        try:
            async with (
                RoomClient(
                    config.api_url,
                    owner_token=config.room_credential(store),
                    transport=self._transport,
                    # A 401 clears the owner's stored sign-in or ends a stored
                    # session in owner mode only, as in the Node client.
                    state=store if config.owner_mode else None,
                ) as client,
                open_connection_manager(
                    client, state=store, owner_mode=config.owner_mode
                ) as manager,
            ):
                handles = WorkerHandles(
                    client=client,
                    state=store,
                    manager=manager,
                    chat_storage=ChatStorage(config.chat_storage_settings_path),
                    owner_mode=config.owner_mode,
                    runtime_label=config.runtime_label,
                    ide_label=config.ide_label,
                    token_origin=config.token_origin,
                    wording=MCP_SERVER_WORDING,
                )
                if self.refusal is None:
                    logger.info("serving %s (profile %s)", config.api_url, config.profile)
                else:
                    logger.error("every tool call answers: %s", self.refusal)
                try:
                    yield ServerState(
                        config=config,
                        client=client,
                        store=store,
                        manager=manager,
                        handles=handles,
                        chat=chat,
                        # With a worker bearer, the bearer alone is every call's credential.
                        work=RoomWork(client, bearer_only=config.mode == WORKER),
                    )
                finally:
                    held = len(manager.holders)
                    logger.info(
                        "closing: announcing the exit of %d held %s",
                        held,
                        "session" if held == 1 else "sessions",
                    )
        finally:
            chat.close()

    async def run_stdio_async(self) -> None:
        """Serve MCP on stdin/stdout until the host stops it; then announce exits.

        Stops on SIGINT, SIGTERM, or stdin at end of file; returns normally in
        every case (the process then exits 0). The lifespan is entered here,
        *outside* the serving scope, so that a stop cancels only the serving
        (the dispatcher and the calls in flight) while the held connections
        stay intact until the connection manager closes them itself and
        announces their exits, connection ids included.

        Cancellation:
            Cancelled from outside (an embedding host), it stops the same way,
            except that the manager then announces from inside the
            cancellation (shielded, within the exit deadline).
        """
        lowlevel = self._lowlevel_server
        # The receiver outlives the lifespan: while the goodbye runs, further
        # signals are counted here instead of reaching trio's default
        # KeyboardInterrupt (or the default SIGTERM action, which kills).
        with trio.open_signal_receiver(*SHUTDOWN_SIGNALS) as signals:
            async with trio.open_nursery() as watching:
                serving = trio.CancelScope()
                watching.start_soon(_watch_signals, signals, serving)
                async with lowlevel.lifespan(lowlevel) as state:
                    with serving:
                        with claim_stdin() as stdin:
                            async with stdio_server(stdin=cast("Any", stdin)) as (
                                read_stream,
                                write_stream,
                            ):
                                await serve_dual_era_loop(
                                    lowlevel,
                                    read_stream,
                                    write_stream,
                                    lifespan_state=state,
                                    init_options=lowlevel.create_initialization_options(),
                                )
                        logger.info("stdin closed: stopping")
                watching.cancel_scope.cancel(reason="the goodbye is over")


async def _room_messages(state: ServerState, room_id: str) -> str:
    """The ``room_messages`` resource's text, read as the worker held there, else the owner.

    Raises:
        ResourceNotFoundError: the room server does not know the room (its 404).
        ResourceError: the room, the state file or a rule refused the read otherwise (its text).
    """
    try:
        snapshot = state.store.read()
        held = held_session(snapshot.data, state.handles.pinned, room_id)
        who = Who(
            room_id=room_id,
            agent_session_id=None if held is None else held.session_id,
            worker_id=None,
        )
        payload, session = await recent_messages(state, who, 0)
    except ApiError as exc:
        if exc.status == NOT_FOUND:
            raise ResourceNotFoundError(str(exc)) from None
        raise ResourceError(str(exc)) from None
    except LetAgentsError as exc:
        raise ResourceError(str(exc)) from None
    return guarded_json(state, payload, session)


async def _watch_signals(signals: AsyncIterator[int], serving: trio.CancelScope) -> None:
    """The first signal cancels ``serving``; the second is logged; the third forces an exit."""
    count = 0
    async for signum in signals:
        count += 1
        name = signal.Signals(signum).name
        if count == 1:
            logger.info("%s received: stopping", name)
            serving.cancel(reason=f"{name} received")
        elif count < FORCE_EXIT_SIGNAL_COUNT:
            logger.warning(
                "%s received: goodbye in progress (announcing exits); signal again to force",
                name,
            )
        else:
            logger.warning("%s received: forcing an exit before every exit is announced", name)
            _force_exit(SIGNAL_EXIT_BASE + signum)


def _force_exit(code: int) -> NoReturn:  # pragma: no cover - ends the process
    logging.shutdown()
    os._exit(code)


def create_server(
    config: ServerConfig | None = None,
    *,
    transport: httpx2.AsyncBaseTransport | None = None,
    refusal: str | None = None,
) -> LetAgentsMCPServer:
    """Build the letagents MCP server.

    Args:
        config: what to serve; :meth:`ServerConfig.from_env` when None.
        transport: an httpx2 transport for the room API instead of the network
            (for example a :class:`~letagents_trio.testing.FakeRoom`'s).
        refusal: when set, why the configuration cannot work: the server lists
            its tools and resources as usual but answers every tool call (and
            every room read) with this text as an error, so a host shows the
            user what to fix instead of a server that closed at start.

    Returns:
        A server to run with ``trio.run(server.run_stdio_async)``, or to
        connect to in-process with ``mcp.Client(server)``.
    """
    return LetAgentsMCPServer(
        config or ServerConfig.from_env(), transport=transport, refusal=refusal
    )
