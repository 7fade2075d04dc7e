"""A trio stream read, written and closed without trio's per-call machinery.

A held process stream is read tens of thousands of times an hour, and a
goodbye closes and writes thousands of them at once: for a plain socket on a
POSIX system these helpers do each with one system call and no task switch
(:func:`read_some` waits, then reads once; :func:`send_now` writes what the
kernel takes; :func:`close_now` closes at once; :func:`discard_unread` drops
what the peer sent before a close, so that the close is an orderly end).
Any other stream (TLS, in memory, bytes read ahead and put back in front by
:class:`Prefixed`) goes through its own methods. What each saves is in
``docs/performance.md``.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from typing import Final, final

import trio

__all__ = [
    "READ_SIZE",
    "Prefixed",
    "can_send_now",
    "close_now",
    "discard_unread",
    "read_some",
    "send_now",
]

# One read from the socket; an SSE heartbeat or an exit answer fits many times over.
READ_SIZE: Final = 65_536


@final
class Prefixed(trio.abc.Stream):
    """A stream that first gives back bytes already read from it."""

    def __init__(self, stream: trio.abc.Stream, prefix: bytes) -> None:
        self._stream = stream
        self._prefix = prefix

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self._stream.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._stream.wait_send_all_might_not_block()

    async def send_eof(self) -> None:
        send_eof = getattr(self._stream, "send_eof", None)
        if send_eof is None:  # pragma: no cover - every stream we open has it
            raise trio.BrokenResourceError("this stream cannot half-close")
        await send_eof()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        if self._prefix:
            size = len(self._prefix) if max_bytes is None else max_bytes
            data, self._prefix = self._prefix[:size], self._prefix[size:]
            await trio.lowlevel.checkpoint()
            return data
        return bytes(await self._stream.receive_some(max_bytes))

    async def aclose(self) -> None:
        await self._stream.aclose()


def close_now(stream: trio.abc.Stream) -> bool:
    """Close ``stream`` synchronously if it (or what it wraps) is a socket or in memory.

    A socket close is all ``SocketStream.aclose`` does besides a checkpoint,
    and a checkpoint in a cancelled task raises and catches a ``Cancelled``:
    skipping it keeps the goodbye of a thousand streams a thousand syscalls.
    TLS is closed without close_notify, as ``aclose_forcefully`` would.

    Returns:
        Whether it was closed (False: use ``aclose``).
    """
    while True:
        if isinstance(stream, trio.SocketStream):
            stream.socket.close()
            return True
        if isinstance(stream, trio.StapledStream):
            parts = (stream.send_stream, stream.receive_stream)
            closers: list[Callable[[], object]] = []
            for part in parts:
                close = getattr(part, "close", None)
                if not callable(close):
                    return False
                closers.append(close)
            for close in closers:
                close()
            return True
        if isinstance(stream, Prefixed):
            stream = stream._stream
        elif isinstance(stream, trio.SSLStream):
            stream = stream.transport_stream
        else:
            return False


def _plain_socket(stream: trio.abc.Stream) -> trio.SocketStream | None:
    """The plain socket under ``stream`` when it can be written without trio (POSIX only)."""
    while isinstance(stream, Prefixed):
        stream = stream._stream
    if os.name != "posix" or not isinstance(stream, trio.SocketStream):
        return None
    return stream


def _stream_error(exc: OSError) -> trio.BrokenResourceError | trio.ClosedResourceError:
    """What ``SocketStream`` raises for ``exc``: closed for a closed descriptor, else broken."""
    if exc.errno == errno.EBADF:
        return trio.ClosedResourceError("the socket was already closed")
    return trio.BrokenResourceError(f"socket connection broken: {exc}")


async def read_some(stream: trio.abc.Stream, max_bytes: int) -> bytes:
    """``stream.receive_some(max_bytes)``, straight from the socket when it is a plain one.

    A held stream is read tens of thousands of times an hour, each read a
    wake-up after minutes of waiting. ``SocketStream.receive_some`` first tries
    the read (on a held stream it finds nothing and raises ``BlockingIOError``),
    then waits, with a conflict detector and two context managers around
    it. Here, for a plain socket on a POSIX system, a read is one wait until
    the socket is readable and one ``read``. Anything else (TLS, in memory,
    bytes put back in front by :meth:`HTTP1Response.detach`) is read by its
    own ``receive_some``.

    Raises:
        trio.ClosedResourceError: the socket was closed, before or during the wait.
        trio.BrokenResourceError: the connection broke.

    Cancellation:
        A checkpoint: the wait comes before the read.
    """
    plain = None if isinstance(stream, Prefixed) and stream._prefix else _plain_socket(stream)
    if plain is None:
        return bytes(await stream.receive_some(max_bytes))
    socket = plain.socket
    while True:
        if socket.fileno() == -1:
            raise trio.ClosedResourceError("the socket was already closed")
        # Closing the socket (close_now, SocketStream.aclose) wakes this wait
        # with ClosedResourceError.
        await trio.lowlevel.wait_readable(socket)
        # Looked up again after the wait: a closed socket's number may be another's now.
        fd = socket.fileno()
        if fd == -1:
            raise trio.ClosedResourceError("the socket was already closed")
        try:
            return os.read(fd, max_bytes)
        except BlockingIOError:
            continue
        except OSError as exc:
            raise _stream_error(exc) from exc


def discard_unread(stream: trio.abc.Stream, *, limit: int = 1 << 20) -> None:
    """Read and drop, without a checkpoint, what the peer already sent on a plain socket.

    Closing a TCP socket whose receive buffer still holds bytes sends a reset
    instead of an orderly end. A peer that writes to the connection meanwhile
    (a heartbeat) then fails its write, and a server that closes on that
    failure may never read what was sent just before the close: a WebSocket's
    exit frame. Drained first, the close is an orderly end, read after the
    exit. At most ``limit`` bytes; nothing for streams that are not plain
    sockets, or on any error (the close follows anyway).
    """
    plain = _plain_socket(stream)
    if plain is None:
        return
    fd = plain.socket.fileno()
    while fd != -1 and limit > 0:
        try:
            data = os.read(fd, min(limit, READ_SIZE))
        except OSError:  # BlockingIOError included: nothing more to read
            return
        if not data:
            return
        limit -= len(data)


def can_send_now(stream: trio.abc.Stream) -> bool:
    """Whether :func:`send_now` can write ``stream`` (a plain socket on a POSIX system)."""
    return _plain_socket(stream) is not None


def send_now(stream: trio.abc.Stream, data: bytes) -> int | None:
    """Write what the kernel takes of ``data`` at once, without a checkpoint.

    For a plain socket on a POSIX system: one ``write``, no task switch, which
    is what a goodbye of thousands of sockets wants (``send_all`` costs each a
    lock, a conflict detector and a reschedule). The caller must be the
    stream's only sender at that moment.

    Returns:
        How many bytes were written (0 when the socket's buffer is full), or
        None when ``stream`` cannot be written this way (TLS, in memory, or
        not POSIX; :func:`can_send_now` tells beforehand): then use ``send_all``.

    Raises:
        OSError: the connection is broken.
    """
    plain = _plain_socket(stream)
    if plain is None:
        return None
    try:
        return os.write(plain.socket.fileno(), data)
    except BlockingIOError:
        return 0
