"""An exit handed to a carrier that sends it, and settles its outcome, with no task of its own.

Over SSE an exit is ``POST …/process/exit``. A goodbye of thousands that
gave each one a task would start, wake, cancel and free thousands of tasks
inside its deadline; the room client's pipelined connections carry them
instead. A stream's :meth:`~letagents_trio.ProcessStream.leave_nowait`
returns a :class:`HandedExit`, ready but not sent; the goodbye sends it
(:meth:`HandedExit.send`, no checkpoint) and, once every exit is handed
over, awaits each carrier's :meth:`ExitCarrier.deliver_exits` once: the
carrier's few tasks (one per connection) write the exits and settle each
as its answer is read, telling the goodbye there.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, final

if TYPE_CHECKING:
    from ._errors import ApiError, RoomUnreachable

__all__ = ["ExitCarrier", "HandedExit"]


class ExitCarrier(Protocol):
    """What carries the exits handed to it: the room client."""

    async def deliver_exits(self) -> None:
        """Send every exit handed over and read their answers, until each is settled.

        Cancellation:
            A checkpoint. Cancelled, the exits not settled are given up:
            never settled; the room may or may not have them.
        """
        ...


@final
class HandedExit:
    """One session's exit, made ready by its stream, sent and settled by its carrier.

    Args:
        carrier: what delivers it once sent (:meth:`ExitCarrier.deliver_exits`).
        send: hands it to the carrier with no checkpoint (the carrier then
            calls :meth:`settle`); False when the carrier cannot take it.

    Attributes:
        recorded: once settled without a failure, whether the room recorded the exit.
        failure: once settled, why no answer came (the room refused the
            exit, or it could not be sent), if so.
    """

    __slots__ = ("_send", "_settled", "carrier", "failure", "recorded")

    def __init__(self, carrier: ExitCarrier, send: Callable[[HandedExit], bool]) -> None:
        self.carrier = carrier
        self._send = send
        self._settled: Callable[[HandedExit], object] | None = None
        self.recorded = False
        self.failure: ApiError | RoomUnreachable | None = None

    def __repr__(self) -> str:
        return f"<HandedExit recorded={self.recorded} failure={type(self.failure).__name__}>"

    def send(self, settled: Callable[[HandedExit], object]) -> bool:
        """Hand the exit to its carrier, with no checkpoint; ``settled(self)`` once it is settled.

        Returns:
            Whether the carrier took it. False: nothing was sent (the
            stream's :meth:`~letagents_trio.ProcessStream.leave` sends it).
        """
        self._settled = settled
        return self._send(self)

    def settle(self, recorded: bool, failure: ApiError | RoomUnreachable | None) -> None:
        """Its outcome, from its carrier (once): told to whoever sent it."""
        self.recorded, self.failure = recorded, failure
        settled, self._settled = self._settled, None
        if settled is not None:
            settled(self)
