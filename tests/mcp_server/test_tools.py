"""The MCP tools over the SDK's in-memory client, against a FakeRoom.

Each test builds the real server with :func:`create_server`, connects
``mcp.Client(server, mode="legacy")`` (JSON-RPC over memory streams, so a
cancelled call reaches the server as ``notifications/cancelled``), and talks
to the reference room through the FakeRoom's in-process transport. Timing
tests take ``autojump_clock`` and assert exact virtual times.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Final

import pytest
import trio
from mcp import Client

from letagents_trio.mcp_server import READINESS_URI, create_server
from letagents_trio.mcp_server._profiles import CURSOR_PROVIDER, EXECUTION_PROFILES
from letagents_trio.mcp_server._server import READINESS_RESOURCE_NAME
from letagents_trio.mcp_server._tools import registered_tool_names
from letagents_trio.room_server import GuidelinesRow
from letagents_trio.testing import FakeRoom, ProcessMode
from letagents_trio.workers import LocalStateStore

from .helpers import (
    ROOM,
    call_error,
    call_ok,
    config_for,
    register,
    supervised_config,
    text_of,
)

ROOM_TOOLS = (
    "disconnect_agent_session",
    "get_room_guidelines",
    "get_room_memory",
    "remember_room_fact",
    "request_human_input",
    "get_human_requests",
    "add_wake_rule",
    "list_wake_rules",
    "cancel_wake_rule",
    "post_status",
    "post_reasoning",
    "begin_workspace_capture",
    "publish_workspace_capture",
    "add_task",
    "get_board",
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
    "get_room_events",
    "get_room_artifacts",
    "publish_room_artifact",
    "claim_task",
    "update_task",
    "complete_task",
    "claim_task_review",
    "release_task_review",
    "release_task_lease",
    "handoff_task_lease",
    "submit_review_verdict",
    "send_message",
    "send_thread_message",
    "read_messages",
    "wait_for_messages",
)
# The tools that write: each needs a worker session.
WRITE_TOOLS = (
    "send_message",
    "send_thread_message",
    "post_status",
    "add_task",
    "claim_task",
    "update_task",
    "complete_task",
    "release_task_lease",
    "handoff_task_lease",
    "remember_room_fact",
    "request_human_input",
    "register_board_intent",
    "register_task_create_intent",
    "register_task_claim_intent",
    "register_task_close_intent",
    "register_task_lease_action_intent",
    "claim_task_review",
    "release_task_review",
    "submit_review_verdict",
    "add_wake_rule",
    "cancel_wake_rule",
    "post_reasoning",
    "begin_workspace_capture",
    "publish_workspace_capture",
)
# Tools of the facade that take no agent_session_id of their own (Node's fields), and
# assign_board_manager, whose agent_session_id names the session it promotes.
NO_SESSION_ARGUMENT = frozenset(
    {
        "get_board_settings",
        "set_board_manager_mode",
        "assign_board_manager",
        "release_board_manager",
        "list_board_intents",
        "get_room_events",
        "get_room_artifacts",
        "publish_room_artifact",
    }
)
SHA: Final = "0123456789abcdef0123456789abcdef01234567"
# What each tool needs besides whom it acts as.
REQUIRED: dict[str, dict[str, object]] = {
    "add_wake_rule": {"event": "timer"},
    "cancel_wake_rule": {"rule_id": "wake_1"},
    "post_reasoning": {"summary": "s"},
    "begin_workspace_capture": {"room_id": ROOM},
    "publish_workspace_capture": {
        "room_id": ROOM,
        "capture_id": "0b0b0b0b-0b0b-4b0b-8b0b-0b0b0b0b0b0b",
        "summary": "s",
    },
    "send_message": {"text": "x"},
    "send_thread_message": {"text": "x", "thread_parent_id": "1"},
    "post_status": {"status": "s"},
    "add_task": {"title": "t"},
    "claim_task": {"task_id": "task_1"},
    "update_task": {"task_id": "task_1"},
    "complete_task": {"task_id": "task_1"},
    "release_task_lease": {"task_id": "task_1"},
    "handoff_task_lease": {"task_id": "task_1", "target_agent_key": "owner/x"},
    "remember_room_fact": {"client_id": "c1234567", "category": "term", "title": "t", "body": "b"},
    "request_human_input": {
        "client_id": "c1234567",
        "category": "question",
        "title": "t",
        "body": "b",
    },
    "set_board_manager_mode": {"manager_mode": "off"},
    "assign_board_manager": {"agent_session_id": "as_1"},
    "register_board_intent": {"action_type": "task_create", "payload": {"title": "t"}},
    "register_task_create_intent": {"title": "t"},
    "register_task_claim_intent": {"task_id": "task_1"},
    "register_task_close_intent": {"task_id": "task_1", "status": "done"},
    "register_task_lease_action_intent": {"task_id": "task_1", "action": "release"},
    "approve_board_intent": {"intent_id": "bi_1"},
    "deny_board_intent": {"intent_id": "bi_1"},
    "publish_room_artifact": {"artifact": {"provider": "git", "kind": "branch", "ref": "b"}},
    "claim_task_review": {"task_id": "task_1"},
    "release_task_review": {"task_id": "task_1"},
    "submit_review_verdict": {
        "task_id": "task_1",
        "verdict": "approve",
        "expected_head_sha": SHA,
        "idempotency_key": "k1",
    },
}
# Finding, joining and making rooms, and onboarding (issue 41): the Node server's facade
# adds worker_id only where a tool takes room_id (these three).
ENTRY_TOOLS = (
    "create_room",
    "create_project",
    "join_code",
    "join_project",
    "join_room",
    "get_current_room",
    "check_repo",
    "initialize_repo",
    "check_repo_visibility",
    "get_onboarding_status",
    "clear_saved_auth",
    "set_agent_name",
)
ENTRY_TOOLS_WITH_ROOM = ("start_device_auth", "poll_device_auth", "resume_room_session")
BOTH_TEXT = "Choose worker_id or agent_session_id, not both."
NO_CONNECTION_TEXT = (
    "This worker has no current connection in this process."
    " Reconnect explicitly with register_agent_session(worker_id, room_id)."
)


async def test_tools_and_schemas(fake_room: FakeRoom, tmp_path: Path) -> None:
    """Every room tool takes worker_id under the facade; register_agent_session does not."""
    with trio.fail_after(10):
        server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
        async with Client(server, mode="legacy") as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    assert sorted(tools) == sorted(
        (*ROOM_TOOLS, "register_agent_session", *ENTRY_TOOLS, *ENTRY_TOOLS_WITH_ROOM)
    )
    for name in ENTRY_TOOLS:
        assert "worker_id" not in tools[name].input_schema["properties"], name
    for name in (*ROOM_TOOLS, *ENTRY_TOOLS_WITH_ROOM):
        assert "worker_id" in tools[name].input_schema["properties"], name
        assert "room_id" in tools[name].input_schema["properties"], name
    register_args = set(tools["register_agent_session"].input_schema["properties"])
    assert register_args == {
        "worker_id",
        "registration_key",
        "room_id",
        "session_kind",
        "runtime",
        "display_name",
        "cwd",
        "recover_lost_worker",
    }


@pytest.mark.parametrize("profile", ["supervised_mcp_polling", "supervised_room_turn"])
async def test_no_facade_outside_its_profiles(
    fake_room: FakeRoom, tmp_path: Path, profile: str
) -> None:
    """Only the two facade profiles add worker_id; supervised ones lose the session tools."""
    config = supervised_config(fake_room, tmp_path, profile)
    with trio.fail_after(10):
        async with Client(create_server(config, transport=fake_room.transport)) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    for tool in tools.values():
        assert "worker_id" not in tool.input_schema["properties"], tool.name
    assert "register_agent_session" not in tools


@pytest.mark.parametrize(
    "profile",
    [
        "interactive_desktop",
        "autonomous_mcp_worker",
        "supervised_mcp_polling",
        "supervised_room_turn",
    ],
)
async def test_readiness_lists_exactly_the_registered_tools(
    fake_room: FakeRoom, tmp_path: Path, profile: str
) -> None:
    """The readiness resource is compact JSON naming exactly the tools a client can list."""
    if profile.startswith("supervised"):
        config = supervised_config(fake_room, tmp_path, profile, provider="codex")
    else:
        config = config_for(fake_room, tmp_path, profile=profile, provider="codex")
    with trio.fail_after(10):
        async with Client(create_server(config, transport=fake_room.transport)) as client:
            listed = sorted(tool.name for tool in (await client.list_tools()).tools)
            resources = (await client.list_resources()).resources
            read = await client.read_resource(READINESS_URI)
    assert [(r.name, str(r.uri), r.mime_type) for r in resources] == [
        (READINESS_RESOURCE_NAME, READINESS_URI, "application/json")
    ]
    (content,) = read.contents
    text = getattr(content, "text")  # noqa: B009 - TextResourceContents
    assert text == json.dumps(
        {"format": 1, "profile": profile, "provider": "codex", "tools": listed},
        separators=(",", ":"),
    )
    assert listed == registered_tool_names(profile, "codex")


HOSTS_PAGE = Path(__file__).parents[2] / "docs" / "mcp-hosts.md"


def tools_table() -> dict[str, list[str]]:
    """The rows of docs/mcp-hosts.md's tool table: each tool's cells after its name."""
    page = HOSTS_PAGE.read_text(encoding="utf-8")
    table = page.split("\n| Tool | Arguments", 1)[1].split("\n\n", 1)[0]
    rows: dict[str, list[str]] = {}
    for line in table.splitlines()[2:]:
        name, *cells = (cell.strip() for cell in line.strip("|").split("|"))
        assert name.startswith("`"), line
        rows[name.strip("`")] = cells
    return rows


async def test_the_hosts_pages_tool_table_is_what_the_profiles_serve(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    """docs/mcp-hosts.md lists each tool once, and exactly the tools served: the worker
    profile's are the rows with a route, every profile's the rows from
    get_room_guidelines to read_messages, all four profiles' together the whole table;
    and the rows that need a session are the writes."""
    served: dict[str, set[str]] = {}
    with trio.fail_after(20):
        for profile in EXECUTION_PROFILES:
            if profile.startswith("supervised"):
                config = supervised_config(fake_room, tmp_path, profile, provider=CURSOR_PROVIDER)
            else:
                config = config_for(fake_room, tmp_path, profile=profile)
            async with Client(create_server(config, transport=fake_room.transport)) as client:
                served[profile] = {tool.name for tool in (await client.list_tools()).tools}
    rows = tools_table()
    names = list(rows)
    assert len(names) == len(set(names))
    assert set(names) == set().union(*served.values())
    routed = {name for name, cells in rows.items() if cells[1] != "none"}
    assert served["autonomous_mcp_worker"] == served["interactive_desktop"] == routed
    every = names[names.index("get_room_guidelines") : names.index("read_messages") + 1]
    assert set(every) == set.intersection(*served.values())
    page = HOSTS_PAGE.read_text(encoding="utf-8")
    assert "from `get_room_guidelines` to `read_messages` below" in " ".join(page.split())
    (profile_row,) = re.findall(r"^\| `LETAGENTS_EXECUTION_PROFILE` .*$", page, re.MULTILINE)
    assert set(EXECUTION_PROFILES) <= set(re.findall(r"`(\w+)`", profile_row))
    needs_session = {name for name, cells in rows.items() if cells[2] == "yes"}
    assert needs_session == {*WRITE_TOOLS, "disconnect_agent_session"}


async def test_register_send_wait_by_worker_id_alone(fake_room: FakeRoom, tmp_path: Path) -> None:
    """A worker registers, sends and reads by worker_id alone; results hold no secret."""
    store = LocalStateStore(tmp_path / "mcp-state.json")
    texts: list[str] = []
    with trio.fail_after(10):
        server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
        async with Client(server, mode="legacy") as client:
            registered = await register(client)
            texts.append(json.dumps(registered))
            worker_id = registered["worker_id"]
            assert isinstance(worker_id, str)
            assert list(registered) == ["success", "worker_id", "agent_session", "instruction"]
            session = registered["agent_session"]
            assert isinstance(session, dict)
            sent = await call_ok(client, "send_message", {"worker_id": worker_id, "text": "hi"})
            texts.append(json.dumps(sent))
            assert sent["agent_session_id"] == session["session_id"]
            read = await call_ok(client, "read_messages", {"worker_id": worker_id})
            texts.append(json.dumps(read))
            assert [m["text"] for m in read["messages"]] == ["hi"]
            assert read["last_observed_message_id"] == sent["id"]
    stored = store.stored_session(str(session["session_id"]))
    assert stored is not None
    for text in texts:
        assert "session_token" not in text
        assert stored.session_token not in text
        assert fake_room.owner_token not in text
        assert "bearer" not in text.lower()


async def test_facade_refuses_both_ids_and_needs_a_room(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    """worker_id with agent_session_id is refused with upstream's text; no target at all too."""
    with trio.fail_after(10):
        server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
        async with Client(server, mode="legacy") as client:
            registered = await register(client)
            session_id = registered["agent_session"]["session_id"]
            for tool in ROOM_TOOLS:
                if tool in NO_SESSION_ARGUMENT:
                    continue
                args = {"worker_id": registered["worker_id"], "agent_session_id": session_id}
                args.update(REQUIRED.get(tool, {}))
                assert await call_error(client, tool, args) == BOTH_TEXT, tool
            assert "room_id" in await call_error(client, "send_message", {"text": "x"})
    work = ("/messages", "/tasks", "/memory", "/attention", "/agent-guidelines")
    assert not any(r.path.endswith(work) for r in fake_room.requests)


async def test_legacy_session_id_of_a_worker_is_guarded(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    """A durable worker's agent_session_id acts through the same guard, and works."""
    with trio.fail_after(10):
        server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
        async with Client(server, mode="legacy") as client:
            registered = await register(client)
            session_id = registered["agent_session"]["session_id"]
            sent = await call_ok(
                client, "send_message", {"agent_session_id": session_id, "text": "legacy"}
            )
            assert sent["agent_session_id"] == session_id
            await call_ok(
                client, "disconnect_agent_session", {"worker_id": registered["worker_id"]}
            )
            error = await call_error(
                client, "send_message", {"agent_session_id": session_id, "text": "late"}
            )
    assert error == NO_CONNECTION_TEXT


async def test_disconnect_ends_the_worker_here_and_at_the_room(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    """disconnect_agent_session ends the session; the worker can no longer act; no exit is due."""
    store = LocalStateStore(tmp_path / "mcp-state.json")
    with trio.fail_after(10):
        server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
        async with Client(server, mode="legacy") as client:
            registered = await register(client)
            worker_id = registered["worker_id"]
            ended = await call_ok(client, "disconnect_agent_session", {"worker_id": worker_id})
            assert ended["success"] is True
            assert ended["agent_session"]["ended_at"]
            error = await call_error(client, "send_message", {"worker_id": worker_id, "text": "x"})
    assert error == NO_CONNECTION_TEXT
    stored = store.stored_session(ended["agent_session"]["session_id"])
    assert stored is not None
    assert stored.ended_at
    assert fake_room.exits == []  # released, not held: nothing to announce


async def test_worker_rule_errors_are_exact(fake_room: FakeRoom, tmp_path: Path) -> None:
    """register_agent_session's refusals are isError results with the §5.2 texts."""
    with trio.fail_after(10):
        server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
        async with Client(server, mode="legacy") as client:
            no_room = await call_error(client, "register_agent_session", {"registration_key": "k"})
            controller = await call_error(
                client,
                "register_agent_session",
                {"room_id": ROOM, "registration_key": "k", "session_kind": "controller"},
            )
            nobody = await call_error(
                client,
                "register_agent_session",
                {"room_id": ROOM, "display_name": "Nobody", "recover_lost_worker": True},
            )
    assert no_room == (
        "Pass room_id explicitly when registering or reconnecting this chat's worker."
    )
    assert controller == "Durable handles identify workers, not controllers."
    assert "no worker named" in nobody


async def test_ended_session_error_says_register_again(fake_room: FakeRoom, tmp_path: Path) -> None:
    """A room that ended the session answers 401; the tool shows it and the state records it."""
    store = LocalStateStore(tmp_path / "mcp-state.json")
    with trio.fail_after(10):
        server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
        async with Client(server, mode="legacy") as client:
            registered = await register(client)
            session_id = registered["agent_session"]["session_id"]
            fake_room.set_process_mode(ProcessMode.UNKNOWN)  # no stream to hear "ended" on
            fake_room.drop()
            fake_room.end(session_id)
            error = await call_error(
                client, "send_message", {"worker_id": registered["worker_id"], "text": "x"}
            )
    assert error.startswith("API error 401: ")
    assert "register_agent_session" in error
    stored = store.stored_session(session_id)
    assert stored is not None
    assert stored.ended_at


async def test_a_credential_never_leaves_in_a_result(fake_room: FakeRoom, tmp_path: Path) -> None:
    """Even text the room echoes back has the owner token redacted (the last guard)."""
    with trio.fail_after(10):
        server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
        async with Client(server, mode="legacy") as client:
            registered = await register(client)
            result = await client.call_tool(
                "send_message",
                {"worker_id": registered["worker_id"], "text": f"oops {fake_room.owner_token}"},
            )
    assert not result.is_error
    assert fake_room.owner_token not in text_of(result)
    assert "oops [redacted]" in text_of(result)


async def test_leaving_announces_the_exit(fake_room: FakeRoom, tmp_path: Path) -> None:
    """Closing the client (EOF) leaves the lifespan, which announces every held session."""
    with trio.fail_after(10):
        server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
        async with Client(server, mode="legacy") as client:
            registered = await register(client)
            session_id = registered["agent_session"]["session_id"]
            await fake_room.wait_until(lambda: len(fake_room.room.process_streams(session_id)) == 1)
            (stream,) = fake_room.room.process_streams(session_id)
    assert [(e.session_id, e.process_connection_id, e.recorded) for e in fake_room.exits] == [
        (session_id, stream.connection_id, True)
    ]


async def test_guidelines_come_from_the_agent_guidelines_route(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    """get_room_guidelines asks GET /rooms/{room}/agent-guidelines (the letagents API's
    route) as the worker, and returns the reference room's answer (issue 12 item 4)."""
    with trio.fail_after(10):
        server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
        async with Client(server, mode="legacy") as client:
            registered = await register(client)
            # Set as the room's admins do: a person signed in (FakeRoom has none).
            fake_room.room.store.put_guidelines(
                GuidelinesRow(room_id=ROOM, guidelines="Be kind.", updated_by="owner", updated_at=0)
            )
            answer = await call_ok(
                client, "get_room_guidelines", {"worker_id": registered["worker_id"]}
            )
    assert answer["guidelines"] == "Be kind."
    assert (answer["room_id"], answer["updated_by"], answer["can_manage"]) == (ROOM, "owner", False)
    assert (answer["max_bytes"], answer["token_budget"]) == (8000, 2000)
    assert "not by your user or your operator" in answer["note"]
    (read,) = fake_room.requests_to("GET", f"/rooms/{ROOM}/agent-guidelines")
    assert (read.session_id, read.has_session_token) == (
        registered["agent_session"]["session_id"],
        True,
    )


async def test_a_session_the_room_forgot_is_replaced_by_register_agent_session(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    """Issue 42: after a --memory room restarted, registering by the same key gives a
    live session, held, and a message sent by worker_id reaches the new room."""
    store = LocalStateStore(tmp_path / "mcp-state.json")
    with trio.fail_after(10):
        server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
        async with Client(server, mode="legacy") as client:
            first = await register(client)
            old_id = first["agent_session"]["session_id"]
            await fake_room.wait_until(lambda: len(fake_room.room.process_streams(old_id)) == 1)
            fake_room.restart(forget=True)
            again = await register(client)
            new_id = again["agent_session"]["session_id"]
            assert again["worker_id"] == first["worker_id"]
            assert new_id != old_id
            await fake_room.wait_until(lambda: len(fake_room.room.process_streams(new_id)) == 1)
            row = fake_room.room.session(new_id)
            assert row is not None
            assert row.ended_at is None
            sent = await call_ok(
                client, "send_message", {"worker_id": first["worker_id"], "text": "back"}
            )
            assert sent["agent_session_id"] == new_id
    forgotten = store.stored_session(old_id)
    assert forgotten is not None
    assert forgotten.ended_at is not None
