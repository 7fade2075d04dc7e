"""Embedding letagents-trio in a program that owns its own trio loop and nursery.

For embedders: you call ``trio.run`` and you own the nursery. The connection
manager is started in it with ``await nursery.start(serve_connection_manager, client)``,
which hands back the manager at once (it never waits on the network); you hold
sessions on it, and when your nursery is cancelled, for whatever reason, the
manager closes every stream and announces every exit within its 1.5 s deadline
before the cancellation completes.

To stay self-contained, this program also runs the reference room on a free
loopback port in the same nursery and registers one worker through the room's
own registration rules (the testing kit's ``register_worker``; a real host
gets its sessions from worker handles). Run it:
``python nurseries/embed_in_your_loop.py``.
"""

from __future__ import annotations

import secrets

import trio

from letagents_trio import HolderStatus, RoomClient, serve_connection_manager
from letagents_trio.room_server import MemoryStore, Room, serve_room
from letagents_trio.testing import register_worker

OWNER_TOKEN = secrets.token_urlsafe(24)
OWNER_LOGIN = "embedder"


async def main() -> None:
    room = Room(store=MemoryStore(), owner_tokens={OWNER_TOKEN: OWNER_LOGIN})
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            api_url = await nursery.start(serve_room, room)
            async with RoomClient(api_url, owner_token=OWNER_TOKEN) as client:
                session = await register_worker(
                    room, owner_token=OWNER_TOKEN, owner_login=OWNER_LOGIN, display_name="Juniper"
                )
                print(f"registered {session.display_name} in {session.room_id}")

                # The part an embedder writes: a manager in *your* nursery.
                async with trio.open_nursery() as your_nursery:
                    manager = await your_nursery.start(serve_connection_manager, client)
                    holder = manager.hold(session)
                    await holder.wait_status(HolderStatus.OPEN)
                    print(f"holding: status {holder.status.value}")
                    row = room.session(session.session_id)
                    assert row is not None
                    is_open = row.process_connection_id is not None
                    print(f"the room sees the process: connection open = {is_open}")
                    your_nursery.cancel_scope.cancel()  # your program decides to stop

                row = room.session(session.session_id)
                assert row is not None
                print(f"after the nursery closed, the room recorded: {row.process_connection_id!r}")
            nursery.cancel_scope.cancel()


if __name__ == "__main__":
    trio.run(main)
