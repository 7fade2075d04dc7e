"""The exceptions letagents-trio raises, one tree rooted at LetAgentsError.

::

    LetAgentsError
    ├── ApiError                 the room answered a call with a non-2xx status
    ├── RoomUnreachable          no answer at all: network error or the room is too slow
    ├── StreamProtocolError      a stream broke the SSE rules we enforce (oversized line or event)
    ├── IneligibleSession        the manager holds no process connection for this session (§4.1)
    ├── StateError               the local state file cannot be used
    │   ├── StateUnavailable     it is damaged or unreadable: nothing is written over it
    │   └── StateLockTimeout     another process held its lock for too long
    ├── LocalChatError           a local room's chat refused the call (blank text, bad cursor)
    │   ├── LocalChatUnavailable the local chat database is damaged or not ours: nothing is written
    │   └── LocalChatBusy        another process held its write lock for too long
    └── WorkerError              a worker-handle rule refused the call (texts of PROTOCOL §5.2)

Errors are translated at the boundary (``raise RoomUnreachable(...) from exc``), so
callers never need to know which HTTP stack or file API sat underneath. No message
ever contains an owner token, a session token or a bearer: messages are built
from statuses, bodies the room sent (redacted) and paths.
"""

from __future__ import annotations

from typing import final

__all__ = [
    "ApiError",
    "IneligibleSession",
    "LetAgentsError",
    "LocalChatBusy",
    "LocalChatError",
    "LocalChatUnavailable",
    "RoomUnreachable",
    "StateError",
    "StateLockTimeout",
    "StateUnavailable",
    "StreamProtocolError",
    "WorkerError",
]


class LetAgentsError(Exception):
    """The root of every error letagents-trio raises on purpose."""


@final
class ApiError(LetAgentsError):
    """The room answered with a non-2xx status.

    The message is ``API error <status>: <body>``, the text upstream tools show,
    with any secret the request carried redacted from the body.

    Attributes:
        status: the HTTP status code.
        body: the response body as text (redacted).
        retry_after: seconds the room asked us to wait (``Retry-After``), if it did.
    """

    def __init__(self, status: int, body: str, *, retry_after: float | None = None) -> None:
        super().__init__(f"API error {status}: {body}")
        self.status = status
        self.body = body
        self.retry_after = retry_after


@final
class RoomUnreachable(LetAgentsError):
    """The room could not be reached, or did not answer in time."""


@final
class StreamProtocolError(LetAgentsError):
    """A stream broke a rule the decoder enforces (for example an oversized event)."""


@final
class IneligibleSession(LetAgentsError):
    """The connection manager holds no process connection for this session.

    PROTOCOL §4.1: only live worker sessions of hosted rooms, with a token, are
    held, and only by a process acting for the owner. The message names the
    rule that refused it; :attr:`rule` is the same as a short code.

    Attributes:
        rule: ``"not-owner"``, ``"not-a-worker"``, ``"ended"``, ``"no-token"`` or ``"local-room"``.
    """

    def __init__(self, session_id: str, rule: str, reason: str) -> None:
        super().__init__(f"session {session_id!r} is not held: {reason}")
        self.rule = rule


class StateError(LetAgentsError):
    """The local state file cannot be used."""


@final
class StateUnavailable(StateError):
    """The state file exists but cannot be read as a JSON object.

    Nothing is written over a damaged file: restore or remove it first.
    """


@final
class StateLockTimeout(StateError):
    """Another process held the state file's lock for longer than the lock timeout."""


class LocalChatError(LetAgentsError):
    """A local room's chat (the SQLite file of PROTOCOL §6.1) refused the call.

    Raised as it is for refusals the room would answer with a 4xx (blank or
    too long text, a cursor that is not a message id), with the room's text.
    """


@final
class LocalChatUnavailable(LocalChatError):
    """The local chat database cannot be opened or used.

    It is not SQLite, belongs to another program, has a newer schema, or
    SQLite reported damage. Nothing is written to such a file.
    """


@final
class LocalChatBusy(LocalChatError):
    """Another process held the local chat database's write lock for too long."""


@final
class WorkerError(LetAgentsError):
    """A worker-handle rule refused the call; the message is the exact upstream text."""
