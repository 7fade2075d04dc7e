"""The exit frames of one process socket the FakeRoom serves: recorded, and answered or not.

:class:`SocketExits` stands between the reference room's WebSocket route and
the client's messages: each exit frame the client sends is recorded (an
:class:`~._records.ExitRecord` with ``recorded`` None: the socket has no
answer of its own), then passed on, lost or answered as
``FakeRoom.socket_exit_answers`` says (:data:`SocketExitAnswers`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal, final

import trio

from ..room_server._websocket import exit_body
from ._records import ExitRecord

if TYPE_CHECKING:
    from collections.abc import Callable

    from ._asgi import Message, Receive, Send

__all__ = ["SocketExitAnswers", "SocketExits"]

SocketExitAnswers = Literal["answered", "withheld", "not offered"]


@final
class SocketExits:
    """One socket's exit frames, between the client and the room's WebSocket route.

    Args:
        session_id: the session the socket is for.
        answers: what the room does with an exit frame (fixed as the socket opens).
        record: keeps an exit as it arrives (``FakeRoom.exits``, and a notice).
        receive: the client's messages.
        send: the room's messages to the client.
    """

    def __init__(
        self,
        session_id: str,
        answers: SocketExitAnswers,
        record: Callable[[ExitRecord], None],
        receive: Receive,
        send: Send,
    ) -> None:
        self._session_id = session_id
        self._answers = answers
        self._record = record
        self._receive = receive
        self._send = send

    async def receive(self) -> Message:
        """The client's next message for the room; a withheld exit frame never reaches it."""
        while True:
            message = await self._receive()
            text = message.get("text")
            body = exit_body(text) if isinstance(text, str) else None
            if body is None:
                return message
            self._record(
                ExitRecord(
                    time=trio.current_time(), session_id=self._session_id, body=body, recorded=None
                )
            )
            if self._answers != "withheld":
                return message

    async def send(self, message: Message) -> None:
        """The room's message to the client; by a room that does not offer acknowledgements
        (``"not offered"``), the offer is taken out of its open frame and the
        acknowledgement itself is not sent."""
        text = message.get("text")
        if self._answers == "not offered" and isinstance(text, str):
            if '"event":"exit_recorded"' in text:
                await trio.lowlevel.checkpoint()
                return
            message = {**message, "text": text.replace(',"exit_ack":true', "")}
        await self._send(message)
