"""What ``register_agent_session`` answers when a registration resumes earlier work.

A worker whose session the room ended while it held a task's work lease
registers again: the room hands the lease to the new session, and the tool's
answer names each adopted lease (``<task> (<kind>)``) in the text the
session tools give, on the worker path and on the legacy one.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import trio
import trio.testing
from mcp import Client

from letagents_trio._redact import REDACTED
from letagents_trio.mcp_server import create_server
from letagents_trio.mcp_server._session_tools import RESUMED_WORK

from .helpers import ROOM, call_ok, config_for, register, text_of
from .test_fidelity import REGISTRATIONS
from .test_work_tools import accept

if TYPE_CHECKING:
    from pathlib import Path

    from letagents_trio.testing import FakeRoom


async def test_a_worker_registered_again_is_told_the_leases_it_resumes(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
    with trio.fail_after(60):
        async with Client(server, mode="legacy") as client:
            first = await register(client, "k1", "Juniper")
            worker_id = first["worker_id"]
            tasks = []
            for title in ("one", "two"):
                added = await call_ok(client, "add_task", {"worker_id": worker_id, "title": title})
                accept(fake_room, added["task"]["id"])
                args = {"worker_id": worker_id, "task_id": added["task"]["id"]}
                await call_ok(client, "claim_task", args)
                tasks.append(added["task"]["id"])
            fake_room.room.end_session(first["agent_session"]["session_id"])
            again = await call_ok(
                client, "register_agent_session", {"worker_id": worker_id, "room_id": ROOM}
            )
            quiet = await call_ok(
                client, "register_agent_session", {"worker_id": worker_id, "room_id": ROOM}
            )
    # The room hands the leases over in an order of its own.
    texts = {
        RESUMED_WORK.format(items=", ".join(f"{task} (work)" for task in order))
        for order in (tasks, tasks[::-1])
    }
    assert again["resumed_work"] in texts
    assert "resumed_work" not in quiet


async def test_a_legacy_session_registered_again_is_told_the_leases_it_resumes(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
    with trio.fail_after(60):
        async with Client(server, mode="legacy") as client:
            first = await call_ok(client, "register_agent_session", {"room_id": ROOM})
            session_id = first["agent_session_id"]
            added = await call_ok(
                client, "add_task", {"agent_session_id": session_id, "title": "one"}
            )
            task_id = added["task"]["id"]
            accept(fake_room, task_id)
            args = {"agent_session_id": session_id, "task_id": task_id}
            await call_ok(client, "claim_task", args)
            fake_room.room.end_session(session_id)
            again = await call_ok(client, "register_agent_session", {"room_id": ROOM})
    assert again["resumed_work"] == RESUMED_WORK.format(items=f"{task_id} (work)")
    assert list(again) == [
        "success",
        "agent_session",
        "agent_session_id",
        "resumed_work",
        "use_agent_session_id",
    ]


async def test_a_legacy_registration_sends_its_runtime_and_branch(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/feature-x\n")
    server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
    with trio.fail_after(10):
        async with Client(server, mode="legacy") as client:
            args = {"room_id": ROOM, "runtime": "codex", "cwd": str(repo)}
            await call_ok(client, "register_agent_session", args)
    (sent,) = fake_room.requests_to("POST", REGISTRATIONS)
    assert sent.body is not None
    assert (sent.body["runtime"], sent.body["repo_branch"]) == ("codex", "feature-x")


def token_as_name(answer: Any) -> Any:
    """A registration's answer whose session goes by its own token (a room gone wrong)."""
    session = answer.get("agent_session", answer)
    session["display_name"] = session["session_token"]
    return answer


async def test_a_room_that_shows_a_sessions_token_never_gets_it_into_the_answer(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    fake_room.on("POST", REGISTRATIONS).rewrite(token_as_name)
    server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
    with trio.fail_after(10):
        async with Client(server, mode="legacy") as client:
            answer = await client.call_tool("register_agent_session", {"room_id": ROOM})
    shown = json.loads(text_of(answer))
    assert shown["agent_session"]["display_name"] == REDACTED
