"""An embedder gets held worker sessions from a room with public names only.

This is the usage ``docs/worker-handles.md`` describes, written with nothing but
``letagents_trio``, ``letagents_trio.workers`` and the testing kit's room: if a
name it needs ever goes private, this test stops importing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from letagents_trio import HolderStatus, RoomClient, open_connection_manager
from letagents_trio.workers import LocalStateStore, WorkerHandles

if TYPE_CHECKING:
    from pathlib import Path

    from trio.testing import MockClock

    from letagents_trio.testing import FakeRoom


async def test_an_embedder_registers_a_worker_and_its_session_is_held(
    autojump_clock: MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    store = LocalStateStore(tmp_path / "mcp-state.json")
    async with (
        RoomClient(
            fake_room.api_url,
            owner_token=fake_room.owner_token,
            transport=fake_room.transport,
            state=store,
        ) as client,
        open_connection_manager(client, state=store, owner_mode=True) as manager,
    ):
        handles = WorkerHandles(client=client, state=store, manager=manager, owner_mode=True)
        created = await handles.register(
            room_id="room_shared", registration_key="embedder-chat-1", display_name="Juniper"
        )
        session = created.session
        assert session.display_name == "Juniper"
        assert created.worker_id.startswith("worker_")
        holder = manager.holders[session.session_id]
        with trio.fail_after(5):
            assert await holder.wait_status(HolderStatus.OPEN) is HolderStatus.OPEN
        # The kept handle resumes the same session, once the room has confirmed it.
        sent = len(fake_room.requests)
        resumed = await handles.register(room_id="room_shared", worker_id=created.worker_id)
        assert resumed.session == session
        assert len(fake_room.requests) == sent + 1
        # The session acts in the room with its own credentials.
        async with handles.acting_as(worker_id=created.worker_id) as acting:
            message = await client.call(
                "POST", "/rooms/room_shared/messages", json={"text": "hello"}, session=acting
            )
        assert message["agent_session_id"] == session.session_id
    # Leaving the manager's block announced the held session's exit.
    assert [exit.session_id for exit in fake_room.exits] == [session.session_id]
