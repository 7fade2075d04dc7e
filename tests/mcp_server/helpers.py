"""Helpers shared by the MCP tests: configs, and tool calls that must succeed or fail."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Final

from mcp_types import CallToolResult, TextContent

from letagents_trio.mcp_server import ServerConfig

if TYPE_CHECKING:
    from pathlib import Path

    from mcp import Client

    from letagents_trio.testing import FakeRoom

ROOM: Final = "room_shared"
# What configs that need an HTTPS room name (worker bearers, supervised profiles).
HTTPS_URL: Final = "https://room.test"


def config_for(room: FakeRoom, tmp_path: Path, **changes: Any) -> ServerConfig:
    """A server config pointing at ``room``, with state files under ``tmp_path``."""
    options: dict[str, Any] = {
        "api_url": room.api_url,
        "token": room.owner_token,
        "state_path": tmp_path / "mcp-state.json",
        "chat_storage_settings_path": tmp_path / "chat-storage.json",
        "local_chat_path": tmp_path / "local-chat.sqlite",
    }
    options.update(changes)
    return ServerConfig(**options)


def supervised_config(room: FakeRoom, tmp_path: Path, profile: str, **changes: Any) -> ServerConfig:
    """A supervised profile's config: no owner token (the Node server refuses one for
    custodial polling), an HTTPS API URL (the transport ignores it)."""
    return config_for(room, tmp_path, profile=profile, token=None, api_url=HTTPS_URL, **changes)


def text_of(result: CallToolResult) -> str:
    """The single text block of a tool result."""
    assert len(result.content) == 1
    block = result.content[0]
    assert isinstance(block, TextContent)
    return block.text


async def call_ok(client: Client, name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    """Call a tool that must succeed; return its JSON result.

    Cancellation:
        A checkpoint; cancelled, the SDK tells the server (``notifications/cancelled``).
    """
    result = await client.call_tool(name, arguments)
    assert not result.is_error, text_of(result)
    value = json.loads(text_of(result))
    assert isinstance(value, dict)
    return value


async def call_error(client: Client, name: str, arguments: dict[str, Any]) -> str:
    """Call a tool that must fail; return its error text.

    Cancellation:
        As :func:`call_ok`.
    """
    result = await client.call_tool(name, arguments)
    assert result.is_error, text_of(result)
    return text_of(result)


async def register(
    client: Client, key: str = "k1", name: str | None = "Juniper", room: str = ROOM
) -> dict[str, Any]:
    """Create a worker with ``key`` (and ``name`` when given); return the tool's result.

    Cancellation:
        As :func:`call_ok`.
    """
    args: dict[str, Any] = {"room_id": room, "registration_key": key}
    if name is not None:
        args["display_name"] = name
    return await call_ok(client, "register_agent_session", args)
