"""Which of the room's leases a registration adopts, over the routes (both stores, §7.3).

Only the returning worker's own active leases move: not one that expired, not
another agent's (and another agent's lease met first stops nothing), and a
same-named legacy holder's work stays while its agent key has a live session.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs
import trio
import trio.testing

from .helpers import (
    announce_exit,
    claimed_task,
    disconnect,
    drop,
    hold,
    registered,
    registration,
    worker_id,
)

if TYPE_CHECKING:
    import httpx2

    from letagents_trio.room_server import Room


async def test_a_returning_worker_adopts_its_active_leases_only(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    b = await registered(client, registration(name="B"))
    await claimed_task(client, b, "B's")  # met first (leases go oldest first), not A's
    instance = worker_id()
    a = await registered(client, registration(name="A", instance=instance))
    await trio.sleep(1)
    _, expiring = await claimed_task(client, a, "expires")
    await trio.sleep(1)
    later, kept = await claimed_task(client, a, "expires later")
    now = room.clock.now_ms()
    for lease, expires_at in ((expiring, now + 1_000), (kept, now + 3_600_000)):
        row = room.store.get_lease(lease["id"])
        assert row is not None
        room.store.put_lease(attrs.evolve(row, expires_at=expires_at))
    await disconnect(client, a)
    await trio.sleep(2)  # the first lease has expired
    back = await registered(client, registration(name="A", instance=instance, replace=a))
    assert back["adopted_task_leases"] == [
        {"lease_id": kept["id"], "task_id": later, "kind": "work"}
    ]


async def test_a_legacy_name_passes_no_work_while_its_key_has_a_live_session(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
) -> None:
    old = await registered(
        client, registration(name="Builder", instance="legacy-1", actor="owner/legacy-one")
    )
    await claimed_task(client, old)
    await registered(
        client, registration(name="Helper", instance="legacy-1b", actor="owner/legacy-one")
    )
    await drop(await nursery.start(hold, client, old))
    assert await announce_exit(client, old)
    new = await registered(
        client, registration(name="Builder", instance="legacy-2", actor="owner/legacy-two")
    )
    assert new["display_name"] == "Builder"
    assert "adopted_task_leases" not in new
