"""Shutdown and the happy path: the real server over stdio, the reference room on loopback.

Real clock throughout (subprocesses and sockets), every test bounded by
``trio.fail_after``. The room and both drivers are in :mod:`.mcp_loopback`: the
SDK's stdio client (what hosts use) and, where the process itself must be
signalled and timed, a raw JSON-RPC driver over the pipes.
"""

from __future__ import annotations

import json
import re
import signal
import sys
from pathlib import Path

import pytest
import trio
import trio.testing
from mcp import Client

from letagents_trio.workers import LocalStateStore

from ..mcp_server.helpers import ROOM, call_ok
from .mcp_loopback import (
    BUDGET,
    EXIT_DEADLINE,
    EXIT_SLACK,
    OWNER_TOKEN,
    LoopbackRoom,
    RawServer,
    open_loopback_room,
    open_raw_server,
    server_env,
    stdio_params,
)

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and pipes")


def polls_started(room: LoopbackRoom) -> int:
    """How many long polls the room has been asked for."""
    return sum(r.path.endswith("/messages/poll") for r in room.fake.requests)


async def register_held_worker(server: RawServer, room: LoopbackRoom) -> str:
    """Register a worker and wait until its process stream is open at the room."""
    registered = await server.call_tool(
        "register_agent_session",
        {"room_id": ROOM, "registration_key": "k-raw", "display_name": "Juniper"},
    )
    session_id: str = registered["agent_session"]["session_id"]
    await room.wait_until(lambda: len(room.room.process_streams(session_id)) == 1)
    # One more round trip, so the holder has read the stream's open event (the
    # connection id its exit names) before the test stops the process.
    await server.call_tool("read_messages", {"worker_id": registered["worker_id"]})
    return session_id


@pytest.mark.parametrize("black_hole", [False, True], ids=["healthy", "black-holed"])
@pytest.mark.parametrize("trigger", ["SIGTERM", "SIGINT", "stdin EOF"])
async def test_a_stop_announces_and_exits_within_the_deadline(
    tmp_path: Path, black_hole: bool, trigger: str
) -> None:
    """§8.1.5 and §8.1.10: a signal or the host closing stdin stops the server:
    exactly one exit POST naming the open stream's id, and the process is gone
    (rc 0) within 1.5 + 0.5 s, even when the room never answers the exit."""
    with trio.fail_after(BUDGET):
        async with open_loopback_room() as room:
            room.fake.black_hole_exits = black_hole
            env = server_env(room, tmp_path)
            async with open_raw_server(env, tmp_path / "stderr.log") as server:
                await server.initialize()
                session_id = await register_held_worker(server, room)
                (stream,) = room.room.process_streams(session_id)
                stopped_at = trio.current_time()
                if trigger == "stdin EOF":
                    assert server.process.stdin is not None
                    await server.process.stdin.aclose()
                else:
                    server.process.send_signal(getattr(signal, trigger))
                await server.process.wait()
                elapsed = trio.current_time() - stopped_at
    stderr = (tmp_path / "stderr.log").read_text()
    print(f"{trigger} {'black-holed' if black_hole else 'healthy'}: exit in {elapsed:.3f} s")
    assert server.process.returncode == 0, stderr
    assert elapsed < EXIT_DEADLINE + EXIT_SLACK, stderr
    if black_hole:
        assert elapsed >= EXIT_DEADLINE - 0.1  # it did wait for the room, up to the deadline
    assert [(e.session_id, e.process_connection_id) for e in room.fake.exits] == [
        (session_id, stream.connection_id)
    ]
    assert room.fake.exits[0].body["agent_session_id"] == session_id


async def test_end_to_end_with_the_sdk_stdio_client(tmp_path: Path) -> None:
    """§8.1.1, §8.1.3-5 and §8.3.5-6 through the SDK's stdio client, as a host runs it."""
    store = LocalStateStore(tmp_path / "mcp-state.json")
    with trio.fail_after(BUDGET):
        async with open_loopback_room() as room:
            params = stdio_params(server_env(room, tmp_path))
            async with Client(params, mode="legacy") as client:
                a = await call_ok(
                    client,
                    "register_agent_session",
                    {"room_id": ROOM, "registration_key": "k1", "display_name": "Juniper"},
                )
                sid = a["agent_session"]["session_id"]
                # §8.1.1: exactly one process GET, for that session, with a token.
                await room.wait_until(lambda: len(room.room.process_streams(sid)) == 1)
                gets = room.fake.process_requests()
                assert [(r.path.split("/")[-2], r.has_session_token) for r in gets] == [(sid, True)]
                b = await call_ok(
                    client,
                    "register_agent_session",
                    {"room_id": ROOM, "registration_key": "k2", "display_name": "Cedar"},
                )
                # §8.3.5: two workers send by worker_id alone, as two sessions.
                sent_a = await call_ok(
                    client, "send_message", {"worker_id": a["worker_id"], "text": "from a"}
                )
                sent_b = await call_ok(
                    client, "send_message", {"worker_id": b["worker_id"], "text": "from b"}
                )
                assert sent_a["agent_session_id"] == sid
                assert sent_b["agent_session_id"] != sid
                waited = await call_ok(
                    client,
                    "wait_for_messages",
                    {"worker_id": a["worker_id"], "after_message_id": "0"},
                )
                assert [m["text"] for m in waited["messages"]] == ["from a", "from b"]
                # §8.1.3: the room ends the session; the next call learns it, and a
                # reconnect by worker_id registers again and keeps the session id.
                room.room.end_session(sid)
                await room.wait_until(lambda: not room.room.process_streams(sid))
                await client.call_tool(
                    "send_message", {"worker_id": a["worker_id"], "text": "late"}
                )
                stored = store.stored_session(sid)
                assert stored is not None
                assert stored.ended_at
                count = len(room.registrations)
                again = await call_ok(
                    client,
                    "register_agent_session",
                    {"room_id": ROOM, "worker_id": a["worker_id"]},
                )
                assert len(room.registrations) == count + 1
                assert again["agent_session"]["session_id"] == sid
                await room.wait_until(lambda: len(room.room.process_streams(sid)) == 1)
                (stream,) = room.room.process_streams(sid)
                texts = [json.dumps(x) for x in (a, b, sent_a, sent_b, waited, again)]
            exits_seen = {e.session_id: e.body for e in room.fake.exits}
    # §8.1.4: every registration carried the same well-formed process_host_id.
    host_ids = {r["process_host_id"] for r in room.registrations}
    assert len(host_ids) == 1
    assert re.fullmatch(r"phost_[0-9a-f]{32}", host_ids.pop())
    # §8.1.5: closing stdin announced the exit of the held stream, by its id.
    assert exits_seen[sid]["process_connection_id"] == stream.connection_id
    # §8.3.6: no token or bearer in any result; none in the state file either.
    state_text = (tmp_path / "mcp-state.json").read_text()
    stored = store.stored_session(sid)
    assert stored is not None
    for text in texts:
        assert OWNER_TOKEN not in text
        assert stored.session_token not in text
        assert "session_token" not in text
        assert "worker_bearer" not in text
    assert "worker_bearer" not in state_text
    assert oct((tmp_path / "mcp-state.json").stat().st_mode & 0o777) == "0o600"


async def test_cancelled_wait_over_stdio_closes_the_rooms_poll(tmp_path: Path) -> None:
    """A wait the host cancels returns at once, and the room's poll closes with it."""
    with trio.fail_after(BUDGET):
        async with open_loopback_room() as room:
            params = stdio_params(server_env(room, tmp_path))
            async with Client(params, mode="legacy") as client:
                a = await call_ok(
                    client,
                    "register_agent_session",
                    {"room_id": ROOM, "registration_key": "k1", "display_name": "Juniper"},
                )
                with trio.move_on_after(30) as outer:
                    async with trio.open_nursery() as nursery:

                        async def wait() -> None:
                            await client.call_tool(
                                "wait_for_messages",
                                {
                                    "worker_id": a["worker_id"],
                                    "after_message_id": "0",
                                    "timeout": 60_000,
                                },
                            )

                        nursery.start_soon(wait)
                        await room.wait_until(lambda: polls_started(room) == 1)
                        await trio.testing.wait_all_tasks_blocked()
                        assert room.room.statistics().open_polls == 1
                        cancelled_at = trio.current_time()
                        nursery.cancel_scope.cancel(reason="the host cancels the call")
                    returned = trio.current_time() - cancelled_at
                    await room.wait_until(lambda: room.room.statistics().open_polls == 0)
                    closed = trio.current_time() - cancelled_at
                assert not outer.cancelled_caught
                # The server still serves.
                await call_ok(client, "read_messages", {"worker_id": a["worker_id"]})
    print(f"cancelled wait: call returned in {returned:.3f} s, room poll closed in {closed:.3f} s")
    assert returned < 0.5
    assert closed < 1.0
