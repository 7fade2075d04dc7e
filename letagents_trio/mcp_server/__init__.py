"""The letagents MCP server for MCP hosts, built on the ``mcp`` SDK and run under trio.

Run it with ``letagents-trio mcp`` or ``python -m letagents_trio.mcp_server``
(configuration from the environment; see ``docs/mcp-hosts.md``), or build one
in-process with :func:`create_server` and connect ``mcp.Client(server)`` to it.
"""

from ..workers._wire import public_session as public_session
from ._config import ServerConfig as ServerConfig
from ._main import RUNTIME_CONTRACT_ARG as RUNTIME_CONTRACT_ARG
from ._main import main as main
from ._main import runtime_contract as runtime_contract
from ._server import READINESS_RESOURCE_NAME as READINESS_RESOURCE_NAME
from ._server import READINESS_URI as READINESS_URI
from ._server import LetAgentsMCPServer as LetAgentsMCPServer
from ._server import create_server as create_server
from ._server import readiness_text as readiness_text
from ._tools import ServerState as ServerState
from ._tools import clamp_poll_timeout as clamp_poll_timeout
from ._tools import poll_abort_after as poll_abort_after
from ._tools import registered_tool_names as registered_tool_names

__all__ = [
    "READINESS_RESOURCE_NAME",
    "READINESS_URI",
    "RUNTIME_CONTRACT_ARG",
    "LetAgentsMCPServer",
    "ServerConfig",
    "ServerState",
    "clamp_poll_timeout",
    "create_server",
    "main",
    "poll_abort_after",
    "public_session",
    "readiness_text",
    "registered_tool_names",
    "runtime_contract",
]
