"""Issue 13 row 3: more signals while the goodbye runs.

The first SIGINT or SIGTERM starts the goodbye; a second one, arriving while
the exit POST is in flight, must neither cut it short nor kill the process:
the exit is still announced and the process exits 0 once the goodbye ends. A
third signal forces an exit at once (128 + the signal number) and says so.
Real clock and real processes, each test bounded by ``trio.fail_after``.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path

import pytest
import trio

from .mcp_loopback import (
    BUDGET,
    EXIT_DEADLINE,
    EXIT_SLACK,
    open_loopback_room,
    open_raw_server,
    server_env,
)
from .test_mcp_stdio import register_held_worker

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals and pipes")


@pytest.mark.parametrize(
    ("first", "second"),
    [("SIGINT", "SIGINT"), ("SIGTERM", "SIGTERM"), ("SIGTERM", "SIGINT")],
)
async def test_a_second_signal_during_the_goodbye_changes_nothing(
    tmp_path: Path, first: str, second: str
) -> None:
    """The second signal lands while the (black-holed) exit POST is in flight:
    the goodbye still waits out its deadline, and the process exits 0 without
    a traceback."""
    with trio.fail_after(BUDGET):
        async with open_loopback_room() as room:
            room.fake.black_hole_exits = True
            async with open_raw_server(server_env(room, tmp_path), tmp_path / "err.log") as server:
                await server.initialize()
                session_id = await register_held_worker(server, room)
                stopped_at = trio.current_time()
                server.process.send_signal(getattr(signal, first))
                await room.wait_until(lambda: len(room.fake.exits) == 1)
                server.process.send_signal(getattr(signal, second))
                await server.process.wait()
                elapsed = trio.current_time() - stopped_at
    stderr = (tmp_path / "err.log").read_text()
    assert server.process.returncode == 0, stderr
    assert "Traceback" not in stderr, stderr
    assert EXIT_DEADLINE - 0.1 <= elapsed < EXIT_DEADLINE + EXIT_SLACK, stderr
    assert [e.session_id for e in room.fake.exits] == [session_id]
    assert "goodbye in progress" in stderr


async def test_a_third_signal_forces_an_exit_and_says_so(tmp_path: Path) -> None:
    """Two more signals during the goodbye: the process ends at once with
    128 + the last signal's number, and its log says why."""
    with trio.fail_after(BUDGET):
        async with open_loopback_room() as room:
            room.fake.black_hole_exits = True
            async with open_raw_server(server_env(room, tmp_path), tmp_path / "err.log") as server:
                await server.initialize()
                await register_held_worker(server, room)
                server.process.send_signal(signal.SIGTERM)
                await room.wait_until(lambda: len(room.fake.exits) == 1)
                stopped_at = trio.current_time()
                server.process.send_signal(signal.SIGTERM)
                await trio.sleep(0.1)
                server.process.send_signal(signal.SIGINT)
                await server.process.wait()
                elapsed = trio.current_time() - stopped_at
    stderr = (tmp_path / "err.log").read_text()
    assert server.process.returncode == 128 + signal.SIGINT, stderr
    assert elapsed < EXIT_DEADLINE - 0.3, stderr
    assert "forcing an exit" in stderr, stderr
    assert "Traceback" not in stderr, stderr
