"""letagents-trio: a trio-native connection manager for letagents rooms."""

from ._errors import ApiError as ApiError
from ._errors import LetAgentsError as LetAgentsError
from ._errors import RoomUnreachable as RoomUnreachable
from ._errors import StateError as StateError
from ._errors import StateLockTimeout as StateLockTimeout
from ._errors import StateUnavailable as StateUnavailable
from ._errors import StreamProtocolError as StreamProtocolError
from ._errors import WorkerError as WorkerError
from ._session import AgentSession as AgentSession
from ._version import __version__ as __version__
