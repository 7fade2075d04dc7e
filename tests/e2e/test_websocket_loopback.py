"""The WebSocket form over real loopback: hypercorn serving the room, the client's own sockets.

Real clock (sockets do not run on trio's mock clock); each test is bounded by
``trio.fail_after``. Over a plain socket each holder's exit frame is written
at once (``ProcessHolder.leave_nowait``), with no task and no checkpoint.
"""

from __future__ import annotations

import gc
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import TYPE_CHECKING, final

import trio
import trio.lowlevel

from letagents_trio import (
    ConnectionManager,
    EventKind,
    HolderStatus,
    RoomClient,
    RoomUnreachable,
    WebSocketConnector,
    open_connection_manager,
)
from letagents_trio._protocol import WEBSOCKET_PING_INTERVAL, WEBSOCKET_PONG_TIMEOUT
from letagents_trio.room_server import MemoryStore, Room, RoomConfig, serve_room
from letagents_trio.testing import register_worker

from ..room_server.helpers import OWNER_TOKEN
from .tiny_proxy import TinyProxy

if TYPE_CHECKING:
    import pytest


@asynccontextmanager
async def served(room: Room) -> AsyncIterator[str]:
    async with trio.open_nursery() as nursery:
        url = await nursery.start(partial(serve_room, room, port=0))
        try:
            yield url
        finally:
            nursery.cancel_scope.cancel(reason="test over")


def new_room(heartbeat: float = 15.0) -> Room:
    return Room(
        store=MemoryStore(),
        owner_tokens={OWNER_TOKEN: "owner"},
        config=RoomConfig(heartbeat_interval=heartbeat),
    )


@asynccontextmanager
async def websocket_manager(
    client: RoomClient,
    *,
    ping_interval: float = WEBSOCKET_PING_INTERVAL,
    pong_timeout: float = WEBSOCKET_PONG_TIMEOUT,
) -> AsyncIterator[ConnectionManager]:
    """A connection manager whose holders hold WebSockets."""
    connector = WebSocketConnector(client, ping_interval=ping_interval, pong_timeout=pong_timeout)
    async with open_connection_manager(client, connector=connector) as manager:
        yield manager


async def test_hold_and_exit_over_a_hypercorn_socket() -> None:
    room = new_room()
    with trio.fail_after(20):
        async with served(room) as url:
            session = await register_worker(room, owner_token=OWNER_TOKEN, owner_login="owner")
            async with RoomClient(url, owner_token=OWNER_TOKEN) as client:
                async with websocket_manager(client) as manager:
                    with manager.subscribe() as events:
                        holder = manager.hold(session)
                        async for event in events:
                            if event.kind is EventKind.CONNECTION:
                                break
                    row = room.session(session.session_id)
                    assert row is not None
                    connection_id = holder.connection_id
                    assert row.process_connection_id == connection_id
                    assert room.statistics().open_process_streams == 1
                    started = trio.current_time()
                    report = await manager.announce_exits()
                    assert trio.current_time() - started < 1.0
            # Sent at once over the plain socket (the holder's leave_nowait),
            # acknowledged by the room, and reported naming the connection its
            # frame named.
            assert [(a.connection_id, a.recorded, a.error) for a in report] == [
                (connection_id, True, None)
            ]
            row = room.session(session.session_id)
            assert row is not None
            assert row.process_connection_id == "exited"


async def test_hypercorn_refusals_reach_the_client_as_their_status() -> None:
    room = new_room()
    with trio.fail_after(20):
        async with served(room) as url:
            session = await register_worker(room, owner_token=OWNER_TOKEN, owner_login="owner")
            room.end_session(session.session_id)
            async with RoomClient(url, owner_token=OWNER_TOKEN) as client:
                async with websocket_manager(client) as manager:
                    holder = manager.hold(session)
                    assert await holder.wait_status(HolderStatus.ENDED) is HolderStatus.ENDED
                    assert holder.statistics().attempts  # 410 → ended


async def test_the_room_pings_and_a_quiet_socket_stays_open() -> None:
    room = new_room(heartbeat=0.2)
    with trio.fail_after(20):
        async with served(room) as url:
            session = await register_worker(room, owner_token=OWNER_TOKEN, owner_login="owner")
            async with RoomClient(url, owner_token=OWNER_TOKEN) as client:
                async with websocket_manager(
                    client, ping_interval=0.3, pong_timeout=0.5
                ) as manager:
                    holder = manager.hold(session)
                    await holder.wait_status(HolderStatus.OPEN)
                    await trio.sleep(2)
                    assert holder.status is HolderStatus.OPEN
                    assert holder.statistics().opens == 1


async def test_a_goodbye_over_sockets_leaves_no_reference_cycles() -> None:
    """No exception survives a socket's goodbye: 10,000 would be 10,000 cycles to collect."""
    room = new_room()
    gc.collect()
    # From here every collection keeps what it finds, so none is missed.
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        with trio.fail_after(20):
            async with served(room) as url:
                sessions = [
                    await register_worker(room, owner_token=OWNER_TOKEN, owner_login="owner")
                    for _ in range(20)
                ]
                async with RoomClient(url, owner_token=OWNER_TOKEN) as client:
                    async with websocket_manager(client) as manager:
                        with manager.subscribe() as events:
                            for session in sessions:
                                manager.hold(session)
                            connected = 0
                            async for event in events:
                                connected += event.kind is EventKind.CONNECTION
                                if connected == len(sessions):
                                    break
                    report = manager.exit_report
        gc.collect()
        kept = [o for o in gc.garbage if isinstance(o, RoomUnreachable)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert report is not None
    assert [(a.recorded, a.error) for a in report] == [(True, None)] * 20
    assert kept == []


@final
class _GoodbyeSteps(trio.abc.Instrument):
    """From the moment it is added: the core's tasks spawned, and each holder's steps."""

    def __init__(self) -> None:
        self.spawned: list[str] = []
        self.holder_steps: Counter[str] = Counter()

    def task_spawned(self, task: trio.lowlevel.Task) -> None:
        # The room server's tasks are letagents_trio.room_server's, not the core's.
        if task.name.startswith("letagents_trio._"):
            self.spawned.append(task.name)

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if task.name.startswith("process holder "):
            self.holder_steps[task.name] += 1


async def test_a_goodbye_over_sockets_spawns_no_task_and_wakes_each_holder_once() -> None:
    """The exit frames go out in one loop, and each holder unwinds in one step.

    At 10,000 sockets a task per goodbye is about 0.3 s of CPU, and a holder
    woken twice (the socket closing under it, then its cancellation) another 0.3 s.
    """
    room = new_room()
    steps = _GoodbyeSteps()
    with trio.fail_after(20):
        async with served(room) as url:
            sessions = [
                await register_worker(room, owner_token=OWNER_TOKEN, owner_login="owner")
                for _ in range(20)
            ]
            async with RoomClient(url, owner_token=OWNER_TOKEN) as client:
                async with websocket_manager(client) as manager:
                    with manager.subscribe() as events:
                        for session in sessions:
                            manager.hold(session)
                        connected = 0
                        async for event in events:
                            connected += event.kind is EventKind.CONNECTION
                            if connected == len(sessions):
                                break
                    trio.lowlevel.add_instrument(steps)
                trio.lowlevel.remove_instrument(steps)
                report = manager.exit_report
            assert report is not None
            assert [(a.recorded, a.error) for a in report] == [(True, None)] * 20
            for session in sessions:
                row = room.session(session.session_id)
                assert row is not None
                assert row.process_connection_id == "exited"
    assert steps.spawned == []
    assert len(steps.holder_steps) == 20
    assert set(steps.holder_steps.values()) == {1}


async def test_a_websocket_through_a_proxy_holds_and_exits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With a proxy in the environment the upgrade goes through httpx2 and the proxy.

    The raw stream is the one httpx2 hands over after ``101``: not a plain
    socket, so the exit goes over it with a checkpoint (``leave``).
    """
    room, proxy = new_room(), TinyProxy()
    for scheme in ("http", "https", "all", "no"):
        monkeypatch.delenv(f"{scheme}_proxy", raising=False)
        monkeypatch.delenv(f"{scheme.upper()}_PROXY", raising=False)
    with trio.fail_after(20):
        async with served(room) as url, trio.open_nursery() as nursery:
            proxy_port = await nursery.start(proxy.serve)
            monkeypatch.setenv("http_proxy", f"http://127.0.0.1:{proxy_port}")
            session = await register_worker(room, owner_token=OWNER_TOKEN, owner_login="owner")
            async with RoomClient(url, owner_token=OWNER_TOKEN) as client:
                async with websocket_manager(client) as manager:
                    with manager.subscribe() as events:
                        holder = manager.hold(session)
                        async for event in events:
                            if event.kind is EventKind.CONNECTION:
                                break
                    row = room.session(session.session_id)
                    assert row is not None
                    assert row.process_connection_id == holder.connection_id
            nursery.cancel_scope.cancel()
    assert manager.exit_report is not None
    assert [(a.recorded, a.error) for a in manager.exit_report] == [(True, None)]
    row = room.session(session.session_id)
    assert row is not None
    assert row.process_connection_id == "exited"
    assert proxy.lines == [
        f"GET {url}/rooms/{session.room_id}/agent-sessions/{session.session_id}/process"
    ]
