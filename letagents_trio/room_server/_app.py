"""The room's HTTP face: a raw ASGI app over :class:`~._room.Room`.

Routing is a table (:func:`_routes`): a path pattern and, per method, a thin
handler that parses the query, the credentials (bearer header; session id and
token from the ``X-LetAgents-Agent-Session-*`` headers, or from the JSON body's
``agent_session_id`` / ``agent_session_token``) and the JSON body, then calls
one ``Room`` method and renders its :class:`Reply`.

Bad input never reaches the rules: a body over ``config.max_body_bytes``
answers 413 (after the rest of it was read and dropped, when that is short),
a body still arriving ``config.body_timeout`` after its headers 408, the
oldest body still arriving when ``config.max_pending_bodies`` more arrive 503
(so slow-body attackers cannot hold every file descriptor, nor lock
legitimate clients out), malformed JSON, a non-object, an integer past
Python's digit limit or a lone surrogate (but in guidelines, whose rule strips
it) 400, an unknown path 404, a known path with the wrong method 405; a write
the storage refused 507 when it is full, else 503 (``_wire.storage_refusal``:
nothing was written); and an unexpected exception is logged and answered 500
(a bug, never a reaction to input).

Room ids may contain ``/`` (``owner/repo``): each ``/``-separated segment is
percent-decoded on its own, and a pattern's ``{room+}`` takes every segment
between ``/rooms/`` and the route's fixed tail, so ``/rooms/owner/repo/messages``
is room ``owner/repo``. No two patterns end alike, so the table's order does not
matter.

The process stream (R4) is a raw ASGI response with its own nursery: one task
watches ``receive()`` for ``http.disconnect`` and closes the stream as
``"dropped"``; the other runs :meth:`Room.run_process_stream`, whose writes are
each bounded by :data:`SSE_DRAIN_TIMEOUT` (a consumer that stops reading is
dropped, as upstream destroys a stalled SSE response). Long polls get the same
disconnect watcher, so a client that goes away stops counting as delivery.

A ``websocket`` scope is the WebSocket form of the process stream (our
extension, :mod:`._websocket`): served on the process route's path only; an
upgrade with a malformed ``Sec-WebSocket-Key`` is refused with 400, and one of
any other path with 404.
"""

from __future__ import annotations

import inspect
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, Final, final
from urllib.parse import parse_qs, unquote

import attrs
import trio

from .._protocol import SESSION_ID_HEADER, SESSION_TOKEN_HEADER
from ._store_errors import StoreWriteError
from ._websocket import key_refusal, refuse_upgrade, serve_process_socket
from ._wire import Credentials, Reply, storage_refusal

if TYPE_CHECKING:
    from ._room import Room
    from ._streams import ProcessStream

__all__ = ["SSE_DRAIN_TIMEOUT", "create_app"]

logger = logging.getLogger("letagents_trio.room_server")

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# A process-stream write that cannot be handed on within this long means the
# consumer stopped reading: drop it (upstream's SSE drain timeout).
SSE_DRAIN_TIMEOUT: Final = 10.0
# A body still arriving this long after its headers is late: when too many are
# arriving, the late ones may be evicted. A client sends its body at once.
SLOW_BODY_GRACE: Final = 1.0
# A body over the limit is read to its end (and dropped) before the 413 when it
# ends within this many times the limit; a longer one is answered mid-body.
DRAIN_FACTOR: Final = 4
# Response headers of the process stream, exactly as upstream sends them (§3).
PROCESS_STREAM_HEADERS: Final = (
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    (b"connection", b"keep-alive"),
    (b"x-accel-buffering", b"no"),
)
_SESSION_ID_KEY: Final = SESSION_ID_HEADER.lower().encode("latin-1")
_SESSION_TOKEN_KEY: Final = SESSION_TOKEN_HEADER.lower().encode("latin-1")


class _BadRequest(Exception):
    def __init__(self, status: int, error: str) -> None:
        super().__init__(error)
        self.reply = Reply(status=status, body={"error": error})


async def _send_reply(send: Send, reply: Reply) -> None:
    body = json.dumps(reply.body, separators=(",", ":")).encode("utf-8")
    headers = [
        (b"content-type", b"application/json; charset=utf-8"),
        (b"cache-control", b"no-store"),
        (b"content-length", str(len(body)).encode("ascii")),
    ]
    headers.extend(
        (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in reply.headers.items()
    )
    await send({"type": "http.response.start", "status": reply.status, "headers": headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if bytes(key).lower() == name:
            return bytes(value).decode("latin-1")
    return None


@final
@attrs.define(eq=False)
class _BodyGate:
    """How request bodies are read: a size limit, a deadline, and a room-wide count.

    A body over ``limit`` answers 413, but only once the rest of it has been
    read and dropped (up to ``DRAIN_FACTOR`` times the limit, within the same
    deadline): answering mid-body left the server writing the answer while
    the client still wrote the body, which hypercorn logged as a
    ``BusyResourceError``.
    """

    limit: int
    timeout: float
    max_pending: int
    # The bodies arriving now, oldest first: when each began, and its read's cancel scope.
    pending: dict[int, tuple[float, trio.CancelScope]] = attrs.field(factory=dict)
    evicted: set[int] = attrs.field(factory=set)

    async def read(self, scope: Scope, receive: Receive) -> bytes:
        declared = _header(scope, b"content-length")
        drain_limit = DRAIN_FACTOR * self.limit
        # ASCII digits only: "²".isdigit() holds, but int("²") raises.
        if (
            declared is not None
            and declared.isascii()
            and declared.isdigit()
            and (len(declared) > len(str(drain_limit)) or int(declared) > drain_limit)
        ):
            raise _BadRequest(413, f"Request body is too large: at most {self.limit} bytes.")
        now = trio.current_time()
        while len(self.pending) >= self.max_pending:
            # Full: the oldest body still arriving goes, never the newcomer. A
            # client sends its body right after the headers, so the oldest is
            # an attacker's; refusing newcomers would refuse everyone. But only
            # once it is late: a process saying goodbye sends thousands of
            # exits at once, and each body follows its headers within moments.
            oldest, (began, victim) = next(iter(self.pending.items()))
            if now - began < SLOW_BODY_GRACE:
                break
            del self.pending[oldest]
            self.evicted.add(oldest)
            victim.cancel(reason="too many request bodies arriving")
        reading = trio.CancelScope(deadline=now + self.timeout)
        key = id(reading)
        self.pending[key] = (now, reading)
        try:
            with reading:
                return await self._receive(receive)
            if key in self.evicted:
                raise _BadRequest(503, "Too many request bodies are arriving; try again.")
            raise _BadRequest(408, "Request body took too long to arrive.")
        finally:
            self.pending.pop(key, None)
            self.evicted.discard(key)

    async def _receive(self, receive: Receive) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise _BadRequest(400, "Client went away.")
            chunk = bytes(message.get("body", b""))
            size += len(chunk)
            more = bool(message.get("more_body", False))
            if size > self.limit:
                if more and size <= DRAIN_FACTOR * self.limit:
                    chunks.clear()  # read the rest and drop it, then answer
                    continue
                raise _BadRequest(413, f"Request body is too large: at most {self.limit} bytes.")
            chunks.append(chunk)
            if not more:
                return b"".join(chunks)


def _parse_json(raw: bytes, *, lone_surrogates: bool = False) -> dict[str, Any]:
    """The body as a JSON object, or 400.

    Valid JSON that no rule can use is refused here too: integers past
    Python's 4,300-digit conversion limit (``ValueError``), nesting past the
    parser's depth (``RecursionError``), and lone surrogates (``"\\ud800"``
    is valid JSON, but no store, log or answer can encode the string), unless
    ``lone_surrogates``: a route whose rule removes them (the guidelines, as
    the letagents API does) takes them.
    """
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError included
        raise _BadRequest(400, "Request body must be valid JSON.") from None
    if not isinstance(value, dict):
        raise _BadRequest(400, "Request body must be a JSON object.")
    if lone_surrogates:
        return value
    if b"\\u" in raw or not raw.isascii():  # how a surrogate can get in (UTF-16 too)
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise _BadRequest(400, "Request body must not contain lone surrogates.") from None
    return value


def _credentials(scope: Scope, body: Mapping[str, Any] | None = None) -> Credentials:
    authorization = _header(scope, b"authorization")
    owner_token: str | None = None
    if authorization is not None:
        scheme, _, value = authorization.partition(" ")
        owner_token = value.strip() if scheme.lower() == "bearer" else ""
    session_id = _header(scope, _SESSION_ID_KEY)
    session_token = _header(scope, _SESSION_TOKEN_KEY)
    if body is not None:
        if session_id is None and isinstance(body.get("agent_session_id"), str):
            session_id = body["agent_session_id"]
        if session_token is None and isinstance(body.get("agent_session_token"), str):
            session_token = body["agent_session_token"]
    return Credentials(
        owner_token=owner_token, session_id=session_id or None, session_token=session_token or None
    )


def _segments(scope: Scope) -> list[str] | None:
    raw = scope.get("raw_path")
    path = bytes(raw).decode("latin-1") if raw else str(scope.get("path", ""))
    path = path.split("?", 1)[0]
    if not path.startswith("/"):
        return None
    try:
        return [unquote(part, errors="strict") for part in path[1:].split("/")]
    except UnicodeDecodeError:
        return None


async def _watch_disconnect(receive: Receive, on_disconnect: Callable[[], None]) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            on_disconnect()
            return


@final
@attrs.frozen
class _Request:
    """One matched request: the ASGI triple, the path's parameters and the body gate."""

    scope: Scope
    receive: Receive
    send: Send
    params: Mapping[str, str]
    gate: _BodyGate

    def query(self, name: str) -> str | None:
        found = parse_qs(bytes(self.scope.get("query_string", b"")).decode("latin-1"))
        return found.get(name, [None])[0]

    async def body(self, *, lone_surrogates: bool = False) -> dict[str, Any]:
        raw = await self.gate.read(self.scope, self.receive)
        return _parse_json(raw, lone_surrogates=lone_surrogates)

    def credentials(self, body: Mapping[str, Any] | None = None) -> Credentials:
        return _credentials(self.scope, body)


# A route's handler returns the reply to send, or None when it answered itself;
# a handler that never waits is a plain function.
Handler = Callable[[_Request], Awaitable[Reply | None] | Reply]
# In a route's path, ``{room+}`` is one or more non-empty segments (a room id may
# hold ``/``) and ``{name}`` exactly one segment.
_ROOM_PARAM: Final = "{room+}"


@final
@attrs.frozen
class _Route:
    """A path pattern and the handler of each method it answers."""

    path: str
    handlers: Mapping[str, Handler]

    def match(self, segments: list[str]) -> dict[str, str] | None:
        """The path's parameters if ``segments`` fit the pattern, else None."""
        pattern = self.path[1:].split("/")
        if _ROOM_PARAM in pattern:
            at = pattern.index(_ROOM_PARAM)
            head, tail = pattern[:at], pattern[at + 1 :]
            if len(segments) < len(pattern):
                return None
            room = segments[at : len(segments) - len(tail)]
            if not all(room):
                return None
            params = {"room": "/".join(room)}
            segments = segments[:at] + segments[len(segments) - len(tail) :]
            pattern = head + tail
        else:
            params = {}
        if len(segments) != len(pattern):
            return None
        for want, got in zip(pattern, segments, strict=True):
            if want.startswith("{"):
                params[want[1:-1]] = got
            elif want != got:
                return None
        return params


def _routes(room: Room) -> tuple[_Route, ...]:
    """Every route of PROTOCOL.md §2: no two patterns can match one path."""

    def me(r: _Request) -> Reply:
        return room.me(r.credentials().owner_token)

    async def register_identity(r: _Request) -> Reply:
        return room.register_agent_identity(r.credentials().owner_token, await r.body())

    def health(r: _Request) -> Reply:
        return Reply(status=200, body={"ok": True})

    async def register(r: _Request) -> Reply:
        body = await r.body()
        return await room.register(r.credentials().owner_token, r.params["room"], body)

    async def process_stream(r: _Request) -> None:
        await _serve_process_stream(room, r)

    async def exit_process(r: _Request) -> Reply:
        body = await r.body()
        return room.exit_process(r.params["room"], r.params["session"], r.credentials(body), body)

    async def disconnect(r: _Request) -> Reply:
        body = await r.body()
        return room.disconnect(r.params["room"], r.params["session"], r.credentials(body))

    def list_messages(r: _Request) -> Reply:
        return room.list_messages(
            r.params["room"], r.credentials(), after=r.query("after"), limit=r.query("limit")
        )

    async def send_message(r: _Request) -> Reply:
        body = await r.body()
        return room.send_message(r.params["room"], r.credentials(body), body)

    async def poll(r: _Request) -> Reply | None:
        return await _poll(room, r)

    def process_statistics(r: _Request) -> Reply:
        return room.process_statistics(r.params["room"], r.credentials().owner_token)

    def get_guidelines(r: _Request) -> Reply:
        return room.room_guidelines(r.params["room"], r.credentials())

    async def put_guidelines(r: _Request) -> Reply:
        # The letagents API strips a lone surrogate from guidelines and saves.
        body = await r.body(lone_surrogates=True)
        return room.set_room_guidelines(r.params["room"], r.credentials(body), body)

    async def create_task(r: _Request) -> Reply:
        body = await r.body()
        return room.create_task(r.params["room"], r.credentials(body), body)

    async def take_lease(r: _Request) -> Reply:
        body = await r.body()
        return room.take_lease(r.params["room"], r.params["task"], r.credentials(body), body)

    async def release_lease(r: _Request) -> Reply:
        body = await r.body()
        return room.release_lease(r.params["room"], r.params["lease"], r.credentials(body))

    sessions = "/rooms/{room+}/agent-sessions"
    return (
        _Route("/agents/me", {"GET": me}),
        _Route("/agents", {"POST": register_identity}),
        _Route("/health", {"GET": health}),
        _Route("/healthz", {"GET": health}),
        _Route(sessions, {"POST": register}),
        _Route(sessions + "/{session}/process", {"GET": process_stream}),
        _Route(sessions + "/{session}/process/exit", {"POST": exit_process}),
        _Route(sessions + "/{session}/disconnect", {"POST": disconnect}),
        _Route("/rooms/{room+}/messages", {"GET": list_messages, "POST": send_message}),
        _Route("/rooms/{room+}/messages/poll", {"GET": poll}),
        _Route("/rooms/{room+}/agent-guidelines", {"GET": get_guidelines, "PUT": put_guidelines}),
        _Route("/rooms/{room+}/process-statistics", {"GET": process_statistics}),
        _Route("/rooms/{room+}/tasks", {"POST": create_task}),
        _Route("/rooms/{room+}/tasks/{task}/leases", {"POST": take_lease}),
        _Route("/rooms/{room+}/leases/{lease}/release", {"POST": release_lease}),
    )


async def _serve_process_stream(room: Room, r: _Request) -> None:
    """R4: open the stream, or send the refusal; then write it until it closes."""
    opened = room.open_process_stream(r.params["room"], r.params["session"], r.credentials())
    if isinstance(opened, Reply):
        await _send_reply(r.send, opened)
        return
    stream: ProcessStream = opened
    await r.send(
        {"type": "http.response.start", "status": 200, "headers": list(PROCESS_STREAM_HEADERS)}
    )

    async def write(chunk: bytes) -> None:
        with trio.move_on_after(SSE_DRAIN_TIMEOUT) as scope:
            await r.send({"type": "http.response.body", "body": chunk, "more_body": True})
        if scope.cancelled_caught:
            logger.info("process stream %s stalled: dropped", stream.connection_id)
            stream.close("dropped")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(_watch_disconnect, r.receive, lambda: stream.close("dropped"))
        await room.run_process_stream(stream, write)
        nursery.cancel_scope.cancel(reason="process stream closed")
    await r.send({"type": "http.response.body", "body": b"", "more_body": False})


async def _poll(room: Room, r: _Request) -> Reply | None:
    """R7: the long poll, given up (nothing sent) as soon as the client goes away."""
    reply: Reply | None = None
    async with trio.open_nursery() as nursery:

        def gone() -> None:
            nursery.cancel_scope.cancel(reason="poll client went away")

        nursery.start_soon(_watch_disconnect, r.receive, gone)
        reply = await room.poll_messages(
            r.params["room"], r.credentials(), after=r.query("after"), wait_ms=r.query("timeout")
        )
        nursery.cancel_scope.cancel(reason="poll answered")
    return reply


def create_app(room: Room) -> ASGIApp:
    """Return the ASGI app that serves ``room`` (every route of PROTOCOL.md §2).

    Args:
        room: the room service.

    Returns:
        An ASGI 3 application; it also answers the lifespan protocol.
    """
    config = room.config
    gate = _BodyGate(config.max_body_bytes, config.body_timeout, config.max_pending_bodies)
    routes = _routes(room)

    async def route(scope: Scope, receive: Receive, send: Send) -> None:
        segments = _segments(scope)
        for candidate in routes:
            params = None if segments is None else candidate.match(segments)
            if params is None:
                continue
            handler = candidate.handlers.get(str(scope.get("method", "GET")).upper())
            if handler is None:
                allow = ", ".join(candidate.handlers)
                reply: Reply | None = Reply(
                    status=405, body={"error": "Method not allowed"}, headers={"Allow": allow}
                )
            else:
                answer = handler(_Request(scope, receive, send, params, gate))
                reply = await answer if inspect.isawaitable(answer) else answer
            if reply is not None:
                await _send_reply(send, reply)
            return
        await _send_reply(send, Reply(status=404, body={"error": "Not found"}))

    async def lifespan(receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                room.close_all_process_streams()
                await send({"type": "lifespan.shutdown.complete"})
                return

    process_route = next(r for r in routes if r.path.endswith("/{session}/process"))

    async def websocket(scope: Scope, receive: Receive, send: Send) -> None:
        segments = _segments(scope)
        params = None if segments is None else process_route.match(segments)
        refusal = key_refusal(scope)
        if refusal is not None or params is None:
            await receive()  # websocket.connect
            not_found = Reply(status=404, body={"error": "Not found"})
            await refuse_upgrade(scope, receive, send, refusal or not_found)
            return
        await serve_process_socket(
            room,
            scope,
            receive,
            send,
            room_id=params["room"],
            session_id=params["session"],
            creds=_credentials(scope),
            drain_timeout=SSE_DRAIN_TIMEOUT,
        )

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
            return
        if scope["type"] == "websocket":
            try:
                await websocket(scope, receive, send)
            except Exception:
                logger.exception("room socket %s failed", scope.get("path"))
            return
        if scope["type"] != "http":
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await route(scope, receive, tracking_send)
        except _BadRequest as bad:
            if not started:
                await _send_reply(tracking_send, bad.reply)
        except StoreWriteError as refused:  # logged by the store
            if not started:
                await _send_reply(tracking_send, storage_refusal(refused))
        except Exception:
            logger.exception("room route %s %s failed", scope.get("method"), scope.get("path"))
            if not started:
                await _send_reply(
                    tracking_send, Reply(status=500, body={"error": "Internal server error"})
                )

    return app
