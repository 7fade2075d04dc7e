"""A configuration only we refuse, as an MCP host meets it: the real server over stdio.

A server that exits at start shows the host nothing but "Connection closed";
one that starts lists its tools and answers each call with the setting to fix,
which the host shows the user. What the Node server refuses as it starts still
exits (tests/e2e/test_commands.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import trio
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from ..mcp_server.helpers import ROOM, call_error
from .mcp_loopback import BUDGET, stdio_params

TROUBLESHOOTING = Path(__file__).parents[2] / "docs" / "troubleshooting.md"

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX pipes")

FIX = (
    "Correct it in the env of this server's entry in the MCP host's configuration,"
    " then restart the server."
)
URL_TEXT = (
    "LETAGENTS_API_URL='not a url' is not an http(s) URL. Set it to the room API's"
    " address, for example http://localhost:3001 (the default when unset)."
)
LEVEL_TEXT = (
    "LETAGENTS_LOG_LEVEL='LOUD' is not a log level. Use one of: DEBUG, INFO, WARNING,"
    " ERROR, CRITICAL (unset means INFO)."
)
PREFIX = "The letagents MCP server started with a setting it cannot use, so no tool works: "


def env_for(tmp_path: Path, **settings: str) -> dict[str, str]:
    return {
        "LETAGENTS_STATE_PATH": str(tmp_path / "mcp-state.json"),
        "LETAGENTS_CHAT_STORAGE_SETTINGS_PATH": str(tmp_path / "chat-storage.json"),
        "LETAGENTS_LOCAL_CHAT_DB": str(tmp_path / "local-chat.sqlite"),
        **settings,
    }


@pytest.mark.parametrize(
    ("settings", "answer"),
    [
        ({"LETAGENTS_API_URL": "not a url"}, PREFIX + URL_TEXT + " " + FIX),
        ({"LETAGENTS_LOG_LEVEL": "LOUD"}, PREFIX + LEVEL_TEXT + " " + FIX),
        (
            {"LETAGENTS_API_URL": "not a url", "LETAGENTS_LOG_LEVEL": "LOUD"},
            PREFIX + LEVEL_TEXT + " " + URL_TEXT + " " + FIX,
        ),
    ],
    ids=["api-url", "log-level", "both"],
)
async def test_a_bad_setting_starts_and_every_tool_answers_the_fix(
    tmp_path: Path, settings: dict[str, str], answer: str
) -> None:
    """Issue 42 finding 6: the server starts, lists its tools, and every call
    answers isError with the setting's name and the fix; nothing reaches a room."""
    with trio.fail_after(BUDGET):
        async with Client(stdio_params(env_for(tmp_path, **settings)), mode="legacy") as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            assert {"register_agent_session", "send_message", "read_messages"} <= names
            for name, arguments in [
                ("register_agent_session", {"room_id": ROOM, "registration_key": "k1"}),
                ("read_messages", {"worker_id": "w-1"}),
            ]:
                assert await call_error(client, name, arguments) == answer
            with pytest.raises(MCPError, match="LETAGENTS_"):
                await client.read_resource(f"letagents://rooms/{ROOM}/messages")
    assert not (tmp_path / "mcp-state.json").exists()


@pytest.mark.parametrize("answer", [PREFIX + URL_TEXT + " " + FIX, PREFIX + LEVEL_TEXT + " " + FIX])
def test_troubleshooting_shows_the_answers_a_host_shows(answer: str) -> None:
    """The texts in docs/troubleshooting.md are the ones the test above receives."""
    assert f"`{answer}`" in TROUBLESHOOTING.read_text(encoding="utf-8")


async def test_a_bare_command_off_path_is_the_sdks_file_not_found(tmp_path: Path) -> None:
    """What the Python SDK's stdio client raises for a command not on PATH, as
    docs/troubleshooting.md quotes it (its repr names no command)."""
    params = StdioServerParameters(
        command="letagents-trio", args=["mcp"], env={"PATH": str(tmp_path)}
    )
    with trio.fail_after(BUDGET), pytest.raises(FileNotFoundError) as caught:
        async with Client(params, mode="legacy"):
            pass  # pragma: no cover - the process never starts
    page = TROUBLESHOOTING.read_text(encoding="utf-8")
    assert f"`FileNotFoundError: {caught.value}`" in page
    assert f"`{caught.value!r}`" in page
