"""The WebSocket form of the process connection (PROTOCOL §3.1), in memory under MockClock.

The holder's timeline tests run over both transports (``tests/test_holder.py``);
these are the WebSocket's own: the connectors' options, outcomes of the
upgrade, half-open detection, each holder's exit over its socket (and the
POST when the socket cannot take it or none is open), the ``auto`` fallback,
and a mixed goodbye.
"""

from __future__ import annotations

import math
from collections.abc import AsyncIterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing

from letagents_trio import (
    AutoConnector,
    ConnectionManager,
    EventKind,
    HolderStatus,
    Outcome,
    ProcessStream,
    RoomClient,
    WebSocketConnector,
    open_connection_manager,
)
from letagents_trio._http import Origin
from letagents_trio._websocket import classify_upgrade
from letagents_trio._ws_socket import ProcessSocket
from letagents_trio.testing import FakeRoom, ProcessMode

from .events import Delegating, drain

if TYPE_CHECKING:
    from trio.testing import MockClock

    from letagents_trio import AgentSession

EXIT_PATH = "/rooms/{room}/agent-sessions/{sid}/process/exit"


def websocket_manager(client: RoomClient) -> AbstractAsyncContextManager[ConnectionManager]:
    """A connection manager whose holders hold WebSockets."""
    return open_connection_manager(client, connector=WebSocketConnector(client))


# --- the connectors' options ---------------------------------------------------------------------

CONNECTORS = [WebSocketConnector, AutoConnector]


@pytest.mark.parametrize("connector_type", CONNECTORS)
@pytest.mark.parametrize("name", ["ping_interval", "pong_timeout"])
@pytest.mark.parametrize("value", [0, -1.0, math.inf, -math.inf, math.nan])
def test_ping_and_pong_must_be_finite_and_positive(
    connector_type: type[WebSocketConnector], name: str, value: float
) -> None:
    client = RoomClient("http://room.test")
    with pytest.raises(ValueError, match=rf"^{name} must be finite and > 0, got "):
        connector_type(client, **{name: value})  # type: ignore[arg-type]


@pytest.mark.parametrize("connector_type", CONNECTORS)
@pytest.mark.parametrize("size", [1023, 0, -1])
def test_a_message_limit_under_1024_bytes_is_refused(
    connector_type: type[WebSocketConnector], size: int
) -> None:
    client = RoomClient("http://room.test")
    with pytest.raises(ValueError, match=rf"^max_message_bytes must be at least 1024, got {size}$"):
        connector_type(client, max_message_bytes=size)


@pytest.mark.parametrize("connector_type", CONNECTORS)
def test_the_smallest_options_allowed_are_taken(connector_type: type[WebSocketConnector]) -> None:
    client = RoomClient("http://room.test")
    connector = connector_type(
        client, ping_interval=0.001, pong_timeout=0.001, max_message_bytes=1024
    )
    assert repr(connector) == f"<{connector_type.__name__} api_url='http://room.test'>"


# --- the room's answers to the upgrade ------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "outcome"),
    [
        (101, None),
        (410, Outcome.ENDED),
        (404, Outcome.UNSUPPORTED),
        (405, Outcome.UNSUPPORTED),
        (200, Outcome.UNSUPPORTED),
        (401, Outcome.REFUSED),
        (403, Outcome.REFUSED),
        (400, Outcome.REFUSED),
        (500, Outcome.DROPPED),
        (503, Outcome.DROPPED),
    ],
)
def test_upgrade_answers_map_to_the_sse_outcomes(status: int, outcome: Outcome | None) -> None:
    assert classify_upgrade(status) is outcome


@pytest.mark.parametrize(
    ("mode", "outcome", "detail"),
    [
        (ProcessMode.ENDED, Outcome.ENDED, "HTTP 410"),
        (ProcessMode.UNKNOWN, Outcome.UNSUPPORTED, "HTTP 404"),
        (ProcessMode.REFUSED, Outcome.REFUSED, "HTTP 401"),
        (ProcessMode.ERROR, Outcome.DROPPED, "HTTP 503"),
    ],
)
async def test_refused_upgrades_count_as_on_sse(
    autojump_clock: MockClock,
    fake_room: FakeRoom,
    mode: ProcessMode,
    outcome: Outcome,
    detail: str,
) -> None:
    session = await fake_room.add_worker()
    fake_room.set_process_mode(mode)
    async with fake_room.client() as client:
        async with websocket_manager(client) as manager:
            with manager.subscribe(math.inf) as events:
                manager.hold(session)
                await fake_room.wait_until(lambda: len(fake_room.process_requests()) >= 1)
                await trio.testing.wait_all_tasks_blocked()
                closed = [e for e in drain(events) if e.kind is EventKind.CLOSED]
    assert [(e.time, e.outcome, e.detail) for e in closed] == [(0, outcome, detail)]


async def test_the_upgrade_goes_through_the_clients_opener(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    # One seam for both transports: the socket gets the client's connections
    # (TCP and TLS over the network; here the in-memory room).
    asked: list[Origin] = []

    class Recording:
        async def open_stream(self, origin: Origin) -> trio.abc.Stream:
            asked.append(origin)
            return await fake_room.transport.open_stream(origin)

    session = await fake_room.add_worker()
    client = RoomClient(
        fake_room.api_url,
        owner_token=fake_room.owner_token,
        transport=fake_room.transport,
        opener=Recording(),
    )
    async with client, WebSocketConnector(client).open(session) as stream:
        first = await anext(stream)
    row = fake_room.room.session(session.session_id)
    assert row is not None
    assert first.connection_id == row.process_connection_id
    assert asked == [Origin("http", "room.test", 80)]


# --- held ---------------------------------------------------------------------------------------


async def test_the_open_frame_names_the_connection_the_room_recorded(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    async with fake_room.client() as client:
        async with websocket_manager(client) as manager:
            holder = manager.hold(session)
            await holder.wait_status(HolderStatus.OPEN)
            await trio.testing.wait_all_tasks_blocked()
            row = fake_room.room.session(session.session_id)
            assert row is not None
            assert holder.connection_id == row.process_connection_id
            # Pings both ways keep it open for an hour, with no reconnect.
            await trio.sleep(3600)
            assert holder.status is HolderStatus.OPEN
            assert len(fake_room.process_requests(session.session_id)) == 1


@pytest.mark.parametrize("connector_type", CONNECTORS)
@pytest.mark.parametrize(("ping", "pong", "dead_at"), [(10, 5, 15), (2, 1, 3), (1, 0.5, 1.5)])
async def test_a_half_open_socket_is_seen_after_ping_interval_plus_pong_timeout(
    autojump_clock: MockClock,
    fake_room: FakeRoom,
    connector_type: type[WebSocketConnector],
    ping: float,
    pong: float,
    dead_at: float,
) -> None:
    session = await fake_room.add_worker()
    fake_room.set_process_mode(ProcessMode.SILENT)
    async with fake_room.client() as client:
        connector = connector_type(client, ping_interval=ping, pong_timeout=pong)
        async with open_connection_manager(client, connector=connector) as manager:
            holder = manager.hold(session)
            await holder.wait_status(HolderStatus.OPEN)
            await holder.wait_status(HolderStatus.WAITING)
            assert trio.current_time() == dead_at
            assert holder.statistics().last_outcome is Outcome.DROPPED


async def test_the_room_ending_the_session_ends_the_holder(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    async with fake_room.client() as client:
        async with websocket_manager(client) as manager:
            holder = manager.hold(session)
            await holder.wait_status(HolderStatus.OPEN)
            await trio.sleep(7)
            fake_room.end(session.session_id)
            assert await holder.wait_status(HolderStatus.ENDED) is HolderStatus.ENDED
            assert trio.current_time() == 7


# --- the exits ------------------------------------------------------------------------------------


async def test_exit_goes_over_the_socket_naming_its_connection(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    async with fake_room.client() as client:
        async with websocket_manager(client) as manager:
            holder = manager.hold(session)
            await holder.wait_status(HolderStatus.OPEN)
            await trio.sleep(2)
            connection_id = holder.connection_id
            assert connection_id is not None
            report = await manager.announce_exits()
        assert trio.current_time() == 2
    # The room acknowledged the exit over the socket: recorded, confirmed.
    assert [(a.connection_id, a.recorded, a.error, a.finished_at) for a in report] == [
        (connection_id, True, None, 2)
    ]
    assert [(e.session_id, e.body, e.time) for e in fake_room.exits] == [
        (session.session_id, {"event": "exit", "process_connection_id": connection_id}, 2)
    ]
    # No POST: the exit went over the socket, and §2.2's rule recorded it.
    assert fake_room.requests_to("POST", EXIT_PATH) == []
    row = fake_room.room.session(session.session_id)
    assert row is not None
    assert row.process_connection_id == "exited"
    assert row.ended_at is None


async def test_a_session_without_an_open_socket_posts_its_exit(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    fake_room.set_process_mode(ProcessMode.ERROR)
    async with fake_room.client() as client:
        async with websocket_manager(client) as manager:
            manager.hold(session)
            await trio.sleep(0.5)
            report = await manager.announce_exits()
    assert [(a.recorded, a.error) for a in report] == [(False, None)]
    assert [e.body.get("process_connection_id", "missing") for e in fake_room.exits] == [None]
    assert "agent_session_token" in fake_room.exits[0].body


class _NoWrites(trio.abc.Stream):
    """A stream read as ``inner`` is, whose writes fail: a socket that cannot take the exit."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        self.inner = inner

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await trio.lowlevel.checkpoint()
        raise trio.BrokenResourceError("no room for the exit")

    async def wait_send_all_might_not_block(self) -> None:
        await trio.lowlevel.checkpoint()

    async def receive_some(self, max_bytes: int | None = None) -> bytes:
        return bytes(await self.inner.receive_some(max_bytes))

    async def aclose(self) -> None:
        await self.inner.aclose()


class _Sockets(Delegating):
    """Notes every stream it opens."""

    def __init__(self, inner: WebSocketConnector) -> None:
        super().__init__(inner)
        self.opened: list[ProcessStream] = []

    @asynccontextmanager
    async def open(self, session: AgentSession) -> AsyncIterator[ProcessStream]:
        async with self.inner.open(session) as stream:
            self.opened.append(stream)
            yield stream


async def test_a_socket_that_cannot_take_the_exit_is_closed_then_the_exit_posted(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    async with fake_room.client() as client:
        connector = _Sockets(WebSocketConnector(client))
        async with open_connection_manager(client, connector=connector) as manager:
            holder = manager.hold(session)
            await holder.wait_status(HolderStatus.OPEN)
            await trio.sleep(1)
            connection_id = holder.connection_id
            [socket] = connector.opened
            assert isinstance(socket, ProcessSocket)
            socket._stream = _NoWrites(socket._stream)
            with manager.subscribe(math.inf) as events:
                report = await manager.announce_exits()
                await holder.wait_status(HolderStatus.STOPPED)
                # As over SSE: the socket closed, the holder stops (its reader
                # ends), and only then is the exit POSTed.
                assert [(e.kind, e.detail) for e in drain(events)] == [
                    (EventKind.STOPPED, "process exit"),
                    (EventKind.EXIT, "recorded"),
                ]
    assert [(a.connection_id, a.recorded, a.error) for a in report] == [(connection_id, True, None)]
    # The POST came once the room had seen the close (PROTOCOL §2.2).
    assert [(e.body["process_connection_id"], e.recorded) for e in fake_room.exits] == [
        (connection_id, True)
    ]
    assert len(fake_room.requests_to("POST", EXIT_PATH)) == 1


async def test_a_holder_leaves_over_an_in_memory_socket_with_a_task(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    """``leave_nowait`` cannot write to a stream that is not a plain socket, and touches nothing.

    So the exit then goes by ``leave``: over the socket all the same, with a
    checkpoint, and the socket is closed right after the frames are written,
    without waiting on the room's answer or the holder's unwinding.
    """
    session = await fake_room.add_worker()
    async with fake_room.client() as client:
        async with websocket_manager(client) as manager:
            holder = manager.hold(session)
            await holder.wait_status(HolderStatus.OPEN)
            await trio.sleep(1)
            connection_id = holder.connection_id
            assert connection_id is not None
            assert not holder.leave_nowait()
            await trio.sleep(1)
            assert (holder.status, fake_room.exits) == (HolderStatus.OPEN, [])
            with manager.subscribe() as events:
                with trio.fail_after(1):
                    assert await holder.leave() is True  # the room acknowledged it
                await trio.sleep(1)
                # The reader saw its socket close after the exit frame: a stop,
                # not a drop, so no CLOSED event and no new attempt.
                assert holder.status is HolderStatus.STOPPED
                assert [(e.kind, e.detail) for e in drain(events)] == [
                    (EventKind.STOPPED, "process exit")
                ]
            assert [(e.time, e.body) for e in fake_room.exits] == [
                (2, {"event": "exit", "process_connection_id": connection_id})
            ]
            assert fake_room.requests_to("POST", EXIT_PATH) == []
            manager.release(session.session_id)
    assert len(fake_room.process_requests(session.session_id)) == 1


async def test_leave_nowait_before_the_room_named_the_connection_does_nothing(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    fake_room.set_process_mode(ProcessMode.SLOW)
    fake_room.slow_headers = 1
    async with fake_room.client() as client:
        async with websocket_manager(client) as manager:
            holder = manager.hold(session)
            await trio.sleep(0.5)
            assert holder.status is HolderStatus.CONNECTING
            assert not holder.leave_nowait()
            await holder.wait_status(HolderStatus.OPEN)
    assert len(fake_room.process_requests(session.session_id)) == 1


# --- auto -----------------------------------------------------------------------------------------


async def test_auto_falls_back_to_sse_for_a_room_without_the_upgrade_and_remembers(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    fake_room.websocket = False
    async with fake_room.client() as client:
        connector = AutoConnector(client)
        async with open_connection_manager(client, connector=connector) as manager:
            holder = manager.hold(session)
            await holder.wait_status(HolderStatus.OPEN)
            assert connector.uses_sse(session)
            await trio.sleep(1)
            fake_room.drop(session.session_id)
            await holder.wait_status(HolderStatus.WAITING)
            await holder.wait_status(HolderStatus.OPEN)
            report = await manager.announce_exits()
    # The upgrade (404) and the SSE request at 0; after the drop, SSE only.
    assert [r.time for r in fake_room.process_requests(session.session_id)] == [0, 0, 2]
    assert [(a.recorded, a.error) for a in report] == [(True, None)]


async def test_auto_uses_the_socket_where_the_room_has_it(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    async with fake_room.client() as client:
        connector = AutoConnector(client)
        async with open_connection_manager(client, connector=connector) as manager:
            holder = manager.hold(session)
            await holder.wait_status(HolderStatus.OPEN)
            await trio.testing.wait_all_tasks_blocked()
            assert not connector.uses_sse(session)
            report = await manager.announce_exits()
    assert len(fake_room.process_requests(session.session_id)) == 1
    assert [(a.recorded, a.error) for a in report] == [(True, None)]
    assert fake_room.exits[0].body["event"] == "exit"


async def test_a_mixed_process_says_every_goodbye_within_one_deadline(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    fake_room.rooms_without_websocket = {"room_sse"}
    sockets = [await fake_room.add_worker("room_ws", f"Ws{i}") for i in range(20)]
    streams = [await fake_room.add_worker("room_sse", f"Sse{i}") for i in range(20)]
    async with fake_room.client() as client:
        connector = AutoConnector(client)
        async with open_connection_manager(client, connector=connector) as manager:
            holders = [manager.hold(s) for s in sockets + streams]
            for holder in holders:
                await holder.wait_status(HolderStatus.OPEN)
            # 30 s: the room's pings and the goodbye's frames cross on the wire.
            await trio.sleep(30)
            started = trio.current_time()
            report = await manager.announce_exits()
        assert trio.current_time() - started <= 1.5
    by_session = {a.session_id: a for a in report}
    assert [by_session[s.session_id].recorded for s in sockets] == [True] * 20
    assert all(by_session[s.session_id].recorded is True for s in streams)
    assert all(a.error is None for a in report)
    for s in sockets + streams:
        row = fake_room.room.session(s.session_id)
        assert row is not None
        assert row.process_connection_id == "exited"


async def test_a_black_holed_post_does_not_hold_up_the_sockets(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    fake_room.rooms_without_websocket = {"room_sse"}
    fake_room.black_hole_exits = True
    on_socket = await fake_room.add_worker("room_ws", "Ws")
    on_stream = await fake_room.add_worker("room_sse", "Sse")
    async with fake_room.client() as client:
        connector = AutoConnector(client)
        async with open_connection_manager(client, connector=connector) as manager:
            for s in (on_socket, on_stream):
                await manager.hold(s).wait_status(HolderStatus.OPEN)
            await trio.sleep(1)
            started = trio.current_time()
        # The POST is never answered: the goodbye ends at the deadline, less
        # the time kept for that one exit to unwind.
        assert trio.current_time() == started + 1.5
    report = manager.exit_report
    assert report is not None
    assert [(a.session_id, a.recorded, a.error) for a in report] == [
        (on_socket.session_id, True, None),
        (on_stream.session_id, None, "deadline"),
    ]
    row = fake_room.room.session(on_socket.session_id)
    assert row is not None
    assert row.process_connection_id == "exited"


async def test_the_exit_log_line_says_the_exits_went_over_the_sockets(
    autojump_clock: MockClock, fake_room: FakeRoom, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="letagents_trio.manager")
    sessions = [await fake_room.add_worker(display_name=name) for name in ("A", "B")]
    async with fake_room.client() as client:
        async with websocket_manager(client) as manager:
            for session in sessions:
                await manager.hold(session).wait_status(HolderStatus.OPEN)
            await trio.sleep(1)
    messages = [r.getMessage() for r in caplog.records if r.name == "letagents_trio.manager"]
    assert messages == ["announced 2 exits in 0 ms: 2 recorded"]


# --- the room's acknowledgement of the exit (issue 30 row 2) ----------------------------------


async def test_an_exit_the_room_does_not_answer_in_time_is_posted_as_well(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    """The room offered to acknowledge exits, then lost the frame (as one that
    crashed): at half the exit deadline the exit is POSTed, and that is recorded."""
    fake_room.socket_exit_answers = "withheld"
    session = await fake_room.add_worker()
    async with fake_room.client() as client:
        async with websocket_manager(client) as manager:
            holder = manager.hold(session)
            await holder.wait_status(HolderStatus.OPEN)
            await trio.sleep(1)
            connection_id = holder.connection_id
            report = await manager.announce_exits()
    assert [(a.connection_id, a.recorded, a.error, a.finished_at) for a in report] == [
        (connection_id, True, None, 1.75)
    ]
    [post] = fake_room.requests_to("POST", EXIT_PATH)
    assert post.time == 1.75
    assert post.body == {
        "agent_session_id": session.session_id,
        "agent_session_token": session.session_token,
        "process_connection_id": connection_id,
    }


async def test_a_room_that_offers_no_acknowledgement_is_not_waited_on(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    """As fastroom.mjs or a room from before acknowledgements: sent, unconfirmed, at once."""
    fake_room.socket_exit_answers = "not offered"
    session = await fake_room.add_worker()
    async with fake_room.client() as client:
        async with websocket_manager(client) as manager:
            await manager.hold(session).wait_status(HolderStatus.OPEN)
            await trio.sleep(1)
            report = await manager.announce_exits()
            assert trio.current_time() == 1
    assert [(a.recorded, a.error) for a in report] == [(None, None)]
    assert fake_room.requests_to("POST", EXIT_PATH) == []
    row = fake_room.room.session(session.session_id)
    assert row is not None
    assert row.process_connection_id == "exited"
