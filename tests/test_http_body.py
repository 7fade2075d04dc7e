"""A stream's answer read without h11: its head (``framed_head``) and its body (``_body``).

Whatever :func:`framed_head` reads, h11 reads the same way (status, fields,
framing), and whatever a body reader gives back, h11 gives back for the same
bytes however they are cut into reads, and refuses where h11 refuses. The
request's tests show the hand-over to h11 of what is declined.
"""

from __future__ import annotations

import itertools

import h11
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from letagents_trio._http._answer import framed_head
from letagents_trio._http._body import BodyReader, ChunkedBody, SizedBody

CUT_SHORT = "peer closed connection without sending complete message body"
STREAM_HEAD = (
    b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
    b"Connection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n"
)
OPEN = b'event: open\ndata: {"connection_id":"pc_1"}\n\n'

Read = tuple[int, list[tuple[bytes, bytes]], bytes, bool]


def h11_reads(data: bytes, *, eof: bool = True) -> Read | None:
    """Status, fields, body and whether it ended, as h11 reads ``data`` after a GET.

    None if h11 refuses it; a body not yet ended is what came (``eof``: the
    connection closed after ``data``).
    """
    conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=64 * 1024)
    conn.send(h11.Request(method="GET", target="/", headers=[("Host", "h")]))
    conn.send(h11.EndOfMessage())
    conn.receive_data(data)
    if eof:
        conn.receive_data(b"")
    head: h11.Response | None = None
    body = b""
    try:
        while True:
            event = conn.next_event()
            if isinstance(event, h11.Response):
                head = event
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                assert head is not None
                return head.status_code, list(head.headers), body, True
            elif event is h11.NEED_DATA and head is not None:
                return head.status_code, list(head.headers), body, False
            else:
                return None
    except h11.RemoteProtocolError:
        return None


def body_reads(reader: BodyReader, pieces: list[bytes], *, eof: bool = True) -> tuple[bytes, bool]:
    """The body ``reader`` gives back for ``pieces`` read one by one; raises where it refuses."""
    body = b""
    ended = False
    for piece in [*pieces, *([b""] if eof else [])]:
        reader.receive(piece)
        data, ended = reader.take()
        body += data
        if ended:
            break
    # What came before a refusal is taken first; the refusal comes next.
    while not ended and eof:
        data, ended = reader.take()
        body += data
    return body, ended


def cut(data: bytes, at: list[int]) -> list[bytes]:
    """``data`` cut at the offsets ``at``."""
    edges = [0, *sorted(i % (len(data) + 1) for i in at), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges) if b > a]


# --- the head ------------------------------------------------------------------------


def test_the_rooms_stream_head_is_framed_by_chunks() -> None:
    assert framed_head(STREAM_HEAD + OPEN) == (
        200,
        [
            (b"content-type", b"text/event-stream"),
            (b"cache-control", b"no-cache"),
            (b"connection", b"keep-alive"),
            (b"transfer-encoding", b"chunked"),
        ],
        None,
        len(STREAM_HEAD),
    )


def test_a_refusal_with_a_length_is_framed_by_it() -> None:
    head = framed_head(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: 2\r\n\r\n{}")
    assert head is not None
    assert (head[0], head[2]) == (401, 2)


@pytest.mark.parametrize(
    "data",
    [
        b"HTTP/1.1 200 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\n",
        b"HTTP/1.1 204 No Content\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\nTransfer-Encoding: chunked\n\n",
        b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n",
    ],
    ids=[
        "ends-with-the-connection",
        "another-coding",
        "twice-chunked",
        "chunked-and-a-length",
        "informational",
        "no-content",
        "bare-line-feeds",
        "http-1.0",
        "still-arriving",
    ],
)
def test_what_is_not_framed_plainly_is_left_to_h11(data: bytes) -> None:
    assert framed_head(data) is None


_LINES = st.sampled_from(
    [
        b"Content-Type: text/event-stream",
        b"Transfer-Encoding: chunked",
        b"transfer-encoding: Chunked ",
        b"Transfer-Encoding: gzip",
        b"Content-Length: 5",
        b"Content-Length: 05",
        b"Connection: close",
        b"X-Empty:",
        b"X-Obs: \xe9t\xe9",
        b"X Bad: v",
        b" folded",
    ]
)
_STATUS = st.sampled_from(
    [
        b"HTTP/1.1 200 OK",
        b"HTTP/1.1 401 Unauthorized",
        b"HTTP/1.1 200",
        b"HTTP/1.1 103 Early Hints",
        b"HTTP/1.1 304 Not Modified",
        b"HTTP/1.0 200 OK",
    ]
)


@settings(max_examples=500, deadline=None)
@given(
    status=_STATUS,
    lines=st.lists(_LINES, max_size=4),
    newline=st.sampled_from([b"\r\n", b"\n"]),
)
def test_what_framed_head_reads_h11_reads_the_same_way(
    status: bytes, lines: list[bytes], newline: bytes
) -> None:
    body = b"5\r\nhello\r\n0\r\n\r\n"
    data = newline.join([status, *lines]) + newline + newline + body
    head = framed_head(data)
    if head is None:
        return
    read = h11_reads(data)
    assert read is not None
    code, fields, length, size = head
    reader: BodyReader = ChunkedBody(64 * 1024) if length is None else SizedBody(length)
    assert read == (code, fields, *body_reads(reader, [data[size:]]))


# --- a chunked body ----------------------------------------------------------------


def chunked(pieces: list[bytes], *, extension: bytes = b"", trailer: bytes = b"") -> bytes:
    """``pieces`` as a chunked body, each chunk's size line with ``extension``."""
    wire = b"".join(b"%x%s\r\n%s\r\n" % (len(p), extension, p) for p in pieces if p)
    return wire + b"0" + extension + b"\r\n" + trailer + b"\r\n"


@settings(max_examples=300, deadline=None)
@given(
    pieces=st.lists(st.binary(max_size=40), max_size=6),
    extension=st.sampled_from([b"", b";name=value", b"; x", b"  ", b";\r"]),
    trailer=st.sampled_from([b"", b"X-Sum: 1\r\n", b"X-Sum: 1\n"]),
    at=st.lists(st.integers(min_value=0, max_value=1000), max_size=8),
)
def test_a_chunked_body_cut_anywhere_is_read_as_h11_reads_it(
    pieces: list[bytes], extension: bytes, trailer: bytes, at: list[int]
) -> None:
    wire = chunked(pieces, extension=extension, trailer=trailer)
    read = h11_reads(STREAM_HEAD + wire)
    assert read is not None
    assert body_reads(ChunkedBody(64 * 1024), cut(wire, at)) == (read[2], True)


@settings(max_examples=500, deadline=None)
@given(
    pieces=st.lists(st.binary(min_size=1, max_size=20), min_size=1, max_size=4),
    flip=st.integers(min_value=0, max_value=10_000),
    byte=st.sampled_from(b"0aAgG;\r\n \t:xX"),
    at=st.lists(st.integers(min_value=0, max_value=1000), max_size=4),
)
def test_a_broken_chunked_body_is_refused_where_h11_refuses_it(
    pieces: list[bytes], flip: int, byte: int, at: list[int]
) -> None:
    """One byte of the framing changed: the same bytes, then the same end or refusal."""
    wire = bytearray(chunked(pieces))
    wire[flip % len(wire)] = byte
    read = h11_reads(STREAM_HEAD + bytes(wire))
    reader = ChunkedBody(64 * 1024)
    if read is None:
        with pytest.raises(h11.RemoteProtocolError):
            body_reads(reader, cut(bytes(wire), at))
    else:
        assert body_reads(reader, cut(bytes(wire), at)) == (read[2], read[3])


def test_chunks_already_received_are_given_before_broken_framing_is_refused() -> None:
    reader = ChunkedBody(64 * 1024)
    reader.receive(b"3\r\none\r\n3\r\ntwo\r\nzz\r\n")
    assert reader.take() == (b"onetwo", False)
    with pytest.raises(h11.RemoteProtocolError, match=r"^illegal chunk header$"):
        reader.take()
    with pytest.raises(h11.RemoteProtocolError, match=r"^illegal chunk header$"):
        reader.take()


def test_a_body_cut_short_is_refused_once_what_came_is_taken() -> None:
    reader = ChunkedBody(64 * 1024)
    reader.receive(b"a\r\nfirst")
    reader.receive(b"")
    assert reader.take() == (b"first", False)
    with pytest.raises(h11.RemoteProtocolError, match=f"^{CUT_SHORT}$"):
        reader.take()


@pytest.mark.parametrize(
    ("start", "waiting", "message"),
    [
        (b"", b"1" * 16, "chunk size line too long"),
        (b"", b"5;" + b"x" * 14, "chunk size line too long"),
        (b"0\r\n", b"X-Long: " + b"y" * 8, "trailer section too long"),
    ],
    ids=["size-line", "extension", "trailer"],
)
@pytest.mark.parametrize("before", [b"", b"3\r\nabc\r\n"], ids=["alone", "after-a-chunk"])
def test_a_line_longer_than_the_bound_is_refused_before_it_ends(
    start: bytes, waiting: bytes, message: str, before: bytes
) -> None:
    """Up to the bound a line may wait for its end; one byte more is refused."""
    reader = ChunkedBody(16)
    reader.receive(before + start + waiting)
    assert reader.take() == (before[3:6], False)
    reader.receive(b"z")
    with pytest.raises(h11.RemoteProtocolError, match=f"^{message}$"):
        reader.take()


def test_the_bound_counts_only_the_line_after_a_chunks_end() -> None:
    reader = ChunkedBody(16)
    reader.receive(b"3\r\nabc")
    assert reader.take() == (b"abc", False)
    reader.receive(b"\r\n" + b"1" * 16)
    assert reader.take() == (b"", False)


def test_an_empty_size_line_is_refused_at_once() -> None:
    reader = ChunkedBody(64 * 1024)
    reader.receive(b"\r\n")
    with pytest.raises(h11.RemoteProtocolError, match=r"^illegal chunk header$"):
        reader.take()


def test_a_broken_chunk_end_is_refused_after_the_chunk() -> None:
    reader = ChunkedBody(64 * 1024)
    reader.receive(b"2\r\nokX\n")
    assert reader.take() == (b"ok", False)
    with pytest.raises(h11.RemoteProtocolError, match=r"^malformed chunk footer$"):
        reader.take()


@pytest.mark.parametrize(
    "pieces",
    [[b"2\r\nok\r\n0\r\nX Bad: v\r\n\r\n"], [b"2\r\n", b"\n\n\r\n0\r\nX Bad: v\r\n\r\n"]],
    ids=["in-one-read", "after-a-read-that-starts-with-a-line-feed"],
)
def test_a_malformed_trailer_is_refused(pieces: list[bytes]) -> None:
    reader = ChunkedBody(64 * 1024)
    *before, last = pieces
    for piece in before:
        reader.receive(piece)
        assert reader.take() == (b"", False)
    reader.receive(last)
    assert reader.take() == (b"ok" if not before else b"\n\n", False)
    with pytest.raises(h11.RemoteProtocolError, match=r"^illegal trailer field$"):
        reader.take()


@pytest.mark.parametrize(
    "trailer", [b"X-Sum: 1\r\n", b"X-Sum: 1\r\nX-Count: 2\n"], ids=["one-field", "two-fields"]
)
def test_a_trailer_after_data_with_blank_lines_ends_the_body(trailer: bytes) -> None:
    """An event's blank line in the data is not the trailer section's end."""
    reader = ChunkedBody(64 * 1024)
    reader.receive(b"3\r\n\n\n\n\r\n0\r\n" + trailer + b"\r\n")
    assert reader.take() == (b"\n\n\n", True)


@pytest.mark.parametrize("end", [b"\r\n", b"\n"], ids=["crlf", "bare-line-feed"])
def test_an_empty_trailer_section_ends_the_body(end: bytes) -> None:
    reader = ChunkedBody(64 * 1024)
    reader.receive(b"2\r\nok\r\n0\r\n" + end)
    assert reader.take() == (b"ok", True)
    assert h11_reads(STREAM_HEAD + b"2\r\nok\r\n0\r\n" + end, eof=False) == (
        200,
        [
            (b"content-type", b"text/event-stream"),
            (b"cache-control", b"no-cache"),
            (b"connection", b"keep-alive"),
            (b"transfer-encoding", b"chunked"),
        ],
        b"ok",
        True,
    )


def test_bytes_after_the_last_chunk_are_not_read() -> None:
    reader = ChunkedBody(64 * 1024)
    reader.receive(b"2\r\nok\r\n0\r\n\r\nHTTP/1.1 200 OK\r\n")
    assert reader.take() == (b"ok", True)
    assert reader.take() == (b"", True)


# --- a sized body ------------------------------------------------------------------


def test_a_sized_body_ends_at_its_length_whatever_follows() -> None:
    reader = SizedBody(5)
    assert reader.take() == (b"", False)
    reader.receive(b"h")
    reader.receive(b"e")
    assert reader.take() == (b"he", False)
    reader.receive(b"llo, and more")
    assert reader.take() == (b"llo", True)
    reader.receive(b"")
    assert reader.take() == (b"", True)


def test_a_sized_body_cut_short_is_refused_once_what_came_is_taken() -> None:
    reader = SizedBody(10)
    reader.receive(b"short")
    reader.receive(b"")
    assert reader.take() == (b"short", False)
    with pytest.raises(h11.RemoteProtocolError, match=f"^{CUT_SHORT}$"):
        reader.take()


def test_an_empty_sized_body_has_ended_at_once() -> None:
    assert SizedBody(0).take() == (b"", True)
