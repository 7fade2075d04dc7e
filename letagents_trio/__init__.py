"""letagents-trio: a trio-native connection manager for letagents rooms.

Layout: the public names below are re-exported from private modules, one
concern each (``_policy``, ``_api``, ``_transport``, ``_holder``,
``_manager``, ``_state``, ``_identity``, ``_names``, ``_sse``); the reference
room lives in :mod:`letagents_trio.room_server` and the testing kit in
:mod:`letagents_trio.testing`, neither imported from here.
"""

from ._api import RoomClient as RoomClient
from ._api import StateHooks as StateHooks
from ._errors import ApiError as ApiError
from ._errors import LetAgentsError as LetAgentsError
from ._errors import LocalChatBusy as LocalChatBusy
from ._errors import LocalChatError as LocalChatError
from ._errors import LocalChatUnavailable as LocalChatUnavailable
from ._errors import RoomUnreachable as RoomUnreachable
from ._errors import StateError as StateError
from ._errors import StateLockTimeout as StateLockTimeout
from ._errors import StateUnavailable as StateUnavailable
from ._errors import StreamProtocolError as StreamProtocolError
from ._errors import WorkerError as WorkerError
from ._events import EventKind as EventKind
from ._events import HolderEvent as HolderEvent
from ._holder import HolderStatistics as HolderStatistics
from ._holder import HolderStatus as HolderStatus
from ._holder import ProcessHolder as ProcessHolder
from ._identity import MachineFacts as MachineFacts
from ._identity import detect_ide_label as detect_ide_label
from ._identity import detect_runtime_label as detect_runtime_label
from ._identity import local_host_id as local_host_id
from ._identity import process_host_id as process_host_id
from ._identity import registration_liveness as registration_liveness
from ._local_chat import LocalChat as LocalChat
from ._local_chat import LocalChatStatistics as LocalChatStatistics
from ._manager import ConnectionManager as ConnectionManager
from ._manager import ExitAnnouncement as ExitAnnouncement
from ._manager import HolderStateHooks as HolderStateHooks
from ._manager import ManagerStatistics as ManagerStatistics
from ._manager import open_connection_manager as open_connection_manager
from ._manager import serve_connection_manager as serve_connection_manager
from ._names import Codename as Codename
from ._names import actor_label as actor_label
from ._names import codename as codename
from ._names import is_durable_worker_id as is_durable_worker_id
from ._names import name_key as name_key
from ._names import normalize_ide_label as normalize_ide_label
from ._policy import HoldPolicy as HoldPolicy
from ._policy import Outcome as Outcome
from ._session import AgentSession as AgentSession
from ._sse import ServerSentEvent as ServerSentEvent
from ._sse import SSEDecoder as SSEDecoder
from ._sse import is_event_stream as is_event_stream
from ._state import LocalStateStore as LocalStateStore
from ._state import OwnerAuth as OwnerAuth
from ._state import StateSnapshot as StateSnapshot
from ._transport import AttemptRejected as AttemptRejected
from ._transport import ProcessConnector as ProcessConnector
from ._transport import SSEConnector as SSEConnector
from ._transport import StreamNews as StreamNews
from ._util import fixup_module_metadata as _fixup_module_metadata
from ._version import __version__ as __version__

__all__ = [
    "AgentSession",
    "ApiError",
    "AttemptRejected",
    "Codename",
    "ConnectionManager",
    "EventKind",
    "ExitAnnouncement",
    "HoldPolicy",
    "HolderEvent",
    "HolderStateHooks",
    "HolderStatistics",
    "HolderStatus",
    "LetAgentsError",
    "LocalChat",
    "LocalChatBusy",
    "LocalChatError",
    "LocalChatStatistics",
    "LocalChatUnavailable",
    "LocalStateStore",
    "MachineFacts",
    "ManagerStatistics",
    "Outcome",
    "OwnerAuth",
    "ProcessConnector",
    "ProcessHolder",
    "RoomClient",
    "RoomUnreachable",
    "SSEConnector",
    "SSEDecoder",
    "ServerSentEvent",
    "StateError",
    "StateHooks",
    "StateLockTimeout",
    "StateSnapshot",
    "StateUnavailable",
    "StreamNews",
    "StreamProtocolError",
    "WorkerError",
    "__version__",
    "actor_label",
    "codename",
    "detect_ide_label",
    "detect_runtime_label",
    "is_durable_worker_id",
    "is_event_stream",
    "local_host_id",
    "name_key",
    "normalize_ide_label",
    "open_connection_manager",
    "process_host_id",
    "registration_liveness",
    "serve_connection_manager",
]

_fixup_module_metadata(__name__, globals())
del _fixup_module_metadata
