"""A stream's socket found once: its writes, drain, close and reads without looking again.

:func:`send_now`, :func:`unsent_size`, :func:`discard_unread`,
:func:`close_now` and :func:`read_some` (:mod:`._sockio`) find a stream's
socket through its layers (:class:`~._sockio.Prefixed`, TLS) at every call.
:class:`SocketNow` finds it once, for a caller that does the same steps on
one stream many times, or on thousands of streams in one loop.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable
from typing import TYPE_CHECKING, Protocol, final, runtime_checkable

from ._sockio import (
    DISCARD_LIMIT,
    drain_fd,
    plain_socket,
    read_socket,
    tls_transport,
    unwrap_prefixed,
)

if TYPE_CHECKING:
    import trio

__all__ = ["SocketNow", "socket_now"]


@final
class SocketNow:
    """One stream's :func:`send_now`, :func:`unsent_size`, :func:`discard_unread`, close and read.

    The same steps, for a stream :func:`send_now` can write (a plain socket
    on a POSIX system, or the lean path's TLS over one), with its socket
    found once (:func:`socket_now`) rather than at every call: a goodbye
    does the first four for each of thousands of streams in one loop, and a
    held stream writes a pong and reads at every wake-up.
    """

    __slots__ = ("_socket", "_tls")

    def __init__(self, socket: trio.SocketStream, tls: _RecordsNow | None) -> None:
        self._socket = socket
        # The TLS stream over the socket, which makes the records; None: plain.
        self._tls = tls

    def send(self, data: bytes) -> int:
        """As :func:`send_now`: how much of ``data`` the stream took at once."""
        if self._tls is not None:
            return self._tls.send_now(data) or 0
        try:
            return os.write(self._socket.socket.fileno(), data)
        except BlockingIOError:
            return 0

    def unsent_size(self) -> int:
        """As :func:`unsent_size`: what the stream took and its socket has not."""
        return 0 if self._tls is None else self._tls.unsent_size() or 0

    def discard_unread(self) -> None:
        """As :func:`discard_unread`."""
        drain_fd(self._socket.socket.fileno(), DISCARD_LIMIT)

    def close(self) -> None:
        """As :func:`close_now`, which closes such a stream at once."""
        self._socket.socket.close()

    def receive_plain(self, max_bytes: int) -> Awaitable[bytes]:
        """As :func:`read_some` of the plain socket itself (under TLS: its records, undecrypted).

        Raises:
            trio.ClosedResourceError: the socket was closed, before or during the wait.
            trio.BrokenResourceError: the connection broke.

        Cancellation:
            A checkpoint: the wait comes before the read.
        """
        return read_socket(self._socket.socket, max_bytes)


def socket_now(stream: trio.abc.Stream) -> SocketNow | None:
    """``stream``'s :class:`SocketNow`; None when :func:`send_now` cannot write it."""
    unprefixed = unwrap_prefixed(stream)
    plain = plain_socket(unprefixed)
    if plain is not None:
        return SocketNow(plain, None)
    transport = tls_transport(unprefixed)
    if transport is None:
        return None
    plain = plain_socket(transport)
    if plain is None or not isinstance(unprefixed, _RecordsNow) or unprefixed.unsent_size() is None:
        return None
    return SocketNow(plain, unprefixed)


@runtime_checkable
class _RecordsNow(Protocol):
    """A TLS stream that makes and writes its records at once (the lean path's)."""

    def send_now(self, data: bytes) -> int | None: ...

    def unsent_size(self) -> int | None: ...
