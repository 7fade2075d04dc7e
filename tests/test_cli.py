"""The ``letagents-trio`` dispatcher: usage, and a missing extra said in one line.

A command's module is imported only when that command runs; when the import
fails for a module one of the extras brings, the command prints which extra to
install and exits with 2. Any other missing module keeps its traceback.
The same over a real interpreter, with the module blocked, is in
``tests/e2e/test_missing_extras.py``.
"""

from __future__ import annotations

import tomllib
import types
from importlib.metadata import packages_distributions, requires
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

import letagents_trio
from letagents_trio import cli
from letagents_trio._extras import EXTRA_MODULES, install_command, install_command_for

PYPROJECT = Path(__file__).parent.parent / "pyproject.toml"


def _import_failing(missing: str) -> types.SimpleNamespace:
    def import_module(name: str) -> types.ModuleType:
        raise ModuleNotFoundError(f"No module named {missing!r}", name=missing)

    return types.SimpleNamespace(import_module=import_module)


def test_usage_without_a_command_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main([]) == 2
    assert capsys.readouterr().out == cli.USAGE


def test_help_is_not_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"]) == 0
    assert capsys.readouterr().out == cli.USAGE


def test_an_unknown_command_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["serve"]) == 2
    assert "unknown command 'serve'" in capsys.readouterr().err


def test_a_command_runs_its_modules_main_with_the_rest_of_argv(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[tuple[str, list[str]]] = []

    def import_module(name: str) -> types.SimpleNamespace:
        def main(argv: list[str]) -> int:
            seen.append((name, argv))
            return 7

        return types.SimpleNamespace(main=main)

    monkeypatch.setattr(cli, "importlib", types.SimpleNamespace(import_module=import_module))
    assert cli.main(["room", "--port", "0"]) == 7
    assert seen == [("letagents_trio.room_server._cli", ["--port", "0"])]


@pytest.mark.parametrize(
    ("command", "missing"), [("mcp", "mcp"), ("room", "hypercorn"), ("demo", "rich")]
)
def test_a_missing_extra_says_which_extra_to_install(
    command: str,
    missing: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(cli, "importlib", _import_failing(missing))
    assert cli.main([command]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"letagents-trio {command} needs letagents-trio's [{command}] extra (module {missing!r}"
        f" is not installed); install it with: {install_command(command)}\n"
    )


def test_a_missing_submodule_of_an_extra_counts_as_the_extra(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "importlib", _import_failing("mcp.server.mcpserver"))
    assert cli.main(["mcp"]) == 2
    assert "module 'mcp' is not installed" in capsys.readouterr().err


def test_any_other_missing_module_keeps_its_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    # A module no extra brings is a broken install or a bug: advice would mislead.
    monkeypatch.setattr(cli, "importlib", _import_failing("pydantic"))
    with pytest.raises(ModuleNotFoundError) as caught:
        cli.main(["mcp"])
    assert caught.value.name == "pydantic"


def test_each_command_has_the_extra_of_its_name() -> None:
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    assert set(cli.COMMANDS) <= set(extras)


def test_the_modules_advised_on_are_the_ones_the_extras_bring() -> None:
    # Each module the dispatcher treats as "an extra is missing" is installed by
    # a distribution an extra names, or by one such distribution requires.
    extras = tomllib.loads(PYPROJECT.read_text())["project"]["optional-dependencies"]
    named = {_name(r) for requirements in extras.values() for r in requirements}
    named.discard("letagents-trio")
    brought = named | {_name(r) for d in named for r in requires(d) or ()}
    providers = packages_distributions()
    modules = {module for extra in EXTRA_MODULES.values() for module in extra}
    for module in modules:
        assert {canonicalize_name(d) for d in providers[module]} & brought, module
    # And every distribution an extra names directly is advised on.
    advised = {canonicalize_name(d) for m in modules for d in providers[m]}
    assert named <= advised


@pytest.mark.parametrize(
    ("direct_url", "command"),
    [
        # Installed from the index (no direct_url.json), or not installed at all.
        (None, "/venv/bin/python -m pip install 'letagents-trio[mcp]'"),
        # pip install -e . in a checkout: the index form fails ("No matching distribution").
        (
            '{"url": "file:///home/you/letagents-trio", "dir_info": {"editable": true}}',
            "/venv/bin/python -m pip install -e '/home/you/letagents-trio[mcp]'",
        ),
        # pip install . in a checkout: the same folder, not editable.
        (
            '{"url": "file:///home/you/my%20clone", "dir_info": {}}',
            "/venv/bin/python -m pip install '/home/you/my clone[mcp]'",
        ),
        # An archive or a VCS URL: the index form.
        (
            '{"url": "https://example.test/x.tar.gz", "archive_info": {}}',
            "/venv/bin/python -m pip install 'letagents-trio[mcp]'",
        ),
        ("not json", "/venv/bin/python -m pip install 'letagents-trio[mcp]'"),
    ],
)
def test_the_install_command_works_from_where_this_copy_came(
    direct_url: str | None, command: str
) -> None:
    """Issue 29: ``pip install 'letagents-trio[mcp]'`` fails for a checkout's install."""
    assert install_command_for("mcp", "/venv/bin/python", direct_url) == command


def test_this_checkouts_install_command_names_its_folder() -> None:
    # The test environment installs this checkout (nox: pip install -e '.[...]').
    command = install_command("room")
    root = str(PYPROJECT.parent)
    assert command.endswith(f" -m pip install -e '{root}[room]'") or command.endswith(
        f" -m pip install -e {root}[room]"
    )


def _name(requirement: str) -> str:
    return canonicalize_name(Requirement(requirement).name)


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--version"]) == 0
    assert capsys.readouterr().out == f"letagents-trio {letagents_trio.__version__}\n"
