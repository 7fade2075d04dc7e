"""A trio stream read, written and closed without trio's per-call machinery.

A held process stream is read tens of thousands of times an hour, and a
goodbye closes and writes thousands of them at once: for a plain socket on a
POSIX system these helpers do each with one system call and no task switch
(:func:`read_some` waits, then reads once; :func:`send_now` writes what the
kernel takes; :func:`close_now` closes at once; :func:`discard_unread` drops
what the peer sent before a close, so that the close is an orderly end).
The lean path's TLS stream over such a socket is written at once too, a
record a write: what the kernel does not take of it waits in the stream
(:func:`unsent_size`), to go before anything later. Any other stream
(trio's TLS, in memory) goes through its own methods, as does a read of
bytes put back in front by :class:`Prefixed`. What each saves is in
``docs/performance.md``.

:class:`QuietReads` reads a held stream *quietly* where the kernel can help
(TCP on Linux, plain or under TLS): a lone heartbeat or ping of the room's
stays in the kernel until the next one comes, or until the reader's
deadline draws near, and is read then with the one after it, or with the
time it arrived.
"""

from __future__ import annotations

import errno
import fcntl
import os
import socket as _socket
import struct
import sys
import termios
from collections.abc import Awaitable, Callable
from typing import Final, final

import trio

__all__ = [
    "READ_SIZE",
    "Prefixed",
    "QuietReads",
    "can_send_now",
    "close_now",
    "discard_unread",
    "drain_fd",
    "plain_socket",
    "read_socket",
    "read_some",
    "send_now",
    "tls_transport",
    "unsent_size",
    "unwrap_prefixed",
]

# One read from the socket; an SSE heartbeat or an exit answer fits many times over.
READ_SIZE: Final = 65_536
# The most a drain before a close reads (discard_unread).
DISCARD_LIMIT: Final = 1 << 20
# How long before its deadline a quiet read looks at what the kernel kept.
CHECK_MARGIN: Final = 1.0
# Where struct tcp_info (linux/tcp.h) keeps tcpi_last_data_recv, in ms: after
# eight one-byte fields and eleven 32-bit ones.
_LAST_DATA_RECV: Final = struct.Struct("=I")
_LAST_DATA_RECV_OFFSET: Final = 52
_TCP_INFO_SIZE: Final = _LAST_DATA_RECV_OFFSET + _LAST_DATA_RECV.size


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
        else:
            transport = tls_transport(stream)
            if transport is None:
                return False
            stream = transport


def tls_transport(stream: trio.abc.Stream) -> trio.abc.Stream | None:
    """The stream a TLS layer runs over (trio's ``SSLStream`` or the lean path's), or None."""
    transport = getattr(stream, "transport_stream", None)
    return transport if isinstance(transport, trio.abc.Stream) else None


def plain_socket(stream: trio.abc.Stream) -> trio.SocketStream | None:
    """The plain socket under ``stream`` when it can be written without trio (POSIX only)."""
    stream = unwrap_prefixed(stream)
    if os.name != "posix" or not isinstance(stream, trio.SocketStream):
        return None
    return stream


def _stream_error(exc: OSError) -> trio.BrokenResourceError | trio.ClosedResourceError:
    """What ``SocketStream`` raises for ``exc``: closed for a closed descriptor, else broken."""
    if exc.errno == errno.EBADF:
        return trio.ClosedResourceError("the socket was already closed")
    return trio.BrokenResourceError(f"socket connection broken: {exc}")


def read_some(stream: trio.abc.Stream, max_bytes: int) -> Awaitable[bytes]:
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
    plain = None if isinstance(stream, Prefixed) and stream._prefix else plain_socket(stream)
    if plain is None:
        return _received(stream, max_bytes)
    return read_socket(plain.socket, max_bytes)


async def _received(stream: trio.abc.Stream, max_bytes: int) -> bytes:
    """:func:`read_some` of any other stream: its own ``receive_some``, as bytes (a checkpoint)."""
    return bytes(await stream.receive_some(max_bytes))


async def read_socket(socket: trio.socket.SocketType, max_bytes: int) -> bytes:
    """:func:`read_some` of a plain socket's own trio socket: one wait, then one ``read``.

    Raises:
        trio.ClosedResourceError: the socket was closed, before or during the wait.
        trio.BrokenResourceError: the connection broke.

    Cancellation:
        A checkpoint: the wait comes before the read.
    """
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


def discard_unread(stream: trio.abc.Stream, *, limit: int = DISCARD_LIMIT) -> None:
    """Read and drop, without a checkpoint, what the peer already sent on a socket about to close.

    Closing a TCP socket whose receive buffer still holds bytes sends a reset
    instead of an orderly end. A peer that writes to the connection meanwhile
    (a heartbeat) then fails its write, and a server that closes on that
    failure may never read what was sent just before the close: a WebSocket's
    exit frame. Drained first, the close is an orderly end, read after the
    exit. The socket's own bytes: under TLS, records left undecrypted, so the
    stream is of no use after this but to close. At most ``limit`` bytes;
    nothing for streams not over a socket on a POSIX system, or on any error
    (the close follows anyway).
    """
    unprefixed = unwrap_prefixed(stream)
    plain = plain_socket(tls_transport(unprefixed) or unprefixed)
    if plain is not None:
        drain_fd(plain.socket.fileno(), limit)


def drain_fd(fd: int, limit: int) -> None:
    """Read and drop at most ``limit`` bytes of ``fd``, until it has none (see discard_unread)."""
    while fd != -1 and limit > 0:
        try:
            data = os.read(fd, min(limit, READ_SIZE))
        except OSError:  # BlockingIOError included: nothing more to read
            return
        if not data:
            return
        limit -= len(data)


def can_send_now(stream: trio.abc.Stream) -> bool:
    """Whether :func:`send_now` writes ``stream`` straight to its socket (a plain one, POSIX).

    What it takes is then in the kernel: :func:`unsent_size` is always 0.
    """
    return plain_socket(stream) is not None


def send_now(stream: trio.abc.Stream, data: bytes) -> int | None:
    """Write ``data`` at once, without a checkpoint; how much of it ``stream`` took.

    What the stream took goes out before anything written to it later;
    the rest is the caller's to write (``send_all``). The caller must be
    the stream's only sender at that moment.

    * A plain socket on a POSIX system takes what the kernel takes, in one
      ``write``, with no task switch, which is what a goodbye of thousands
      of sockets wants (``send_all`` costs each a lock, a conflict detector
      and a reschedule).
    * The lean path's TLS stream over such a socket takes ``data`` whole or
      not at all: its record is made and written the same way, and what the
      kernel does not take of it waits in the stream (:func:`unsent_size`)
      and goes first with the stream's next write
      (:meth:`TLSStream.send_now <letagents_trio._http._tls.TLSStream.send_now>`).

    Returns:
        How many leading bytes of ``data`` were taken (0: none, the socket's
        buffer is full or another writer is under way), or None when
        ``stream`` cannot be written this way (trio's TLS, in memory, or not
        POSIX): then use ``send_all``.

    Raises:
        OSError: the connection is broken.
        trio.BrokenResourceError: TLS failed.
    """
    plain = plain_socket(stream)
    if plain is None:
        # The lean path's TLS stream writes a record at once where it can.
        write_now = getattr(unwrap_prefixed(stream), "send_now", None)
        result: int | None = write_now(data) if callable(write_now) else None
        return result
    try:
        return os.write(plain.socket.fileno(), data)
    except BlockingIOError:
        return 0


def unsent_size(stream: trio.abc.Stream) -> int | None:
    """How many bytes ``stream`` took from :func:`send_now` that its socket has not taken yet.

    They go first with the stream's next write (``send_all``, of ``b""``
    too, which sends them alone), and a close drops them: a caller that
    closes the stream after :func:`send_now` and must know its bytes are
    out (an exit before a close) asks this first. 0 for a plain socket,
    which keeps nothing back; None when :func:`send_now` cannot write
    ``stream`` at all.
    """
    if plain_socket(stream) is not None:
        return 0
    size_of = getattr(unwrap_prefixed(stream), "unsent_size", None)
    size: int | None = size_of() if callable(size_of) else None
    return size


def unwrap_prefixed(stream: trio.abc.Stream) -> trio.abc.Stream:
    """The stream a :class:`Prefixed` reads ahead of, which its writes go to; else ``stream``."""
    while isinstance(stream, Prefixed):
        stream = stream._stream
    return stream


def _quiet_socket(stream: trio.abc.Stream) -> trio.socket.SocketType | None:
    """The TCP socket under ``stream`` (plain or TLS) when its kernel can keep bytes (Linux)."""
    while isinstance(stream, Prefixed):
        stream = stream._stream
    stream = tls_transport(stream) or stream
    if not isinstance(stream, trio.SocketStream) or not sys.platform.startswith("linux"):
        return None
    sock = stream.socket
    if sock.family not in (_socket.AF_INET, _socket.AF_INET6) or sock.type != _socket.SOCK_STREAM:
        return None
    return sock


def _record_overhead(stream: trio.abc.Stream) -> int | None:
    """What TLS adds to one record's bytes on ``stream`` (0 when plain); None when it varies.

    TLS 1.3: a 5-byte header, the inner content type and a 16-byte tag (8
    for CCM_8). TLS 1.2: the header and the tag, plus an 8-byte explicit
    nonce for AES-GCM and CCM. A cipher with padding (CBC) varies.
    """
    while isinstance(stream, Prefixed):
        stream = stream._stream
    if tls_transport(stream) is None:
        return 0
    cipher_of = getattr(stream, "cipher", None)
    cipher = cipher_of() if callable(cipher_of) else None
    if not cipher:
        return None
    name, version = cipher[0], cipher[1]
    tag = 8 if "CCM_8" in name or "CCM8" in name else 16
    if version == "TLSv1.3":
        return 5 + 1 + tag
    if version == "TLSv1.2" and ("GCM" in name or "CCM" in name):
        return 5 + 8 + tag
    if version == "TLSv1.2" and "CHACHA20" in name:
        return 5 + tag
    return None


@final
class QuietReads:
    """The reads of one held stream, which may let the kernel keep a few bytes unread.

    A held stream is silent but for the room's heartbeats (SSE) or pings
    (WebSocket), every 15 s; read as they come, each is a wake-up. A read
    that may *keep* ``n`` bytes, on TCP on Linux (plain, or under TLS),
    raises the socket's receive low-water mark (``SO_RCVLOWAT``) to
    ``n + 1``: the kernel keeps up to ``n`` bytes without waking the reader.
    The read still wakes at once for anything more, and for the end of the
    stream or an error (the kernel reports those whatever the mark).
    Otherwise, :data:`CHECK_MARGIN` before the reader's deadline (the
    holder's silence, the socket's ping), it takes what the kernel kept, and
    :attr:`heard_at` says when the last of it arrived (``TCP_INFO``'s
    ``tcpi_last_data_recv``), from which the caller re-arms its deadline as
    if it had read each byte as it came; found nothing kept, it waits as a
    plain read until its deadline. No deadline moves.

    What may be kept is the caller's to say, in bytes on the wire
    (:meth:`wire_size` says what a piece of the stream weighs there, TLS
    included): only as much as one heartbeat, so that anything else the
    room writes, alone or after a kept heartbeat, wakes the read at once.
    Anything else (in memory, another system, ``keep=0``) is a plain
    :func:`read_some`, with :attr:`heard_at` None.
    """

    # One per held stream, ten thousand at a time.
    __slots__ = ("_kept", "_margin", "_overhead", "_plain", "_socket", "_stream", "heard_at")

    def __init__(self, stream: trio.abc.Stream, *, margin: float = CHECK_MARGIN) -> None:
        self._stream = stream
        self._margin = margin
        self._socket = _quiet_socket(stream)
        # Read straight from the socket (else through the stream's TLS).
        self._plain = plain_socket(stream) is not None
        # The bytes the kernel keeps now (its low-water mark less one).
        self._kept = 0
        # What TLS adds to a record (0: plain), once asked; None: it varies.
        self._overhead: int | None = -1
        # When the bytes of the latest read arrived, if the read found them kept; else None.
        self.heard_at: float | None = None

    def __repr__(self) -> str:
        return f"<QuietReads keep={self._kept}>"

    def wire_size(self, size: int) -> int:
        """What ``size`` bytes of the stream, written as one piece, weigh on the wire.

        ``size`` itself on a plain socket; under TLS, one record of them
        (0 when the cipher's records vary in size, or nothing can be kept:
        then nothing is).
        """
        if self._socket is None:
            return 0
        if self._overhead == -1:
            self._overhead = 0 if self._plain else _record_overhead(self._stream)
        return 0 if self._overhead is None else size + self._overhead

    async def read(self, max_bytes: int, *, keep: int = 0) -> bytes:
        """The next bytes, as :func:`read_some`, letting the kernel keep up to ``keep`` of them.

        ``keep`` counts bytes on the wire (see :meth:`wire_size`).

        Raises:
            trio.ClosedResourceError: the socket was closed, before or during the wait.
            trio.BrokenResourceError: the connection broke.

        Cancellation:
            A checkpoint, as :func:`read_some`. Under TLS the wait is
            ``receive_some``'s, which a cancellation leaves usable (only a
            handshake under way would not be).
        """
        self.heard_at = None
        if not self._keep(keep):
            return bytes(await self._next(max_bytes))
        with trio.move_on_at(trio.current_effective_deadline() - self._margin):
            return bytes(await self._next(max_bytes))
        return await self._after_check(max_bytes)

    async def read_by(self, max_bytes: int, deadline: float, *, keep: int) -> bytes | None:
        """The next bytes, as :meth:`read`, or None when none came by ``deadline`` (trio's clock).

        The same read as :meth:`read` under ``trio.move_on_at(deadline)``, in
        one cancel scope rather than two: the check for kept bytes comes
        before whichever is first, ``deadline`` or the caller's.

        Raises:
            trio.ClosedResourceError: the socket was closed, before or during the wait.
            trio.BrokenResourceError: the connection broke.

        Cancellation:
            A checkpoint, as :meth:`read`.
        """
        self.heard_at = None
        if self._keep(keep):
            with trio.move_on_at(min(deadline, trio.current_effective_deadline()) - self._margin):
                return bytes(await self._next(max_bytes))
            with trio.move_on_at(deadline):
                return await self._after_check(max_bytes)
            return None
        with trio.move_on_at(deadline):
            return bytes(await self._next(max_bytes))
        return None

    async def _after_check(self, max_bytes: int) -> bytes:
        """The read once its check came: what the kernel kept, else the next bytes, as they come."""
        if self._plain:
            kept = self._take_kept(max_bytes)
            if kept is not None:
                return kept
        else:
            # Through TLS the kept records are read at once by the read below
            # (it tries the socket before it waits); heard_at says when they came.
            self._kept_since()
        # From now on any byte wakes the read (and a record cut short is read whole).
        self._keep(0)
        return bytes(await self._next(max_bytes))

    def _next(self, max_bytes: int) -> Awaitable[bytes | bytearray]:
        """The stream's next read: :func:`read_some` of a plain socket, else its ``receive_some``.

        A :class:`Prefixed` stream whose bytes were all given back is read
        through no more: the stream under it is read straight.
        """
        stream = self._stream
        if isinstance(stream, Prefixed) and not stream._prefix:
            self._stream = stream = stream._stream
        if self._plain:
            return read_some(stream, max_bytes)
        return stream.receive_some(max_bytes)

    def loud(self) -> bytes:
        """Let every byte wake the reads again; what the kernel kept meanwhile, read at once.

        For a reader about to wait for an answer: bytes kept from before
        would otherwise wake it first, for nothing. Without a checkpoint;
        ``b""`` when nothing was kept (or nothing could be), and when the
        stream ended or broke, which the next read reports. Under TLS what
        was kept cannot be read without a checkpoint: it wakes the next read.
        """
        if not self._kept:
            return b""
        self._keep(0)
        if not self._plain:
            return b""
        try:
            return self._take_kept(READ_SIZE) or b""
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return b""

    def _keep(self, keep: int) -> int:
        """Let the kernel keep ``keep`` bytes where it can; how many it keeps now."""
        sock = self._socket
        if sock is None or sock.fileno() == -1:
            return 0
        if keep != self._kept:
            try:
                sock.setsockopt(_socket.SOL_SOCKET, _socket.SO_RCVLOWAT, keep + 1)
            except OSError:
                # A socket that refuses the mark is read plainly from now on.
                self._socket, self._kept = None, 0
                return 0
            self._kept = keep
        return self._kept

    def _kept_since(self) -> None:
        """When the kernel keeps bytes now, :attr:`heard_at` says when the last of them came."""
        sock = self._socket
        fd = -1 if sock is None else sock.fileno()
        if sock is None or fd == -1:
            return
        try:
            queued = struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
        except OSError:
            return
        if queued:
            self.heard_at = self._last_heard(sock)

    @staticmethod
    def _last_heard(sock: trio.socket.SocketType) -> float:
        """When the socket's latest bytes arrived, on trio's clock (``TCP_INFO``)."""
        try:
            info = sock.getsockopt(_socket.IPPROTO_TCP, _socket.TCP_INFO, _TCP_INFO_SIZE)
            age_ms: int = _LAST_DATA_RECV.unpack_from(info, _LAST_DATA_RECV_OFFSET)[0]
        except (OSError, struct.error):
            age_ms = 0
        return trio.current_time() - age_ms / 1000

    def _take_kept(self, max_bytes: int) -> bytes | None:
        """What the kernel kept (``b""``: the stream ended), or None when it kept nothing."""
        sock = self._socket
        fd = -1 if sock is None else sock.fileno()
        if sock is None or fd == -1:
            raise trio.ClosedResourceError("the socket was already closed")
        try:
            data = os.read(fd, max_bytes)
        except BlockingIOError:
            return None
        except OSError as exc:
            raise _stream_error(exc) from exc
        if data:
            self.heard_at = self._last_heard(sock)
        return data
