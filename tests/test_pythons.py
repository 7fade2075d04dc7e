"""The Pythons the package promises are the ones nox tests it on (issue 42, finding 8).

``pyproject.toml``'s classifiers name each minor version; ``noxfile.py``'s
``PYTHONS`` makes a ``tests-<version>`` session for each (a missing one is
skipped with a message); ``requires-python`` starts at the first of them; and
the README tells a reader the same range.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _noxfile_pythons() -> tuple[str, ...]:
    tree = ast.parse((ROOT / "noxfile.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == [
            "PYTHONS"
        ]:
            value = ast.literal_eval(node.value)
            assert isinstance(value, tuple)
            return tuple(str(v) for v in value)
    raise AssertionError("noxfile.py defines no PYTHONS")


def _classified() -> tuple[str, ...]:
    prefix = "Programming Language :: Python :: "
    return tuple(
        c.removeprefix(prefix)
        for c in PROJECT["classifiers"]
        if c.startswith(prefix) and re.fullmatch(r"3\.\d+", c.removeprefix(prefix))
    )


def test_nox_tests_every_python_the_classifiers_name() -> None:
    assert _noxfile_pythons() == _classified() == ("3.11", "3.12", "3.13")


def test_requires_python_starts_at_the_first_tested_python() -> None:
    assert PROJECT["requires-python"] == f">={_noxfile_pythons()[0]}"


def test_this_interpreter_is_one_of_them() -> None:
    assert f"{sys.version_info.major}.{sys.version_info.minor}" in _noxfile_pythons()


def test_ci_runs_the_readmes_commands_and_each_starts_fresh_once() -> None:
    """Finding 9: the README's commands make the venv once, then run nox from it, and
    CI runs exactly those commands (the demo aside)."""
    readme = (ROOT / "README.md").read_text()
    block = readme.split("```console\n", 1)[1].split("```", 1)[0]
    commands = [line.split("  #", 1)[0].strip() for line in block.splitlines()]
    assert commands[0] == "python3 -m venv .venv && .venv/bin/python -m pip install nox"
    assert sum("python3 -m venv" in c for c in commands) == 1
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert [c for c in commands if "demo" not in c] == ci[-2:]
