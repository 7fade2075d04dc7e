"""A helper program for the SIGKILL test (not a test): one MCP server holding one worker.

Usage::

    python tests/programs/holder_program.py API_URL STATE_PATH ROOM KEY NAME OWNER_TOKEN

It opens a room client, a connection manager and worker handles on the state
file, registers the worker created by ``KEY`` in ``ROOM`` as ``NAME``, waits
until its process connection is open, prints one JSON line
``{"worker_id", "session_id", "display_name"}`` and then holds the connection
until it is killed.
"""

from __future__ import annotations

import json
import sys

import trio

from letagents_trio import HolderStatus, RoomClient, open_connection_manager
from letagents_trio.workers import LocalStateStore, WorkerHandles


async def main(api_url: str, path: str, room: str, key: str, name: str, token: str) -> None:
    store = LocalStateStore(path)
    async with (
        RoomClient(api_url, owner_token=token, state=store) as client,
        open_connection_manager(client, state=store) as manager,
    ):
        handles = WorkerHandles(client=client, state=store, manager=manager)
        reg = await handles.register(room_id=room, registration_key=key, display_name=name)
        await manager.holders[reg.session.session_id].wait_status(HolderStatus.OPEN)
        info = {
            "worker_id": reg.worker_id,
            "session_id": reg.session.session_id,
            "display_name": reg.session.display_name,
        }
        print(json.dumps(info), flush=True)
        await trio.sleep_forever()


if __name__ == "__main__":
    api_url, path, room, key, name, token = sys.argv[1:7]
    trio.run(main, api_url, path, room, key, name, token)
