"""Workspace captures at their edges (``_workspace.py``): the review's size, old captures.

The review is shared when its gzipped base64 text is at most the review's
limit; a finished capture's folder that cannot be removed never stops the
next capture; a published capture asked again answers as before; a begin
cut short after its record is first written is continued by the next one.
A scratch repository and a fake room, as in ``test_workspace.py``; real
clock, bounded.
"""

from __future__ import annotations

import json
import random
import shutil
from typing import TYPE_CHECKING, Any

import pytest
import trio

from letagents_trio.workers import _workspace
from letagents_trio.workers._workspace import WorkspaceCaptures

from .test_workspace import OWNER, Room, captures
from .test_workspace_answers import PRINTABLE, review_of

if TYPE_CHECKING:
    from pathlib import Path


async def test_a_review_whose_shared_text_is_exactly_the_limit_is_shared(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One time for every capture: the same edit makes the same review, byte for byte.
    monkeypatch.setattr(_workspace, "iso_now", lambda: "2026-12-06T10:00:00.000Z")
    # Random printable text: gzip and base64 make it longer than it was, so the
    # shared text (not the review's JSON) meets the limit first.
    rng = random.Random(164)
    noise = bytes(rng.choice(PRINTABLE) for _ in range(48 * 1024))
    lines = b"\n".join(noise[i : i + 80] for i in range(0, len(noise), 80)) + b"\n"

    async def publish(name: str) -> tuple[Room, dict[str, Any]]:
        (repo / "noise.txt").unlink(missing_ok=True)
        store, room = WorkspaceCaptures(tmp_path / name), Room()
        begun = await store.begin(OWNER, str(repo))
        (repo / "noise.txt").write_bytes(lines)
        done = await store.publish(OWNER, begun["capture_id"], "s", sender="A", send=room.send)
        return room, done

    with trio.fail_after(60):
        unlimited, _ = await publish("unlimited")
        size = len("".join(p["data"] for p in unlimited.pages()))
        review = review_of(unlimited)
        assert len(json.dumps(review, separators=(",", ":")).encode()) < size - 1
        monkeypatch.setattr(_workspace, "REVIEW_LIMIT", size)
        exact, at_limit = await publish("exact")
        monkeypatch.setattr(_workspace, "REVIEW_LIMIT", size - 1)
        over, one_over = await publish("over")
    assert "warning" not in at_limit
    assert len("".join(p["data"] for p in exact.pages())) == size
    assert review_of(exact) == review
    assert one_over["warning"] == _workspace.TOO_LARGE_WARNING
    assert [sorted(body) for _, body in over.calls[1:]] == [["source_message_id", "summary"]]


async def test_a_finished_capture_whose_folder_cannot_be_removed_does_not_stop_a_begin(
    repo: Path, tmp_path: Path
) -> None:
    store, room = captures(tmp_path), Room()
    root = tmp_path / "state.json.workspaces"
    with trio.fail_after(30):
        first = await store.begin(OWNER, str(repo))
        await store.publish(OWNER, first["capture_id"], "s", sender="A", send=room.send)
        # The published capture's folder moved away and linked back: removing the
        # old folder fails (a tree is never removed through a symbolic link).
        elsewhere = tmp_path / "elsewhere"
        (root / first["capture_id"]).rename(elsewhere)
        (root / first["capture_id"]).symlink_to(elsewhere, target_is_directory=True)
        second = await store.begin(OWNER, str(repo))
        again = await store.begin(OWNER, str(repo))
    assert second["capture_id"] != first["capture_id"]
    assert second["instruction"] == _workspace.BEGUN_TEXT
    assert again["capture_id"] == second["capture_id"]
    # Nothing beyond the link was removed.
    assert json.loads((elsewhere / "capture.json").read_text())["phase"] == "published"


async def test_a_published_capture_published_again_answers_as_before_and_sends_nothing(
    repo: Path, tmp_path: Path
) -> None:
    store, room = captures(tmp_path), Room()
    with trio.fail_after(30):
        begun = await store.begin(OWNER, str(repo))
        (repo / "a.txt").write_text("two\n")
        first = await store.publish(OWNER, begun["capture_id"], "s", sender="A", send=room.send)
        sent = list(room.calls)
        # A retry after the repository is gone, without a summary: nothing is prepared again.
        shutil.rmtree(repo)
        again = await store.publish(OWNER, begun["capture_id"], "", sender="A", send=room.send)
    assert first["status"] == "published"
    assert again == first
    assert room.calls == sent


async def test_a_begin_cut_short_after_its_first_record_is_continued_without_its_snapshot(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The disk fails (or the host dies) after the record is first written and
    # before the snapshot is recorded in it: the next begin continues that capture.
    writes = []
    write = _workspace._write

    def failing(path: Path, data: bytes) -> None:
        writes.append(path.name)
        if len(writes) > 1:
            raise OSError(28, "No space left on device")
        write(path, data)

    store = captures(tmp_path)
    with trio.fail_after(30):
        monkeypatch.setattr(_workspace, "_write", failing)
        with pytest.raises(OSError, match="No space left"):
            await store.begin(OWNER, str(repo))
        monkeypatch.undo()
        [folder] = (tmp_path / "state.json.workspaces").iterdir()
        again = await store.begin(OWNER, str(repo))
    assert writes == ["capture.json", "capture.json"]
    assert again["capture_id"] == folder.name
    assert again["instruction"] == _workspace.CONTINUE_TEXT
    assert again["baseline_available"] is False
