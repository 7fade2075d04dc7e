"""Issue 27's "done when": two chats do a room's work over stdio, against ``letagents-trio room``.

Two ``letagents-trio mcp`` processes (one per chat, each with its own state
file), driven by the official MCP SDK's stdio client as a host drives them,
and a real ``letagents-trio room`` process (a free port; the memory store,
then a SQLite file). A posts, B answers in its thread, A's wait sees the
reply with its root; A adds a task, the room's admin accepts it, B finds it
on the board, claims it, posts a status, moves it to in progress and
completes it with a PR link, and A sees it in review; B remembers a fact and
A reads it; B asks for a person's input and A sees the request; B releases
the lease it holds; the host closes both stdins, and the room has every exit
on record.

Real clock and real processes, bounded (:data:`BUDGET`). The steps are logged
(``letagents_trio.tests.worker_loop``): run with ``-o log_cli=true
--log-cli-level=INFO`` to see the loop.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import TYPE_CHECKING, Any, Final

import httpx2
import pytest
import trio
from mcp import Client, StdioServerParameters

from ..mcp_server.helpers import ROOM, call_ok
from ..room_server.helpers import OWNER_TOKEN, PERSON_TOKEN
from .room_process import errors_in, running_room

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX pipes")

logger = logging.getLogger("letagents_trio.tests.worker_loop")

# Two server processes and a room start, register and run about twenty calls.
BUDGET: Final = 60
PR_URL: Final = "https://example.test/letagents-trio/pull/27"


def chat(url: str, home: Path) -> StdioServerParameters:
    """One chat's MCP server: its own state files under ``home``, the worker profile."""
    home.mkdir()
    env = {
        **os.environ,
        "LETAGENTS_API_URL": url,
        "LETAGENTS_TOKEN": OWNER_TOKEN,
        "LETAGENTS_STATE_PATH": str(home / "mcp-state.json"),
        "LETAGENTS_CHAT_STORAGE_SETTINGS_PATH": str(home / "chat-storage.json"),
        "LETAGENTS_LOCAL_CHAT_DB": str(home / "local-chat.sqlite"),
        "LETAGENTS_EXECUTION_PROFILE": "autonomous_mcp_worker",
        "LETAGENTS_LOG_LEVEL": "WARNING",
    }
    return StdioServerParameters(
        command=sys.executable, args=["-m", "letagents_trio.mcp_server"], env=env
    )


async def tool(client: Client, name: str, who: str, **arguments: Any) -> dict[str, Any]:
    """Call a tool that must succeed, logging who called what.

    Cancellation:
        A checkpoint; cancelled, the SDK tells the server.
    """
    result = await call_ok(client, name, arguments)
    shown = {k: v for k, v in arguments.items() if k != "worker_id"}
    logger.info("%s %s %s", who, name, shown)
    return result


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_two_chats_do_the_rooms_work_over_stdio(tmp_path: Path, store: str) -> None:
    db = tmp_path / "room.sqlite3" if store == "sqlite" else None
    owner = {"Authorization": f"Bearer {OWNER_TOKEN}"}
    person = {"Authorization": f"Bearer {PERSON_TOKEN}"}  # the room's admin, signed in
    with trio.fail_after(BUDGET):
        async with running_room("--log-level", "WARNING", db=db) as room:
            logger.info("room on %s (%s store)", room.url, store)
            async with (
                Client(chat(room.url, tmp_path / "a"), mode="legacy") as a,
                Client(chat(room.url, tmp_path / "b"), mode="legacy") as b,
                httpx2.AsyncClient(base_url=room.url, headers=person) as admin,
            ):
                wa = (
                    await tool(
                        a,
                        "register_agent_session",
                        "A",
                        room_id=ROOM,
                        registration_key="chat-a",
                        display_name="Alder",
                    )
                )["worker_id"]
                wb = (
                    await tool(
                        b,
                        "register_agent_session",
                        "B",
                        room_id=ROOM,
                        registration_key="chat-b",
                        display_name="Birch",
                    )
                )["worker_id"]
                # A posts; B answers in its thread; A's wait sees the reply with its root.
                root = (
                    await tool(a, "send_message", "A", worker_id=wa, text="Who takes the build?")
                )["message"]["id"]
                await tool(
                    b,
                    "send_thread_message",
                    "B",
                    worker_id=wb,
                    text="I will.",
                    thread_parent_id=root,
                )
                waited = await tool(
                    a, "wait_for_messages", "A", worker_id=wa, after_message_id=root, timeout=10_000
                )
                (reply,) = waited["messages"]
                assert (reply["text"], reply["thread_parent_id"]) == ("I will.", root)
                assert reply["thread"]["root_message_id"] == root
                logger.info("A sees %r in the thread of %s", reply["text"], root)
                # A adds a task; the room's admin accepts it; B finds it and claims it.
                task = (await tool(a, "add_task", "A", worker_id=wa, title="Fix the build"))["task"]
                assert task["status"] == "proposed"
                accepted = await admin.patch(
                    f"/rooms/{ROOM}/tasks/{task['id']}", json={"status": "accepted"}
                )
                assert accepted.status_code == 200, accepted.text
                logger.info("the admin accepts %s", task["id"])
                board = await tool(b, "get_board", "B", worker_id=wb)
                assert [(t["id"], t["status"]) for t in board["tasks"]] == [
                    (task["id"], "accepted")
                ]
                claimed = await tool(b, "claim_task", "B", worker_id=wb, task_id=task["id"])
                assert claimed["task"]["status"] == "assigned"
                await tool(b, "post_status", "B", worker_id=wb, status=f"fixing {task['id']}")
                await tool(
                    b, "update_task", "B", worker_id=wb, task_id=task["id"], status="in_progress"
                )
                done = await tool(
                    b, "complete_task", "B", worker_id=wb, task_id=task["id"], pr_url=PR_URL
                )
                assert (done["task"]["status"], done["task"]["pr_url"]) == ("in_review", PR_URL)
                seen = await tool(a, "get_board", "A", worker_id=wa)
                assert [(t["id"], t["status"], t["pr_url"]) for t in seen["tasks"]] == [
                    (task["id"], "in_review", PR_URL)
                ]
                logger.info("A sees %s in review with %s", task["id"], PR_URL)
                # B remembers a fact and A reads it; B asks for input and A sees it.
                await tool(
                    b,
                    "remember_room_fact",
                    "B",
                    worker_id=wb,
                    client_id="fact-ci-0001",
                    category="decision",
                    title="CI",
                    body="The build runs under nox.",
                )
                memory = await tool(a, "get_room_memory", "A", worker_id=wa)
                assert [r["title"] for r in memory["records"]] == ["CI"]
                await tool(
                    b,
                    "request_human_input",
                    "B",
                    worker_id=wb,
                    client_id="ask-merge-0001",
                    category="approval",
                    title="Merge the fix?",
                    body=f"{PR_URL} is ready.",
                )
                requests = await tool(a, "get_human_requests", "A", worker_id=wa)
                assert [r["title"] for r in requests["records"]] == ["Merge the fix?"]
                # B releases the lease it holds.
                released = await tool(
                    b, "release_task_lease", "B", worker_id=wb, task_id=task["id"]
                )
                assert released["released_lease"]["status"] == "released"
                assert released["task"]["status"] == "accepted"
            # Both hosts closed stdin: each server announced its worker's exit.
            async with httpx2.AsyncClient(base_url=room.url, headers=owner) as http:
                stats = (await http.get(f"/rooms/{ROOM}/process-statistics")).json()
            logger.info(
                "stdin closed: held %d, exits announced %d, recorded %d, matched %d",
                stats["held"],
                stats["exits_announced"],
                stats["exits_recorded"],
                stats["exits_matched"],
            )
            assert stats["held"] == 0
            assert stats["exits_announced"] == stats["exits_recorded"] == 2
            assert stats["exits_matched"] == 2
            log = await room.stop()
    assert errors_in(log) == []
