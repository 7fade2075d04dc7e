"""The WebSocket form of the process connection (PROTOCOL §3.1), in memory under MockClock.

The holder's timeline tests run over both transports (``tests/test_holder.py``);
these are the WebSocket's own: outcomes of the upgrade, half-open detection,
exits over the socket, the ``auto`` fallback, and a mixed goodbye.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing

from letagents_trio import (
    EventKind,
    HolderStatus,
    HoldPolicy,
    Outcome,
    open_connection_manager,
)
from letagents_trio._http1 import Connected, Origin
from letagents_trio._websocket import (
    AutoConnector,
    WebSocketConnector,
    classify_upgrade,
    connector_for,
)
from letagents_trio.testing import FakeRoom, ProcessMode

from .events import NeverStops, drain

if TYPE_CHECKING:
    from trio.testing import MockClock

WEBSOCKET = HoldPolicy(transport="websocket")
AUTO = HoldPolicy(transport="auto")


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


def test_policy_transport_and_ping_fields() -> None:
    policy = HoldPolicy()
    assert (policy.transport, policy.ping_interval, policy.pong_timeout) == ("sse", 10.0, 5.0)
    with pytest.raises(ValueError, match="transport"):
        HoldPolicy(transport="carrier-pigeon")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="pong_timeout"):
        HoldPolicy(pong_timeout=0)


async def test_connector_for_names_the_policys_transport(fake_room: FakeRoom) -> None:
    async with fake_room.client() as client:
        assert type(connector_for(client, HoldPolicy())).__name__ == "SSEConnector"
        assert isinstance(connector_for(client, WEBSOCKET), WebSocketConnector)
        assert isinstance(connector_for(client, AUTO), AutoConnector)


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
    async with (
        fake_room.client() as client,
        open_connection_manager(client, policy=WEBSOCKET) as manager,
    ):
        with manager.subscribe(math.inf) as events:
            manager.hold(session)
            await fake_room.wait_until(lambda: len(fake_room.process_requests()) >= 1)
            await trio.testing.wait_all_tasks_blocked()
            closed = [e for e in drain(events) if e.kind is EventKind.CLOSED]
    assert [(e.time, e.outcome, e.detail) for e in closed] == [(0, outcome, detail)]


async def test_the_upgrade_goes_through_the_clients_opener_as_a_tunnel(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    # One seam for both transports: the socket gets the client's TCP, TLS and
    # proxies, and asks for a CONNECT tunnel past a forwarding proxy.
    asked: list[tuple[Origin, bool]] = []

    class Recording:
        async def open_stream(self, origin: Origin, *, tunnel: bool = False) -> Connected:
            asked.append((origin, tunnel))
            return await fake_room.transport.open_stream(origin, tunnel=tunnel)

    session = await fake_room.add_worker()
    async with fake_room.client(opener=Recording()) as client:
        async with WebSocketConnector(client).open(session) as news:
            first = await anext(news)
    row = fake_room.room.session(session.session_id)
    assert row is not None
    assert first.connection_id == row.process_connection_id
    assert asked == [(Origin("http", "room.test", 80), True)]


async def test_the_open_frame_names_the_connection_the_room_recorded(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    async with (
        fake_room.client() as client,
        open_connection_manager(client, policy=WEBSOCKET) as manager,
    ):
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


@pytest.mark.parametrize(("ping", "pong", "dead_at"), [(10, 5, 15), (2, 1, 3), (1, 0.5, 1.5)])
async def test_a_half_open_socket_is_seen_after_ping_interval_plus_pong_timeout(
    autojump_clock: MockClock, fake_room: FakeRoom, ping: float, pong: float, dead_at: float
) -> None:
    session = await fake_room.add_worker()
    fake_room.set_process_mode(ProcessMode.SILENT)
    policy = HoldPolicy(transport="websocket", ping_interval=ping, pong_timeout=pong)
    async with (
        fake_room.client() as client,
        open_connection_manager(client, policy=policy) as manager,
    ):
        holder = manager.hold(session)
        await holder.wait_status(HolderStatus.OPEN)
        await holder.wait_status(HolderStatus.WAITING)
        assert trio.current_time() == dead_at
        assert holder.statistics().last_outcome is Outcome.DROPPED


async def test_the_room_ending_the_session_ends_the_holder(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    async with (
        fake_room.client() as client,
        open_connection_manager(client, policy=WEBSOCKET) as manager,
    ):
        holder = manager.hold(session)
        await holder.wait_status(HolderStatus.OPEN)
        await trio.sleep(7)
        fake_room.end(session.session_id)
        assert await holder.wait_status(HolderStatus.ENDED) is HolderStatus.ENDED
        assert trio.current_time() == 7


async def test_exit_goes_over_the_socket_naming_its_connection(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    async with fake_room.client() as client:
        async with open_connection_manager(client, policy=WEBSOCKET) as manager:
            holder = manager.hold(session)
            await holder.wait_status(HolderStatus.OPEN)
            await trio.sleep(2)
            connection_id = holder.connection_id
            assert connection_id is not None
            report = await manager.announce_exits()
        assert trio.current_time() == 2
    assert [(a.connection_id, a.recorded, a.error, a.finished_at) for a in report] == [
        (connection_id, None, None, 2)
    ]
    assert [(e.session_id, e.body, e.time) for e in fake_room.exits] == [
        (session.session_id, {"event": "exit", "process_connection_id": connection_id}, 2)
    ]
    # No POST: the exit went over the socket, and §2.2's rule recorded it.
    assert fake_room.requests_to("POST", "/rooms/{room}/agent-sessions/{sid}/process/exit") == []
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
        async with open_connection_manager(client, policy=WEBSOCKET) as manager:
            manager.hold(session)
            await trio.sleep(0.5)
            report = await manager.announce_exits()
    assert [(a.recorded, a.error) for a in report] == [(False, None)]
    assert [e.body.get("process_connection_id", "missing") for e in fake_room.exits] == [None]
    assert "agent_session_token" in fake_room.exits[0].body


async def test_auto_falls_back_to_sse_for_a_room_without_the_upgrade_and_remembers(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    fake_room.websocket = False
    async with fake_room.client() as client:
        connector = AutoConnector(client, policy=AUTO)
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
        async with open_connection_manager(client, policy=AUTO) as manager:
            holder = manager.hold(session)
            await holder.wait_status(HolderStatus.OPEN)
            await trio.testing.wait_all_tasks_blocked()
            report = await manager.announce_exits()
    assert len(fake_room.process_requests(session.session_id)) == 1
    assert [(a.recorded, a.error) for a in report] == [(None, None)]
    assert fake_room.exits[0].body["event"] == "exit"


async def test_a_mixed_process_says_every_goodbye_within_one_deadline(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    fake_room.rooms_without_websocket = {"room_sse"}
    sockets = [await fake_room.add_worker("room_ws", f"Ws{i}") for i in range(20)]
    streams = [await fake_room.add_worker("room_sse", f"Sse{i}") for i in range(20)]
    async with fake_room.client() as client:
        async with open_connection_manager(client, policy=AUTO) as manager:
            holders = [manager.hold(s) for s in sockets + streams]
            for holder in holders:
                await holder.wait_status(HolderStatus.OPEN)
            # 30 s: the room's pings and the goodbye's frames cross on the wire.
            await trio.sleep(30)
            started = trio.current_time()
            report = await manager.announce_exits()
        assert trio.current_time() - started <= 1.5
    by_session = {a.session_id: a for a in report}
    assert [by_session[s.session_id].recorded for s in sockets] == [None] * 20
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
        async with open_connection_manager(client, policy=AUTO) as manager:
            for s in (on_socket, on_stream):
                await manager.hold(s).wait_status(HolderStatus.OPEN)
            await trio.sleep(1)
            started = trio.current_time()
        # The POST is never answered: the goodbye ends at the deadline, less
        # the time kept for that one exit to unwind.
        assert trio.current_time() == started + 1.5 - AUTO.unwind_allowance
    row = fake_room.room.session(on_socket.session_id)
    assert row is not None
    assert row.process_connection_id == "exited"


async def test_the_goodbye_closes_the_socket_itself_and_does_not_wait_for_the_holder(
    autojump_clock: MockClock, fake_room: FakeRoom
) -> None:
    """Frames written, socket closed, done: thousands of goodbyes never wait on unwinding."""
    session = await fake_room.add_worker()
    stop = NeverStops()
    async with fake_room.client() as client:
        connector = WebSocketConnector(client, policy=WEBSOCKET)
        async with open_connection_manager(client, connector=connector) as manager:
            holder = manager.hold(session)
            await holder.wait_status(HolderStatus.OPEN)
            await trio.sleep(1)
            connection_id = holder.connection_id
            assert connection_id is not None
            with trio.fail_after(1):
                recorded = await connector.goodbye(session, connection_id, stop)
            assert (recorded, stop.calls) == (None, [])
            with manager.subscribe() as events:
                await trio.sleep(1)
                # The reader saw its socket close after the exit frame: a stop,
                # not a drop, so no CLOSED event and no new attempt.
                assert holder.status is HolderStatus.STOPPED
                assert [(e.kind, e.detail) for e in drain(events)] == [
                    (EventKind.STOPPED, "process exit")
                ]
            assert [e.body for e in fake_room.exits] == [
                {"event": "exit", "process_connection_id": connection_id}
            ]
    assert len(fake_room.process_requests(session.session_id)) == 1


async def test_the_exit_log_line_says_the_exits_went_over_the_sockets(
    autojump_clock: MockClock, fake_room: FakeRoom, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO", logger="letagents_trio.manager")
    sessions = [await fake_room.add_worker(display_name=name) for name in ("A", "B")]
    async with fake_room.client() as client:
        async with open_connection_manager(client, policy=WEBSOCKET) as manager:
            for session in sessions:
                await manager.hold(session).wait_status(HolderStatus.OPEN)
            await trio.sleep(1)
    messages = [r.getMessage() for r in caplog.records if r.name == "letagents_trio.manager"]
    assert messages == ["announced 2 exits in 0 ms: 2 sent over the socket"]
