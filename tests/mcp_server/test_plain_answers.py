"""What the MCP tools answer where they used to puzzle a chat (issue 29).

Arguments the schema refuses are named in plain words, not as pydantic's
report with a link; a message's length limit is in the schema and in the
refusal; an empty ``wait_for_messages`` has the same fields as a read, its
cursor included; a registration the room holds reports progress saying why.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import trio
from mcp import Client

from letagents_trio._protocol import MAX_MESSAGE_CHARS
from letagents_trio.mcp_server import create_server

from .helpers import ROOM, call_error, call_ok, config_for, register

if TYPE_CHECKING:
    from trio.testing import MockClock

    from letagents_trio.testing import FakeRoom

REGISTRATIONS = "/rooms/{room}/agent-sessions"


@pytest.mark.parametrize(
    ("tool", "arguments", "text"),
    [
        (
            # Before: "Error executing tool send_message: 1 validation error for
            # send_messageArguments\ntext\n  String should have at least 1 character
            # [type=string_too_short, input_value='', input_type=str]\n    For further
            # information visit https://errors.pydantic.dev/…"
            "send_message",
            {"room_id": ROOM, "text": ""},
            "send_message: text: String should have at least 1 character. Correct the"
            " arguments and call send_message again.",
        ),
        (
            "send_message",
            {"room_id": ROOM},
            "send_message: text: Field required. Correct the arguments and call send_message"
            " again.",
        ),
        (
            "read_messages",
            {"room_id": ROOM, "limit": "many"},
            "read_messages: limit: Input should be a valid integer, unable to parse string as"
            " an integer. Correct the arguments and call read_messages again.",
        ),
        (
            # Before: the room's 413, "text is too long", with no limit.
            "send_message",
            {"room_id": ROOM, "text": "x" * (MAX_MESSAGE_CHARS + 1)},
            f"send_message: text: String should have at most {MAX_MESSAGE_CHARS} characters."
            " Correct the arguments and call send_message again.",
        ),
    ],
)
async def test_refused_arguments_are_named_in_plain_words(
    fake_room: FakeRoom, tmp_path: Path, tool: str, arguments: dict[str, Any], text: str
) -> None:
    server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
    with trio.fail_after(10):
        async with Client(server) as client:
            error = await call_error(client, tool, arguments)
    assert error == text
    assert "pydantic" not in error
    assert "http" not in error


async def test_the_message_limit_is_in_the_schema(fake_room: FakeRoom, tmp_path: Path) -> None:
    server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
    with trio.fail_after(10):
        async with Client(server) as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    text = tools["send_message"].input_schema["properties"]["text"]
    assert (text["minLength"], text["maxLength"]) == (1, MAX_MESSAGE_CHARS)


async def test_an_empty_wait_answers_every_field_of_a_read(
    autojump_clock: MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    """Before: an empty answer had only ``messages`` and ``room_id`` (a KeyError for a host)."""
    server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
    async with Client(server) as client:
        worker_id = (await register(client))["worker_id"]
        sent = await call_ok(client, "send_message", {"worker_id": worker_id, "text": "hi"})
        cursor = sent["id"]
        read = await call_ok(client, "read_messages", {"worker_id": worker_id})
        empty = await call_ok(
            client,
            "wait_for_messages",
            {"worker_id": worker_id, "after_message_id": cursor, "timeout": 1_000},
        )
        first = await call_ok(
            client, "wait_for_messages", {"worker_id": worker_id, "timeout": 1_000}
        )
    assert set(empty) == set(read) == set(first)
    assert empty == {
        "messages": [],
        "room_id": ROOM,
        "truncated": False,
        "last_observed_message_id": cursor,  # the place to go on from, unchanged
    }
    assert read["last_observed_message_id"] == cursor
    assert read["truncated"] is False
    assert first["last_observed_message_id"] == cursor


async def test_a_registration_the_room_holds_reports_progress_saying_why(
    autojump_clock: MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    """Before: 8.9-11.6 s without a word while a name passed on (PROTOCOL §7.3)."""
    server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
    held = fake_room.on("POST", REGISTRATIONS).hold()
    beats: list[tuple[float, float, str | None]] = []
    async with Client(server) as client, trio.open_nursery() as nursery:
        started = trio.current_time()

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            await trio.lowlevel.checkpoint()
            beats.append((trio.current_time() - started, progress, message))

        async def release_later() -> None:
            await held.wait_held()
            await trio.sleep(5)
            held.release()

        nursery.start_soon(release_later)
        result = await client.call_tool(
            "register_agent_session",
            {"room_id": ROOM, "registration_key": "k", "display_name": "Juniper"},
            progress_callback=on_progress,
        )
    assert not result.is_error
    message = (
        "waiting for the room's answer: a name passing on from a session whose process just"
        " stopped takes up to 15.5 s"
    )
    assert beats[:2] == [(2.0, 1, message), (4.0, 2, message)]
