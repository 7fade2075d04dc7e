"""The kept-alive connections of exit announcements (``letagents_trio._http._pool``).

In memory, under the mock clock: a scripted room answers each request on each
connection as the test says (an answer, a close, or silence).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from functools import partial
from typing import Literal

import attrs
import h11
import pytest
import trio
import trio.testing

from letagents_trio import AgentSession, ApiError, RoomClient, RoomUnreachable
from letagents_trio._http import Answer, HTTPFailure, Origin
from letagents_trio._http._pool import KeepAlivePool
from letagents_trio._http._request import request_bytes

ORIGIN = Origin("http", "room.test", 80)
OK = (
    b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 17\r\n\r\n"
    b'{"recorded":true}'
)
CLOSING = b'HTTP/1.1 200 OK\r\nContent-Length: 17\r\nConnection: close\r\n\r\n{"recorded":true}'

# An answer to send; or close without one; or never answer; or half an answer, then close.
Action = bytes | Literal["close", "silence", "half"]


def exit_request(n: int = 1) -> bytes:
    return request_bytes(ORIGIN, f"/rooms/r/agent-sessions/s{n}/process/exit", "POST", [], b"{}")


@attrs.define
class ScriptedRoom:
    """An opener whose connections are served by ``script(connection, request)``."""

    script: Callable[[int, int], Action] = lambda connection, request: OK
    nursery: trio.Nursery | None = None
    opened: int = 0
    # (connection, request, target) of every request the room read.
    seen: list[tuple[int, int, str]] = attrs.field(factory=list)
    # The fields and body of every request the room read.
    requests: list[tuple[dict[str, str], bytes]] = attrs.field(factory=list)
    # Connections the room saw closed by the client.
    closed: list[int] = attrs.field(factory=list)

    async def open_stream(self, origin: Origin) -> trio.abc.Stream:
        assert origin == ORIGIN
        assert self.nursery is not None
        ours, theirs = trio.testing.memory_stream_pair()
        number = self.opened
        self.opened += 1
        self.nursery.start_soon(self._serve, number, theirs)
        await trio.lowlevel.checkpoint()
        return ours

    async def _serve(self, number: int, stream: trio.abc.Stream) -> None:
        conn = h11.Connection(h11.SERVER)
        request = 0
        fields: dict[str, str] = {}
        body = b""
        try:
            while True:
                event = conn.next_event()
                if event is h11.NEED_DATA:
                    data = await stream.receive_some(65536)
                    if not data:
                        self.closed.append(number)
                        return
                    conn.receive_data(bytes(data))
                elif type(event) is h11.Request:
                    self.seen.append((number, request, event.target.decode()))
                    fields = {k.decode(): v.decode() for k, v in event.headers}
                    fields[":method"] = event.method.decode()
                    body = b""
                elif type(event) is h11.Data:
                    body += event.data
                elif type(event) is h11.EndOfMessage:
                    self.requests.append((fields, body))
                    action = self.script(number, request)
                    request += 1
                    if action == "half":
                        await stream.send_all(OK[:20])
                        action = "close"
                    if action == "close":
                        await stream.aclose()
                        return
                    if action == "silence":
                        # No answer; what the client does next is only noted.
                        while await stream.receive_some(65536):
                            pass
                        self.closed.append(number)
                        return
                    assert isinstance(action, bytes)
                    await stream.send_all(action)
                    conn = h11.Connection(h11.SERVER)  # the next request starts afresh
        except trio.BrokenResourceError:
            self.closed.append(number)


@pytest.fixture
async def room(nursery: trio.Nursery) -> ScriptedRoom:
    return ScriptedRoom(nursery=nursery)


def pool_for(room: ScriptedRoom, *, keep: int = 8) -> KeepAlivePool:
    return KeepAlivePool(room, ORIGIN, keep=keep)


async def exchange(pool: KeepAlivePool, n: int = 1, *, max_body: int = 1024) -> Answer:
    return await pool.exchange(exit_request(n), max_body=max_body)


async def test_an_answered_connection_serves_the_next_request(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    pool = pool_for(room)
    first = await exchange(pool, 1)
    second = await exchange(pool, 2)
    assert (
        first
        == second
        == Answer(
            200,
            ((b"content-type", b"application/json"), (b"content-length", b"17")),
            b'{"recorded":true}',
        )
    )
    assert first.header("Content-Type") == "application/json"
    assert first.header("Retry-After") is None
    assert room.opened == 1
    assert [(c, r) for c, r, _ in room.seen] == [(0, 0), (0, 1)]


async def test_requests_asked_at_once_each_have_a_connection_and_none_waits_behind_another(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    """A room that never answers the first must not hold back the second (no pipelining)."""
    room.script = lambda connection, request: "silence" if connection == 0 else OK
    pool = pool_for(room)
    answers: list[Answer] = []

    async def ask(n: int) -> None:
        answers.append(await exchange(pool, n))

    with trio.move_on_after(5) as scope:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask, 1)
            await trio.testing.wait_all_tasks_blocked()
            await ask(2)
            await trio.sleep_forever()
    assert scope.cancelled_caught
    assert [a.status for a in answers] == [200]
    assert room.opened == 2
    assert sorted(c for c, _, _ in room.seen) == [0, 1]


async def test_a_connection_the_room_closed_while_idle_is_replaced_once(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    room.script = lambda connection, request: "close" if (connection, request) == (0, 1) else OK
    pool = pool_for(room)
    await exchange(pool, 1)
    answer = await exchange(pool, 2)
    assert answer.status == 200
    assert room.opened == 2
    assert [(c, r, t.split("/")[4]) for c, r, t in room.seen] == [
        (0, 0, "s1"),
        (0, 1, "s2"),
        (1, 0, "s2"),
    ]


async def test_a_request_that_fails_on_a_new_connection_fails(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    room.script = lambda connection, request: "close"
    pool = pool_for(room)
    with pytest.raises(HTTPFailure, match="RemoteProtocolError"):
        await exchange(pool)
    assert room.opened == 1


async def test_a_kept_alive_connection_that_fails_again_on_the_new_one_fails(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    room.script = lambda connection, request: OK if connection == 0 and request == 0 else "close"
    pool = pool_for(room)
    await exchange(pool, 1)
    with pytest.raises(HTTPFailure):
        await exchange(pool, 2)
    assert room.opened == 2


async def test_a_connection_the_room_says_it_closes_is_not_kept(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    room.script = lambda connection, request: CLOSING
    pool = pool_for(room)
    await exchange(pool, 1)
    await exchange(pool, 2)
    assert room.opened == 2
    await trio.testing.wait_all_tasks_blocked()
    assert room.closed == [0, 1]


async def test_no_more_than_keep_connections_stay_idle(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    pool = pool_for(room, keep=2)
    async with trio.open_nursery() as nursery:
        for n in range(4):
            nursery.start_soon(exchange, pool, n)
    assert room.opened == 4
    await trio.testing.wait_all_tasks_blocked()
    assert len(room.closed) == 2
    assert repr(pool) == "<KeepAlivePool room.test idle=2>"


async def test_an_answer_over_the_cap_fails_and_closes_its_connection(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    big = b"HTTP/1.1 200 OK\r\nContent-Length: 2000\r\n\r\n" + b"x" * 2000
    room.script = lambda connection, request: big if connection == 0 else OK
    pool = pool_for(room)
    with pytest.raises(HTTPFailure, match=r"^BodyTooLarge$"):
        await exchange(pool, 1, max_body=1024)
    await exchange(pool, 2)
    assert room.opened == 2


async def test_an_answer_of_exactly_the_cap_is_read(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    exact = b"HTTP/1.1 200 OK\r\nContent-Length: 1024\r\n\r\n" + b"x" * 1024
    room.script = lambda connection, request: exact
    pool = pool_for(room)
    assert (await exchange(pool, max_body=1024)).body == b"x" * 1024


async def test_a_cancelled_exchange_closes_its_connection(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    room.script = lambda connection, request: "silence" if connection == 0 else OK
    pool = pool_for(room)
    with trio.move_on_after(1):
        await exchange(pool, 1)
    await trio.testing.wait_all_tasks_blocked()
    assert room.closed == [0]
    await exchange(pool, 2)
    assert room.opened == 2


async def test_a_closed_pool_closes_its_idle_connections_and_takes_no_more(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    pool = pool_for(room)
    await exchange(pool, 1)
    await pool.aclose()
    await trio.testing.wait_all_tasks_blocked()
    assert room.closed == [0]
    with pytest.raises(HTTPFailure, match=r"^the pool is closed$"):
        await exchange(pool, 2)


async def test_the_request_goes_out_as_serialized_in_origin_form(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    pool = pool_for(room)
    await exchange(pool, 1)
    [(fields, body)] = room.requests
    assert room.seen == [(0, 0, "/rooms/r/agent-sessions/s1/process/exit")]
    assert (fields[":method"], fields["host"], fields["content-length"], body) == (
        "POST",
        "room.test",
        "2",
        b"{}",
    )


async def test_an_informational_answer_is_skipped(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    room.script = lambda connection, request: b"HTTP/1.1 100 Continue\r\n\r\n" + OK
    pool = pool_for(room)
    assert (await exchange(pool)).status == 200


async def test_a_pool_that_keeps_none_closes_every_connection_once_answered(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    pool = pool_for(room, keep=0)
    await exchange(pool, 1)
    await exchange(pool, 2)
    await trio.testing.wait_all_tasks_blocked()
    assert room.opened == 2
    assert room.closed == [0, 1]


async def test_a_kept_alive_connection_broken_mid_answer_fails_the_request(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    """Bytes of an answer came: the room had the request. Only an idle close is retried."""
    room.script = lambda connection, request: OK if request == 0 else "half"
    pool = pool_for(room)
    await exchange(pool, 1)
    with pytest.raises(HTTPFailure, match=r"^RemoteProtocolError$"):
        await exchange(pool, 2)
    assert room.opened == 1


async def test_a_head_up_to_the_lean_paths_cap_is_read(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    """The same 64 KiB cap on a response head as the lean path's, not h11's 16 KiB
    (which applies while the head is still arriving: here 4 KiB at a time)."""
    big_head = b"HTTP/1.1 200 OK\r\nX-Filler: " + b"f" * 30_000 + b"\r\nContent-Length: 2\r\n\r\n{}"
    room.script = lambda connection, request: big_head

    class Trickling:
        async def open_stream(self, origin: Origin) -> trio.abc.Stream:
            stream = await room.open_stream(origin)
            assert isinstance(stream, trio.StapledStream)
            receive = stream.receive_stream
            assert isinstance(receive, trio.testing.MemoryReceiveStream)
            receive.receive_some_hook = None
            original = receive.receive_some

            async def small(max_bytes: int | None = None) -> bytes | bytearray:
                return await original(4096)

            receive.receive_some = small  # type: ignore[method-assign, assignment]
            return stream

    pool = KeepAlivePool(Trickling(), ORIGIN)
    assert (await exchange(pool)).body == b"{}"


async def test_an_opener_that_fails_is_an_http_failure(
    autojump_clock: trio.testing.MockClock,
) -> None:
    class Refusing:
        async def open_stream(self, origin: Origin) -> trio.abc.Stream:
            await trio.lowlevel.checkpoint()
            raise ConnectionRefusedError(111, "refused")

    pool = KeepAlivePool(Refusing(), ORIGIN)
    with pytest.raises(HTTPFailure, match=r"^ConnectionRefusedError$"):
        await exchange(pool)


async def test_a_stream_only_aclose_can_close_is_closed_forcefully(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    closed: list[str] = []

    class Wrapped(trio.abc.Stream):
        """Not a socket nor a memory stream: close_now cannot close it."""

        def __init__(self, inner: trio.abc.Stream) -> None:
            self.inner = inner

        async def send_all(self, data: bytes | bytearray | memoryview) -> None:
            await self.inner.send_all(data)

        async def wait_send_all_might_not_block(self) -> None:
            await self.inner.wait_send_all_might_not_block()

        async def send_eof(self) -> None:  # pragma: no cover - not used
            raise NotImplementedError

        async def receive_some(self, max_bytes: int | None = None) -> bytes:
            return bytes(await self.inner.receive_some(max_bytes))

        async def aclose(self) -> None:
            closed.append("aclose")
            await self.inner.aclose()

    class WrappingOpener:
        async def open_stream(self, origin: Origin) -> trio.abc.Stream:
            return Wrapped(await room.open_stream(origin))

    room.script = lambda connection, request: CLOSING if request == 0 else "close"
    pool = KeepAlivePool(WrappingOpener(), ORIGIN)
    await exchange(pool)
    assert closed == ["aclose"]
    # And one that fails: closed all the same.
    room.script = lambda connection, request: "close"
    with pytest.raises(HTTPFailure):
        await exchange(pool)
    assert closed == ["aclose", "aclose"]


def test_keep_may_not_be_negative() -> None:
    with pytest.raises(ValueError, match="keep must not be negative"):
        KeepAlivePool(ScriptedRoom(), ORIGIN, keep=-1)


# --- RoomClient's exits over the lean stack's pool ------------------------------------

SESSION = AgentSession(room_id="r", session_id="s-1", session_token="tok-secret-1")


def client_for(room: ScriptedRoom, owner: list[str]) -> RoomClient:
    return RoomClient("http://room.test", opener=room, owner_token=lambda: owner[0])


async def test_each_exit_is_made_as_it_is_sent_and_shares_the_kept_alive_connection(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    owner = ["owner-secret-1"]
    client = client_for(room, owner)
    assert await client.announce_exit(SESSION, "c-1") is True
    owner[0] = "owner-secret-2"
    other = attrs.evolve(SESSION, session_id="s-2")
    assert await client.announce_exit(other, None) is True
    assert room.opened == 1
    assert [(c, r, t) for c, r, t in room.seen] == [
        (0, 0, "/rooms/r/agent-sessions/s-1/process/exit"),
        (0, 1, "/rooms/r/agent-sessions/s-2/process/exit"),
    ]
    sent = [(fields["authorization"], json.loads(body)) for fields, body in room.requests]
    assert sent == [
        (
            "Bearer owner-secret-1",
            {
                "agent_session_id": "s-1",
                "agent_session_token": "tok-secret-1",
                "process_connection_id": "c-1",
            },
        ),
        (
            "Bearer owner-secret-2",
            {
                "agent_session_id": "s-2",
                "agent_session_token": "tok-secret-1",
                "process_connection_id": None,
            },
        ),
    ]
    await client.aclose()
    await trio.testing.wait_all_tasks_blocked()
    assert room.closed == [0]


async def test_an_exit_the_room_refuses_is_an_api_error_and_recorded_false_is_false(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    refused = b"HTTP/1.1 503 Busy\r\nRetry-After: 7\r\nContent-Length: 4\r\n\r\nbusy"
    not_recorded = b'HTTP/1.1 200 OK\r\nContent-Length: 18\r\n\r\n{"recorded":false}'
    answers = iter([refused, not_recorded])
    room.script = lambda connection, request: next(answers)
    client = client_for(room, ["owner-secret-1"])
    with pytest.raises(ApiError) as caught:
        await client.announce_exit(SESSION, "c-1")
    assert (caught.value.status, caught.value.retry_after) == (503, 7.0)
    assert await client.announce_exit(SESSION, "c-1") is False
    assert room.opened == 1
    await client.aclose()


async def test_a_credential_that_cannot_be_sent_fails_the_exit_without_showing_it(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    client = RoomClient("http://room.test", opener=room)
    bad = attrs.evolve(SESSION, session_token="tok\r\nX-Evil: 1")
    with pytest.raises(RoomUnreachable) as caught:
        await client.announce_exit(bad, "c-1")
    assert (
        str(caught.value)
        == "POST /rooms/r/agent-sessions/s-1/process/exit failed: LocalProtocolError"
    )
    assert room.opened == 0
    await client.aclose()


async def test_a_closed_client_sends_no_more_exits(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    client = client_for(room, ["owner-secret-1"])
    await client.aclose()
    with pytest.raises(RoomUnreachable, match=r"failed: the stack is closed$"):
        await client.announce_exit(SESSION, "c-1")
    assert room.opened == 0


async def test_exits_over_real_sockets_reuse_one_connection(nursery: trio.Nursery) -> None:
    """On loopback, where answers are read straight from the socket (``read_some``)."""
    room = ScriptedRoom(nursery=nursery)
    served: list[int] = []

    async def handler(stream: trio.SocketStream) -> None:
        served.append(len(served))
        await room._serve(served[-1], stream)

    [listener] = await nursery.start(partial(trio.serve_tcp, handler, 0, host="127.0.0.1"))
    port = listener.socket.getsockname()[1]

    class Loopback:
        async def open_stream(self, origin: Origin) -> trio.abc.Stream:
            return await trio.open_tcp_stream("127.0.0.1", port)

    pool = KeepAlivePool(Loopback(), ORIGIN)
    with trio.fail_after(10):
        answers = [await exchange(pool, n) for n in range(3)]
        await pool.aclose()
    assert [a.body for a in answers] == [b'{"recorded":true}'] * 3
    assert served == [0]
    assert [(c, r) for c, r, _ in room.seen] == [(0, 0), (0, 1), (0, 2)]
