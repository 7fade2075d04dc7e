"""nurseries/mcp_host.py runs standalone, in bounded time, and tells its story."""

from __future__ import annotations

import sys
from pathlib import Path

import trio

PROGRAM = Path(__file__).resolve().parents[2] / "nurseries" / "mcp_host.py"


async def test_mcp_host_registers_waits_and_announces_the_exit() -> None:
    """The in-process host registers a worker, receives a message, and its exit is recorded."""
    with trio.fail_after(60):
        result = await trio.run_process(
            [sys.executable, str(PROGRAM)], capture_stdout=True, capture_stderr=True, check=False
        )
    out = result.stdout.decode()
    assert result.returncode == 0, result.stderr.decode()
    assert "host: registered Juniper in room_shared" in out
    # The sender is Cedar's actor label, as the letagents API records it.
    received = "host: Juniper received from Cedar | owner's agent | Agent:"
    assert f"{received} 'Hello Juniper, the build is green.'" in out
    assert out.rstrip().endswith("room: exit announced for Juniper's session (recorded)")
