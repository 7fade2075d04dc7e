"""A FakeRoom whose reference room has a person who can approve device sign-ins."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Final

import httpx2
import trio

from letagents_trio.room_server import MemoryStore, Room, RoomConfig, TrioClock
from letagents_trio.testing import FakeRoom

# The person's sign-in token on the room (a person approves device sign-ins).
PERSON_TOKEN: Final = "person-sign-in-token"
PERSON_LOGIN: Final = "alice"
EPOCH_MS: Final = 1_800_000_000_000


@asynccontextmanager
async def open_room_with_person() -> AsyncIterator[FakeRoom]:
    """A FakeRoom (its usual owner token too) whose room knows :data:`PERSON_TOKEN`."""
    room = Room(
        store=MemoryStore(),
        clock=TrioClock(EPOCH_MS),
        owner_tokens={"owner-test-token": "owner"},
        person_tokens={PERSON_TOKEN: PERSON_LOGIN},
        config=RoomConfig(),
    )
    async with trio.open_nursery() as nursery:
        fake = FakeRoom(room, nursery=nursery)
        try:
            yield fake
        finally:
            nursery.cancel_scope.cancel(reason="room closed")


@asynccontextmanager
async def browser(room: FakeRoom) -> AsyncIterator[httpx2.AsyncClient]:
    """A person's browser, pointed at ``room``."""
    async with httpx2.AsyncClient(transport=room.transport, base_url=room.api_url) as http:
        yield http
