"""``post_reasoning``'s snapshot as the room stores it (``_reasoning_tool.py``).

Each text field is trimmed, and one that is blank once trimmed is left out,
so that a snapshot never shows an empty goal or blocker; the worker's actor
label, from the state file, finds its open reasoning session to update.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio
import trio.testing

from .helpers import call_ok
from .test_wake_capture_tools import two_workers

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
