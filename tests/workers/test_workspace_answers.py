"""What a workspace capture answers and sends (``_workspace.py``), field by field.

The summary's parts are checked against the letagents API's own reading of a
change summary (``shared/workspace-change-summary.mjs``): exactly its fields,
a 40-hex base revision, at most 200 files with the rest counted, at most
128 KiB of patch. A scratch repository and a fake room, as in
``test_workspace.py``; real clock, bounded.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import random
import stat
import subprocess
from datetime import datetime
from typing import TYPE_CHECKING, Any

import pytest
import trio

from letagents_trio._errors import ApiError, WorkerError
from letagents_trio.workers import _workspace
from letagents_trio.workers._capture_git import Changes
from letagents_trio.workers._workspace import CaptureOwner, WorkspaceCaptures

from .test_workspace import OWNER, Room, captures, git

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

# The fields of a change summary, as the API reads one (and no others).
PART_FIELDS = {
    "captured_at",
    "branch",
    "base_revision",
    "state",
    "files",
    "additions",
    "deletions",
    "hidden_files",
    "patch",
    "patch_truncated",
}
# Printable ASCII that JSON writes as itself (no quote, no backslash).
PRINTABLE = bytes(c for c in range(0x21, 0x7F) if c not in b'"\\')
FILE_FIELDS = {"path", "previous_path", "status", "additions", "deletions", "binary"}
COUNTS = (
    "unresolved",
    "succeeded",
    "failed",
    "denied_before_start",
    "cancelled_before_start",
    "interrupted_after_start",
    "lost_after_start",
)


def head_of(repo: Path) -> str:
    done = subprocess.run(["git", "rev-parse", "HEAD"], cwd=repo, check=True, capture_output=True)
    return done.stdout.decode().strip()


def top_of(repo: Path) -> str:
    return str(repo.resolve())


async def test_begin_answers_its_capture_and_the_same_one_again(repo: Path, tmp_path: Path) -> None:
    store = captures(tmp_path)
    with trio.fail_after(30):
        begun = await store.begin(OWNER, str(repo))
        again = await store.begin(OWNER, str(repo / "."))
    assert begun == {
        "capture_id": begun["capture_id"],
        "workspace": top_of(repo),
        "baseline_available": True,
        "instruction": _workspace.BEGUN_TEXT,
    }
    assert again == {**begun, "instruction": _workspace.CONTINUE_TEXT}
    folder = tmp_path / "state.json.workspaces" / begun["capture_id"]
    record = json.loads((folder / "capture.json").read_text())
    assert (record["phase"], record["base_revision"]) == ("ready", head_of(repo))
    # Owner-only: the folder and the record.
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((folder / "capture.json").stat().st_mode) == 0o600
    assert sorted(p.name for p in folder.iterdir()) == ["capture.json"]


async def test_a_begin_without_its_snapshot_says_changes_cannot_be_attributed(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(*args: object) -> str:
        await trio.lowlevel.checkpoint()
        raise WorkerError("git add failed (exit 128).")

    store, room = captures(tmp_path), Room()
    with trio.fail_after(30):
        monkeypatch.setattr(_workspace, "snapshot", broken)
        with pytest.raises(WorkerError, match="git add failed"):
            await store.begin(OWNER, str(repo))
        monkeypatch.undo()
        again = await store.begin(OWNER, str(repo))
        (repo / "a.txt").write_text("two\n")
        done = await store.publish(OWNER, again["capture_id"], "s", sender="A", send=room.send)
    assert again["baseline_available"] is False
    assert again["warning"] == (
        "The starting snapshot is unavailable. Exact changes for this piece of work"
        " cannot be attributed."
    )
    assert again["instruction"] == _workspace.CONTINUE_TEXT
    assert done["baseline_available"] is False
    assert done["warning"] == (
        "The starting snapshot is unavailable; no exact change attribution is available."
    )
    # Without a start, the contribution is measured from the commit.
    files = room.calls[1][1]["summary"]["contribution"]["files"]
    assert [(f["path"], f["status"]) for f in files] == [("a.txt", "modified")]


async def test_a_published_capture_answers_its_message_and_attempt(
    repo: Path, tmp_path: Path
) -> None:
    store, room = captures(tmp_path), Room()
    with trio.fail_after(30):
        begun = await store.begin(OWNER, str(repo))
        (repo / "a.txt").write_text("two\n")
        done = await store.publish(
            OWNER, begun["capture_id"], "  edited a  ", sender="Alder", send=room.send
        )
        again = await store.publish(OWNER, begun["capture_id"], "x", sender="A", send=room.send)
    assert done == {
        "status": "published",
        "capture_id": begun["capture_id"],
        "source_message_id": "7",
        "attempt_id": "x",
        "baseline_available": True,
        "instruction": _workspace.PUBLISHED_TEXT,
    }
    assert again == done
    assert room.calls[0] == (
        "messages",
        {
            "sender": "Alder",
            "text": "edited a",
            "client_message_id": f"mcp-workspace:{begun['capture_id']}",
        },
    )
    assert len(room.calls) == 2  # published once: asking again sends nothing


async def test_the_summary_has_the_apis_fields_for_the_workspace_and_the_contribution(
    repo: Path, tmp_path: Path
) -> None:
    (repo / "a.txt").write_text("edited before the capture began\n")
    store, room = captures(tmp_path), Room()
    with trio.fail_after(30):
        begun = await store.begin(OWNER, str(repo))
        (repo / "b.txt").write_text("one\ntwo\n")
        await store.publish(OWNER, begun["capture_id"], "added b", sender="A", send=room.send)
    body = room.calls[1][1]
    summary = body["summary"]
    assert (summary["version"], summary["recorded_state"]) == (3, "completed")
    assert (summary["evidence_incomplete"], summary["elapsed_ms"]) == (True, None)
    assert summary["operation_counts"] == dict.fromkeys(COUNTS, 0)
    whole, mine = summary["workspace"], summary["contribution"]
    assert set(whole) == PART_FIELDS
    assert set(mine) == {*PART_FIELDS, "summary"}
    assert mine["summary"] == "added b"
    for part in (whole, mine):
        assert (part["branch"], part["base_revision"]) == ("main", head_of(repo))
        assert part["state"] == "ready"
        assert datetime.fromisoformat(part["captured_at"]).tzinfo is not None
        assert (part["hidden_files"], part["patch_truncated"]) == (0, False)
        assert all(set(f) == FILE_FIELDS for f in part["files"])
    # The workspace is measured from the commit, the contribution from the start.
    assert {f["path"]: f["status"] for f in whole["files"]} == {
        "a.txt": "modified",
        "b.txt": "added",
    }
    assert (whole["additions"], whole["deletions"]) == (3, 1)
    assert [f["path"] for f in mine["files"]] == ["b.txt"]
    assert (mine["additions"], mine["deletions"]) == (2, 0)
    assert "+two" in mine["patch"]
    assert "edited before" not in mine["patch"]
    assert "+edited before the capture began" in whole["patch"]


@pytest.mark.parametrize(("count", "hidden"), [(200, 0), (201, 1)])
async def test_the_preview_shows_200_files_and_counts_the_rest(
    repo: Path, tmp_path: Path, count: int, hidden: int
) -> None:
    store, room = captures(tmp_path), Room()
    with trio.fail_after(60):
        begun = await store.begin(OWNER, str(repo))
        for n in range(count):
            (repo / f"f{n:03}.txt").write_text(f"{n}\n")
        await store.publish(OWNER, begun["capture_id"], "many", sender="A", send=room.send)
    preview = room.calls[1][1]["summary"]["contribution"]
    assert (len(preview["files"]), preview["hidden_files"]) == (count - hidden, hidden)
    assert preview["additions"] == count  # every file's lines, shown or not


def part(patch: str, limit: int) -> dict[str, Any]:
    found = Changes(files=[], patch=patch, patch_truncated=False)
    facts = {"captured_at": "2026-12-06T10:00:00.000Z", "branch": None, "base_revision": None}
    return _workspace._part(found, facts, files=200, patch=limit)


def test_a_preview_patch_of_the_limit_is_whole_and_one_byte_more_is_cut() -> None:
    assert (part("x" * 8, 8)["patch"], part("x" * 8, 8)["patch_truncated"]) == ("x" * 8, False)
    cut = part("x" * 9, 8)
    assert (cut["patch"], cut["patch_truncated"]) == ("x" * 8, True)
    # A character the cut splits is left out whole.
    split = part("x" * 7 + "é", 8)
    assert (split["patch"], split["patch_truncated"]) == ("x" * 7, True)


class Refusing(Room):
    """Answers as the test says: a status, or a body of its own."""

    def __init__(self, *, status: int = 0, message: dict[str, Any] | None = None) -> None:
        super().__init__()
        self.status = status
        self.message = message
        self.answer: object = None

    async def send(self, method: str, route: str, body: Mapping[str, Any]) -> dict[str, Any]:
        answer = await super().send(method, route, body)
        if route == "messages" and self.message is not None:
            return self.message
        if route == "agent-work":
            if self.status:
                raise ApiError(self.status, '{"error":"refused"}')
            if self.answer is not None:
                return {"work": self.answer}
        return answer


async def test_a_capture_the_room_deleted_is_never_published_again(
    repo: Path, tmp_path: Path
) -> None:
    store, room = captures(tmp_path), Refusing(status=410)
    with trio.fail_after(30):
        begun = await store.begin(OWNER, str(repo))
        (repo / "a.txt").write_text("two\n")
        with pytest.raises(ApiError):
            await store.publish(OWNER, begun["capture_id"], "s", sender="A", send=room.send)
        folder = tmp_path / "state.json.workspaces" / begun["capture_id"]
        assert json.loads((folder / "capture.json").read_text())["phase"] == "blocked"
        assert sorted(p.name for p in folder.iterdir()) == ["capture.json"]
        with pytest.raises(WorkerError) as blocked:
            await store.publish(OWNER, begun["capture_id"], "s", sender="A", send=room.send)
        assert str(blocked.value) == _workspace.BLOCKED_TEXT
        # A new capture may begin: the blocked one is cleared away.
        fresh = await store.begin(OWNER, str(repo))
    assert fresh["instruction"] == _workspace.BEGUN_TEXT
    assert not folder.exists()


async def test_a_refusal_other_than_gone_keeps_everything_for_a_retry(
    repo: Path, tmp_path: Path
) -> None:
    store, room = captures(tmp_path), Refusing(status=409)
    with trio.fail_after(30):
        begun = await store.begin(OWNER, str(repo))
        (repo / "a.txt").write_text("two\n")
        with pytest.raises(ApiError):
            await store.publish(OWNER, begun["capture_id"], "s", sender="A", send=room.send)
        room.status = 0
        done = await store.publish(OWNER, begun["capture_id"], "s", sender="A", send=room.send)
    assert done["status"] == "published"


@pytest.mark.parametrize("message", [{}, {"id": ""}, {"id": 7}])
async def test_a_summary_message_the_room_does_not_confirm_stops_the_publish(
    repo: Path, tmp_path: Path, message: dict[str, Any]
) -> None:
    store, room = captures(tmp_path), Refusing(message=message)
    with trio.fail_after(30):
        begun = await store.begin(OWNER, str(repo))
        with pytest.raises(WorkerError) as refused:
            await store.publish(OWNER, begun["capture_id"], "s", sender="A", send=room.send)
    assert str(refused.value) == (
        "The server did not confirm the summary message. Retry this capture."
    )
    assert [r for r, _ in room.calls] == ["messages"]


@pytest.mark.parametrize("work", [{"attempt_id": "y", "source_message_id": "8"}, "7", ["7"]])
async def test_an_answer_for_another_message_is_refused(
    repo: Path, tmp_path: Path, work: object
) -> None:
    store, room = captures(tmp_path), Refusing()
    room.answer = work
    with trio.fail_after(30):
        begun = await store.begin(OWNER, str(repo))
        with pytest.raises(WorkerError) as refused:
            await store.publish(OWNER, begun["capture_id"], "s", sender="A", send=room.send)
    assert str(refused.value) == "The server returned a different capture."


async def test_one_operation_at_a_time_per_worker_and_room(repo: Path, tmp_path: Path) -> None:
    store = captures(tmp_path)
    elsewhere = CaptureOwner(
        api_url=OWNER.api_url, room_id="r2", agent_key=OWNER.agent_key, agent_instance_id="worker_1"
    )
    started, release = trio.Event(), trio.Event()

    async def slow(method: str, route: str, body: Mapping[str, Any]) -> dict[str, Any]:
        started.set()
        await release.wait()
        return await Room().send(method, route, body)

    with trio.fail_after(30):
        begun = await store.begin(OWNER, str(repo))
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: store.publish(OWNER, begun["capture_id"], "s", sender="A", send=slow)
            )
            await started.wait()
            with pytest.raises(WorkerError) as busy:
                await store.begin(OWNER, str(repo))
            assert str(busy.value) == _workspace.BUSY_TEXT
            # Another room of the same worker is another capture.
            other = await store.begin(elsewhere, str(repo))
            release.set()
    assert other["capture_id"] != begun["capture_id"]
    assert await store.begin(OWNER, str(repo)) != {}  # free again


async def test_a_worker_sees_only_its_own_captures(repo: Path, tmp_path: Path) -> None:
    store, room = captures(tmp_path), Room()
    other = CaptureOwner(
        api_url=OWNER.api_url, room_id="r", agent_key=OWNER.agent_key, agent_instance_id="worker_9"
    )
    with trio.fail_after(30):
        mine = await store.begin(OWNER, str(repo))
        theirs = await store.begin(other, str(repo))
        (tmp_path / "state.json.workspaces" / "not-a-capture").mkdir()
        again = await store.begin(OWNER, str(repo))
        with pytest.raises(WorkerError) as refused:
            await store.publish(other, mine["capture_id"], "s", sender="B", send=room.send)
        with pytest.raises(WorkerError):
            await store.publish(OWNER, "not-a-capture", "s", sender="A", send=room.send)
    assert theirs["capture_id"] != mine["capture_id"]
    assert again["capture_id"] == mine["capture_id"]
    assert str(refused.value) == _workspace.NO_CAPTURE_TEXT


@pytest.mark.parametrize(("summary", "refused"), [("", True), (" ", True), ("x" * 400, False)])
async def test_a_summary_of_1_to_400_characters_is_taken(
    repo: Path, tmp_path: Path, summary: str, refused: bool
) -> None:
    store, room = captures(tmp_path), Room()
    with trio.fail_after(30):
        begun = await store.begin(OWNER, str(repo))
        if refused:
            with pytest.raises(WorkerError) as error:
                await store.publish(OWNER, begun["capture_id"], summary, sender="A", send=room.send)
            assert str(error.value) == _workspace.SUMMARY_TEXT
        else:
            done = await store.publish(
                OWNER, begun["capture_id"], summary, sender="A", send=room.send
            )
            assert done["status"] == "published"


async def test_a_tracked_file_that_matches_gitignore_is_neither_deleted_nor_added(
    repo: Path, tmp_path: Path
) -> None:
    (repo / "kept.log").write_text("tracked\n")
    git(repo, "add", "--force", "kept.log")
    git(repo, "commit", "-q", "-m", "a log, tracked though *.log is ignored")
    store, room = captures(tmp_path), Room()
    with trio.fail_after(30):
        begun = await store.begin(OWNER, str(repo))
        (repo / "a.txt").write_text("two\n")
        await store.publish(OWNER, begun["capture_id"], "s", sender="A", send=room.send)
    summary = room.calls[1][1]["summary"]
    assert [f["path"] for f in summary["contribution"]["files"]] == ["a.txt"]
    assert [f["path"] for f in summary["workspace"]["files"]] == ["a.txt"]


def review_of(room: Room) -> dict[str, Any]:
    data = "".join(p["data"] for p in room.pages())
    review: dict[str, Any] = json.loads(gzip.decompress(base64.b64decode(data)))
    return review


async def test_the_review_holds_every_file_and_the_whole_patch(repo: Path, tmp_path: Path) -> None:
    store, room = captures(tmp_path), Room()
    with trio.fail_after(60):
        begun = await store.begin(OWNER, str(repo))
        for n in range(201):
            (repo / f"f{n:03}.txt").write_text(f"{n}\n")
        await store.publish(OWNER, begun["capture_id"], "many", sender="A", send=room.send)
    review = review_of(room)
    assert set(review) == {"version", "workspace", "contribution"}
    assert review["version"] == 1
    for name in ("workspace", "contribution"):
        part = review[name]
        assert set(part) == PART_FIELDS
        assert (len(part["files"]), part["hidden_files"]) == (201, 0)
        assert part["patch"].count("+++ b/") == 201


async def measured_review(repo: Path, tmp_path: Path, limit: int) -> tuple[Room, dict[str, Any]]:
    """Publish one edit of ``a.txt`` with the review limited to ``limit`` bytes."""
    store, room = WorkspaceCaptures(tmp_path / f"captures-{limit}"), Room()
    git(repo, "checkout", "--", "a.txt")
    begun = await store.begin(OWNER, str(repo))
    (repo / "a.txt").write_text("line\n" * 2000)
    done = await store.publish(OWNER, begun["capture_id"], "s", sender="A", send=room.send)
    return room, done


async def test_a_review_of_the_limit_is_shared_and_one_byte_more_is_not(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with trio.fail_after(60):
        room, _ = await measured_review(repo, tmp_path, _workspace.REVIEW_LIMIT)
        size = len(json.dumps(review_of(room), separators=(",", ":")).encode())
        monkeypatch.setattr(_workspace, "REVIEW_LIMIT", size)
        whole, done = await measured_review(repo, tmp_path, size)
        assert "warning" not in done
        assert len(whole.pages()) == 1
        monkeypatch.setattr(_workspace, "REVIEW_LIMIT", size - 1)
        preview, done = await measured_review(repo, tmp_path, size - 1)
    # Too large: the summary and its preview are shared, without a review.
    assert done["status"] == "published"
    assert done["warning"] == _workspace.TOO_LARGE_WARNING
    assert [r for r, _ in preview.calls] == ["messages", "agent-work"]
    assert "review_page" not in preview.calls[1][1]
    assert preview.calls[1][1]["summary"]["contribution"]["additions"] == 2000


async def test_after_a_published_capture_begin_starts_a_new_one(repo: Path, tmp_path: Path) -> None:
    store, room = captures(tmp_path), Room()
    with trio.fail_after(30):
        first = await store.begin(OWNER, str(repo))
        await store.publish(OWNER, first["capture_id"], "s", sender="A", send=room.send)
        second = await store.begin(OWNER, str(repo))
    assert second["capture_id"] != first["capture_id"]
    assert second["instruction"] == _workspace.BEGUN_TEXT
    assert not (tmp_path / "state.json.workspaces" / first["capture_id"]).exists()


async def test_only_folders_named_by_a_capture_id_hold_captures(repo: Path, tmp_path: Path) -> None:
    store, room = captures(tmp_path), Room()
    root = tmp_path / "state.json.workspaces"
    with trio.fail_after(30):
        mine = await store.begin(OWNER, str(repo))
        record = json.loads((root / mine["capture_id"] / "capture.json").read_text())
        # A copy under another name (a backup, say), of another repository: no capture.
        (root / "0-backup").mkdir()
        (root / "0-backup" / "capture.json").write_text(
            json.dumps({**record, "capture_id": "0-backup", "workspace": "/elsewhere"})
        )
        again = await store.begin(OWNER, str(repo))
        # Nor does an id that climbs out of the folder reach another store's capture.
        other = WorkspaceCaptures(tmp_path / "other")
        theirs = await other.begin(OWNER, str(repo))
        with pytest.raises(WorkerError) as refused:
            await store.publish(
                OWNER, f"../other/{theirs['capture_id']}", "s", sender="A", send=room.send
            )
    assert again["capture_id"] == mine["capture_id"]
    assert str(refused.value) == _workspace.NO_CAPTURE_TEXT
    assert room.calls == []


async def test_a_damaged_capture_record_is_no_capture(repo: Path, tmp_path: Path) -> None:
    store, room = captures(tmp_path), Room()
    with trio.fail_after(30):
        begun = await store.begin(OWNER, str(repo))
        (tmp_path / "state.json.workspaces" / begun["capture_id"] / "capture.json").write_text(
            "[1, 2]"
        )
        with pytest.raises(WorkerError) as refused:
            await store.publish(OWNER, begun["capture_id"], "s", sender="A", send=room.send)
        fresh = await store.begin(OWNER, str(repo))
    assert str(refused.value) == _workspace.NO_CAPTURE_TEXT
    assert fresh["capture_id"] != begun["capture_id"]


async def test_a_capture_still_uploading_says_to_call_again(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_workspace, "PAGES_PER_CALL", 1)
    store, room = captures(tmp_path), Room()
    with trio.fail_after(60):
        begun = await store.begin(OWNER, str(repo))
        (repo / "big.txt").write_text(
            "\n".join(base64.b64encode(os.urandom(60)).decode() for _ in range(1000)) + "\n"
        )
        first = await store.publish(OWNER, begun["capture_id"], "big", sender="A", send=room.send)
    assert first == {
        "status": "uploading",
        "capture_id": begun["capture_id"],
        "source_message_id": "7",
        "attempt_id": "x",
        "baseline_available": True,
        "instruction": _workspace.UPLOADING_TEXT,
    }
    assert len(room.pages()) == 1


async def test_a_review_that_fits_but_does_not_compress_under_the_limit_is_not_shared(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Random printable text: gzip and base64 make it longer than it was.
    rng = random.Random(45)
    noise = bytes(rng.choice(PRINTABLE) for _ in range(48 * 1024))
    lines = b"\n".join(noise[i : i + 80] for i in range(0, len(noise), 80)) + b"\n"
    with trio.fail_after(60):
        store, room = WorkspaceCaptures(tmp_path / "first"), Room()
        begun = await store.begin(OWNER, str(repo))
        (repo / "noise.txt").write_bytes(lines)
        await store.publish(OWNER, begun["capture_id"], "s", sender="A", send=room.send)
        size = len(json.dumps(review_of(room), separators=(",", ":")).encode())
        assert len("".join(p["data"] for p in room.pages())) > size
        monkeypatch.setattr(_workspace, "REVIEW_LIMIT", size)
        (repo / "noise.txt").unlink()
        store, room = WorkspaceCaptures(tmp_path / "second"), Room()
        begun = await store.begin(OWNER, str(repo))
        (repo / "noise.txt").write_bytes(lines)
        done = await store.publish(OWNER, begun["capture_id"], "s", sender="A", send=room.send)
    assert done["warning"] == _workspace.TOO_LARGE_WARNING
    assert [sorted(body) for _, body in room.calls[1:]] == [["source_message_id", "summary"]]
