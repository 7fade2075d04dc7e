"""A response body read without h11: chunked, or of a given length.

The process stream's ``GET`` is answered by the thousand when a process
starts, with a plain head and a chunked body; h11 spends on each its request
object and field checks, its state machine and an event object a chunk
(``docs/performance.md``, *The SSE stream read without h11*). A plain head
(:func:`~._answer.framed_head`) hands its body to one of the two readers
here, which read it as h11 does and refuse what h11 refuses, raising
``h11.RemoteProtocolError`` as h11 does (the lean path's callers already
treat it as the network failing). Any other head goes to h11, which reads
its body too.

Both are sans-IO: :meth:`receive` is given what the connection read (``b""``
at its end) and :meth:`take` hands back the body's bytes received so far.
"""

from __future__ import annotations

import re
from typing import Final, final

import h11

from ._answer import HEAD_END, field_line

__all__ = ["BodyReader", "ChunkedBody", "SizedBody"]

# A chunk's size line, as h11 reads it: 1-20 hex digits, any extension
# (ignored), white space, CRLF.
_CHUNK_LINE: Final = re.compile(rb"([0-9A-Fa-f]{1,20})(?:;.*)?[ \t]*\r\n")
_CRLF: Final = b"\r\n"


@final
class ChunkedBody:
    """A chunked body (RFC 9112 §7.1), its chunks' bytes given back as they arrive.

    Args:
        max_line: the longest size line or trailer section kept waiting for
            its end (h11's ``max_incomplete_event_size``).
    """

    __slots__ = (
        "_buffer",
        "_ended",
        "_eof",
        "_footer",
        "_left",
        "_max_line",
        "_trailer",
    )

    def __init__(self, max_line: int) -> None:
        self._buffer = bytearray()
        self._max_line = max_line
        # Bytes of the current chunk's data still to come.
        self._left = 0
        # How much of the CRLF after a chunk's data is still to come (0-2).
        self._footer = 0
        self._trailer = False
        self._ended = False
        self._eof = False

    def receive(self, data: bytes) -> None:
        """What the connection read next; ``b""`` once it has closed."""
        if data:
            self._buffer += data
        else:
            self._eof = True

    def take(self) -> tuple[bytes, bool]:
        """The body's bytes received since the last call, and whether it has ended.

        Raises:
            h11.RemoteProtocolError: the framing is broken (a size line, a
                chunk's CRLF, a trailer), a line is too long, or the
                connection closed before the last chunk (once every byte
                before it was taken).
        """
        parts: list[bytes] = []
        try:
            self._read(parts)
        except h11.RemoteProtocolError:
            # What came before the broken framing first; the framing, still
            # unread, is refused again at the next call.
            if not parts:
                raise
        if self._eof and not self._ended and not parts:
            raise h11.RemoteProtocolError(
                "peer closed connection without sending complete message body"
            )
        return b"".join(parts), self._ended

    def _read(self, parts: list[bytes]) -> None:
        """Read what the buffer holds into ``parts``, as far as the framing goes."""
        buffer = self._buffer
        at = 0
        try:
            while not self._ended:
                if self._footer:
                    got = buffer[at : at + self._footer]
                    if not got:
                        break
                    if got != _CRLF[2 - self._footer :][: len(got)]:
                        raise h11.RemoteProtocolError("malformed chunk footer")
                    at += len(got)
                    self._footer -= len(got)
                elif self._trailer:
                    self._end_trailer(buffer, at)
                    if not self._ended:
                        break
                elif self._left:
                    piece = buffer[at : at + self._left]
                    if not piece:
                        break
                    parts.append(bytes(piece))
                    at += len(piece)
                    self._left -= len(piece)
                    if not self._left:
                        self._footer = 2
                else:
                    end = buffer.find(b"\r\n", at)
                    if end < 0:
                        if len(buffer) - at > self._max_line:
                            raise h11.RemoteProtocolError("chunk size line too long")
                        break
                    line = _CHUNK_LINE.fullmatch(buffer, at, end + 2)
                    if line is None:
                        raise h11.RemoteProtocolError("illegal chunk header")
                    at = end + 2
                    self._left = int(line.group(1), 16)
                    self._trailer = not self._left
        finally:
            del buffer[:at]

    def _end_trailer(self, buffer: bytearray, at: int) -> None:
        """End the body once the trailer section from ``at`` is whole.

        Its fields are checked, then dropped; what follows it is not read.
        """
        if buffer.startswith(b"\n", at) or buffer.startswith(_CRLF, at):
            self._ended = True
            return
        # A trailer section ends as a head does.
        blank = HEAD_END.search(buffer, at)
        if blank is None:
            if len(buffer) - at > self._max_line:
                raise h11.RemoteProtocolError("trailer section too long")
            return
        for line in bytes(buffer[at : blank.start()]).split(b"\n"):
            if field_line(line.removesuffix(b"\r")) is None:
                raise h11.RemoteProtocolError("illegal trailer field")
        self._ended = True


@final
class SizedBody:
    """A body of ``length`` bytes (``Content-Length``); anything past it is not read."""

    __slots__ = ("_eof", "_left", "_parts")

    def __init__(self, length: int) -> None:
        self._left = length
        self._parts: list[bytes] = []
        self._eof = False

    def receive(self, data: bytes) -> None:
        """What the connection read next; ``b""`` once it has closed."""
        if not data:
            self._eof = True
        elif self._left:
            piece = data[: self._left]
            self._parts.append(piece)
            self._left -= len(piece)

    def take(self) -> tuple[bytes, bool]:
        """The body's bytes received since the last call, and whether it has ended.

        Raises:
            h11.RemoteProtocolError: the connection closed before the body's
                end (once every byte before it was taken).
        """
        data = b"".join(self._parts)
        self._parts.clear()
        if self._eof and self._left and not data:
            raise h11.RemoteProtocolError(
                "peer closed connection without sending complete message body"
            )
        return data, not self._left


BodyReader = ChunkedBody | SizedBody
