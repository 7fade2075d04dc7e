"""PROTOCOL §8.3 (worker-handles-stdio): durable handles across MCP processes over stdio.

Up to four server processes share one state file, seeded with the owner's
sign-in only (no ``LETAGENTS_TOKEN``), against the reference room on
loopback. Processes 1, 2 and 4 are driven by the SDK's stdio client; process 3
by the raw driver, so the test can SIGKILL it. Room ``room_local`` is
overridden to local storage (§8.3.13 runs two processes there; the in-memory
§8.3.14 tests are in ``test_local_rooms.py``). Scenarios 5 and 6 (sends by worker_id alone, no
secret in results, state file mode 0600) are in ``test_stdio.py``'s
end-to-end test.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any, Final

import pytest
import trio
from mcp import Client

from letagents_trio.workers import LocalStateStore

from ..mcp_server.helpers import ROOM, call_error, call_ok, register
from .mcp_loopback import (
    BUDGET,
    OWNER_TOKEN,
    AccountFault,
    open_loopback_room,
    open_raw_server,
    seed_owner_auth,
    server_env,
    stdio_params,
)

if TYPE_CHECKING:
    from pathlib import Path

    from .mcp_loopback import LoopbackRoom

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and pipes")

LOCAL_ROOM: Final = "room_local"
UNVERIFIED: Final = "Could not verify your LetAgents account"


def state_parts(tmp_path: Path) -> dict[str, Any]:
    """What §5.6 says must not change: workers, sessions and the owner token."""
    state = json.loads((tmp_path / "mcp-state.json").read_text())
    return {
        "mcp_workers": state.get("mcp_workers"),
        "agent_sessions": state.get("agent_sessions"),
        "auth.token": state["auth"]["token"],
    }


def prepare(room: LoopbackRoom, tmp_path: Path) -> dict[str, str]:
    """Seed the owner's sign-in, make ``room_local`` local, and return the server env."""
    seed_owner_auth(tmp_path)
    settings = {"mode": "cloud", "roomOverrides": {LOCAL_ROOM: "local"}}
    (tmp_path / "chat-storage.json").write_text(json.dumps(settings))
    return server_env(room, tmp_path, token=False)


async def test_workers_across_four_processes(tmp_path: Path) -> None:
    """§8.3.3-4, 7-8, 10-11 in the order the upstream test runs them.

    In 10 the room has ended the session (only its answer is held) when the
    third process reconnects, so the room may hand that process a new session;
    what must hold is that the late answer ends nothing this worker now has.
    """
    store = LocalStateStore(tmp_path / "mcp-state.json")
    with trio.fail_after(BUDGET):
        async with open_loopback_room() as room:
            env = prepare(room, tmp_path)
            async with Client(stdio_params(env), mode="legacy") as first:
                # 3. Two concurrent identical creates: one worker, one registration.
                twins: list[dict[str, Any]] = []

                async def create() -> None:
                    twins.append(await register(first, "K1", "Juniper"))

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(create)
                    nursery.start_soon(create)
                a, a_twin = twins
                assert a["worker_id"] == a_twin["worker_id"]
                assert len(room.registrations) == 1
                a_id, a_sid = a["worker_id"], a["agent_session"]["session_id"]
                # 4. A different key: a different worker with its own identity.
                b = await register(first, "K2", "Cedar")
                assert b["worker_id"] != a_id
                assert b["agent_session"]["agent_key"] != a["agent_session"]["agent_key"]
                b_id = b["worker_id"]

                async with Client(stdio_params(env), mode="legacy") as second:
                    # 7. The account cannot be verified: every durable call fails and
                    # changes nothing, and no registration is sent.
                    before, count = state_parts(tmp_path), len(room.registrations)
                    for fault in AccountFault:
                        room.account_fault = fault
                        for args in (
                            {"worker_id": a_id, "room_id": ROOM},
                            {"room_id": ROOM, "registration_key": "K1", "display_name": "Juniper"},
                            {"room_id": LOCAL_ROOM, "registration_key": "K-local"},
                        ):
                            error = await call_error(second, "register_agent_session", args)
                            assert UNVERIFIED in error, (fault, args, error)
                            assert "same worker_id or registration_key" in error
                            assert "Unknown worker_id" not in error
                    room.account_fault = None
                    assert state_parts(tmp_path) == before
                    assert len(room.registrations) == count
                    # 8. Not reconnected here yet: refused. Reconnected: the same session,
                    # and the first process can no longer act as that worker.
                    await call_error(second, "send_message", {"worker_id": a_id, "text": "x"})
                    moved = await call_ok(
                        second, "register_agent_session", {"worker_id": a_id, "room_id": ROOM}
                    )
                    assert moved["agent_session"]["session_id"] == a_sid
                    assert moved["agent_session"]["display_name"] == "Juniper"
                    await call_error(first, "send_message", {"worker_id": a_id, "text": "x"})
                    await call_error(
                        first, "send_message", {"agent_session_id": a_sid, "text": "x"}
                    )
                    await call_ok(first, "send_message", {"worker_id": b_id, "text": "b still"})
                    await call_ok(second, "send_message", {"worker_id": a_id, "text": "a here"})

                    # 10. A disconnect whose answer is held while a third process
                    # reconnects the worker: the late answer ends nothing.
                    room.hold_disconnects = True
                    outcome: list[str] = []
                    answered = trio.Event()

                    async def disconnect() -> None:
                        args = {"worker_id": a_id}
                        outcome.append(await call_error(second, "disconnect_agent_session", args))
                        answered.set()

                    async with (
                        open_raw_server(env, tmp_path / "third.log") as third,
                        trio.open_nursery() as nursery,
                    ):
                        await third.initialize()
                        nursery.start_soon(disconnect)
                        await room.wait_until(lambda: room.held_disconnects == 1)
                        try:
                            again = await third.call_tool(
                                "register_agent_session", {"worker_id": a_id, "room_id": ROOM}
                            )
                        finally:
                            room.release_disconnects()
                        await answered.wait()
                        assert "replaced" in outcome[0], outcome
                        a_sid = again["agent_session"]["session_id"]
                        stored = store.stored_session(a_sid)
                        assert stored is not None
                        assert not stored.ended_at
                        await third.call_tool("send_message", {"worker_id": a_id, "text": "third"})
                        # 11. SIGKILL: nothing announced, nothing cleaned up.
                        third.process.kill()
                        await third.process.wait()
            # 11. A fourth process reconnects the worker: the same session and name.
            async with Client(stdio_params(env), mode="legacy") as fourth:
                back = await call_ok(
                    fourth, "register_agent_session", {"worker_id": a_id, "room_id": ROOM}
                )
    assert back["agent_session"]["session_id"] == a_sid
    assert back["agent_session"]["display_name"] == "Juniper"
    assert state_parts(tmp_path)["auth.token"] == OWNER_TOKEN


async def test_local_room_workers_across_two_processes(tmp_path: Path) -> None:
    """§8.3.13: in a local room two keys asking for "Cedar" get two names; a reconnect of
    worker 1 from a second process makes the first process's legacy-id send and disconnect
    fail; the successor sends; a disconnect then reconnect by worker_id keeps the name and
    session id. The messages cross processes through the SQLite file; no request names
    the room."""
    store = LocalStateStore(tmp_path / "mcp-state.json")
    with trio.fail_after(BUDGET):
        async with open_loopback_room() as room:
            env = prepare(room, tmp_path)
            async with Client(stdio_params(env), mode="legacy") as first:
                one = await register(first, "K1", "Cedar", room=LOCAL_ROOM)
                two = await register(first, "K2", "Cedar", room=LOCAL_ROOM)
                one_id, one_sid = one["worker_id"], one["agent_session"]["session_id"]
                assert one["agent_session"]["display_name"] == "Cedar"
                assert two["agent_session"]["display_name"].lower() != "cedar"
                legacy = {"agent_session_id": one_sid}
                await call_ok(first, "send_message", {**legacy, "text": "legacy hello"})
                async with Client(stdio_params(env), mode="legacy") as second:
                    args = {"worker_id": one_id, "room_id": LOCAL_ROOM}
                    moved = await call_ok(second, "register_agent_session", args)
                    assert moved["agent_session"]["session_id"] == one_sid
                    assert moved["agent_session"]["display_name"] == "Cedar"
                    error = await call_error(first, "send_message", {**legacy, "text": "x"})
                    assert "replaced" in error
                    error = await call_error(first, "disconnect_agent_session", legacy)
                    assert "replaced" in error
                    stored = store.stored_session(one_sid)
                    assert stored is not None
                    assert not stored.ended_at
                    args = {"worker_id": one_id, "text": "successor"}
                    await call_ok(second, "send_message", args)
                    args = {"worker_id": two["worker_id"], "text": "two still"}
                    await call_ok(first, "send_message", args)
                    await call_ok(second, "disconnect_agent_session", {"worker_id": one_id})
                    args = {"worker_id": one_id, "room_id": LOCAL_ROOM}
                    back = await call_ok(second, "register_agent_session", args)
                    args = {"worker_id": one_id}  # read_messages has no cursor field
                    read = await call_ok(second, "read_messages", args)
    assert back["agent_session"]["session_id"] == one_sid
    assert back["agent_session"]["display_name"] == "Cedar"
    assert [(m["text"], m["sender"]) for m in read["messages"]] == [
        ("legacy hello", "Cedar"),
        ("successor", "Cedar"),
        ("two still", two["agent_session"]["display_name"]),
    ]
    assert [r.path for r in room.fake.requests if LOCAL_ROOM in r.path] == []
