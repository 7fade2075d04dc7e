"""Fixtures for the room-server tests.

Rules for these tests: every route test runs the real ASGI app in-process over
``letagents_trio.testing``'s streaming transport, with the room on
``TrioClock(EPOCH)`` under ``autojump_clock``, so stored times are ``EPOCH +
virtual ms`` and every assertion on time is exact. pytest-trio takes the run's
clock only from the *test's* own arguments, so each test asks for
``autojump_clock`` itself. Every store-touching test runs against both stores
(``store`` is parametrized: memory and SQLite).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx2
import pytest

from letagents_trio.room_server import (
    MemoryStore,
    Room,
    RoomConfig,
    RoomStore,
    SQLiteStore,
    TrioClock,
    create_app,
)
from letagents_trio.testing._transport import open_streaming_transport

from .helpers import EPOCH, OTHER_PERSON_TOKEN, OTHER_TOKEN, OWNER_TOKEN, PERSON_TOKEN


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[RoomStore]:
    if request.param == "memory":
        yield MemoryStore()
        return
    sqlite = SQLiteStore(tmp_path / "room.db")
    try:
        yield sqlite
    finally:
        sqlite.close()


@pytest.fixture
def room(store: RoomStore) -> Room:
    return Room(
        store=store,
        clock=TrioClock(EPOCH),
        owner_tokens={OWNER_TOKEN: "owner", OTHER_TOKEN: "other"},
        person_tokens={PERSON_TOKEN: "owner", OTHER_PERSON_TOKEN: "other"},
        config=RoomConfig(),
    )


@pytest.fixture
async def client(room: Room) -> AsyncIterator[httpx2.AsyncClient]:
    async with (
        open_streaming_transport(create_app(room)) as transport,
        httpx2.AsyncClient(transport=transport, base_url="http://room.test") as http,
    ):
        yield http
