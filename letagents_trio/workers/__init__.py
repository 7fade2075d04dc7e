"""The host layer: what an MCP host on this machine needs beside the core.

Compatible with the letagents Node MCP server on the same machine: the state
file (``~/.letagents/mcp-state.json``, locked, written atomically, keys in
Node's order), host identity, worker names, the worker handles that create,
resume, recover and disconnect durable workers, the chat-storage settings that
say which rooms are local, and the local rooms' chat store.

An embedder builds a :class:`~letagents_trio.RoomClient`, a
:class:`LocalStateStore` (given its path: nothing here reads the environment),
:func:`~letagents_trio.open_connection_manager` and one :class:`WorkerHandles`
over them (with a :class:`ChatStorage` when some rooms are local), then
:meth:`WorkerHandles.register` gives a held session (``docs/worker-handles.md``).

Layering: this package uses the core (:mod:`letagents_trio`) and is never
imported by it; :mod:`letagents_trio.mcp_server` and the demo sit above it.
"""

from .._errors import LocalChatBusy as LocalChatBusy
from .._errors import LocalChatError as LocalChatError
from .._errors import LocalChatUnavailable as LocalChatUnavailable
from .._errors import StateError as StateError
from .._errors import StateLockTimeout as StateLockTimeout
from .._errors import StateUnavailable as StateUnavailable
from .._errors import WorkerError as WorkerError
from ._chat_storage import ChatStorage as ChatStorage
from ._chat_storage import ChatStorageSettings as ChatStorageSettings
from ._handles import WorkerHandles as WorkerHandles
from ._handles import WorkerHandlesStatistics as WorkerHandlesStatistics
from ._handles import WorkerRegistration as WorkerRegistration
from ._identity import MachineFacts as MachineFacts
from ._identity import process_host_id as process_host_id
from ._local_chat import LocalChat as LocalChat
from ._local_chat import LocalChatStatistics as LocalChatStatistics
from ._state import LocalStateStore as LocalStateStore
from ._state import OwnerAuth as OwnerAuth
from ._state import StateSnapshot as StateSnapshot

__all__ = [
    "ChatStorage",
    "ChatStorageSettings",
    "LocalChat",
    "LocalChatBusy",
    "LocalChatError",
    "LocalChatStatistics",
    "LocalChatUnavailable",
    "LocalStateStore",
    "MachineFacts",
    "OwnerAuth",
    "StateError",
    "StateLockTimeout",
    "StateSnapshot",
    "StateUnavailable",
    "WorkerError",
    "WorkerHandles",
    "WorkerHandlesStatistics",
    "WorkerRegistration",
    "process_host_id",
]

from .._util import fixup_module_metadata as _fixup_module_metadata

_fixup_module_metadata(__name__, globals())
del _fixup_module_metadata
