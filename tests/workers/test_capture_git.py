"""How a capture asks git (``_capture_git.py``): bounds, deadlines, environment, what it lists.

Real git in scratch repositories, real clock, every test bounded. Where git
must be slow (the deadlines, a cancelled call) a small script named ``git``
stands first on ``PATH``: it hangs on the calls a test names and runs the
real git for every other.
"""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
from pathlib import Path

import pytest
import trio

from letagents_trio._errors import WorkerError
from letagents_trio.workers import _capture_git
from letagents_trio.workers._capture_git import EMPTY_TREE, changes, git, snapshot, toplevel

# The script that stands in for git: it writes its pid to $LETAGENTS_TEST_PIDS
# (when set), then hangs if its arguments match the pattern $LETAGENTS_TEST_HANG,
# else runs the real git.
FAKE_GIT = """#!/bin/sh
[ -n "$LETAGENTS_TEST_PIDS" ] && echo $$ > "$LETAGENTS_TEST_PIDS"
case "$*" in
  $LETAGENTS_TEST_HANG) exec sleep 30 ;;
esac
exec {git} "$@"
"""


def run(repo: Path, *args: str | bytes) -> str:
    done = subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)
    return done.stdout.decode("utf-8", "surrogateescape").strip()


def scratch(where: Path) -> Path:
    where.mkdir()
    run(where, "init", "-q", "-b", "main")
    run(where, "config", "user.email", "t@example.test")
    run(where, "config", "user.name", "T")
    (where / "a.txt").write_text("one\n")
    run(where, "add", "-A")
    run(where, "commit", "-q", "-m", "start")
    return where


def running(pid: int) -> bool:
    """Whether the process exists, a zombie not yet waited for included."""
    return Path(f"/proc/{pid}").exists()


def resolved(path: Path) -> Path:
    return path.resolve()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    return scratch(tmp_path / "repo")


@pytest.fixture
def hang(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Put the fake git first on PATH; ``LETAGENTS_TEST_HANG`` says which calls hang."""
    real = shutil.which("git")
    assert real is not None
    folder = tmp_path / "bin"
    folder.mkdir()
    script = folder / "git"
    script.write_text(FAKE_GIT.format(git=real))
    script.chmod(stat.S_IRWXU)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setenv("LETAGENTS_TEST_HANG", "-no-match-")


async def test_output_up_to_the_limit_is_answered_and_one_byte_more_refused(repo: Path) -> None:
    blob = run(repo, "rev-parse", "HEAD:a.txt")  # "one\n": 4 bytes
    with trio.fail_after(30):
        assert await git(repo, "cat-file", "blob", blob, limit=4) == b"one\n"
        with pytest.raises(WorkerError) as refused:
            await git(repo, "cat-file", "blob", blob, limit=3)
    assert str(refused.value) == "git cat-file printed more than 3 bytes."


async def test_a_failing_git_names_its_command_and_exit_status(repo: Path) -> None:
    with trio.fail_after(30), pytest.raises(WorkerError) as failed:
        await git(repo, "rev-parse", "--verify", "no-such-branch")
    assert str(failed.value) == "git rev-parse failed (exit 128)."


async def test_a_missing_git_is_named_as_such(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    with trio.fail_after(30), pytest.raises(WorkerError) as failed:
        await git(repo, "status")
    assert str(failed.value) == "git could not be run: No such file or directory"


@pytest.mark.usefixtures("hang")
async def test_a_call_that_reads_names_has_the_short_deadline(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_capture_git, "GIT_TIMEOUT", 0.5)
    monkeypatch.setenv("LETAGENTS_TEST_HANG", "*status*")
    with trio.fail_after(10), pytest.raises(WorkerError) as late:
        await git(repo, "status")
    assert str(late.value) == "git status took longer than 0.5 s."


@pytest.mark.usefixtures("hang")
@pytest.mark.parametrize(
    ("pattern", "command"),
    [("*add -A*", "add"), ("*--name-status*", "diff"), ("*--no-ext-diff [0-9a-f]*", "diff")],
    ids=["staging every file", "listing the changes", "the patch"],
)
async def test_the_calls_that_read_every_file_have_the_capture_deadline(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, pattern: str, command: str
) -> None:
    monkeypatch.setattr(_capture_git, "CAPTURE_TIMEOUT", 0.5)
    head = run(repo, "rev-parse", "HEAD")
    monkeypatch.setenv("LETAGENTS_TEST_HANG", pattern)

    async def capture() -> None:
        if command == "add":
            await snapshot(repo, tmp_path / "index", head)
        else:
            await changes(repo, EMPTY_TREE, head, patch_limit=1024)

    with trio.fail_after(10), pytest.raises(WorkerError) as late:
        await capture()
    assert str(late.value) == f"git {command} took longer than 0.5 s."


@pytest.mark.usefixtures("hang")
async def test_a_cancelled_call_kills_git_and_waits_for_it(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pids = tmp_path / "pids"
    os.mkfifo(pids)
    monkeypatch.setenv("LETAGENTS_TEST_PIDS", str(pids))
    monkeypatch.setenv("LETAGENTS_TEST_HANG", "*status*")
    pid = 0
    try:
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(git, repo, "status")
                pid = int(await trio.Path(pids).read_text())  # git is running
                nursery.cancel_scope.cancel(reason="the tool call was cancelled")
        # Killed and reaped: no process, not even a zombie, is left.
        assert not running(pid)
    finally:
        if pid and running(pid):
            os.kill(pid, signal.SIGKILL)


async def test_this_process_git_variables_do_not_steer_git(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = scratch(tmp_path / "other")
    (repo / "a.txt").write_text("two\n")
    head = run(repo, "rev-parse", "HEAD")
    # A host started from a git hook inherits these; they name another repository.
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_WORK_TREE", str(other))
    monkeypatch.setenv("GIT_INDEX_FILE", str(other / ".git" / "index"))
    with trio.fail_after(30):
        assert await toplevel(repo) == resolved(repo)
        assert await _capture_git.head(repo) == head
        tree = await snapshot(repo, tmp_path / "index", head)
        found = await changes(repo, head, tree, patch_limit=1024)
    assert [f["path"] for f in found.files] == ["a.txt"]
    assert "+two" in found.patch


async def test_git_complaints_stay_off_the_hosts_stderr(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    with trio.fail_after(30), pytest.raises(WorkerError, match="is not inside a git repository"):
        await toplevel(tmp_path)
    assert capfd.readouterr().err == ""


async def test_each_file_is_listed_with_its_status_and_line_counts(
    repo: Path, tmp_path: Path
) -> None:
    base = run(repo, "rev-parse", "HEAD")
    (repo / "a.txt").write_text("one\nand two\nand three\n")
    (repo / "picture.bin").write_bytes(b"\x00\x01\x02binary\x00")
    (repo / "tab\there.txt").write_text("x\ny\n")
    (repo / " leading space.txt").write_text("x\n")
    (repo / "latin1.txt").write_bytes(b"caf\xe9\n")
    os.symlink("a.txt", repo / "link")
    with trio.fail_after(30):
        tree = await snapshot(repo, tmp_path / "index", base)
        found = await changes(repo, base, tree, patch_limit=1024 * 1024)
    by_path = {f["path"]: f for f in found.files}
    assert by_path["a.txt"] == {
        "path": "a.txt",
        "previous_path": None,
        "status": "modified",
        "additions": 2,
        "deletions": 0,
        "binary": False,
    }
    assert by_path["picture.bin"] == {
        "path": "picture.bin",
        "previous_path": None,
        "status": "added",
        "additions": 0,
        "deletions": 0,
        "binary": True,
    }
    counts = {path: (f["additions"], f["deletions"]) for path, f in by_path.items()}
    assert counts["tab\there.txt"] == (2, 0)
    assert counts[" leading space.txt"] == (1, 0)
    assert counts["link"] == (1, 0)
    assert (found.additions, found.deletions) == (7, 0)
    # Text that is not UTF-8 reaches the patch with its bytes replaced, not as an error.
    assert "+caf\ufffd" in found.patch


async def test_names_that_are_not_utf8_are_captured(tmp_path: Path) -> None:
    repo = scratch(Path(os.fsdecode(os.fsencode(tmp_path) + b"/caf\xe9")))
    base = run(repo, "rev-parse", "HEAD")
    (repo / os.fsdecode(b"na\xefve.txt")).write_text("new\n")
    with trio.fail_after(30):
        top = await toplevel(repo)
        tree = await snapshot(top, tmp_path / "index", base)
        found = await changes(top, base, tree, patch_limit=1024)
    assert os.fsencode(top) == os.fsencode(resolved(repo))
    assert [os.fsencode(f["path"]) for f in found.files] == [b"na\xefve.txt"]


async def test_a_snapshot_leaves_the_users_index_alone(repo: Path, tmp_path: Path) -> None:
    (repo / "a.txt").write_text("staged\n")
    run(repo, "add", "a.txt")
    (repo / "a.txt").write_text("staged, then edited\n")
    (repo / "untracked.txt").write_text("new\n")
    status = run(repo, "status", "--porcelain")
    staged = run(repo, "diff", "--cached")
    with trio.fail_after(30):
        tree = await snapshot(repo, tmp_path / "index", run(repo, "rev-parse", "HEAD"))
        found = await changes(repo, "HEAD", tree, patch_limit=1024)
    assert {f["path"] for f in found.files} == {"a.txt", "untracked.txt"}
    assert "+staged, then edited" in found.patch
    assert (run(repo, "status", "--porcelain"), run(repo, "diff", "--cached")) == (status, staged)
    assert not (tmp_path / "index").exists()


async def test_a_tracked_file_that_matches_gitignore_is_still_part_of_the_snapshot(
    repo: Path, tmp_path: Path
) -> None:
    (repo / "kept.log").write_text("tracked before it was ignored\n")
    run(repo, "add", "kept.log")
    run(repo, "commit", "-q", "-m", "a log")
    (repo / ".gitignore").write_text("*.log\n")
    (repo / "new.log").write_text("ignored\n")
    head = run(repo, "rev-parse", "HEAD")
    with trio.fail_after(30):
        tree = await snapshot(repo, tmp_path / "index", head)
        found = await changes(repo, head, tree, patch_limit=1024)
    assert [(f["path"], f["status"]) for f in found.files] == [(".gitignore", "added")]


async def test_a_repository_without_commits_starts_from_nothing(tmp_path: Path) -> None:
    repo = tmp_path / "fresh"
    repo.mkdir()
    run(repo, "init", "-q", "-b", "trunk")
    (repo / "first.txt").write_text("first\n")
    with trio.fail_after(30):
        assert await _capture_git.head(repo) is None
        assert await _capture_git.branch(repo) == "trunk"
        tree = await snapshot(repo, tmp_path / "index", None)
        found = await changes(repo, EMPTY_TREE, tree, patch_limit=1024)
    assert [(f["path"], f["status"]) for f in found.files] == [("first.txt", "added")]


async def test_head_and_branch_name_the_checkout(repo: Path) -> None:
    head = run(repo, "rev-parse", "HEAD")
    with trio.fail_after(30):
        assert (await _capture_git.head(repo), await _capture_git.branch(repo)) == (head, "main")
        run(repo, "checkout", "-q", "-b", "feature/x")
        assert await _capture_git.branch(repo) == "feature/x"
        run(repo, "checkout", "-q", b"-b", b"caf\xe9")
        assert await _capture_git.branch(repo) == "caf\ufffd"
        run(repo, "checkout", "-q", "--detach")
        assert (await _capture_git.head(repo), await _capture_git.branch(repo)) == (head, None)


async def test_the_ref_that_keeps_a_snapshot_needs_no_identity_and_says_what_it_is(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(repo, "config", "--unset", "user.name")
    run(repo, "config", "--unset", "user.email")
    home = tmp_path / "home"
    home.mkdir()
    # No identity anywhere: git alone would refuse to make a commit.
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home))
    monkeypatch.delenv("EMAIL", raising=False)
    ref = "refs/letagents/workspace/test"
    with trio.fail_after(30):
        tree = await snapshot(repo, tmp_path / "index", run(repo, "rev-parse", "HEAD"))
        await _capture_git.keep(repo, ref, tree)
    shown = run(repo, "log", "-1", "--format=%an <%ae>|%cn <%ce>|%s|%T", ref)
    who = "letagents <letagents@localhost>"
    assert shown == f"{who}|{who}|letagents workspace capture|{tree}"
    with trio.fail_after(30):
        await _capture_git.release(repo, ref)
        await _capture_git.release(repo, ref)  # gone already: nothing to do
    assert run(repo, "for-each-ref", "refs/letagents") == ""


async def test_a_listing_longer_than_a_name_lists_every_file(repo: Path, tmp_path: Path) -> None:
    base = run(repo, "rev-parse", "HEAD")
    names = [f"{n:03}-a-rather-long-file-name-for-listing.txt" for n in range(400)]
    for name in names:
        (repo / name).write_text("x\n")
    with trio.fail_after(30):
        tree = await snapshot(repo, tmp_path / "index", base)
        found = await changes(repo, base, tree, patch_limit=1024)
    # Both listings run past the 16 KiB a call that answers a name may print.
    assert sum(len(name) + 3 for name in names) > _capture_git.SMALL_OUTPUT
    assert [f["path"] for f in found.files] == names
    assert found.additions == 400
    assert found.patch_truncated is True
    assert len(found.patch.encode()) == 1024
