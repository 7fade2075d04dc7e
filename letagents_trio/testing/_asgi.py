"""ASGI message helpers for the fake room's layer over the reference room.

The layer reads a request body whole before deciding (and replays it to the
room), sends whole answers of its own, waits out a client it keeps hanging,
and drops a connection (:class:`DropConnection`); these are those few moves,
written once.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, final

import attrs
import trio

# The ASGI callables, as the kit's servers and the FakeRoom use them.
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[MutableMapping[str, Any], Receive, Send], Awaitable[None]]

__all__ = [
    "ASGIApp",
    "Answer",
    "DropConnection",
    "Message",
    "Receive",
    "Send",
    "bearer_token",
    "capture_answer",
    "json_or_none",
    "read_body",
    "send_answer",
    "until_disconnected",
]


@final
@attrs.frozen(kw_only=True)
class Answer:
    """An answer of the room, kept whole instead of sent."""

    status: int
    headers: list[tuple[bytes, bytes]]
    body: bytes


class DropConnection(Exception):
    """Raised by an app to have the kit's servers drop its connection without an answer.

    ASGI has no way to drop a connection, so the kit's own servers (the
    streaming transport and the in-memory HTTP/1.1 server) take this as one:
    the client sees the connection fail before any answer
    (``after_commit=False``: a room that is down, the request never handled),
    or lose the answer of a request the room acted on (``after_commit=True``).
    Any other ASGI server (hypercorn) answers it as any exception, with a 500.

    Args:
        after_commit: whether the room acted on the request first.
    """

    def __init__(self, *, after_commit: bool) -> None:
        super().__init__("the room dropped the connection")
        self.after_commit = after_commit


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer`` header, or None."""
    scheme, _, value = (authorization or "").partition(" ")
    return value.strip() or None if scheme.lower() == "bearer" else None


def json_or_none(raw: bytes) -> Any:
    """``raw`` decoded as JSON; None when empty or not JSON."""
    try:
        return json.loads(raw) if raw else None
    except ValueError:
        return None


async def read_body(receive: Receive) -> tuple[bytes, Receive]:
    """Read the request body whole; return it and a ``receive`` that gives it again."""
    messages: list[MutableMapping[str, Any]] = []
    while True:
        message = await receive()
        messages.append(message)
        if message["type"] != "http.request" or not message.get("more_body", False):
            break
    raw = b"".join(bytes(m.get("body", b"")) for m in messages if m["type"] == "http.request")

    async def again() -> MutableMapping[str, Any]:
        if messages:
            await trio.lowlevel.checkpoint()
            return messages.pop(0)
        return await receive()

    return raw, again


async def send_answer(send: Send, answer: Answer) -> None:
    """Send a whole answer, its ``content-length`` set to the body it carries now."""
    headers = [(k, v) for k, v in answer.headers if k.lower() != b"content-length"]
    headers.append((b"content-length", str(len(answer.body)).encode("latin-1")))
    await send({"type": "http.response.start", "status": answer.status, "headers": headers})
    await send({"type": "http.response.body", "body": answer.body, "more_body": False})


async def until_disconnected(receive: Receive) -> None:
    """Wait until the client goes away (``http.disconnect``)."""
    while (await receive())["type"] != "http.disconnect":
        pass


async def capture_answer(
    app: Callable[[MutableMapping[str, Any], Receive, Send], Awaitable[None]],
    scope: MutableMapping[str, Any],
    receive: Receive,
) -> Answer:
    """Let ``app`` answer the request to the end, keeping its answer instead of sending it.

    Cancellation:
        A checkpoint per message the app sends; cancelled, the answer is lost.
    """
    status = 500
    headers: list[tuple[bytes, bytes]] = []
    chunks: list[bytes] = []

    async def capture(message: Message) -> None:
        nonlocal status, headers
        if message["type"] == "http.response.start":
            status = int(message["status"])
            headers = [(bytes(k), bytes(v)) for k, v in message.get("headers", [])]
        elif message["type"] == "http.response.body":
            chunks.append(bytes(message.get("body", b"")))
        await trio.lowlevel.checkpoint()

    await app(scope, receive, capture)
    return Answer(status=status, headers=headers, body=b"".join(chunks))
