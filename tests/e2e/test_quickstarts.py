"""Each quickstart of ``docs/quickstart.md`` runs exactly as the page shows it.

The programs are taken from the page's fenced blocks by the name each is
marked with (``<!-- as: NAME -->``, the file name the page tells the reader
to use; see ``tests/test_doc_code.py``), written to a temporary directory and
run with this interpreter, as a reader would run them. Real clock, real
processes; each run is bounded.
"""

from __future__ import annotations

import re
import signal
import sys
from pathlib import Path

import pytest
import trio

from ..doc_blocks import pytest_in, runnable
from .signalled import signal_when

PAGE = Path(__file__).resolve().parents[2] / "docs" / "quickstart.md"
# Generous: each program starts a room (and the MCP one an MCP server) on a busy machine.
BUDGET = 90
# Runs a program as a terminal runs a foreground one: SIGINT at its default
# action. A test run started in the background (``pytest &`` from a script, as
# long runs are) has SIGINT ignored, and an ignored signal stays ignored across
# exec: Python then installs no KeyboardInterrupt handler, nor does trio, and
# the program sleeps through Ctrl-C (the test hung until its budget ran out).
AS_FROM_A_TERMINAL = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL);"
    " os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)

pytestmark = [pytest.mark.slow, pytest.mark.skipif(sys.platform == "win32", reason="POSIX")]


def quickstarts() -> dict[str, str]:
    """Name -> code, for every named block of the page."""
    return runnable(PAGE)


def write(directory: Path, name: str) -> Path:
    path = directory / name
    path.write_text(quickstarts()[name])
    return path


def test_the_page_has_the_three_quickstarts() -> None:
    assert set(quickstarts()) == {
        "mcp_quickstart.py",
        "embed_quickstart.py",
        "pyproject.toml",
        "test_quickstart.py",
    }


async def test_the_mcp_host_quickstart(tmp_path: Path) -> None:
    program = write(tmp_path, "mcp_quickstart.py")
    with trio.fail_after(BUDGET):
        result = await trio.run_process(
            [sys.executable, str(program)],
            cwd=tmp_path,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    assert result.returncode == 0, result.stderr.decode()
    lines = result.stdout.decode().splitlines()
    assert re.fullmatch(r"room: http://127\.0\.0\.1:\d+", lines[0])
    assert lines[1:] == [
        "registered Juniper",
        "registered Cedar",
        "Cedar reads: Juniper: hello, Cedar",
        "the MCP server stopped: every exit announced",
    ]


async def test_the_mcp_host_quickstart_stops_on_sigterm(tmp_path: Path) -> None:
    """Issue 42: SIGTERM mid-run cancels the program's scope; leaving the client's block
    closes the server's stdin (the server then announces every exit), and it exits 0."""
    program = write(tmp_path, "mcp_quickstart.py")
    ended = await signal_when(
        [sys.executable, "-u", str(program)],
        lambda output: b"registered Juniper\n" in output,
        signal.SIGTERM,
        budget=BUDGET,
        cwd=tmp_path,
    )
    assert ended.status == 0, ended.errors
    assert "Traceback" not in ended.errors
    lines = ended.output.splitlines()
    assert lines[1] == "registered Juniper"
    assert lines[-1] == "stopped by SIGTERM: the MCP server announced every exit"


@pytest.mark.parametrize(
    ("signum", "last_line"),
    [(signal.SIGINT, "stopped by Ctrl-C"), (signal.SIGTERM, "stopped by SIGTERM")],
    ids=["SIGINT", "SIGTERM"],
)
async def test_the_embedder_quickstart_stops_on_a_signal_with_the_exit_report(
    tmp_path: Path, signum: signal.Signals, last_line: str
) -> None:
    """Ctrl-C, and SIGTERM as systemd or ``docker stop`` send it: both exits recorded."""
    program = write(tmp_path, "embed_quickstart.py")
    # The signal once both workers' connections are open (each prints "connection").
    ended = await signal_when(
        [sys.executable, "-c", AS_FROM_A_TERMINAL, "-u", str(program)],
        lambda output: output.count(b": connection\n") >= 2,
        signum,
        budget=BUDGET,
        cwd=tmp_path,
    )
    assert ended.status == 0, ended.errors
    assert "Traceback" not in ended.errors
    lines = ended.output.splitlines()
    assert lines[0] == "holding Juniper and Cedar; press Ctrl-C to stop"
    timed = [re.sub(r"^\d\d:\d\d:\d\d ", "", line) for line in lines[1:7]]
    assert sorted(timed) == sorted(
        f"{name}: {kind}"
        for name in ("Juniper", "Cedar")
        for kind in ("attempt", "open", "connection")
    )
    assert sorted(lines[7:9]) == ["exit of Cedar: recorded", "exit of Juniper: recorded"]
    assert lines[9:] == [last_line]


async def test_the_tester_quickstart(tmp_path: Path) -> None:
    names = ("pyproject.toml", "test_quickstart.py")
    out = await pytest_in(tmp_path, {name: quickstarts()[name] for name in names}, BUDGET)
    assert re.search(r"^2 passed in [\d.]+s$", out, re.MULTILINE), out
