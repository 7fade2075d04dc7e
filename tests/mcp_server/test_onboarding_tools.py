"""Onboarding through the MCP tools: device sign-in with no token, clearing it, naming the agent.

The server runs with no ``LETAGENTS_TOKEN``; the room is the reference room in
process (a FakeRoom) whose person approves on its page, driven as a browser
would. What the tools store is checked in the state file itself (where the
Node client keeps it, ``0600``), and no answer or log may carry the token or
the sign-in's request id.
"""

from __future__ import annotations

import json
import logging
import re
import stat
from pathlib import Path
from typing import Any

import pytest
import trio
from mcp import Client

from letagents_trio.mcp_server import create_server
from letagents_trio.workers import LocalStateStore

from ..device_page import approve_as_person
from .helpers import ROOM, call_error, call_ok, config_for, text_of
from .rooms import PERSON_LOGIN, PERSON_TOKEN, browser, open_room_with_person

pytestmark = pytest.mark.filterwarnings("error")


def state_of(tmp_path: Path) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((tmp_path / "mcp-state.json").read_text("utf-8"))
    return data


async def test_a_chat_with_no_token_signs_in_and_then_works(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    with trio.fail_after(20):
        async with open_room_with_person() as room:
            config = config_for(room, tmp_path, token=None)
            answers: list[str] = []
            async with Client(create_server(config, transport=room.transport)) as client:
                status = await call_ok(client, "get_onboarding_status", {"cwd": str(tmp_path)})
                assert (status["authenticated"], status["auth_source"]) == (False, "none")
                assert status["api_health"]["reachable"] is True
                refused = await call_error(client, "create_room", {})
                assert "401" in refused

                started = await call_ok(client, "start_device_auth", {})
                assert started["success"] is True
                assert "request_id" not in started
                assert started["verification_uri"] == f"{room.api_url}/device"
                status = await call_ok(client, "get_onboarding_status", {"cwd": str(tmp_path)})
                assert status["next_step"] == "poll_device_auth"
                assert status["pending_device_auth"]["user_code"] == started["user_code"]

                async with browser(room) as http:
                    page = await approve_as_person(
                        http, started["verification_uri"], started["user_code"], PERSON_TOKEN
                    )
                assert page.status_code == 200
                signed_in = await client.call_tool("poll_device_auth", {})
                answers.append(text_of(signed_in))
                authorized = json.loads(answers[-1])
                assert authorized["status"] == "authorized"
                assert authorized["account"]["login"] == PERSON_LOGIN

                made = await call_ok(client, "create_room", {})
                room_id = made["room_id"]
                registered = await call_ok(
                    client,
                    "register_agent_session",
                    {"room_id": room_id, "registration_key": "chat-1", "display_name": "Quill"},
                )
                sent = await call_ok(
                    client,
                    "send_message",
                    {"worker_id": registered["worker_id"], "text": "signed in by the device flow"},
                )
                assert sent["text"] == "signed in by the device flow"
                answers.append(json.dumps(await call_ok(client, "get_onboarding_status", {})))
    state = state_of(tmp_path)
    token = state["auth"]["token"]
    assert list(state["auth"]) == ["token", "account", "stored_at", "source"]
    assert state["auth"]["source"] == "device_flow"
    assert "pending_device_auth" not in state
    assert stat.S_IMODE((tmp_path / "mcp-state.json").stat().st_mode) == 0o600
    assert LocalStateStore(tmp_path / "mcp-state.json").owner_token() == token
    for text in (*answers, caplog.text):
        assert token not in text


async def test_the_pending_sign_in_is_where_node_keeps_it_and_reused(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with open_room_with_person() as room:
            config = config_for(room, tmp_path, token=None)
            async with Client(create_server(config, transport=room.transport)) as client:
                first = await call_ok(client, "start_device_auth", {"room_id": ROOM})
                saved = state_of(tmp_path)["pending_device_auth"]
                pending = await call_ok(client, "poll_device_auth", {})
                assert (pending["status"], pending["interval"]) == ("pending", 5)
                assert 890 <= pending["expires_in"] <= 900
                quick = await call_ok(client, "poll_device_auth", {})
                assert quick == {"success": True, "status": "slow_down", "interval": 5}
                again = await call_ok(client, "start_device_auth", {})
                forced = await call_ok(client, "start_device_auth", {"force": True})
    assert list(saved) == [
        "request_id",
        "user_code",
        "verification_uri",
        "interval_seconds",
        "expires_at",
        "started_at",
        "suggested_room_id",
    ]
    assert saved["suggested_room_id"] == ROOM
    assert saved["user_code"] == first["user_code"]
    assert again["reused_existing_request"] is True
    assert again["user_code"] == first["user_code"]
    assert forced["user_code"] != first["user_code"]
    assert "reused_existing_request" not in forced
    assert saved["request_id"] not in json.dumps([first, again])


async def test_bad_polls_are_tool_errors_naming_the_cause(tmp_path: Path) -> None:
    store = LocalStateStore(tmp_path / "mcp-state.json")
    with trio.fail_after(20):
        async with open_room_with_person() as room:
            config = config_for(room, tmp_path, token=None)
            async with Client(create_server(config, transport=room.transport)) as client:
                nothing = await call_error(client, "poll_device_auth", {})
                assert nothing == "No pending device auth request found."
                unknown = await call_error(client, "poll_device_auth", {"request_id": "f" * 32})
                assert "unknown to the room or expired" in unknown
                assert "Unknown or expired device authorization request" in unknown

                await store.save_auth("earlier-token", account={"login": "earlier"})
                started = await call_ok(client, "start_device_auth", {})
                async with browser(room) as http:
                    await approve_as_person(
                        http,
                        started["verification_uri"],
                        started["user_code"],
                        PERSON_TOKEN,
                        "deny",
                    )
                denied = await call_error(client, "poll_device_auth", {})
                assert "denied" in denied
    state = state_of(tmp_path)
    assert "pending_device_auth" not in state  # the refused sign-in is forgotten,
    assert state["auth"]["token"] == "earlier-token"  # the earlier one kept


async def test_an_expired_pending_sign_in_is_no_sign_in(tmp_path: Path) -> None:
    """A pending sign-in past its expires_at counts as none: nothing is asked of the room."""
    store = LocalStateStore(tmp_path / "mcp-state.json")
    expired = {
        "request_id": "a" * 32,
        "user_code": "BCDF-GHJK",
        "verification_uri": "http://room.test/device",
        "interval_seconds": 5,
        "expires_at": "2020-01-01T00:00:00.000Z",
        "started_at": "2020-01-01T00:00:00.000Z",
    }
    await store.update(lambda state: state.update(pending_device_auth=expired))
    with trio.fail_after(20):
        async with open_room_with_person() as room:
            config = config_for(room, tmp_path, token=None)
            async with Client(create_server(config, transport=room.transport)) as client:
                error = await call_error(client, "poll_device_auth", {})
                status = await call_ok(client, "get_onboarding_status", {"cwd": str(tmp_path)})
    assert error == "No pending device auth request found."
    assert status["pending_device_auth"] is None
    assert room.requests_to("GET", re.compile(r"/auth/device/poll/.*")) == []


async def test_clear_saved_auth_removes_only_the_sign_in(tmp_path: Path) -> None:
    path = tmp_path / "mcp-state.json"
    with trio.fail_after(20):
        async with open_room_with_person() as room:
            config = config_for(room, tmp_path, token=None)
            store = LocalStateStore(path)
            await store.save_auth("stored-token", account={"login": "owner"})
            await store.update(
                lambda s: s.update(local_host_id="host_" + "a" * 32, custom={"k": 1})
            )
            async with Client(create_server(config, transport=room.transport)) as client:
                await call_ok(client, "start_device_auth", {"force": True})
                before = state_of(tmp_path)
                cleared = await call_ok(client, "clear_saved_auth", {})
                again = await call_ok(client, "clear_saved_auth", {})
    after = state_of(tmp_path)
    assert cleared == {
        "success": True,
        "removed": {"auth": True, "pending_device_auth": True},
        "env_token_still_present": False,
    }
    assert again["removed"] == {"auth": False, "pending_device_auth": False}
    del before["auth"], before["pending_device_auth"]
    assert after == before


async def test_set_agent_name(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with open_room_with_person() as room:
            unsigned = config_for(room, tmp_path, token=None)
            async with Client(create_server(unsigned, transport=room.transport)) as client:
                refused = await call_error(client, "set_agent_name", {"name": "River Otter"})
                assert refused == "Authentication required. Run start_device_auth first."
                short = await client.call_tool("set_agent_name", {"name": " x "})
                assert short.is_error
            signed = config_for(room, tmp_path)
            async with Client(create_server(signed, transport=room.transport)) as client:
                named = await call_ok(client, "set_agent_name", {"name": "River Otter"})
                scoped = await call_ok(
                    client, "set_agent_name", {"name": "Side Kick", "conversation_id": "c1"}
                )
                current = await call_ok(client, "get_current_room", {})
    assert named["agent_identity"]["canonical_key"] == "owner/river-otter"
    assert named["message"] == 'Agent name changed to "River Otter".'
    assert state_of(tmp_path)["agent_identity"]["display_name"] == "River Otter"
    assert scoped["agent_identity"]["source"] == "local"
    (posted,) = room.requests_to("POST", "/agents")
    assert posted.body == {
        "name": "river-otter",
        "display_name": "River Otter",
        "owner_label": "owner",
    }
    assert current == {"connected": False, "message": "Not currently in any room"}
