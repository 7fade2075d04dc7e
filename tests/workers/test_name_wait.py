"""A registration the room holds while a name passes on (issue 29, PROTOCOL §7.3-§7.4).

What ``docs/worker-handles.md`` ("When the room holds a registration") and
``docs/troubleshooting.md`` say, end to end at exact virtual times: a worker
whose process exits with a ``wait_for_messages`` open keeps its name for 12 s
after the disconnect, and a new worker of the same owner asking for that name
is answered 12.5 s later, with the name.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import trio

from .helpers import ROOM, open_proc

if TYPE_CHECKING:
    from trio.testing import MockClock

    from letagents_trio.testing import FakeRoom


async def test_a_name_held_by_a_process_that_exited_mid_wait_passes_after_12_5_s(
    autojump_clock: MockClock, fake_room: FakeRoom, path: Path, tmp_path: Path
) -> None:
    async with open_proc(fake_room.transport, path) as first:
        old = await first.handles.register(
            room_id=ROOM, registration_key="k1", display_name="Juniper"
        )

        async def wait_for_messages() -> None:
            async with first.handles.acting_as(worker_id=old.worker_id) as session:
                await first.client.call(
                    "GET",
                    f"/rooms/{ROOM}/messages/poll?timeout=60000",
                    session=session,
                    bounded=False,
                )

        async with trio.open_nursery() as nursery:
            nursery.start_soon(wait_for_messages)
            await trio.sleep(3)
            nursery.cancel_scope.cancel()  # the process stops with the wait in flight
    stopped = trio.current_time()
    async with open_proc(fake_room.transport, tmp_path / "second.json") as second:
        new = await second.handles.register(
            room_id=ROOM, registration_key="k2", display_name="Juniper"
        )
    assert trio.current_time() - stopped == 12.5
    assert new.session.display_name == "Juniper"
    assert new.worker_id != old.worker_id
