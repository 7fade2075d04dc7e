"""``post_reasoning``'s snapshot as the room stores it (``_reasoning_tool.py``).

Each text field is trimmed, and one that is blank once trimmed is left out,
so that a snapshot never shows an empty goal or blocker; the worker's actor
label, from the state file, finds its open reasoning session to update (a
worker bearer's marker, with no record there, starts one each time).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio
import trio.testing
from mcp import Client

from letagents_trio.mcp_server import create_server

from .helpers import HTTPS_URL, ROOM, call_ok, config_for
from .test_wake_capture_tools import two_workers

BEARER = "lasb_a-supervisors-worker-bearer"

if TYPE_CHECKING:
    from pathlib import Path

    from letagents_trio.testing import FakeRoom


async def test_a_snapshots_fields_are_trimmed_and_blank_ones_left_out(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    with trio.fail_after(60):
        async with two_workers(fake_room, tmp_path) as (client, alder, _):
            args = {
                "worker_id": alder["worker_id"],
                "summary": "  reading  ",
                "goal": "  fix the build ",
                "checking": " \n ",
                "hypothesis": "",
                "blocker": "  ",
                "next_action": "\tread the log\n",
            }
            first = await call_ok(client, "post_reasoning", args)
            again = await call_ok(
                client, "post_reasoning", {"worker_id": alder["worker_id"], "summary": "on"}
            )
    payload = first["session"]["latest_payload"]
    assert {k: payload.get(k) for k in ("summary", "goal", "next_action")} == {
        "summary": "reading",
        "goal": "fix the build",
        "next_action": "read the log",
    }
    assert {k for k in ("checking", "hypothesis", "blocker", "milestone") if k in payload} == set()
    assert first["milestone_message_id"] is None
    assert again["session"]["id"] == first["session"]["id"]


async def test_a_worker_bearers_marker_posts_a_new_reasoning_session(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    """The marker has no record in the state file, so no actor label to find an open
    session by: the snapshot starts a session, sent with the bearer alone."""
    route = f"/rooms/{ROOM}/reasoning-sessions"
    fake_room.on("POST", route).respond(201, {"room_id": ROOM, "session": {"id": "rs_1"}})
    config = config_for(fake_room, tmp_path, token=None, worker_bearer=BEARER, api_url=HTTPS_URL)
    with trio.fail_after(10):
        async with Client(create_server(config, transport=fake_room.transport)) as client:
            answer = await call_ok(client, "post_reasoning", {"room_id": ROOM, "summary": "on"})
    assert (answer["success"], answer["session"]) == (True, {"id": "rs_1"})
    (sent,) = fake_room.requests
    assert (sent.method, sent.path, sent.bearer, sent.body) == (
        "POST",
        route,
        BEARER,
        {"summary": "on"},
    )
