"""Every failure a user can cause names its cause and the next step (issue 14).

Over the MCP tools, as a host shows them: an unreachable room (its URL and the
network error), a refused owner token (the variable or file it came from), no
owner token at all (``LETAGENTS_TOKEN`` and the state file, and nothing
stored), and a read without a session (called a read, not a write). The
start-up refusals (an API URL that is not one, an unknown profile) are in
``tests/mcp_server/test_config.py`` and, over a real process,
``tests/e2e/test_commands.py``.
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path
from typing import TYPE_CHECKING

import httpx2
import trio
from mcp import Client

from letagents_trio._protocol import MAX_MESSAGE_CHARS
from letagents_trio.mcp_server import ServerConfig, create_server
from letagents_trio.workers import LocalStateStore

from .helpers import ROOM, call_error, config_for, register, text_of

if TYPE_CHECKING:
    import pytest

    from letagents_trio.testing import FakeRoom

RETRY = (
    " Then retry with the same worker_id or registration_key."
    " Saved worker identities have not been changed."
)


async def register_error(config: ServerConfig, transport: httpx2.AsyncBaseTransport) -> str:
    with trio.fail_after(10):
        async with Client(create_server(config, transport=transport)) as client:
            return await call_error(
                client, "register_agent_session", {"room_id": ROOM, "registration_key": "k"}
            )


async def test_an_unreachable_room_is_named_with_its_url_and_the_network_error(
    tmp_path: Path,
) -> None:
    def refuse(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("[Errno 111] Connection refused", request=request)

    config = ServerConfig(api_url="http://127.0.0.1:9", token="t", state_path=tmp_path / "s.json")
    text = await register_error(config, httpx2.MockTransport(refuse))
    assert text == (
        "Could not verify your LetAgents account at http://127.0.0.1:9: the room did not answer"
        " (ConnectError: [Errno 111] Connection refused). Check that the room is running at that"
        " address (the MCP server's LETAGENTS_API_URL)." + RETRY
    )
    assert not (tmp_path / "s.json").exists()


async def test_a_url_with_a_wrong_path_names_the_url_not_a_failing_room(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    """Issue 29. Before: ``HTTP 404. The room is failing; retry once it answers again.``"""
    api_url = f"{fake_room.api_url}/api"
    config = ServerConfig(api_url=api_url, token="t", state_path=tmp_path / "s.json")
    text = await register_error(config, fake_room.transport)
    assert text == (
        f"Could not verify your LetAgents account at {api_url}: GET /api/agents/me answered"
        " HTTP 404. No letagents room API answers at that address: a server that is not a"
        " room, or a path the room API does not have, answers so. Correct the address (the MCP"
        " server's LETAGENTS_API_URL): it is the room API's base URL, such as"
        " http://127.0.0.1:3001 for letagents-trio room." + RETRY
    )


async def test_a_refused_token_from_the_environment_names_letagents_token(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    env = {
        "LETAGENTS_API_URL": fake_room.api_url,
        "LETAGENTS_TOKEN": "not-the-owner-token",
        "LETAGENTS_STATE_PATH": str(tmp_path / "s.json"),
    }
    text = await register_error(ServerConfig.from_env(env), fake_room.transport)
    assert text == (
        f"Could not verify your LetAgents account at {fake_room.api_url}: the room refused the"
        " owner token (HTTP 401). The owner token came from LETAGENTS_TOKEN: replace it with a"
        " valid owner token for this room and restart the MCP server." + RETRY
    )
    assert "not-the-owner-token" not in text


async def test_a_refused_token_from_the_state_file_names_the_file(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    """Issue 28 row 10: the state file's token is read for every request, as Node's
    ``getLetagentsToken`` reads it (``runtime/api.ts``), so the text asks for a new
    sign-in, not a restart; only ``LETAGENTS_TOKEN`` is read at start."""
    store = LocalStateStore(tmp_path / "s.json")
    await store.save_auth("a-stale-stored-token")
    env = {"LETAGENTS_API_URL": fake_room.api_url, "LETAGENTS_STATE_PATH": str(store.path)}
    text = await register_error(ServerConfig.from_env(env), fake_room.transport)
    assert text == (
        f"Could not verify your LetAgents account at {fake_room.api_url}: the room refused the"
        f" owner token (HTTP 401). The owner token came from auth.token of {store.path}: replace"
        " it with a valid owner token for this room (sign in again: it is read at the next"
        " call)." + RETRY
    )
    assert "a-stale-stored-token" not in text


async def test_no_token_names_the_variable_and_the_state_file_and_stores_nothing(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    """Issue 28 row 10: a sign-in stored in the state file is read at the next call
    (Node's ``runtime/api.ts`` reads ``auth.token`` for every request); only the
    variable needs a restart."""
    state = tmp_path / "mcp-state.json"
    text = await register_error(config_for(fake_room, tmp_path, token=None), fake_room.transport)
    assert text == (
        "Sign in before registering a worker in a hosted room: this MCP server has no owner"
        f" token. Store it as auth.token in {state} (the Node letagents client's sign-in writes"
        " it there; it is read at the next call), or sign in from the chat with"
        " start_device_auth and poll_device_auth, or set LETAGENTS_TOKEN to it and restart the"
        " MCP server. Rooms marked local in the chat-storage settings need no sign-in."
    )
    assert not state.exists()
    assert fake_room.requests == []


async def test_a_damaged_state_file_is_named_as_damaged_not_as_no_sign_in(
    fake_room: FakeRoom, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Issue 30, row 9: before, a damaged file (here cut short mid-write) read
    as no sign-in at all, and the owner was told to sign in again, over a
    file nothing would write, with no word of the damage in the log."""
    state = tmp_path / "mcp-state.json"
    damaged = b'{"auth": {"token": "a-stored-tok'
    state.write_bytes(damaged)
    with caplog.at_level(logging.ERROR, logger="letagents_trio"):
        text = await register_error(
            config_for(fake_room, tmp_path, token=None), fake_room.transport
        )
    assert text.startswith(
        f"Cannot read the sign-in: the state file {state} is damaged (not valid JSON:"
    )
    assert text.endswith(
        " Nothing was written over it. Restore or repair it; meanwhile this MCP server has no"
        " owner token: set LETAGENTS_TOKEN to it and restart the MCP server."
    )
    assert "Sign in before registering" not in text
    assert state.read_bytes() == damaged
    assert fake_room.requests == []
    logged = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert any(f"the state file {state} is damaged (not valid JSON" in m for m in logged)
    assert any("worker handles stored there cannot be read" in m for m in logged)  # at start
    assert "a-stored-tok" not in caplog.text


async def test_with_a_token_a_damaged_state_file_is_named_with_its_problem(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    state = tmp_path / "mcp-state.json"
    state.write_bytes(b"[]")
    text = await register_error(config_for(fake_room, tmp_path), fake_room.transport)
    assert text == (
        "Worker state is unavailable; restore it before reconnecting.\n"
        f"state file {state}: not a JSON object but an array"
    )


async def test_a_read_without_a_session_is_refused_as_a_read(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    await fake_room.add_worker()  # the room exists
    with trio.fail_after(10):
        server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
        async with Client(server) as client:
            for tool in ("read_messages", "wait_for_messages"):
                text = await call_error(client, tool, {"room_id": ROOM})
                assert text == (
                    'API error 403: {"error":"Registered agent session credentials are'
                    " required to read this room's messages.\"}"
                ), tool
                assert "write" not in text


async def test_tool_inputs_are_refused_naming_the_field_a_worker_passes(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    """Issue 42 finding 7: a blank status or title, and a text over the limit, are refused
    before anything is sent, naming the tool's own field and the limit."""
    with trio.fail_after(10):
        server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
        async with Client(server, mode="legacy") as client:
            worker_id = (await register(client))["worker_id"]
            sent = len(fake_room.requests)
            refusals: list[str] = []
            for tool, arguments in [
                ("post_status", {"status": " \t"}),
                ("add_task", {"title": ""}),
                ("post_status", {"status": "x" * MAX_MESSAGE_CHARS}),
                ("send_message", {"text": "x" * (MAX_MESSAGE_CHARS + 1)}),
            ]:
                result = await client.call_tool(tool, {"worker_id": worker_id, **arguments})
                assert result.is_error
                refusals.append(text_of(result))
            assert len(fake_room.requests) == sent
    assert refusals == [
        "status is empty: pass a short line saying what this worker is doing.",
        "title is empty: pass a short title for the task.",
        f"status is too long: at most {MAX_MESSAGE_CHARS - len('[status] ')} characters",
        f"send_message: text: String should have at most {MAX_MESSAGE_CHARS} characters."
        " Correct the arguments and call send_message again.",
    ]


async def test_a_room_that_is_down_is_named_as_users_see_it(tmp_path: Path) -> None:
    """Issue 42 finding 6: the text troubleshooting shows for a room that is not running
    is the one a real closed port on localhost gives (both of its addresses refused)."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    config = ServerConfig(
        api_url=f"http://localhost:{port}",
        token="owner-token",
        state_path=tmp_path / "mcp-state.json",
        chat_storage_settings_path=tmp_path / "chat-storage.json",
        local_chat_path=tmp_path / "local-chat.sqlite",
    )
    with trio.fail_after(20):
        async with Client(create_server(config), mode="legacy") as client:
            text = await call_error(
                client, "register_agent_session", {"room_id": ROOM, "registration_key": "k"}
            )
    assert text == (
        f"Could not verify your LetAgents account at http://localhost:{port}: the room did not"
        f" answer (ConnectError: all attempts to connect to localhost:{port} failed). Check that"
        " the room is running at that address (the MCP server's LETAGENTS_API_URL). Then retry"
        " with the same worker_id or registration_key. Saved worker identities have not been"
        " changed."
    )
