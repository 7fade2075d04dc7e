"""What the demo shows: the rich live view, the event lines and the summary.

Everything drawn is a pure function of the demo's state, so each can be
rendered to a string console in a test: :func:`live_view` (the story panel,
one table row per held session, the latest events), :func:`event_line` and
:func:`exit_line` (one log line per holder event or exit announcement),
:func:`step_line` (a finished step, in rich markup) and :func:`summary`
(every session held, at the end: a table on 80 columns and more, a paragraph
a session on a narrower terminal).

:class:`Narrator` is the one stateful part: it owns the console, the live
display (only on a terminal, and only while the story plays) and what the
story panel shows (the narration and the latest event lines). Off a terminal
it prints plain, timestamped lines instead, so a log or a pipe keeps the whole
story. The live view is redrawn on every change and every
:data:`REFRESH_INTERVAL`, so "next attempt in" counts down smoothly.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Final, final

import attrs
import trio
from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.measure import Measurement
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .._events import EventKind, HolderEvent
from .._holder import HolderStatistics, HolderStatus

if TYPE_CHECKING:
    from .._goodbye import ExitAnnouncement
    from .._policy import Outcome
    from ._values import DemoReport, SessionSummary, StepResult

__all__ = [
    "RECENT_EVENTS",
    "REFRESH_INTERVAL",
    "Narrator",
    "Row",
    "attempts_text",
    "describe",
    "ending_text",
    "event_line",
    "exit_line",
    "exits_line",
    "live_view",
    "print_summary",
    "step_line",
    "summary",
    "summary_lines",
    "summary_table",
]

# Events kept for the live view's "latest events" panel.
RECENT_EVENTS: Final = 8
# The live view redraws this often, so "next attempt in" counts down smoothly.
REFRESH_INTERVAL: Final = 0.25

_STEP_STYLE: Final = {"ok": "green", "failed": "red", "skipped": "yellow"}
_STATUS_STYLE: Final = {
    HolderStatus.CONNECTING: "yellow",
    HolderStatus.OPEN: "green",
    HolderStatus.WAITING: "magenta",
    HolderStatus.ENDED: "red",
    HolderStatus.STOPPED: "dim",
}
# Wider than any table the demo draws: its summary is measured at this width, unwrapped.
_UNBOUNDED: Final = 10_000
# A holder in one of these has stopped for good: its row says why.
_FINISHED: Final = frozenset({HolderStatus.ENDED, HolderStatus.STOPPED})


@final
@attrs.frozen(kw_only=True)
class Row:
    """One held session as the live table shows it.

    Attributes:
        name: the worker's display name.
        process: the demo process that holds it.
        how_it_ended: why its holder stopped, shown once it has.
        stats: its holder's snapshot.
    """

    name: str
    process: str
    how_it_ended: str
    stats: HolderStatistics


# --- pure renderings --------------------------------------------------------------------


def attempts_text(attempts: Mapping[Outcome, int]) -> str:
    """Finished attempts by outcome, as ``"dropped 2, refused 1"`` (``"-"`` for none)."""
    return ", ".join(f"{o.value} {n}" for o, n in attempts.items() if n) or "-"


def describe(event: HolderEvent) -> str:
    """One holder event in a few words (no session, no secret)."""
    short = (event.connection_id or "")[:8]
    if event.kind is EventKind.CONNECTION:
        return f"connection {short}"
    if event.kind is EventKind.CLOSED:
        outcome = event.outcome.value if event.outcome else "?"
        return f"closed: {outcome} ({event.detail})"
    if event.kind is EventKind.BACKOFF:
        return f"next attempt in {event.delay or 0:.1f} s"
    if event.kind is EventKind.STOPPED:
        return f"stopped: {event.detail}"
    if event.kind is EventKind.EXIT:
        return f"exit: {event.detail}"
    return str(event.kind.value)


def event_line(process: str, name: str, event: HolderEvent) -> str:
    """The log line of one holder event: process, worker, what happened."""
    return f"{process:>9} {name:<16} {describe(event)}"


def exit_line(
    process: str, name: str, announcement: ExitAnnouncement, shutdown_started: float | None
) -> str:
    """The log line of one exit announcement: how long it took, and the room's answer."""
    taken = announcement.finished_at - (shutdown_started or 0.0)
    verdict = "recorded" if announcement.recorded else (announcement.error or "not recorded")
    return f"{process:>9} {name:<16} exit announced in {taken * 1000:.0f} ms: {verdict}"


def step_line(step: StepResult) -> str:
    """A finished step as the narration says it (rich markup: the status in colour)."""
    style = _STEP_STYLE[step.status]
    return f"Step {step.number} ({step.title}): [{style}]{step.status}[/]. {step.detail}"


def live_view(
    *,
    room_id: str,
    rows: Sequence[Row],
    steps: Sequence[StepResult],
    narration: str,
    recent: Sequence[str],
    now: float,
) -> RenderableType:
    """The live view: the story so far, one row per held session, the latest events.

    Args:
        room_id: the room played in.
        rows: every session held so far, in order.
        steps: the steps finished so far.
        narration: what is happening now (rich markup).
        recent: the latest event lines, oldest first.
        now: trio's current time, for "next attempt in".
    """
    table = Table(title=f"Process connections in room {room_id!r}", expand=False)
    for column in ("worker", "process", "state", "connection", "attempts", "next attempt"):
        table.add_column(column)
    for row in rows:
        stats = row.stats
        state = stats.status.value
        if stats.status in _FINISHED:
            state = f"{state} ({row.how_it_ended})"
        next_at = "" if stats.next_attempt_at is None else f"in {stats.next_attempt_at - now:.1f} s"
        table.add_row(
            row.name,
            row.process,
            Text(state, style=_STATUS_STYLE[stats.status]),
            (stats.connection_id or "")[:8],
            attempts_text(stats.attempts),
            next_at,
        )
    events = Text("\n".join(recent) or "(no events yet)", style="dim")
    story = Text()
    for step in steps:
        style = _STEP_STYLE[step.status]
        story.append(f"step {step.number} {step.title}: {step.status}\n", style=style)
    story.append(Text.from_markup(narration, style="bold"))
    return Group(
        Panel(story, title="story", border_style="cyan"),
        table,
        Panel(events, title="latest events", border_style="dim"),
    )


def ending_text(session: SessionSummary) -> str:
    """How a session ended, with its exit's answer and delay when one was announced."""
    if session.announce_after is None:
        return session.how_it_ended
    verdict = {True: "recorded", False: "not recorded", None: "unanswered"}[session.recorded]
    return f"exit {verdict}, {session.announce_after * 1000:.0f} ms"


def summary_table(report: DemoReport) -> Table:
    """Every session held, one row each: attempts, reopens, how it ended (and its exit).

    At most 80 columns for the demo's sessions, none of its cells wrapped:
    attempts one outcome a line, the exit's answer and delay in the "how it
    ended" cell, no edges.
    """
    table = Table(
        title="Summary: every session held",
        box=box.SIMPLE_HEAD,
        show_edge=False,
        pad_edge=False,
        padding=(0, 1, 0, 0),
    )
    for header in ("worker", "process", "session", "attempts"):
        table.add_column(header, no_wrap=True)
    table.add_column("reopened", justify="right", no_wrap=True)
    table.add_column("how it ended", no_wrap=True)
    for s in report.sessions:
        table.add_row(
            s.name,
            s.process,
            s.session_id[:8],
            "\n".join(f"{k} {v}" for k, v in s.attempts.items()) or "none",
            str(s.reconnects),
            ending_text(s),
        )
    return table


def summary_lines(report: DemoReport) -> Text:
    """The summary for a terminal too narrow for its table: a wrapped paragraph a session."""
    text = Text("Summary: every session held\n", style="bold")
    for s in report.sessions:
        attempts = ", ".join(f"{k} {v}" for k, v in s.attempts.items()) or "none"
        text.append(f"- {s.name}", style="bold")
        text.append(
            f" ({s.process}, session {s.session_id[:8]}): attempts {attempts};"
            f" reopened {s.reconnects}; {ending_text(s)}\n"
        )
    return text


def summary(console: Console, report: DemoReport) -> RenderableType:
    """The summary table, or its lines when the table would not fit ``console`` unwrapped."""
    table = summary_table(report)
    unbounded = console.options.update_width(_UNBOUNDED)
    if Measurement.get(console, unbounded, table).maximum <= console.width:
        return table
    return summary_lines(report)


def print_summary(console: Console, report: DemoReport) -> None:
    """Print the summary (to fit the console), each step's status, whether it was interrupted."""
    console.print(summary(console, report))
    for step in report.steps:
        console.print(f"  step {step.number} {step.title}: {step.status}", highlight=False)
    console.print(exits_line(report), highlight=False)


def exits_line(report: DemoReport) -> str:
    """What became of every session's exit, row by row: never more than the rows show.

    A session the room ended, or that stopped being this process's, has no
    exit to announce; one announced without an answer, or refused, says so.
    """
    announced = [s for s in report.sessions if s.announce_after is not None]
    recorded = [s for s in announced if s.recorded]
    parts = [f"{len(recorded)} of {len(announced)} exits announced at shutdown were recorded"]
    parts += [
        f"{s.name}: announced, {'not recorded' if s.recorded is False else 'no answer'}"
        for s in announced
        if not s.recorded
    ]
    parts += [
        f"{s.name}: {s.how_it_ended}, no exit to announce"
        for s in report.sessions
        if s.announce_after is None
    ]
    return ("Interrupted. " if report.interrupted else "") + "Exits: " + "; ".join(parts) + "."


# --- the narrator -----------------------------------------------------------------------


@final
class Narrator:
    """Tells the story on a console: a live view on a terminal, plain lines elsewhere.

    Args:
        console: where to write.
        live: whether a live view is wanted (it is shown only on a terminal).
        room_id: the room played in, for the table's title.
        rows: returns every session held so far (read at each redraw).
        steps: returns the steps finished so far (read at each redraw).
        t0: trio time of the demo's start; lines are stamped from it.
    """

    def __init__(
        self,
        console: Console,
        *,
        live: bool,
        room_id: str,
        rows: Callable[[], Sequence[Row]],
        steps: Callable[[], Sequence[StepResult]],
        t0: float,
    ) -> None:
        self.console = console
        self.live = live and console.is_terminal
        self._room_id = room_id
        self._rows = rows
        self._steps = steps
        self._t0 = t0
        self.narration = "Starting the room…"
        self.recent: list[str] = []
        self._live: Live | None = None

    def clock(self) -> str:
        """Seconds since the demo started, as the lines' stamp."""
        return f"{trio.current_time() - self._t0:6.2f}s"

    def say(self, text: str) -> None:
        """Tell what happens now (rich markup): the story panel, or a bold line."""
        self.narration = text
        if self._live is None:
            self.console.print(
                f"[dim]{self.clock()}[/] [bold]{text}[/]", highlight=False, soft_wrap=True
            )
        self.refresh()

    def log(self, line: str) -> None:
        """Note an event line: the latest events panel, or a dim line."""
        stamped = f"{self.clock()} {line}"
        if self._live is None:
            self.console.print(Text(stamped, style="dim"), soft_wrap=True)
        else:
            self.recent = [*self.recent[-(RECENT_EVENTS - 1) :], stamped]

    def refresh(self) -> None:
        """Redraw the live view now, if it is shown."""
        if self._live is not None:
            self._live.update(self.render(), refresh=True)

    def render(self) -> RenderableType:
        """The live view of the demo's state now."""
        return live_view(
            room_id=self._room_id,
            rows=self._rows(),
            steps=self._steps(),
            narration=self.narration,
            recent=self.recent,
            now=trio.current_time(),
        )

    @contextmanager
    def showing(self) -> Iterator[None]:
        """Show the live view while inside (if wanted), and draw it a last time on leaving."""
        if not self.live:
            yield
            return
        live = Live(self.render(), console=self.console, auto_refresh=False)
        live.start()
        self._live = live
        try:
            yield
        finally:
            self._live = None
            live.update(self.render(), refresh=True)
            live.stop()

    async def tick(self) -> None:
        """Redraw every :data:`REFRESH_INTERVAL` while the live view is shown.

        Cancellation:
            Run it as a task and cancel it when the story is over; it returns
            by itself when no live view is shown.
        """
        while self._live is not None:
            self.refresh()
            await trio.sleep(REFRESH_INTERVAL)
