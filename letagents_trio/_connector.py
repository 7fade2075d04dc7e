"""What a holder needs from a transport: open a process connection, hear news, leave.

The holder knows nothing of HTTP, SSE or WebSocket frames. It asks a
:class:`ProcessConnector` to open the process connection for a session,
inside the holder's own cancel scope, and gets a :class:`ProcessStream`:

* iterated, the stream yields :class:`StreamNews`, one item per chunk of
  bytes the room wrote (so a comment-only heartbeat still counts as news and
  re-arms the holder's silence deadline, from :attr:`ProcessStream.heard_at`,
  the one thing the holder asks about the stream's reads); the ``open`` event
  (or frame) names the connection, and ``ended`` says the room ended the
  session;
* a refusal is :class:`AttemptRejected` with the attempt's
  :class:`~letagents_trio.Outcome`, a network failure
  :class:`~letagents_trio.RoomUnreachable`, a broken stream
  :class:`~letagents_trio.StreamProtocolError`;
* leaving (the goodbye) is the stream's own verb, :meth:`ProcessStream.leave`:
  whatever the transport, it carries the exit naming the connection and
  returns the room's answer (recorded, refused) or None when the exit went
  and no answer comes. A WebSocket writes its exit frame over the socket and,
  where the room acknowledges exits, waits for that answer; SSE POSTs
  ``…/process/exit`` (PROTOCOL §2.1 R5) through the room client and closes
  its stream once that exit is written. :meth:`ProcessStream.leave_nowait`
  writes the exit at once, with no checkpoint, where the transport can (a
  WebSocket on a plain socket, or on the lean path's TLS over one): the
  goodbye's burst over thousands of holders. Either may run in the
  goodbye's task while the holder's task reads the stream: the reader then ends, and
  the holder, which knows it is leaving, stops instead of retrying. A
  connector raises nothing special for that. A holder with no stream to
  leave by announces its exit with :meth:`ProcessConnector.announce_exit`.

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
    from ._exits import HandedExit
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
    """

    connection_id: str | None = None
    ended: bool = False


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
    """An open process connection: its news, and the exit, which leaves by it.

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

    @property
    def heard_at(self) -> float:
        """When the room's bytes were last heard, in seconds on trio's clock.

        The holder's silence deadline counts from it after each item of news.
        A stream that reads bytes as they come says the time of the read; one
        that lets the kernel keep heartbeats for a while says when they came.
        """
        ...

    def leave_nowait(self, connection_id: str) -> bool | HandedExit | None:
        """Write the exit over the stream at once, with no checkpoint, if it can.

        Returns:
            None when the exit is done, as :meth:`leave` would say of it: it
            went over the stream and no answer comes (the stream is closing).
            True when it is written and the room's answer is to come
            (:meth:`leave` waits for it). A ``HandedExit``
            (:mod:`letagents_trio._exits`): the exit made ready for a carrier
            that sends and settles it with no task of its own, closing the
            stream once it is written; if it is not sent, :meth:`leave`
            sends it. False having done nothing :meth:`leave` cannot follow:
            a transport without an exit of its own, or a socket that cannot
            take it at once (:meth:`leave` sends it).
        """
        ...

    async def leave(self, connection_id: str) -> bool | None:
        """Carry the exit naming ``connection_id``; the room's answer.

        Over the stream itself where the transport has an exit of its own,
        else (or when the stream can no longer carry it) the stream is closed
        and the exit POSTed (``…/process/exit``). An exit sent over the
        stream to a room that answers exits waits for that answer, until it
        comes or the stream closes (its holder stopped).

        Returns:
            Whether the room recorded the exit; None when it went over the
            stream and no answer came.

        Raises:
            ApiError: the room refused the POSTed exit.
            RoomUnreachable: it could not be POSTed.

        Cancellation:
            A checkpoint; under the goodbye's deadline, which may cancel it:
            the room may or may not have the exit.
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

        For a holder with no stream to leave by (none open, or none named).

        Raises:
            ApiError: the room refused the announcement.
            RoomUnreachable: it could not be sent.

        Cancellation:
            Called under the goodbye's shielded deadline, which cancels it
            when the deadline passes; the room may or may not have recorded it.
        """
        ...
