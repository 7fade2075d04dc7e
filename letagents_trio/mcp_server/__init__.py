"""The letagents MCP server for MCP hosts, built on the ``mcp`` SDK and run under trio.

Run it with ``letagents-trio mcp`` or ``python -m letagents_trio.mcp_server``
(configuration from the environment; see ``docs/mcp-hosts.md``), or build one
in-process with :func:`create_server` and connect ``mcp.Client(server)`` to it.

Public: what an MCP host or an embedder builds and reads. :class:`ServerConfig`
(``ServerConfig.from_env()`` reads the environment the Node server reads),
:func:`create_server` and the :class:`LetAgentsMCPServer` it returns, the
:class:`ServerState` its lifespan yields to tools, and :data:`READINESS_URI`,
the resource a host reads to learn which tools are served.
"""

from .._extras import missing_extra as _missing_extra

try:
    from ._config import ServerConfig as ServerConfig
    from ._facade import ServerState as ServerState
    from ._server import READINESS_URI as READINESS_URI
    from ._server import LetAgentsMCPServer as LetAgentsMCPServer
    from ._server import create_server as create_server
except ModuleNotFoundError as _error:
    # Without its extra: one plain line naming it and how to install it.
    raise _missing_extra(_error, what="letagents_trio.mcp_server", extra="mcp") from None

__all__ = [
    "READINESS_URI",
    "LetAgentsMCPServer",
    "ServerConfig",
    "ServerState",
    "create_server",
]

from .._util import fixup_module_metadata as _fixup_module_metadata

_fixup_module_metadata(__name__, globals())
del _fixup_module_metadata
