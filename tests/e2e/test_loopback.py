"""One smoke test over a real loopback socket with the real clock.

The reference room is served by hypercorn on 127.0.0.1 (port 0), and the
holder speaks real HTTP/1.1 to it through httpx2: open, a dropped stream
reopened about a second later, then the exit announced on the way out.
Bounded by ``trio.fail_after``; no mock clock here.
"""

from __future__ import annotations

import gc
import secrets
from functools import partial

import trio
import trio.testing

from letagents_trio import (
    EventKind,
    HolderEvent,
    HolderStatus,
    HoldPolicy,
    RoomClient,
    open_connection_manager,
)
from letagents_trio.room_server import MemoryStore, Room, serve_room
from letagents_trio.testing import register_worker

# Real seconds the many-streams test gives its exits: a hang guard, not a claim.
EXITS_HANG_GUARD = 20.0


async def next_connection(events: trio.MemoryReceiveChannel[HolderEvent]) -> str:
    """The id of the next connection the room names (its open event follows the headers)."""
    async for event in events:
        if event.kind is EventKind.CONNECTION and event.connection_id is not None:
            return event.connection_id
    raise AssertionError("the event stream ended")


async def test_hold_drop_reopen_and_exit_over_loopback() -> None:
    owner_token = secrets.token_urlsafe(16)
    room = Room(store=MemoryStore(), owner_tokens={owner_token: "owner"})
    with trio.fail_after(15):
        async with trio.open_nursery() as nursery:
            api_url = await nursery.start(partial(serve_room, room, port=0))
            assert api_url.startswith("http://127.0.0.1:")
            session = await register_worker(
                room, owner_token=owner_token, owner_login="owner", display_name="Juniper"
            )
            async with (
                RoomClient(api_url, owner_token=owner_token) as client,
                open_connection_manager(client, owner_mode=True) as manager,
            ):
                with manager.subscribe(100) as events:
                    holder = manager.hold(session)
                    first = await next_connection(events)
                    [stream] = room.process_streams(session.session_id)
                    assert stream.connection_id == first
                    stream.close("dropped")
                    await holder.wait_status(HolderStatus.WAITING)
                    dropped_at = trio.current_time()
                    second = await next_connection(events)
                    assert 0.9 <= trio.current_time() - dropped_at < 3
                    assert second != first
                    assert holder.connection_id == second
            row = room.session(session.session_id)
            assert row is not None
            assert row.process_connection_id == "exited"
            nursery.cancel_scope.cancel()


async def test_an_ended_stream_is_closed_cleanly_over_loopback() -> None:
    """Stopping on ``event: ended`` mid-body leaves no async generator to the GC.

    httpx2 reads a body through a chain of async generators; abandoning it part
    way leaves trio to finalize the inner ones, with a ResourceWarning that
    ``filterwarnings = error`` turns into a failure here.
    """
    owner_token = secrets.token_urlsafe(16)
    room = Room(store=MemoryStore(), owner_tokens={owner_token: "owner"})
    with trio.fail_after(15):
        async with trio.open_nursery() as nursery:
            api_url = await nursery.start(partial(serve_room, room, port=0))
            session = await register_worker(
                room, owner_token=owner_token, owner_login="owner", display_name="Cedar"
            )
            async with (
                RoomClient(api_url, owner_token=owner_token) as client,
                open_connection_manager(client, owner_mode=True) as manager,
            ):
                with manager.subscribe(100) as events:
                    holder = manager.hold(session)
                    await next_connection(events)
                    room.end_session(session.session_id)
                    await holder.wait_status(HolderStatus.ENDED)
            gc.collect()
            await trio.testing.wait_all_tasks_blocked()
            nursery.cancel_scope.cancel()


async def test_more_streams_than_a_default_connection_pool_holds() -> None:
    """Each stream holds a connection; httpx2's default pool would stop at 100.

    Every exit must still find a connection, so the exit deadline here is only
    a hang guard: 150 POSTs over real sockets in the default 1.5 s is a
    benchmark's claim (bench/bench_holders_loopback.py), which a loaded 2-core
    machine misses (38 of 150 were seen), and the mock-clock test of 1,000
    holders in test_manager.py asserts the deadline itself.
    """
    owner_token = secrets.token_urlsafe(16)
    room = Room(store=MemoryStore(), owner_tokens={owner_token: "owner"})
    policy = HoldPolicy(exit_deadline=EXITS_HANG_GUARD)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            api_url = await nursery.start(partial(serve_room, room, port=0))
            sessions = [
                await register_worker(
                    room,
                    owner_token=owner_token,
                    owner_login="owner",
                    room_id=f"room_{i % 5}",
                    display_name=f"Worker{i}",
                )
                for i in range(150)
            ]
            async with (
                RoomClient(api_url, owner_token=owner_token) as client,
                open_connection_manager(client, policy=policy, owner_mode=True) as manager,
            ):
                holders = [manager.hold(s) for s in sessions]
                for holder in holders:
                    await holder.wait_status(HolderStatus.OPEN)
                assert room.statistics().open_process_streams == 150
                report = await manager.announce_exits()
            assert sum(1 for a in report if a.recorded) == 150
            nursery.cancel_scope.cancel()
