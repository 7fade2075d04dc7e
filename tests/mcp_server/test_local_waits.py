"""A local room's ``wait_for_messages`` at its page's edge (``_wait_tool._wait_locally``).

Without a cursor the wait answers the newest 100 messages at once; after a
cursor, the first 100 after it: 101 messages leave one out either way.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio
import trio.testing
from mcp import Client

from letagents_trio.mcp_server._wait_tool import MESSAGE_LIMIT

from .helpers import ROOM, call_ok, register
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


async def test_messages_that_come_after_the_last_look_are_read_at_the_timeout(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    """Another process's messages are seen at the wait's next look (every 0.25 s); those
    written between the last look and the timeout are read once more as it ends: one page
    of 100."""
    waited: list[dict[str, Any]] = []
    with trio.fail_after(100):
        async with (
            Client(local_server(fake_room, tmp_path), mode="legacy") as first,
            Client(local_server(fake_room, tmp_path), mode="legacy") as second,
        ):
            waiter = (await register(first, "k1", "Juniper", room=LOCAL_ROOM))["worker_id"]
            sender = (await register(second, "k2", "Cedar", room=LOCAL_ROOM))["worker_id"]
            sent = await call_ok(second, "send_message", {"worker_id": sender, "text": "m"})
            start = trio.current_time()

            async def wait() -> None:
                args = {"worker_id": waiter, "after_message_id": sent["id"], "timeout": 2_100}
                waited.append(await call_ok(first, "wait_for_messages", args))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait)
                await trio.sleep_until(start + 2.05)
                for n in range(MESSAGE_LIMIT + 1):
                    await call_ok(second, "send_message", {"worker_id": sender, "text": f"{n}"})
            assert trio.current_time() == start + 2.1
    (answer,) = waited
    assert [m["text"] for m in answer["messages"]] == [f"{n}" for n in range(MESSAGE_LIMIT)]


async def test_a_local_wait_looks_again_at_the_workers_session_in_that_room(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    """A worker registered in a hosted room too: each look checks its local room's
    session, and the wait lasts its whole timeout."""
    server = local_server(fake_room, tmp_path)
    with trio.fail_after(100):
        async with Client(server, mode="legacy") as client:
            worker_id = (await register(client, "k1", "Juniper", room=LOCAL_ROOM))["worker_id"]
            args = {"worker_id": worker_id, "room_id": ROOM}
            await call_ok(client, "register_agent_session", args)
            who = {"worker_id": worker_id, "room_id": LOCAL_ROOM}
            sent = await call_ok(client, "send_message", {**who, "text": "hi"})
            start = trio.current_time()
            args = {**who, "after_message_id": sent["id"], "timeout": 1_000}
            waited = await call_ok(client, "wait_for_messages", args)
            assert trio.current_time() - start == 1.0
    assert waited["messages"] == []
