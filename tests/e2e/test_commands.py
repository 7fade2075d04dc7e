"""The commands as a user types them: ``python -m``, ``--version``, start-up refusals.

Each runs a real interpreter, so what is checked is what a shell or an MCP
host sees: the exit status and the one line on stderr.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import trio

import letagents_trio


async def run(
    *args: str, env: dict[str, str] | None = None, stdin: bytes = b""
) -> subprocess.CompletedProcess[bytes]:
    with trio.fail_after(30):
        return await trio.run_process(
            [sys.executable, "-m", *args],
            stdin=stdin,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            env={**os.environ, **(env or {})},
        )


async def test_python_dash_m_is_the_command() -> None:
    """``python -m letagents_trio`` works where the command is not on PATH."""
    result = await run("letagents_trio", "--version")
    assert result.returncode == 0
    assert result.stdout.decode() == f"letagents-trio {letagents_trio.__version__}\n"


async def test_mcp_help_names_every_variable_with_its_default() -> None:
    from letagents_trio.mcp_server._main import ENVIRONMENT

    result = await run("letagents_trio", "mcp", "--help")
    assert result.returncode == 0
    text = result.stdout.decode()
    for name, default, _ in ENVIRONMENT:
        assert name in text
        assert f"(default: {default})" in text
    for name in ("LETAGENTS_LOCAL_CHAT_DB", "LETAGENTS_LOG_LEVEL", "LETAGENTS_SUPERVISOR_PROVIDER"):
        assert name in text
    assert "docs/" not in text  # an installed user has no repository checkout


@pytest.mark.parametrize(
    ("variable", "value", "named", "status"),
    [
        # Issue 44: the Node server's text and its exit status, 1.
        (
            "LETAGENTS_EXECUTION_PROFILE",
            "typo_profile",
            "Invalid LETAGENTS_EXECUTION_PROFILE: typo_profile. Use one of:"
            " autonomous_mcp_worker, interactive_desktop,"
            " supervised_mcp_polling, supervised_room_turn",
            1,
        ),
        # Issue 28 row 1: as the Node server (worker-bearer.ts), at start (issue 44: exit 1).
        (
            "LETAGENTS_AGENT_SESSION_BEARER",
            "lasb_x",
            "Worker bearer mode requires an explicit LETAGENTS_API_URL.",
            1,
        ),
    ],
)
async def test_mcp_refuses_a_configuration_that_cannot_work_at_start_up(
    tmp_path: Path, variable: str, value: str, named: str, status: int
) -> None:
    """What the Node server refuses as it starts is refused before serving, as it
    does: status 1 and one line with its text (our own refusals start the server
    anyway: tests/e2e/test_mcp_stdio_config.py)."""
    env = {variable: value, "LETAGENTS_STATE_PATH": str(tmp_path / "state.json")}
    result = await run("letagents_trio", "mcp", env=env)
    assert result.returncode == status
    assert result.stdout == b""
    (line,) = result.stderr.decode().splitlines()
    assert line.startswith("letagents-trio mcp: ")
    assert named in line
