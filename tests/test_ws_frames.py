"""Where the room's frames end (``_ws_frames.FrameEdges``), and a client's frames made by hand.

Frames made by wsproto (a server's, unmasked, and a client's, masked; payloads
of every length class: short, 16-bit and 64-bit), joined and cut anywhere:
a chunk is taken for bare pings exactly when it starts between two frames
and is nothing but whole bare pings. The frames a socket makes ahead
(``client_frame``) are byte for byte wsproto's for the same masking key.
"""

from __future__ import annotations

import itertools
import unittest.mock

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wsproto.connection import Connection, ConnectionType
from wsproto.events import BytesMessage, CloseConnection, Event, Ping, Pong, TextMessage

from letagents_trio._errors import StreamProtocolError
from letagents_trio._ws_frames import (
    MAX_PINGS_PER_INTERVAL,
    FrameBounds,
    FrameEdges,
    client_frame,
)

BARE_PING = b"\x89\x00"

EVENTS = st.one_of(
    st.just(Ping()),
    st.builds(Ping, payload=st.binary(min_size=1, max_size=125)),
    st.builds(Pong, payload=st.binary(max_size=125)),
    st.builds(TextMessage, data=st.text(max_size=300)),
    st.builds(BytesMessage, data=st.sampled_from([b"", BARE_PING * 2, b"x" * 126, b"y" * 70_000])),
)


def framed(events: list[Event], *, masked: bool) -> tuple[bytes, set[int]]:
    """The frames of ``events`` joined, and the offsets where a frame begins (and the end)."""
    ws = Connection(ConnectionType.CLIENT if masked else ConnectionType.SERVER)
    data, edges = b"", {0}
    for event in events:
        data += ws.send(event)
        edges.add(len(data))
    return data, edges


@settings(max_examples=300, deadline=None)
@given(
    events=st.lists(EVENTS, max_size=12),
    masked=st.booleans(),
    cuts=st.lists(st.integers(min_value=0, max_value=1 << 20), max_size=12),
)
def test_bare_pings_are_seen_only_between_frames(
    events: list[Event], masked: bool, cuts: list[int]
) -> None:
    data, edges = framed(events, masked=masked)
    offsets = sorted({0, len(data), *(cut % (len(data) + 1) for cut in cuts)})
    walker = FrameEdges()
    for start, end in itertools.pairwise(offsets):
        chunk = data[start:end]
        if not chunk:
            continue
        bare = start in edges and chunk == BARE_PING * (len(chunk) // 2)
        assert walker.bare_pings(chunk) == (len(chunk) // 2 if bare else 0)


def test_a_head_cut_anywhere_is_followed_to_its_frame_s_end() -> None:
    """A 64-bit length, a mask: the head itself comes a byte at a time."""
    data, _ = framed([BytesMessage(data=b"z" * 70_000)], masked=True)
    walker = FrameEdges()
    for at in range(14):  # 2 bytes, an 8-byte length, a 4-byte mask
        assert walker.bare_pings(data[at : at + 1]) == 0
    assert walker.bare_pings(data[14:-2]) == 0
    assert walker.bare_pings(data[-2:]) == 0  # the payload's last two bytes
    assert walker.bare_pings(BARE_PING * 3) == 3  # then, between frames, three pings


def test_a_payload_that_looks_like_bare_pings_is_its_frame_s_rest() -> None:
    """Cut after its head, a frame's payload of ping bytes is no ping; the frame after it is."""
    for masked in (False, True):
        data, _ = framed([BytesMessage(data=BARE_PING * 2), Ping()], masked=masked)
        walker = FrameEdges()
        head = 6 if masked else 2
        assert walker.bare_pings(data[:head]) == 0
        assert walker.bare_pings(data[head : head + 4]) == 0
        assert walker.bare_pings(data[head + 4 :]) == (0 if masked else 1)  # a client's is masked


def test_the_rest_of_a_head_and_the_frames_after_it_in_one_chunk() -> None:
    data, _ = framed([BytesMessage(data=b"abc"), TextMessage(data="hi")], masked=False)
    walker = FrameEdges()
    assert walker.bare_pings(data[:1]) == 0
    assert walker.bare_pings(data[1:]) == 0  # the head's second byte, "abc", "hi"
    assert walker.bare_pings(BARE_PING) == 1


async def test_a_heartbeat_of_bare_pings_is_counted_and_answered_with_one_masked_pong() -> None:  # noqa: ASYNC124 (counting reads trio's clock)
    """One pong for a chunk of bare pings (a fresh key each time); nothing for anything else."""
    bounds, edges = FrameBounds(max_event_bytes=1024, ping_interval=40.0), FrameEdges()
    first = edges.heartbeat_pong(BARE_PING * 2, bounds)
    second = edges.heartbeat_pong(BARE_PING, bounds)
    assert first[:2] == second[:2] == b"\x8a\x80"  # final pong, masked, no payload
    assert len(first) == len(second) == 6
    keys = {edges.heartbeat_pong(BARE_PING, FrameBounds(1024, 40.0))[2:] for _ in range(16)}
    assert len(keys) > 1  # a key drawn for each pong
    room = Connection(ConnectionType.SERVER)
    room.receive_data(first)
    assert list(room.events()) == [Pong(payload=b"")]
    assert edges.heartbeat_pong(Connection(ConnectionType.SERVER).send(Ping(b"x")), bounds) == b""
    assert edges.heartbeat_pong(BARE_PING * (MAX_PINGS_PER_INTERVAL - 3), bounds)
    with pytest.raises(StreamProtocolError, match=r"^the room floods .* with pings$"):
        edges.heartbeat_pong(BARE_PING, bounds)  # the chunk's pings all count


# --- a client's frames made without a connection ------------------------------------


@settings(max_examples=200, deadline=None)
@given(
    event=st.one_of(
        st.builds(TextMessage, data=st.text(max_size=300)),
        st.builds(TextMessage, data=st.sampled_from(["x" * 125, "x" * 126, "y" * 65_535])),
        st.builds(TextMessage, data=st.just("z" * 65_536)),
        st.builds(CloseConnection, code=st.sampled_from([1000, 1001, 4000])),
    ),
    key=st.binary(min_size=4, max_size=4),
)
def test_a_client_frame_is_the_frame_wsproto_writes_with_the_same_key(
    event: TextMessage | CloseConnection, key: bytes
) -> None:
    """Head, length class, masking: byte for byte wsproto's, and read back as sent."""
    with unittest.mock.patch("os.urandom", return_value=key):
        expected = Connection(ConnectionType.CLIENT).send(event)
        if isinstance(event, TextMessage):
            made = client_frame(0x1, event.data.encode())
        else:
            made = client_frame(0x8, event.code.to_bytes(2, "big"))
    assert made == expected
    server = Connection(ConnectionType.SERVER)
    server.receive_data(made)
    [read] = server.events()
    if isinstance(event, TextMessage):
        assert read == event
    else:
        assert isinstance(read, CloseConnection)
        assert (read.code, read.reason) == (event.code, "")


def test_each_client_frame_has_a_fresh_key() -> None:
    keys = {client_frame(0x1, b"exit")[2:6] for _ in range(16)}
    assert len(keys) > 1
