"""What the fake room saw, and how it answers the process route.

The value types of :mod:`letagents_trio.testing`'s request log: a
:class:`RequestRecord` per request and an :class:`ExitRecord` per exit
announcement (a ``POST …/process/exit`` or an exit frame on a process
socket), each stamped with trio's clock; and the :class:`ProcessMode` a
:class:`~letagents_trio.testing.FakeRoom` answers ``GET …/process`` in, with
the canned answers of the modes that stand for another room.
"""

from __future__ import annotations

import enum
from typing import Any, Final, final

import attrs

from .. import _protocol

__all__ = ["CANNED_ANSWERS", "ExitRecord", "ProcessMode", "RequestRecord"]


class ProcessMode(enum.Enum):
    """How the fake room answers ``GET …/process``: one mode for all, or per session.

    Each member's ``__doc__`` says what the room answers and what a holder
    then does; the times are the attempts of one holder under the default
    :class:`~letagents_trio.HoldPolicy` (10 s answer timeout, 45 s silence),
    on trio's clock from its first attempt.
    """

    SERVED = "served"
    UNKNOWN = "unknown"
    REFUSED = "refused"
    ENDED = "ended"
    ERROR = "error"
    SILENT = "silent"
    SLOW = "slow"


# What each mode does, as the member's own ``__doc__`` (help(ProcessMode.SILENT),
# an IDE): an enum member takes no docstring of its own in the class body.
_MODE_DOCS: Final[dict[ProcessMode, str]] = {
    ProcessMode.SERVED: (
        "The reference room serves the stream (``open``, heartbeats): the holder is ``OPEN``"
        " and stays so."
    ),
    ProcessMode.UNKNOWN: (
        "404 ``Not found``, as a room without the route: ``unsupported``, attempts at 0, 10,"
        " 70, 370, 670 s (waits of 10, 60, 300, 300 s)."
    ),
    ProcessMode.REFUSED: (
        "401 ``Invalid agent session credentials.``: ``refused``; the holder asks its"
        " ``is_still_ours`` hook, then attempts at 0, 5, 20, 80, 140 s (waits of 5, 15, 60,"
        " 60 s)."
    ),
    ProcessMode.ENDED: (
        "410 ``agent_session_ended``: ``ended``; the holder marks the session ended and stops"
        " for good (one attempt, status ``ENDED``)."
    ),
    ProcessMode.ERROR: (
        "503, as a failing room: ``dropped``, attempts at 0, 1, 3, 8, 13 s (waits of 1, 2, 5, 5 s)."
    ),
    ProcessMode.SILENT: (
        "200 with event-stream headers, then not one byte (a WebSocket: 101, then no frame,"
        " ping or pong). The stream *opens*, which resets every backoff counter, and the 45 s"
        " silence ends it as ``dropped``: every wait is the first, 1 s, so the attempts are at"
        " 0, 46, 92, 138 s, never a growing backoff."
    ),
    ProcessMode.SLOW: (
        "The headers come only after ``FakeRoom.slow_headers`` seconds (30 by default), then"
        " the stream is served. Above the 10 s answer timeout every attempt is ``dropped`` at"
        " 10 s without opening, so the drop waits grow: attempts at 0, 11, 23, 38, 53 s."
        " Set ``slow_headers`` below it to see a slow answer that opens."
    ),
}
for _mode, _doc in _MODE_DOCS.items():
    _mode.__doc__ = _doc
del _mode, _doc

# The reference (Sphinx reads an enum member's docs from the source only) and
# help(ProcessMode) list every member with its docstring, from the members.
ProcessMode.__doc__ = f"{ProcessMode.__doc__}\n    Members:\n" + "".join(
    f"\n    ``{mode.name}``\n        {mode.__doc__}\n" for mode in ProcessMode
)

# What the room-like modes answer, status and JSON body: the room's own texts.
CANNED_ANSWERS: dict[ProcessMode, tuple[int, dict[str, str]]] = {
    ProcessMode.UNKNOWN: (404, {"error": "Not found"}),
    ProcessMode.REFUSED: (401, {"error": _protocol.INVALID_CREDENTIALS_TEXT}),
    ProcessMode.ENDED: (
        410,
        {"error": _protocol.SESSION_ENDED_410_TEXT, "code": _protocol.AGENT_SESSION_ENDED_CODE},
    ),
    ProcessMode.ERROR: (503, {"error": "The room is failing for a moment."}),
}


@final
@attrs.frozen(kw_only=True)
class RequestRecord:
    """One request the fake room received.

    Attributes:
        time: trio time it arrived.
        method: the HTTP method.
        path: the (decoded) path.
        session_id: the ``X-LetAgents-Agent-Session-Id`` header, if any.
        has_session_token: whether the session-token header was present and non-empty.
        body: the request's JSON body, decoded; None when it had none or it was
            not JSON. Kept out of the repr: it may carry tokens.
        bearer: the ``Authorization: Bearer`` token, if any (test data; kept
            out of the repr).
    """

    time: float
    method: str
    path: str
    session_id: str | None
    has_session_token: bool
    body: Any = attrs.field(default=None, repr=False)
    bearer: str | None = attrs.field(default=None, repr=False)


@final
@attrs.frozen(kw_only=True)
class ExitRecord:
    """One exit announcement the fake room received.

    Attributes:
        time: trio time it arrived.
        session_id: the session in the path.
        body: the JSON body as sent (its token included: it is test data).
        recorded: the room's ``recorded`` answer; None when black-holed.
    """

    time: float
    session_id: str
    body: dict[str, Any] = attrs.field(repr=False)
    recorded: bool | None

    @property
    def process_connection_id(self) -> str | None:
        """The ``process_connection_id`` the exit named."""
        value = self.body.get("process_connection_id")
        return value if isinstance(value, str) else None
