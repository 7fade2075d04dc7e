"""The worker profile's tools are the Node server's, and so are its room and onboarding fields.

``node_worker_tools.json`` holds the Node server's 58 tools of the
``autonomous_mcp_worker`` profile (its local-Codex group aside) and their
input fields, read from the letagents repository.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import trio
from mcp import Client

from letagents_trio.mcp_server import create_server

from .helpers import config_for

if TYPE_CHECKING:
    from letagents_trio.testing import FakeRoom

NODE: Final[dict[str, Any]] = json.loads(
    (Path(__file__).parent / "node_worker_tools.json").read_text("utf-8")
)["tools"]
# Tools another branch adds (issue 40's board governance). Remove each name here when
# its branch is merged.
NOT_YET_HERE: Final = frozenset(
    {
        # issue 40
        "claim_task_review",
        "release_task_review",
        "get_room_events",
        "get_room_artifacts",
        "publish_room_artifact",
        "submit_review_verdict",
        "get_board_settings",
        "set_board_manager_mode",
        "assign_board_manager",
        "release_board_manager",
        "register_board_intent",
        "register_task_create_intent",
        "register_task_claim_intent",
        "register_task_close_intent",
        "register_task_lease_action_intent",
        "list_board_intents",
        "approve_board_intent",
        "deny_board_intent",
    }
)
# Issue 41's rooms and onboarding: their fields are checked one by one below.
ROOMS_AND_ONBOARDING: Final = tuple(
    name for name, tool in NODE.items() if tool["group"] in ("rooms", "onboarding")
)


async def tools_of(fake_room: FakeRoom, tmp_path: Path) -> dict[str, dict[str, Any]]:
    with trio.fail_after(10):
        server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
        async with Client(server) as client:
            return {tool.name: tool.input_schema for tool in (await client.list_tools()).tools}


async def test_the_worker_profile_lists_the_node_servers_tools(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    assert len(NODE) == 58
    assert set(NODE) >= NOT_YET_HERE
    tools = await tools_of(fake_room, tmp_path)
    assert sorted(tools) == sorted(set(NODE) - NOT_YET_HERE)


async def test_the_room_and_onboarding_tools_take_the_node_servers_fields(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    """Node's fields, plus worker_id exactly where Node's facade adds it (tools with room_id)."""
    assert len(ROOMS_AND_ONBOARDING) == 15
    tools = await tools_of(fake_room, tmp_path)
    for name in ROOMS_AND_ONBOARDING:
        node = NODE[name]
        schema = tools[name]
        expected = {*node["required"], *node["optional"], *node["worker_profile_adds_optional"]}
        assert set(schema["properties"]) == expected, name
        assert sorted(schema.get("required", [])) == sorted(node["required"]), name
