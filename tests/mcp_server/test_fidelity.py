"""Fidelity to the Node client through the MCP tools (issue 12).

1. The owner token is read afresh for every request: a sign-out (a 401 on an
   owner call) takes effect at the next request, and a sign-in written to the
   state file by another process is used without a restart.
2. Supervised mode registers nothing, on either path.
3. The legacy path (§5.8) for a worker and for a controller.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any, Final

import trio
from mcp import Client

from letagents_trio.mcp_server import create_server
from letagents_trio.workers import LocalStateStore
from letagents_trio.workers._names import codename
from letagents_trio.workers._wire import MCP_SERVER_WORDING as WORDING
from letagents_trio.workers._wire import sign_in_text

from .helpers import ROOM, call_error, call_ok, config_for, register, text_of

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
            assert signed_out == sign_in_text(store.path, WORDING)
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


# --- 3. the legacy path (PROTOCOL §5.8) -------------------------------------------------

LEGACY_BODY_KEYS: Final = {
    "actor_key",
    "actor_label",
    "agent_instance_id",
    "display_name",
    "requested_base_display_name",
    "session_kind",
    "runtime",
    "repo_branch",
    "registration_liveness",
    "process_host_id",
    "replace_agent_session_id",
    "replace_agent_session_token",
}
UUID4: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


async def _legacy(client: Client, **arguments: Any) -> dict[str, Any]:
    result = await client.call_tool("register_agent_session", {"room_id": ROOM, **arguments})
    assert not result.is_error, text_of(result)
    text = text_of(result)
    assert text.startswith('{"success":true,'), text  # compact, as every answer (issue 42)
    value: dict[str, Any] = json.loads(text)
    return value


async def test_the_legacy_path_registers_a_worker_and_replaces_it_on_a_second_call(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    store = LocalStateStore(tmp_path / "mcp-state.json")
    with trio.fail_after(10):
        server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
        async with Client(server, mode="legacy") as client:
            first = await _legacy(client, display_name=" Oak ")
            sid = first["agent_session_id"]
            await fake_room.wait_until(lambda: len(fake_room.room.process_streams(sid)) == 1)
            sent = await call_ok(client, "send_message", {"agent_session_id": sid, "text": "hi"})
            assert sent["message"]["sender"] == "Oak"
            second = await _legacy(client, display_name="Oak")
            new_sid = second["agent_session_id"]
            await fake_room.wait_until(lambda: len(fake_room.room.process_streams(new_sid)) == 1)
    assert set(first) == {"success", "agent_session", "agent_session_id", "use_agent_session_id"}
    assert first["agent_session"]["session_id"] == sid
    assert "session_token" not in json.dumps(first)
    # Issue 28 row 7: the Node server's text (tools/agent-sessions.ts), not ours.
    assert first["use_agent_session_id"] == (
        "Pass this exact agent_session_id to wait_for_messages, send_message,"
        " send_thread_message, post_status, and task tools for this specific worker."
        " Do not rely on a shared current session."
    )
    host = store.read().data["local_host_id"]
    (mine, first_body), (_, second_body) = [
        (r.bearer, r.body) for r in fake_room.requests_to("POST", REGISTRATIONS)
    ]
    assert mine == fake_room.owner_token
    assert set(first_body) == LEGACY_BODY_KEYS
    assert UUID4.fullmatch(first_body["agent_instance_id"])
    # The process identity (issue 28 row 7): the codename of instance:<uuid>.
    name = codename(f"instance:{first_body['agent_instance_id']}")
    assert first_body["actor_key"] == f"owner/{name.slug}"
    assert first_body["actor_label"] == f"{name.display_name} | owner's agent | Agent"
    assert (first_body["display_name"], first_body["requested_base_display_name"]) == (
        "Oak",
        "Oak",
    )
    assert (first_body["session_kind"], first_body["runtime"]) == ("worker", "python")
    assert first_body["repo_branch"] is None
    assert first_body["registration_liveness"]["host_id"] == host
    assert first_body["registration_liveness"]["tool_bridge_id"].startswith(f"{host}:python:")
    assert re.fullmatch(r"phost_[0-9a-f]{32}", first_body["process_host_id"])
    assert (first_body["replace_agent_session_id"], first_body["replace_agent_session_token"]) == (
        None,
        None,
    )
    # The second call names the first session as the one it replaces: same process instance.
    stored_first = store.stored_session(sid)
    assert stored_first is not None
    assert second_body["agent_instance_id"] == first_body["agent_instance_id"]
    assert second_body["replace_agent_session_id"] == sid
    assert second_body["replace_agent_session_token"] == stored_first.session_token
    assert stored_first.ended_at  # the replaced record is ended here ...
    row = fake_room.room.session(sid)
    assert row is not None
    assert row.ended_at is not None  # ... and at the room
    data = store.read().data
    assert data["current_agent_session_ids"] == {ROOM: new_sid}
    assert "worker_bearer" not in data["agent_sessions"][new_sid]
    assert "mcp_workers" not in data
    assert [r.path for r in fake_room.process_requests()] == [
        f"{REGISTRATIONS}/{sid}/process",
        f"{REGISTRATIONS}/{new_sid}/process",
    ]


async def test_the_legacy_path_registers_a_controller_and_holds_nothing(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    with trio.fail_after(10):
        server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
        async with Client(server, mode="legacy") as client:
            answer = await _legacy(client, session_kind="controller", display_name="Lead")
    assert answer["agent_session"]["session_kind"] == "controller"
    (sent,) = fake_room.requests_to("POST", REGISTRATIONS)
    assert set(sent.body) == LEGACY_BODY_KEYS
    assert sent.body["session_kind"] == "controller"
    assert fake_room.process_requests() == []  # §4.1: only workers hold a connection
    assert fake_room.exits == []


async def test_the_legacy_path_without_a_room_answers_success_false(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    """Issue 28 row 7. Node ``tools/agent-sessions.ts``: without ``room_id`` and no current
    room, ``{success: false, error, hint}`` (compact, as every answer: issue 42), a result
    and not a tool error; nothing is sent. (This server joins no room, so none is ever
    current.)"""
    with trio.fail_after(10):
        server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
        async with Client(server, mode="legacy") as client:
            result = await client.call_tool("register_agent_session", {})
    assert not result.is_error
    assert text_of(result) == json.dumps(
        {
            "success": False,
            "error": "No room_id provided and not currently in a room.",
            "hint": "Join a room first, or pass room_id explicitly.",
        },
        separators=(",", ":"),
    )
    assert fake_room.requests == []
