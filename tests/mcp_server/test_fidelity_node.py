"""Fidelity to the Node server, round three (issue 44): each case as Node behaves.

1. Presence from the tools: ``post_status`` sets the worker's room presence
   (a status read from its text, and the text) before it posts ``[status] …``;
   ``send_message`` and ``add_task`` send the presence remembered after their
   write; ``get_board`` sends none (Node's refresh there has no session to
   send). The room's roster (``GET …/presence``) shows the text posted.
2. The room's messages as the real API writes them: ids ``msg_N``, the sender
   the worker's actor label, ``reply_to`` checked as ``^msg_\\d+$``.
3. Answer shapes: ``send_message`` answers the message's fields and
   ``agent_identity``; ``add_task`` sends ``created_by`` and the actor fields
   and answers ``agent_identity``.
4. Legacy registration sends ``ide_label`` and asks ``GET /agents/me`` once.
5. Replies in threads keep ``reply_to`` on the message answered and name the
   root as ``thread_root_id`` (Node's ``message-tool-registration`` test:
   ``reply_to`` 157, ``thread_root_id`` 156); ``set_reply_thread`` is strict.
6. Exit statuses and texts at start, and the room turn's instructions.

Each test failed on the code before issue 44 and holds its fix.
"""

from __future__ import annotations

import logging
import os
import re
from typing import TYPE_CHECKING, Any, Final

import pytest
import trio
import trio.testing
from mcp import Client

from letagents_trio.mcp_server import _main, create_server
from letagents_trio.mcp_server._profiles import EXECUTION_PROFILES
from letagents_trio.mcp_server._tools import TOOLS, profile_tools
from letagents_trio.mcp_server._turn_tools import REPLY_THREAD_TEXT
from letagents_trio.room_server import Credentials
from letagents_trio.workers._presence import classify_status

from .helpers import ROOM, call_error, call_ok, config_for, register, supervised_config, text_of

if TYPE_CHECKING:
    from pathlib import Path

    from letagents_trio.testing import FakeRoom

PRESENCE: Final = f"/rooms/{ROOM}/presence"
MESSAGES: Final = f"/rooms/{ROOM}/messages"
TASKS: Final = f"/rooms/{ROOM}/tasks"
# The keys of Node's toPublicAgentIdentity.
IDENTITY_KEYS: Final = {
    "name",
    "display_name",
    "owner_label",
    "owner_attribution",
    "ide_label",
    "actor_label",
    "canonical_key",
    "runtime_key",
    "agent_instance_id",
    "source",
}


def writes(fake_room: FakeRoom, since: int = 0) -> list[tuple[str, str]]:
    """(method, path) of the room calls the tools made, process streams left out."""
    return [
        (r.method, r.path)
        for r in fake_room.requests[since:]
        if not r.path.endswith(("/process", "/exit"))
    ]


def roster(fake_room: FakeRoom) -> list[dict[str, Any]]:
    """The room's roster, read by its admin (the owner)."""
    answer = fake_room.room.work.roster.read(
        ROOM, Credentials(owner_token=fake_room.owner_token), limit=None
    )
    assert answer.status == 200, answer.body
    rows: list[dict[str, Any]] = answer.body["presence"]
    return rows


# --- 1. presence from the tools ---------------------------------------------------------


async def test_post_status_sets_the_roster_before_posting_and_writes_send_it_again(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    """Node ``status-tool.ts``: ``syncRoomPresence`` (status classified from the text,
    ``status_text`` the text) before the ``[status]`` post; ``send-tool.ts`` and
    ``add_task`` sync the remembered presence after their write; ``get_board``'s
    heartbeat has no agent session, so it sends nothing."""
    server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
    with trio.fail_after(30):
        async with Client(server, mode="legacy") as client:
            worker = (await register(client, "k1", "Juniper"))["worker_id"]
            mark = len(fake_room.requests)
            status = await call_ok(
                client, "post_status", {"worker_id": worker, "status": "reviewing PR #2"}
            )
            assert writes(fake_room, mark) == [("POST", PRESENCE), ("POST", MESSAGES)]
            sent = fake_room.requests_to("POST", PRESENCE)[-1].body
            label = status["agent_identity"]["actor_label"]
            assert (sent["actor_label"], sent["status"], sent["status_text"]) == (
                label,
                "reviewing",
                "reviewing PR #2",
            )
            (row,) = roster(fake_room)
            assert (row["actor_label"], row["status"], row["status_text"]) == (
                label,
                "reviewing",
                "reviewing PR #2",
            )
            assert row["freshness"] == "active"
            # A write sends the presence remembered, after it.
            mark = len(fake_room.requests)
            await call_ok(client, "send_message", {"worker_id": worker, "text": "hi"})
            await call_ok(client, "add_task", {"worker_id": worker, "title": "Fix the build"})
            await call_ok(client, "get_board", {"worker_id": worker})
            assert writes(fake_room, mark) == [
                ("POST", MESSAGES),
                ("POST", PRESENCE),
                ("POST", TASKS),
                ("POST", PRESENCE),
                ("GET", TASKS),
            ]
            again = fake_room.requests_to("POST", PRESENCE)[-1].body
            assert (again["status"], again["status_text"]) == ("reviewing", "reviewing PR #2")
            # A status read as idle; the roster keeps one row per worker.
            await call_ok(
                client, "post_status", {"worker_id": worker, "status": "waiting for tasks"}
            )
            (row,) = roster(fake_room)
            assert (row["status"], row["status_text"]) == ("idle", "waiting for tasks")


async def test_a_room_without_the_presence_route_still_gets_the_status(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    """Node skips a presence call the room has no route for (isMissingRouteError)."""
    fake_room.on("POST", PRESENCE).respond(404, {"error": "Not found"}, times=None)
    server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
    with trio.fail_after(30):
        async with Client(server, mode="legacy") as client:
            worker = (await register(client, "k1", "Juniper"))["worker_id"]
            status = await call_ok(client, "post_status", {"worker_id": worker, "status": "x"})
    assert status["message_id"] == "msg_1"
    assert [m.text for m in fake_room.room.store.messages_after(ROOM, 0, 10)] == ["[status] x"]


@pytest.mark.parametrize(
    ("text", "status"),
    [
        ("waiting for tasks", "idle"),
        ("awaiting next task", "idle"),
        ("blocked on CI", "blocked"),
        ("waiting on review", "blocked"),
        ("idle", "idle"),
        ("watching the queue", "idle"),
        ("reviewing PR #2", "reviewing"),
        ("writing WISHLIST.md", "working"),
    ],
)
def test_a_status_text_reads_as_nodes_presence_status(text: str, status: str) -> None:
    """Node ``classifyPresenceStatusText``: waiting for work, stuck, available, review."""
    assert classify_status(text) == status
    assert classify_status("  ", "blocked") == "blocked"


# --- 2 and 3. the room's messages, and the answers -------------------------------------


async def test_messages_and_tasks_as_the_real_api_and_node_answer_them(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    """Ids ``msg_N``, the sender the actor label, a bare ``reply_to`` refused; the send
    answer is the message's fields and ``agent_identity``; ``add_task`` sends
    ``created_by`` and the actor fields (``tasks/context.ts``) and answers its identity."""
    server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
    with trio.fail_after(30):
        async with Client(server, mode="legacy") as client:
            worker = (await register(client, "k1", "Juniper"))["worker_id"]
            sent = await call_ok(client, "send_message", {"worker_id": worker, "text": "hi"})
            refused = await call_error(
                client, "send_message", {"worker_id": worker, "text": "x", "reply_to": "1"}
            )
            added = await call_ok(client, "add_task", {"worker_id": worker, "title": "T"})
    identity = sent["agent_identity"]
    assert set(identity) == IDENTITY_KEYS
    label = identity["actor_label"]
    assert label == "Juniper | owner's agent | Agent"
    assert (sent["id"], sent["sender"], sent["text"]) == ("msg_1", label, "hi")
    assert "success" not in sent
    assert "message" not in sent
    assert fake_room.requests_to("POST", MESSAGES)[0].body["sender"] == label
    assert refused == 'API error 400: {"error":"reply_to must be a valid message id"}'
    body = fake_room.requests_to("POST", TASKS)[0].body
    assert list(body) == ["title", "created_by", "actor_label", "actor_key", "actor_instance_id"]
    assert body["created_by"] == body["actor_label"] == label
    assert body["actor_key"] == identity["canonical_key"]
    assert body["actor_instance_id"] == worker
    assert (added["success"], added["task"]["id"]) == (True, "task_1")
    assert added["agent_identity"] == identity


# --- 4. the legacy path -----------------------------------------------------------------


async def test_legacy_registration_sends_ide_label_and_asks_the_account_once(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    config = config_for(fake_room, tmp_path, ide_label="Cursor")
    with trio.fail_after(10):
        async with Client(create_server(config, transport=fake_room.transport)) as client:
            await call_ok(client, "register_agent_session", {"room_id": ROOM})
    asked = [(r.method, r.path) for r in fake_room.requests if r.path.startswith("/agents")]
    assert asked == [("GET", "/agents/me"), ("POST", "/agents")]
    (sent,) = fake_room.requests_to("POST", f"/rooms/{ROOM}/agent-sessions")
    assert sent.body["ide_label"] == "Cursor"


# --- 5. replies in threads, and set_reply_thread ----------------------------------------


async def test_a_reply_in_a_thread_keeps_reply_to_and_names_the_root(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    """Node's message-tool-registration test: a reply to 157 in the thread of 156 is
    sent with ``reply_to`` 157 and ``thread_root_id`` 156 (here msg_2 and msg_1)."""
    server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
    with trio.fail_after(30):
        async with Client(server, mode="legacy") as client:
            worker = (await register(client, "k1", "Juniper"))["worker_id"]
            root = await call_ok(client, "send_message", {"worker_id": worker, "text": "plan?"})
            reply = await call_ok(
                client,
                "send_message",
                {"worker_id": worker, "text": "yes", "reply_to": root["id"]},
            )
            deeper = await call_ok(
                client,
                "send_thread_message",
                {"worker_id": worker, "text": "when?", "thread_parent_id": reply["id"]},
            )
    assert (root["id"], reply["id"]) == ("msg_1", "msg_2")
    last = fake_room.requests_to("POST", MESSAGES)[-1].body
    assert (last["reply_to"], last["thread_root_id"]) == ("msg_2", "msg_1")
    assert deeper["reply_to"]["id"] == "msg_2"
    assert deeper["thread_root_id"] == deeper["thread_parent_id"] == "msg_1"


async def test_set_reply_thread_is_strict_as_nodes(fake_room: FakeRoom, tmp_path: Path) -> None:
    """Node: ``readOnlyHint: false``, ``z.object({}).strict()``; an extra argument is
    refused as unrecognized, never reaching the tool's own refusal."""
    config = supervised_config(fake_room, tmp_path, "supervised_room_turn")
    with trio.fail_after(10):
        async with Client(create_server(config, transport=fake_room.transport)) as client:
            (tool,) = [t for t in (await client.list_tools()).tools if t.name == "set_reply_thread"]
            extra = await client.call_tool("set_reply_thread", {"room_id": ROOM})
            plain = await client.call_tool("set_reply_thread", {})
    assert tool.input_schema["additionalProperties"] is False
    assert tool.input_schema["properties"] == {}
    assert tool.annotations is not None
    assert tool.annotations.read_only_hint is False
    assert extra.is_error
    assert text_of(extra) == (
        "set_reply_thread: unknown argument 'room_id': set_reply_thread takes no such field."
        " Correct the arguments and call set_reply_thread again."
    )
    assert (plain.is_error, text_of(plain)) == (True, REPLY_THREAD_TEXT)
    assert fake_room.requests == []


# --- 6. exit statuses and texts, and instructions ----------------------------------------


@pytest.mark.parametrize(
    ("variables", "line"),
    [
        (
            {"LETAGENTS_EXECUTION_PROFILE": "x"},
            "letagents-trio mcp: Invalid LETAGENTS_EXECUTION_PROFILE: x.",
        ),
        (
            {
                "LETAGENTS_AGENT_SESSION_BEARER": "lasb_x",
                "LETAGENTS_TOKEN": "owner-token",
                "LETAGENTS_API_URL": "https://room.test",
            },
            "letagents-trio mcp: Worker bearer mode refuses LETAGENTS_TOKEN.",
        ),
    ],
)
def test_what_node_refuses_at_start_exits_1_with_its_text(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    variables: dict[str, str],
    line: str,
) -> None:
    """Node throws at start on these (``execution-profile.ts``, ``worker-bearer.ts``):
    its process exits 1 with the text; ours exits 1 with the same text, nothing served."""
    # main() configures logging first: the process-wide settings are restored after.
    http = logging.getLogger(_main.HTTP_LOGGER)
    monkeypatch.setattr(http, "level", http.level)
    monkeypatch.setattr(logging, "basicConfig", lambda **kwargs: None)
    for name in list(os.environ):
        if name.startswith("LETAGENTS_"):
            monkeypatch.delenv(name)
    monkeypatch.setenv("LETAGENTS_STATE_PATH", str(tmp_path / "state.json"))
    for name, value in variables.items():
        monkeypatch.setenv(name, value)
    assert _main.main([]) == 1
    captured = capsys.readouterr()
    assert captured.out == ""
    (written,) = captured.err.splitlines()
    assert written.startswith(line)
    assert "owner-token" not in captured.err


_NAME: Final = re.compile(r"\b[a-z]+(?:_[a-z]+)+\b")


@pytest.mark.parametrize("provider", [None, "cursor"])
@pytest.mark.parametrize("profile", EXECUTION_PROFILES)
async def test_the_instructions_name_only_tools_the_profile_serves(
    fake_room: FakeRoom, tmp_path: Path, profile: str, provider: str | None
) -> None:
    """The room turn's instructions named register_agent_session and wait_for_messages,
    which that profile does not serve."""
    if profile in ("supervised_room_turn", "supervised_mcp_polling"):
        config = supervised_config(fake_room, tmp_path, profile, provider=provider)
    else:
        config = config_for(fake_room, tmp_path, profile=profile, provider=provider)
    with trio.fail_after(10):
        async with Client(create_server(config, transport=fake_room.transport)) as client:
            instructions = client.instructions or ""
    named = {word for word in _NAME.findall(instructions) if word in TOOLS}
    assert named, instructions
    assert named <= set(profile_tools(profile, provider)), instructions
