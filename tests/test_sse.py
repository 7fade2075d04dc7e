"""Tests of the SSE decoder against SSE-CONFORMANCE.md.

Rules of this module:

- Test names carry the rule id they prove (D1-D3, L1-L4, F1-F10, E1-E4, C6).
- ``VECTORS`` holds every stream quoted in SSE-CONFORMANCE.md (the WPT ones
  framed the way WPT's ``message.php`` serves them: the message, then the
  ``newline`` parameter, ``\\n\\n`` by default, then one more ``\\n``) plus our
  own. Each vector is decoded whole, split at every byte boundary, fed byte by
  byte, and split at random points by hypothesis; every way must give the same
  events, cursor and reconnection time.
- A deliberately naive, character-by-character reference parser (``reference``)
  written straight from §9.2.5-9.2.6 is the oracle for random streams.
- The decoder is sans-IO: no trio, no clock, no sockets here.
"""

from __future__ import annotations

import itertools
import re
from typing import TYPE_CHECKING

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from letagents_trio import StreamProtocolError
from letagents_trio._protocol import MAX_EVENT_BYTES
from letagents_trio._sse import (
    FEED_SLICE_BYTES,
    MAX_RECONNECTION_TIME_MS,
    ServerSentEvent,
    SSEDecoder,
    is_event_stream,
)

if TYPE_CHECKING:
    from collections.abc import Iterable


@attrs.frozen
class Outcome:
    """Everything a stream leaves behind: events, cursor, reconnection time."""

    events: tuple[ServerSentEvent, ...]
    last_event_id: str = ""
    reconnection_time: int | None = None


def decode(chunks: Iterable[bytes], *, last_event_id: str = "") -> Outcome:
    """Feed ``chunks`` to a fresh decoder, then end the stream."""
    decoder = SSEDecoder(last_event_id=last_event_id)
    events: list[ServerSentEvent] = []
    for chunk in chunks:
        events.extend(decoder.feed(chunk))
    decoder.close()
    return Outcome(tuple(events), decoder.last_event_id, decoder.reconnection_time)


def wpt(message: bytes, newline: bytes = b"\n\n") -> bytes:
    """A body as WPT's ``resources/message.php`` serves it."""
    return message + newline + b"\n"


def ev(data: str, event: str = "message", id: str = "") -> ServerSentEvent:
    return ServerSentEvent(event=event, data=data, id=id)


def split_at(stream: bytes, cuts: Iterable[int]) -> list[bytes]:
    bounds = [0, *sorted(cuts), len(stream)]
    return [stream[a:b] for a, b in itertools.pairwise(bounds)]


@attrs.frozen
class Vector:
    name: str
    stream: bytes
    expected: Outcome


_LONG = b"x" * 2048

VECTORS = [
    # D1 format-utf-8.any.js (served with charset=windows-1252, which is ignored).
    Vector("D1_always_utf8", wpt(b"data:ok\xe2\x80\xa6"), Outcome((ev("ok…"),))),
    Vector(
        "D2_invalid_bytes_replaced",
        b"data:a\xffb\xc3(\xe2\x80\n\n",
        Outcome((ev("a\ufffdb\ufffd(\ufffd"),)),
    ),
    # D3 format-bom-2.any.js: the second BOM is part of the first field name.
    Vector(
        "D3_double_bom",
        wpt(b"\xef\xbb\xbf\xef\xbb\xbfdata:1\n\ndata:2\n\ndata:3"),
        Outcome((ev("2"), ev("3"))),
    ),
    # D3 format-bom.js: a BOM mid-stream makes its line an unknown field.
    Vector(
        "D3_bom_mid_stream",
        wpt(b"\xef\xbb\xbfdata:1\n\n\xef\xbb\xbfdata:2\n\ndata:3"),
        Outcome((ev("1"), ev("3"))),
    ),
    Vector("L1_lf", b"data:a\ndata:b\n\n", Outcome((ev("a\nb"),))),
    Vector("L1_crlf_is_one_terminator", b"data:a\r\ndata:b\r\n\r\n", Outcome((ev("a\nb"),))),
    Vector("L1_lone_cr", b"data:a\rdata:b\r\r", Outcome((ev("a\nb"),))),
    Vector("L1_lf_cr_is_two_terminators", b"data:a\n\rdata:b\n\n", Outcome((ev("a"), ev("b")))),
    Vector(
        "L2_no_other_line_breaks",
        "data:a\u2028b\u2029c\x85d\x0be\x0cf\x1cg\x1dh\x1ei\n\n".encode(),
        Outcome((ev("a\u2028b\u2029c\x85d\x0be\x0cf\x1cg\x1dh\x1ei"),)),
    ),
    Vector("L3_crlf_split", b"data: a\r\ndata: b\r\n\r\n", Outcome((ev("a\nb"),))),
    Vector(
        "L4_cr_only_stream",
        b": hi\revent: open\rdata: 1\r\rdata: 2\r\r",
        Outcome((ev("1", "open"), ev("2"))),
    ),
    Vector(
        "L4_crlf_stream_sse_starlette",
        b"event: ping\r\ndata: 2024-01-01\r\n\r\n: ping\r\n\r\ndata: x\r\n\r\n",
        Outcome((ev("2024-01-01", "ping"), ev("x"))),
    ),
    Vector("F1_empty_line_dispatches", b"data:a\n\ndata:b\n\n", Outcome((ev("a"), ev("b")))),
    # F2 format-comments.js (newline=none: the message, then one "\n").
    Vector(
        "F2_comment_fest",
        wpt(
            b"data:1\r:\0\n:\r\ndata:2\n:"
            + _LONG
            + b"\rdata:3\n:data:fail\r:"
            + _LONG
            + b"\ndata:4\n",
            b"",
        ),
        Outcome((ev("1\n2\n3\n4"),)),
    ),
    Vector(
        "F3_one_space_removed",
        b"data:  x\n\ndata:x\n\ndata: a:b\n\ndata:\tt\n\n",
        Outcome((ev(" x"), ev("x"), ev("a:b"), ev("\tt"))),
    ),
    # F4 format-field-data.js.
    Vector(
        "F4_field_without_colon",
        wpt(b"data:\n\ndata\ndata\n\ndata:test"),
        Outcome((ev(""), ev("\n"), ev("test"))),
    ),
    Vector(
        "F5_names_exact",
        b"Data:x\ndata :x\n data:x\nDATA:x\n\nEvent:x\nevent :x\ndata:y\n\n",
        Outcome((ev("y"),)),
    ),
    # F6 format-field-event-empty.htm.
    Vector("F6_empty_event_is_message", wpt(b"event: \ndata:data"), Outcome((ev("data"),))),
    Vector(
        "F6_event_type_per_event",
        b"event:a\ndata:1\n\ndata:2\n\nevent:b\nevent:c\ndata:3\n\n",
        Outcome((ev("1", "a"), ev("2"), ev("3", "c"))),
    ),
    # F7 format-null-character.html.
    Vector("F7_nul_kept_in_data", wpt(b"data:\0\n\n"), Outcome((ev("\0"),))),
    # F8 format-field-id-3.htm, via last-event-id2.py.
    Vector(
        "F8_id_persists",
        b"id: 1\ndata: 1\n\ndata:2\n\n",
        Outcome((ev("1", id="1"), ev("2", id="1")), "1"),
    ),
    Vector(
        "F8_id_changes_and_persists",
        b"id: 1\ndata: 1\n\nid: 2\ndata:2\n\ndata:3\n\n",
        Outcome((ev("1", id="1"), ev("2", id="2"), ev("3", id="2")), "2"),
    ),
    Vector(
        "F8_id_resets",
        b"id: 1\ndata: 1\n\nid:\ndata:2\n\ndata:3\n\n",
        Outcome((ev("1", id="1"), ev("2"), ev("3"))),
    ),
    Vector(
        "F8_id_with_nul_ignored",
        b"id:a\ndata:1\n\nid:b\0c\ndata:2\n\n",
        Outcome((ev("1", id="a"), ev("2", id="a")), "a"),
    ),
    # F9 format-field-retry-bogus.htm.
    Vector(
        "F9_retry_bogus_ignored",
        wpt(b"retry:2000\nretry:1000x\ndata:x"),
        Outcome((ev("x"),), reconnection_time=2000),
    ),
    Vector("F10_unknown_field", b"foo:bar\nretry_:1\ndata:x\n\n", Outcome((ev("x"),))),
    Vector("E1_id_only_block_moves_cursor", b"id:prime\n\n", Outcome((), "prime")),
    Vector("E2_no_data_no_event", b"event:a\nretry:5\n\ndata:b\n\n", Outcome((ev("b"),), "", 5)),
    Vector("E2_empty_data_dispatches", b"id:p\ndata:\n\n", Outcome((ev("", id="p"),), "p")),
    Vector("E3_one_trailing_lf_removed", b"data:a\ndata:\n\n", Outcome((ev("a\n"),))),
    # E4 format-data-before-final-empty-line.js (newline=none).
    Vector(
        "E4_incomplete_event_discarded",
        wpt(b"retry:1000\ndata:test1\n\nid:test\ndata:test2", b""),
        Outcome((ev("test1"),), "", 1000),
    ),
    # The letagents process stream, as the room writes it.
    Vector(
        "letagents_process_stream",
        b": connected\n\n"
        b'event: open\ndata: {"connection_id":"00000000-0000-4000-8000-000000000003"}\n\n'
        b": heartbeat\n\n"
        b"event: ended\ndata: {}\n\n",
        Outcome(
            (
                ev('{"connection_id":"00000000-0000-4000-8000-000000000003"}', "open"),
                ev("{}", "ended"),
            )
        ),
    ),
]

_BY_NAME = {vector.name: vector for vector in VECTORS}
_IDS = [vector.name for vector in VECTORS]


@pytest.mark.parametrize("vector", VECTORS, ids=_IDS)
def test_vector_whole(vector: Vector) -> None:
    assert decode([vector.stream]) == vector.expected


@pytest.mark.parametrize("vector", VECTORS, ids=_IDS)
def test_vector_split_at_every_byte_boundary(vector: Vector) -> None:
    for cut in range(len(vector.stream) + 1):
        assert decode(split_at(vector.stream, [cut])) == vector.expected, cut


@pytest.mark.parametrize("vector", VECTORS, ids=_IDS)
def test_vector_byte_by_byte(vector: Vector) -> None:
    stream = vector.stream
    assert decode(stream[i : i + 1] for i in range(len(stream))) == vector.expected


@pytest.mark.parametrize("vector", VECTORS, ids=_IDS)
def test_vector_matches_reference_parser(vector: Vector) -> None:
    """The oracle itself agrees with every quoted vector."""
    assert reference(vector.stream) == vector.expected


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_vector_random_multiway_splits(data: st.DataObject) -> None:
    vector = data.draw(st.sampled_from(VECTORS))
    cuts = data.draw(st.lists(st.integers(0, len(vector.stream)), max_size=12))
    assert decode(split_at(vector.stream, cuts)) == vector.expected


# --- the reference parser and random streams --------------------------------


def reference(stream: bytes, *, last_event_id: str = "") -> Outcome:
    """§9.2.5-9.2.6 transcribed as plainly as possible, one character at a time."""
    text = stream.decode("utf-8", "replace")
    if text.startswith("\ufeff"):
        text = text[1:]
    lines: list[str] = []
    line = ""
    i = 0
    while i < len(text):
        char = text[i]
        if char == "\r":
            lines.append(line)
            line = ""
            if text[i + 1 : i + 2] == "\n":
                i += 1
        elif char == "\n":
            lines.append(line)
            line = ""
        else:
            line += char
        i += 1
    # Whatever is left in `line` never got its terminator: discarded (E4).
    data = event_type = ""
    id_buffer = cursor = last_event_id
    retry: int | None = None
    events: list[ServerSentEvent] = []
    for line in lines:
        if line == "":
            cursor = id_buffer
            if data == "":
                event_type = ""
                continue
            if data.endswith("\n"):
                data = data[:-1]
            events.append(ServerSentEvent(event=event_type or "message", data=data, id=cursor))
            data = event_type = ""
            continue
        if line.startswith(":"):
            continue
        if ":" in line:
            colon = line.index(":")
            field, value = line[:colon], line[colon + 1 :]
            if value.startswith(" "):
                value = value[1:]
        else:
            field, value = line, ""
        if field == "event":
            event_type = value
        elif field == "data":
            data += value + "\n"
        elif field == "id":
            if "\0" not in value:
                id_buffer = value
        elif field == "retry" and value and all(c in "0123456789" for c in value):
            retry = min(int(value), MAX_RECONNECTION_TIME_MS)
    return Outcome(tuple(events), cursor, retry)


# Pieces that exercise every rule, including bytes that are half a character.
_PIECES = [
    b"data",
    b"data:",
    b"data: ",
    b"event:",
    b"id:",
    b"retry:",
    b"Data:",
    b"data :",
    b":",
    b" ",
    b"\t",
    b"\r",
    b"\n",
    b"\r\n",
    b"\n\n",
    b"x",
    b"7",
    b"+",
    b"\0",
    b"\xef\xbb\xbf",
    b"\xe2\x80\xa6",
    b"\xe2\x80",
    b"\xa6",
    b"\xff",
    "\u2028\x85\x0b\x0c".encode(),
]


@settings(max_examples=500, deadline=None)
@given(
    pieces=st.lists(st.sampled_from(_PIECES), max_size=40),
    data=st.data(),
    seed=st.sampled_from(["", "s"]),
)
def test_random_streams_match_reference_at_any_split(
    pieces: list[bytes], data: st.DataObject, seed: str
) -> None:
    stream = b"".join(pieces)
    cuts = data.draw(st.lists(st.integers(0, len(stream)), max_size=10))
    assert decode(split_at(stream, cuts), last_event_id=seed) == reference(
        stream, last_event_id=seed
    )


# --- D: decoding -------------------------------------------------------------


def test_D2_multibyte_split_across_chunks() -> None:
    chunks = [b"data:\xf0", b"\x9f", b"\x98", b"\x80!\n\n"]
    assert decode(chunks).events == (ev("😀!"),)


def test_D2_truncated_character_at_line_end_is_one_replacement() -> None:
    assert decode([b"data:\xe2\x80", b"\n\n"]).events == (ev("\ufffd"),)


def test_D3_bom_split_across_chunks_is_stripped() -> None:
    assert decode([b"\xef", b"\xbb", b"\xbfdata:1\n\n"]).events == (ev("1"),)


def test_D3_empty_first_chunk_does_not_use_up_the_bom() -> None:
    assert decode([b"", b"\xef\xbb\xbfdata:1\n\n"]).events == (ev("1"),)


def test_D3_bom_at_start_of_a_later_chunk_is_not_stripped() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data:1\n\n") == [ev("1")]
    assert decoder.feed(b"\xef\xbb\xbfdata:2\n\n") == []


def test_D3_each_decoder_strips_its_own_bom() -> None:
    for _ in range(2):
        assert decode([b"\xef\xbb\xbfdata:1\n\n"]).events == (ev("1"),)


# --- L: lines ----------------------------------------------------------------


def test_L3_crlf_split_across_chunks() -> None:
    """The conformance vector: the LF after a chunk-final CR is not a blank line."""
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\ndata: b\r\n\r\n") == [ev("a\nb")]


def test_L3_cr_then_empty_chunk_then_lf() -> None:
    assert decode([b"data: a\r", b"", b"\ndata: b\r\n\r\n"]).events == (ev("a\nb"),)


def test_L3_blank_line_after_chunk_final_cr_is_still_seen() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r") == []
    assert decoder.feed(b"\r") == [ev("a")]
    assert decoder.feed(b"\n") == []  # pairs with the CR before it, not a blank line


def test_L4_cr_line_ends_dispatch_without_waiting_for_more() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"data: a\r\r") == [ev("a")]


# --- F: fields ---------------------------------------------------------------


def test_F2_comments_produce_nothing() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b": heartbeat\n\n" * 3) == []
    assert decoder.last_event_id == ""


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        pytest.param(b"2000", 2000, id="digits"),
        pytest.param(b"0", 0, id="zero"),
        pytest.param(b"007", 7, id="leading-zeros"),
        pytest.param(b"0" * 5000 + b"5", 5, id="thousands-of-leading-zeros"),
        pytest.param(b"2147483646", 2_147_483_646, id="just-under-max"),
        pytest.param(b"2147483647", 2_147_483_647, id="max"),
        pytest.param(b"2147483648", MAX_RECONNECTION_TIME_MS, id="clamped"),
        pytest.param(b"9" * 100_000, MAX_RECONNECTION_TIME_MS, id="absurdly-long-clamped"),
        pytest.param(b"", None, id="empty-ignored"),
        pytest.param(b"+5", None, id="plus-ignored"),
        pytest.param(b"-5", None, id="minus-ignored"),
        pytest.param(b" 5", None, id="second-space-ignored"),
        pytest.param(b"5 ", None, id="trailing-space-ignored"),
        pytest.param(b"\t5", None, id="tab-ignored"),
        pytest.param(b"1000x", None, id="suffix-ignored"),
        pytest.param(b"1_000", None, id="underscore-ignored"),
        pytest.param("٥".encode(), None, id="non-ascii-digit-ignored"),
        pytest.param("²".encode(), None, id="superscript-ignored"),
    ],
)
def test_F9_retry_values(value: bytes, expected: int | None) -> None:
    assert decode([b"retry: " + value + b"\n\n"]).reconnection_time == expected


def test_F9_invalid_retry_keeps_previous_value() -> None:
    assert decode([b"retry:300\nretry:\nretry:-1\n\n"]).reconnection_time == 300


def test_F9_retry_applies_without_dispatch() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"retry:1500\ndata:never dispatched\n")
    assert decoder.reconnection_time == 1500
    decoder.close()
    assert decoder.reconnection_time == 1500


# --- E: dispatch -------------------------------------------------------------


def test_E1_id_only_block_moves_last_event_id() -> None:
    decoder = SSEDecoder(last_event_id="old")
    assert decoder.feed(b"id:prime\n") == []
    assert decoder.last_event_id == "old"  # not before the block dispatches
    assert decoder.feed(b"\n") == []
    assert decoder.last_event_id == "prime"


def test_E1_cursor_seeded_from_previous_response() -> None:
    decoder = SSEDecoder(last_event_id="41")
    assert decoder.feed(b"data:x\n\n") == [ev("x", id="41")]
    assert decoder.feed(b"id:\ndata:y\n\n") == [ev("y")]
    assert decoder.last_event_id == ""


def test_E2_mcp_priming_event_is_dispatched_as_empty_data() -> None:
    assert decode([b"id: 17\ndata:\n\n"]) == Outcome((ev("", id="17"),), "17")


def test_E4_close_discards_incomplete_event_and_its_id() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"retry:1000\ndata:test1\n\nid:test\ndata:test2\n") == [ev("test1")]
    decoder.close()
    assert decoder.last_event_id == ""
    # A reconnect seeded from the cursor replays from the start: test1 again, id "".
    again = SSEDecoder(last_event_id=decoder.last_event_id)
    assert again.feed(b"retry:1000\ndata:test1\n\n") == [ev("test1")]


def test_E4_close_discards_pending_line() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"data:a\n\ndata:b\n\ndata:c")
    decoder.close()
    assert decoder.last_event_id == ""


def test_E4_close_is_idempotent_and_final() -> None:
    decoder = SSEDecoder()
    decoder.close()
    decoder.close()
    with pytest.raises(RuntimeError, match=r"^this SSEDecoder is closed; use a new one$"):
        decoder.feed(b"data:x\n\n")


def test_E4_close_never_reads_the_pending_line() -> None:
    # Without final events the cut-off line is dropped unread: its retry and
    # its id never take effect.
    decoder = SSEDecoder(last_event_id="5")
    assert decoder.feed(b"data:x\n\nid:6\nretry: 5000") == [ev("x", id="5")]
    assert decoder.close() == []
    assert decoder.reconnection_time is None
    assert decoder.last_event_id == "5"
    assert decoder.event_type == ""


# --- C6: bounds --------------------------------------------------------------

_SIZES = re.compile(r"^event stream sent .+ longer than \d+ bytes \(\d+ bytes so far\)")


def test_C6_endless_line_raises_once_it_passes_the_limit() -> None:
    """A 100 MiB body without a newline: refused after limit + one chunk."""
    chunk = b"x" * 65536
    body = itertools.repeat(chunk, 100 * 16)  # 100 MiB, never materialised
    decoder = SSEDecoder()
    fed = 0

    def feed_all() -> None:
        nonlocal fed
        for piece in body:
            fed += len(piece)
            decoder.feed(piece)

    with pytest.raises(StreamProtocolError) as caught:
        feed_all()
    # 16 chunks are exactly the 1 MiB limit (allowed); the 17th passes it.
    assert fed == MAX_EVENT_BYTES + len(chunk)
    assert _SIZES.match(str(caught.value))
    assert "xxxx" not in str(caught.value)


def test_C6_line_exactly_at_limit_passes_one_more_byte_raises() -> None:
    line = b"data:" + "…".encode() * 5  # 5 + 15 = 20 bytes, 10 characters
    assert SSEDecoder(max_line_bytes=20).feed(line + b"\n\n") == [ev("……………")]
    with pytest.raises(StreamProtocolError, match=r"line longer than 19 bytes \(20 bytes"):
        SSEDecoder(max_line_bytes=19).feed(line + b"\n\n")


def test_C6_pending_line_count_starts_again_with_each_line() -> None:
    # Lines split across chunks: each one's pending bytes count from zero, so a
    # healthy stream is never refused as its lines add up.
    decoder = SSEDecoder(max_line_bytes=16)
    for _ in range(5):
        assert decoder.feed(b"data:ab") == []
        assert decoder.feed(b"c\n\n") == [ev("abc")]
    for _ in range(5):
        assert decoder.feed(b"data:" + b"y" * 11) == []  # 16 bytes pending: the limit
        assert decoder.feed(b"\n\n") == [ev("y" * 11)]


def test_C6_a_pending_line_past_the_limit_is_refused_saying_so() -> None:
    decoder = SSEDecoder(max_line_bytes=4)
    with pytest.raises(StreamProtocolError) as caught:
        decoder.feed(b"data:")
    assert str(caught.value) == (
        "event stream sent a line longer than 4 bytes (5 bytes so far); the stream is refused"
    )
    assert decoder.event_type == ""


def test_C6_limits_of_one_byte_are_accepted() -> None:
    decoder = SSEDecoder(max_line_bytes=1, max_event_bytes=1)
    assert decoder.feed(b":\n") == []
    assert decoder.max_line_bytes == decoder.max_event_bytes == 1


def test_C6_pending_line_exactly_at_limit_passes() -> None:
    decoder = SSEDecoder(max_line_bytes=10)
    decoder.feed(b"data:" + b"x" * 5)  # pending: 10 bytes
    assert decoder.feed(b"\n\n") == [ev("xxxxx")]
    with pytest.raises(StreamProtocolError, match="line"):
        decoder.feed(b"data:" + b"x" * 6)


def test_C6_long_comment_line_is_bounded_too() -> None:
    with pytest.raises(StreamProtocolError, match="line"):
        SSEDecoder(max_line_bytes=100).feed(b":" + b"x" * 100 + b"\n")


def test_C6_event_data_limit() -> None:
    # Data as delivered: "aaaa\naaaaa" is 10 bytes.
    assert SSEDecoder(max_event_bytes=10).feed(b"data:aaaa\ndata:aaaaa\n\n") == [ev("aaaa\naaaaa")]
    decoder = SSEDecoder(max_event_bytes=10)
    assert decoder.feed(b"data:aaaa\ndata:aaaa\n") == []  # 9 bytes so far
    with pytest.raises(StreamProtocolError, match=r"an event's data longer than 10 bytes \(14"):
        decoder.feed(b"data:aaaa\n")


def test_C6_event_data_limit_counts_utf8_bytes() -> None:
    with pytest.raises(StreamProtocolError, match="event's data"):
        SSEDecoder(max_event_bytes=5).feed("data:……\n\n".encode())


def test_C6_event_limit_resets_after_each_event() -> None:
    decoder = SSEDecoder(max_event_bytes=4)
    for _ in range(3):
        assert decoder.feed(b"data:abcd\n\n") == [ev("abcd")]


def test_C6_failed_feed_delivers_nothing_and_restores_cursor() -> None:
    decoder = SSEDecoder(max_event_bytes=8)
    assert decoder.feed(b"id:1\ndata:a\n\n") == [ev("a", id="1")]
    with pytest.raises(StreamProtocolError):
        decoder.feed(b"id:2\ndata:b\n\nretry:5\ndata:123456789\n")
    assert decoder.last_event_id == "1"
    assert decoder.reconnection_time is None
    with pytest.raises(RuntimeError, match=r"^this SSEDecoder is failed; use a new one$"):
        decoder.feed(b"data:c\n\n")
    decoder.close()  # still allowed: the caller's cleanup path


_NO_NUL_CR_LF = r"^last_event_id must not contain NUL, CR or LF$"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"max_line_bytes": 0}, r"^max_line_bytes must be at least 1, got 0$", id="0"),
        pytest.param(
            {"max_event_bytes": -1}, r"^max_event_bytes must be at least 1, got -1$", id="negative"
        ),
        pytest.param({"last_event_id": "a\0b"}, _NO_NUL_CR_LF, id="nul-seed"),
        pytest.param({"last_event_id": "a\nb"}, _NO_NUL_CR_LF, id="lf-seed"),
        pytest.param({"last_event_id": "a\rb"}, _NO_NUL_CR_LF, id="cr-seed"),
    ],
)
def test_C6_bad_arguments(kwargs: dict[str, int | str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        SSEDecoder(**kwargs)  # type: ignore[arg-type]


def test_repr_shows_no_stream_content() -> None:
    decoder = SSEDecoder(last_event_id="cursor-secret")
    decoder.feed(b"id:id-secret\ndata:data-secret\n")
    assert "secret" not in repr(decoder)


# --- D1 / C2: content type -----------------------------------------------------


@pytest.mark.parametrize(
    ("content_type", "expected"),
    [
        ("text/event-stream", True),
        ("text/event-stream; charset=utf-8", True),
        ("text/event-stream;charset=windows-1252", True),
        ("Text/Event-Stream", True),
        (" text/event-stream ;x=y", True),
        ("\ttext/event-stream\r\n", True),
        ("text/event-streams", False),
        # Only HTTP whitespace is trimmed, not VT, FF or NBSP; nor any letter.
        ("text/event-stream\x0b", False),
        ("\x0ctext/event-stream", False),
        ("text/event-stream\u00a0", False),
        ("text/event-streamX", False),
        ("text/plain", False),
        ("application/json", False),
        ("text/event-stream, text/html", False),
        ("", False),
        (None, False),
    ],
)
def test_D1_C2_is_event_stream(content_type: str | None, expected: bool) -> None:
    assert is_event_stream(content_type) is expected


def test_letagents_process_stream_sample_chunks() -> None:
    decoder = SSEDecoder()
    chunks = [
        b": connected\n\n",
        b'event: open\ndata: {"connection_id":"00000000-0000-4000-8000-000000000003"}\n\n',
        b": heartbeat\n\n",
        b"event: ended\ndata: {}\n\n",
    ]
    got = [decoder.feed(chunk) for chunk in chunks]
    assert got == [
        [],
        [ev('{"connection_id":"00000000-0000-4000-8000-000000000003"}', "open")],
        [],
        [ev("{}", "ended")],
    ]
    assert _BY_NAME["letagents_process_stream"].expected.events == tuple(got[1] + got[3])


# --- final events (ours; issue 12 item 5) -----------------------------------------------


def test_final_events_default_keeps_the_decoder_exact() -> None:
    decoder = SSEDecoder()
    assert decoder.feed(b"event: ended\n\nevent: ended\n") == []
    assert decoder.close() == []


def test_a_final_event_dispatches_without_data() -> None:
    decoder = SSEDecoder(final_events={"ended"})
    assert decoder.feed(b"id: 7\nevent: ended\n\nevent: other\n\n") == [
        ServerSentEvent(event="ended", data="", id="7")
    ]


@pytest.mark.parametrize(
    "body", [b"event: ended\n", b"event: ended", b"event: ended\ndata: {}", b"event: ended\r"]
)
def test_a_final_event_cut_off_by_the_end_of_the_stream_is_dispatched(body: bytes) -> None:
    decoder = SSEDecoder(final_events={"ended"})
    assert decoder.feed(body) == []
    data = "{}" if b"data" in body else ""
    assert decoder.close() == [ServerSentEvent(event="ended", data=data)]
    assert decoder.close() == []


def test_a_final_event_whose_cut_off_data_is_too_large_is_dropped() -> None:
    decoder = SSEDecoder(max_event_bytes=4, final_events={"ended"})
    assert decoder.feed(b"event: ended\ndata: 12345") == []
    assert decoder.close() == []
    assert decoder.event_type == ""


def test_a_cut_off_block_of_another_type_is_still_dropped() -> None:
    decoder = SSEDecoder(final_events={"ended"})
    assert decoder.feed(b"event: ended\nevent: ping\ndata: x") == []
    assert decoder.close() == []


def test_event_type_shows_the_block_being_built() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"event: ended\nda")
    assert decoder.event_type == "ended"
    decoder.feed(b"ta: {}\n\n")
    assert decoder.event_type == ""
    # A block without data dispatches nothing, and its type is gone all the same.
    assert decoder.feed(b"event: ping\n") == []
    assert decoder.event_type == "ping"
    assert decoder.feed(b"\n") == []
    assert decoder.event_type == ""
    decoder.feed(b"event: ended\n")
    decoder.close()
    assert decoder.event_type == ""


@pytest.mark.parametrize(
    ("chunks", "known"),
    [
        ([b"event: ended"], "ended"),
        ([b"event:ended"], "ended"),
        ([b"event: en", b"ded"], "ended"),
        ([b"event: ende"], ""),
        ([b"event: ended ", b""], ""),
        ([b"data: event: ended"], ""),
        ([b": event: ended"], ""),
        ([b"\xef\xbb\xbfx\n\n\xef\xbb\xbfevent: ended"], ""),
        ([b"event: ping\nevent: ended"], "ended"),
    ],
)
def test_a_final_name_is_known_before_its_newline(chunks: list[bytes], known: str) -> None:
    """Issue 28 row 8. Node (``process-connection.js`` ``holdOnce``) ends at once when the
    text ``event: ended`` arrives, newline or not; a final type named by a pending
    ``event`` line is the block's type before the line ends. Data, comments and a
    name after a mid-stream BOM name no event."""
    decoder = SSEDecoder(final_events={"ended"})
    for chunk in chunks:
        assert decoder.feed(chunk) == []
    assert decoder.event_type == known


def test_a_pending_line_names_no_final_type_without_final_events() -> None:
    decoder = SSEDecoder()
    decoder.feed(b"event: ended")
    assert decoder.event_type == ""


# --- bounded work per step (issue 13, row 1) -------------------------------------------


@given(
    stream=st.lists(st.sampled_from([b"data: \xc3\xa9", b"\r", b"\n", b"id: 7", b":c", b"x"])),
    slice_bytes=st.integers(1, 9),
)
def test_feed_slices_decodes_as_one_feed(stream: list[bytes], slice_bytes: int) -> None:
    """Slicing changes the steps, never the events, the cursor or the retry."""
    body = b"".join(stream)
    whole = decode([body])
    decoder = SSEDecoder()
    events = [e for step in decoder.feed_slices(body, slice_bytes=slice_bytes) for e in step]
    decoder.close()
    assert Outcome(tuple(events), decoder.last_event_id, decoder.reconnection_time) == whole


def test_feed_slices_bounds_each_step_of_a_huge_chunk() -> None:
    """1 MiB of tiny events (a gzip bomb inflates to far more) is 16 steps,
    none decoding more than FEED_SLICE_BYTES; one feed would do it all at once."""
    decoder = SSEDecoder()
    chunk = b"data: x\n\n" * (128 * 1024)
    steps = 0
    events = 0
    for step in decoder.feed_slices(chunk):
        steps += 1
        events += len(step)
        assert len(step) <= FEED_SLICE_BYTES // len(b"data: x\n\n") + 1
    assert steps == len(chunk) // FEED_SLICE_BYTES
    assert events == 128 * 1024


def test_feed_slices_of_an_empty_chunk_is_one_empty_step() -> None:
    assert list(SSEDecoder().feed_slices(b"")) == [[]]
    assert list(SSEDecoder().feed_slices(b"", slice_bytes=1)) == [[]]
    assert list(SSEDecoder().feed_slices(b":", slice_bytes=1)) == [[]]
    assert list(SSEDecoder().feed_slices(b"data:x\n\n", slice_bytes=9)) == [[ev("x")]]
    with pytest.raises(ValueError, match="slice_bytes"):
        list(SSEDecoder().feed_slices(b"x", slice_bytes=0))
