"""The room's HTTP face: a raw ASGI app over :class:`~._room.Room`.

Every route is thin: it parses the path, the query, the credentials (bearer
header; session id and token from the ``X-LetAgents-Agent-Session-*`` headers,
or from the JSON body's ``agent_session_id`` / ``agent_session_token``), and
the JSON body, then calls one ``Room`` method and renders its :class:`Reply`.

Bad input never reaches the rules: a body over ``config.max_body_bytes``
answers 413, malformed JSON or a non-object 400, an unknown path 404, a known
path with the wrong method 405; and an unexpected exception is logged and
answered 500 (a bug, never a reaction to input).

Room ids may contain ``/`` (``owner/repo``): each ``/``-separated segment is
percent-decoded on its own, and the routes match from the end of the path, so
``/rooms/owner/repo/messages`` is room ``owner/repo``.

The process stream (R4) is a raw ASGI response with its own nursery: one task
watches ``receive()`` for ``http.disconnect`` and closes the stream as
``"dropped"``; the other runs :meth:`Room.run_process_stream`, whose writes are
each bounded by :data:`SSE_DRAIN_TIMEOUT` (a consumer that stops reading is
dropped, as upstream destroys a stalled SSE response). Long polls get the same
disconnect watcher, so a client that goes away stops counting as delivery.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import Any, Final
from urllib.parse import parse_qs, unquote

import trio

from .._protocol import SESSION_ID_HEADER, SESSION_TOKEN_HEADER
from ._room import Credentials, ProcessStream, Reply, Room

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


async def _read_body(scope: Scope, receive: Receive, limit: int) -> bytes:
    declared = _header(scope, b"content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise _BadRequest(413, "Request body is too large.")
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise _BadRequest(400, "Client went away.")
        chunk = bytes(message.get("body", b""))
        size += len(chunk)
        if size > limit:
            raise _BadRequest(413, "Request body is too large.")
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def _parse_json(raw: bytes) -> dict[str, Any]:
    if not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise _BadRequest(400, "Request body must be valid JSON.") from None
    if not isinstance(value, dict):
        raise _BadRequest(400, "Request body must be a JSON object.")
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


def create_app(room: Room) -> ASGIApp:
    """Return the ASGI app that serves ``room`` (every route of PROTOCOL.md §2).

    Args:
        room: the room service.

    Returns:
        An ASGI 3 application; it also answers the lifespan protocol.
    """
    limit = room.config.max_body_bytes

    async def process_stream(
        scope: Scope, receive: Receive, send: Send, room_id: str, session_id: str
    ) -> None:
        opened = room.open_process_stream(room_id, session_id, _credentials(scope))
        if isinstance(opened, Reply):
            await _send_reply(send, opened)
            return
        stream: ProcessStream = opened
        await send(
            {"type": "http.response.start", "status": 200, "headers": list(PROCESS_STREAM_HEADERS)}
        )

        async def write(chunk: bytes) -> None:
            with trio.move_on_after(SSE_DRAIN_TIMEOUT) as scope_:
                await send({"type": "http.response.body", "body": chunk, "more_body": True})
            if scope_.cancelled_caught:
                logger.info("process stream %s stalled: dropped", stream.connection_id)
                stream.close("dropped")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(_watch_disconnect, receive, lambda: stream.close("dropped"))
            await room.run_process_stream(stream, write)
            nursery.cancel_scope.cancel(reason="process stream closed")
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def poll(scope: Scope, receive: Receive, send: Send, room_id: str) -> None:
        query = parse_qs(bytes(scope.get("query_string", b"")).decode("latin-1"))
        reply: Reply | None = None
        async with trio.open_nursery() as nursery:

            def gone() -> None:
                nursery.cancel_scope.cancel(reason="poll client went away")

            nursery.start_soon(_watch_disconnect, receive, gone)
            reply = await room.poll_messages(
                room_id,
                _credentials(scope),
                after=query.get("after", [None])[0],
                wait_ms=query.get("timeout", [None])[0],
            )
            nursery.cancel_scope.cancel(reason="poll answered")
        if reply is not None:
            await _send_reply(send, reply)

    async def route(scope: Scope, receive: Receive, send: Send) -> None:
        method = str(scope.get("method", "GET")).upper()
        segments = _segments(scope)
        not_found = Reply(status=404, body={"error": "Not found"})
        if segments is None:
            await _send_reply(send, not_found)
            return

        def allow(*methods: str) -> Reply | None:
            if method in methods:
                return None
            return Reply(
                status=405,
                body={"error": "Method not allowed"},
                headers={"Allow": ", ".join(methods)},
            )

        async def body() -> dict[str, Any]:
            return _parse_json(await _read_body(scope, receive, limit))

        async def post(handle: Callable[[dict[str, Any]], Reply]) -> None:
            """Answer a POST route: refuse other methods, else hand the JSON body to ``handle``."""
            reply = allow("POST")
            if reply is None:
                reply = handle(await body())
            await _send_reply(send, reply)

        query = parse_qs(bytes(scope.get("query_string", b"")).decode("latin-1"))
        if segments == ["agents", "me"]:
            await _send_reply(send, allow("GET") or room.me(_credentials(scope).owner_token))
            return
        if segments == ["agents"]:
            await post(
                lambda data: room.register_agent_identity(_credentials(scope).owner_token, data)
            )
            return
        if segments in (["health"], ["healthz"]):
            await _send_reply(send, allow("GET") or Reply(status=200, body={"ok": True}))
            return
        if len(segments) < 3 or segments[0] != "rooms":
            await _send_reply(send, not_found)
            return
        parts = segments[1:]

        def room_of(suffix_len: int) -> str | None:
            head = parts[: len(parts) - suffix_len]
            if not head or any(p == "" for p in head):
                return None
            return "/".join(head)

        tail = parts[-4:]
        # /rooms/{room}/agent-sessions/{session}/process/exit
        if len(tail) == 4 and tail[0] == "agent-sessions" and tail[2:] == ["process", "exit"]:
            room_id = room_of(4)
            if room_id is not None:
                session_id = tail[1]
                rid = room_id
                await post(
                    lambda data: room.exit_process(rid, session_id, _credentials(scope, data), data)
                )
                return
        tail = parts[-3:]
        if len(tail) == 3 and tail[0] == "agent-sessions" and tail[2] in ("process", "disconnect"):
            room_id = room_of(3)
            if room_id is not None:
                if tail[2] == "process":
                    refused = allow("GET")
                    if refused is not None:
                        await _send_reply(send, refused)
                        return
                    await process_stream(scope, receive, send, room_id, tail[1])
                    return
                session_id = tail[1]
                rid = room_id
                await post(lambda data: room.disconnect(rid, session_id, _credentials(scope, data)))
                return
        if len(tail) == 3 and tail[0] == "tasks" and tail[2] == "leases":
            room_id = room_of(3)
            if room_id is not None:
                task_id = tail[1]
                rid = room_id
                await post(
                    lambda data: room.take_lease(rid, task_id, _credentials(scope, data), data)
                )
                return
        if len(tail) == 3 and tail[0] == "leases" and tail[2] == "release":
            room_id = room_of(3)
            if room_id is not None:
                lease_id = tail[1]
                rid = room_id
                await post(
                    lambda data: room.release_lease(rid, lease_id, _credentials(scope, data))
                )
                return
        if parts[-2:] == ["messages", "poll"] and room_of(2) is not None:
            room_id = room_of(2)
            assert room_id is not None
            refused = allow("GET")
            if refused is not None:
                await _send_reply(send, refused)
                return
            await poll(scope, receive, send, room_id)
            return
        last = parts[-1]
        room_id = room_of(1)
        if room_id is None:
            await _send_reply(send, not_found)
            return
        if last == "agent-sessions":
            refused = allow("POST")
            if refused is None:
                data = await body()
                refused = await room.register(_credentials(scope).owner_token, room_id, data)
            await _send_reply(send, refused)
            return
        if last == "messages":
            refused = allow("GET", "POST")
            if refused is None and method == "GET":
                refused = room.list_messages(
                    room_id,
                    _credentials(scope),
                    after=query.get("after", [None])[0],
                    limit=query.get("limit", [None])[0],
                )
            elif refused is None:
                data = await body()
                refused = room.send_message(room_id, _credentials(scope, data), data)
            await _send_reply(send, refused)
            return
        if last == "tasks":
            await post(lambda data: room.create_task(room_id, _credentials(scope, data), data))
            return
        await _send_reply(send, not_found)

    async def lifespan(receive: Receive, send: Send) -> None:
        while True:
            message = await receive()
            if message["type"] == "lifespan.startup":
                await send({"type": "lifespan.startup.complete"})
            elif message["type"] == "lifespan.shutdown":
                room.close_all_process_streams()
                await send({"type": "lifespan.shutdown.complete"})
                return

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await lifespan(receive, send)
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
        except Exception:
            logger.exception("room route %s %s failed", scope.get("method"), scope.get("path"))
            if not started:
                await _send_reply(
                    tracking_send, Reply(status=500, body={"error": "Internal server error"})
                )

    return app
