"""TLS for the lean path: the client side of a TLS connection over a trio socket, read in one step.

A held process stream over TLS (an ``https://`` room, as every hosted room
is) wakes once per heartbeat or ping for the rest of the process's life, and
each wake-up is mostly TLS plumbing: ``trio.SSLStream`` is built for any
stream and any number of tasks, so a read takes its conflict detector, its
handshake guard, a lock and the socket stream's own read and checkpoints,
and hands over one TLS record per call (a wake-up that finds two heartbeats
is two reads, and two turns of the holder). :class:`TLSStream` is what the
lean path needs of it and no more, built the same way (an
:class:`ssl.SSLObject` between two memory BIOs):

* **the handshake** (:func:`open_tls`), with the context's certificate and
  host name checks, before the stream is handed over;
* **a read** is :func:`~._sockio.read_some` of the socket (one wait, one
  ``read``), then every record those bytes complete, decrypted at once and
  handed over together; then OpenSSL may free the write buffer that reading
  the server's session tickets set up (16 KiB a stream, otherwise kept for
  as long as the stream writes nothing);
* **a write** encrypts and sends in turn with the other writers (a lock),
  so that records go out in the order they were made; a small one (a
  WebSocket's pong) may go at once, without a checkpoint, when no other
  writer waits (:meth:`TLSStream.send_now`);
* **the end**: the peer's ``close_notify`` and a close without one both read
  as the end of the stream, as ``trio.SSLStream(https_compatible=True)``
  reads them (HTTP frames its own bodies); closing sends no
  ``close_notify`` (the socket is closed at once, as ``aclose_forcefully``
  would). Its socket is :attr:`TLSStream.transport_stream`, as trio's, so
  that the socket helpers of :mod:`._sockio` close it and let it keep bytes.

A TLS error is a :class:`trio.BrokenResourceError` raised from the
:class:`ssl.SSLError` that caused it, as trio raises it. What the stream
buys is in ``docs/performance.md``.
"""

from __future__ import annotations

import contextlib
import ssl
from typing import final

import trio

from ._resume import RoomSessions, resumable
from ._sockio import READ_SIZE, close_now, read_some
from ._socknow import socket_now

__all__ = ["TLSStream", "open_tls"]


@final
class TLSStream(trio.abc.Stream):
    """The client side of a TLS connection over ``transport_stream``; made by :func:`open_tls`."""

    def __init__(
        self,
        transport_stream: trio.abc.Stream,
        ssl_object: ssl.SSLObject,
        incoming: ssl.MemoryBIO,
        outgoing: ssl.MemoryBIO,
    ) -> None:
        self.transport_stream = transport_stream
        self._ssl = ssl_object
        self._incoming = incoming
        self._outgoing = outgoing
        self._send_lock = trio.StrictFIFOLock()
        # The socket's writes at once (send_now), when it is a plain one.
        self._now = socket_now(transport_stream)
        # Records send_now made that the kernel did not take: they go first.
        self._unsent = b""
        # Set once the peer ended the stream (with or without close_notify).
        self._eof = False
        # Where a full handshake's session goes once a ticket was read, and the
        # event that lets the burst go when this one went first; None once told.
        self._resumption: tuple[RoomSessions, trio.Event | None] | None = None

    def __repr__(self) -> str:
        return f"<TLSStream {self._ssl.version()}>"

    def cipher(self) -> tuple[str, str, int] | None:
        """The cipher in use: its name, its protocol version, its secret bits."""
        return self._ssl.cipher()

    def version(self) -> str | None:
        """The protocol version agreed (``"TLSv1.3"``)."""
        return self._ssl.version()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        """Every byte of application data the next records give, up to ``max_bytes``.

        Returns:
            ``b""`` once the peer ended the stream.

        Raises:
            trio.BrokenResourceError: the connection broke, or TLS failed.
            trio.ClosedResourceError: the stream was closed.

        Cancellation:
            A checkpoint; cancelled while waiting, nothing is lost.
        """
        size = READ_SIZE if max_bytes is None else max_bytes
        if size < 1:
            raise ValueError("max_bytes must be at least 1")
        data = self._decrypt(size)
        if self._resumption is not None:
            self._tell_session(data is not None)
        if data is not None:
            await self._flush()
            return data
        now = self._now
        while True:
            if now is not None:
                raw = await now.receive_plain(READ_SIZE)
            else:
                raw = await read_some(self.transport_stream, READ_SIZE)
            if raw:
                self._incoming.write(raw)
            else:
                self._incoming.write_eof()
            data = self._decrypt(size)
            if self._resumption is not None:
                self._tell_session(data is not None)
            if data is not None:
                if self._outgoing.pending:
                    await self._flush()
                return data

    def _decrypt(self, size: int) -> bytes | None:
        """What the records received so far give, up to ``size``; None when nothing yet."""
        if self._eof:
            return b""
        parts: list[bytes] = []
        wanted = size
        incoming = self._incoming
        while wanted > 0:
            if not incoming.pending and not incoming.eof and not self._ssl.pending():
                # Nothing to decrypt: a read would only raise SSLWantReadError
                # (records come whole from the BIO, none read ahead).
                break
            try:
                part = self._ssl.read(wanted)
            except ssl.SSLWantReadError:
                break
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                self._eof = True
                break
            except ssl.SSLError as exc:
                raise trio.BrokenResourceError(f"TLS failed: {type(exc).__name__}") from exc
            if not part:
                self._eof = True
                break
            parts.append(part)
            wanted -= len(part)
        if parts:
            self._release_write_buffer()
            return b"".join(parts)
        return b"" if self._eof else None

    def keep_session_in(self, sessions: RoomSessions, first: trio.Event | None) -> None:
        """Keep this connection's session in ``sessions`` once it can be resumed (:mod:`._resume`).

        Now, when it can already (TLS 1.2), else at the reads that bring the
        room's tickets; with ``first``, the outcome, whatever it is, sets it.
        """
        self._resumption = (sessions, first)
        self._tell_session(ended=False)

    def _tell_session(self, ended: bool) -> None:
        """Keep the room's session once a ticket was read; else, at the first data or the end, none.

        TLS 1.3 tickets come before the room's first data: a stream that read
        data, or its end, with no ticket has none to give.
        """
        assert self._resumption is not None
        session = resumable(self._ssl)
        if session is not None or ended:
            sessions, first = self._resumption
            self._resumption = None
            sessions.keep(session, first)

    def _release_write_buffer(self) -> None:
        """Let OpenSSL free the write buffer that reading a post-handshake message set up.

        A read that meets the server's session tickets (or a key update) makes
        OpenSSL set up its write buffer (16 KiB) beside the read one, and it
        frees it only once a write is done: an empty write, which sends nothing.
        A held SSE stream writes nothing more until its exit. A failure here
        shows again at the stream's next read or write.
        """
        with contextlib.suppress(ssl.SSLError):
            self._ssl.write(b"")

    async def _flush(self) -> None:
        """Send what the TLS object wrote after a read (a key update's answer), else checkpoint."""
        if not self._outgoing.pending:
            await trio.lowlevel.checkpoint()
            return
        async with self._send_lock:
            data, self._unsent = self._unsent + self._outgoing.read(), b""
            if data:
                await self.transport_stream.send_all(data)

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        """Encrypt ``data`` and send it, in turn with the other writers.

        What :meth:`send_now` left unsent goes first (with ``b""``, alone).

        Raises:
            trio.BrokenResourceError: the connection broke, or TLS failed.
            trio.ClosedResourceError: the stream was closed.

        Cancellation:
            A checkpoint; cancelled part way, the stream is no longer usable
            (part of a record may be out).
        """
        async with self._send_lock:
            if data:
                try:
                    self._ssl.write(data)
                except ssl.SSLError as exc:
                    raise trio.BrokenResourceError(f"TLS failed: {type(exc).__name__}") from exc
            out, self._unsent = self._unsent + self._outgoing.read(), b""
            if out:
                await self.transport_stream.send_all(out)

    def send_now(self, data: bytes) -> int | None:
        """Encrypt ``data`` and write it at once, without a checkpoint, where the socket can.

        For a plain socket under the stream, when no other writer is under
        way: the record goes in one ``write``. Should the kernel take only
        part of it, the rest waits here (:meth:`unsent_size`) and goes
        before anything written later; a close drops it.

        Returns:
            ``len(data)`` once its record is made and written (or queued
            behind what the kernel did not take), 0 when nothing was done
            (another writer is under way, or the kernel does not take the
            rest of an earlier record), None when the socket cannot be
            written so (use :meth:`send_all`).

        Raises:
            OSError: the connection is broken.
            trio.BrokenResourceError: TLS failed.
        """
        now = self._now
        if now is None:
            return None
        if self._send_lock.locked() or not data:
            return 0
        if self._unsent:
            self._unsent = self._unsent[now.send(self._unsent) :]
            if self._unsent:
                return 0
        try:
            self._ssl.write(data)
        except ssl.SSLError as exc:
            raise trio.BrokenResourceError(f"TLS failed: {type(exc).__name__}") from exc
        out = self._outgoing.read()
        self._unsent = out[now.send(out) :]
        return len(data)

    def unsent_size(self) -> int | None:
        """How many bytes of the records :meth:`send_now` made the socket has not taken yet.

        None when :meth:`send_now` cannot write this stream.
        """
        return None if self._now is None else len(self._unsent)

    async def wait_send_all_might_not_block(self) -> None:
        await self.transport_stream.wait_send_all_might_not_block()

    async def aclose(self) -> None:
        """Close the socket at once, without ``close_notify``.

        Cancellation:
            Closes even when cancelled.
        """
        if self._resumption is not None:
            self._tell_session(ended=True)
        if not close_now(self.transport_stream):
            await trio.aclose_forcefully(self.transport_stream)
        else:
            await trio.lowlevel.checkpoint()


async def open_tls(
    transport_stream: trio.abc.Stream,
    context: ssl.SSLContext,
    server_hostname: str,
    *,
    sessions: RoomSessions | None = None,
    handshakes: trio.CapacityLimiter | None = None,
) -> TLSStream:
    """The TLS handshake over ``transport_stream``, as a client of ``server_hostname``.

    The context's checks apply (with ``ssl.create_default_context()``: the
    certificate chain and the host name). With ``sessions`` (the room's, for
    this context and this server name: see :mod:`._resume`), the room's kept
    session is offered, and a full handshake's session is kept there for the
    next connections; the first connection to a room goes alone and the
    others wait for its session, briefly. With ``handshakes``, the handshake
    itself (not that wait) waits its turn among the limiter's.

    Raises:
        trio.BrokenResourceError: the handshake failed (raised from the
            ``ssl.SSLError``, a certificate refused included) or the
            connection broke.

    Cancellation:
        A checkpoint; cancelled, the handshake is left unfinished and the
        caller closes ``transport_stream``.
    """
    session, first = (None, None) if sessions is None else await sessions.offer()
    try:
        if handshakes is None:
            stream = await _handshake(transport_stream, context, server_hostname, session)
        else:
            async with handshakes:
                stream = await _handshake(transport_stream, context, server_hostname, session)
    except BaseException:
        if sessions is not None:
            sessions.keep(None, first)
        raise
    if sessions is not None and not stream._ssl.session_reused:
        if session is not None:
            sessions.refused(session)
        stream.keep_session_in(sessions, first)
    await trio.lowlevel.checkpoint()
    return stream


async def _handshake(
    transport_stream: trio.abc.Stream,
    context: ssl.SSLContext,
    server_hostname: str,
    session: ssl.SSLSession | None,
) -> TLSStream:
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    ssl_object = context.wrap_bio(
        incoming, outgoing, server_side=False, server_hostname=server_hostname, session=session
    )
    while True:
        try:
            ssl_object.do_handshake()
        except ssl.SSLWantReadError:
            finished = False
        except ssl.SSLError as exc:
            raise trio.BrokenResourceError(f"TLS failed: {type(exc).__name__}") from exc
        else:
            finished = True
        out = outgoing.read()
        if out:
            await transport_stream.send_all(out)
        if finished:
            break
        raw = await read_some(transport_stream, READ_SIZE)
        if not raw:
            raise trio.BrokenResourceError("the connection closed during the TLS handshake")
        incoming.write(raw)
    return TLSStream(transport_stream, ssl_object, incoming, outgoing)
