"""The lean HTTP/1.1 path: one request on a connection of its own, over a trio stream.

The two requests a connection manager sends by the thousand, the long-lived
``GET …/process`` and the ``POST …/process/exit`` of the goodbye, need one
connection and one exchange each, so the machinery of a general client (a
pool and a transport per request, a timeout scope per read and write, a
cookie jar) is cost they do not need. Here a request is:

1. a stream from an :class:`Opener` for the URL's :class:`Origin`
   (:class:`~letagents_trio._http.NetworkOpener` dials TCP and TLS; the
   testing kit serves an app in memory);
2. the request written as h11 writes it (:func:`request_bytes`), then the
   answer's head read;
3. :class:`HTTP1Response` handed to the caller, who reads the body chunk by
   chunk (:meth:`~HTTP1Response.next_chunk`) and closes it: one socket close,
   no generator to unwind.

There is no timeout here at all: the holder's scope owns the answer time and
silence, the manager's shielded deadline owns the goodbye.

**Without h11, where the answer is plain.** Thousands of streams open, or
sockets upgrade, at once when a process starts, and h11 would spend on each
its request object and checks, its state machine and an event a chunk
(``docs/performance.md``, *The SSE stream read without h11*). A plain
``101`` to an upgrade (:func:`~._answer.switched_head`) and a plain head
whose body is framed by ``Content-Length`` or by chunks alone
(:func:`~._answer.framed_head`, its body read by
:mod:`~letagents_trio._http._body`) are read here. Any other answer (an
informational one first, a head that is not plain, a body that ends with
the connection) goes to an h11 connection told of the request as it was
sent, which reads its head and its body.

**Upgrades.** A request carrying ``Upgrade`` that the server answers with
``101`` switches the connection to another protocol;
:meth:`HTTP1Response.detach` then returns the raw stream, with any bytes
read past the response head put back in front (:class:`Prefixed`). The stream
still belongs to the response, which closes it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Protocol, final
from urllib.parse import urlsplit

import attrs
import h11
import trio

from .._version import __version__
from ._answer import HEAD_END, framed_head, switched_head
from ._body import BodyReader, ChunkedBody, SizedBody
from ._sockio import READ_SIZE, Prefixed, QuietReads, close_now, read_some, send_now

__all__ = [
    "MAX_HEAD_BYTES",
    "MAX_INFORMATIONAL",
    "NETWORK_ERRORS",
    "TOO_MANY_INFORMATIONAL",
    "HTTP1Response",
    "HTTPFailure",
    "Opener",
    "Origin",
    "failure_kind",
    "header_value",
    "request_bytes",
    "split_url",
    "start_request",
]

# The largest response head accepted: a room's head is well under 1 KiB.
MAX_HEAD_BYTES = 64 * 1024
# The most informational (1xx) answers accepted before a request's answer: a
# server sends one or two (100 Continue, 103 Early Hints); a flood of them
# is parsed without a checkpoint and would hold the loop.
MAX_INFORMATIONAL = 8
# The failure past them, on either path.
TOO_MANY_INFORMATIONAL = "TooManyInformational"
# Every lean request says who sends it, as httpx2 does for ordinary calls.
USER_AGENT = f"letagents-trio/{__version__}"
# What a stream's failure looks like from below: the network, TLS, or a peer
# that broke HTTP's rules. Anything else is a bug and propagates.
NETWORK_ERRORS = (OSError, trio.BrokenResourceError, trio.ClosedResourceError, h11.ProtocolError)
_DEFAULT_PORTS = {"http": 80, "https": 443}


@final
class HTTPFailure(Exception):
    """A lean request failed at the network level or on the peer's HTTP.

    The message is the type name of what failed (``ConnectionRefusedError``,
    ``RemoteProtocolError``, ``SSLCertVerificationError``): never a secret.
    """


@final
@attrs.frozen
class Origin:
    """Where a request goes: scheme, host and port (a URL without its path).

    Attributes:
        scheme: ``"http"`` or ``"https"``.
        host: a host name or an IP address (IPv6 without brackets).
        port: the TCP port.
    """

    scheme: str
    host: str
    port: int

    @property
    def authority(self) -> str:
        """``host[:port]`` as a ``Host`` header or a ``CONNECT`` target writes it."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        if self.port == _DEFAULT_PORTS.get(self.scheme):
            return host
        return f"{host}:{self.port}"


def split_url(url: str) -> tuple[Origin, str]:
    """Split an absolute ``http``/``https`` URL into its origin and its request target.

    Raises:
        ValueError: not an absolute http(s) URL.
    """
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        raise ValueError("not an absolute http or https URL")
    target = parts.path or "/"
    if parts.query:
        target = f"{target}?{parts.query}"
    port = parts.port or _DEFAULT_PORTS[scheme]
    return Origin(scheme, parts.hostname, port), target


class Opener(Protocol):
    """Opens the byte stream a lean request is written on.

    :class:`~letagents_trio._http.NetworkOpener` is the real one;
    :class:`letagents_trio.testing.StreamingASGITransport` is one in memory.
    """

    async def open_stream(self, origin: Origin) -> trio.abc.Stream:
        """Connect to ``origin`` (TLS already wrapped when it is https).

        Raises:
            OSError: (or another of the network errors) the connection failed;
                :func:`start_request` reports it as :class:`HTTPFailure`.

        Cancellation:
            A checkpoint; cancelled, nothing is left open.
        """
        ...


@final
class HTTP1Response:
    """The head of a response, and its body to read. Made by :func:`start_request`.

    Attributes:
        status: the status code.
        headers: the header fields, names lower-cased, in the order received.
    """

    def __init__(
        self,
        stream: trio.abc.Stream,
        conn: h11.Connection | None,
        status: int,
        headers: list[tuple[bytes, bytes]],
        *,
        switched: bytes | None = None,
        body: BodyReader | None = None,
    ) -> None:
        self._stream = stream
        # h11 reads the body, unless the head was read without it: ``body``
        # reads the body then, and a 101's ``switched`` holds the bytes read past it.
        self._conn = conn
        self._body = body
        self._switched = switched
        self.status = status
        self.headers = headers
        self._done = conn is None and body is None
        self._reads = QuietReads(stream)

    def __repr__(self) -> str:
        return f"<HTTP1Response status={self.status}>"

    def close_nowait(self) -> bool:
        """Close the connection now where it is a socket (under TLS or not); whether it was."""
        return close_now(self._stream)

    async def aclose(self) -> None:
        """Close the connection at once (forcefully: no TLS close_notify).

        Cancellation:
            Closes even when cancelled; a checkpoint only when the stream
            cannot be closed synchronously.
        """
        if not close_now(self._stream):
            await trio.aclose_forcefully(self._stream)

    def header(self, name: str) -> str | None:
        """The first value of header ``name`` (any case), or None."""
        return header_value(self.headers, name)

    def wire_size(self, size: int) -> int:
        """What a piece of the body of ``size`` bytes, written alone, weighs on the wire.

        Its chunk's framing when the body is chunked, and its TLS record when
        the connection is TLS (see :meth:`QuietReads.wire_size
        <letagents_trio._http._sockio.QuietReads.wire_size>`); 0 when that
        cannot be known (then nothing may be kept).
        """
        if "chunked" in (self.header("transfer-encoding") or "").lower():
            size += len(f"{size:x}\r\n\r\n")
        return self._reads.wire_size(size)

    @property
    def heard_at(self) -> float | None:
        """When the latest chunk's bytes arrived, if a quiet read found them kept; else None."""
        return self._reads.heard_at

    async def next_chunk(self, *, keep: int = 0) -> bytes:
        """The next bytes of the body as they arrive; ``b""`` once it has ended.

        ``keep``: the kernel may keep up to this many bytes on the wire (see
        :meth:`wire_size`) unread until more come or the reader's deadline
        draws near
        (:class:`~letagents_trio._http._sockio.QuietReads`); :attr:`heard_at`
        then says when they arrived.

        Raises:
            HTTPFailure: the connection broke or the peer broke HTTP's framing
                (a body cut short is one).

        Cancellation:
            A checkpoint. Cancelled, the response is no longer usable.
        """
        if self._done:
            await trio.lowlevel.checkpoint()
            return b""
        body = self._body
        if body is None:
            return await self._h11_chunk(keep)
        try:
            while True:
                data, self._done = body.take()
                if data or self._done:
                    return data
                body.receive(await self._reads.read(READ_SIZE, keep=keep))
        except NETWORK_ERRORS as exc:
            raise HTTPFailure(failure_kind(exc)) from exc

    async def _h11_chunk(self, keep: int) -> bytes:
        """:meth:`next_chunk`, the body read by h11."""
        # Every piece of the body already received, in one: a quiet read takes
        # many heartbeats at once, each its own chunk of a chunked body.
        parts: list[bytes] = []
        conn = self._conn
        assert conn is not None  # a 101 read without h11 is done from the start
        try:
            while True:
                try:
                    event = conn.next_event()
                except h11.RemoteProtocolError:
                    if parts:
                        break  # h11 raises it again on the next call
                    raise
                if event is h11.NEED_DATA:
                    if parts:
                        break
                    conn.receive_data(await self._reads.read(READ_SIZE, keep=keep))
                elif isinstance(event, h11.Data):
                    parts.append(bytes(event.data))
                elif isinstance(event, h11.EndOfMessage):
                    self._done = True
                    break
                else:
                    # A close-delimited body that the peer closed before
                    # ending is EndOfMessage; anything else here is misframed.
                    raise h11.RemoteProtocolError(f"unexpected {type(event).__name__}")
        except NETWORK_ERRORS as exc:
            raise HTTPFailure(failure_kind(exc)) from exc
        return b"".join(parts)

    async def read(self, limit: int) -> bytes:
        """The whole body, up to ``limit`` bytes.

        Raises:
            HTTPFailure: as for :meth:`next_chunk`, and when the body is
                longer than ``limit`` (``BodyTooLarge``).

        Cancellation:
            A checkpoint.
        """
        chunks: list[bytes] = []
        size = 0
        while chunk := await self.next_chunk():
            size += len(chunk)
            if size > limit:
                raise HTTPFailure("BodyTooLarge")
            chunks.append(chunk)
        return b"".join(chunks)

    def detach(self) -> trio.abc.Stream:
        """The raw stream after a ``101 Switching Protocols`` (see the module docstring).

        The stream stays owned by the response: closing the response closes it.

        Raises:
            RuntimeError: the server did not switch protocols.
        """
        if self._switched is not None:
            data = self._switched
        elif self._conn is not None and self._conn.their_state is h11.SWITCHED_PROTOCOL:
            data = bytes(self._conn.trailing_data[0])
        else:
            raise RuntimeError(f"HTTP {self.status} did not switch protocols")
        self._done = True
        return Prefixed(self._stream, data) if data else self._stream


def header_value(headers: Sequence[tuple[bytes, bytes]], name: str) -> str | None:
    """The first value of header ``name`` (any case) among h11's ``headers``, or None."""
    key = name.lower().encode("ascii")
    for field, value in headers:
        if field == key:
            return value.decode("latin-1")
    return None


# The grammar h11 checks a request against (RFC 9110), for :func:`request_bytes`:
# a method and a field name are tokens; a field value is visible characters
# with single runs of spaces or tabs inside, none at either end; a target is
# visible ASCII. re.ASCII: ``\s`` is the six ASCII white-space characters.
_TOKEN = re.compile(r"[-!#$%&'*+.^_`|~0-9a-zA-Z]+")
_FIELD_VALUE = re.compile(r"(?:[^\x00\s]+(?:[ \t]+[^\x00\s]+)*)?", re.ASCII)
_TARGET = re.compile(r"[\x21-\x7e]+")
# The fields request_bytes writes itself: the caller's may not name them.
_FRAMING = frozenset({"host", "content-length", "transfer-encoding"})


def _fields(
    origin: Origin, headers: Sequence[tuple[str, str]], body: bytes | None
) -> list[tuple[str, str]]:
    """A request's header fields: ``Host``, ``User-Agent``, ``headers``, ``Content-Length``."""
    fields = [("Host", origin.authority), ("User-Agent", USER_AGENT), *headers]
    if body is not None:
        fields.append(("Content-Length", str(len(body))))
    return fields


def request_bytes(
    origin: Origin,
    target: str,
    method: str,
    headers: Sequence[tuple[str, str]],
    body: bytes | None = None,
) -> bytes:
    """One request to ``origin`` as it goes on the wire (origin form), head and body.

    For the exits of :class:`~letagents_trio._http._pool.PipelinedPool`, made
    by the thousand within a goodbye's deadline: written here as h11 writes
    it (the same bytes: ``Host`` first, then ``User-Agent``, ``headers`` and
    ``Content-Length``), after the same checks h11 makes of the method, the
    target and every field (no line break or NUL smuggled in a value),
    without the connection and state machine h11 builds for each request.
    ``headers`` may not name the framing fields (``Host``,
    ``Content-Length``, ``Transfer-Encoding``): they are written here.

    Raises:
        h11.LocalProtocolError: a method, target or field h11 would refuse
            (or a framing field in ``headers``); its message never quotes one.
    """
    fields = _fields(origin, headers, body)
    if not (_TOKEN.fullmatch(method) and _TARGET.fullmatch(target)):
        raise h11.LocalProtocolError("illegal method or target")
    lines = [f"{method} {target} HTTP/1.1"]
    for index, (name, value) in enumerate(fields):
        if not (_TOKEN.fullmatch(name) and _FIELD_VALUE.fullmatch(value)):
            raise h11.LocalProtocolError("illegal header field")
        if 1 < index < len(fields) - (body is not None) and name.lower() in _FRAMING:
            raise h11.LocalProtocolError("a framing field among the headers")
        lines.append(f"{name}: {value}")
    lines.append("\r\n")
    try:
        head = "\r\n".join(lines).encode("ascii")
    except UnicodeEncodeError:
        # h11 refuses a text that is not ASCII (its message would quote it).
        raise h11.LocalProtocolError("a field that is not ASCII") from None
    return head + body if body else head


def failure_kind(exc: BaseException) -> str:
    """What failed, by type name: a broken TLS stream names the TLS error under it."""
    if isinstance(exc, trio.BrokenResourceError) and exc.__cause__ is not None:
        return type(exc.__cause__).__name__
    return type(exc).__name__


async def _send(stream: trio.abc.Stream, data: bytes) -> None:
    """Write ``data``: what a plain socket takes at once in one system call, the rest in turn."""
    sent = send_now(stream, data)
    if sent is None or sent < len(data):
        await stream.send_all(data[sent or 0 :])


def _tell_h11(conn: h11.Connection, request: h11.Request, body: bytes | None) -> None:
    """Tell ``conn`` of ``request`` and its ``body``, already sent: what answer to expect."""
    conn.send(request)
    if body:
        conn.send(h11.Data(data=body))
    conn.send(h11.EndOfMessage())


async def _read_head(
    stream: trio.abc.Stream, conn: h11.Connection
) -> h11.Response | h11.InformationalResponse:
    """Read the answer's head with ``conn``: a ``101``, or the final answer after any other 1xx.

    Raises:
        HTTPFailure: ``TooManyInformational`` past :data:`MAX_INFORMATIONAL`.
        h11.RemoteProtocolError: (among the network errors) the peer broke HTTP's rules.
    """
    informational = 0
    while True:
        event = conn.next_event()
        if event is h11.NEED_DATA:
            conn.receive_data(await read_some(stream, READ_SIZE))
        elif isinstance(event, h11.Response):
            return event
        elif isinstance(event, h11.InformationalResponse):
            if event.status_code == 101:
                return event
            informational += 1
            if informational > MAX_INFORMATIONAL:
                raise HTTPFailure(TOO_MANY_INFORMATIONAL)
        else:
            # ConnectionClosed before any answer: "server disconnected".
            raise h11.RemoteProtocolError(f"no response ({type(event).__name__})")


async def _exchange(
    stream: trio.abc.Stream,
    origin: Origin,
    target: str,
    method: str,
    headers: Sequence[tuple[str, str]],
    body: bytes | None,
    *,
    upgrade: bool,
) -> HTTP1Response:
    """Write the request as h11 writes it; read a plain answer's head without h11.

    A plain ``101`` (when ``upgrade``) and a plain final head whose body is
    framed by ``Content-Length`` or by chunks alone are read here
    (:func:`_plain_answer`). Any other answer (an informational one first, a
    head that is not plain, a body that ends with the connection) goes to an
    h11 connection told of the request as it was sent, which reads it and its
    body.

    Raises:
        HTTPFailure: the network failed or the peer broke HTTP's rules
            (``TooManyInformational`` past the cap; ``LocalProtocolError`` for
            a request h11 would refuse).

    Cancellation:
        A checkpoint; the stream is left unusable.
    """
    received = bytearray()
    try:
        await _send(stream, request_bytes(origin, target, method, headers, body))
        while chunk := await read_some(stream, READ_SIZE):
            received += chunk
            if HEAD_END.search(received) is None and len(received) <= MAX_HEAD_BYTES:
                continue
            answer = _plain_answer(stream, received, upgrade=upgrade, method=method)
            if answer is not None:
                return answer
            break
        conn = h11.Connection(h11.CLIENT, max_incomplete_event_size=MAX_HEAD_BYTES)
        request = h11.Request(method=method, target=target, headers=_fields(origin, headers, body))
        _tell_h11(conn, request, body)
        conn.receive_data(bytes(received))
        if not chunk:
            conn.receive_data(b"")
        head = await _read_head(stream, conn)
    except NETWORK_ERRORS as exc:
        raise HTTPFailure(failure_kind(exc)) from exc
    return HTTP1Response(stream, conn, head.status_code, list(head.headers))


def _plain_answer(
    stream: trio.abc.Stream, received: bytearray, *, upgrade: bool, method: str
) -> HTTP1Response | None:
    """The answer whose whole head ``received`` starts with, when it is read without h11.

    A plain ``101`` to an upgrade (:func:`~._answer.switched_head`: the bytes
    past it are the new protocol's), or a plain final head to any request
    but ``HEAD`` whose body is framed by a length or by chunks
    (:func:`~._answer.framed_head`: the bytes past it are its body's start);
    None for any other.
    """
    if upgrade:
        switched = switched_head(received)
        if switched is not None:
            fields, size = switched
            return HTTP1Response(stream, None, 101, fields, switched=bytes(received[size:]))
    head = framed_head(received) if method != "HEAD" else None
    if head is None:
        return None
    status, fields, length, size = head
    reader: BodyReader = ChunkedBody(MAX_HEAD_BYTES) if length is None else SizedBody(length)
    if len(received) > size:
        reader.receive(bytes(received[size:]))
    return HTTP1Response(stream, None, status, fields, body=reader)


async def start_request(
    opener: Opener,
    origin: Origin,
    target: str,
    method: str,
    headers: Sequence[tuple[str, str]],
    body: bytes | None = None,
) -> HTTP1Response:
    """Send one request on a connection of its own; return the response, body unread.

    The caller closes the response (:meth:`HTTP1Response.aclose`).

    Args:
        opener: where the connection comes from.
        origin: the origin the URL names.
        target: the path and query (``/rooms/…``).
        method: the HTTP method.
        headers: the request headers (``Host``, ``User-Agent`` and
            ``Content-Length`` are added here).
        body: the request body, if any.

    Raises:
        HTTPFailure: the connection or the exchange failed (the connection
            is closed).

    Cancellation:
        A checkpoint; cancelled, the connection is closed.
    """
    try:
        stream = await opener.open_stream(origin)
    except NETWORK_ERRORS as exc:
        raise HTTPFailure(failure_kind(exc)) from exc
    try:
        upgrade = any(name.lower() == "upgrade" and value.strip() for name, value in headers)
        return await _exchange(stream, origin, target, method, headers, body, upgrade=upgrade)
    except BaseException:
        if not close_now(stream):
            await trio.aclose_forcefully(stream)
        raise
