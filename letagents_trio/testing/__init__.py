"""The letagents-trio testing kit: an in-memory room over a streaming in-process transport.

Nothing here touches a socket or a thread, so ``trio.testing.MockClock`` with
``autojump_threshold=0`` drives every timeout, heartbeat and backoff exactly.
Faults are injected with :meth:`FakeRoom.on` rules (answer instead of the room,
lose a request or the room's answer, hold or rewrite that answer), the process
modes, and :meth:`FakeRoom.drop`.
The ``fake_room`` pytest fixture is registered automatically when
letagents-trio is installed (it needs pytest-trio).
"""

from .._extras import missing_extra as _missing_extra

try:
    from ._fake_room import FakeRoom as FakeRoom
    from ._fake_room import open_fake_room as open_fake_room
    from ._fake_room import register_worker as register_worker
    from ._records import ExitRecord as ExitRecord
    from ._records import ProcessMode as ProcessMode
    from ._records import RequestRecord as RequestRecord
    from ._rules import Hold as Hold
    from ._rules import Rule as Rule
    from ._rules import RuleBuilder as RuleBuilder
    from ._transport import StreamingASGITransport as StreamingASGITransport
    from ._transport import open_streaming_transport as open_streaming_transport
except ModuleNotFoundError as _error:
    # Without its extra: one plain line naming it and how to install it.
    raise _missing_extra(_error, what="letagents_trio.testing", extra="testing") from None

__all__ = [
    "ExitRecord",
    "FakeRoom",
    "Hold",
    "ProcessMode",
    "RequestRecord",
    "Rule",
    "RuleBuilder",
    "StreamingASGITransport",
    "open_fake_room",
    "open_streaming_transport",
    "register_worker",
]

from .._util import fixup_module_metadata as _fixup_module_metadata

_fixup_module_metadata(__name__, globals())
del _fixup_module_metadata
