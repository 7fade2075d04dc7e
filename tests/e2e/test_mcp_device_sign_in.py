"""Issue 41's sign-in: a chat with no token signs in by the device flow and works, over stdio.

A real ``letagents-trio room`` (SQLite, a free port, a person's sign-in token
in a ``0600`` file) and two ``letagents-trio mcp`` processes driven by the
official MCP SDK's stdio client. Chat B (configured with an owner token)
makes an invite room. Chat A has no token at all: it starts a device sign-in,
a person opens the address it was given and approves the code on the room's
page (a browser's GET and form POST over real HTTP), A polls and is signed
in (the token stored in its state file, ``0600``, where the Node client keeps
it), joins B's room by its code, registers its worker and posts; B reads the
message. Real clock and processes, bounded (:data:`BUDGET`).
"""

from __future__ import annotations

import json
import os
import stat
import sys
from typing import TYPE_CHECKING, Any, Final

import httpx2
import pytest
import trio
from mcp import Client, StdioServerParameters

from ..device_page import approve_as_person
from ..mcp_server.helpers import call_ok
from ..room_server.helpers import OWNER_TOKEN
from .room_process import errors_in, running_room

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX pipes")

# A room and two servers start; about a dozen calls.
BUDGET: Final = 60
PERSON_TOKEN: Final = "a-person-signs-in-with-this"


def chat(url: str, home: Path, token: str | None) -> StdioServerParameters:
    """One chat's MCP server (its own state files under ``home``); no token when None."""
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "LETAGENTS_TOKEN"}
    env.update(
        LETAGENTS_API_URL=url,
        LETAGENTS_STATE_PATH=str(home / "mcp-state.json"),
        LETAGENTS_CHAT_STORAGE_SETTINGS_PATH=str(home / "chat-storage.json"),
        LETAGENTS_LOCAL_CHAT_DB=str(home / "local-chat.sqlite"),
        LETAGENTS_EXECUTION_PROFILE="autonomous_mcp_worker",
        LETAGENTS_LOG_LEVEL="WARNING",
    )
    if token is not None:
        env["LETAGENTS_TOKEN"] = token
    return StdioServerParameters(
        command=sys.executable, args=["-m", "letagents_trio.mcp_server"], env=env
    )


async def test_a_chat_with_no_token_signs_in_joins_by_code_and_works(tmp_path: Path) -> None:
    people = tmp_path / "people"
    people.write_text(f"{PERSON_TOKEN}=alice\n", encoding="utf-8")
    people.chmod(0o600)
    db = tmp_path / "room.sqlite3"
    with trio.fail_after(BUDGET):
        async with running_room("--person-tokens-file", str(people), db=db) as room:
            async with (
                Client(chat(room.url, tmp_path / "a", None), mode="legacy") as a,
                Client(chat(room.url, tmp_path / "b", OWNER_TOKEN), mode="legacy") as b,
            ):
                code = (await call_ok(b, "create_room", {}))["code"]
                reader = await call_ok(
                    b, "register_agent_session", {"room_id": code, "registration_key": "b"}
                )
                status = await call_ok(a, "get_onboarding_status", {"cwd": str(tmp_path)})
                assert (status["authenticated"], status["api_health"]["reachable"]) == (False, True)

                started = await call_ok(a, "start_device_auth", {"room_id": code})
                assert started["verification_uri"] == f"{room.url}/device"
                async with httpx2.AsyncClient(base_url=room.url) as browser:
                    page = await approve_as_person(
                        browser, started["verification_uri"], started["user_code"], PERSON_TOKEN
                    )
                assert page.status_code == 200
                assert "Device approved" in page.text

                signed_in = await call_ok(a, "poll_device_auth", {})
                assert signed_in["status"] == "authorized"
                assert signed_in["account"]["login"] == "alice"
                joined = await call_ok(a, "join_code", {"code": code.lower()})
                assert joined["room_id"] == code
                writer = await call_ok(
                    a,
                    "register_agent_session",
                    {"room_id": code, "registration_key": "a", "display_name": "Ash"},
                )
                posted = await call_ok(
                    a,
                    "send_message",
                    {"worker_id": writer["worker_id"], "text": "signed in without a token"},
                )
                read = await call_ok(b, "read_messages", {"worker_id": reader["worker_id"]})
                texts = [(m["text"], m["id"]) for m in read["messages"]]
                assert ("signed in without a token", posted["id"]) in texts
                answers = json.dumps([status, started, signed_in, joined, writer, posted])
            log = await room.stop()
    state_file = tmp_path / "a" / "mcp-state.json"
    state: dict[str, Any] = json.loads(state_file.read_text("utf-8"))
    assert stat.S_IMODE(state_file.stat().st_mode) == 0o600
    assert state["auth"]["source"] == "device_flow"
    assert state["auth"]["account"]["login"] == "alice"
    assert state["current_room"]["room_id"] == code
    assert "pending_device_auth" not in state
    assert state["auth"]["token"] not in answers
    assert errors_in(log) == []
