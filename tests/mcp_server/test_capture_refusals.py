"""Who may capture a workspace (``_workspace_tools.py``), each refusal before any request.

Only an independent worker of this server captures: not a worker bearer's
marker (a supervisor captures for its agents), not the owner's own call (in
a local room either: a capture is a write), and not a worker whose record in
the state file lacks its agent key or instance (the captures are filed under
both: it must register again). A capture is filed under the API URL, the
room, the key and the instance; its answers never show the worker's token.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest
import trio
from mcp import Client

from letagents_trio._redact import REDACTED
from letagents_trio.mcp_server import create_server
from letagents_trio.mcp_server._workspace_tools import RECONNECT_TEXT, SUPERVISED_TEXT
from letagents_trio.workers._wire import WORKER_SESSION_REQUIRED_TEXT

from .helpers import HTTPS_URL, ROOM, call_error, call_ok, config_for, register
from .test_knowledge_answers import state_record
from .test_local_rooms import LOCAL_ROOM, local_server
from .test_wake_capture_tools import scratch_repository

if TYPE_CHECKING:
    from pathlib import Path

    from letagents_trio.testing import FakeRoom

BEARER = "lasb_a-supervisors-worker-bearer"
OTHER_ROOM = "room_other"


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


@pytest.mark.parametrize("field", ["agent_key", "agent_instance_id"])
@pytest.mark.parametrize("value", [None, "", 5], ids=["missing", "blank", "number"])
async def test_a_worker_whose_record_lacks_its_identity_must_register_again(
    fake_room: FakeRoom, tmp_path: Path, field: str, value: object
) -> None:
    """The key or the instance missing (``None``: no such field), blank, or no text."""
    config = config_for(fake_room, tmp_path)
    with trio.fail_after(30):
        async with Client(create_server(config, transport=fake_room.transport)) as client:
            worker = await register(client)
            state = json.loads(config.state_path.read_text())
            record = state["agent_sessions"][worker["agent_session"]["session_id"]]
            if value is None:
                del record[field]
            else:
                record[field] = value
            config.state_path.write_text(json.dumps(state))
            before = len(fake_room.requests)
            args = {"worker_id": worker["worker_id"], "room_id": ROOM}
            refusal = await call_error(client, "begin_workspace_capture", args)
            sent = fake_room.requests[before:]
    assert refusal == RECONNECT_TEXT
    assert sent == []


async def test_the_owner_in_a_local_room_is_told_a_worker_is_needed(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    """A capture is a write: without a worker it is refused as every write is, before
    the local room's own refusal."""
    with trio.fail_after(30):
        async with Client(local_server(fake_room, tmp_path)) as client:
            args = {"room_id": LOCAL_ROOM}
            refusal = await call_error(client, "begin_workspace_capture", args)
    assert refusal == WORKER_SESSION_REQUIRED_TEXT


async def test_a_capture_is_filed_under_its_worker_in_its_room(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    """All four parts of the owner are kept: a capture begun in another room is another."""
    repo = scratch_repository(tmp_path)
    config = config_for(fake_room, tmp_path)
    with trio.fail_after(60):
        async with Client(create_server(config, transport=fake_room.transport)) as client:
            worker = await register(client)
            worker_id = worker["worker_id"]
            other = {"worker_id": worker_id, "room_id": OTHER_ROOM}
            elsewhere = await call_ok(client, "register_agent_session", other)
            begun = {
                room: await call_ok(
                    client,
                    "begin_workspace_capture",
                    {"worker_id": worker_id, "room_id": room, "cwd": str(repo)},
                )
                for room in (ROOM, OTHER_ROOM)
            }
            state = json.loads(config.state_path.read_text())
    assert begun[ROOM]["capture_id"] != begun[OTHER_ROOM]["capture_id"]
    for room, answer in ((ROOM, worker), (OTHER_ROOM, elsewhere)):
        folder = tmp_path / "mcp-state.json.workspaces" / begun[room]["capture_id"]
        kept = json.loads((folder / "capture.json").read_text())
        record = state["agent_sessions"][answer["agent_session"]["session_id"]]
        assert kept["owner"] == {
            "api_url": config.api_url,
            "room_id": room,
            "agent_key": record["agent_key"],
            "agent_instance_id": record["agent_instance_id"],
        }


async def test_a_workers_own_token_in_a_capture_is_never_shown_back(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    """A repository whose path holds the worker's session token (pasted where it should
    not be): the answers name the workspace with the token replaced."""
    config = config_for(fake_room, tmp_path)
    with trio.fail_after(60):
        async with Client(create_server(config, transport=fake_room.transport)) as client:
            worker = await register(client)
            token = state_record(config, worker)["session_token"]
            (tmp_path / token).mkdir()
            repo = scratch_repository(tmp_path / token)
            args = {"worker_id": worker["worker_id"], "room_id": ROOM, "cwd": str(repo)}
            begun = await client.call_tool("begin_workspace_capture", args)
    assert not begun.is_error
    text = getattr(begun.content[0], "text", "")
    assert token not in text
    assert REDACTED in text
