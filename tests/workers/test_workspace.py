"""Workspace captures in the host layer: what begin records, the bounds, the saved steps.

A scratch git repository and a fake room (``send`` records each call). Real
clock: git runs as a subprocess; every test is bounded.
"""

from __future__ import annotations

import base64
import gzip
import json
import os
import subprocess
from typing import TYPE_CHECKING, Any

import pytest
import trio

from letagents_trio._errors import RoomUnreachable, WorkerError
from letagents_trio.workers import _workspace
from letagents_trio.workers._workspace import CaptureOwner, WorkspaceCaptures

if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

OWNER = CaptureOwner(
    api_url="http://room.test", room_id="r", agent_key="o/a", agent_instance_id="worker_1"
)


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


class Room:
    """Answers the two routes a publish calls, and records them; may fail one call."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.fail_at: int | None = None

    async def send(self, method: str, route: str, body: Mapping[str, Any]) -> dict[str, Any]:
        await trio.lowlevel.checkpoint()
        if self.fail_at is not None and len(self.calls) == self.fail_at:
            self.fail_at = None
            raise RoomUnreachable("the room did not answer")
        self.calls.append((route, dict(body)))
        if route == "messages":
            return {"id": "7"}
        return {"work": {"attempt_id": "x", "source_message_id": body["source_message_id"]}}

    def pages(self) -> list[dict[str, Any]]:
        return [b["review_page"] for r, b in self.calls if r == "agent-work"]


def captures(tmp_path: Path) -> WorkspaceCaptures:
    return WorkspaceCaptures(tmp_path / "state.json.workspaces")


async def test_begin_records_tracked_and_untracked_files_but_not_ignored_ones(
    repo: Path, tmp_path: Path
) -> None:
    (repo / "before.txt").write_text("untracked at the start\n")
    store, room = captures(tmp_path), Room()
    with trio.fail_after(30):
        begun = await store.begin(OWNER, str(repo))
        assert room.calls == []  # nothing is posted before publish
        (repo / "a.txt").write_text("two\n")
        (repo / "debug.log").write_text("ignored\n")
        (repo / "new.txt").write_text("new\n")
        (repo / "before.txt").unlink()
        done = await store.publish(OWNER, begun["capture_id"], "edits", sender="A", send=room.send)
    assert done["status"] == "published"
    (route, message), (_, work) = room.calls
    assert (route, message["text"], message["client_message_id"]) == (
        "messages",
        "edits",
        f"mcp-workspace:{begun['capture_id']}",
    )
    files = {f["path"]: f["status"] for f in work["summary"]["contribution"]["files"]}
    assert files == {"a.txt": "modified", "before.txt": "deleted", "new.txt": "added"}
    # The review decodes to the same changes, digest and all.
    page = work["review_page"]
    assert (page["index"], page["total"]) == (0, 1)
    review = json.loads(gzip.decompress(base64.b64decode(page["data"])))
    assert {f["path"] for f in review["contribution"]["files"]} == set(files)
    # Published: only the record stays, and the snapshot's ref is gone.
    folder = tmp_path / "state.json.workspaces" / begun["capture_id"]
    assert sorted(p.name for p in folder.iterdir()) == ["capture.json"]
    refs = await trio.run_process(
        ["git", "for-each-ref", "refs/letagents"], cwd=repo, capture_stdout=True
    )
    assert refs.stdout == b""


async def test_the_preview_is_bounded_and_a_large_review_goes_in_pages_across_calls(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_workspace, "PAGES_PER_CALL", 2)
    store, room = captures(tmp_path), Room()
    with trio.fail_after(60):
        begun = await store.begin(OWNER, str(repo))
        # About 300 KiB of text that does not compress: a patch past the preview's 128 KiB.
        (repo / "big.txt").write_text(
            "\n".join(base64.b64encode(os.urandom(60)).decode() for _ in range(3800)) + "\n"
        )
        first = await store.publish(OWNER, begun["capture_id"], "big", sender="A", send=room.send)
        assert first["status"] == "uploading"
        preview = room.calls[1][1]["summary"]["contribution"]
        assert preview["patch_truncated"] is True
        assert len(preview["patch"].encode()) <= _workspace.PREVIEW_PATCH
        total = room.pages()[0]["total"]
        assert total > 2
        while (await store.publish(OWNER, begun["capture_id"], "big", sender="A", send=room.send))[
            "status"
        ] == "uploading":
            pass
    pages = room.pages()
    assert [p["index"] for p in pages] == list(range(total))
    assert all(len(p["data"]) == _workspace.REVIEW_PAGE_SIZE for p in pages[:-1])
    data = "".join(p["data"] for p in pages)
    review = json.loads(gzip.decompress(base64.b64decode(data)))
    assert review["contribution"]["patch_truncated"] is False
    assert [m for m, _ in room.calls].count("messages") == 1


async def test_a_publish_that_cannot_reach_the_room_keeps_its_bytes_and_a_retry_finishes(
    repo: Path, tmp_path: Path
) -> None:
    store, room = captures(tmp_path), Room()
    with trio.fail_after(30):
        begun = await store.begin(OWNER, str(repo))
        (repo / "a.txt").write_text("two\n")
        room.fail_at = 1  # the message is posted; the review is not
        with pytest.raises(RoomUnreachable):
            await store.publish(OWNER, begun["capture_id"], "edit", sender="A", send=room.send)
        folder = tmp_path / "state.json.workspaces" / begun["capture_id"]
        assert (folder / "review").exists()
        (repo / "a.txt").write_text("changed after the failure\n")  # not recaptured
        done = await store.publish(OWNER, begun["capture_id"], "other", sender="A", send=room.send)
    assert done["status"] == "published"
    assert [r for r, _ in room.calls] == ["messages", "agent-work"]
    patch = room.calls[1][1]["summary"]["contribution"]["patch"]
    assert "+two" in patch
    assert "changed after" not in patch


async def test_bad_input_names_its_cause(repo: Path, tmp_path: Path) -> None:
    store, room = captures(tmp_path), Room()
    other = CaptureOwner(
        api_url="http://room.test", room_id="r", agent_key="o/b", agent_instance_id="worker_2"
    )
    with trio.fail_after(30):
        with pytest.raises(WorkerError, match="is not inside a git repository"):
            await store.begin(OWNER, str(tmp_path))
        with pytest.raises(WorkerError, match="is not a directory"):
            await store.begin(OWNER, str(tmp_path / "missing"))
        begun = await store.begin(OWNER, str(repo))
        with pytest.raises(WorkerError, match="This worker has no such capture"):
            await store.publish(other, begun["capture_id"], "s", sender="B", send=room.send)
        with pytest.raises(WorkerError, match="at most 400 characters"):
            await store.publish(OWNER, begun["capture_id"], "x" * 401, sender="A", send=room.send)
        second = tmp_path / "second"
        second.mkdir()
        git(second, "init", "-q")
        with pytest.raises(WorkerError, match="unfinished capture in another repository"):
            await store.begin(OWNER, str(second))
    assert room.calls == []
