"""Issue 41's wake rules and workspace captures over stdio, against ``letagents-trio room``.

Two ``letagents-trio mcp`` processes driven by the official MCP SDK's stdio
client, and a real ``letagents-trio room`` on a SQLite file. Alder adds a
timer wake rule and a ``task.status_changed`` rule on its task; the room's
admin accepts the task, and the timer comes due: Alder's ``wait_for_messages``
gets one message addressed to it for each (the timer on the real clock, two
seconds away: the room's least lead is lowered for the test with
``LETAGENTS_ROOM_WAKE_MIN_LEAD_MS``). Alder then begins a workspace capture
in a scratch git repository, edits a file, adds one, and publishes; Birch
reads the capture's summary and its changed files in the room.

Real clock and real processes, bounded (:data:`BUDGET`).
"""

from __future__ import annotations

import logging
import subprocess
import sys
from typing import TYPE_CHECKING, Any, Final

import httpx2
import pytest
import trio
from mcp import Client

from ..mcp_server.helpers import ROOM
from ..room_server.helpers import PERSON_TOKEN
from .room_process import errors_in, running_room
from .test_mcp_worker_loop import chat, tool

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX pipes")

logger = logging.getLogger("letagents_trio.tests.wake_capture")

# Two servers and a room start; a two-second timer; a capture of a tiny repository.
BUDGET: Final = 60
# The timer's lead, in ms (the room's least lead is lowered to this).
LEAD_MS: Final = 2000


def scratch_repository(root: Path) -> Path:
    repo = root / "repo"
    repo.mkdir()
    for args in (
        ("init", "-q", "-b", "main"),
        ("config", "user.email", "t@example.test"),
        ("config", "user.name", "T"),
    ):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    (repo / "build.py").write_text("STEPS = ['lint']\n")
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True, capture_output=True)
    subprocess.run(
        ["git", "commit", "-q", "-m", "start"], cwd=repo, check=True, capture_output=True
    )
    return repo


async def wakes(client: Client, worker: str, agent_key: str, after: str, count: int) -> list[Any]:
    """Wait (bounded by the caller) until ``count`` messages addressed to ``agent_key`` came."""
    found: list[Any] = []
    while len(found) < count:
        waited = await tool(
            client,
            "wait_for_messages",
            "A",
            worker_id=worker,
            after_message_id=after,
            timeout=10_000,
        )
        found += [
            m
            for m in waited["messages"]
            if (m.get("addressed_to") or {}).get("agent_key") == agent_key
        ]
        after = waited["last_observed_message_id"] or after
    return found


async def test_a_chat_is_woken_and_shares_its_capture_over_stdio(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LETAGENTS_ROOM_WAKE_MIN_LEAD_MS", str(LEAD_MS))
    repo = scratch_repository(tmp_path)
    person = {"Authorization": f"Bearer {PERSON_TOKEN}"}  # the room's admin, signed in
    with trio.fail_after(BUDGET):
        async with running_room(db=tmp_path / "room.sqlite3") as room:
            async with (
                Client(chat(room.url, tmp_path / "a"), mode="legacy") as a,
                Client(chat(room.url, tmp_path / "b"), mode="legacy") as b,
                httpx2.AsyncClient(base_url=room.url, headers=person) as admin,
            ):
                alder = await tool(
                    a,
                    "register_agent_session",
                    "A",
                    room_id=ROOM,
                    registration_key="chat-a",
                    display_name="Alder",
                )
                wa, key = alder["worker_id"], alder["agent_session"]["agent_key"]
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
                task = (await tool(a, "add_task", "A", worker_id=wa, title="Ship"))["task"]
                cursor = (await tool(a, "read_messages", "A", worker_id=wa, limit=1))[
                    "last_observed_message_id"
                ]
                task_rule = {"task_id": task["id"], "to": ["accepted"]}
                await tool(
                    a,
                    "add_wake_rule",
                    "A",
                    worker_id=wa,
                    event="task.status_changed",
                    arguments=task_rule,
                )
                timer = await tool(
                    a,
                    "add_wake_rule",
                    "A",
                    worker_id=wa,
                    event="timer",
                    arguments={"after_ms": LEAD_MS},
                    note="look at the build",
                )
                started = trio.current_time()
                accepted = await admin.patch(
                    f"/rooms/{ROOM}/tasks/{task['id']}", json={"status": "accepted"}
                )
                assert accepted.status_code == 200, accepted.text
                first, second = await wakes(a, wa, key, cursor, 2)
                assert first["text"].startswith("Your wake rule ")
                assert f"{task['id']} moved to accepted" in first["text"]
                assert second["text"].startswith(f"Your wake rule {timer['rule']['id']} fired")
                assert "Your note: look at the build" in second["text"]
                assert trio.current_time() - started >= (LEAD_MS - 1000) / 1000
                logger.info("A woken twice in %.2f s", trio.current_time() - started)
                # A captures its work in a scratch repository and shares it.
                begun = await tool(
                    a, "begin_workspace_capture", "A", worker_id=wa, room_id=ROOM, cwd=str(repo)
                )
                (repo / "build.py").write_text("STEPS = ['lint', 'test']\n")
                (repo / "ci.toml").write_text("[ci]\n")
                shared = await tool(
                    a,
                    "publish_workspace_capture",
                    "A",
                    worker_id=wa,
                    room_id=ROOM,
                    capture_id=begun["capture_id"],
                    summary="Run the tests in the build.",
                )
                assert shared["status"] == "published"
                read = await tool(b, "read_messages", "B", worker_id=wb)
                (summary,) = [
                    m for m in read["messages"] if m["text"] == "Run the tests in the build."
                ]
                files = {f["path"]: f["status"] for f in summary["agent_work"]["files"]}
                assert files == {"build.py": "modified", "ci.toml": "added"}
                logger.info("B reads the capture: %s", files)
            log = await room.stop()
    assert errors_in(log) == []
