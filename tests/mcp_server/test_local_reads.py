"""read_messages in a local room past one page of the local chat (issue 45).

The local chat answers at most :data:`~letagents_trio._protocol.MAX_MESSAGE_PAGE`
(200) messages a page: a read of up to that many is its newest page, a larger
one (or 0, the whole history) walks its pages forward and keeps the newest
``limit``, at most :data:`~letagents_trio.workers._room_work.MAX_READ`.
``truncated`` says older messages were left out. The messages are written by
a second :class:`~letagents_trio.LocalChat` on the same file, as another MCP
process of the user would; the reads go through the tool (SDK in-memory
client), under ``autojump_clock``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Final

import trio
import trio.testing
from mcp import Client

from letagents_trio._protocol import MAX_MESSAGE_PAGE
from letagents_trio._session import AgentSession
from letagents_trio.mcp_server import _message_tools, create_server
from letagents_trio.workers._local_chat import LocalChat

from .helpers import call_ok, config_for, register

if TYPE_CHECKING:
    from pathlib import Path

    import pytest

    from letagents_trio.testing import FakeRoom

LOCAL_ROOM: Final = "room_local"
# More than two pages of the local chat.
WRITTEN: Final = 450


async def read_texts(client: Client, worker: str, limit: int) -> tuple[list[str], bool]:
    """The texts read_messages answers for ``limit``, and its ``truncated``."""
    read = await call_ok(client, "read_messages", {"worker_id": worker, "limit": limit})
    assert read["room_id"] == LOCAL_ROOM
    return [m["text"] for m in read["messages"]], read["truncated"]


async def local_reads(
    fake_room: FakeRoom, tmp_path: Path, limits: list[int]
) -> list[tuple[list[str], bool]]:
    """Write :data:`WRITTEN` messages to a local room, then read them with each limit."""
    settings = {"mode": "cloud", "roomOverrides": {LOCAL_ROOM: "local"}}
    (tmp_path / "chat-storage.json").write_text(json.dumps(settings))
    server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
    reads: list[tuple[list[str], bool]] = []
    with trio.fail_after(120):
        async with Client(server, mode="legacy") as client:
            answer = await register(client, "k1", "Juniper", room=LOCAL_ROOM)
            worker = answer["worker_id"]
            session = AgentSession(
                session_id=answer["agent_session"]["session_id"],
                session_token="unused",
                room_id=LOCAL_ROOM,
                display_name="Juniper",
            )
            other_process = LocalChat(tmp_path / "local-chat.sqlite")
            try:
                for i in range(WRITTEN):
                    await other_process.send(session, f"m{i}")
            finally:
                other_process.close()
            for limit in limits:
                reads.append(await read_texts(client, worker, limit))
    assert [r.path for r in fake_room.requests if LOCAL_ROOM in r.path] == []
    return reads


def newest(count: int) -> list[str]:
    """The texts of the newest ``count`` messages written, oldest first."""
    return [f"m{i}" for i in range(WRITTEN - count, WRITTEN)]


async def test_a_local_read_past_one_page_walks_the_pages_and_keeps_the_newest(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    page = MAX_MESSAGE_PAGE
    limits = [0, page, page + 1, WRITTEN - 1, WRITTEN, WRITTEN + 1]
    reads = await local_reads(fake_room, tmp_path, limits)
    assert reads == [
        (newest(WRITTEN), False),  # 0: the whole history
        (newest(page), True),  # one page: the newest page
        (newest(page + 1), True),  # one more: walked, the oldest left out
        (newest(WRITTEN - 1), True),
        (newest(WRITTEN), False),
        (newest(WRITTEN), False),
    ]


async def test_a_local_read_keeps_at_most_max_read_messages(
    autojump_clock: trio.testing.MockClock,
    fake_room: FakeRoom,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The whole history and a limit above the bound both keep the newest MAX_READ
    (lowered here to 300, so that the walk crosses pages on both sides of it)."""
    monkeypatch.setattr(_message_tools, "MAX_READ", 300)
    reads = await local_reads(fake_room, tmp_path, [0, 299, 300, 301])
    assert reads == [
        (newest(300), True),
        (newest(299), True),
        (newest(300), True),
        (newest(300), True),
    ]


async def test_a_local_read_of_the_newest_page_says_whether_older_ones_remain(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    """Within one page: truncated only when the room holds more than the read took."""
    settings = {"mode": "cloud", "roomOverrides": {LOCAL_ROOM: "local"}}
    (tmp_path / "chat-storage.json").write_text(json.dumps(settings))
    server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
    with trio.fail_after(60):
        async with Client(server, mode="legacy") as client:
            worker = (await register(client, "k1", "Juniper", room=LOCAL_ROOM))["worker_id"]
            for text in ("a", "b", "c"):
                await call_ok(client, "send_message", {"worker_id": worker, "text": text})
            reads = [await read_texts(client, worker, limit) for limit in (100, 3, 2)]
    assert reads == [(["a", "b", "c"], False), (["a", "b", "c"], False), (["b", "c"], True)]
