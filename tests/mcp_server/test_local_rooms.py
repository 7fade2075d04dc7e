"""Local rooms through the MCP tools: the one LocalChat, never HTTP (PROTOCOL §8.3.14).

In-memory clients (``mcp.Client(server)``) against a FakeRoom, with
``room_local`` marked local by the chat-storage settings. Two servers built on
the same state file and chat database stand for two MCP processes: each has
its own pins and its own :class:`~letagents_trio.LocalChat`, so a message
crosses between them only through the SQLite file. Timing tests take
``autojump_clock`` (SQLite calls run on trio's thread and take no virtual
time); the lock test has a real second OS process holding SQLite's write
lock, so it runs on the real clock, bounded.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import TYPE_CHECKING, Any, Final

import trio
import trio.testing
from mcp import Client

from letagents_trio.mcp_server import create_server
from letagents_trio.mcp_server._message_tools import LOCAL_GUIDELINES_TEXT, LOCAL_THREAD_TEXT
from letagents_trio.mcp_server._task_tools import LOCAL_BOARD_TEXT
from letagents_trio.workers._local_chat import BAD_CURSOR_TEXT
from letagents_trio.workers._wire import (
    CONNECTION_REPLACED_OR_DISCONNECTED_TEXT,
    CONNECTION_REPLACED_TEXT,
    WORKER_SESSION_REQUIRED_TEXT,
)

from .helpers import call_error, call_ok, config_for, register, text_of

if TYPE_CHECKING:
    from pathlib import Path

    from letagents_trio.mcp_server import LetAgentsMCPServer
    from letagents_trio.testing import FakeRoom

LOCAL_ROOM: Final = "room_local"
# Holds SQLite's write lock on argv[1] from "locked" until its stdin closes.
LOCK_HOLDER: Final = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.read()
conn.execute("ROLLBACK")
"""


def local_server(fake_room: FakeRoom, tmp_path: Path, **changes: Any) -> LetAgentsMCPServer:
    """A server whose settings make ``room_local`` local (files shared under ``tmp_path``)."""
    settings = {"mode": "cloud", "roomOverrides": {LOCAL_ROOM: "local"}}
    (tmp_path / "chat-storage.json").write_text(json.dumps(settings))
    return create_server(config_for(fake_room, tmp_path, **changes), transport=fake_room.transport)


def local_requests(fake_room: FakeRoom) -> list[str]:
    """Every request the room got that names the local room (there must be none)."""
    return [f"{r.method} {r.path}" for r in fake_room.requests if LOCAL_ROOM in r.path]


async def test_local_room_tools_use_the_local_chat_never_http(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    """Send, read, wait, status, guidelines and disconnect in a local room: SQLite, no
    request; threads, the board, memory and requests answer the local-room texts."""
    server = local_server(fake_room, tmp_path, poll_max_ms=60_000)
    with trio.fail_after(100):
        async with Client(server, mode="legacy") as client:
            a = await register(client, "k1", "Juniper", room=LOCAL_ROOM)
            worker_id, session_id = a["worker_id"], a["agent_session"]["session_id"]
            assert session_id.startswith("local_")
            sent = await call_ok(client, "send_message", {"worker_id": worker_id, "text": "hi"})
            # Issue 44: the message's fields and the worker's identity, as Node's answer.
            assert sent["agent_identity"]["display_name"] == "Juniper"
            assert (sent["room_id"], sent["sender"], sent["agent_session_id"]) == (
                LOCAL_ROOM,
                "Juniper",
                session_id,
            )
            read = await call_ok(client, "read_messages", {"worker_id": worker_id})
            assert [m["text"] for m in read["messages"]] == ["hi"]
            assert read["last_observed_message_id"] == sent["id"]
            # A message past the cursor: the wait answers at once; so does a wait
            # without a cursor, with the newest messages.
            start = trio.current_time()
            for args in (
                {"worker_id": worker_id, "after_message_id": "0"},
                {"worker_id": worker_id},
            ):
                waited = await call_ok(client, "wait_for_messages", args)
                assert [m["text"] for m in waited["messages"]] == ["hi"]
            assert trio.current_time() == start
            # None: the wait lasts exactly the clamped timeout, then answers empty.
            args = {"worker_id": worker_id, "after_message_id": sent["id"], "timeout": 2_500}
            waited = await call_ok(client, "wait_for_messages", args)
            assert waited == {
                "messages": [],
                "room_id": LOCAL_ROOM,
                "truncated": False,
                "last_observed_message_id": sent["id"],
            }
            assert trio.current_time() == start + 2.5
            # The owner may read a local room without a worker, not send to it.
            owner_read = await call_ok(client, "read_messages", {"room_id": LOCAL_ROOM})
            assert [m["id"] for m in owner_read["messages"]] == [sent["id"]]
            args = {"room_id": LOCAL_ROOM, "text": "x"}
            assert await call_error(client, "send_message", args) == WORKER_SESSION_REQUIRED_TEXT
            args = {"worker_id": worker_id, "after_message_id": "latest"}
            assert await call_error(client, "wait_for_messages", args) == BAD_CURSOR_TEXT
            # A status is a message; the local chat keeps no threads and no board.
            status = await call_ok(
                client, "post_status", {"worker_id": worker_id, "status": "on it"}
            )
            assert status["status_posted"] == "on it"
            # As Node's answer: the worker's actor label, not its name (issue 44).
            assert status["sender"] == status["agent_identity"]["actor_label"]
            assert status["sender"].startswith("Juniper | ")
            newest = await call_ok(client, "read_messages", {"worker_id": worker_id, "limit": 1})
            assert [m["text"] for m in newest["messages"]] == ["[status] on it"]
            assert newest["truncated"] is True
            args = {"worker_id": worker_id, "text": "re", "thread_parent_id": sent["id"]}
            assert await call_error(client, "send_message", args) == LOCAL_THREAD_TEXT
            for tool, extra in (
                ("get_board", {}),
                ("add_task", {"title": "t"}),
                ("claim_task", {"task_id": "task_1"}),
                ("get_room_memory", {}),
                ("get_human_requests", {}),
            ):
                error = await call_error(client, tool, {"worker_id": worker_id, **extra})
                assert error == LOCAL_BOARD_TEXT, tool
            args = {"worker_id": worker_id}
            assert await call_error(client, "get_room_guidelines", args) == LOCAL_GUIDELINES_TEXT
            ended = await call_ok(client, "disconnect_agent_session", {"worker_id": worker_id})
            assert ended["agent_session"]["ended_at"]
            error = await call_error(client, "send_message", {"worker_id": worker_id, "text": "x"})
            assert "no current connection" in error
    assert local_requests(fake_room) == []


async def test_a_send_in_the_same_process_wakes_a_local_wait_at_once(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    """A message sent 3 s into a 30 s local wait, through the same server, returns at 3 s."""
    server = local_server(fake_room, tmp_path)
    results: list[dict[str, Any]] = []
    with trio.fail_after(100):
        async with Client(server, mode="legacy") as client:
            waiter = (await register(client, "k1", "Juniper", room=LOCAL_ROOM))["worker_id"]
            sender = (await register(client, "k2", "Cedar", room=LOCAL_ROOM))["worker_id"]
            start = trio.current_time()

            async def wait() -> None:
                args = {"worker_id": waiter, "after_message_id": "0", "timeout": 30_000}
                results.append(await call_ok(client, "wait_for_messages", args))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait)
                await trio.sleep(3.1)
                await call_ok(client, "send_message", {"worker_id": sender, "text": "hello"})
            assert trio.current_time() == start + 3.1
    (result,) = results
    assert [m["text"] for m in result["messages"]] == ["hello"]
    assert local_requests(fake_room) == []


async def test_a_waiting_predecessor_fails_once_reconnected_elsewhere(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    """§8.3.14: a wait already waiting in the first process fails at its next look (every
    0.25 s) after a second process reconnects the worker, before the successor's message
    comes; without that look it would return that message at 2.25 s (and fail after)."""
    outcome: list[tuple[float, str]] = []
    with trio.fail_after(100):
        async with (
            Client(local_server(fake_room, tmp_path), mode="legacy") as first,
            Client(local_server(fake_room, tmp_path), mode="legacy") as second,
        ):
            worker_id = (await register(first, "k1", "Juniper", room=LOCAL_ROOM))["worker_id"]
            start = trio.current_time()

            async def wait() -> None:
                args = {"worker_id": worker_id, "after_message_id": "0", "timeout": 30_000}
                result = await first.call_tool("wait_for_messages", args)
                assert result.is_error
                outcome.append((trio.current_time() - start, text_of(result)))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait)
                await trio.sleep(1.1)
                args = {"worker_id": worker_id, "room_id": LOCAL_ROOM}
                await call_ok(second, "register_agent_session", args)
                await trio.sleep(1)
                args = {"worker_id": worker_id, "text": "for the successor"}
                await call_ok(second, "send_message", args)
            # The successor reads its message; the predecessor can no longer act.
            read = await call_ok(second, "read_messages", {"worker_id": worker_id})
            assert [m["text"] for m in read["messages"]] == ["for the successor"]
            args = {"worker_id": worker_id}
            assert await call_error(first, "read_messages", args) == CONNECTION_REPLACED_TEXT
    assert outcome == [(1.25, CONNECTION_REPLACED_OR_DISCONNECTED_TEXT)]
    assert local_requests(fake_room) == []


async def test_a_send_blocked_behind_another_process_lock_fails_after_reregistration(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    """§8.3.14: another OS process holds SQLite's write lock; a send of the first MCP
    process waits for it; meanwhile a second one re-registers the worker. Once the lock
    is released the send runs its connection check inside the lock, fails, and writes
    nothing."""
    outcome: list[str] = []
    with trio.fail_after(20):
        async with (
            Client(local_server(fake_room, tmp_path), mode="legacy") as first,
            Client(local_server(fake_room, tmp_path), mode="legacy") as second,
        ):
            worker_id = (await register(first, "k1", "Juniper", room=LOCAL_ROOM))["worker_id"]
            # The first send creates the database the other process then locks.
            await call_ok(first, "send_message", {"worker_id": worker_id, "text": "before"})
            holder = await trio.lowlevel.open_process(
                [sys.executable, "-c", LOCK_HOLDER, str(tmp_path / "local-chat.sqlite")],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
            )
            assert holder.stdin is not None
            assert holder.stdout is not None
            try:
                said = b""
                while not said.endswith(b"\n"):
                    chunk = await holder.stdout.receive_some()
                    assert chunk, "the lock holder ended early"
                    said += chunk
                assert said == b"locked\n"

                async def send() -> None:
                    args = {"worker_id": worker_id, "text": "blocked"}
                    result = await first.call_tool("send_message", args)
                    assert result.is_error
                    outcome.append(text_of(result))

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(send)
                    # Everything here is in memory but the lock: with every task
                    # blocked and the send not answered, it is waiting for the lock.
                    await trio.testing.wait_all_tasks_blocked()
                    assert outcome == []
                    args = {"worker_id": worker_id, "room_id": LOCAL_ROOM}
                    await call_ok(second, "register_agent_session", args)
                    await holder.stdin.aclose()  # the holder rolls back and exits
            finally:
                holder.kill()
                with trio.move_on_after(5, shield=True):
                    await holder.wait()
            read = await call_ok(second, "read_messages", {"worker_id": worker_id})
            assert [m["text"] for m in read["messages"]] == ["before"]
            await call_ok(second, "send_message", {"worker_id": worker_id, "text": "after"})
    assert outcome == [CONNECTION_REPLACED_TEXT]
    assert local_requests(fake_room) == []
