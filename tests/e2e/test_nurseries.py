"""Every program in nurseries/ runs, so the examples never rot.

Each runs as its own process with the real clock, bounded, with a
``letagents-trio room`` of its own on a free port (port 0: never the default
3001, which a user trying the docs may be serving) named in
``LETAGENTS_API_URL`` and ``LETAGENTS_TOKEN``, as ``nox -s nurseries`` runs
them. The mock-clock timeline must print exactly its checked-in output.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import trio

from ..room_server.helpers import OWNER_TOKEN
from .room_process import RunningRoom, running_room
from .signalled import signal_when

NURSERIES = Path(__file__).resolve().parents[2] / "nurseries"
PROGRAMS = sorted(NURSERIES.glob("*.py"))
# The modules every extra brings: the embedder's program needs none of them.
EXTRAS = ("hypercorn", "mcp", "mcp_types", "rich", "pytest_trio")
BLOCK_EXTRAS = f"import sys; sys.modules.update(dict.fromkeys({list(EXTRAS)!r}))"


@pytest.fixture
async def room() -> AsyncIterator[RunningRoom]:
    async with running_room() as room:
        yield room


async def run_program(
    path: Path, room: RunningRoom, *, without_extras: bool = False
) -> subprocess.CompletedProcess[bytes]:
    command = [sys.executable, str(path)]
    if without_extras:
        run = f"{BLOCK_EXTRAS}; import runpy; runpy.run_path({str(path)!r}, run_name='__main__')"
        command = [sys.executable, "-c", run]
    with trio.fail_after(60):
        return await trio.run_process(
            command,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env={**os.environ, "LETAGENTS_API_URL": room.url, "LETAGENTS_TOKEN": OWNER_TOKEN},
        )


def test_there_is_a_nursery_per_kind_of_user() -> None:
    names = {p.name for p in PROGRAMS}
    assert {"mock_clock_timeline.py", "embed_in_your_loop.py", "mcp_host.py"} <= names


@pytest.mark.parametrize("path", PROGRAMS, ids=[p.stem for p in PROGRAMS])
async def test_nursery_runs(path: Path, room: RunningRoom) -> None:
    result = await run_program(path, room)
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.strip()


async def test_mock_clock_timeline_prints_its_checked_in_output(room: RunningRoom) -> None:
    result = await run_program(NURSERIES / "mock_clock_timeline.py", room)
    expected = (NURSERIES / "mock_clock_timeline.txt").read_text()
    assert result.stdout.decode() == expected


async def test_the_embedder_holds_a_worker_in_a_running_room_and_announces_its_exit(
    room: RunningRoom,
) -> None:
    """Issue 29: the core and the host layer only, against ``letagents-trio room``."""
    result = await run_program(NURSERIES / "embed_in_your_loop.py", room, without_extras=True)
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().splitlines() == [
        "Juniper is held in room_embedded: open",
        "Juniper said: hello",
        "stopped: the exit of Juniper was recorded",
    ]
    assert result.stderr == b""


async def test_the_embedder_stops_on_sigterm_and_announces_its_exit(room: RunningRoom) -> None:
    """Issue 42: SIGTERM (systemd, ``docker stop``) cancels the program's own scope."""
    env = {**os.environ, "LETAGENTS_API_URL": room.url, "LETAGENTS_TOKEN": OWNER_TOKEN}
    ended = await signal_when(
        [sys.executable, "-u", str(NURSERIES / "embed_in_your_loop.py"), "--hold"],
        lambda output: b"holding until stopped\n" in output,
        signal.SIGTERM,
        budget=60,
        env=env,
    )
    assert ended.status == 0, ended.errors
    assert ended.output.splitlines()[-2:] == [
        "SIGTERM: stopping",
        "stopped: the exit of Juniper was recorded",
    ]
    assert room.process.returncode is None


async def test_a_refused_token_is_one_line_not_a_traceback(room: RunningRoom) -> None:
    """Issue 42: a wrong token names the refusal and the fix, with no exception groups."""
    env = {**os.environ, "LETAGENTS_API_URL": room.url, "LETAGENTS_TOKEN": "not-the-token,"}
    with trio.fail_after(60):
        result = await trio.run_process(
            [sys.executable, str(NURSERIES / "embed_in_your_loop.py")],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env=env,
        )
    assert result.returncode == 1
    errors = result.stderr.decode()
    assert "Traceback" not in errors
    # (Before it, the library's own warnings, through logging's last resort.)
    (error,) = [line for line in errors.splitlines() if line.startswith("error: ")]
    assert error.startswith("error: Could not verify your LetAgents account"), errors
    assert "HTTP 401" in error


async def test_the_mcp_host_stops_on_sigterm_and_announces_its_exit() -> None:
    """Issue 42: SIGTERM cancels the host's own scope; leaving it closes the server."""
    ended = await signal_when(
        [sys.executable, "-u", str(NURSERIES / "mcp_host.py"), "--hold"],
        lambda output: b"host: holding the session until stopped\n" in output,
        signal.SIGTERM,
        budget=60,
    )
    assert ended.status == 0, ended.errors
    assert ended.output.splitlines()[-4:] == [
        "host: holding the session until stopped",
        "SIGTERM: stopping",
        "host: closing the session (like closing the server's stdin)",
        "room: exit announced for Juniper's session (recorded)",
    ]
    # Building the server in-process left the host's logging alone: no INFO lines.
    assert ended.errors == ""


async def test_the_mock_clock_timeline_stops_on_sigterm_where_it_is() -> None:
    """Issue 42: held at 25 s of trio time (the clock still), SIGTERM stops the process
    there and the exit is announced and recorded at 25 s."""
    ended = await signal_when(
        [sys.executable, "-u", str(NURSERIES / "mock_clock_timeline.py"), "--hold"],
        lambda output: b"holding at 25 s of trio time until stopped\n" in output,
        signal.SIGTERM,
        budget=60,
    )
    assert ended.status == 0, ended.errors
    lines = ended.output.splitlines()
    assert lines[:3] == [
        "holding at 25 s of trio time until stopped",
        "SIGTERM: stopping at 25 s",
        "timeline of Juniper's process connection (seconds of trio time)",
    ]
    expected = (NURSERIES / "mock_clock_timeline.txt").read_text().splitlines()
    assert lines[3:-3] == expected[1:9]  # the story up to 25 s, unchanged
    assert [line.split() for line in lines[-3:]] == [
        ["25.0", "stopped", "process", "exit"],
        ["25.0", "exit", "recorded,", "naming", "#2"],
        ["the", "room", "recorded", "the", "exit", "at", "25", "s:", "True"],
    ]
