"""Wake rules, post_reasoning and workspace captures over the SDK's in-memory client.

Against a FakeRoom whose background work (``Room.run``) runs in the test's
nursery. Wake-rule timing runs on ``autojump_clock``; the capture tests run
git in a scratch repository, so they use the real clock (bounded).
"""

from __future__ import annotations

import json
import subprocess
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import trio
import trio.testing
from mcp import Client

from letagents_trio.mcp_server import create_server
from letagents_trio.mcp_server._wake_tools import LOCAL_ROOM_NOTE
from letagents_trio.room_server import Credentials

from .helpers import ROOM, call_error, call_ok, config_for, register

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from letagents_trio.testing import FakeRoom


@asynccontextmanager
async def two_workers(
    fake_room: FakeRoom, tmp_path: Path
) -> AsyncIterator[tuple[Client, dict[str, Any], dict[str, Any]]]:
    """A server's SDK client with Alder and Birch registered, and the room's loop running."""
    server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
    async with trio.open_nursery() as nursery:
        await nursery.start(fake_room.room.run)
        async with Client(server, mode="legacy") as client:
            yield (
                client,
                await register(client, "ka", "Alder"),
                await register(client, "kb", "Birch"),
            )
        nursery.cancel_scope.cancel(reason="test done")


async def wakes_for(client: Client, worker: dict[str, Any]) -> list[dict[str, Any]]:
    read = await call_ok(client, "read_messages", {"worker_id": worker["worker_id"]})
    return [
        m
        for m in read["messages"]
        if (m.get("addressed_to") or {}).get("agent_key") == worker["agent_session"]["agent_key"]
    ]


async def test_a_worker_is_woken_by_its_timer_and_by_its_tasks_transition(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    with trio.fail_after(300):
        async with two_workers(fake_room, tmp_path) as (client, alder, birch):
            a = alder["worker_id"]
            start = trio.current_time()
            timer = {"worker_id": a, "event": "timer", "arguments": {"after_ms": 60_000}}
            added = await call_ok(client, "add_wake_rule", {**timer, "note": "check CI"})
            assert added["created"] is True
            again = await call_ok(client, "add_wake_rule", timer)
            assert (again["created"], again["rule"]["id"]) == (False, added["rule"]["id"])
            task = await call_ok(client, "add_task", {"worker_id": a, "title": "t"})
            task_id = task["task"]["id"] if "task" in task else task["id"]
            rule = {"event": "task.status_changed", "arguments": {"task_id": task_id}}
            await call_ok(client, "add_wake_rule", {"worker_id": a, **rule})
            listed = await call_ok(client, "list_wake_rules", {"worker_id": a})
            assert [r["event"] for r in listed["active"]] == ["timer", "task.status_changed"]
            # Birch may not cancel Alder's rule: the room's text comes back.
            other = await call_error(
                client,
                "cancel_wake_rule",
                {"worker_id": birch["worker_id"], "rule_id": added["rule"]["id"]},
            )
            assert "You can cancel only your own wake rules." in other
            # The task's own transition wakes Alder at once.
            admin = Credentials(owner_token=fake_room.person_token)  # the room's admin, signed in
            moved = fake_room.room.work.tasks.patch(ROOM, task_id, admin, {"status": "accepted"})
            assert moved.status == 200, moved.body
            (woken,) = await wakes_for(client, alder)
            assert f"{task_id} moved to accepted" in woken["text"]
            await trio.sleep(60 - (trio.current_time() - start))
            await trio.testing.wait_all_tasks_blocked()
            woken_twice = await wakes_for(client, alder)
            assert len(woken_twice) == 2
            assert "Scheduled check-in" in woken_twice[1]["text"]
            assert await wakes_for(client, birch) == []


async def test_bad_wake_rules_get_the_cause(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    with trio.fail_after(60):
        async with two_workers(fake_room, tmp_path) as (client, alder, _):
            a = alder["worker_id"]
            past = {"worker_id": a, "event": "timer", "arguments": {"at": "2020-01-01T00:00:00Z"}}
            assert "A timer must be at least 30 seconds away." in await call_error(
                client, "add_wake_rule", past
            )
            far = {"worker_id": a, "event": "timer", "arguments": {"after_ms": 8 * 86_400_000}}
            assert "A timer can be at most 7 days away." in await call_error(
                client, "add_wake_rule", far
            )
            unknown = await call_error(client, "add_wake_rule", {"worker_id": a, "event": "cron"})
            assert "event" in unknown
            missing = await call_error(
                client, "cancel_wake_rule", {"worker_id": a, "rule_id": "wake_0abc"}
            )
            assert "Wake rule not found in this room." in missing
            # Writes need a worker: the owner's own call sends nothing.
            owner = await call_error(client, "add_wake_rule", {"room_id": ROOM, "event": "timer"})
            assert "worker" in owner.lower()


async def test_local_rooms_answer_the_node_note(fake_room: FakeRoom, tmp_path: Path) -> None:
    settings = tmp_path / "chat-storage.json"
    settings.write_text(json.dumps({"mode": "cloud", "roomOverrides": {"local_room": "local"}}))
    server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
    with trio.fail_after(30):
        async with Client(server, mode="legacy") as client:
            listed = await call_ok(client, "list_wake_rules", {"room_id": "local_room"})
            assert listed == {"note": LOCAL_ROOM_NOTE, "active": [], "recent": []}
            local = (await register(client, "kl", "Larch", room="local_room"))["worker_id"]
            timer = {"worker_id": local, "event": "timer", "arguments": {"after_ms": 60_000}}
            assert await call_error(client, "add_wake_rule", timer) == LOCAL_ROOM_NOTE
            cancel = {"worker_id": local, "rule_id": "wake_1"}
            assert await call_error(client, "cancel_wake_rule", cancel) == LOCAL_ROOM_NOTE
            capture = {"worker_id": local, "room_id": "local_room"}
            refused = await call_error(client, "begin_workspace_capture", capture)
            assert refused.startswith("Workspace sharing requires a hosted LetAgents room.")


async def test_post_reasoning_replaces_its_snapshot_and_posts_a_milestone(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    with trio.fail_after(60):
        async with two_workers(fake_room, tmp_path) as (client, alder, _):
            a = alder["worker_id"]
            first = await call_ok(
                client, "post_reasoning", {"worker_id": a, "summary": "reading", "goal": "fix"}
            )
            assert first["success"] is True
            second = await call_ok(
                client,
                "post_reasoning",
                {
                    "worker_id": a,
                    "summary": "found it",
                    "milestone": "root cause found",
                    "confidence": 0.8,
                },
            )
            assert second["session"]["id"] == first["session"]["id"]
            assert second["session"]["summary"] == "found it"
            assert second["session"]["latest_payload"]["confidence"] == 0.8
            assert second["milestone_message_id"] is not None
            read = await call_ok(client, "read_messages", {"worker_id": a})
            assert read["messages"][-1]["text"] == "root cause found"
            bad = await call_error(
                client, "post_reasoning", {"worker_id": a, "summary": "x", "confidence": 2}
            )
            assert "confidence" in bad


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


def scratch_repository(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "t@example.test")
    _git(repo, "config", "user.name", "T")
    (repo / "app.py").write_text("print('one')\n")
    (repo / ".gitignore").write_text("*.log\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "start")
    (repo / "notes.txt").write_text("untracked before\n")  # captured in the baseline
    return repo


async def test_a_capture_publishes_its_changed_files_and_a_retry_finishes_it(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    repo = scratch_repository(tmp_path)
    with trio.fail_after(60):
        async with two_workers(fake_room, tmp_path) as (client, alder, birch):
            a = alder["worker_id"]
            args = {"worker_id": a, "room_id": ROOM}
            begun = await call_ok(client, "begin_workspace_capture", {**args, "cwd": str(repo)})
            assert begun["baseline_available"] is True
            again = await call_ok(
                client, "begin_workspace_capture", {**args, "cwd": str(repo / ".")}
            )
            assert again["capture_id"] == begun["capture_id"]
            (repo / "app.py").write_text("print('two')\nprint('three')\n")
            (repo / "new.py").write_text("x = 1\n")
            (repo / "debug.log").write_text("ignored\n")
            # The first attempt reaches the room with its message, then loses the review.
            fake_room.on("POST", f"/rooms/{ROOM}/agent-work").drop_after_commit()
            publish = {**args, "capture_id": begun["capture_id"], "summary": "Print two lines."}
            await call_error(client, "publish_workspace_capture", publish)
            done = await call_ok(client, "publish_workspace_capture", publish)
            assert done["status"] == "published"
            assert await call_ok(client, "publish_workspace_capture", publish) == done
            read = await call_ok(client, "read_messages", {"worker_id": birch["worker_id"]})
            (summary,) = [m for m in read["messages"] if m["text"] == "Print two lines."]
            work = summary["agent_work"]
            changed = {
                f["path"]: (f["status"], f["additions"], f["deletions"]) for f in work["files"]
            }
            assert changed == {"app.py": ("modified", 2, 1), "new.py": ("added", 1, 0)}
            assert work["review_complete"] is True


async def test_capture_bad_input_names_the_cause(fake_room: FakeRoom, tmp_path: Path) -> None:
    plain = tmp_path / "plain"
    plain.mkdir()
    with trio.fail_after(60):
        async with two_workers(fake_room, tmp_path) as (client, alder, _):
            args = {"worker_id": alder["worker_id"], "room_id": ROOM}
            not_repo = await call_error(
                client, "begin_workspace_capture", {**args, "cwd": str(plain)}
            )
            assert f"{plain} is not inside a git repository." in not_repo
            never = await call_error(
                client,
                "publish_workspace_capture",
                {**args, "capture_id": "0b0b0b0b-0b0b-4b0b-8b0b-0b0b0b0b0b0b", "summary": "s"},
            )
            assert "This worker has no such capture." in never
            assert list((tmp_path / "mcp-state.json.workspaces").glob("*")) == []


def test_each_profile_serves_these_tools_as_nodes_does() -> None:
    """Node's register-tools.ts: wake rules and post_reasoning in every profile, the
    workspace captures only in autonomous_mcp_worker and interactive_desktop."""
    from letagents_trio.mcp_server._profiles import EXECUTION_PROFILES
    from letagents_trio.mcp_server._tools import registered_tool_names

    everywhere = {"add_wake_rule", "list_wake_rules", "cancel_wake_rule", "post_reasoning"}
    captures = {"begin_workspace_capture", "publish_workspace_capture"}
    for profile in EXECUTION_PROFILES:
        served = set(registered_tool_names(profile, "cursor"))
        assert everywhere <= served, profile
        own = profile in ("autonomous_mcp_worker", "interactive_desktop")
        assert (captures <= served) is own, profile
        assert (captures & served == set()) is not own, profile
