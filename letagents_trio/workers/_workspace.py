"""Workspace captures: a repository's files before a worker edits it, and the work after.

**Begin** records the starting point locally, nothing posted: the
repository's top (``git rev-parse --show-toplevel`` of the ``cwd`` given),
its ``HEAD`` and a snapshot tree of every tracked and non-ignored untracked
file (:mod:`._capture_git`), kept under ``refs/letagents/workspace/<id>``.
Asked again before it is published, it answers the same capture.

**Publish** first prepares, once: a snapshot now, the changes from the
starting snapshot (the worker's contribution) and from the starting commit
(the workspace), a bounded preview of both (at most 200 files and 128 KiB of
patch each: the summary the room shows) and the full review (every file and
the whole patch, gzipped JSON in base64, at most 128 MiB, else only the
preview is shared). Then it sends, as this worker: the short summary as a
room message (``client_message_id`` ``mcp-workspace:<id>``, so a retry never
posts it twice), then ``POST …/agent-work`` with the preview and the review's
pages, 64 KiB each, at most 16 a call. Each step is saved before the next, so
a capture that cannot reach the room keeps its bytes, and publishing again
with the same ``capture_id`` carries on where it stopped; ``uploading`` says
more pages remain.

Captures live beside the state file, in ``<state file>.workspaces/<id>/``
(owner-only, each file written whole by a rename): ``capture.json`` (which
worker, which repository, how far it got), ``prepared.json`` and ``review``.
A published capture keeps only ``capture.json``.
"""

from __future__ import annotations

import base64
import contextlib
import gzip
import hashlib
import json
import os
import re
import shutil
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, final

import attrs
import trio

from .._errors import ApiError, WorkerError
from ._capture_git import EMPTY_TREE, Changes, branch, changes, head, keep, release, snapshot
from ._capture_git import toplevel as git_toplevel
from ._stateparts import iso_now

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Mapping

__all__ = [
    "PAGES_PER_CALL",
    "PREVIEW_FILES",
    "PREVIEW_PATCH",
    "REVIEW_LIMIT",
    "REVIEW_PAGE_SIZE",
    "CaptureOwner",
    "WorkspaceCaptures",
]

# The letagents API's bounds (workspace-change-summary, workspace-review).
PREVIEW_PATCH: Final = 128 * 1024
PREVIEW_FILES: Final = 200
REVIEW_FILES: Final = 10_000
REVIEW_LIMIT: Final = 128 * 1024 * 1024
REVIEW_PAGE_SIZE: Final = 64 * 1024
# Pages one publish call sends (1 MiB); a larger review resumes on the next call.
PAGES_PER_CALL: Final = 16
# A summary message's longest text (the Node tool's).
SUMMARY_MAX: Final = 400
_UUID4: Final = re.compile(r"[a-f0-9]{8}-[a-f0-9]{4}-4[a-f0-9]{3}-[89ab][a-f0-9]{3}-[a-f0-9]{12}")
_DIR_MODE: Final = 0o700
_FILE_MODE: Final = 0o600

# The Node server's texts, where it has one.
NO_CAPTURE_TEXT: Final = (
    "This worker has no such capture. Call begin_workspace_capture before editing and retain"
    " its capture_id."
)
OTHER_REPOSITORY_TEXT: Final = (
    "This worker has an unfinished capture in another repository. Publish it before beginning"
    " a different workspace."
)
BLOCKED_TEXT: Final = (
    "This capture was deleted or cleared. It will not be republished. Begin a new capture for"
    " new work."
)
BUSY_TEXT: Final = (
    "This worker already has a capture operation in progress. Retry when it finishes."
)
SUMMARY_TEXT: Final = "Supply a short summary of at most 400 characters."
TOO_LARGE_WARNING: Final = (
    "This capture exceeds the full-review size limit. Only its bounded preview is available."
)
CONTINUE_TEXT: Final = (
    "Continue this capture. Keep its capture_id and call publish_workspace_capture when finished."
)
BEGUN_TEXT: Final = (
    "Make your changes, then call publish_workspace_capture with this capture_id and a short"
    " summary. It posts the summary to the room; do not send a duplicate summary message."
)
PUBLISHED_TEXT: Final = (
    "The summary and captured review are shared in the room. Do not send a duplicate summary."
)
UPLOADING_TEXT: Final = (
    "Call publish_workspace_capture again with the same capture_id to finish sharing the"
    " captured review. Saved bytes and summary will be reused."
)


@final
@attrs.frozen(kw_only=True)
class CaptureOwner:
    """The worker a capture belongs to: all four must match to use it."""

    api_url: str
    room_id: str
    agent_key: str
    agent_instance_id: str


def _write(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` whole (a temporary file renamed over it), owner-only."""
    temporary = path.with_name(path.name + ".tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, _FILE_MODE)
    with os.fdopen(fd, "wb") as file:
        file.write(data)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)


def _part(
    found: Changes, facts: Mapping[str, str | None], *, files: int, patch: int
) -> dict[str, Any]:
    """A change summary of ``found`` with at most ``files`` files and ``patch`` patch bytes."""
    shown = found.files[:files]
    text = found.patch.encode("utf-8")
    cut = len(text) > patch
    return {
        "captured_at": facts["captured_at"],
        "branch": facts["branch"],
        "base_revision": facts["base_revision"],
        "state": "ready",
        "files": shown,
        "additions": found.additions,
        "deletions": found.deletions,
        "hidden_files": len(found.files) - len(shown),
        "patch": text[:patch].decode("utf-8", "ignore") if cut else found.patch,
        "patch_truncated": cut or found.patch_truncated,
    }


@final
@attrs.define(eq=False)
class WorkspaceCaptures:
    """The captures of one state file's workers (see the module docstring).

    Args:
        root: the folder holding one folder per capture (``<state file>.workspaces``).
    """

    root: Path
    _busy: set[str] = attrs.field(factory=set, init=False)

    # --- records -----------------------------------------------------------------------

    def _folder(self, capture_id: str) -> Path:
        return self.root / capture_id

    def _read(self, capture_id: str) -> dict[str, Any] | None:
        try:
            data = json.loads((self._folder(capture_id) / "capture.json").read_bytes())
        except (OSError, ValueError):
            return None
        return data if isinstance(data, dict) else None

    def _save(self, record: Mapping[str, Any]) -> None:
        folder = self._folder(str(record["capture_id"]))
        folder.mkdir(mode=_DIR_MODE, parents=True, exist_ok=True)
        _write(folder / "capture.json", json.dumps(record, sort_keys=True).encode("utf-8"))

    def _mine(self, owner: CaptureOwner) -> list[dict[str, Any]]:
        found = []
        with contextlib.suppress(FileNotFoundError):
            for entry in sorted(self.root.iterdir()):
                record = self._read(entry.name) if _UUID4.fullmatch(entry.name) else None
                if record is not None and record.get("owner") == attrs.asdict(owner):
                    found.append(record)
        return found

    @contextlib.asynccontextmanager
    async def _exclusive(self, owner: CaptureOwner) -> AsyncIterator[None]:
        await trio.lowlevel.checkpoint()
        key = f"{owner.agent_instance_id}:{owner.room_id}"
        if key in self._busy:
            raise WorkerError(BUSY_TEXT)
        self._busy.add(key)
        try:
            yield
        finally:
            self._busy.discard(key)

    # --- begin -------------------------------------------------------------------------

    async def begin(self, owner: CaptureOwner, cwd: str) -> dict[str, Any]:
        """Record the repository holding ``cwd`` as it is now; or the capture already begun.

        Raises:
            WorkerError: a capture operation of this worker is running, or its
                unfinished capture is of another repository.
            GitFailed: ``cwd`` is not inside a git repository, or git failed.

        Cancellation:
            A checkpoint. Cancelled mid-way, the capture is recorded without
            its snapshot (publishing then says exact changes are unknown).
        """
        async with self._exclusive(owner):
            prior = [r for r in self._mine(owner) if r["phase"] not in ("published", "blocked")]
            workspace = await git_toplevel(cwd)
            if prior:
                if prior[0]["workspace"] != str(workspace):
                    raise WorkerError(OTHER_REPOSITORY_TEXT)
                return self._begun(prior[0], CONTINUE_TEXT)
            for old in self._mine(owner):  # published or blocked: no longer needed
                shutil.rmtree(self._folder(old["capture_id"]), ignore_errors=True)
            capture_id = str(uuid.uuid4())
            record: dict[str, Any] = {
                "capture_id": capture_id,
                "owner": attrs.asdict(owner),
                "workspace": str(workspace),
                "base_revision": await head(workspace),
                "baseline": None,
                "phase": "starting",
                "next_page": 0,
                "began_at": iso_now(),
            }
            self._save(record)
            try:
                folder = self._folder(capture_id)
                tree = await snapshot(workspace, folder / "index", record["base_revision"])
                await keep(workspace, self._ref(capture_id), tree)
                record["baseline"] = tree
            finally:
                # A start that failed is never silently recaptured after the edits.
                record["phase"] = "ready"
                self._save(record)
            return self._begun(record, BEGUN_TEXT)

    @staticmethod
    def _ref(capture_id: str) -> str:
        return f"refs/letagents/workspace/{capture_id}"

    @staticmethod
    def _begun(record: Mapping[str, Any], instruction: str) -> dict[str, Any]:
        answer = {
            "capture_id": record["capture_id"],
            "workspace": record["workspace"],
            "baseline_available": bool(record["baseline"]),
            "instruction": instruction,
        }
        if not record["baseline"]:
            answer["warning"] = (
                "The starting snapshot is unavailable. Exact changes for this piece of work"
                " cannot be attributed."
            )
        return answer

    # --- publish -----------------------------------------------------------------------

    async def publish(
        self,
        owner: CaptureOwner,
        capture_id: str,
        summary: str,
        *,
        sender: str,
        send: Callable[[str, str, Mapping[str, Any]], Awaitable[dict[str, Any]]],
    ) -> dict[str, Any]:
        """Prepare the capture once, then share what is not shared yet (see the module docstring).

        Args:
            owner: the worker publishing.
            capture_id: the id :meth:`begin` gave.
            summary: what changed, in a few words (1 to 400 characters).
            sender: the worker's label (the summary message's sender).
            send: ``send(method, route, body)`` makes one room call as this worker.

        Raises:
            WorkerError: no such capture of this worker, a blocked one, or one
                operation already running.
            GitFailed: git could not prepare the capture.
            ApiError, RoomUnreachable: the room refused or could not be reached;
                everything prepared is kept for the next call.

        Cancellation:
            A checkpoint. Whatever the room confirmed before is saved; the
            next call carries on from there.
        """
        async with self._exclusive(owner):
            record = self._read(capture_id) if _UUID4.fullmatch(capture_id) else None
            if record is None or record.get("owner") != attrs.asdict(owner):
                raise WorkerError(NO_CAPTURE_TEXT)
            if record["phase"] == "blocked":
                raise WorkerError(BLOCKED_TEXT)
            if record["phase"] == "published":
                return self._published(record, None)
            folder = self._folder(capture_id)
            if not (folder / "prepared.json").exists():
                text = summary.strip()
                if not text or len(text) > SUMMARY_MAX:
                    raise WorkerError(SUMMARY_TEXT)
                await self._prepare(record, text)
            prepared = json.loads((folder / "prepared.json").read_bytes())
            try:
                await self._share(record, prepared, sender, send)
            except ApiError as exc:
                if exc.status == 410:
                    record["phase"] = "blocked"
                    self._save(record)
                    self._drop_bytes(capture_id)
                raise
            return self._published(record, prepared)

    async def _prepare(self, record: dict[str, Any], text: str) -> None:
        """Snapshot the work now and save the preview and the review; release the baseline."""
        workspace = Path(record["workspace"])
        folder = self._folder(record["capture_id"])
        base = record["base_revision"]
        now_tree = await snapshot(workspace, folder / "index", base)
        captured_at = iso_now()
        name = await branch(workspace)
        starting = record["baseline"] or base or EMPTY_TREE
        contribution = await changes(workspace, starting, now_tree, patch_limit=REVIEW_LIMIT)
        whole = await changes(workspace, base or EMPTY_TREE, now_tree, patch_limit=REVIEW_LIMIT)
        facts = {"captured_at": captured_at, "branch": name, "base_revision": base}
        preview = {"files": PREVIEW_FILES, "patch": PREVIEW_PATCH}
        full = {"files": REVIEW_FILES, "patch": REVIEW_LIMIT}
        summary = {
            "version": 3,
            "recorded_state": "completed",
            "evidence_incomplete": True,
            "elapsed_ms": None,
            "operation_counts": dict.fromkeys(
                (
                    "unresolved",
                    "succeeded",
                    "failed",
                    "denied_before_start",
                    "cancelled_before_start",
                    "interrupted_after_start",
                    "lost_after_start",
                ),
                0,
            ),
            "workspace": _part(whole, facts, **preview),
            "contribution": {**_part(contribution, facts, **preview), "summary": text},
        }
        review = {
            "version": 1,
            "workspace": _part(whole, facts, **full),
            "contribution": _part(contribution, facts, **full),
        }
        warning = (
            None
            if record["baseline"]
            else ("The starting snapshot is unavailable; no exact change attribution is available.")
        )
        archive = None
        raw = json.dumps(review, separators=(",", ":")).encode("utf-8")
        data = base64.b64encode(gzip.compress(raw)) if len(raw) <= REVIEW_LIMIT else b""
        cut = contribution.patch_truncated or whole.patch_truncated
        if data and len(data) <= REVIEW_LIMIT and not cut:
            _write(folder / "review", data)
            digest = hashlib.sha256(data).hexdigest()
            total = -(-len(data) // REVIEW_PAGE_SIZE)
            archive = {"digest": digest, "length": len(data), "total": total}
        else:
            warning = TOO_LARGE_WARNING
        prepared = {"summary": summary, "text": text, "warning": warning, "archive": archive}
        _write(folder / "prepared.json", json.dumps(prepared).encode("utf-8"))
        await release(workspace, self._ref(record["capture_id"]))

    async def _share(
        self,
        record: dict[str, Any],
        prepared: Mapping[str, Any],
        sender: str,
        send: Callable[[str, str, Mapping[str, Any]], Awaitable[dict[str, Any]]],
    ) -> None:
        """Post the summary message, then the next pages of the review, saving each step."""
        capture_id = record["capture_id"]
        if not record.get("source_message_id"):
            message = await send(
                "POST",
                "messages",
                {
                    "sender": sender,
                    "text": prepared["text"],
                    "client_message_id": f"mcp-workspace:{capture_id}",
                },
            )
            if not isinstance(message.get("id"), str) or not message["id"]:
                raise WorkerError(
                    "The server did not confirm the summary message. Retry this capture."
                )
            record.update(source_message_id=message["id"], phase="publishing")
            self._save(record)
        archive = prepared.get("archive")
        total = archive["total"] if archive else 1
        end = min(total, record["next_page"] + PAGES_PER_CALL)
        for index in range(record["next_page"], end):
            body: dict[str, Any] = {
                "source_message_id": record["source_message_id"],
                "summary": prepared["summary"],
            }
            if archive:
                with (self._folder(capture_id) / "review").open("rb") as review:
                    review.seek(index * REVIEW_PAGE_SIZE)
                    data = review.read(REVIEW_PAGE_SIZE).decode("ascii")
                body["review_page"] = {
                    "digest": archive["digest"],
                    "index": index,
                    "total": total,
                    "data": data,
                }
            answer = await send("POST", "agent-work", body)
            found = answer.get("work")
            work: dict[str, Any] = found if isinstance(found, dict) else {}
            if work.get("source_message_id") != record["source_message_id"]:
                raise WorkerError("The server returned a different capture.")
            record.update(attempt_id=work.get("attempt_id"), next_page=index + 1)
            self._save(record)
        if record["next_page"] >= total:
            record["phase"] = "published"
            self._save(record)
            self._drop_bytes(capture_id)

    def _drop_bytes(self, capture_id: str) -> None:
        for name in ("review", "prepared.json", "index"):
            (self._folder(capture_id) / name).unlink(missing_ok=True)

    @staticmethod
    def _published(record: Mapping[str, Any], prepared: Mapping[str, Any] | None) -> dict[str, Any]:
        done = record["phase"] == "published"
        answer: dict[str, Any] = {
            "status": "published" if done else "uploading",
            "capture_id": record["capture_id"],
            "source_message_id": record.get("source_message_id"),
            "attempt_id": record.get("attempt_id"),
            "baseline_available": bool(record["baseline"]),
            "instruction": PUBLISHED_TEXT if done else UPLOADING_TEXT,
        }
        if prepared is not None and prepared.get("warning"):
            answer["warning"] = prepared["warning"]
        return answer
