"""What worker handles say when the owner's account cannot be read: the real cause (issue 29).

Each failure of ``GET /agents/me`` is named for what it is (a wrong address
is not a failing room), and the advice names what the embedder set (the
``RoomClient``'s ``api_url``), never the MCP server's environment; the MCP
server's own wording is checked over its tools in
``tests/mcp_server/test_user_errors.py``.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from letagents_trio.workers import WorkerError

from .helpers import ROOM, open_proc

if TYPE_CHECKING:
    from trio.testing import MockClock

    from letagents_trio.testing import FakeRoom

RETRY = (
    " Then retry with the same worker_id or registration_key."
    " Saved worker identities have not been changed."
)


async def register_error(fake_room: FakeRoom, path: Path, api_url: str = "http://room.test") -> str:
    async with open_proc(fake_room.transport, path, api_url=api_url) as p:
        with pytest.raises(WorkerError) as caught:
            await p.handles.register(room_id=ROOM, registration_key="k")
    return str(caught.value)


async def test_a_wrong_path_is_named_as_the_address_not_a_failing_room(
    autojump_clock: MockClock, fake_room: FakeRoom, path: Path
) -> None:
    """Before: ``HTTP 404. The room is failing; retry once it answers again.``"""
    text = await register_error(fake_room, path, api_url="http://room.test/api")
    assert text == (
        "Could not verify your LetAgents account at http://room.test/api: GET /api/agents/me"
        " answered HTTP 404. No letagents room API answers at that address: a server that is"
        " not a room, or a path the room API does not have, answers so. Correct the address"
        " (the RoomClient's api_url): it is the room API's base URL, such as"
        " http://127.0.0.1:3001 for letagents-trio room." + RETRY
    )
    assert "failing" not in text


@pytest.mark.parametrize(
    ("status", "cause", "advice"),
    [
        (
            405,
            "GET /agents/me answered HTTP 405",
            "No letagents room API answers at that address",
        ),
        (
            400,
            "GET /agents/me was refused (HTTP 400)",
            "Check that the address is a letagents room API (the RoomClient's api_url).",
        ),
        (502, "HTTP 502", "The room is failing; retry once it answers again."),
    ],
)
async def test_each_status_names_its_own_cause(
    autojump_clock: MockClock,
    fake_room: FakeRoom,
    path: Path,
    status: int,
    cause: str,
    advice: str,
) -> None:
    fake_room.on("GET", "/agents/me").respond(status, {"error": "no"}, times=None)
    text = await register_error(fake_room, path)
    assert text.startswith(f"Could not verify your LetAgents account at http://room.test: {cause}")
    assert advice in text
    assert text.endswith(RETRY)


async def test_an_embedder_is_pointed_at_its_room_client_not_the_mcp_server(
    autojump_clock: MockClock, fake_room: FakeRoom, path: Path
) -> None:
    """Before: ``(the MCP server's LETAGENTS_API_URL)`` to a program with no MCP server."""
    fake_room.on("GET", "/agents/me").drop_before_commit(times=1)
    text = await register_error(fake_room, path)
    assert "Check that the room is running at that address (the RoomClient's api_url)." in text
    assert "MCP" not in text
    assert "LETAGENTS_" not in text
    fake_room.on("GET", "/agents/me").respond(200, {"account": {}}, times=None)
    text = await register_error(fake_room, path)
    assert text == (
        "Could not verify your LetAgents account at http://room.test: its answer named no"
        " account login. Check that the address is a letagents room API (the RoomClient's"
        " api_url)." + RETRY
    )
