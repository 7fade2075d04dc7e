"""Shared pieces of the worker-handle tests: a fault layer, simulated processes, state seeding.

The room is always the reference room (``FakeRoom.room``). :class:`Faults` is a
small ASGI layer in front of FakeRoom's own app that adds the faults the
upstream tests inject and FakeRoom does not offer: ``/agents/me`` failing,
a registration answered by the room but its response lost, a disconnect whose
response is held, a 201 tampered with, and forced answers on ``POST
…/messages``. It records every request (method, path, trio time), including
those it answers itself.

A *process* here is what one MCP server owns: a :class:`LocalStateStore`, a
:class:`RoomClient`, a connection manager and a :class:`WorkerHandles`. Two
of them on one state file, each with its own client, are two MCP servers.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, final

import attrs
import httpx2
import trio

from letagents_trio import ConnectionManager, RoomClient, open_connection_manager
from letagents_trio._state import LocalStateStore
from letagents_trio._workers import WorkerHandles
from letagents_trio.testing._transport import StreamingASGITransport

if TYPE_CHECKING:
    from letagents_trio._chat_storage import ChatStorage
    from letagents_trio.testing import FakeRoom

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

OWNER_TOKEN: Final = "owner-test-token"
ROOM: Final = "room_shared"
OTHER_ROOM: Final = "room_other"
LOCAL_ROOM: Final = "room_local"
BEARER: Final = "unused-bearer-secret"


@final
@attrs.frozen(kw_only=True)
class Seen:
    """One request the fault layer saw."""

    time: float
    method: str
    path: str


@final
@attrs.define(eq=False)
class Faults:
    """An ASGI layer of faults in front of the FakeRoom's app.

    Attributes:
        me: how ``GET /agents/me`` fails: ``"503"``, ``"drop"`` (connection
            lost), ``"empty"`` (``{}``), or None to let the room answer.
        drop_registrations: this many 201 registration answers are lost after
            the room stored them (the client sees a reset connection).
        tamper: called with each 201 registration body, may change it in place.
        on_registration: called with each registration request body as it arrives.
        hold_disconnects: disconnects are done by the room, but their answer
            waits for ``release_disconnects``; ``disconnect_held`` is set then.
        message_reply: answer ``POST …/messages`` with this (status, body).
    """

    inner: ASGIApp
    nursery: trio.Nursery | None = None
    seen: list[Seen] = attrs.field(factory=list)
    registration_bodies: list[dict[str, Any]] = attrs.field(factory=list)
    me: str | None = None
    drop_registrations: int = 0
    tamper: Callable[[dict[str, Any]], None] | None = None
    on_registration: Callable[[dict[str, Any]], None] | None = None
    hold_disconnects: bool = False
    disconnect_held: trio.Event = attrs.field(factory=trio.Event)
    release_disconnects: trio.Event = attrs.field(factory=trio.Event)
    message_reply: tuple[int, dict[str, Any]] | None = None

    def transport(self) -> StreamingASGITransport:
        """A new transport to this layer (each client closes its own)."""
        assert self.nursery is not None
        return StreamingASGITransport(self, nursery=self.nursery)

    def requests(self, since: int = 0) -> list[str]:
        """``"METHOD path"`` of each request seen, from index ``since``."""
        return [f"{s.method} {s.path}" for s in self.seen[since:]]

    def registrations(self) -> int:
        """How many registration requests arrived."""
        return sum(
            1 for s in self.seen if s.method == "POST" and s.path.endswith("/agent-sessions")
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.inner(scope, receive, send)
            return
        method, path = str(scope["method"]), str(scope["path"])
        self.seen.append(Seen(time=trio.current_time(), method=method, path=path))
        if path == "/agents/me" and self.me is not None:
            await self._failing_me(send)
            return
        if method == "POST" and path.endswith("/agent-sessions"):
            await self._registration(scope, receive, send)
            return
        if method == "POST" and path.endswith("/disconnect") and self.hold_disconnects:
            status, headers, raw = await self._captured(scope, receive)
            self.disconnect_held.set()
            await self.release_disconnects.wait()
            await _forward(send, status, headers, raw)
            return
        if method == "POST" and path.endswith("/messages") and self.message_reply is not None:
            await _send_json(send, *self.message_reply)
            return
        await self.inner(scope, receive, send)

    async def _failing_me(self, send: Send) -> None:
        if self.me == "drop":
            raise httpx2.RemoteProtocolError("Server disconnected without sending a response.")
        if self.me == "503":
            await _send_json(send, 503, {"error": "Service unavailable"})
        else:
            await _send_json(send, 200, {})

    async def _registration(self, scope: Scope, receive: Receive, send: Send) -> None:
        first = await receive()
        body = json.loads(bytes(first.get("body", b"")) or b"{}")
        self.registration_bodies.append(body)
        if self.on_registration is not None:
            self.on_registration(body)
        status, headers, raw = await self._captured(scope, _replaying(first, receive))
        if status == 201 and self.drop_registrations > 0:
            self.drop_registrations -= 1
            raise httpx2.ReadError("Connection reset by peer")
        if status == 201 and self.tamper is not None:
            data = json.loads(raw)
            self.tamper(data)
            raw = json.dumps(data).encode()
        await _forward(send, status, headers, raw)

    async def _captured(
        self, scope: Scope, receive: Receive
    ) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """Run the room's app to the end, keeping its answer instead of sending it."""
        status = 500
        headers: list[tuple[bytes, bytes]] = []
        chunks: list[bytes] = []

        async def capture(message: Message) -> None:
            nonlocal status, headers
            if message["type"] == "http.response.start":
                status = int(message["status"])
                headers = [(bytes(k), bytes(v)) for k, v in message.get("headers", [])]
            elif message["type"] == "http.response.body":
                chunks.append(bytes(message.get("body", b"")))
            await trio.lowlevel.checkpoint()

        await self.inner(scope, receive, capture)
        return status, headers, b"".join(chunks)


def _replaying(first: Message, receive: Receive) -> Receive:
    given = False

    async def again() -> Message:
        nonlocal given
        if not given:
            given = True
            await trio.lowlevel.checkpoint()
            return first
        return await receive()

    return again


async def _forward(send: Send, status: int, headers: list[tuple[bytes, bytes]], raw: bytes) -> None:
    kept = [(k, v) for k, v in headers if k.lower() != b"content-length"]
    kept.append((b"content-length", str(len(raw)).encode()))
    await send({"type": "http.response.start", "status": status, "headers": kept})
    await send({"type": "http.response.body", "body": raw, "more_body": False})


async def _send_json(send: Send, status: int, body: dict[str, Any]) -> None:
    await _forward(
        send, status, [(b"content-type", b"application/json")], json.dumps(body).encode()
    )


@final
@attrs.frozen(kw_only=True)
class Proc:
    """One simulated MCP server process."""

    store: LocalStateStore
    client: RoomClient
    manager: ConnectionManager
    handles: WorkerHandles

    async def send(self, text: str, **target: Any) -> dict[str, Any]:
        """``send_message`` as a worker: POST …/messages inside :meth:`WorkerHandles.acting_as`."""
        async with self.handles.acting_as(**target) as session:
            answer = await self.client.call(
                "POST",
                f"/rooms/{session.room_id}/messages",
                json={"text": text},
                session=session,
            )
        assert isinstance(answer, dict)
        return answer


@asynccontextmanager
async def open_proc(
    transport: httpx2.AsyncBaseTransport | None,
    path: Path,
    *,
    api_url: str = "http://room.test",
    owner_token: str | None = OWNER_TOKEN,
    chat_storage: ChatStorage | None = None,
    owner_mode: bool = True,
) -> AsyncIterator[Proc]:
    """Open one simulated MCP server on the state file ``path``.

    ``transport=None`` uses the network (``api_url`` of a served room).
    """
    store = LocalStateStore(path)
    async with (
        RoomClient(api_url, owner_token=owner_token, transport=transport, state=store) as client,
        open_connection_manager(client, state=store, owner_mode=owner_mode) as manager,
    ):
        handles = WorkerHandles(
            client=client,
            state=store,
            manager=manager,
            chat_storage=chat_storage,
            owner_mode=owner_mode,
        )
        yield Proc(store=store, client=client, manager=manager, handles=handles)


@asynccontextmanager
async def open_faults(fake_room: FakeRoom) -> AsyncIterator[Faults]:
    """A :class:`Faults` layer over ``fake_room``; ``faults.transport()`` serves it."""
    async with trio.open_nursery() as nursery:
        faults = Faults(inner=fake_room._app, nursery=nursery)
        try:
            yield faults
        finally:
            nursery.cancel_scope.cancel(reason="fault layer closed")


async def seed_state(path: Path) -> LocalStateStore:
    """The upstream tests' starting state: the owner signed in, nothing else."""
    store = LocalStateStore(path)
    await store.save_auth(OWNER_TOKEN)
    return store


def read_bytes(path: Path) -> bytes:
    """The state file's bytes (a sync helper: async tests must not touch files directly)."""
    return path.read_bytes()


def write_text(path: Path, text: str) -> None:
    """Write a file (a sync helper, as :func:`read_bytes`)."""
    path.write_text(text, "utf-8")


def read_json(path: Path) -> dict[str, Any]:
    """The state file as JSON."""
    data = json.loads(path.read_text("utf-8"))
    assert isinstance(data, dict)
    return data
