"""The WebSocket form of the process route (docs/protocol.md §3.1, our extension).

The same path as the SSE stream, ``…/agent-sessions/{session}/process``, asked
for with a WebSocket upgrade and the same credential headers. The ASGI server
(hypercorn over sockets, the testing kit in memory) does the framing; this
module only speaks ASGI ``websocket`` messages:

1. ``websocket.connect``: an upgrade whose ``Sec-WebSocket-Key`` is not the
   base64 of 16 bytes (RFC 6455 §4.2.1), or that carries two, is answered 400
   (:func:`key_refusal`). Otherwise the room authenticates and opens the
   stream exactly as for SSE (§2.2 steps 1-4). A refusal is answered as the
   same HTTP status and JSON body through the ASGI ``websocket.http.response``
   extension, so a client maps it to the same outcome (410 ended, 404/405
   unsupported, other 4xx refused, 5xx dropped). A server without that
   extension can only close before accepting, which reaches the client as 403
   (refused).
2. The room accepts with its first frame, ``{"event":"open","connection_id":…,
   "exit_ack":true}``, and keeps the stream under the registry's rules (the
   30 s refresh, replaced, ended); the server pings every heartbeat interval
   on its own (ASGI has no ping). A server that can no longer answer the
   upgrade (hypercorn, once it has refused it itself: bytes came before the
   answer) makes the stream a drop, let go at once.
3. A client text frame ``{"event":"exit","process_connection_id":…}`` is an
   announced exit, recorded under R5's rule for the stream's own session, and
   acknowledged (``exit_ack``): the room answers ``{"event":"exit_recorded",
   "process_connection_id":<the id the exit named, or null>,"recorded":<R5's
   answer>}`` and closes (1000). An exit the store could not write is not
   acknowledged: the room closes (1011) and the client's fallback, ``POST
   …/process/exit``, gets the store's answer. Any other frame is ignored (only
   the first :data:`MAX_CLIENT_FRAME` characters of a frame are ever parsed).
4. The session ending writes ``{"event":"ended"}`` and closes (1000); a
   replaced stream closes (1000) and a room shutting down closes (1001), both
   silently; the client going away (``websocket.disconnect``) is a drop, which
   records ``process_disconnected_at`` unless an exit was recorded first.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
from collections.abc import Awaitable, Callable, Mapping, MutableMapping
from typing import TYPE_CHECKING, Any, Final

import h11
import trio

from ._sessions._streams import WEBSOCKET_FORM
from ._storage._store_errors import StoreWriteError
from ._wire import Reply, storage_refusal

if TYPE_CHECKING:
    from ._room import Room
    from ._sessions._streams import ProcessStream
    from ._wire import Credentials

__all__ = ["BAD_KEY_TEXT", "MAX_CLIENT_FRAME", "key_refusal", "serve_process_socket"]

logger = logging.getLogger("letagents_trio.room_server")

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

# An exit frame is under 100 characters; anything much longer is not one.
MAX_CLIENT_FRAME: Final = 1024
# WebSocket close codes (RFC 6455, section 7.4.1).
NORMAL_CLOSURE: Final = 1000
GOING_AWAY: Final = 1001
INTERNAL_ERROR: Final = 1011
# The ASGI extension that lets an app refuse an upgrade with any HTTP answer.
HTTP_RESPONSE_EXTENSION: Final = "websocket.http.response"
# RFC 6455 §4.1: the key is a random 16-byte nonce, base64-encoded (24 characters).
KEY_BYTES: Final = 16
_KEY_CHARS: Final = 24
_KEY_HEADER: Final = b"sec-websocket-key"
# How long an app waits for the end of a connection whose upgrade the server
# is answering itself (it ends within the same read, a few ms).
SERVER_ANSWER_WAIT: Final = 5.0
# Ours: the 400 of an upgrade whose key is not one.
BAD_KEY_TEXT: Final = (
    "Sec-WebSocket-Key must be one header holding the base64 of a 16-byte nonce"
    " (RFC 6455, section 4.2.1)."
)


def key_refusal(scope: Mapping[str, Any]) -> Reply | None:
    """The 400 for an upgrade without exactly one well-formed ``Sec-WebSocket-Key``, else None.

    Hypercorn refuses a missing key itself, but answers 101 to any value.
    """
    keys = [bytes(v) for k, v in scope.get("headers", ()) if bytes(k).lower() == _KEY_HEADER]
    if len(keys) == 1 and len(keys[0]) == _KEY_CHARS:
        try:
            if len(base64.b64decode(keys[0], validate=True)) == KEY_BYTES:
                return None
        except binascii.Error:
            pass
    return Reply(status=400, body={"error": BAD_KEY_TEXT})


async def _server_send(send: Send, message: Message) -> bool:
    """``send(message)``; False when the server is answering the upgrade itself.

    Hypercorn answers 400 to bytes a client sends before the upgrade's answer
    (RFC 6455 §4.1 forbids them), and lets the app's own answer reach its
    HTTP/1.1 state in the middle of that 400, which refuses it (h11's
    ``LocalProtocolError``): the client is refused, with nothing more to send
    it. The app must then wait for the connection's end (:func:`_until_gone`)
    before it returns: an app that returns without an answer is answered 500,
    which would fail in turn.
    """
    try:
        await send(message)
    except h11.LocalProtocolError:
        logger.debug("the server is answering this upgrade itself: %s not sent", message["type"])
        return False
    return True


async def _until_gone(receive: Receive) -> None:
    """Wait (at most :data:`SERVER_ANSWER_WAIT`) for ``websocket.disconnect``."""
    with trio.move_on_after(SERVER_ANSWER_WAIT):
        while (await receive())["type"] != "websocket.disconnect":
            pass


async def refuse_upgrade(
    scope: Mapping[str, Any], receive: Receive, send: Send, reply: Reply
) -> None:
    """Answer an upgrade with ``reply`` as plain HTTP, or close it (403) if the server cannot.

    Cancellation:
        A checkpoint; cancelled, part of the answer may have been sent.
    """
    if HTTP_RESPONSE_EXTENSION not in (scope.get("extensions") or {}):
        await send({"type": "websocket.close", "code": NORMAL_CLOSURE})
        return
    body = reply.body_bytes()
    headers = [
        (b"content-type", b"application/json; charset=utf-8"),
        (b"content-length", str(len(body)).encode("ascii")),
    ]
    headers.extend(
        (k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in reply.headers.items()
    )
    start = {"type": "websocket.http.response.start", "status": reply.status, "headers": headers}
    end = {"type": "websocket.http.response.body", "body": body, "more_body": False}
    if not (await _server_send(send, start) and await _server_send(send, end)):
        await _until_gone(receive)


def exit_ack(body: Mapping[str, Any], recorded: bool) -> str:
    """The frame acknowledging an exit frame: the id it named (or null), and R5's answer."""
    named = body.get("process_connection_id")
    ack = {
        "event": "exit_recorded",
        "process_connection_id": named if isinstance(named, str) and named else None,
        "recorded": recorded,
    }
    return json.dumps(ack, separators=(",", ":"))


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
    try:
        opened = room.open_process_stream(room_id, session_id, creds)
    except StoreWriteError as refused:  # logged by the store
        opened = storage_refusal(refused)
    if isinstance(opened, Reply):
        await refuse_upgrade(scope, receive, send, opened)
        return
    stream: ProcessStream = opened
    accepted = gone = False
    close_code = NORMAL_CLOSURE

    async def write(frame: bytes) -> None:
        nonlocal accepted
        with trio.move_on_after(drain_timeout) as timeout:
            # Accepted with the first frame, so that a server which can no
            # longer answer the upgrade ends the stream inside its run.
            if not accepted and not await _server_send(send, {"type": "websocket.accept"}):
                stream.close("dropped")
                return
            accepted = True
            await send({"type": "websocket.send", "text": frame.decode("utf-8")})
        if timeout.cancelled_caught:
            logger.info("process socket %s stalled: dropped", stream.connection_id)
            stream.close("dropped")

    async def read() -> None:
        nonlocal gone, close_code
        while True:
            message = await receive()
            if message["type"] == "websocket.disconnect":
                gone = True
                stream.close("dropped")
                return
            text = message.get("text")
            body = exit_body(text) if isinstance(text, str) else None
            if body is None:
                continue
            try:
                recorded = room.exit_over_socket(stream, body)
            except StoreWriteError as exc:  # the store logs it, once a minute
                logger.info(
                    "exit over socket %s not recorded: %s", stream.connection_id, exc.reason
                )
                close_code = INTERNAL_ERROR
            else:
                logger.debug("exit over socket %s: recorded=%s", stream.connection_id, recorded)
                await write(exit_ack(body, recorded).encode("utf-8"))
            # The client is leaving: a drop, recorded only if no exit was.
            stream.close("dropped")
            return

    async with trio.open_nursery() as nursery:
        nursery.start_soon(read)
        await room.run_process_stream(stream, write, WEBSOCKET_FORM)
        nursery.cancel_scope.cancel(reason="process socket closed")
    if not accepted and not gone:
        await _until_gone(receive)  # the server answered the upgrade itself
    elif not gone:
        code = GOING_AWAY if stream.close_mode == "shutdown" else close_code
        await send({"type": "websocket.close", "code": code})
