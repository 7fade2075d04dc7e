"""Every program in nurseries/ runs, so the examples never rot.

Each runs as its own process with the real clock, bounded; the mock-clock
timeline must print exactly its checked-in output.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import trio

NURSERIES = Path(__file__).resolve().parents[2] / "nurseries"
PROGRAMS = sorted(NURSERIES.glob("*.py"))


async def run_program(path: Path) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(60):
        return await trio.run_process(
            [sys.executable, str(path)], capture_stdout=True, capture_stderr=True, check=False
        )


def test_there_is_a_nursery_per_kind_of_user() -> None:
    names = {p.name for p in PROGRAMS}
    assert {"mock_clock_timeline.py", "embed_in_your_loop.py"} <= names


@pytest.mark.parametrize("path", PROGRAMS, ids=[p.stem for p in PROGRAMS])
async def test_nursery_runs(path: Path) -> None:
    result = await run_program(path)
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.strip()


async def test_mock_clock_timeline_prints_its_checked_in_output() -> None:
    result = await run_program(NURSERIES / "mock_clock_timeline.py")
    expected = (NURSERIES / "mock_clock_timeline.txt").read_text()
    assert result.stdout.decode() == expected


async def test_embedding_announces_the_exit_when_the_nursery_closes() -> None:
    result = await run_program(NURSERIES / "embed_in_your_loop.py")
    assert "the room recorded: 'exited'" in result.stdout.decode()
