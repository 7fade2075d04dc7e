"""A local room's ``wait_for_messages`` at its page's edge (``_wait_tool._wait_locally``).

Without a cursor the wait answers the newest 100 messages at once; after a
cursor, the first 100 after it: 101 messages leave one out either way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio
import trio.testing
from mcp import Client

from letagents_trio.mcp_server._wait_tool import MESSAGE_LIMIT

from .helpers import call_ok, register
from .test_local_rooms import LOCAL_ROOM, local_server

if TYPE_CHECKING:
    from pathlib import Path

    from letagents_trio.testing import FakeRoom


async def test_a_local_wait_answers_one_page_of_100_messages(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    server = local_server(fake_room, tmp_path)
    with trio.fail_after(100):
        async with Client(server, mode="legacy") as client:
            worker_id = (await register(client, "k1", "Juniper", room=LOCAL_ROOM))["worker_id"]
            ids = []
            for n in range(MESSAGE_LIMIT + 1):
                sent = await call_ok(
                    client, "send_message", {"worker_id": worker_id, "text": f"m{n}"}
                )
                ids.append(sent["id"])
            start = trio.current_time()
            newest = await call_ok(client, "wait_for_messages", {"worker_id": worker_id})
            args = {"worker_id": worker_id, "after_message_id": "0"}
            first = await call_ok(client, "wait_for_messages", args)
            assert trio.current_time() == start
    assert [m["id"] for m in newest["messages"]] == ids[1:]
    assert [m["id"] for m in first["messages"]] == ids[:-1]


async def test_the_owners_local_wait_lasts_its_whole_timeout(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    """The owner may wait in a local room without a worker: no session to look at again."""
    server = local_server(fake_room, tmp_path)
    with trio.fail_after(100):
        async with Client(server, mode="legacy") as client:
            worker_id = (await register(client, "k1", "Juniper", room=LOCAL_ROOM))["worker_id"]
            sent = await call_ok(client, "send_message", {"worker_id": worker_id, "text": "hi"})
            start = trio.current_time()
            args = {"room_id": LOCAL_ROOM, "after_message_id": sent["id"], "timeout": 1_500}
            waited = await call_ok(client, "wait_for_messages", args)
            assert trio.current_time() - start == 1.5
    assert waited["messages"] == []
