"""Real sockets the core's tests share: a TCP pair on loopback."""

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
