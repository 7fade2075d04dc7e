"""The long poll's bounds at their edges (both stores): the page it answers (50 messages,
``has_more`` beyond) and its longest wait (the room's cap, to the millisecond)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing

from letagents_trio._protocol import DEFAULT_MESSAGE_PAGE

from .helpers import registered, registration, say
from .test_messages import poll

if TYPE_CHECKING:
    import httpx2

    from letagents_trio.room_server import Room


@pytest.mark.parametrize(
    ("waiting", "more"), [(DEFAULT_MESSAGE_PAGE, False), (DEFAULT_MESSAGE_PAGE + 1, True)]
)
async def test_a_poll_answers_one_page_of_the_messages_waiting(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, waiting: int, more: bool
) -> None:
    s = await registered(client, registration())
    for i in range(waiting):
        await say(client, s, f"m{i}")
    r = await poll(client, s, "?after=0&timeout=60000&limit=100")
    assert trio.current_time() == 0
    page = r.json()
    assert [m["text"] for m in page["messages"]] == [f"m{i}" for i in range(DEFAULT_MESSAGE_PAGE)]
    assert page["has_more"] is more


@pytest.mark.parametrize(
    ("asked_ms", "returns_at"), [(179_999, 179.999), (180_000, 180), (180_001, 180)]
)
async def test_a_poll_waits_at_most_the_rooms_cap(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    asked_ms: int,
    returns_at: float,
) -> None:
    assert room.config.poll_max_ms == 180_000
    s = await registered(client, registration())
    r = await poll(client, s, f"?timeout={asked_ms}")
    assert r.json()["messages"] == []
    assert trio.current_time() == pytest.approx(returns_at, abs=1e-9)
