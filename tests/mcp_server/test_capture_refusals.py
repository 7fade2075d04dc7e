"""Who may capture a workspace (``_workspace_tools.py``), each refusal before any request.

Only an independent worker of this server captures: not a worker bearer's
marker (a supervisor captures for its agents), not the owner's own call, and
not a worker whose record in the state file lacks its agent key or instance
(the captures are filed under both: it must register again).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
import trio
from mcp import Client

from letagents_trio.mcp_server import create_server
from letagents_trio.mcp_server._workspace_tools import RECONNECT_TEXT, SUPERVISED_TEXT
from letagents_trio.workers._wire import WORKER_SESSION_REQUIRED_TEXT

from .helpers import HTTPS_URL, ROOM, call_error, config_for, register

if TYPE_CHECKING:
    from pathlib import Path

    from letagents_trio.testing import FakeRoom

BEARER = "lasb_a-supervisors-worker-bearer"


async def test_a_worker_bearer_and_the_owner_capture_nothing(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    bearer = config_for(fake_room, tmp_path, token=None, worker_bearer=BEARER, api_url=HTTPS_URL)
    owner = config_for(fake_room, tmp_path / "owner")
    with trio.fail_after(30):
        async with Client(create_server(bearer, transport=fake_room.transport)) as client:
            for tool in ("begin_workspace_capture", "publish_workspace_capture"):
                args = {
                    "room_id": ROOM,
                    "capture_id": "0b0b0b0b-0b0b-4b0b-8b0b-0b0b0b0b0b0b",
                    "summary": "s",
                }
                if tool.startswith("begin"):
                    args = {"room_id": ROOM}
                assert await call_error(client, tool, args) == SUPERVISED_TEXT
        async with Client(create_server(owner, transport=fake_room.transport)) as client:
            refusal = await call_error(client, "begin_workspace_capture", {"room_id": ROOM})
    assert refusal == WORKER_SESSION_REQUIRED_TEXT
    assert fake_room.requests == []


@pytest.mark.parametrize("lost", ["agent_key", "agent_instance_id"])
async def test_a_worker_whose_record_lacks_its_identity_must_register_again(
    fake_room: FakeRoom, tmp_path: Path, lost: str
) -> None:
    config = config_for(fake_room, tmp_path)
    with trio.fail_after(30):
        async with Client(create_server(config, transport=fake_room.transport)) as client:
            worker = await register(client)
            session_id = worker["agent_session"]["session_id"]
            state = json.loads(config.state_path.read_text())
            del state["agent_sessions"][session_id][lost]
            config.state_path.write_text(json.dumps(state))
            before = len(fake_room.requests)
            args = {"worker_id": worker["worker_id"], "room_id": ROOM}
            refusal = await call_error(client, "begin_workspace_capture", args)
            sent = fake_room.requests[before:]
    assert refusal == RECONNECT_TEXT
    assert sent == []
