"""The demo's frozen values: what to play (:class:`DemoOptions`) and what happened.

Every other module of the demo reads these: the story fills a
:class:`DemoReport` step by step (:class:`StepResult`) and session by session
(:class:`SessionSummary`), the view draws it, the command line builds the
options and turns the report into an exit status.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Final, final

import attrs

__all__ = [
    "DEFAULT_WORKERS",
    "MAX_WORKERS",
    "WORKER_NAMES",
    "DemoOptions",
    "DemoReport",
    "SessionSummary",
    "StepResult",
]

# Workers held by process 1 unless --workers says otherwise: enough for a
# drop, a refusal and an ending to each happen to a different worker.
DEFAULT_WORKERS: Final = 3
# Process 1's workers, in order: distinct, non-generic names (none is "Juniper").
WORKER_NAMES: Final = (
    "Aspen", "Birch", "Cedar", "Dogwood", "Elm", "Fir", "Ginkgo", "Hazel", "Larch", "Rowan",
)  # fmt: skip
# The live table stays readable, and each worker gets a distinct name.
MAX_WORKERS: Final = len(WORKER_NAMES)


@final
@attrs.frozen(kw_only=True)
class DemoOptions:
    """What to play, and where.

    Attributes:
        workers: workers process 1 registers and holds.
        speed: pauses between steps are divided by this.
        api_url: run against this room instead of an embedded one.
        owner_token: the owner bearer token for ``api_url``.
        room_id: the room to play in (default: ``demo`` embedded, a fresh id elsewhere).
        live: show the live view (otherwise plain log lines).
        db: the embedded room's SQLite file (default: memory).
    """

    workers: int = DEFAULT_WORKERS
    speed: float = 1.0
    api_url: str | None = None
    owner_token: str | None = attrs.field(default=None, repr=False)
    room_id: str | None = None
    live: bool = True
    db: Path | None = None


@final
@attrs.frozen(kw_only=True)
class StepResult:
    """How one step of the story went.

    Attributes:
        number: the step's number (1 to 5).
        title: what the step shows.
        status: ``"ok"``, ``"failed"`` (it did not happen in time) or ``"skipped"``.
        detail: what was seen, in a sentence.
    """

    number: int
    title: str
    status: str
    detail: str


@final
@attrs.frozen(kw_only=True)
class SessionSummary:
    """One held session, at the end of the demo.

    Attributes:
        name: the worker's display name.
        process: the demo process that held it.
        session_id: the room's session id.
        attempts: finished attempts, by outcome.
        reconnects: streams opened after the first one.
        how_it_ended: why the holder stopped (``"exit announced"``, ``"ended by the room"``…).
        announce_after: seconds from the process's shutdown start to the
            announcement's end; None when no exit was announced for it.
        recorded: whether the room recorded the exit; None without an answer.
    """

    name: str
    process: str
    session_id: str
    attempts: Mapping[str, int]
    reconnects: int
    how_it_ended: str
    announce_after: float | None
    recorded: bool | None


@final
@attrs.frozen(kw_only=True)
class DemoReport:
    """What happened, for the summary and for tests.

    Attributes:
        steps: the story's steps, in order, as far as they were played.
        sessions: every session held during the demo.
        interrupted: whether the story was cut short (Ctrl-C).
        codename: the name a new worker asking for "Juniper" got while process 2 lived.
        passed_name: the name the next worker asking for "Juniper" got after process 2 exited.
    """

    steps: tuple[StepResult, ...]
    sessions: tuple[SessionSummary, ...]
    interrupted: bool
    codename: str | None
    passed_name: str | None

    @property
    def ok(self) -> bool:
        """Whether no step failed."""
        return all(step.status != "failed" for step in self.steps)
