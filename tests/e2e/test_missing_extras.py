"""Without an extra, over a real interpreter: one line of advice, never a traceback.

Each subprocess blocks the modules an extra would bring (``sys.modules[name] =
None`` makes importing them raise ``ModuleNotFoundError``, as on a machine
where they are not installed) before anything of letagents-trio is imported.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import trio

from letagents_trio._extras import install_command

ROOT = Path(__file__).parent.parent.parent
# Wall-clock budget of one interpreter start and its imports.
BUDGET = 60


async def _python(
    code: str,
    *,
    blocked: tuple[str, ...],
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    prelude = f"import sys; sys.modules.update(dict.fromkeys({list(blocked)!r}))\n"
    with trio.fail_after(BUDGET):
        return await trio.run_process(
            [sys.executable, "-c", prelude + code],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
            cwd=cwd,
            env={**os.environ, **(env or {})},
        )


@pytest.mark.parametrize(
    ("command", "blocked"),
    [("mcp", ("mcp", "mcp_types")), ("room", ("hypercorn",)), ("demo", ("rich",))],
)
async def test_a_command_without_its_extra_says_what_to_install(
    command: str, blocked: tuple[str, ...]
) -> None:
    result = await _python(
        f"from letagents_trio.cli import main; raise SystemExit(main([{command!r}]))",
        blocked=blocked,
    )
    err = result.stderr.decode()
    assert result.returncode == 2, err
    assert err == (
        f"letagents-trio {command} needs letagents-trio's [{command}] extra (module"
        f" {blocked[0]!r} is not installed); install it with: {install_command(command)}\n"
    )


@pytest.mark.parametrize(
    ("package", "extra", "blocked"),
    [
        ("letagents_trio.testing", "testing", ("hypercorn",)),
        ("letagents_trio.room_server", "room", ("hypercorn",)),
        ("letagents_trio.mcp_server", "mcp", ("mcp", "mcp_types")),
    ],
)
async def test_importing_a_package_without_its_extra_says_which_extra(
    package: str, extra: str, blocked: tuple[str, ...]
) -> None:
    """Issue 29: a plain import was a raw ``ModuleNotFoundError: hypercorn``."""
    result = await _python(f"import {package}", blocked=blocked)
    err = result.stderr.decode()
    assert result.returncode == 1, err
    last = err.strip().splitlines()[-1]
    assert last == (
        f"ModuleNotFoundError: {package} needs letagents-trio's [{extra}] extra (module"
        f" {blocked[0]!r} is not installed); install it with: {install_command(extra)}"
    )
    # One error, not the chain through the modules that import the missing one.
    assert "During handling" not in err
    assert "direct cause" not in err


async def test_the_error_keeps_the_missing_modules_name() -> None:
    code = (
        "try:\n    import letagents_trio.testing\n"
        "except ModuleNotFoundError as e:\n    print(e.name)\n"
    )
    result = await _python(code, blocked=("hypercorn",))
    assert result.stdout.decode() == "hypercorn\n", result.stderr.decode()


# A pytest run in a project of the user's: the plugin is given by name, as the
# pytest11 entry point would load it, and nothing else is auto-loaded.
PYTEST_RUN = (
    "import pytest; raise SystemExit(pytest.main(["
    "'-p', 'letagents_trio._pytest_plugin', '-p', 'no:cacheprovider', '-q'{extra}]))"
)


async def test_pytest_runs_without_the_testing_extra(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_plain.py").write_text("def test_plain():\n    assert True\n")
    result = await _python(
        PYTEST_RUN.format(extra=""),
        blocked=("hypercorn", "pytest_trio"),
        cwd=tmp_path,
        env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONPATH": str(ROOT)},
    )
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
    assert "1 passed" in result.stdout.decode()


async def test_the_fake_room_fixture_without_the_extra_says_what_to_install(
    tmp_path: Path,
) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\ntrio_mode = true\n")
    (tmp_path / "test_room.py").write_text("async def test_room(fake_room):\n    pass\n")
    result = await _python(
        PYTEST_RUN.format(extra=", '-p', 'pytest_trio.plugin'"),
        blocked=("hypercorn",),
        cwd=tmp_path,
        env={"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", "PYTHONPATH": str(ROOT)},
    )
    out = result.stdout.decode()
    assert result.returncode == 1, out + result.stderr.decode()
    # Issue 29: the line is the test's whole error, not a leaf of an exception group.
    line = (
        "the fake_room fixture needs letagents-trio's [testing] extra (module 'hypercorn' is"
        f" not installed); install it with: {install_command('testing')}"
    )
    assert line in out.splitlines(), out
    assert "ExceptionGroup" not in out
    assert "During handling" not in out
    assert "1 error" in out


def test_the_entry_point_names_the_plugin_that_imports_only_pytest() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pytest11"] == {
        "letagents_trio": "letagents_trio._pytest_plugin"
    }
