"""``GET /rooms/{room}/process-statistics`` (ours): one room's stream and exit counters.

Read-only and for the room's admins only (an owner bearer of an account that
owns a session in the room), on both stores; the counters follow streams held,
and each exit announced: recorded or not, matched to the open connection or
not, over the socket or posted.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio
import trio.testing

from letagents_trio import HolderStatus, WebSocketConnector, open_connection_manager
from letagents_trio.room_server._statistics import STATISTICS_ADMIN_TEXT

from .helpers import (
    OTHER_TOKEN,
    ROOM,
    drop,
    hold,
    owner_headers,
    registered,
    registration,
    session_headers,
)
from .paths import process_path

if TYPE_CHECKING:
    import httpx2

    from letagents_trio.room_server import Room
    from letagents_trio.testing import FakeRoom

PATH = f"/rooms/{ROOM}/process-statistics"
ZERO = {
    "held": 0,
    "exits_announced": 0,
    "exits_recorded": 0,
    "exits_matched": 0,
    "exits_over_socket": 0,
}


async def statistics(client: httpx2.AsyncClient) -> dict[str, Any]:
    response = await client.get(PATH, headers=owner_headers())
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    assert body.pop("room_id") == ROOM
    return body


async def post_exit(
    client: httpx2.AsyncClient, session: dict[str, Any], connection_id: str | None
) -> dict[str, Any]:
    response = await client.post(
        process_path(session) + "/exit",
        json={"process_connection_id": connection_id},
        headers=session_headers(session),
    )
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


async def test_only_the_rooms_admins_read_it(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    unknown = await client.get("/rooms/nowhere/process-statistics", headers=owner_headers())
    assert unknown.status_code == 404
    worker = await registered(client, registration())
    assert (await client.get(PATH)).status_code == 401
    assert (await client.get(PATH, headers=owner_headers("not-a-token"))).status_code == 401
    # Session credentials alone are not an admin: the bearer is what is looked at.
    as_agent = session_headers(worker)
    del as_agent["Authorization"]
    assert (await client.get(PATH, headers=as_agent)).status_code == 401
    stranger = await client.get(PATH, headers=owner_headers(OTHER_TOKEN))
    assert (stranger.status_code, stranger.json()["error"]) == (403, STATISTICS_ADMIN_TEXT)
    assert (await client.post(PATH, headers=owner_headers())).status_code == 405
    assert await statistics(client) == ZERO


async def test_streams_held_and_exits_by_how_they_were_recorded(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    named, after_drop, stale = [await registered(client, registration()) for _ in range(3)]
    async with trio.open_nursery() as nursery:
        scopes = [await nursery.start(hold, client, s) for s in (named, after_drop, stale)]
        assert (await statistics(client))["held"] == 3
        current = room.session(named["session_id"])
        assert current is not None
        # Named the connection the room holds open: recorded and matched.
        assert await post_exit(client, named, current.process_connection_id) == {"recorded": True}
        # A replay is announced but changes nothing.
        assert (await post_exit(client, named, current.process_connection_id))["recorded"] is False
        # Named a connection that is not the session's current one: not recorded.
        assert await post_exit(client, stale, "not-the-current-one") == {"recorded": False}
        # Named none after a recorded drop: recorded, not matched to a connection.
        await drop(scopes[1])
        assert await post_exit(client, after_drop, None) == {"recorded": True}
        assert await statistics(client) == {
            **ZERO,
            "held": 2,
            "exits_announced": 4,
            "exits_recorded": 2,
            "exits_matched": 1,
        }
        nursery.cancel_scope.cancel()
    await trio.testing.wait_all_tasks_blocked()
    assert (await statistics(client))["held"] == 0


async def test_an_exit_over_the_socket_is_counted_as_such(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom
) -> None:
    session = await fake_room.add_worker()
    room, owner = fake_room.room, fake_room.owner_token
    async with fake_room.client() as client:
        async with open_connection_manager(client, connector=WebSocketConnector(client)) as manager:
            holder = manager.hold(session)
            await holder.wait_status(HolderStatus.OPEN)
            await trio.sleep(1)  # the open frame, with the connection id, has arrived
            assert holder.connection_id is not None
            reply = room.process_statistics(session.room_id, owner)
            assert (reply.status, reply.body["held"]) == (200, 1)
            await manager.announce_exits()
    await trio.testing.wait_all_tasks_blocked()
    reply = room.process_statistics(session.room_id, owner)
    assert reply.body == {
        "room_id": session.room_id,
        **ZERO,
        "exits_announced": 1,
        "exits_recorded": 1,
        "exits_matched": 1,
        "exits_over_socket": 1,
    }
