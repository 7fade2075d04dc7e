"""Reading a request's body: a size limit, a deadline, a room-wide count, and JSON.

:class:`BodyGate` reads a body under the room's limits (413 past
``max_body_bytes``, 408 past ``body_timeout``, 503 for the oldest body still
arriving when ``max_pending_bodies`` more arrive); :func:`parse_json` makes it
a JSON object or refuses it 400. Each refusal is a :class:`BadRequest`
carrying the room's answer.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any, Final, final

import attrs
import trio

from ._wire import Reply

__all__ = ["DRAIN_FACTOR", "SLOW_BODY_GRACE", "BadRequest", "BodyGate", "header", "parse_json"]

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Scope = MutableMapping[str, Any]

# A body still arriving this long after its headers is late: when too many are
# arriving, the late ones may be evicted. A client sends its body at once.
SLOW_BODY_GRACE: Final = 1.0
# A body over the limit is read to its end (and dropped) before the 413 when it
# ends within this many times the limit; a longer one is answered mid-body.
DRAIN_FACTOR: Final = 4


class BadRequest(Exception):
    """A body the room refuses; ``reply`` is its answer."""

    def __init__(self, status: int, error: str) -> None:
        super().__init__(error)
        self.reply = Reply(status=status, body={"error": error})


def header(scope: Scope, name: bytes) -> str | None:
    """The request's header ``name`` (lower case), if sent."""
    for key, value in scope.get("headers", []):
        if bytes(key).lower() == name:
            return bytes(value).decode("latin-1")
    return None


@final
@attrs.define(eq=False)
class BodyGate:
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
        declared = header(scope, b"content-length")
        drain_limit = DRAIN_FACTOR * self.limit
        # ASCII digits only: "²".isdigit() holds, but int("²") raises.
        if (
            declared is not None
            and declared.isascii()
            and declared.isdigit()
            and (len(declared) > len(str(drain_limit)) or int(declared) > drain_limit)
        ):
            raise BadRequest(413, f"Request body is too large: at most {self.limit} bytes.")
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
                raise BadRequest(503, "Too many request bodies are arriving; try again.")
            raise BadRequest(408, "Request body took too long to arrive.")
        finally:
            self.pending.pop(key, None)
            self.evicted.discard(key)

    async def _receive(self, receive: Receive) -> bytes:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise BadRequest(400, "Client went away.")
            chunk = bytes(message.get("body", b""))
            size += len(chunk)
            more = bool(message.get("more_body", False))
            if size > self.limit:
                if more and size <= DRAIN_FACTOR * self.limit:
                    chunks.clear()  # read the rest and drop it, then answer
                    continue
                raise BadRequest(413, f"Request body is too large: at most {self.limit} bytes.")
            chunks.append(chunk)
            if not more:
                return b"".join(chunks)


def parse_json(raw: bytes, *, lone_surrogates: bool = False) -> dict[str, Any]:
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
        raise BadRequest(400, "Request body must be valid JSON.") from None
    if not isinstance(value, dict):
        raise BadRequest(400, "Request body must be a JSON object.")
    if lone_surrogates:
        return value
    if b"\\u" in raw or not raw.isascii():  # how a surrogate can get in (UTF-16 too)
        try:
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise BadRequest(400, "Request body must not contain lone surrogates.") from None
    return value
