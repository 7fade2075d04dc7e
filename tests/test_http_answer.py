"""The common answer head read without h11 (``letagents_trio._http._answer``).

Whatever :func:`simple_head` reads, h11 reads the same way (status, fields,
length, whether the connection stays open), and so with :func:`switched_head`
and an upgrade's ``101`` (fields, the bytes past it); whatever either
declines, h11 is given (the pool's and the request's tests show the hand-over).
"""

from __future__ import annotations

import h11
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from letagents_trio._http._answer import SimpleHead, simple_head, switched_head

OK = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 17\r\n\r\n"
    b'{"recorded":true}'
)


Read = tuple[int, tuple[tuple[bytes, bytes], ...], bytes, bool]


def h11_reads(data: bytes) -> Read | None:
    """Status, fields, body and keep-alive as h11 reads ``data`` after a POST; None if refused."""
    conn = h11.Connection(h11.CLIENT)
    conn.send(
        h11.Request(method="POST", target="/", headers=[("Host", "h"), ("Content-Length", "0")])
    )
    conn.send(h11.EndOfMessage())
    conn.receive_data(data)
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
                keep = conn.our_state is h11.DONE and conn.their_state is h11.DONE
                return head.status_code, tuple(head.headers), body, keep
            elif event is h11.NEED_DATA:
                return None
            elif isinstance(event, h11.InformationalResponse):
                continue
            else:  # pragma: no cover - data holds no close
                return None
    except h11.RemoteProtocolError:
        return None


def test_the_rooms_answer_is_simple() -> None:
    assert simple_head(OK) == SimpleHead(
        status=200,
        headers=((b"content-type", b"application/json"), (b"content-length", b"17")),
        length=17,
        close=False,
        size=len(OK) - 17,
    )


def test_a_head_still_arriving_is_not_read() -> None:
    assert simple_head(OK[:30]) is None


def test_connection_close_among_other_tokens_is_seen() -> None:
    head = simple_head(
        b"HTTP/1.1 200 OK\r\nConnection: Keep-Alive, CLOSE\r\nContent-Length: 0\r\n\r\n"
    )
    assert head is not None
    assert head.close


@pytest.mark.parametrize(
    "data",
    [
        b"HTTP/1.0 200 OK\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\nx",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1, 1\r\n\r\nx",
        b"HTTP/1.1 100 Continue\r\n\r\n",
        b"HTTP/1.1 204 No Content\r\nContent-Length: 3\r\n\r\n",
        b"HTTP/1.1 304 Not Modified\r\nContent-Length: 3\r\n\r\n",
        b"HTTP/1.1 200 OK\nContent-Length: 0\n\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 0\n\r\n",
        b"HTTP/1.1 200 OK\r\nX: a\r\n b\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX : a\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nX: a\x00b\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 123456789012345678901\r\n\r\n",
        b"\r\nHTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
    ],
    ids=[
        "http-1.0",
        "chunked",
        "no-length",
        "two-lengths",
        "a-list-of-lengths",
        "informational",
        "no-content",
        "not-modified",
        "bare-line-feeds",
        "a-bare-line-feed-at-the-end",
        "folded",
        "space-before-colon",
        "nul-in-value",
        "length-too-long",
        "blank-line-first",
    ],
)
def test_what_is_not_simple_is_left_to_h11(data: bytes) -> None:
    assert simple_head(data) is None


_LINES = st.sampled_from(
    [
        b"Content-Type: application/json",
        b"content-length: 17",
        b"Content-Length:17",
        b"Content-Length: 17  ",
        b"Content-Length: 18",
        b"Connection: close",
        b"Connection: keep-alive",
        b"Transfer-Encoding: chunked",
        b"Retry-After: 7",
        b"X-Empty:",
        b"X-Tab:\tv\t",
        b"X-Obs: \xe9t\xe9",
        b"X Bad: v",
        b" folded",
        b"X-Nul: a\x00",
        b"X-Ctl: a\x7fb",
    ]
)
_STATUS = st.sampled_from(
    [
        b"HTTP/1.1 200 OK",
        b"HTTP/1.1 503 Busy",
        b"HTTP/1.1 200",
        b"HTTP/1.1 200 ",
        b"HTTP/1.0 200 OK",
        b"HTTP/1.1 100 Continue",
        b"HTTP/1.1 204 No Content",
        b"HTTP/1.1 2000 OK",
        b"HTTP/2 200",
    ]
)


@settings(max_examples=500, deadline=None)
@given(
    status=_STATUS,
    lines=st.lists(_LINES, max_size=4),
    newline=st.sampled_from([b"\r\n", b"\n"]),
)
def test_what_simple_head_reads_h11_reads_the_same_way(
    status: bytes, lines: list[bytes], newline: bytes
) -> None:
    data = newline.join([status, *lines]) + newline + newline + b'{"recorded":true}x'
    head = simple_head(data)
    if head is None:
        return
    read = h11_reads(data)
    assert read is not None
    body = data[head.size : head.size + head.length]
    assert read == (head.status, head.headers, body, not head.close)


# --- the 101 of an upgrade ---------------------------------------------------------------


SWITCH = (
    b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n\r\n"
)

Switched = tuple[tuple[tuple[bytes, bytes], ...], bytes]


def h11_switches(data: bytes) -> Switched | None:
    """The fields and the bytes past the head as h11 reads a 101 to an upgrade; None otherwise."""
    conn = h11.Connection(h11.CLIENT)
    conn.send(
        h11.Request(
            method="GET",
            target="/",
            headers=[("Host", "h"), ("Upgrade", "websocket"), ("Connection", "Upgrade")],
        )
    )
    conn.send(h11.EndOfMessage())
    conn.receive_data(data)
    try:
        event = conn.next_event()
    except h11.RemoteProtocolError:
        return None
    if not isinstance(event, h11.InformationalResponse) or event.status_code != 101:
        return None
    assert conn.their_state is h11.SWITCHED_PROTOCOL
    return tuple(event.headers), bytes(conn.trailing_data[0])


def test_the_rooms_101_is_read_with_what_follows_it() -> None:
    found = switched_head(SWITCH + b"\x81\x02hi")
    assert found is not None
    fields, size = found
    assert dict(fields)[b"sec-websocket-accept"] == b"s3pPLMBiTxaQ9kYGzzhZRbK+xOo="
    assert (SWITCH + b"\x81\x02hi")[size:] == b"\x81\x02hi"
    assert switched_head(SWITCH[:-2]) is None  # still arriving


@pytest.mark.parametrize(
    "data",
    [
        b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
        b"HTTP/1.1 100 Continue\r\n\r\n" + SWITCH,
        b"HTTP/1.0 101 Switching Protocols\r\n\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\nContent-Length: 5\r\n\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\nTransfer-Encoding: chunked\r\n\r\n",
        b"HTTP/1.1 101 Switching Protocols\nUpgrade: websocket\n\n",
        b"HTTP/1.1 101 Switching Protocols\r\nX: a\r\n b\r\n\r\n",
        b"HTTP/1.1 101 Switching Protocols\r\nX: a\x00b\r\n\r\n",
    ],
    ids=[
        "ok",
        "informational-first",
        "http-1.0",
        "a-length",
        "chunked",
        "bare-line-feeds",
        "folded",
        "nul-in-value",
    ],
)
def test_what_is_not_a_plain_101_is_left_to_h11(data: bytes) -> None:
    assert switched_head(data) is None


@settings(max_examples=500, deadline=None)
@given(
    status=st.sampled_from(
        [
            b"HTTP/1.1 101 Switching Protocols",
            b"HTTP/1.1 101",
            b"HTTP/1.1 101 ",
            b"HTTP/1.0 101 Switching Protocols",
            b"HTTP/1.1 200 OK",
            b"HTTP/1.1 1010 X",
        ]
    ),
    lines=st.lists(_LINES, max_size=4),
    newline=st.sampled_from([b"\r\n", b"\n"]),
    after=st.sampled_from([b"", b"\x81\x02hi", b"HTTP/1.1 200 OK\r\n\r\n"]),
)
def test_what_switched_head_reads_h11_reads_the_same_way(
    status: bytes, lines: list[bytes], newline: bytes, after: bytes
) -> None:
    data = newline.join([status, *lines]) + newline + newline + after
    found = switched_head(data)
    if found is None:
        return
    fields, size = found
    assert h11_switches(data) == (tuple(fields), data[size:])
