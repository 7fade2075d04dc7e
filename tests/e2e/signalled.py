"""Run a program until it prints a line, send it a signal, and collect how it ended.

The programs the docs show stop on Ctrl-C and on SIGTERM (issue 42); their
tests start each as a reader would, wait for the line that says it is holding
what it should, signal it, and read everything it printed. A run that fails
never leaves the program (or a room it started) behind.
"""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

import attrs
import trio


@attrs.frozen
class Ended:
    """How a signalled program ended: its status, stdout and stderr."""

    status: int
    output: str
    errors: str


async def signal_when(
    command: Sequence[str],
    ready: Callable[[bytes], bool],
    signum: signal.Signals,
    *,
    budget: float,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> Ended:
    """Run ``command``; once ``ready(stdout so far)``, send ``signum``; return how it ended."""
    process = await trio.lowlevel.open_process(
        list(command), cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert process.stdout is not None
    assert process.stderr is not None
    try:
        with trio.fail_after(budget):
            output = b""
            while not ready(output):
                chunk = await process.stdout.receive_some()
                assert chunk, output.decode()
                output += chunk
            process.send_signal(signum)
            async for chunk in process.stdout:
                output += chunk
            errors = b"".join([chunk async for chunk in process.stderr])
            status = await process.wait()
    finally:
        if process.returncode is None:
            # Ctrl-C stops the program and the room it started, then a kill.
            with trio.move_on_after(10, shield=True) as cleanup:
                process.send_signal(signal.SIGINT)
                await process.wait()
            if cleanup.cancelled_caught:
                process.kill()
    return Ended(status=status, output=output.decode(), errors=errors.decode())
