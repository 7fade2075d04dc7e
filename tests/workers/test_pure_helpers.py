"""Worker handles: the pure helpers (git branch, owner slug, chat-storage settings).

The behaviour against a room lives in ``tests/workers/``: ``test_core.py``
(create, resume, the prepared operation, validation, disconnect),
``test_recovery.py`` (PROTOCOL §8.2), ``test_handles.py`` (§8.3) and
``test_loopback.py`` (real sockets, a SIGKILLed holder process).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING

from letagents_trio.workers._chat_storage import ChatStorage, ChatStorageSettings
from letagents_trio.workers._git import git_branch
from letagents_trio.workers._identity import local_owner_slug

if TYPE_CHECKING:
    import pytest


def test_git_branch_reads_head(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / ".git").mkdir(parents=True)
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/feature/x\n")
    (repo / "sub" / "dir").mkdir(parents=True)
    assert git_branch(str(repo / "sub" / "dir")) == "feature/x"
    (repo / ".git" / "HEAD").write_text("0123456789abcdef\n")
    assert git_branch(str(repo)) is None
    worktree = tmp_path / "wt"
    worktree.mkdir()
    (worktree / ".git").write_text(f"gitdir: {repo / '.git'}\n")
    (repo / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    assert git_branch(str(worktree)) == "main"
    assert git_branch(None) is None
    assert git_branch(str(tmp_path / "missing")) is None


def test_local_owner_slug() -> None:
    assert local_owner_slug("Jane Doe") == "jane-doe"
    assert local_owner_slug("__") == "local"
    assert local_owner_slug() == local_owner_slug()


def test_chat_storage_settings(tmp_path: Path) -> None:
    path = tmp_path / "chat-storage.json"
    storage = ChatStorage(path)
    assert not storage.is_local("r")
    path.write_text(json.dumps({"mode": "cloud", "roomOverrides": {"room_local": "local"}}))
    assert storage.is_local("room_local")
    assert not storage.is_local("room_shared")
    path.write_text(json.dumps({"mode": "local", "roomOverrides": {"room_shared": "cloud"}}))
    assert storage.is_local("anything")
    assert not storage.is_local("room_shared")
    path.write_text(json.dumps({"mode": "sideways"}))
    assert storage.settings() == ChatStorageSettings()
    path.write_text("[]")
    assert not storage.is_local("anything")


def test_chat_storage_defaults_under_home_whatever_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Only the MCP server's entry point reads LETAGENTS_CHAT_STORAGE_SETTINGS_PATH."""
    path = tmp_path / ".letagents" / "chat-storage.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"mode": "local"}))
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("LETAGENTS_CHAT_STORAGE_SETTINGS_PATH", str(tmp_path / "elsewhere.json"))
    assert ChatStorage().path == path
    assert ChatStorage().is_local("r")
