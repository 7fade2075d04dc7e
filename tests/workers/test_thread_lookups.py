"""Finding a thread's root past the newest page, and giving up on an id no page has.

``RoomWork.thread_root`` looks each message of a reply chain up in the room's
newest pages (``before=latest``, then ``before`` the oldest message seen), at
most :data:`~letagents_trio.workers._room_work.MAX_SCAN_PAGES` pages a lookup.
The rooms here are ``httpx2.MockTransport`` handlers that page a list of
messages shaped as the letagents API sends them (``msg_<n>`` ids, a
``reply_to`` reference, each message its own ``thread_root_id``), recording
the ``before`` of every page asked for.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import httpx2
import pytest
import trio
import trio.testing

from letagents_trio import RoomClient
from letagents_trio.workers._room_work import MAX_SCAN_PAGES, PAGE, Acting, RoomWork

from .helpers import ROOM

if TYPE_CHECKING:
    from collections.abc import Callable

API: Final = "http://room.test"
# Three of the pages a lookup asks for: the newest, then two older.
COUNT: Final = 2 * PAGE + 200


def message(n: int, reply_to: int | None = None) -> dict[str, Any]:
    ref = None if reply_to is None else {"id": f"msg_{reply_to}"}
    return {"id": f"msg_{n}", "text": f"m{n}", "reply_to": ref, "thread_root_id": f"msg_{n}"}


def paged_room(
    messages: list[dict[str, Any]], asked: list[str]
) -> Callable[[httpx2.Request], httpx2.Response]:
    """A room that answers ``GET …/messages?before=&limit=`` from ``messages`` (oldest
    first), recording each ``before``."""
    index = {m["id"]: i for i, m in enumerate(messages)}

    def handler(request: httpx2.Request) -> httpx2.Response:
        before = request.url.params["before"]
        asked.append(before)
        end = len(messages) if before == "latest" else index[before]
        start = max(0, end - int(request.url.params["limit"]))
        page = {"messages": messages[start:end], "has_older": start > 0}
        return httpx2.Response(200, json=page)

    return handler


def work_over(handler: Callable[[httpx2.Request], httpx2.Response]) -> RoomWork:
    return RoomWork(RoomClient(API, owner_token="t", transport=httpx2.MockTransport(handler)))


async def test_a_thread_root_is_found_beyond_the_newest_page(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """msg_2 answers msg_1, both in the third page back: each lookup pages back to it."""
    messages = [message(1), message(2, reply_to=1)]
    messages += [message(n) for n in range(3, COUNT + 1)]
    asked: list[str] = []
    work = work_over(paged_room(messages, asked))
    with trio.fail_after(10):
        assert await work.thread_root(Acting(room_id=ROOM), "msg_2") == "msg_1"
    pages = ["latest", f"msg_{COUNT - PAGE + 1}", f"msg_{COUNT - 2 * PAGE + 1}"]
    assert asked == pages * 2  # msg_2, then msg_1, each found on the third page


async def test_an_id_no_page_has_is_its_own_root_after_the_oldest_page(
    autojump_clock: trio.testing.MockClock,
) -> None:
    asked: list[str] = []
    work = work_over(paged_room([message(n) for n in range(1, COUNT + 1)], asked))
    with trio.fail_after(10):
        assert await work.thread_root(Acting(room_id=ROOM), "msg_999999") == "msg_999999"
    assert asked == ["latest", f"msg_{COUNT - PAGE + 1}", f"msg_{COUNT - 2 * PAGE + 1}"]


async def test_a_lookup_gives_up_after_its_bound_in_a_room_with_no_oldest_page(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A room that always has older messages costs MAX_SCAN_PAGES pages a lookup."""
    asked: list[str] = []

    def endless(request: httpx2.Request) -> httpx2.Response:
        asked.append(request.url.params["before"])
        n = 10**6 - len(asked)
        return httpx2.Response(200, json={"messages": [message(n)], "has_older": True})

    work = work_over(endless)
    with trio.fail_after(10):
        assert await work.thread_root(Acting(room_id=ROOM), "msg_1") == "msg_1"
    assert len(asked) == MAX_SCAN_PAGES
    assert asked[:3] == ["latest", f"msg_{10**6 - 1}", f"msg_{10**6 - 2}"]


async def test_a_chain_that_leads_to_a_missing_message_ends_at_that_id(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """msg_3 answers msg_2, which no page has: the thread's root is taken to be msg_2, the
    id the reply named, for the room to judge."""
    asked: list[str] = []
    work = work_over(paged_room([message(1), message(3, reply_to=2)], asked))
    with trio.fail_after(10):
        assert await work.thread_root(Acting(room_id=ROOM), "msg_3") == "msg_2"
    assert asked == ["latest", "latest"]


@pytest.mark.parametrize(
    ("page", "pages_asked"), [([message(7)], ["latest", "msg_7"]), ([], ["latest"])]
)
async def test_a_page_that_does_not_move_back_ends_the_lookup(
    autojump_clock: trio.testing.MockClock, page: list[dict[str, Any]], pages_asked: list[str]
) -> None:
    """A room that answers the same page, or an empty one, whatever ``before`` says,
    while it claims older messages: the lookup stops there, not at its bound."""
    asked: list[str] = []

    def stuck(request: httpx2.Request) -> httpx2.Response:
        asked.append(request.url.params["before"])
        return httpx2.Response(200, json={"messages": page, "has_older": True})

    work = work_over(stuck)
    with trio.fail_after(10):
        assert await work.thread_root(Acting(room_id=ROOM), "msg_1") == "msg_1"
    assert asked == pages_asked
