"""Memory and requests for people through the tools, at the edges ``_knowledge_tools`` holds.

* A local room keeps no memory and no requests: writing either is refused
  with the local room's text, as reading is.
* A record is shown as the room stores it, except for a credential of the
  call: a worker that pasted its own session token into a record (which the
  tool's description warns against) never reads it back, nor is it echoed.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import trio
import trio.testing
from mcp import Client

from letagents_trio._redact import REDACTED
from letagents_trio.mcp_server import create_server
from letagents_trio.mcp_server._task_tools import LOCAL_BOARD_TEXT

from .helpers import call_error, config_for, register
from .test_local_rooms import LOCAL_ROOM, local_server

if TYPE_CHECKING:
    from pathlib import Path

    from letagents_trio.mcp_server import ServerConfig
    from letagents_trio.testing import FakeRoom


def state_record(config: ServerConfig, worker: dict[str, Any]) -> dict[str, Any]:
    """The state file's record of the session ``register`` answered for ``worker``."""
    state = json.loads(config.state_path.read_text())
    record: dict[str, Any] = state["agent_sessions"][worker["agent_session"]["session_id"]]
    return record


FACT = {"client_id": "fact-0001", "category": "decision", "title": "Use trio", "body": "Decided."}
ASK = {"client_id": "ask-00001", "category": "question", "title": "Which?", "body": "A or B?"}


async def test_a_local_room_keeps_no_memory_and_no_requests(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    with trio.fail_after(60):
        async with Client(local_server(fake_room, tmp_path), mode="legacy") as client:
            worker_id = (await register(client, "k1", "Juniper", room=LOCAL_ROOM))["worker_id"]
            refusals = [
                await call_error(client, tool, {"worker_id": worker_id, **fields})
                for tool, fields in (("remember_room_fact", FACT), ("request_human_input", ASK))
            ]
    assert refusals == [LOCAL_BOARD_TEXT, LOCAL_BOARD_TEXT]
    assert [r.path for r in fake_room.requests if LOCAL_ROOM in r.path] == []


async def test_a_workers_own_token_in_a_record_is_never_shown_back(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    config = config_for(fake_room, tmp_path)
    with trio.fail_after(60):
        async with Client(create_server(config, transport=fake_room.transport)) as client:
            worker = await register(client)
            token = state_record(config, worker)["session_token"]
            who = {"worker_id": worker["worker_id"]}
            shown = [
                await client.call_tool("remember_room_fact", {**who, **FACT, "body": token}),
                await client.call_tool("get_room_memory", who),
                await client.call_tool("request_human_input", {**who, **ASK, "body": token}),
                await client.call_tool("get_human_requests", who),
            ]
    for result in shown:
        assert not result.is_error, getattr(result.content[0], "text", "")
        (block,) = result.content
        text = getattr(block, "text", "")
        assert token not in text
        assert REDACTED in text
