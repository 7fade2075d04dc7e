"""Fidelity to the Node client through the MCP tools (issue 12).

1. The owner token is read afresh for every request: a sign-out (a 401 on an
   owner call) takes effect at the next request, and a sign-in written to the
   state file by another process is used without a restart.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import trio
from mcp import Client

from letagents_trio.mcp_server import create_server
from letagents_trio.workers import LocalStateStore
from letagents_trio.workers._wire import SIGN_IN_TEXT

from .helpers import ROOM, call_error, call_ok, config_for, register

if TYPE_CHECKING:
    from pathlib import Path

    from letagents_trio.testing import FakeRoom

REGISTRATIONS: Final = f"/rooms/{ROOM}/agent-sessions"


def log(fake_room: FakeRoom, since: int = 0) -> list[tuple[str, str, str | None]]:
    """(method, path, bearer) of each request, process streams and exits left out."""
    return [
        (r.method, r.path, r.bearer)
        for r in fake_room.requests[since:]
        if not r.path.endswith(("/process", "/exit"))
    ]


# --- 1. owner sign-out and sign-in ------------------------------------------------------


async def test_sign_out_and_a_sign_in_by_another_process_take_effect_at_once(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    store = LocalStateStore(tmp_path / "mcp-state.json")
    await store.save_auth(fake_room.owner_token)
    config = config_for(fake_room, tmp_path, token=None)  # no LETAGENTS_TOKEN: the state's auth
    token = fake_room.owner_token
    with trio.fail_after(10):
        async with Client(
            create_server(config, transport=fake_room.transport), mode="legacy"
        ) as client:
            await register(client, "a", "Alder")
            fake_room.on("POST", "/agents").respond(401, {"error": "Authentication required."})
            mark = len(fake_room.requests)
            refused = await call_error(client, "register_agent_session", _create("b"))
            assert refused.startswith("API error 401: ")
            assert store.auth() is None
            signed_out = await call_error(client, "register_agent_session", _create("c"))
            assert signed_out == SIGN_IN_TEXT
            await store.save_auth(token)  # another MCP server signs the owner in again
            again: dict[str, Any] = await call_ok(client, "register_agent_session", _create("d"))
            assert again["agent_session"]["session_id"]
    assert log(fake_room, mark) == [
        ("POST", "/agents", token),  # answered 401: auth is cleared
        # "c": nothing is sent, no bearer is left to send
        ("GET", "/agents/me", token),  # "d": the new sign-in, account asked again
        ("POST", "/agents", token),
        ("POST", REGISTRATIONS, token),
    ]


def _create(key: str) -> dict[str, Any]:
    return {"room_id": ROOM, "registration_key": key}
