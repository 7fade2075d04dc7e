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
it) 400, an unknown path 404 ``{"error": "Cannot GET /that/path"}``, a known
path with the wrong method 405 with the same text (Express's words for a route
it lacks: the Node client reads either as "this room has no such route",
``isMissingRouteError``); a write the storage refused 507 when it is full, else
503 (``_wire.storage_refusal``: nothing was written); and an unexpected
exception is logged and answered 500 (a bug, never a reaction to input).

Room ids may contain ``/`` (``owner/repo``): each ``/``-separated segment is
percent-decoded on its own, and a pattern's ``{room+}`` takes every segment
between ``/rooms/`` and the route's fixed tail, so ``/rooms/owner/repo/messages``
is room ``owner/repo``. A path two patterns fit (``/rooms/r/tasks/memory``:
room ``r`` and task ``memory``, or room ``r/tasks`` and its memory) takes the
first in the table; the table lists every pattern whose tail is all fixed text
before those that end in a parameter.

The process stream (R4) is a raw ASGI response with its own nursery: one task
watches ``receive()`` for ``http.disconnect`` and closes the stream as
``"dropped"``; the other runs :meth:`Room.run_process_stream`, whose writes are
each bounded by ``RoomConfig.send_timeout`` (a consumer that stops reading is
dropped, as upstream destroys a stalled SSE response). Long polls get the same
disconnect watcher, so a client that goes away stops counting as delivery.

A ``websocket`` scope is the WebSocket form of the process stream (our
extension, :mod:`._sessions._websocket`): served on the process route's path only; an
upgrade with a malformed ``Sec-WebSocket-Key`` is refused with 400, and one of
any other path with 404.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any, Final, final
from urllib.parse import parse_qs, unquote

import attrs
import trio

from .._protocol import SESSION_ID_HEADER, SESSION_TOKEN_HEADER
from ._agent_routes import agent_routes
from ._auth._device_page import decision_page, form_fields, form_page, send_page
from ._board_routes import board_routes
from ._body import BadRequest, BodyGate, header, parse_json
from ._knowledge import ATTENTION, MEMORY
from ._storage._store_errors import StoreWriteError
from ._websocket import key_refusal, refuse_upgrade, serve_process_socket
from ._wire import Credentials, Reply, storage_refusal

if TYPE_CHECKING:
    from ._room import Room
    from ._sessions._streams import ProcessStream

__all__ = ["create_app"]

logger = logging.getLogger("letagents_trio.room_server")

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

# Response headers of the process stream, exactly as upstream sends them (§3).
PROCESS_STREAM_HEADERS: Final = (
    (b"content-type", b"text/event-stream"),
    (b"cache-control", b"no-cache, no-transform"),
    (b"connection", b"keep-alive"),
    (b"x-accel-buffering", b"no"),
)
_SESSION_ID_KEY: Final = SESSION_ID_HEADER.lower().encode("latin-1")
_SESSION_TOKEN_KEY: Final = SESSION_TOKEN_HEADER.lower().encode("latin-1")


async def _send_reply(send: Send, reply: Reply) -> None:
    body = reply.body_bytes()
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


def _credentials(scope: Scope, body: Mapping[str, Any] | None = None) -> Credentials:
    authorization = header(scope, b"authorization")
    owner_token: str | None = None
    if authorization is not None:
        scheme, _, value = authorization.partition(" ")
        owner_token = value.strip() if scheme.lower() == "bearer" else ""
    session_id = header(scope, _SESSION_ID_KEY)
    session_token = header(scope, _SESSION_TOKEN_KEY)
    if body is not None:
        if session_id is None and isinstance(body.get("agent_session_id"), str):
            session_id = body["agent_session_id"]
        if session_token is None and isinstance(body.get("agent_session_token"), str):
            session_token = body["agent_session_token"]
    return Credentials(
        owner_token=owner_token, session_id=session_id or None, session_token=session_token or None
    )


# A path shown in a 404 or 405 is cut here: it is the caller's, not ours to echo at length.
_MAX_SHOWN_PATH: Final = 256


def _path(scope: Scope) -> str:
    """The request's path as sent (percent-encoded), without a query."""
    raw = scope.get("raw_path")
    return (bytes(raw).decode("latin-1") if raw else str(scope.get("path", ""))).split("?", 1)[0]


def _missing(method: str, scope: Scope) -> dict[str, str]:
    """The body for a route this room lacks, in Express's words (``Cannot GET /x``)."""
    path = _path(scope)[:_MAX_SHOWN_PATH]
    shown = method if method.isascii() and method.isalpha() and len(method) <= 16 else "REQUEST"
    return {"error": f"Cannot {shown} {path}"}


def _segments(scope: Scope) -> list[str] | None:
    path = _path(scope)
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
    gate: BodyGate

    def query(self, name: str) -> str | None:
        found = parse_qs(bytes(self.scope.get("query_string", b"")).decode("latin-1"))
        return found.get(name, [None])[0]

    async def body(self, *, lone_surrogates: bool = False) -> dict[str, Any]:
        raw = await self.gate.read(self.scope, self.receive)
        return parse_json(raw, lone_surrogates=lone_surrogates)

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
    pattern: list[str] = attrs.field(init=False, eq=False)

    @pattern.default
    def _split(self) -> list[str]:
        return self.path[1:].split("/")

    def match(self, segments: list[str]) -> dict[str, str] | None:
        """The path's parameters if ``segments`` fit the pattern, else None."""
        pattern = self.pattern
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
    """Every route of PROTOCOL.md §2, in the order that decides a path two patterns fit."""

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

    work = room.work

    def list_messages(r: _Request) -> Reply:
        return work.messages.read(
            r.params["room"],
            r.credentials(),
            after=r.query("after"),
            limit=r.query("limit"),
            before=r.query("before"),
        )

    async def send_message(r: _Request) -> Reply:
        body = await r.body()
        return work.messages.send(r.params["room"], r.credentials(body), body)

    async def poll(r: _Request) -> Reply | None:
        return await _poll(room, r)

    def process_statistics(r: _Request) -> Reply:
        return room.process_statistics(r.params["room"], r.credentials().owner_token)

    def get_guidelines(r: _Request) -> Reply:
        return work.guidelines.get(r.params["room"], r.credentials())

    async def put_guidelines(r: _Request) -> Reply:
        # The letagents API strips a lone surrogate from guidelines and saves.
        body = await r.body(lone_surrogates=True)
        return work.guidelines.put(r.params["room"], r.credentials(body), body)

    def list_tasks(r: _Request) -> Reply:
        return work.tasks.board(
            r.params["room"],
            r.credentials(),
            status=r.query("status"),
            open_only=r.query("open") == "true",
            limit=r.query("limit"),
            after=r.query("after"),
        )

    async def create_task(r: _Request) -> Reply:
        body = await r.body()
        return work.tasks.create(r.params["room"], r.credentials(body), body)

    def get_task(r: _Request) -> Reply:
        return work.tasks.get(r.params["room"], r.params["task"], r.credentials())

    async def patch_task(r: _Request) -> Reply:
        body = await r.body()
        return work.tasks.patch(r.params["room"], r.params["task"], r.credentials(body), body)

    async def lease_action(r: _Request) -> Reply:
        body = await r.body()
        return work.tasks.lease_action(
            r.params["room"], r.params["task"], r.credentials(body), body
        )

    def read_roster(r: _Request) -> Reply:
        return work.roster.read(r.params["room"], r.credentials(), limit=r.query("limit"))

    async def update_presence(r: _Request) -> Reply:
        body = await r.body()
        return work.roster.update(r.params["room"], r.credentials(body), body)

    fixed, with_parameter = board_routes(room)

    def knowledge_routes(kind: str) -> dict[str, Handler]:
        def read(r: _Request) -> Reply:
            return work.knowledge.read(r.params["room"], kind, r.credentials())

        async def post(r: _Request) -> Reply:
            body = await r.body()
            return work.knowledge.post(r.params["room"], kind, r.credentials(body), body)

        return {"GET": read, "POST": post}

    async def respond(r: _Request) -> Reply:
        body = await r.body()
        return work.knowledge.respond(
            r.params["room"], r.params["record"], r.credentials(body), body
        )

    async def create_invite_room(r: _Request) -> Reply:
        await r.body()  # read (and bound) whatever came; the route takes nothing
        return room.entry.create_invite_room(r.credentials().owner_token)

    async def join(r: _Request) -> Reply:
        await r.body()
        bearer = r.credentials().owner_token
        return room.entry.join(r.params["room"], bearer, create=r.query("create"))

    async def device_start(r: _Request) -> Reply:
        await r.body()
        return room.sign_in.start(_base_url(r.scope))

    def device_poll(r: _Request) -> Reply:
        return room.sign_in.poll(r.params["request"])

    async def device_page(r: _Request) -> None:
        await send_page(r.send, 200, form_page(r.query("user_code")))

    async def device_decide(r: _Request) -> None:
        fields = form_fields(await r.gate.read(r.scope, r.receive))
        code, decision = fields.get("user_code", "").strip(), fields.get("decision")
        if not code or decision not in ("approve", "deny"):
            await send_page(r.send, 400, form_page(code))
            return
        decided = room.sign_in.decide(code, fields.get("token"), approve=decision == "approve")
        await send_page(r.send, decided.status, decision_page(decided))

    sessions = "/rooms/{room+}/agent-sessions"
    agents_fixed, agents_parametric = agent_routes(work)
    return (
        _Route("/auth/device/start", {"POST": device_start}),
        _Route("/auth/device/poll/{request}", {"GET": device_poll}),
        _Route("/device", {"GET": device_page, "POST": device_decide}),
        _Route("/projects", {"POST": create_invite_room}),
        _Route("/agents/me", {"GET": me}),
        _Route("/agents", {"POST": register_identity}),
        _Route("/health", {"GET": health}),
        _Route("/healthz", {"GET": health}),
        _Route("/api/health", {"GET": health}),
        _Route("/rooms/{room+}/messages", {"GET": list_messages, "POST": send_message}),
        _Route("/rooms/{room+}/messages/poll", {"GET": poll}),
        _Route("/rooms/{room+}/agent-guidelines", {"GET": get_guidelines, "PUT": put_guidelines}),
        _Route("/rooms/{room+}/process-statistics", {"GET": process_statistics}),
        _Route("/rooms/{room+}/tasks", {"GET": list_tasks, "POST": create_task}),
        _Route("/rooms/{room+}/memory", knowledge_routes(MEMORY)),
        _Route("/rooms/{room+}/attention", knowledge_routes(ATTENTION)),
        _Route("/rooms/{room+}/join", {"POST": join}),
        *(_Route(path, handlers) for path, handlers in fixed),
        *(_Route(path, handlers) for path, handlers in agents_fixed),
        _Route("/rooms/{room+}/presence", {"GET": read_roster, "POST": update_presence}),
        # Patterns with a parameter after the room come last (see the module docstring).
        _Route(sessions, {"POST": register}),
        _Route(sessions + "/{session}/process", {"GET": process_stream}),
        _Route(sessions + "/{session}/process/exit", {"POST": exit_process}),
        _Route(sessions + "/{session}/disconnect", {"POST": disconnect}),
        _Route("/rooms/{room+}/tasks/{task}/lease-action", {"POST": lease_action}),
        _Route("/rooms/{room+}/attention/{record}/respond", {"POST": respond}),
        *(_Route(path, handlers) for path, handlers in with_parameter),
        _Route("/rooms/{room+}/tasks/{task}", {"GET": get_task, "PATCH": patch_task}),
        *(_Route(path, handlers) for path, handlers in agents_parametric),
    )


@final
class _RouteIndex:
    """The routes a path may match, by its last segment, in the table's order.

    A route whose pattern ends in a literal (``.../process/exit``) can only
    match a path ending in it; the few ending in a parameter may match any.
    Trying only these, in the table's order, finds the route trying every one
    finds: a request is matched against a handful of patterns instead of
    forty (and a goodbye is a thousand exits at once).
    """

    def __init__(self, routes: Sequence[_Route]) -> None:
        literals = {r.pattern[-1] for r in routes if not r.pattern[-1].startswith("{")}
        self._by_last = {
            last: [r for r in routes if r.pattern[-1] == last or r.pattern[-1].startswith("{")]
            for last in literals
        }
        self._anywhere = [r for r in routes if r.pattern[-1].startswith("{")]

    def of(self, segments: list[str] | None) -> list[_Route]:
        """The routes ``segments`` may match, in order (none for a path that is not one)."""
        if not segments:
            return []
        return self._by_last.get(segments[-1], self._anywhere)


def _base_url(scope: Scope) -> str:
    """The address the request reached this room at (its ``Host``), for links it hands out."""
    host = header(scope, b"host") or "localhost"
    return f"{scope.get('scheme', 'http')}://{host}"


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
        with trio.move_on_after(room.config.send_timeout) as scope:
            await r.send({"type": "http.response.body", "body": chunk, "more_body": True})
        if scope.cancelled_caught:
            logger.info("process stream %s stalled: dropped", stream.connection_id)
            stream.close("dropped")

    gone = False

    def dropped() -> None:
        nonlocal gone
        gone = True
        stream.close("dropped")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(_watch_disconnect, r.receive, dropped)
        await room.run_process_stream(stream, write)
        nursery.cancel_scope.cancel(reason="process stream closed")
    if not gone:  # a client that went away is written nothing more (a goodbye is 1,000 at once)
        await r.send({"type": "http.response.body", "body": b"", "more_body": False})


async def _poll(room: Room, r: _Request) -> Reply | None:
    """R7: the long poll, given up (nothing sent) as soon as the client goes away."""
    reply: Reply | None = None
    async with trio.open_nursery() as nursery:

        def gone() -> None:
            nursery.cancel_scope.cancel(reason="poll client went away")

        nursery.start_soon(_watch_disconnect, r.receive, gone)
        reply = await room.work.messages.poll(
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
    gate = BodyGate(config.max_body_bytes, config.body_timeout, config.max_pending_bodies)
    routes = _routes(room)
    candidates = _RouteIndex(routes)

    async def route(scope: Scope, receive: Receive, send: Send) -> None:
        segments = _segments(scope)
        for candidate in candidates.of(segments):
            params = None if segments is None else candidate.match(segments)
            if params is None:
                continue
            method = str(scope.get("method", "GET")).upper()
            handler = candidate.handlers.get(method)
            if handler is None:
                allow = ", ".join(candidate.handlers)
                reply: Reply | None = Reply(
                    status=405, body=_missing(method, scope), headers={"Allow": allow}
                )
            else:
                answer = handler(_Request(scope, receive, send, params, gate))
                reply = await answer if inspect.isawaitable(answer) else answer
            if reply is not None:
                await _send_reply(send, reply)
            return
        method = str(scope.get("method", "GET")).upper()
        await _send_reply(send, Reply(status=404, body=_missing(method, scope)))

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
            not_found = Reply(status=404, body=_missing("GET", scope))
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
            drain_timeout=room.config.send_timeout,
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
        except BadRequest as bad:
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
