"""Worker handles over real sockets: the reference room served on loopback (port 0).

Real clock, every test bounded by ``trio.fail_after``. The SIGKILL test runs a
real subprocess (``tests/programs/holder_program.py``) that registers a worker and holds its
process connection, kills it with SIGKILL (no exit announcement, no cleanup),
and reconnects the worker from this process: same session id, same name.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import trio

from letagents_trio import HolderStatus
from letagents_trio.room_server import MemoryStore, Room, RoomConfig, serve_room
from letagents_trio.workers import WorkerError
from letagents_trio.workers._wire import CONNECTION_REPLACED_TEXT

from ..workers.helpers import OWNER_TOKEN, ROOM, open_proc

if TYPE_CHECKING:
    from letagents_trio.room_server import SessionRow

PROGRAM = Path(__file__).parents[1] / "programs" / "holder_program.py"
# Wall-clock bound of each test: generous for a loaded CI machine.
BOUND = 30.0


@pytest.fixture
async def served(nursery: trio.Nursery) -> tuple[Room, str]:
    """The reference room on 127.0.0.1, a free port, the real clock (stopped with the test)."""
    room = Room(store=MemoryStore(), owner_tokens={OWNER_TOKEN: "owner"}, config=RoomConfig())
    url: str = await nursery.start(partial(serve_room, room, port=0))
    return room, url


def _row(room: Room, session_id: str) -> SessionRow:
    row = room.session(session_id)
    assert row is not None
    return row


async def test_create_restart_and_recover_over_loopback(
    served: tuple[Room, str], path: Path
) -> None:
    room, url = served
    with trio.fail_after(BOUND):
        async with open_proc(None, path, api_url=url) as first:
            created = await first.handles.register(
                room_id=ROOM, registration_key="k", display_name="Juniper"
            )
            sid = created.session.session_id
            await first.manager.holders[sid].wait_status(HolderStatus.OPEN)
            recovered = await first.handles.register(
                room_id=ROOM, display_name="Juniper", recover_lost_worker=True
            )
            assert recovered.session == created.session
        # The first server stopped and announced its exit.
        assert _row(room, sid).process_connection_id == "exited"
        async with open_proc(None, path, api_url=url) as second:
            resumed = await second.handles.register(room_id=ROOM, worker_id=created.worker_id)
            await second.manager.holders[sid].wait_status(HolderStatus.OPEN)
            await second.send("hello", worker_id=created.worker_id)
    assert resumed.session.session_id == sid
    assert resumed.session.display_name == "Juniper"
    assert len(room.store.room_sessions(ROOM)) == 1


async def test_two_servers_on_one_state_file_over_loopback(
    served: tuple[Room, str], path: Path
) -> None:
    _, url = served
    with trio.fail_after(BOUND):
        async with open_proc(None, path, api_url=url) as first:
            reg = await first.handles.register(room_id=ROOM, registration_key="k")
            async with open_proc(None, path, api_url=url) as second:
                await second.handles.register(room_id=ROOM, worker_id=reg.worker_id)
                await second.send("mine now", worker_id=reg.worker_id)
                with pytest.raises(WorkerError) as caught:
                    await first.send("still mine?", worker_id=reg.worker_id)
                assert str(caught.value) == CONNECTION_REPLACED_TEXT


async def _read_line(stream: trio.abc.ReceiveStream) -> bytes:
    data = b""
    while b"\n" not in data:
        chunk = await stream.receive_some()
        if not chunk:
            raise AssertionError(f"the holder program exited early: {data!r}")
        data += chunk
    return data.split(b"\n", 1)[0]


async def test_11_a_sigkilled_holder_is_reconnected_with_its_session_and_name(
    served: tuple[Room, str], path: Path
) -> None:
    room, url = served
    with trio.fail_after(BOUND):
        process = await trio.lowlevel.open_process(
            [sys.executable, str(PROGRAM), url, str(path), ROOM, "k", "Juniper", OWNER_TOKEN],
            stdout=subprocess.PIPE,
        )
        try:
            assert process.stdout is not None
            info = json.loads(await _read_line(process.stdout))
            sid = info["session_id"]
            assert _row(room, sid).process_connection_id not in (None, "exited")
        finally:
            process.send_signal(signal.SIGKILL)
            with trio.move_on_after(BOUND, shield=True):
                await process.wait()
        assert process.returncode == -signal.SIGKILL
        async with open_proc(None, path, api_url=url) as fourth:
            reg = await fourth.handles.register(room_id=ROOM, worker_id=info["worker_id"])
            await fourth.manager.holders[sid].wait_status(HolderStatus.OPEN)
            await fourth.send("back", worker_id=info["worker_id"])
    assert reg.session.session_id == sid
    assert reg.session.display_name == info["display_name"] == "Juniper"
    assert len(room.store.room_sessions(ROOM)) == 1
