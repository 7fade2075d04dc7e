"""The git branch a registration reports as ``repo_branch`` (PROTOCOL §5.3).

The chat's working directory is walked upwards to the first ``.git``: a
directory is the git directory itself; a file (a worktree or a submodule)
names it after ``gitdir:``. Its ``HEAD`` names the branch when it reads
``ref: refs/heads/<branch>``; a detached head has none. Everything is read
directly, without running ``git``: a registration never waits on a
subprocess, and anything unreadable simply means "no branch".
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

__all__ = ["git_branch"]

# A .git file (worktree, submodule) points at the real git directory.
_GITDIR_PREFIX: Final = "gitdir:"
# HEAD on a branch; anything else (a commit id) is a detached head.
_HEAD_REF_PREFIX: Final = "ref: refs/heads/"


def git_branch(cwd: str | None) -> str | None:
    """The current branch of the git work tree holding ``cwd``, or ``None``.

    Reads ``HEAD`` directly (no subprocess): ``None`` for no ``cwd``, no
    repository, a detached head, or anything unreadable.
    """
    if not cwd:
        return None
    try:
        here = Path(cwd).resolve()
        for directory in (here, *here.parents):
            dot_git = directory / ".git"
            if dot_git.is_dir():
                git_dir = dot_git
            elif dot_git.is_file():
                pointer = dot_git.read_text("utf-8").strip()
                if not pointer.startswith(_GITDIR_PREFIX):
                    return None
                git_dir = (directory / pointer[len(_GITDIR_PREFIX) :].strip()).resolve()
            else:
                continue
            head = (git_dir / "HEAD").read_text("utf-8").strip()
            if head.startswith(_HEAD_REF_PREFIX):
                return head[len(_HEAD_REF_PREFIX) :] or None
            return None
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return None
