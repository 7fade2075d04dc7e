"""A sans-IO, incremental Server-Sent-Events decoder (WHATWG HTML §9.2.5-9.2.6).

The process connection and every room event stream go through one
:class:`SSEDecoder` per HTTP response. It does no I/O: the caller feeds it the
body's bytes as they arrive and gets back the events those bytes completed.
Rule ids (D1, L3, F8, E1, C6, ...) refer to ``SSE-CONFORMANCE.md``; each one
has a test named after it in ``tests/test_sse.py``.

The algorithm, per :meth:`SSEDecoder.feed` call:

1. **Decode** (D1-D3). The bytes go through one incremental UTF-8 decoder with
   ``errors="replace"``: a character split across chunks is completed by the
   next chunk, invalid bytes become U+FFFD, nothing raises, and any
   ``charset`` the server announced is ignored. The first character the
   response ever decodes is dropped if it is U+FEFF; a later U+FEFF is data
   (so ``\\uFEFF\\uFEFFdata:1`` names a field ``\\uFEFFdata`` and is ignored).
2. **Split lines** (L1-L4). The decoded text is split with ``str.split("\\n")``
   when it holds no CR, else with one compiled regex ``\\r\\n|\\r|\\n``: only
   those three end a line, never U+2028, U+0085, VT or FF (which
   ``str.splitlines`` would split on). A CR that ends a chunk has already
   ended its line; the decoder remembers it and drops an LF that begins the
   next non-empty text, so a CRLF split across chunks is one terminator, not
   an extra empty line that would dispatch early. A run of three or more
   terminators is decoded as two: the blank lines after the first dispatch
   empty blocks, which change nothing. The text after the last
   terminator is the pending line, kept as a list of parts and joined once,
   when its terminator arrives.
3. **Interpret each complete line** (F1-F10). Empty line: dispatch. ``:`` first:
   comment. Otherwise the field name is everything before the first colon
   (exact, case-sensitive match) and the value everything after it, minus one
   leading space. ``data`` appends to a list (joined with LF at dispatch, which
   is the spec's "append LF, then drop the last LF"); ``event`` sets the type;
   ``id`` sets the id buffer unless the value holds NUL; ``retry`` sets the
   reconnection time at once if the value is all ASCII digits.
4. **Dispatch** (E1-E3). The source's last event ID takes the id buffer's
   value first, even when no event follows (an id-only block moves the
   cursor). If no ``data`` line was seen, the type and data buffers reset and
   nothing is delivered; otherwise a :class:`ServerSentEvent` is delivered with
   type ``event`` or ``"message"``. The id buffer is never reset by dispatch.
5. **End of stream** (E4). :meth:`SSEDecoder.close` drops the incomplete event
   and the pending line: an event without its blank line never happened, and
   an ``id`` inside it never moved the cursor.

**Final events** (ours, for the Node client's fidelity; off by default). An
event type named in ``final_events`` is final wherever its ``event`` line
appears: a blank line dispatches it even without a ``data`` line (with data
``""``), and :meth:`SSEDecoder.close` dispatches an incomplete block of that
type (reading the pending line as if its terminator had come) instead of
dropping it. :attr:`SSEDecoder.event_type` shows the type of the block being
built, a final type as soon as an ``event`` line names it, before that line's
terminator comes (a final event's name is known before its newline, as the
Node client knows ``event: ended`` the moment the text arrives), so a caller
can act on a final type before its block, or its line, ends. With no final
events the decoder is WHATWG-exact.

Decisions the spec leaves open, or that are ours:

- **retry** (F9) lives on the decoder (:attr:`SSEDecoder.reconnection_time`),
  not on events: the spec applies it to the source as soon as the line is read,
  even in a block that never dispatches. An empty value, a sign, whitespace or
  any non-ASCII-digit character is ignored. Digit strings are never handed
  whole to ``int()`` (Python refuses more than 4300 digits, and megabytes of
  digits would cost time): leading zeros are stripped and anything longer than
  ``MAX_RECONNECTION_TIME_MS`` is clamped to it.
- **Bounds** (C6). A line (terminator excluded) longer than ``max_line_bytes``
  UTF-8 bytes, or an event whose data (as it would be delivered) grows longer
  than ``max_event_bytes``, raises :class:`~letagents_trio.StreamProtocolError`.
  The pending line is measured after every chunk, so a stream that never sends
  a newline is refused once it passes the limit: at most the limit plus one
  chunk is ever buffered. The message gives sizes only.
- **Atomic feeds.** A ``feed`` that raises delivers none of the chunk's events,
  so it also restores :attr:`~SSEDecoder.last_event_id` and
  :attr:`~SSEDecoder.reconnection_time` to their values before the chunk: the
  cursor never points past an event the caller did not receive. After an error
  the decoder is unusable (further calls raise :class:`RuntimeError`); the
  caller ends the attempt and decodes the next response with a new decoder.
- **Bounded work per step** (issue 13). :meth:`SSEDecoder.feed` does work
  proportional to its chunk, and a chunk may be huge (a compressed body
  inflates 64 KB on the wire into tens of megabytes of blank lines, tens of
  millions of dispatches). :meth:`SSEDecoder.feed_slices` feeds a chunk in
  slices of at most ``FEED_SLICE_BYTES`` and yields each slice's events, so an
  async caller checkpoints between slices: no single step decodes more than
  one slice, whatever arrives in one read. Each slice is an atomic feed.
- **Cursor seeding.** A new decoder may be seeded with the previous response's
  :attr:`~SSEDecoder.last_event_id`, as browsers do: events of the new response
  that carry no ``id`` then keep the cursor instead of clearing it.

Performance: the only per-character work happens in C (``bytes.decode``,
``str.split``, the regex); Python runs once per chunk and once per line. A
heartbeat comment costs one split and one ``str.startswith``-sized check.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import Iterable, Iterator
from typing import Final, final

import attrs

from ._errors import StreamProtocolError
from ._protocol import EVENT_STREAM, MAX_EVENT_BYTES

__all__ = [
    "FEED_SLICE_BYTES",
    "MAX_RECONNECTION_TIME_MS",
    "SSEDecoder",
    "ServerSentEvent",
    "is_event_stream",
]

# The most bytes one step of feed_slices decodes: at worst 9,000 tiny events,
# tens of milliseconds of Python, as large as a usual read, so a caller that
# checkpoints between slices keeps its event loop responsive whatever one read
# returns, and ordinary reads (one slice) cost no extra checkpoint.
FEED_SLICE_BYTES: Final = 64 * 1024

# The largest reconnection time a `retry:` field can set: 2**31 - 1 ms (about
# 24.8 days) is the longest delay a browser timer accepts; longer is nonsense.
MAX_RECONNECTION_TIME_MS: Final = 2**31 - 1

# More significant digits than this are always above MAX_RECONNECTION_TIME_MS.
_MAX_RETRY_DIGITS: Final = len(str(MAX_RECONNECTION_TIME_MS))

# The three line terminators of §9.2.5 (L1); CRLF first so it counts once.
_LINE_END: Final = re.compile(r"\r\n|\r|\n")

# Three or more line ends in a row: every blank line after the first dispatches
# an empty block, which changes nothing (E2), so a run is decoded as two (a
# stream of nothing but newlines costs one regex pass, not one loop per line).
_BLANK_RUN: Final = re.compile(r"(?:\r\n|\r|\n){3,}")
_LF_RUN: Final = re.compile(r"\n{3,}")

# Characters an id (or a seed) cannot hold: NUL is refused by the spec (F8);
# CR and LF end lines, so no parsed id holds them and no seed may.
_ID_FORBIDDEN: Final = re.compile(r"[\x00\r\n]")


def _utf8_len(text: str) -> int:
    """The length of ``text`` in UTF-8 bytes (``isascii`` is O(1) in CPython)."""
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def _positive(instance: object, attribute: attrs.Attribute[int], value: int) -> None:
    if value < 1:
        raise ValueError(f"{attribute.name} must be at least 1, got {value}")


def _valid_seed(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    if _ID_FORBIDDEN.search(value):
        raise ValueError("last_event_id must not contain NUL, CR or LF")


def _frozen(value: Iterable[str]) -> frozenset[str]:
    return frozenset(value)


def _new_utf8_decoder() -> codecs.IncrementalDecoder:
    return codecs.getincrementaldecoder("utf-8")(errors="replace")


def is_event_stream(content_type: str | None) -> bool:
    """Whether a ``Content-Type`` header value opens an event stream (D1, C2).

    The MIME essence must be ``text/event-stream`` (ASCII case-insensitive, HTTP
    whitespace around it ignored); parameters such as ``charset`` are ignored,
    because the stream is always UTF-8.

    Args:
        content_type: the header value, or ``None`` when the header is missing.

    Returns:
        True if the response may be decoded as an event stream.
    """
    if content_type is None:
        return False
    essence = content_type.partition(";")[0].strip(" \t\r\n")
    return essence.isascii() and essence.lower() == EVENT_STREAM


@final
@attrs.frozen(kw_only=True)
class ServerSentEvent:
    """One dispatched event.

    Attributes:
        event: the event type: the last ``event`` field's value, or
            ``"message"`` when there was none or it was empty (F6, E3).
        data: the ``data`` lines joined with LF (F7, E3); may be ``""``.
        id: the source's last event ID at dispatch time (E1), which is the last
            ``id`` field seen on the stream so far, in this block or an earlier
            one (F8); ``""`` if none, or if an empty ``id`` reset it.
    """

    event: str = "message"
    data: str = ""
    id: str = ""


@final
# The arguments are checked once, as the decoder is made; every field set after
# that is its own bookkeeping, set per line read, with no hook (a hook made
# each assignment a Python call).
@attrs.define(eq=False, on_setattr=attrs.setters.NO_OP)
class SSEDecoder:
    """Decode one response's event stream, chunk by chunk.

    Use one decoder per HTTP response (the BOM rule and the buffers are per
    response). Not thread-safe; a decoder has no I/O and never blocks.

    Args:
        max_line_bytes: the longest line, in UTF-8 bytes without its
            terminator, the stream may send (C6).
        max_event_bytes: the largest event data, in UTF-8 bytes as delivered,
            the stream may send (C6).
        last_event_id: the cursor to start from, usually the previous
            response's :attr:`last_event_id`; must not hold NUL, CR or LF.
        final_events: event types that are final (see the module docstring):
            dispatched without data, and at the end of the stream.

    Raises:
        ValueError: a limit below 1, or a seed holding NUL, CR or LF.
    """

    max_line_bytes: int = attrs.field(default=MAX_EVENT_BYTES, kw_only=True, validator=_positive)
    max_event_bytes: int = attrs.field(default=MAX_EVENT_BYTES, kw_only=True, validator=_positive)
    _last_event_id: str = attrs.field(default="", kw_only=True, validator=_valid_seed, repr=False)
    final_events: frozenset[str] = attrs.field(default=frozenset(), kw_only=True, converter=_frozen)
    _reconnection_time: int | None = attrs.field(default=None, init=False)

    _utf8: codecs.IncrementalDecoder = attrs.field(
        factory=_new_utf8_decoder, init=False, repr=False
    )
    # No text decoded yet: the next character may be the one BOM we strip (D3).
    _at_start: bool = attrs.field(default=True, init=False, repr=False)
    # The last text ended with CR: an LF starting the next text is its pair (L3).
    _after_cr: bool = attrs.field(default=False, init=False, repr=False)
    _pending: list[str] = attrs.field(factory=list, init=False, repr=False)
    _pending_bytes: int = attrs.field(default=0, init=False, repr=False)
    _data: list[str] = attrs.field(factory=list, init=False, repr=False)
    _data_bytes: int = attrs.field(default=0, init=False, repr=False)
    _event_type: str = attrs.field(default="", init=False, repr=False)
    _id_buffer: str = attrs.field(default="", init=False, repr=False)
    # None while usable; otherwise why it is not ("closed", "failed").
    _finished: str | None = attrs.field(default=None, init=False)

    def __attrs_post_init__(self) -> None:
        self._id_buffer = self._last_event_id

    @property
    def last_event_id(self) -> str:
        """The source's last event ID, the id buffer as of the last dispatch (E1).

        This is what a reconnect sends as ``Last-Event-ID`` (when non-empty). An
        ``id`` in a block that has not dispatched yet does not count (E4).
        """
        return self._last_event_id

    @property
    def reconnection_time(self) -> int | None:
        """The last valid ``retry`` value in milliseconds, or ``None`` if none came (F9).

        Clamped to ``MAX_RECONNECTION_TIME_MS``. It takes effect as soon as
        its line is read, even if the block never dispatches.
        """
        return self._reconnection_time

    @property
    def event_type(self) -> str:
        """The ``event`` type of the block being built (``""`` when none yet).

        Reset by each dispatch. A line still waiting for its terminator does
        not count, unless it reads ``event:`` plus a type in ``final_events``:
        a final name is known before its newline (a later ``event`` line may
        still rename the block).
        """
        if (
            self._pending
            and self.final_events
            and self._pending_bytes
            <= len("event: ") + max(_utf8_len(final) for final in self.final_events)
        ):  # short enough to name one: joined at no cost to a stream of long lines
            name, colon, value = "".join(self._pending).partition(":")
            value = value[1:] if value[:1] == " " else value
            if name == "event" and colon and value in self.final_events:
                return value
        return self._event_type

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        """Decode the next bytes of the body and return the events they complete.

        Args:
            chunk: the next bytes, of any length (empty is fine).

        Returns:
            The events dispatched by this chunk, in stream order.

        Raises:
            StreamProtocolError: a line or an event's data passed its limit.
                None of this chunk's events are returned, the cursor and the
                reconnection time are as before the chunk, and the decoder is
                unusable from then on.
            RuntimeError: the decoder was closed, or failed earlier.
        """
        if self._finished is not None:
            raise RuntimeError(f"this SSEDecoder is {self._finished}; use a new one")
        text = self._utf8.decode(chunk)
        if not text:
            return []
        if self._at_start:
            self._at_start = False
            if text[0] == "\ufeff":
                text = text[1:]
        if self._after_cr:
            self._after_cr = False
            if text[:1] == "\n":
                text = text[1:]
        if not text:
            return []
        if text[-1] == "\r":
            self._after_cr = True
        if "\r" in text:
            if _BLANK_RUN.search(text):
                text = _BLANK_RUN.sub("\n\n", text)
            lines = _LINE_END.split(text)
        else:
            if "\n\n\n" in text:
                text = _LF_RUN.sub("\n\n", text)
            lines = text.split("\n")
        rest = lines.pop()
        saved = (self._last_event_id, self._reconnection_time)
        try:
            events = self._interpret(lines) if lines else []
            if rest:
                self._pending.append(rest)
                self._pending_bytes += _utf8_len(rest)
                if self._pending_bytes > self.max_line_bytes:
                    raise self._too_long("a line", self._pending_bytes, self.max_line_bytes)
        except StreamProtocolError:
            self._last_event_id, self._reconnection_time = saved
            self._finish("failed")
            raise
        return events

    def feed_slices(
        self, chunk: bytes, *, slice_bytes: int = FEED_SLICE_BYTES
    ) -> Iterator[list[ServerSentEvent]]:
        """Feed ``chunk`` in slices of at most ``slice_bytes``, yielding each slice's events.

        For async callers: checkpoint between the lists it yields, so that a
        huge chunk never costs more than one slice of work without a
        checkpoint. A chunk no longer than one slice is one :meth:`feed`.

        Args:
            chunk: the next bytes of the body.
            slice_bytes: the most bytes fed at once (at least 1).

        Yields:
            The events each slice dispatched (maybe empty), in stream order.

        Raises:
            StreamProtocolError, RuntimeError: as :meth:`feed`, from the slice
                that broke the rule; the events of earlier slices were
                already yielded.
        """
        if slice_bytes < 1:
            raise ValueError(f"slice_bytes must be at least 1, got {slice_bytes}")
        view = memoryview(chunk)
        for start in range(0, max(len(view), 1), slice_bytes):
            yield self.feed(bytes(view[start : start + slice_bytes]))

    def close(self) -> list[ServerSentEvent]:
        """End of stream: discard the incomplete event and the pending line (E4).

        The cursor stays at the last dispatched event. Idempotent; the decoder
        cannot be fed afterwards.

        Returns:
            Nothing (``[]``), unless the incomplete block, its pending line read
            as complete, has a type in ``final_events``: then that one event,
            dispatched as a blank line would have.
        """
        if self._finished is not None:
            return []
        events: list[ServerSentEvent] = []
        if self.final_events and (self._event_type or self._pending):
            try:
                if self._pending:
                    self._interpret([""])  # completes the pending line; dispatches nothing
                if self._event_type in self.final_events:
                    event = self._dispatch()
                    if event is not None:
                        events.append(event)
            except StreamProtocolError:
                events = []
        self._finish("closed")
        return events

    def _interpret(self, lines: list[str]) -> list[ServerSentEvent]:
        """Interpret complete lines (F1-F10), returning the events dispatched."""
        if self._pending:
            self._pending.append(lines[0])
            lines[0] = "".join(self._pending)
            self._pending.clear()
            self._pending_bytes = 0
        events: list[ServerSentEvent] = []
        # A line of at most this many characters has at most max_line_bytes bytes.
        short = self.max_line_bytes // 4
        for line in lines:
            if not line:  # F1
                event = self._dispatch()
                if event is not None:
                    events.append(event)
                continue
            if len(line) > short:  # C6, comments included
                size = _utf8_len(line)
                if size > self.max_line_bytes:
                    raise self._too_long("a line", size, self.max_line_bytes)
            if line[0] == ":":  # F2
                continue
            name, _, value = line.partition(":")  # F3, F4
            if value[:1] == " ":
                value = value[1:]
            if name == "data":  # F7
                size = self._data_bytes + _utf8_len(value) + (1 if self._data else 0)
                if size > self.max_event_bytes:
                    raise self._too_long("an event's data", size, self.max_event_bytes)
                self._data.append(value)
                self._data_bytes = size
            elif name == "event":  # F6
                self._event_type = value
            elif name == "id":  # F8
                if "\x00" not in value:
                    self._id_buffer = value
            elif name == "retry":  # F9
                self._retry(value)
            # F5, F10: any other name, including "Data" or "data ", is ignored.
        return events

    def _dispatch(self) -> ServerSentEvent | None:
        """Dispatch the event being built (E1-E3)."""
        self._last_event_id = self._id_buffer  # E1
        if not self._data and self._event_type not in self.final_events:  # E2
            self._event_type = ""
            return None
        event = ServerSentEvent(  # E3
            event=self._event_type or "message",
            data="\n".join(self._data),
            id=self._last_event_id,
        )
        self._data = []
        self._data_bytes = 0
        self._event_type = ""
        return event

    def _retry(self, value: str) -> None:
        """Apply a ``retry`` value if it is all ASCII digits (F9), clamped."""
        if not (value.isascii() and value.isdigit()):
            return  # empty, signed, spaced, or not a number at all
        digits = value.lstrip("0")
        if len(digits) > _MAX_RETRY_DIGITS:
            self._reconnection_time = MAX_RECONNECTION_TIME_MS
        else:
            self._reconnection_time = min(int(digits or "0"), MAX_RECONNECTION_TIME_MS)

    def _finish(self, why: str) -> None:
        """Drop every buffer (memory back at once) and refuse further feeds."""
        self._finished = why
        self._pending = []
        self._pending_bytes = 0
        self._data = []
        self._data_bytes = 0
        self._event_type = ""
        self._id_buffer = self._last_event_id

    @staticmethod
    def _too_long(what: str, size: int, limit: int) -> StreamProtocolError:
        return StreamProtocolError(
            f"event stream sent {what} longer than {limit} bytes ({size} bytes so far); "
            "the stream is refused"
        )
