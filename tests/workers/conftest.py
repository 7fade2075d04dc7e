"""Fixtures of the worker-handle tests: the state file, fresh or seeded."""

from __future__ import annotations

import subprocess
from typing import TYPE_CHECKING

import pytest

from .helpers import seed_state

if TYPE_CHECKING:
    from pathlib import Path


@pytest.fixture
def state_path(tmp_path: Path) -> Path:
    """Where the state file goes; nothing written yet."""
    return tmp_path / "mcp-state.json"


@pytest.fixture
async def path(state_path: Path) -> Path:
    """The state file, seeded as upstream's tests seed it (the owner signed in)."""
    await seed_state(state_path)
    return state_path


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A scratch git repository: ``a.txt`` and a ``.gitignore`` of ``*.log``, committed."""
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "config", "user.email", "t@example.test")
    _git(repo, "config", "user.name", "T")
    (repo / "a.txt").write_text("one\n")
    (repo / ".gitignore").write_text("*.log\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "start")
    return repo
