"""A repository's files as git sees them, through the ``git`` command, bounded.

Workspace captures (:mod:`._workspace`) ask git, never git's files: each call
runs ``git --no-optional-locks`` in the repository, with a deadline
(:data:`GIT_TIMEOUT`, :data:`CAPTURE_TIMEOUT` for the calls that read every
file) and a cap on what it may print (a call that prints more is killed and
fails). Variables ``GIT_*`` of this process are not passed on, so a hook's
environment cannot point git elsewhere.

**A snapshot** (:func:`snapshot`) is a tree object of every tracked and every
non-ignored untracked file as it is now: a private index file starts from
``HEAD`` (``read-tree``), ``add -A`` stages the work tree into it, and
``write-tree`` writes the tree. The user's own index is never touched. A
snapshot is kept from git's garbage collection by a ref under
``refs/letagents/`` (:func:`keep`), removed again by :func:`release`.

**Changes** (:func:`changes`) between two trees: each file's status and line
counts (``diff --numstat`` and ``--name-status``, NUL-separated, renames
off) and the patch text, at most ``patch_limit`` bytes.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, final

import attrs
import trio

from .._errors import WorkerError

if TYPE_CHECKING:
    from collections.abc import Mapping

__all__ = [
    "CAPTURE_TIMEOUT",
    "EMPTY_TREE",
    "GIT_TIMEOUT",
    "Changes",
    "GitFailed",
    "changes",
    "head",
    "keep",
    "release",
    "snapshot",
    "toplevel",
]

# Seconds for a call that reads a few names (the Node server's 5 s).
GIT_TIMEOUT: Final = 5.0
# Seconds for a call that reads every file (the Node server's capture limit).
CAPTURE_TIMEOUT: Final = 120.0
# Bytes a call that answers a name or an id may print (the Node server's 16 KiB).
SMALL_OUTPUT: Final = 16 * 1024
# Bytes a listing of changed files may print: 10 000 files of long paths.
LIST_OUTPUT: Final = 32 * 1024 * 1024
# Read from git's output this much at a time.
_CHUNK: Final = 64 * 1024
# git's id of the empty tree: what a repository without commits starts from.
EMPTY_TREE: Final = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
# Who the commit that keeps a snapshot says made it (it is never checked out).
_KEEPER: Final = {
    "GIT_AUTHOR_NAME": "letagents",
    "GIT_AUTHOR_EMAIL": "letagents@localhost",
    "GIT_COMMITTER_NAME": "letagents",
    "GIT_COMMITTER_EMAIL": "letagents@localhost",
}
_STATUSES: Final = {"A": "added", "M": "modified", "D": "deleted", "T": "typechange"}


# git failed, took too long or printed more than allowed: the message says which.
GitFailed = WorkerError


def _env(extra: Mapping[str, str] | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(extra or {})
    return env


async def git(
    cwd: str | Path,
    *args: str,
    limit: int = SMALL_OUTPUT,
    slow: bool = False,
    env: Mapping[str, str] | None = None,
) -> bytes:
    """Run ``git --no-optional-locks <args>`` in ``cwd``; its output (at most ``limit`` bytes).

    Args:
        slow: the call reads every file: :data:`CAPTURE_TIMEOUT`, not :data:`GIT_TIMEOUT`.

    Raises:
        GitFailed: git exited with an error, printed more than ``limit``, or did
            not finish in time (it is killed).

    Cancellation:
        A checkpoint; cancelled, git is killed and waited for.
    """
    out, cut = await _run(cwd, args, limit=limit, slow=slow, env=env)
    if cut:
        raise GitFailed(f"git {args[0]} printed more than {limit} bytes.")
    return out


async def _run(
    cwd: str | Path,
    args: tuple[str, ...],
    *,
    limit: int,
    slow: bool,
    env: Mapping[str, str] | None,
) -> tuple[bytes, bool]:
    """git's first ``limit`` bytes of output, and whether it printed more (then it is killed)."""
    command = ["git", "--no-optional-locks", *args]
    try:
        process = await trio.lowlevel.open_process(
            command,
            cwd=os.fspath(cwd),
            env=_env(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
    except OSError as exc:
        raise GitFailed(f"git could not be run: {exc.strerror or exc}") from exc
    out = bytearray()
    cut = False
    seconds = CAPTURE_TIMEOUT if slow else GIT_TIMEOUT
    try:
        with trio.move_on_after(seconds) as scope:
            assert process.stdout is not None
            while chunk := await process.stdout.receive_some(_CHUNK):
                out += chunk
                if len(out) > limit:
                    del out[limit:]
                    cut = True
                    break
            else:
                await process.wait()
        if scope.cancelled_caught:
            raise GitFailed(f"git {args[0]} took longer than {seconds:g} s.")
    finally:
        with trio.move_on_after(GIT_TIMEOUT, shield=True):
            if process.returncode is None:
                process.kill()
                await process.wait()
            assert process.stdout is not None
            await process.stdout.aclose()
    if not cut and process.returncode != 0:
        raise GitFailed(f"git {args[0]} failed (exit {process.returncode}).")
    return bytes(out), cut


async def toplevel(cwd: str | Path) -> Path:
    """The top of the work tree holding ``cwd``.

    Raises:
        GitFailed: ``cwd`` is no directory inside a git work tree.
    """
    if not await trio.Path(cwd).is_dir():
        raise GitFailed(f"{cwd} is not a directory.")
    try:
        out = await git(cwd, "rev-parse", "--show-toplevel")
    except GitFailed as exc:
        raise GitFailed(f"{cwd} is not inside a git repository.") from exc
    top = await trio.Path(out.decode("utf-8", "surrogateescape").strip()).resolve()
    return Path(top)


async def head(workspace: Path) -> str | None:
    """The commit ``HEAD`` names, or ``None`` in a repository without commits."""
    try:
        out = await git(workspace, "rev-parse", "--verify", "--quiet", "HEAD^{commit}")
    except GitFailed:
        return None
    return out.decode("ascii").strip() or None


async def branch(workspace: Path) -> str | None:
    """The branch checked out, or ``None`` (a detached head)."""
    try:
        out = await git(workspace, "symbolic-ref", "--quiet", "--short", "HEAD")
    except GitFailed:
        return None
    return out.decode("utf-8", "replace").strip() or None


async def snapshot(workspace: Path, index: Path, base: str | None) -> str:
    """Write a tree of every tracked and non-ignored untracked file now; its id.

    Args:
        workspace: the work tree's top.
        index: a private index file to stage into (replaced).
        base: the commit the index starts from; ``None`` starts empty.
    """
    env = {"GIT_INDEX_FILE": os.fspath(index)}
    await trio.Path(index).unlink(missing_ok=True)
    await git(workspace, "read-tree", *((base,) if base else ("--empty",)), env=env)
    await git(workspace, "add", "-A", slow=True, limit=LIST_OUTPUT, env=env)
    tree = (await git(workspace, "write-tree", env=env)).decode("ascii").strip()
    await trio.Path(index).unlink(missing_ok=True)
    return tree


async def keep(workspace: Path, ref: str, tree: str) -> None:
    """Keep ``tree`` from garbage collection under ``ref`` (a commit that holds it)."""
    message = ("-m", "letagents workspace capture")
    commit = await git(workspace, "commit-tree", tree, *message, env=_KEEPER)
    await git(workspace, "update-ref", ref, commit.decode("ascii").strip())


async def release(workspace: Path, ref: str) -> None:
    """Remove ``ref`` (nothing if it is gone already, or the repository is)."""
    try:
        await git(workspace, "update-ref", "-d", ref)
    except GitFailed:
        return


@final
@attrs.frozen(kw_only=True)
class Changes:
    """What changed between two trees.

    Attributes:
        files: each file: ``path``, ``previous_path`` (None: renames are off),
            ``status``, ``additions``, ``deletions``, ``binary``.
        patch: the patch text, cut at the limit it was read with.
        patch_truncated: whether the patch was longer than that.
    """

    files: list[dict[str, Any]]
    patch: str
    patch_truncated: bool

    @property
    def additions(self) -> int:
        """Lines added over every file."""
        return sum(int(f["additions"]) for f in self.files)

    @property
    def deletions(self) -> int:
        """Lines deleted over every file."""
        return sum(int(f["deletions"]) for f in self.files)


def _fields(raw: bytes) -> list[str]:
    return [part.decode("utf-8", "surrogateescape") for part in raw.split(b"\0")]


async def changes(workspace: Path, old: str, new: str, *, patch_limit: int) -> Changes:
    """The files changed from tree (or commit) ``old`` to ``new``, and the patch.

    Raises:
        GitFailed: git failed, or listed more than it may.
    """
    diff = ("diff", "--no-renames", "--no-color", "--no-ext-diff")
    listed = [
        _fields(await git(workspace, *diff, how, "-z", old, new, limit=LIST_OUTPUT, slow=True))
        for how in ("--name-status", "--numstat")
    ]
    statuses, counts = listed
    by_path: dict[str, tuple[int, int, bool]] = {}
    for entry in counts:
        parts = entry.split("\t", 2)
        if len(parts) == 3:
            plus, minus, name = parts
            binary = plus == "-"
            by_path[name] = (0 if binary else int(plus), 0 if binary else int(minus), binary)
    files = []
    for code, path in zip(statuses[0::2], statuses[1::2], strict=False):
        if not path:
            continue
        added, deleted, binary = by_path.get(path, (0, 0, False))
        files.append(
            {
                "path": path,
                "previous_path": None,
                "status": _STATUSES.get(code[:1], "unknown"),
                "additions": added,
                "deletions": deleted,
                "binary": binary,
            }
        )
    raw, truncated = await _run(
        workspace, (*diff, old, new), limit=patch_limit, slow=True, env=None
    )
    return Changes(files=files, patch=raw.decode("utf-8", "replace"), patch_truncated=truncated)
