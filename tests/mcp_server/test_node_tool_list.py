"""The worker profile's tools are the Node server's, and so are its room and onboarding fields.

``data/node-worker-tools.json`` holds the Node server's 58 tools of the
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
    (Path(__file__).parent / "data" / "node-worker-tools.json").read_text("utf-8")
)["tools"]
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
    tools = await tools_of(fake_room, tmp_path)
    assert sorted(tools) == sorted(NODE)


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
