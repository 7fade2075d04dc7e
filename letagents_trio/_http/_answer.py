"""The common answer heads read without h11: a sized answer, a stream's, and an upgrade's.

A goodbye reads thousands of pipelined answers within its deadline, each
``200`` with ``{"recorded":true}``, and h11 would spend on each its state
machine, told of a stand-in request for every answer, and its event objects
(``docs/performance.md`` has the cost). :func:`simple_head` reads such a
head with two regular expressions, after the same checks h11 makes of it
(RFC 9112: a status line, header fields whose names are tokens and whose
values hold no control character but a tab). Any
other head (another version, a ``Transfer-Encoding``, no length, more than
one, an informational or bodiless status, bare line feeds, a folded field)
is not read here: the caller hands the bytes to h11, which reads it and every
answer after it on that connection.

:func:`switched_head` reads the other head that comes by the thousand, the
``101 Switching Protocols`` answering each process socket's upgrade, in the
same way: a plain ``HTTP/1.1 101`` head with no framing field is read here,
anything else is h11's.

:func:`framed_head` reads the third, the answer to each process stream's
``GET``: a plain head whose body is framed by ``Content-Length`` or by
``Transfer-Encoding: chunked`` alone, read by a reader of
:mod:`~letagents_trio._http._body`; anything else is h11's, body included.
:func:`field_line` is the check of one field line they share.
"""

from __future__ import annotations

import re
from typing import Final, final

import attrs

__all__ = [
    "HEAD_END",
    "SimpleHead",
    "field_line",
    "framed_head",
    "simple_head",
    "switched_head",
]

# Where a head ends, as h11 finds it: a blank line, CRLF or bare LF.
HEAD_END: Final = re.compile(rb"\n\r?\n")
_STATUS_LINE = re.compile(rb"HTTP/1\.1 ([1-9][0-9]{2})(?: [\t\x20-\x7e\x80-\xff]*)?")
# The fields that frame a message: a 101 carrying one is left to h11, which checks them.
_FRAMING: Final = frozenset({b"content-length", b"transfer-encoding"})
_FIELD = re.compile(
    rb"([-!#$%&'*+.^_`|~0-9a-zA-Z]+):[ \t]*((?:[^\x00\s]+(?:[ \t]+[^\x00\s]+)*)?)[ \t]*"
)
# A Content-Length h11 accepts: digits, at most 20 of them.
_LENGTH = re.compile(rb"[0-9]{1,20}")
# Statuses whose answer has no body whatever its fields say (RFC 9112 §6.3).
_BODILESS = frozenset({204, 304})


@final
@attrs.frozen
class SimpleHead:
    """A head :func:`simple_head` read: the answer's framing is its length alone.

    Attributes:
        status: the status code (200-599, not 204 or 304).
        headers: the fields, names in lower case, values without surrounding white space.
        length: the body's length (``Content-Length``).
        close: the room closes the connection after this answer (``Connection: close``).
        size: the head's length in bytes, blank line included.
    """

    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    length: int
    close: bool
    size: int


def _head_lines(data: bytes | bytearray) -> tuple[int, list[bytes], int] | None:
    """The status, the field lines and the size of a complete CRLF head; None otherwise."""
    end = HEAD_END.search(data)
    if end is None or data[end.start() - 1 : end.start()] != b"\r" or end.group() != b"\n\r\n":
        return None  # incomplete, or bare line feeds somewhere at its end
    lines = bytes(data[: end.start() - 1]).split(b"\r\n")
    status_line = _STATUS_LINE.fullmatch(lines[0])
    if status_line is None:
        return None
    return int(status_line.group(1)), lines[1:], end.end()


def field_line(line: bytes) -> tuple[bytes, bytes] | None:
    """One field line's name (in lower case) and value; None for one h11 would refuse."""
    field = _FIELD.fullmatch(line)
    if field is None:
        return None  # bare LF, a folded line, or a field h11 would refuse
    return field.group(1).lower(), field.group(2)


def _final_head(
    data: bytes | bytearray,
) -> tuple[int, list[tuple[bytes, bytes]], int | None, bool, int] | None:
    """A complete head at the start of ``data`` whose body is framed by a length or by chunks.

    Returns:
        Its status, fields (those h11 would accept), the body's length (None
        when chunked), whether the room closes the connection after it, and
        the head's size; None for any other head, or none complete yet.
    """
    found = _head_lines(data)
    if found is None:
        return None
    status, lines, size = found
    if status < 200 or status in _BODILESS:
        return None
    headers: list[tuple[bytes, bytes]] = []
    length: int | None = None
    chunked = False
    close = False
    for line in lines:
        field = field_line(line)
        if field is None:
            return None
        name, value = field
        if name == b"content-length":
            if length is not None or not _LENGTH.fullmatch(value):
                return None
            length = int(value)
        elif name == b"transfer-encoding":
            value = value.lower()  # as h11 gives it
            if chunked or value != b"chunked":
                return None
            chunked = True
        elif name == b"connection":
            close = close or any(token.strip().lower() == b"close" for token in value.split(b","))
        headers.append((name, value))
    if (length is None) == chunked:
        return status, headers, length, close, size
    return None


def simple_head(data: bytes | bytearray) -> SimpleHead | None:
    """The head at the start of ``data`` when it is complete and simple, else None.

    None also when ``data`` holds no complete head yet: the caller tells the
    two apart with :data:`HEAD_END` (a head not simple is given to h11,
    which reads it or says what is wrong with it).
    """
    head = _final_head(data)
    if head is None:
        return None
    status, headers, length, close, size = head
    return None if length is None else SimpleHead(status, tuple(headers), length, close, size)


def framed_head(
    data: bytes | bytearray,
) -> tuple[int, list[tuple[bytes, bytes]], int | None, int] | None:
    """The head at the start of ``data`` when it is complete and its body is framed
    by ``Content-Length`` or by ``Transfer-Encoding: chunked`` alone, else None.

    Returns:
        The status, the fields (names in lower case), the body's length (None
        when it is chunked) and the head's size, blank line included.

    For a ``GET``'s answer (a ``HEAD``'s has no body whatever its fields say).
    None also when ``data`` holds no complete head yet: the caller tells the
    two apart with :data:`HEAD_END` and gives the second to h11.
    """
    head = _final_head(data)
    if head is None:
        return None
    status, headers, length, _close, size = head
    return status, headers, length, size


def switched_head(data: bytes | bytearray) -> tuple[list[tuple[bytes, bytes]], int] | None:
    """The fields and the size of a plain ``HTTP/1.1 101`` head at the start of ``data``.

    None when ``data`` holds no complete head yet, or a head that is not a
    plain ``101`` (another status, a framing field, bare line feeds, a
    field h11 would refuse): the caller tells the two apart with
    :data:`HEAD_END` and gives the second to h11. The bytes after the head
    are the new protocol's.
    """
    found = _head_lines(data)
    if found is None or found[0] != 101:
        return None
    _status, lines, size = found
    headers: list[tuple[bytes, bytes]] = []
    for line in lines:
        field = field_line(line)
        if field is None or field[0] in _FRAMING:
            return None
        headers.append(field)
    return headers, size
