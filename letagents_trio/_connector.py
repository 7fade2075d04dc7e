"""What a holder needs from a transport: open a process connection, hear news, leave.

The holder knows nothing of HTTP, SSE or WebSocket frames. It asks a
:class:`ProcessConnector` to open the process connection for a session,
inside the holder's own cancel scope, and gets a :class:`ProcessStream`:

* iterated, the stream yields :class:`StreamNews`, one item per chunk of
  bytes the room wrote (so a comment-only heartbeat still counts as news and
  re-arms the holder's silence deadline); the ``open`` event (or frame) names
  the connection, and ``ended`` says the room ended the session;
* a refusal is :class:`AttemptRejected` with the attempt's
  :class:`~letagents_trio.Outcome`, a network failure
  :class:`~letagents_trio.RoomUnreachable`, a broken stream
  :class:`~letagents_trio.StreamProtocolError`;
* leaving (the goodbye): a transport that can carry the exit itself (a
  WebSocket) sends it over the stream (:meth:`ProcessStream.send_exit`, or
  :meth:`ProcessStream.send_exit_nowait` with no checkpoint at all); otherwise
  the holder closes the stream (:meth:`ProcessStream.aclose`) and announces
  its exit with the connector's :meth:`ProcessConnector.announce_exit`
  (``POST …/process/exit``, PROTOCOL §2.1 R5). Either way the stream may be
  closed from the goodbye's task while the holder's task reads it: the reader
  then ends, and the holder, which knows it is leaving, stops instead of
  retrying. A connector raises nothing special for that.

The connectors of this package: :class:`~letagents_trio.SSEConnector` (the
room's route, every letagents room has it), and the WebSocket form, our
extension (:class:`~letagents_trio.WebSocketConnector`,
:class:`~letagents_trio.AutoConnector`).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Protocol, final

import attrs

from ._errors import LetAgentsError

if TYPE_CHECKING:
    from ._policy import Outcome
    from ._session import AgentSession

__all__ = ["AttemptRejected", "ProcessConnector", "ProcessStream", "StreamNews"]


@final
@attrs.frozen(kw_only=True)
class StreamNews:
    """What one read from an open process connection brought.

    Attributes:
        connection_id: the id the room gave this connection, if this read named one.
        ended: the room said the session has ended.
        heard_at: when these bytes arrived (trio's clock), if the read found
            them kept by the kernel (a quiet read); None when they were read
            as they came. The holder's silence deadline counts from it.
    """

    connection_id: str | None = None
    ended: bool = False
    heard_at: float | None = None


@final
class AttemptRejected(LetAgentsError):
    """The room answered, but did not open the process connection.

    Attributes:
        outcome: how the attempt counts (ended, unsupported, dropped or refused).
        detail: a short, secret-free description, such as ``HTTP 401``.
    """

    def __init__(self, outcome: Outcome, detail: str) -> None:
        super().__init__(f"{outcome.value}: {detail}")
        self.outcome = outcome
        self.detail = detail


class ProcessStream(Protocol):
    """An open process connection: its news, and how the exit leaves by it.

    Iterating it yields :class:`StreamNews` until the connection ends (a plain
    end is ``dropped``; raise :class:`~letagents_trio.RoomUnreachable` for a
    broken one). Its methods may be called from another task than the one
    iterating it (the goodbye's), once the holder has begun to leave.
    """

    def __aiter__(self) -> AsyncIterator[StreamNews]: ...

    async def __anext__(self) -> StreamNews:
        """The news of the next chunk of bytes the room wrote.

        Cancellation:
            A checkpoint (the wait for bytes); cancelled, the stream is no
            longer usable and the connector's block closes it.
        """
        ...

    def send_exit_nowait(self, connection_id: str) -> bool:
        """Write the exit over the stream itself at once, with no checkpoint, if it can.

        True once the exit is written whole; False having done nothing that
        :meth:`send_exit` or a POST could not follow (a transport without an
        exit of its own always answers False).
        """
        ...

    async def send_exit(self, connection_id: str) -> bool:
        """Send the exit over the stream itself; whether it went.

        False when the transport has no exit of its own, or the stream can no
        longer carry it: the holder then closes the stream and POSTs the exit.

        Cancellation:
            A checkpoint; under the goodbye's deadline, which may cancel it.
        """
        ...

    @property
    def exit_answer_expected(self) -> bool:
        """Whether the room answers an exit sent over this stream (it said so as it opened)."""
        ...

    @property
    def exit_recorded(self) -> bool | None:
        """The room's answer to the exit sent over this stream, once it came (else None).

        A stream whose room answers ends its iteration once the answer came.
        """
        ...

    async def aclose(self) -> None:
        """Close the connection (a reader waiting on it wakes and ends).

        Idempotent, and safe from another task than the reader's.

        Cancellation:
            Closes even when cancelled.
        """
        ...


class ProcessConnector(Protocol):
    """A way to hold a process connection, and to announce an exit without one."""

    def open(self, session: AgentSession) -> AbstractAsyncContextManager[ProcessStream]:
        """Open the process connection; leaving the block closes it.

        Entering returns once the room has accepted the connection. Raises
        :class:`AttemptRejected` when the room refuses it and
        :class:`~letagents_trio.RoomUnreachable` when it cannot be reached.
        """
        ...

    async def announce_exit(self, session: AgentSession, connection_id: str | None) -> bool:
        """Tell the room this process is gone (``POST …/process/exit``); whether it recorded it.

        Raises:
            ApiError: the room refused the announcement.
            RoomUnreachable: it could not be sent.

        Cancellation:
            Called under the goodbye's shielded deadline, which cancels it
            when the deadline passes; the room may or may not have recorded it.
        """
        ...
