"""The room's frames on a process socket, as wsproto parses them: bounded and read for news.

Sans-IO helpers of :class:`~letagents_trio._ws_socket.ProcessSocket`:
:class:`FrameBounds` holds what the room may send (a message's bytes and
pieces, pings per interval); :func:`read_news` reads what a chunk of the
room's bytes says through wsproto's events (the ``open`` frame, ``ended``,
pings to answer, the close), answering a chunk of nothing but bare pings
itself when :class:`FrameEdges` knows it starts a frame, and
:func:`read_exit_answer` the room's answer to an exit. The frames a client
writes without wsproto are made here too: :func:`exit_frames` (made ahead,
once the room names the connection) and the bare pong, both by
:func:`client_frame`. Nothing here reads or writes the stream: the socket
sends what they make.
"""

from __future__ import annotations

import json
import logging
import os
from typing import Final, final

import attrs
import trio
from wsproto.connection import Connection, ConnectionState
from wsproto.events import BytesMessage, CloseConnection, Ping, TextMessage

from . import _protocol
from ._connector import StreamNews
from ._errors import StreamProtocolError

__all__ = [
    "MAX_MESSAGE_PIECES",
    "MAX_PINGS_PER_INTERVAL",
    "NOTHING_NEW",
    "FrameBounds",
    "FrameEdges",
    "Heard",
    "client_frame",
    "exit_frames",
    "read_exit_answer",
    "read_news",
]

logger = logging.getLogger("letagents_trio.transport")

# The most pieces one message may come in (its frames, and the parts of a frame
# as its bytes arrive): a room's messages are tens of bytes in one frame, and
# a message of the largest size read 4 KiB at a time is 256 pieces.
MAX_MESSAGE_PIECES: Final = 1024
# The most pings the room may send within one ping interval: it pings every
# 15 s; many more is a flood, whose parsing and answers would cost a core.
MAX_PINGS_PER_INTERVAL: Final = 100
# The news of a read that brought nothing the holder acts on (pings, part of a
# frame): one for every socket, rather than one more object per wake-up.
NOTHING_NEW: Final = StreamNews()
# The opcodes of the frames a client makes here (RFC 6455, section 5.2).
_TEXT: Final = 0x1
_CLOSE: Final = 0x8
_PONG: Final = 0xA
# The normal close code (RFC 6455, section 7.4.1).
_NORMAL_CLOSURE: Final = 1000
# The room's ping, as a server sends it: final, opcode 0x9; unmasked, no payload.
_BARE_PING: Final = b"\x89\x00"
# The longest head a frame has: two bytes, an 8-byte length, a 4-byte mask.
_LONGEST_HEAD: Final = 14


@final
class FrameBounds:
    """What the room may send on one socket: a message's bytes and pieces, pings per interval."""

    def __init__(self, max_event_bytes: int, ping_interval: float) -> None:
        self.max_event_bytes = max_event_bytes
        self.ping_interval = ping_interval
        # The message being received: its text pieces, its size in bytes, its pieces.
        self._text: list[str] = []
        self._message_bytes = 0
        self._message_pieces = 0
        # The room's pings in the current interval, and when that interval began.
        self._pings = 0
        self._pings_since = trio.current_time()

    def message(self, event: TextMessage) -> str | None:
        """The whole text of a message once its last piece is in, else None."""
        self.count_piece(len(event.data.encode()), finished=event.message_finished)
        self._text.append(event.data)
        if not event.message_finished:
            return None
        text = "".join(self._text)
        self._text.clear()
        return text

    def count_piece(self, size: int, *, finished: bool) -> None:
        """Count one piece of a message, in bytes and in pieces, text or binary.

        Raises:
            StreamProtocolError: the message is over ``max_event_bytes`` bytes
                or :data:`MAX_MESSAGE_PIECES` pieces (empty ones count too).
        """
        self._message_bytes += size
        self._message_pieces += 1
        if self._message_bytes > self.max_event_bytes:
            raise StreamProtocolError("a message on the process socket is too large")
        if self._message_pieces > MAX_MESSAGE_PIECES:
            raise StreamProtocolError("a message on the process socket comes in too many pieces")
        if finished:
            self._message_bytes = self._message_pieces = 0

    def count_ping(self, pings: int = 1) -> None:
        """Count ``pings`` of the room's pings, all read now.

        Raises:
            StreamProtocolError: more than :data:`MAX_PINGS_PER_INTERVAL` in
                one ping interval.
        """
        now = trio.current_time()
        if now - self._pings_since >= self.ping_interval:
            self._pings, self._pings_since = 0, now
        self._pings += pings
        if self._pings > MAX_PINGS_PER_INTERVAL:
            raise StreamProtocolError("the room floods the process socket with pings")


@final
class FrameEdges:
    """Where the room's frames end in the bytes given to wsproto: whether it holds part of one.

    A chunk that is nothing but the room's bare pings may be answered without
    wsproto (:func:`read_news`) only when wsproto holds no part of a frame:
    else those bytes would be the rest of that frame. Every other chunk is
    walked here frame head by frame head (a head gives its frame's length),
    never byte by byte, and kept nowhere.
    """

    __slots__ = ("_head", "_left")

    def __init__(self) -> None:
        # The head of a frame received in part; the bytes of the current frame still to come.
        self._head = b""
        self._left = 0

    def bare_pings(self, data: bytes) -> int:
        """How many bare pings ``data`` is, read between two frames; 0 when it is anything else.

        Anything else is walked (see :meth:`walk`): it goes to wsproto.
        """
        if not self._head and not self._left and data == _BARE_PING * (len(data) // 2):
            return len(data) // 2
        self.walk(data)
        return 0

    def heartbeat_pong(self, data: bytes, bounds: FrameBounds) -> bytes:
        """The pong for a chunk of nothing but bare pings (counted), read between two frames.

        One pong, for the latest (RFC 6455, section 5.5.3, lets the earlier
        ones go unanswered); ``b""`` when ``data`` is anything else, which
        goes to wsproto.

        Raises:
            StreamProtocolError: the pings broke the bound (see :class:`FrameBounds`).
        """
        pings = self.bare_pings(data)
        if not pings:
            return b""
        bounds.count_ping(pings)
        return _bare_pong()

    def walk(self, data: bytes) -> None:
        """Follow ``data`` (bytes wsproto is given) to the end of its last frame, or into one."""
        at, size = 0, len(data)
        while at < size:
            if self._left:
                step = min(self._left, size - at)
                self._left -= step
                at += step
                continue
            head = self._head + data[at : at + _LONGEST_HEAD]
            frame = _frame_size(head)
            if frame is None:
                # The rest of the data is part of a head.
                self._head = head
                return
            head_size, self._left = frame
            at += head_size - len(self._head)
            self._head = b""


def _frame_size(head: bytes) -> tuple[int, int] | None:
    """The size of a frame's head and of its payload, from its first bytes; None when too few."""
    if len(head) < 2:
        return None
    size = head[1] & 0x7F
    extended = 2 if size == 126 else 8 if size == 127 else 0
    head_size = 2 + extended + (4 if head[1] & 0x80 else 0)
    if len(head) < head_size:
        return None
    if extended:
        size = int.from_bytes(head[2 : 2 + extended], "big")
    return head_size, size


@final
@attrs.frozen
class Heard:
    """What one batch of the room's frames said.

    Attributes:
        connection_id: the connection an ``open`` frame named (the latest), if any.
        exit_ack: an ``open`` frame said the room acknowledges exits.
        ended: an ``ended`` frame came.
        closed: the room's close came.
        reply: what to send back: the answer to the latest ping before the
            close (RFC 6455, section 5.5.3, lets the earlier ones go
            unanswered), then the close's echo.
    """

    connection_id: str | None
    exit_ack: bool
    ended: bool
    closed: bool
    reply: bytes

    @property
    def news(self) -> StreamNews:
        """What the holder hears: :data:`NOTHING_NEW` when it names no connection and no end."""
        if self.connection_id is None and not self.ended:
            return NOTHING_NEW
        return StreamNews(connection_id=self.connection_id, ended=self.ended)


def read_news(ws: Connection, bounds: FrameBounds, data: bytes = b"") -> Heard | None:
    """Give ``data`` to wsproto and read the events it has; None when it has none.

    Raises:
        StreamProtocolError: the room broke a bound (see :class:`FrameBounds`).
    """
    if data:
        ws.receive_data(data)
    connection_id: str | None = None
    exit_ack = ended = closed = seen = False
    reply = pong = b""
    for event in ws.events():
        seen = True
        if isinstance(event, TextMessage):
            text = bounds.message(event)
            if text is not None:
                kind, frame = _text_event(text)
                if kind == "open":
                    named = _protocol.connection_id_or_none(frame.get("connection_id"))
                    connection_id = named or connection_id
                    exit_ack = exit_ack or frame.get("exit_ack") is True
                ended = ended or kind == "ended"
        elif isinstance(event, BytesMessage):
            # Not part of the protocol: counted against the limits, then dropped.
            bounds.count_piece(len(event.data), finished=event.message_finished)
        elif isinstance(event, Ping):
            bounds.count_ping()
            if ws.state is ConnectionState.OPEN:
                pong = _pong(ws, event)
        elif isinstance(event, CloseConnection):
            reply, pong = reply + pong, b""
            closed = True
            if ws.state is ConnectionState.REMOTE_CLOSING:
                reply += ws.send(event.response())
    if not seen:
        return None
    return Heard(
        connection_id=connection_id,
        exit_ack=exit_ack,
        ended=ended,
        closed=closed,
        reply=reply + pong,
    )


def client_frame(opcode: int, payload: bytes) -> bytes:
    """One final frame of ``opcode`` carrying ``payload``, as a client writes it.

    RFC 6455, section 5.2: the head (final, the opcode; masked, the length in
    7, 16 or 64 bits), a fresh four-byte masking key, the payload masked
    with it (section 5.3): the bytes wsproto writes for the same frame, with
    its key. Made without a connection object, so that a socket's exit frames
    can be made ahead for the price of their bytes.
    """
    size = len(payload)
    if size < 126:
        head = bytes((0x80 | opcode, 0x80 | size))
    elif size < 0x10000:
        head = bytes((0x80 | opcode, 0xFE)) + size.to_bytes(2, "big")
    else:
        head = bytes((0x80 | opcode, 0xFF)) + size.to_bytes(8, "big")
    key = os.urandom(4)
    if size:
        mask = int.from_bytes((key * (size // 4 + 1))[:size], "big")
        payload = (int.from_bytes(payload, "big") ^ mask).to_bytes(size, "big")
    return head + key + payload


def exit_frames(connection_id: str | None) -> tuple[bytes, bytes]:
    """The exit naming ``connection_id`` and a normal close, as a client writes them.

    Each with a fresh mask. WebSocket frames stand alone, so a socket makes
    them before it sends them (when the room names its connection), and its
    own connection sends nothing after them.
    """
    text = json.dumps(
        {"event": "exit", "process_connection_id": connection_id}, separators=(",", ":")
    )
    return (
        client_frame(_TEXT, text.encode()),
        client_frame(_CLOSE, _NORMAL_CLOSURE.to_bytes(2, "big")),
    )


def _bare_pong() -> bytes:
    """The pong answering a ping that carries nothing: no payload, a fresh mask."""
    return client_frame(_PONG, b"")


def _pong(ws: Connection, ping: Ping) -> bytes:
    """The pong answering ``ping``, as a client writes it (masked: RFC 6455, section 5.3).

    The room's pings carry nothing: the answer to one is a final pong frame
    with no payload and a fresh masking key, made here in one step; wsproto
    makes the answer to any other.
    """
    if ping.payload:
        return ws.send(ping.response())
    return _bare_pong()


def read_exit_answer(
    ws: Connection, bounds: FrameBounds, names: str | None
) -> tuple[bool | None, bool]:
    """Read the room's answer to an exit naming ``names`` from the events wsproto has.

    Pings are not answered now.

    Returns:
        The latest ``recorded`` of an ``exit_recorded`` frame for that
        connection (None when none came), and whether the room's close came.
    """
    recorded: bool | None = None
    closed = False
    for event in ws.events():
        if isinstance(event, TextMessage):
            text = bounds.message(event)
            kind, frame = _text_event(text) if text is not None else (None, {})
            value = frame.get("recorded")
            if (
                kind == "exit_recorded"
                and isinstance(value, bool)
                and frame.get("process_connection_id") == names
            ):
                recorded = value
        elif isinstance(event, CloseConnection):
            closed = True
    return recorded, closed


def _text_event(text: str) -> tuple[str | None, dict[str, object]]:
    """The ``event`` a room's text frame names, and its fields (empty when not JSON)."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        logger.debug("ignoring a process-socket frame that is not JSON")
        return None, {}
    if not isinstance(value, dict):
        return None, {}
    event = value.get("event")
    return (event if isinstance(event, str) else None), value
