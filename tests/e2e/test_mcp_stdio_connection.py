"""PROTOCOL §8.1 (process-connection-stdio) 2 and 6–9: the real server over stdio.

The server runs as a subprocess driven by the SDK's stdio client, against the
reference room on loopback with FakeRoom's process modes (:mod:`.mcp_loopback`).
Real clock: the holder's waits (1 s after a drop, 10 s after a 404, 5 then
15 s after refusals) are the protocol's own, so the times asserted are those
waits within a tolerance for process and loopback latency.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Final

import pytest
import trio
from mcp import Client

from letagents_trio.testing import ProcessMode
from letagents_trio.workers import LocalStateStore

from ..mcp_server.helpers import ROOM, call_ok, register
from .mcp_loopback import BUDGET, open_loopback_room, server_env, stdio_params

if TYPE_CHECKING:
    from pathlib import Path

    from .mcp_loopback import LoopbackRoom

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX pipes")

# Real-clock slack on a wait the holder times itself (process and loopback latency).
LATE: Final = 1.5
EARLY: Final = 0.1


def assert_waited(gap: float, wait: float) -> None:
    """``gap`` is the holder's ``wait``, give or take real-clock latency."""
    assert wait - EARLY <= gap <= wait + LATE, (gap, wait)


def not_ended(tmp_path: Path, session_id: str) -> bool:
    """Whether the state file holds ``session_id`` and not as ended."""
    stored = LocalStateStore(tmp_path / "mcp-state.json").stored_session(session_id)
    return stored is not None and not stored.ended_at


async def test_a_destroyed_stream_is_opened_again(tmp_path: Path) -> None:
    """§8.1.2: the room cuts the open stream; the client opens a second one for the session."""
    with trio.fail_after(BUDGET):
        async with open_loopback_room() as room:
            async with Client(stdio_params(server_env(room, tmp_path)), mode="legacy") as client:
                sid = (await register(client))["agent_session"]["session_id"]
                await room.wait_until(lambda: room.open_streams(sid) == 1)
                (first,) = room.room.process_streams(sid)
                cut_at = trio.current_time()
                assert room.fake.drop(sid) == 1
                await room.wait_until(
                    lambda: len(room.process_gets(sid)) == 2 and room.open_streams(sid) == 1
                )
                (second,) = room.room.process_streams(sid)
                gets = room.process_gets(sid)
    assert len(gets) == 2
    assert second.connection_id != first.connection_id
    assert_waited(gets[1] - cut_at, 1.0)  # the first "dropped" wait
    assert not_ended(tmp_path, sid)


async def _unsupported_then_served(room: LoopbackRoom, tmp_path: Path) -> None:
    """§8.1.6–7: a room answering 404 is asked again 10 s later; once served, it opens."""
    room.fake.set_process_mode(ProcessMode.UNKNOWN)
    async with Client(stdio_params(server_env(room, tmp_path)), mode="legacy") as client:
        cedar = await register(client, "k-cedar", "Cedar")
        sid = cedar["agent_session"]["session_id"]
        await room.wait_until(lambda: len(room.process_gets(sid)) == 1)
        assert not_ended(tmp_path, sid)
        room.fake.set_process_mode(ProcessMode.SERVED)
        with trio.fail_after(20):
            await room.wait_until(lambda: room.open_streams(sid) == 1)
        gets = room.process_gets(sid)
        assert len(gets) == 2  # nothing in between: no new connection within 1.5 s, or 10 s
        assert_waited(gets[1] - gets[0], 10.0)
        again = await call_ok(
            client, "register_agent_session", {"worker_id": cedar["worker_id"], "room_id": ROOM}
        )
        assert again["agent_session"]["session_id"] == sid
        assert not_ended(tmp_path, sid)


async def _busy_refused_then_served(room: LoopbackRoom, tmp_path: Path) -> None:
    """§8.1.8–9: the first registration is busy (503) and retried; refused process
    attempts (401) come 5 s apart and do not end the session; once served, the
    next attempt, 15 s later, opens."""
    room.busy_registrations = 1
    room.fake.set_process_mode(ProcessMode.REFUSED)
    async with Client(stdio_params(server_env(room, tmp_path)), mode="legacy") as client:
        rowan = await register(client, "k-rowan", "Rowan")
        sid = rowan["agent_session"]["session_id"]
        first, retried = room.registrations
        assert first == retried  # the same prepared registration, sent again
        with trio.fail_after(15):
            await room.wait_until(lambda: len(room.process_gets(sid)) == 2)
        assert not_ended(tmp_path, sid)
        room.fake.set_process_mode(ProcessMode.SERVED)
        with trio.fail_after(20):
            await room.wait_until(lambda: room.open_streams(sid) == 1)
        gets = room.process_gets(sid)
        assert len(gets) == 3
        assert_waited(gets[1] - gets[0], 5.0)
        assert_waited(gets[2] - gets[1], 15.0)
        assert not_ended(tmp_path, sid)


@pytest.mark.slow
async def test_unsupported_and_refused_process_routes_are_asked_again_later(
    tmp_path: Path,
) -> None:
    """§8.1.6–9, the two rooms side by side (about 21 s of the holder's own waits)."""
    unsupported, refused = tmp_path / "unsupported", tmp_path / "refused"
    unsupported.mkdir()
    refused.mkdir()
    with trio.fail_after(BUDGET + 10):
        async with (
            open_loopback_room() as room_a,
            open_loopback_room() as room_b,
            trio.open_nursery() as nursery,
        ):
            nursery.start_soon(_unsupported_then_served, room_a, unsupported)
            nursery.start_soon(_busy_refused_then_served, room_b, refused)
