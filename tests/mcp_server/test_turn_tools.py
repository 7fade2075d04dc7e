"""The supervised room turn's completion at its edges (``_turn_tools.py``).

``complete_room_turn`` checks its proposal as the Node server does: a reply
needs a text that is not blank once trimmed, of at most 32 KiB in UTF-8
bytes (32,768 bytes pass, 32,769 are refused, whatever the characters); a
``no_reply`` takes no text, blank counting as none. No proposal reaches the room.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import trio
from mcp import Client

from letagents_trio.mcp_server import create_server
from letagents_trio.mcp_server._turn_tools import MAX_ROOM_REPLY_BYTES

from .helpers import call_error, call_ok, supervised_config

if TYPE_CHECKING:
    from pathlib import Path

    from letagents_trio.testing import FakeRoom

NEEDS_TEXT = "complete_room_turn requires non-empty text when outcome is reply."
TOO_LONG = "complete_room_turn reply exceeds the 32 KiB public-message limit."
NO_TEXT = "complete_room_turn must omit text when outcome is no_reply."


@pytest.mark.parametrize(
    ("arguments", "refusal"),
    [
        ({"outcome": "reply", "text": "x" * MAX_ROOM_REPLY_BYTES}, None),
        ({"outcome": "reply", "text": f"  {'x' * MAX_ROOM_REPLY_BYTES}\n"}, None),
        ({"outcome": "reply", "text": "x" * (MAX_ROOM_REPLY_BYTES + 1)}, TOO_LONG),
        ({"outcome": "reply", "text": "é" * (MAX_ROOM_REPLY_BYTES // 2)}, None),
        ({"outcome": "reply", "text": "é" * (MAX_ROOM_REPLY_BYTES // 2) + "x"}, TOO_LONG),
        ({"outcome": "reply", "text": " \n\t "}, NEEDS_TEXT),
        ({"outcome": "reply", "text": ""}, NEEDS_TEXT),
        ({"outcome": "no_reply", "text": " \n "}, None),
        ({"outcome": "no_reply", "text": "x"}, NO_TEXT),
    ],
)
async def test_a_completion_is_checked_at_its_edges(
    fake_room: FakeRoom, tmp_path: Path, arguments: dict[str, Any], refusal: str | None
) -> None:
    config = supervised_config(fake_room, tmp_path, "supervised_room_turn", provider="cursor")
    with trio.fail_after(10):
        async with Client(create_server(config, transport=fake_room.transport)) as client:
            if refusal is None:
                answer = await call_ok(client, "complete_room_turn", arguments)
                assert (answer["accepted"], answer["outcome"]) == (True, arguments["outcome"])
            else:
                assert await call_error(client, "complete_room_turn", arguments) == refusal
    assert fake_room.requests == []
