"""How the message tools answer (issue 45): a page of messages as the tools shape it, a
reply naming two different targets, the sender's own token kept out of every answer, and
a send checked against the room it goes to.

``messages_payload`` is pure and tested with dicts; the tools over the SDK's
in-memory client against a FakeRoom, under ``autojump_clock``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing
from mcp import Client

from letagents_trio._redact import REDACTED
from letagents_trio.mcp_server import create_server
from letagents_trio.mcp_server._message_tools import REPLY_MISMATCH_TEXT, messages_payload

from .helpers import ROOM, call_error, call_ok, config_for, register
from .test_local_rooms import LOCAL_ROOM, local_server

if TYPE_CHECKING:
    from pathlib import Path

    from letagents_trio.testing import FakeRoom


def test_only_a_reply_in_a_thread_names_its_root_as_thread_parent_id() -> None:
    answer = {
        "room_id": "room_other",
        "messages": [
            {"id": "1", "thread_root_id": "1"},  # a root: its own thread
            {"id": "2", "thread_root_id": "1"},  # a reply in the thread of 1
            {"id": "3"},  # a room that names no thread
            {"id": "4", "thread_root_id": ""},
            "not a message",
        ],
        "has_more": True,
    }
    assert messages_payload(answer, ROOM) == {
        "messages": [
            {"id": "1", "thread_root_id": "1"},
            {"id": "2", "thread_root_id": "1", "thread_parent_id": "1"},
            {"id": "3"},
            {"id": "4", "thread_root_id": ""},
        ],
        "room_id": "room_other",  # the room's own word for its id
        "truncated": True,  # has_more, as the room says it
        "last_observed_message_id": "4",
    }


@pytest.mark.parametrize(
    "answer",
    [None, [], "text", {"messages": None}, {"messages": {"id": "1"}}, {"messages": []}],
)
def test_an_answer_without_messages_is_an_empty_page_that_keeps_the_cursor(answer: Any) -> None:
    assert messages_payload(answer, ROOM, after="7") == {
        "messages": [],
        "room_id": ROOM,
        "truncated": False,
        "last_observed_message_id": "7",
    }


async def test_a_reply_naming_two_different_targets_is_refused_before_any_request(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
    with trio.fail_after(60):
        async with Client(server, mode="legacy") as client:
            worker = (await register(client))["worker_id"]
            await call_ok(client, "send_message", {"worker_id": worker, "text": "one"})
            await call_ok(client, "send_message", {"worker_id": worker, "text": "two"})
            read = await call_ok(client, "read_messages", {"worker_id": worker})
            one, two = (m["id"] for m in read["messages"])
            before = len(fake_room.requests)
            args = {"worker_id": worker, "text": "re", "reply_to": one, "thread_parent_id": two}
            assert await call_error(client, "send_message", args) == REPLY_MISMATCH_TEXT
            assert len(fake_room.requests) == before
            # The same target twice is one target, padded or not.
            same = {**args, "thread_parent_id": f" {one} "}
            sent = await call_ok(client, "send_message", same)
    assert sent["success"] is True
    assert (sent["message"]["text"], sent["message"]["thread_parent_id"]) == ("re", one)


async def test_a_workers_own_token_never_shows_in_an_answer(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    """A message that quotes the sender's session token is answered (send, read) with the
    token redacted: every answer is guarded against the session it was made as."""
    server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
    with trio.fail_after(60):
        async with Client(server, mode="legacy") as client:
            answer = await register(client)
            worker, session_id = answer["worker_id"], answer["agent_session"]["session_id"]
            state = json.loads((tmp_path / "mcp-state.json").read_text())
            token = state["agent_sessions"][session_id]["session_token"]
            text = f"my token is {token}"
            sent = await call_ok(client, "send_message", {"worker_id": worker, "text": text})
            thread = await call_ok(
                client,
                "send_thread_message",
                {"worker_id": worker, "text": text, "thread_parent_id": sent["message"]["id"]},
            )
            read = await call_ok(client, "read_messages", {"worker_id": worker})
    redacted = f"my token is {REDACTED}"
    assert (sent["message"]["text"], thread["message"]["text"]) == (redacted, redacted)
    assert [m["text"] for m in read["messages"]] == [redacted, redacted]


async def test_a_local_send_is_checked_against_the_room_it_goes_to(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    """A worker held in two local rooms sends to the one it names: the connection check
    inside the chat's write lock is made for that room."""
    server = local_server(fake_room, tmp_path)
    settings = {"mode": "local"}
    (tmp_path / "chat-storage.json").write_text(json.dumps(settings))
    with trio.fail_after(60):
        async with Client(server, mode="legacy") as client:
            worker = (await register(client, "k1", "Juniper", room=LOCAL_ROOM))["worker_id"]
            args = {"worker_id": worker, "room_id": "room_local_two"}
            await call_ok(client, "register_agent_session", args)
            for room in (LOCAL_ROOM, "room_local_two"):
                args = {"worker_id": worker, "room_id": room, "text": f"to {room}"}
                await call_ok(client, "send_message", args)
                status = {"worker_id": worker, "room_id": room, "status": f"in {room}"}
                await call_ok(client, "post_status", status)
            reads = [
                await call_ok(client, "read_messages", {"worker_id": worker, "room_id": room})
                for room in (LOCAL_ROOM, "room_local_two")
            ]
    assert [[m["text"] for m in read["messages"]] for read in reads] == [
        [f"to {LOCAL_ROOM}", f"[status] in {LOCAL_ROOM}"],
        ["to room_local_two", "[status] in room_local_two"],
    ]
    assert [r.path for r in fake_room.requests if "room_local" in r.path] == []
