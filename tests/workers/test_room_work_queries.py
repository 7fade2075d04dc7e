"""The requests the host layer's room-work calls send: routes, queries and bodies.

``httpx2.MockTransport`` rooms record each request; the assertions are on the
wire (path, query, body), which is what a letagents room reads.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Final

import httpx2
import trio
import trio.testing

from letagents_trio import RoomClient
from letagents_trio.workers._room_work import PAGE, Acting, RoomWork

from .helpers import ROOM

if TYPE_CHECKING:
    from collections.abc import Callable

API: Final = "http://room.test"


def recording(
    seen: list[httpx2.Request], body: Callable[[httpx2.Request], dict[str, Any]] | None = None
) -> RoomWork:
    """A RoomWork over a room that records each request and answers ``body(request)``."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return httpx2.Response(200, json={} if body is None else body(request))

    return RoomWork(RoomClient(API, owner_token="t", transport=httpx2.MockTransport(handler)))


def query(request: httpx2.Request) -> dict[str, str]:
    return dict(request.url.params)


async def test_a_long_poll_asks_for_100_messages_after_the_cursor(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[httpx2.Request] = []
    work = recording(seen)
    acting = Acting(room_id=ROOM)
    with trio.fail_after(10):
        await work.poll(acting, after="msg_7", timeout_ms=25_000, abort_ms=35_000)
        await work.poll(acting, after=None, timeout_ms=1_000, abort_ms=2_000)
    assert [r.url.path for r in seen] == [f"/rooms/{ROOM}/messages/poll"] * 2
    assert [query(r) for r in seen] == [
        {"after": "msg_7", "limit": "100", "timeout": "25000", "include_prompt_only": "1"},
        {"limit": "100", "timeout": "1000", "include_prompt_only": "1"},
    ]


async def test_a_read_asks_for_what_is_left_a_page_at_most(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """The newest ``limit`` messages: ``before=latest`` for at most a page, then before
    the oldest seen for what is still wanted."""
    seen: list[httpx2.Request] = []

    def page(request: httpx2.Request) -> dict[str, Any]:
        size = int(request.url.params["limit"])
        top = 10_000 - PAGE * (len(seen) - 1)
        messages = [{"id": str(n)} for n in range(top - size, top)]
        return {"messages": messages, "has_older": True}

    work = recording(seen, page)
    with trio.fail_after(10):
        read = await work.recent_messages(Acting(room_id=ROOM), PAGE + 3)
    assert [query(r) for r in seen] == [
        {"before": "latest", "limit": str(PAGE), "include_prompt_only": "1"},
        {"before": str(10_000 - PAGE), "limit": "3", "include_prompt_only": "1"},
    ]
    assert (len(read["messages"]), read["truncated"]) == (PAGE + 3, True)


async def test_a_task_id_is_one_segment_of_the_path(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """An id with a slash or a question mark stays one path segment (quoted whole)."""
    seen: list[httpx2.Request] = []
    work = recording(seen)
    acting = Acting(room_id=ROOM)
    with trio.fail_after(10):
        await work.task(acting, "task_1/../x?y")
        await work.update_task(acting, "task_2", {"status": "in_progress"})
        await work.lease_action(acting, "task_3", {"action": "release"})
    assert [(r.method, r.url.raw_path.decode()) for r in seen] == [
        ("GET", f"/rooms/{ROOM}/tasks/task_1%2F..%2Fx%3Fy"),
        ("PATCH", f"/rooms/{ROOM}/tasks/task_2"),
        ("POST", f"/rooms/{ROOM}/tasks/task_3/lease-action"),
    ]
    assert [json.loads(r.content) for r in seen[1:]] == [
        {"status": "in_progress"},
        {"action": "release"},
    ]
