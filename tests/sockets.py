"""Streams the core's tests share: a TCP pair on loopback, and a stream close_now does not know."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import trio


@asynccontextmanager
async def tcp_pair() -> AsyncIterator[tuple[trio.SocketStream, trio.socket.SocketType]]:
    """A connected TCP pair on loopback: our stream, and the peer's socket.

    TCP rather than a socketpair where it matters how a close looks to the
    peer: an orderly end, or a reset.
    """
    listener = trio.socket.socket()
    with listener:
        await listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        ours = trio.socket.socket()
        await ours.connect(listener.getsockname())
        theirs, _ = await listener.accept()
    with ours, theirs:
        yield trio.SocketStream(ours), theirs


class OnlyAsyncClose(trio.abc.Stream):
    """A stream that close_now does not know: only ``aclose`` closes it.

    It reads as ``answer``, then waits for ever.
    """

    def __init__(self, answer: bytes = b"") -> None:
        self.closed = False
        self._answer = answer

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await trio.lowlevel.checkpoint()

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        answer, self._answer = self._answer, b""
        if answer:
            await trio.lowlevel.checkpoint()
            return answer
        await trio.sleep_forever()
        raise AssertionError("unreachable")  # pragma: no cover

    async def aclose(self) -> None:
        self.closed = True
        await trio.lowlevel.checkpoint()
