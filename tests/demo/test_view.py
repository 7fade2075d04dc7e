"""The demo's view: its pure renderings and the narrator, drawn to a string console.

The story itself is played over real loopback in ``tests/e2e/test_demo.py``;
here each drawing is a function of values built by hand, and the narrator runs
on trio's MockClock, so stamps are exact.
"""

from __future__ import annotations

import io

import pytest
import trio
from rich.console import Console, RenderableType

from letagents_trio import (
    EventKind,
    ExitAnnouncement,
    HolderEvent,
    HolderStatistics,
    HolderStatus,
    Outcome,
)
from letagents_trio._demo import DemoReport, SessionSummary, StepResult
from letagents_trio._demo._view import (
    RECENT_EVENTS,
    Narrator,
    Row,
    attempts_text,
    describe,
    event_line,
    exit_line,
    exits_line,
    live_view,
    print_summary,
    step_line,
    summary_table,
)

# Wide enough that no table cell wraps in these tests.
WIDTH = 160


def _console(*, terminal: bool = False) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=WIDTH, force_terminal=terminal, color_system=None), out


def _text(renderable: RenderableType) -> str:
    console, out = _console()
    console.print(renderable)
    return out.getvalue()


def _stats(
    status: HolderStatus,
    *,
    attempts: dict[Outcome, int] | None = None,
    connection_id: str | None = None,
    next_attempt_at: float | None = None,
) -> HolderStatistics:
    return HolderStatistics(
        session_id="s-1",
        status=status,
        connection_id=connection_id,
        attempts=attempts or {},
        opens=1,
        last_outcome=None,
        opened_at=None,
        next_attempt_at=next_attempt_at,
    )


def _event(kind: EventKind, **fields: object) -> HolderEvent:
    return HolderEvent(time=0.0, session_id="s-1", kind=kind, **fields)  # type: ignore[arg-type]


def _step(number: int, status: str = "ok") -> StepResult:
    return StepResult(number=number, title=f"title {number}", status=status, detail="seen.")


def _summary(**fields: object) -> SessionSummary:
    values: dict[str, object] = {
        "name": "Aspen",
        "process": "process 1",
        "session_id": "0123456789abcdef",
        "attempts": {"dropped": 2},
        "reconnects": 2,
        "how_it_ended": "exit announced",
        "announce_after": 0.042,
        "recorded": True,
    }
    values.update(fields)
    return SessionSummary(**values)  # type: ignore[arg-type]


def _report(*sessions: SessionSummary, interrupted: bool = False) -> DemoReport:
    return DemoReport(
        steps=(_step(1), _step(2, "skipped")),
        sessions=sessions,
        interrupted=interrupted,
        codename=None,
        passed_name=None,
    )


# --- lines ------------------------------------------------------------------------------


def test_attempts_text_lists_the_outcomes_seen_in_order() -> None:
    attempts = {Outcome.DROPPED: 2, Outcome.REFUSED: 0, Outcome.ENDED: 1}
    assert attempts_text(attempts) == "dropped 2, ended 1"
    assert attempts_text({}) == "-"
    assert attempts_text({Outcome.DROPPED: 0}) == "-"


def test_describe_says_each_kind_of_event_in_a_few_words() -> None:
    assert describe(_event(EventKind.CONNECTION, connection_id="abcdef0123456789")) == (
        "connection abcdef01"
    )
    assert describe(_event(EventKind.CLOSED, outcome=Outcome.DROPPED, detail="eof")) == (
        "closed: dropped (eof)"
    )
    assert describe(_event(EventKind.CLOSED, detail="eof")) == "closed: ? (eof)"
    assert describe(_event(EventKind.BACKOFF, delay=1.0)) == "next attempt in 1.0 s"
    assert describe(_event(EventKind.STOPPED, detail="no longer ours")) == (
        "stopped: no longer ours"
    )
    assert describe(_event(EventKind.EXIT, detail="recorded")) == "exit: recorded"
    assert describe(_event(EventKind.OPEN)) == "open"
    assert describe(_event(EventKind.ENDED)) == "ended"


def test_event_and_exit_lines_line_up_process_and_worker() -> None:
    line = event_line("rival", "Birch", _event(EventKind.ATTEMPT))
    assert line == f"{'rival':>9} {'Birch':<16} attempt"

    def announced(recorded: bool | None, error: str | None) -> ExitAnnouncement:
        return ExitAnnouncement(
            session_id="s-1",
            connection_id=None,
            recorded=recorded,
            error=error,
            finished_at=10.25,
        )

    assert exit_line("process 1", "Aspen", announced(True, None), 10.0) == (
        f"process 1 {'Aspen':<16} exit announced in 250 ms: recorded"
    )
    assert exit_line("process 1", "Aspen", announced(None, "HTTP 401"), 10.0).endswith(
        "in 250 ms: HTTP 401"
    )
    assert exit_line("process 1", "Aspen", announced(False, None), 10.0).endswith(": not recorded")


def test_step_line_colours_the_status() -> None:
    assert step_line(_step(3, "failed")) == "Step 3 (title 3): [red]failed[/]. seen."
    assert step_line(_step(1)) == "Step 1 (title 1): [green]ok[/]. seen."
    assert step_line(_step(2, "skipped")) == "Step 2 (title 2): [yellow]skipped[/]. seen."


# --- the live view and the summary -----------------------------------------------------


def test_live_view_shows_the_story_one_row_per_session_and_the_latest_events() -> None:
    rows = [
        Row(
            name="Aspen",
            process="process 1",
            how_it_ended="held",
            stats=_stats(
                HolderStatus.OPEN,
                attempts={Outcome.DROPPED: 1},
                connection_id="c0ffee0123456789",
            ),
        ),
        Row(
            name="Birch",
            process="process 1",
            how_it_ended="no longer ours",
            stats=_stats(HolderStatus.STOPPED, attempts={Outcome.REFUSED: 1}),
        ),
        Row(
            name="Cedar",
            process="rival",
            how_it_ended="held",
            stats=_stats(HolderStatus.WAITING, next_attempt_at=12.0),
        ),
    ]
    text = _text(
        live_view(
            room_id="demo",
            rows=rows,
            steps=[_step(1)],
            narration="Step 2: the room [b]restarts[/b].",
            recent=["  1.00s process 1 Aspen attempt"],
            now=10.5,
        )
    )
    assert "Process connections in room 'demo'" in text
    assert "step 1 title 1: ok" in text
    assert "Step 2: the room restarts." in text  # markup rendered, not shown
    assert "1.00s process 1 Aspen attempt" in text
    lines = text.splitlines()
    [aspen] = [line for line in lines if "Aspen" in line and "open" in line]
    assert "c0ffee01" in aspen
    assert "dropped 1" in aspen
    [birch] = [line for line in lines if "Birch" in line]
    assert "stopped (no longer ours)" in birch
    assert "refused 1" in birch
    [cedar] = [line for line in lines if "Cedar" in line]
    assert "waiting" in cedar
    assert "in 1.5 s" in cedar
    assert "(held)" not in text  # a running holder's row does not say how it ended


def test_live_view_before_anything_happened() -> None:
    text = _text(live_view(room_id="r", rows=[], steps=[], narration="", recent=[], now=0.0))
    assert "(no events yet)" in text


def test_summary_table_shows_each_session_and_its_exit() -> None:
    report = _report(
        _summary(),
        _summary(
            name="Birch",
            attempts={},
            how_it_ended="no longer ours",
            announce_after=None,
            recorded=None,
        ),
    )
    text = _text(summary_table(report))
    assert "Summary: every session held" in text
    [aspen] = [line for line in text.splitlines() if "Aspen" in line]
    assert aspen.split() == [
        "Aspen", "process", "1", "01234567", "dropped", "2", "2", "exit", "recorded,", "42", "ms",
    ]  # fmt: skip
    [birch] = [line for line in text.splitlines() if "Birch" in line]
    assert birch.split()[-4:] == ["2", "no", "longer", "ours"]
    assert "none" in birch  # no finished attempt


# The demo's sessions at their widest: a codename, three outcomes, every kind of ending.
DEMO_LIKE = (
    _summary(),
    _summary(name="Birch", attempts={"dropped": 2, "refused": 1}, reconnects=1,
             how_it_ended="no longer ours", announce_after=None, recorded=None),
    _summary(name="Cedar", attempts={"dropped": 1, "ended": 1}, reconnects=1,
             how_it_ended="ended by the room", announce_after=None, recorded=None),
    _summary(name="Birch", process="rival", attempts={}, reconnects=0),
    _summary(name="CedarBrook", attempts={}, reconnects=0, announce_after=1.509, recorded=False),
    _summary(name="Juniper", process="process 2", attempts={}, reconnects=0, recorded=None),
)  # fmt: skip


def _summary_at(width: int) -> str:
    out = io.StringIO()
    console = Console(file=out, width=width, color_system=None)
    print_summary(console, _report(*DEMO_LIKE))
    return out.getvalue()


def test_the_summary_is_a_table_that_fits_80_columns_unwrapped() -> None:
    """Issue 42: on an 80-column terminal no line is wider, no cell cut or wrapped."""
    text = _summary_at(80)
    lines = text.splitlines()
    assert max(map(len, lines)) <= 80
    assert "…" not in text
    header = next(line for line in lines if line.startswith("worker"))
    assert header.split() == ["worker", "process", "session", "attempts", "reopened", "how",
                              "it", "ended"]  # fmt: skip
    rows = {
        line.split()[0] + " " + line.split()[2]: line.split()
        for line in lines
        if line.split() and line.split()[0] in {"Aspen", "Birch", "Cedar", "CedarBrook", "Juniper"}
    }
    assert rows["CedarBrook 1"][-5:] == ["exit", "not", "recorded,", "1509", "ms"]
    assert rows["Cedar 1"][-4:] == ["ended", "by", "the", "room"]
    assert rows["Juniper 2"][-5:] == ["0", "exit", "unanswered,", "42", "ms"]
    assert "refused 1" in text  # an outcome a line, under the row's first
    assert "ended 1" in text


@pytest.mark.parametrize("width", [79, 60, 40])
def test_a_narrower_terminal_gets_a_paragraph_a_session_with_everything(width: int) -> None:
    """Issue 42: below the table's width, nothing is cut: each session in words, wrapped."""
    text = _summary_at(width)
    assert max(map(len, text.splitlines())) <= width
    assert "…" not in text
    flat = " ".join(text.split())
    assert "- CedarBrook (process 1, session 01234567): attempts none; reopened 0;" in flat
    assert "exit not recorded, 1509 ms" in flat
    birch = "- Birch (process 1, session 01234567): attempts dropped 2, refused 1; reopened 1;"
    assert birch in flat
    assert "no longer ours" in flat
    assert "- Juniper (process 2, session 01234567): attempts none; reopened 0;" in flat


def test_print_summary_lists_the_steps_and_says_when_interrupted() -> None:
    console, out = _console()
    print_summary(console, _report(_summary()))
    text = out.getvalue()
    assert "  step 1 title 1: ok\n  step 2 title 2: skipped\n" in text
    assert "Interrupted" not in text
    assert text.endswith("Exits: 1 of 1 exits announced at shutdown were recorded.\n")
    console, out = _console()
    print_summary(console, _report(_summary(), interrupted=True))
    assert out.getvalue().endswith(
        "Interrupted. Exits: 1 of 1 exits announced at shutdown were recorded.\n"
    )


def test_the_exits_line_tells_the_truth_about_every_row() -> None:
    """A row without an announcement is never counted as one (issue 14)."""
    report = _report(
        _summary(),
        _summary(
            name="Birch", how_it_ended="ended by the room", announce_after=None, recorded=None
        ),
        _summary(name="Cedar", recorded=None),
        _summary(name="Dove", recorded=False),
        interrupted=True,
    )
    assert exits_line(report) == (
        "Interrupted. Exits: 1 of 3 exits announced at shutdown were recorded;"
        " Cedar: announced, no answer; Dove: announced, not recorded;"
        " Birch: ended by the room, no exit to announce."
    )


# --- the narrator -----------------------------------------------------------------------


def _narrator(console: Console, rows: list[Row] | None = None) -> Narrator:
    steps = [_step(1)]
    return Narrator(
        console,
        live=True,
        room_id="demo",
        rows=lambda: rows or [],
        steps=lambda: steps,
        t0=trio.current_time(),
    )


async def test_off_a_terminal_the_narrator_prints_stamped_lines(
    autojump_clock: trio.testing.MockClock,
) -> None:
    console, out = _console(terminal=False)
    narrator = _narrator(console)
    assert not narrator.live  # a pipe gets lines, never a live view
    await trio.sleep(1.5)
    narrator.say("The [b]room[/b] listens.")
    narrator.log("process 1 Aspen open")
    with narrator.showing():
        await narrator.tick()  # returns at once: nothing to redraw
    assert out.getvalue() == "  1.50s The room listens.\n  1.50s process 1 Aspen open\n"
    assert narrator.narration == "The [b]room[/b] listens."
    assert narrator.recent == []


async def test_on_a_terminal_the_live_view_keeps_the_latest_events(
    autojump_clock: trio.testing.MockClock,
) -> None:
    console, out = _console(terminal=True)
    narrator = _narrator(console)
    assert narrator.live
    with narrator.showing():
        for n in range(RECENT_EVENTS + 2):
            await trio.sleep(0.5)
            narrator.log(f"event {n}")
        narrator.say("Every worker holds a connection.")
    assert narrator.recent == [
        f"{(n + 1) / 2:6.2f}s event {n}" for n in range(2, RECENT_EVENTS + 2)
    ]
    text = out.getvalue()
    assert "Every worker holds a connection." in text
    assert "event 1" not in text  # only the latest events were drawn
    assert f"event {RECENT_EVENTS + 1}" in text
    assert "step 1 title 1: ok" in text
    narrator.log("after the live view")  # the view is gone: a plain line again
    assert out.getvalue().endswith("  5.00s after the live view\n")


async def test_the_live_view_is_redrawn_while_the_clock_runs(
    autojump_clock: trio.testing.MockClock,
) -> None:
    console, out = _console(terminal=True)
    row = Row(
        name="Aspen",
        process="process 1",
        how_it_ended="held",
        stats=_stats(HolderStatus.WAITING, next_attempt_at=1.0),
    )
    narrator = _narrator(console, [row])
    with narrator.showing():
        with trio.move_on_after(0.6):
            await narrator.tick()
    text = out.getvalue()
    # Drawn at 0, 0.25 and 0.5, then once more on leaving (at 0.6).
    for left in ("1.0", "0.8", "0.5", "0.4"):
        assert f"in {left} s" in text
