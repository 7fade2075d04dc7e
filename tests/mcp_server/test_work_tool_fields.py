"""What the board tools pass on to the room, and what the board hides (issue 45).

Each test holds one field or default a tool sends, checked twice: in the
request the room got and in what the room then did with it, so that a tool
that drops the field fails the test whichever way the answer is shaped. The
SDK's in-memory client against a FakeRoom (the reference room), under
``autojump_clock``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import trio
import trio.testing

from letagents_trio._redact import REDACTED
from letagents_trio.room_server import Credentials

from .helpers import ROOM, call_error, call_ok
from .test_work_tools import alder_and_birch

if TYPE_CHECKING:
    from pathlib import Path

    from mcp import Client

    from letagents_trio.testing import FakeRoom

TASKS = f"/rooms/{ROOM}/tasks"


def admin_moves(fake_room: FakeRoom, task_id: str, status: str) -> None:
    """The room's admin, as a person, moves a task (accepts, cancels, closes)."""
    admin = Credentials(owner_token=fake_room.person_token)  # the room's admin, signed in
    answer = fake_room.room.work.tasks.patch(ROOM, task_id, admin, {"status": status})
    assert answer.status == 200, answer.body


def sent_bodies(fake_room: FakeRoom, method: str, path: str) -> list[Any]:
    """The bodies of the requests the room got for ``method path``, in order."""
    return [r.body for r in fake_room.requests if (r.method, r.path) == (method, path)]


async def board_task(client: Client, worker: str, title: str) -> dict[str, Any]:
    """The one task with ``title`` on the whole board, as get_board shows it."""
    board = await call_ok(client, "get_board", {"worker_id": worker, "open_only": False})
    (task,) = [t for t in board["tasks"] if t["title"] == title]
    assert isinstance(task, dict)
    return task


async def test_add_task_passes_the_description_and_the_source_message_to_the_room(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    """An agent's description and the message the work was agreed in reach the room's
    task; without them the room's task has neither."""
    with trio.fail_after(60):
        async with alder_and_birch(fake_room, tmp_path) as (client, alder, _):
            a = alder["worker_id"]
            await call_ok(client, "send_message", {"worker_id": a, "text": "let's fix CI"})
            read = await call_ok(client, "read_messages", {"worker_id": a, "limit": 1})
            (agreed,) = read["messages"]
            described = {
                "worker_id": a,
                "title": "Fix CI",
                "description": "The runner image lacks git.",
                "source_message_id": agreed["id"],
            }
            await call_ok(client, "add_task", described)
            await call_ok(client, "add_task", {"worker_id": a, "title": "Bare"})
            task = await board_task(client, a, "Fix CI")
            bare = await board_task(client, a, "Bare")
    assert (task["description"], task["source_message_id"]) == (
        "The runner image lacks git.",
        agreed["id"],
    )
    assert (bare["description"], bare["source_message_id"]) == (None, None)
    assert sent_bodies(fake_room, "POST", TASKS) == [
        {
            "title": "Fix CI",
            "description": "The runner image lacks git.",
            "source_message_id": agreed["id"],
        },
        {"title": "Bare"},
    ]


async def test_get_board_hides_done_and_cancelled_tasks_unless_asked(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    """By default the board is the open tasks (``open=true``); ``open_only`` false shows
    every task, and then a status picks some."""
    with trio.fail_after(60):
        async with alder_and_birch(fake_room, tmp_path) as (client, alder, _):
            a = alder["worker_id"]
            for title in ("open", "cancelled", "done"):
                await call_ok(client, "add_task", {"worker_id": a, "title": title})
            cancelled = (await board_task(client, a, "cancelled"))["id"]
            done = (await board_task(client, a, "done"))["id"]
            admin_moves(fake_room, cancelled, "cancelled")
            for status in ("accepted", "assigned", "in_progress", "done"):
                # The admin acts as a person: no lease is needed for these moves.
                admin_moves(fake_room, done, status)

            async def titles(**args: Any) -> list[str]:
                board = await call_ok(client, "get_board", {"worker_id": a, **args})
                return [t["title"] for t in board["tasks"]]

            assert await titles() == ["open"]
            assert await titles(open_only=True) == ["open"]
            assert await titles(open_only=False) == ["open", "cancelled", "done"]
            assert await titles(open_only=False, status="cancelled") == ["cancelled"]


async def test_a_handoff_names_the_target_session_and_instance_to_the_room(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    """handoff_task_lease sends ``target_actor_instance_id`` and ``target_agent_session_id``
    when given: the room then hands the lease to that session only, and refuses one that
    its key does not have."""
    with trio.fail_after(60):
        async with alder_and_birch(fake_room, tmp_path) as (client, alder, registered):
            a, birch = alder["worker_id"], registered["agent_session"]
            await call_ok(client, "add_task", {"worker_id": a, "title": "Fix the build"})
            task_id = (await board_task(client, a, "Fix the build"))["id"]
            admin_moves(fake_room, task_id, "accepted")
            await call_ok(client, "claim_task", {"worker_id": a, "task_id": task_id})
            instance = fake_room.room.store.get_session(birch["session_id"])
            assert instance is not None
            instance_id = instance.agent_instance_id
            assert instance_id
            base = {"worker_id": a, "task_id": task_id, "target_agent_key": birch["agent_key"]}
            wrong_session = await call_error(
                client, "handoff_task_lease", {**base, "target_agent_session_id": "as_nobody"}
            )
            assert wrong_session.startswith("API error 409: ")
            assert "target_agent_session_id as_nobody" in wrong_session
            wrong_instance = await call_error(
                client, "handoff_task_lease", {**base, "target_actor_instance_id": "worker_no"}
            )
            assert wrong_instance.startswith("API error 409: ")
            assert "target_actor_instance_id worker_no" in wrong_instance
            named = {
                **base,
                "target_actor_instance_id": instance_id,
                "target_agent_session_id": birch["session_id"],
            }
            handed = await call_ok(client, "handoff_task_lease", named)
    assert handed["new_lease"]["agent_session_id"] == birch["session_id"]
    sent = sent_bodies(fake_room, "POST", f"{TASKS}/{task_id}/lease-action")
    target = {"action": "handoff", "target_actor_key": birch["agent_key"]}
    assert sent == [
        {**target, "target_agent_session_id": "as_nobody"},
        {**target, "target_actor_instance_id": "worker_no"},
        {
            **target,
            "target_actor_instance_id": instance_id,
            "target_agent_session_id": birch["session_id"],
        },
    ]


async def test_board_answers_say_success_and_never_show_the_workers_token(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    """A task whose title quotes the worker's own session token is answered, by add_task
    and by get_board, with the token redacted."""
    with trio.fail_after(60):
        async with alder_and_birch(fake_room, tmp_path) as (client, alder, _):
            a, session_id = alder["worker_id"], alder["agent_session"]["session_id"]
            state = json.loads((tmp_path / "mcp-state.json").read_text())
            token = state["agent_sessions"][session_id]["session_token"]
            title = f"rotate {token}"
            added = await call_ok(client, "add_task", {"worker_id": a, "title": title})
            board = await call_ok(client, "get_board", {"worker_id": a})
    assert (added["success"], added["task"]["title"]) == (True, f"rotate {REDACTED}")
    assert (board["success"], [t["title"] for t in board["tasks"]]) == (
        True,
        [f"rotate {REDACTED}"],
    )
