"""The WebSocket form of the process route (docs/protocol.md §3.1, our extension).

The same path as the SSE stream, ``…/agent-sessions/{session}/process``, asked
for with a WebSocket upgrade and the same credential headers. The ASGI server
(hypercorn over sockets, the testing kit in memory) does the framing; this
module only speaks ASGI ``websocket`` messages:

1. ``websocket.connect``: the room authenticates and opens the stream exactly
   as for SSE (§2.2 steps 1-4). A refusal is answered as the same HTTP status
   and JSON body through the ASGI ``websocket.http.response`` extension, so a
   client maps it to the same outcome (410 ended, 404/405 unsupported, other
   4xx refused, 5xx dropped). A server without that extension can only close
   before accepting, which reaches the client as 403 (refused).
2. Accepted, the room sends ``{"event":"open","connection_id":…}`` and keeps
   the stream under the registry's rules (the 30 s refresh, replaced, ended);
   the server pings every heartbeat interval on its own (ASGI has no ping).
3. A client text frame ``{"event":"exit","process_connection_id":…}`` is an
   announced exit, recorded under R5's rule for the stream's own session;
   any other frame is ignored (only the first :data:`MAX_CLIENT_FRAME`
   characters of a frame are ever parsed).
4. The session ending writes ``{"event":"ended"}`` and closes (1000); a
   replaced stream closes (1000) and a room shutting down closes (1001), both
   silently; the client going away (``websocket.disconnect``) is a drop, which
   records ``process_disconnected_at`` unless an exit was recorded first.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, Final

import trio

from ._streams import WEBSOCKET_FORM
from ._wire import Reply

if TYPE_CHECKING:
    from ._room import Room
    from ._streams import ProcessStream
    from ._wire import Credentials

__all__ = ["MAX_CLIENT_FRAME", "serve_process_socket"]

logger = logging.getLogger("letagents_trio.room_server")

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

# An exit frame is under 100 characters; anything much longer is not one.
MAX_CLIENT_FRAME: Final = 1024
# WebSocket close codes (RFC 6455, section 7.4.1).
NORMAL_CLOSURE: Final = 1000
GOING_AWAY: Final = 1001
# The ASGI extension that lets an app refuse an upgrade with any HTTP answer.
HTTP_RESPONSE_EXTENSION: Final = "websocket.http.response"


async def refuse_upgrade(scope: Mapping[str, Any], send: Send, reply: Reply) -> None:
    """Answer an upgrade with ``reply`` as plain HTTP, or close it (403) if the server cannot."""
    if HTTP_RESPONSE_EXTENSION not in (scope.get("extensions") or {}):
        await send({"type": "websocket.close", "code": NORMAL_CLOSURE})
        return
    body = json.dumps(reply.body, separators=(",", ":")).encode("utf-8")
    headers = [
        (b"content-type", b"application/json; charset=utf-8"),
        (b"content-length", str(len(body)).encode("ascii")),
    ]
    headers.extend(
        (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in reply.headers.items()
    )
    await send(
        {"type": "websocket.http.response.start", "status": reply.status, "headers": headers}
    )
    await send({"type": "websocket.http.response.body", "body": body, "more_body": False})


def exit_body(text: str) -> dict[str, Any] | None:
    """The body of an exit frame, or None when ``text`` is not one."""
    if len(text) > MAX_CLIENT_FRAME:
        return None
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    if isinstance(value, dict) and value.get("event") == "exit":
        return value
    return None


async def serve_process_socket(
    room: Room,
    scope: Mapping[str, Any],
    receive: Receive,
    send: Send,
    *,
    room_id: str,
    session_id: str,
    creds: Credentials,
    drain_timeout: float,
) -> None:
    """Serve one upgrade of the process route until the stream closes.

    Args:
        room: the room.
        scope: the ASGI ``websocket`` scope.
        receive: the ASGI receive callable.
        send: the ASGI send callable.
        room_id: the room id from the path.
        session_id: the session id from the path.
        creds: the credentials from the upgrade's headers.
        drain_timeout: a frame that cannot be handed on within this long drops
            the stream (a client that stopped reading).

    Cancellation:
        A checkpoint. Cancelled (server shutdown), the stream is forgotten and
        nothing is recorded.
    """
    first = await receive()
    if first["type"] != "websocket.connect":
        return
    opened = room.open_process_stream(room_id, session_id, creds)
    if isinstance(opened, Reply):
        await refuse_upgrade(scope, send, opened)
        return
    stream: ProcessStream = opened
    await send({"type": "websocket.accept"})
    gone = False

    async def write(frame: bytes) -> None:
        with trio.move_on_after(drain_timeout) as timeout:
            await send({"type": "websocket.send", "text": frame.decode("utf-8")})
        if timeout.cancelled_caught:
            logger.info("process socket %s stalled: dropped", stream.connection_id)
            stream.close("dropped")

    async def read() -> None:
        nonlocal gone
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                gone = True
                stream.close("dropped")
                return
            text = message.get("text")
            body = exit_body(text) if isinstance(text, str) else None
            if body is not None:
                recorded = room.exit_over_socket(stream, body)
                logger.debug("exit over socket %s: recorded=%s", stream.connection_id, recorded)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        await room.run_process_stream(stream, write, WEBSOCKET_FORM)
        nursery.cancel_scope.cancel(reason="process socket closed")
    if not gone:
        code = GOING_AWAY if stream.close_mode == "shutdown" else NORMAL_CLOSURE
        await send({"type": "websocket.close", "code": code})
