"""letagents-trio: a trio-native connection manager for letagents rooms.

The core, what an embedder imports: the connection manager and its holders,
the policy, the room client, sessions, events and errors. Names are re-exported
from private modules, one concern each; data flows session → manager → holder →
connector → room (see ``docs/architecture.md``). Above the core, and never
imported by it: :mod:`letagents_trio.workers` (the Node-compatible host layer:
worker handles, the state file, local chat), :mod:`letagents_trio.mcp_server`,
:mod:`letagents_trio.room_server` and :mod:`letagents_trio.testing`.
"""

from ._client import RoomClient as RoomClient
from ._connector import AttemptRejected as AttemptRejected
from ._connector import ProcessConnector as ProcessConnector
from ._connector import ProcessStream as ProcessStream
from ._connector import StreamNews as StreamNews
from ._errors import ApiError as ApiError
from ._errors import IneligibleSession as IneligibleSession
from ._errors import LetAgentsError as LetAgentsError
from ._errors import RoomUnreachable as RoomUnreachable
from ._errors import StreamProtocolError as StreamProtocolError
from ._events import EventKind as EventKind
from ._events import HolderEvent as HolderEvent
from ._goodbye import ExitAnnouncement as ExitAnnouncement
from ._holder import HolderStatistics as HolderStatistics
from ._holder import HolderStatus as HolderStatus
from ._holder import ProcessHolder as ProcessHolder
from ._manager import ConnectionManager as ConnectionManager
from ._manager import HolderStateHooks as HolderStateHooks
from ._manager import ManagerStatistics as ManagerStatistics
from ._manager import open_connection_manager as open_connection_manager
from ._manager import serve_connection_manager as serve_connection_manager
from ._policy import HoldPolicy as HoldPolicy
from ._policy import Outcome as Outcome
from ._refusals import StateHooks as StateHooks
from ._session import AgentSession as AgentSession
from ._sse_connector import SSEConnector as SSEConnector
from ._util import fixup_module_metadata as _fixup_module_metadata
from ._version import __version__ as __version__
from ._websocket import AutoConnector as AutoConnector
from ._websocket import WebSocketConnector as WebSocketConnector

__all__ = [
    "AgentSession",
    "ApiError",
    "AttemptRejected",
    "AutoConnector",
    "ConnectionManager",
    "EventKind",
    "ExitAnnouncement",
    "HoldPolicy",
    "HolderEvent",
    "HolderStateHooks",
    "HolderStatistics",
    "HolderStatus",
    "IneligibleSession",
    "LetAgentsError",
    "ManagerStatistics",
    "Outcome",
    "ProcessConnector",
    "ProcessHolder",
    "ProcessStream",
    "RoomClient",
    "RoomUnreachable",
    "SSEConnector",
    "StateHooks",
    "StreamNews",
    "StreamProtocolError",
    "WebSocketConnector",
    "__version__",
    "open_connection_manager",
    "serve_connection_manager",
]

_fixup_module_metadata(__name__, globals())
del _fixup_module_metadata
