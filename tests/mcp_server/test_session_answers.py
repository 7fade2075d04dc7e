"""What ``register_agent_session`` answers when a registration resumes earlier work.

A worker whose session the room ended while it held a task's work lease
registers again: the room hands the lease to the new session, and the tool's
answer names each adopted lease (``<task> (<kind>)``) in the text the
session tools give, on the worker path and on the legacy one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio
import trio.testing
from mcp import Client

from letagents_trio.mcp_server import create_server
from letagents_trio.mcp_server._session_tools import RESUMED_WORK
from letagents_trio.room_server import Credentials

from .helpers import ROOM, call_ok, config_for, register

if TYPE_CHECKING:
    from pathlib import Path

    from letagents_trio.testing import FakeRoom


def accept(fake_room: FakeRoom, task_id: str) -> None:
    admin = Credentials(owner_token=fake_room.person_token)
    answer = fake_room.room.work.tasks.patch(ROOM, task_id, admin, {"status": "accepted"})
    assert answer.status == 200, answer.body


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
    items = ", ".join(f"{task} (work)" for task in tasks)
    assert again["resumed_work"] == RESUMED_WORK.format(items=items)
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
