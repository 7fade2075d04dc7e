"""FakeRoom: the reference room, in-process, with faults on demand.

A :class:`FakeRoom` is the real reference room (:mod:`letagents_trio.room_server`,
the same rules ``letagents-trio room`` serves over TCP) behind a thin ASGI
layer that can misbehave on purpose, served to httpx2 through
:class:`~letagents_trio.testing.StreamingASGITransport`. No sockets, no
threads: under ``trio.testing.MockClock(autojump_threshold=0)`` every
heartbeat, timeout and backoff happens at an exact virtual time.

What the layer adds, and nothing more (no server rule lives here):

* **Process modes**, for every session or one: ``SERVED`` (the room's own
  stream), ``UNKNOWN`` (404, a room without the route), ``REFUSED`` (401),
  ``ENDED`` (410), ``ERROR`` (503), ``SILENT`` (stream headers, then nothing)
  and ``SLOW`` (headers only after a delay, then served).
* **Drops**: :meth:`FakeRoom.drop` cuts open streams as a network failure would.
* **Exits**: every ``POST …/process/exit`` is recorded with its body and the
  room's answer; ``black_hole_exits`` swallows them without ever answering.
* **The WebSocket form** (PROTOCOL §3.1): an upgrade on the transport's
  in-memory connection is served by ``testing._websocket`` (the room pings
  every heartbeat interval, as ``letagents-trio room`` does); upgrades go
  through the same process modes, exit frames are recorded in
  :attr:`FakeRoom.exits` (``recorded`` None: the socket has no answer), and
  ``websocket = False`` makes the room refuse the upgrade with 404.
* **Rules** for any request (:meth:`FakeRoom.on`): answer it instead of the
  room, lose it before the room sees it, lose the room's answer after the room
  acted on it, hold that answer back until released, or rewrite its JSON.
* **A request log** stamped with trio's clock, with each request's JSON body,
  and :meth:`FakeRoom.wait_until` to wait (without polling) for a condition on
  what the room has seen.

Rules. ``fake_room.on(method, path)`` names the requests a rule is for; the
action called on it arms the rule and returns it. For each request, in the
order the rules were armed, the first live rule whose method and path match
acts on it and uses up one of its ``times`` (``None``: until removed); a spent
rule leaves the list. Requests no rule matches go to the room as usual (through
the process modes above). A rule never decides anything the room decides: the
room either never sees the request (``respond``, ``drop_before_commit``) or
answers it with its own rules, and only the delivery of that answer is faulty
(``drop_after_commit``, ``hold``, ``rewrite``). Those three wait for the room's
whole answer, so they are for answers that end, not for process streams. The
drops are network errors of the in-process transport; over a real server
(:attr:`FakeRoom.app` under hypercorn) they become 500s.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable, MutableMapping
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, final
from urllib.parse import unquote

import trio

from .. import _protocol
from .._client import RoomClient
from .._session import AgentSession
from .._util import Notifier
from ..room_server import MemoryStore, Room, RoomConfig, TrioClock, create_app
from ..room_server._websocket import refuse_upgrade
from ..room_server._wire import Reply
from ..workers._wire import (
    durable_registration_body,
    new_connection_token,
    new_worker_id,
    worker_agent_name,
)
from ._asgi import (
    Answer,
    ASGIApp,
    Receive,
    Send,
    bearer_token,
    capture_answer,
    json_or_none,
    read_body,
    send_answer,
    until_disconnected,
)
from ._records import CANNED_ANSWERS, ExitRecord, ProcessMode, RequestRecord
from ._rules import JSON_HEADERS, Rule, RuleBuilder, json_bytes, path_regex
from ._socket_exits import SocketExitAnswers, SocketExits
from ._transport import StreamingASGITransport

__all__ = ["FakeRoom", "open_fake_room", "register_worker"]

# The fake room's wall clock starts here (2026-01-01T00:00:00Z) plus trio time,
# so timestamps in tests are deterministic.
DEFAULT_EPOCH_MS = 1_767_225_600_000
DEFAULT_OWNER_TOKEN = "owner-test-token"
# The same owner signed in as a person (the room's admin acts only so).
DEFAULT_PERSON_TOKEN = "owner-person-test-token"
DEFAULT_OWNER_LOGIN = "owner"
DEFAULT_API_URL = "http://room.test"

_PROCESS_PATH = re.compile(
    r"^/rooms/(?P<room>.+)/agent-sessions/(?P<sid>[^/]+)/process(?P<exit>/exit)?$"
)


@final
class FakeRoom:
    """The reference room in-process, with fault injection. Make one with :func:`open_fake_room`.

    Attributes:
        room: the reference :class:`~letagents_trio.room_server.Room` behind the faults.
        transport: the in-process httpx2 transport that serves it.
        api_url: the base URL clients use (any host works; nothing is resolved).
        owner_token: the owner bearer token the room accepts.
        owner_login: the login that token belongs to.
        person_token: the bearer token of that login signed in as a person (the
            room's admin: it answers requests for input and makes the admin's
            moves on the board), when the room accepts one.
        requests: every request received, in order.
        exits: every exit announcement received, in order.
        black_hole_exits: while true, exit announcements are never answered.
        exit_delay: seconds the room takes to answer an exit announcement, as
            a remote room would (the exit is on record when it arrives).
        slow_headers: the delay of ``ProcessMode.SLOW``, in seconds.
        websocket: whether the room accepts the WebSocket upgrade (else 404).
        rooms_without_websocket: room ids whose upgrades are refused with 404.
        socket_exit_answers: what the room does with an exit frame on a
            socket: ``"answered"`` (the reference room: recorded, then
            acknowledged), ``"withheld"`` (acknowledgement offered as the
            socket opened, but the frame lost and never answered, as by a
            room that crashed), or ``"not offered"`` (recorded, no
            acknowledgement offered or sent, as by a room before they were).
    """

    def __init__(
        self,
        room: Room,
        *,
        nursery: trio.Nursery,
        api_url: str = DEFAULT_API_URL,
        owner_token: str = DEFAULT_OWNER_TOKEN,
        owner_login: str = DEFAULT_OWNER_LOGIN,
        person_token: str | None = None,
    ) -> None:
        self.room = room
        self.api_url = api_url
        self.owner_token = owner_token
        self.owner_login = owner_login
        self.person_token = person_token
        self.requests: list[RequestRecord] = []
        self.exits: list[ExitRecord] = []
        self.black_hole_exits = False
        self.exit_delay = 0.0
        self.socket_exit_answers: SocketExitAnswers = "answered"
        self.slow_headers = 30.0
        self._default_mode = ProcessMode.SERVED
        self._modes: dict[str, ProcessMode] = {}
        self._seen_sessions: set[str] = set()
        self._changed = Notifier()
        self._rules: list[Rule] = []
        self.websocket = True
        self.rooms_without_websocket: set[str] = set()
        self._inner = create_app(room)
        self.transport = StreamingASGITransport(
            self._app, nursery=nursery, websocket_ping_interval=room.config.heartbeat_interval
        )

    def __repr__(self) -> str:
        return f"<FakeRoom api_url={self.api_url!r} requests={len(self.requests)}>"

    @property
    def app(self) -> ASGIApp:
        """The ASGI app :attr:`transport` serves: log, rules, process modes, then the room.

        Serve it with hypercorn to test over real sockets. There, a rule that
        drops (``drop_before_commit``, ``drop_after_commit``) raises inside the
        app, which the server turns into a 500, not a lost connection: drops
        are faithful only on the in-process transport.
        """
        return self._app

    # --- clients and sessions ------------------------------------------------------

    def client(self, *, owner_token: str | None = None, **options: Any) -> RoomClient:
        """A :class:`~letagents_trio.RoomClient` for this room (the caller closes it).

        Its ordinary calls and its process connection's requests (over the
        lean HTTP/1.1 path) both reach this room in memory.
        """
        return RoomClient(
            self.api_url,
            owner_token=self.owner_token if owner_token is None else owner_token,
            transport=self.transport,
            opener=self.transport,
            **options,
        )

    async def add_worker(
        self,
        room_id: str = "room_shared",
        display_name: str = "Juniper",
        *,
        worker_id: str | None = None,
        process_host_id: str | None = "phost_" + "0" * 32,
    ) -> AgentSession:
        """Register a durable worker of this room's owner (see :func:`register_worker`).

        Cancellation:
            A checkpoint; cancelled, the registration may or may not have happened.
        """
        return await register_worker(
            self.room,
            owner_token=self.owner_token,
            owner_login=self.owner_login,
            room_id=room_id,
            display_name=display_name,
            worker_id=worker_id,
            process_host_id=process_host_id,
        )

    # --- rules ---------------------------------------------------------------------

    def on(self, method: str, path: str | re.Pattern[str]) -> RuleBuilder:
        """Name the requests a rule is for; an action on the result arms it.

        ``fake_room.on("GET", "/agents/me").respond(503, {"error": "down"})``
        answers the next account lookup with a 503 instead of the room.

        Args:
            method: the HTTP method, any case.
            path: the decoded path, matched whole. In a string, ``{name}``
                stands for one path segment (``"/rooms/{room}/messages"``);
                a compiled pattern is matched with ``fullmatch``.
        """
        return RuleBuilder(rules=self._rules, changed=self._changed, method=method, path=path)

    @property
    def rules(self) -> tuple[Rule, ...]:
        """The live rules, in the order they are tried."""
        return tuple(self._rules)

    def clear_rules(self) -> None:
        """Remove every rule (held answers stay held until their release)."""
        self._rules.clear()

    # --- faults --------------------------------------------------------------------

    def set_process_mode(self, mode: ProcessMode, session_id: str | None = None) -> None:
        """Answer ``GET …/process`` in ``mode``: for ``session_id``, or for every session.

        Setting the mode for every session clears the per-session ones.
        """
        if session_id is None:
            self._default_mode = mode
            self._modes.clear()
        else:
            self._modes[session_id] = mode

    def process_mode(self, session_id: str) -> ProcessMode:
        """The mode ``session_id``'s process requests are answered in."""
        return self._modes.get(session_id, self._default_mode)

    def drop(self, session_id: str | None = None) -> int:
        """Cut open process streams (of ``session_id``, or all) as a network failure would.

        The room records the disconnect, as it does when a client vanishes.
        Returns how many streams were cut.
        """
        targets = [session_id] if session_id is not None else sorted(self._seen_sessions)
        cut = 0
        for sid in targets:
            for stream in self.room.process_streams(sid):
                stream.close("dropped")
                cut += 1
        return cut

    def end(self, session_id: str) -> None:
        """End ``session_id`` at the room: its open streams get ``event: ended``."""
        self.room.end_session(session_id)

    def restart(self, *, forget: bool = False) -> None:
        """Close every process stream silently, as a room shutting down does.

        Args:
            forget: the room comes back with nothing stored, as
                ``letagents-trio room --memory`` restarted does: :attr:`room`
                becomes a new room with the same tokens, clock and config over
                an empty :class:`~letagents_trio.room_server.MemoryStore`.
        """
        self.room.close_all_process_streams()
        if forget:
            old = self.room
            self.room = Room(
                store=MemoryStore(),
                clock=old.clock,
                owner_tokens=old.owner_tokens,
                person_tokens=old.person_tokens,
                config=old.config,
            )
            self._inner = create_app(self.room)
            self._seen_sessions.clear()

    # --- observing -----------------------------------------------------------------

    def requests_to(self, method: str, path: str | re.Pattern[str]) -> list[RequestRecord]:
        """The requests received whose method and path match, as :meth:`on` matches them."""
        wanted, regex = method.upper(), path_regex(path)
        return [r for r in self.requests if r.method == wanted and regex.fullmatch(r.path)]

    def process_requests(self, session_id: str | None = None) -> list[RequestRecord]:
        """The ``GET …/process`` requests received (for ``session_id``, or all)."""
        return [
            r
            for r in self.requests
            if r.method == "GET"
            and r.path.endswith("/process")
            and (session_id is None or r.path.split("/")[-2] == session_id)
        ]

    async def wait_until(self, condition: Callable[[], bool]) -> None:
        """Wait until ``condition()`` is true; it is re-checked after each request or exit.

        Cancellation:
            A checkpoint; bound it with ``trio.fail_after`` in tests.
        """
        await self._changed.wait_until(condition)

    def _note(self) -> None:
        self._changed.notify()

    def _record_exit(self, record: ExitRecord) -> None:
        self.exits.append(record)
        self._note()

    # --- the ASGI layer ------------------------------------------------------------

    async def _app(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":
            await self._socket(scope, receive, send)
            return
        if scope["type"] != "http":
            await self._inner(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        raw_path = scope["raw_path"].decode("latin-1")
        method, path = str(scope["method"]), unquote(raw_path)
        raw, receive = await read_body(receive)
        request = RequestRecord(
            time=trio.current_time(),
            method=method,
            path=path,
            session_id=headers.get(_protocol.SESSION_ID_HEADER.lower()),
            has_session_token=bool(headers.get(_protocol.SESSION_TOKEN_HEADER.lower())),
            body=json_or_none(raw),
            bearer=bearer_token(headers.get("authorization")),
        )
        self.requests.append(request)
        self._note()
        rule = next((r for r in self._rules if r.matches(method, path)), None)
        if rule is None:
            await self._room_answers(request, raw_path, scope, receive, send)
        else:
            await rule.act(send, partial(self._captured, request, raw_path, scope, receive))

    async def _socket(self, scope: MutableMapping[str, Any], receive: Receive, send: Send) -> None:
        """The WebSocket form of the process route, through the process modes."""
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        raw_path = scope["raw_path"].decode("latin-1")
        self.requests.append(
            RequestRecord(
                time=trio.current_time(),
                method="GET",
                path=unquote(raw_path),
                session_id=headers.get(_protocol.SESSION_ID_HEADER.lower()),
                has_session_token=bool(headers.get(_protocol.SESSION_TOKEN_HEADER.lower())),
                body=None,
            )
        )
        self._note()
        match = _PROCESS_PATH.match(raw_path)
        session_id = unquote(match["sid"]) if match is not None else ""
        mode = self.process_mode(session_id)
        canned = CANNED_ANSWERS.get(mode, (404, {"error": "Not found"}))
        supported = (
            self.websocket
            and match is not None
            and not match["exit"]
            and unquote(match["room"]) not in self.rooms_without_websocket
        )
        if not supported or mode in CANNED_ANSWERS:
            await receive()
            await refuse_upgrade(scope, receive, send, Reply(status=canned[0], body=canned[1]))
            return
        self._seen_sessions.add(session_id)
        if mode is ProcessMode.SILENT:
            await receive()
            await send({"type": "websocket.accept"})
            await send({"type": "testing.websocket.mute"})
            while (await receive())["type"] != "websocket.disconnect":
                pass
            return
        if mode is ProcessMode.SLOW:
            await trio.sleep(self.slow_headers)

        exits = SocketExits(session_id, self.socket_exit_answers, self._record_exit, receive, send)
        await self._inner(scope, exits.receive, exits.send)

    async def _room_answers(
        self,
        request: RequestRecord,
        raw_path: str,
        scope: MutableMapping[str, Any],
        receive: Receive,
        send: Send,
    ) -> None:
        """What the room (through the process modes) answers, sent as it is made."""
        match = _PROCESS_PATH.match(raw_path)
        if match is None:
            await self._inner(scope, receive, send)
            return
        session_id = unquote(match["sid"])
        if match["exit"]:
            await self._exit(session_id, request, scope, receive, send)
        elif request.method == "GET":
            self._seen_sessions.add(session_id)
            await self._process(session_id, scope, receive, send)
        else:
            await self._inner(scope, receive, send)

    async def _captured(
        self,
        request: RequestRecord,
        raw_path: str,
        scope: MutableMapping[str, Any],
        receive: Receive,
    ) -> Answer:
        """Let the room answer to the end, keeping its answer instead of sending it."""
        return await capture_answer(partial(self._room_answers, request, raw_path), scope, receive)

    async def _process(
        self, session_id: str, scope: MutableMapping[str, Any], receive: Receive, send: Send
    ) -> None:
        mode = self.process_mode(session_id)
        canned = CANNED_ANSWERS.get(mode)
        if canned is not None:
            status, body = canned
            await send_answer(
                send, Answer(status=status, headers=JSON_HEADERS, body=json_bytes(body))
            )
        elif mode is ProcessMode.SILENT:
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"text/event-stream")],
                }
            )
            await send({"type": "http.response.body", "body": b"", "more_body": True})
            await until_disconnected(receive)
        else:
            if mode is ProcessMode.SLOW:
                await trio.sleep(self.slow_headers)
            await self._inner(scope, receive, send)

    async def _exit(
        self,
        session_id: str,
        request: RequestRecord,
        scope: MutableMapping[str, Any],
        receive: Receive,
        send: Send,
    ) -> None:
        body = request.body if isinstance(request.body, dict) else {}
        recorded: object = None
        if self.black_hole_exits:
            self._record_exit(
                ExitRecord(
                    time=trio.current_time(), session_id=session_id, body=body, recorded=None
                )
            )
            await until_disconnected(receive)
            return
        # The room's answer is kept until the exit is on record, as a real room
        # commits before it answers: a client that has its answer finds it here.
        answer = await capture_answer(self._inner, scope, receive)
        reply = json_or_none(answer.body)
        if isinstance(reply, dict):
            recorded = reply.get("recorded")
        self._record_exit(
            ExitRecord(
                time=trio.current_time(),
                session_id=session_id,
                body=body,
                recorded=recorded if isinstance(recorded, bool) else None,
            )
        )
        if self.exit_delay:
            await trio.sleep(self.exit_delay)
        await send_answer(send, answer)


async def register_worker(
    room: Room,
    *,
    owner_token: str,
    owner_login: str,
    room_id: str = "room_shared",
    display_name: str = "Juniper",
    worker_id: str | None = None,
    process_host_id: str | None = "phost_" + "0" * 32,
) -> AgentSession:
    """Register a durable worker in ``room`` through its own registration rules.

    The body is the one a worker handle sends (PROTOCOL §5.3), so the room
    decides the name, the session id and every evidence column. Works for a
    room served in-process or over TCP.

    Raises:
        RuntimeError: the room did not answer 201.

    Cancellation:
        A checkpoint; cancelled, the registration may or may not have happened.
    """
    worker_id = worker_id or new_worker_id()
    body = durable_registration_body(
        actor_key=f"{owner_login}/{worker_agent_name(worker_id)}",
        worker_id=worker_id,
        display_name=display_name,
        connection_token=new_connection_token(),
        process_host_id=process_host_id,
    )
    reply = await room.register(owner_token, room_id, body)
    if reply.status != 201:
        raise RuntimeError(f"the room refused the worker: {reply.status} {dict(reply.body)}")
    return AgentSession.from_json(reply.body)


@asynccontextmanager
async def open_fake_room(
    *,
    heartbeat_interval: float = _protocol.SSE_HEARTBEAT_INTERVAL,
    epoch_ms: int = DEFAULT_EPOCH_MS,
    owner_token: str = DEFAULT_OWNER_TOKEN,
    owner_login: str = DEFAULT_OWNER_LOGIN,
    person_token: str = DEFAULT_PERSON_TOKEN,
    api_url: str = DEFAULT_API_URL,
) -> AsyncIterator[FakeRoom]:
    """Open a :class:`FakeRoom` over a fresh in-memory reference room.

    Args:
        heartbeat_interval: seconds between ``: heartbeat`` comments on open streams.
        epoch_ms: the room's wall clock at trio time 0, in epoch milliseconds.
        owner_token: the owner bearer token the room accepts.
        owner_login: the login that token belongs to.
        person_token: the bearer token of that login signed in as a person.
        api_url: the base URL clients use.

    Cancellation:
        Leaving the block cancels every stream the room still serves.
    """
    room = Room(
        store=MemoryStore(),
        clock=TrioClock(epoch_ms),
        owner_tokens={owner_token: owner_login},
        person_tokens={person_token: owner_login},
        config=RoomConfig(heartbeat_interval=heartbeat_interval),
    )
    async with trio.open_nursery() as nursery:
        fake = FakeRoom(
            room,
            nursery=nursery,
            api_url=api_url,
            owner_token=owner_token,
            owner_login=owner_login,
            person_token=person_token,
        )
        try:
            yield fake
        finally:
            nursery.cancel_scope.cancel(reason="fake room closed")
