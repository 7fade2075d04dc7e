"""``letagents-trio demo``, played to its end over real loopback.

The demo serves the reference room with hypercorn on 127.0.0.1 and its holders
wait their real 1 s reconnect delays, so these tests use the real clock, each
bounded by ``trio.fail_after``. ``--speed 50`` shrinks the pauses between
steps; a whole story then takes about 4 s of wall time.
"""

from __future__ import annotations

import io
import os
import secrets
import signal
import subprocess
import sys
from functools import partial
from pathlib import Path

import pytest
import trio
from rich.console import Console

from letagents_trio._demo import (
    DemoOptions,
    DemoReport,
    SessionSummary,
    StepResult,
    main,
    run_demo,
)
from letagents_trio.room_server import MemoryStore, Room, serve_room

# Pauses between steps are divided by this: the story is then mostly reconnect waits.
FAST = 50.0
# Wall-clock budget of one played story (about 4 s when all goes well).
STORY_BUDGET = 25
# Every held session's exit is announced within the manager's exit deadline.
EXIT_DEADLINE = 1.5
DEMO_COMMAND = [sys.executable, "-m", "letagents_trio.cli", "demo"]


# Known library gap, not the demo's: when the holder returns on `event: ended`
# (step 4) it leaves the SSE body mid-iteration; aclosing() closes httpx2's
# outer generator only, and httpcore2's inner one is finalised by GC, which
# trio reports as a ResourceWarning. Scoped to the tests that play step 4.
ENDED_STREAM_GC_WARNING = pytest.mark.filterwarnings(
    "ignore:Async generator 'httpcore2._async.connection_pool.PoolByteStream.__aiter__'"
    " was garbage collected:ResourceWarning"
)


def _console(*, terminal: bool) -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, width=140, force_terminal=terminal), out


def _session(report: DemoReport, name: str, process: str) -> SessionSummary:
    [found] = [s for s in report.sessions if s.name == name and s.process == process]
    return found


def _assert_announced(summary: SessionSummary) -> None:
    assert summary.how_it_ended == "exit announced"
    assert summary.recorded is True
    assert summary.announce_after is not None
    assert 0 <= summary.announce_after <= EXIT_DEADLINE


@ENDED_STREAM_GC_WARNING
async def test_the_whole_story_plays_in_the_live_view_with_a_sqlite_room(tmp_path: Path) -> None:
    console, out = _console(terminal=True)
    db = tmp_path / "room.sqlite3"
    with trio.fail_after(STORY_BUDGET):
        report = await run_demo(
            DemoOptions(workers=3, speed=FAST, live=True, db=db), console=console
        )
    assert [(s.number, s.status) for s in report.steps] == [(n, "ok") for n in range(1, 6)]
    assert not report.interrupted
    # Step 5: a codename while process 2 lives, the name itself once it exited.
    assert report.codename
    assert report.codename != "Juniper"
    assert report.passed_name == "Juniper"
    assert [(s.name, s.process) for s in report.sessions] == [
        ("Aspen", "process 1"),
        ("Birch", "process 1"),
        ("Cedar", "process 1"),
        ("Birch", "rival"),
        ("Juniper", "process 2"),
        (report.codename, "process 1"),
        ("Juniper", "process 1"),
    ]
    # Step 1 and 2: Aspen dropped twice (the cut, the restart) and came back each time.
    aspen = _session(report, "Aspen", "process 1")
    assert aspen.attempts == {"dropped": 2}
    assert aspen.reconnects == 2
    _assert_announced(aspen)
    # Step 3: the rotated token was refused, and the holder stopped: no longer ours.
    birch = _session(report, "Birch", "process 1")
    assert birch.attempts == {"dropped": 2, "refused": 1}
    assert birch.how_it_ended == "no longer ours"
    assert birch.announce_after is None
    assert birch.recorded is None
    _assert_announced(_session(report, "Birch", "rival"))
    # Step 4: the room ended Cedar's session.
    cedar = _session(report, "Cedar", "process 1")
    assert cedar.attempts == {"dropped": 1, "ended": 1}
    assert cedar.how_it_ended == "ended by the room"
    assert cedar.recorded is None
    # Step 5 and the end: every other exit was announced and recorded.
    for name, process in [
        ("Juniper", "process 2"),
        (report.codename, "process 1"),
        ("Juniper", "process 1"),
    ]:
        _assert_announced(_session(report, name, process))
    text = out.getvalue()
    assert "Process connections in room 'demo'" in text  # the live table
    assert "Summary: every session held" in text
    for summary in report.sessions:
        assert summary.session_id[:8] in text
    assert db.exists()


async def test_an_interrupt_after_the_first_step_announces_every_exit() -> None:
    console, out = _console(terminal=False)
    interrupt = trio.Event()

    def after(step: StepResult) -> None:
        if step.number == 1:
            interrupt.set()

    with trio.fail_after(STORY_BUDGET):
        report = await run_demo(
            DemoOptions(workers=2, speed=FAST, live=False),
            console=console,
            interrupt=interrupt,
            on_step=after,
        )
    assert report.interrupted
    assert [s.number for s in report.steps] == [1]
    assert [s.name for s in report.sessions] == ["Aspen", "Birch"]
    for summary in report.sessions:
        _assert_announced(summary)
    assert "Interrupted. Exits: 2 of 2 exits announced at shutdown were recorded." in out.getvalue()


@ENDED_STREAM_GC_WARNING
async def test_against_another_room_only_the_steps_without_room_internals_run() -> None:
    owner_token = secrets.token_urlsafe(16)
    room = Room(store=MemoryStore(), owner_tokens={owner_token: "alice"})
    console, out = _console(terminal=False)
    with trio.fail_after(STORY_BUDGET):
        async with trio.open_nursery() as nursery:
            api_url = await nursery.start(partial(serve_room, room, port=0))
            report = await run_demo(
                DemoOptions(
                    workers=3, speed=FAST, live=False, api_url=api_url, owner_token=owner_token
                ),
                console=console,
            )
            nursery.cancel_scope.cancel()
    assert [(s.number, s.status) for s in report.steps] == [
        (1, "skipped"),
        (2, "skipped"),
        (3, "ok"),
        (4, "ok"),
        (5, "ok"),
    ]
    assert report.passed_name == "Juniper"
    assert "needs the embedded room" in out.getvalue()
    # Step 4 went through the disconnect route; the holder still saw `event: ended`.
    cedar = _session(report, "Cedar", "process 1")
    assert cedar.how_it_ended == "ended by the room"
    row = room.session(cedar.session_id)
    assert row is not None
    assert row.end_reason == "disconnect"
    # The workers belong to the account the token names, learnt from /agents/me.
    assert row.agent_key.startswith("alice/worker-")
    assert report.sessions[0].name == "Aspen"
    _assert_announced(report.sessions[0])


async def test_the_command_plays_to_its_end_and_prints_the_summary() -> None:
    with trio.fail_after(STORY_BUDGET + 5):
        result = await trio.run_process(
            [*DEMO_COMMAND, "--speed", str(FAST), "--no-live"],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    stdout = result.stdout.decode()
    assert result.returncode == 0, (stdout, result.stderr.decode())
    assert "Summary: every session held" in stdout
    for number, title in enumerate(
        [
            "a dropped stream",
            "a room restart",
            "a refusal",
            "a session ended by the room",
            "a name passing",
        ],
        start=1,
    ):
        assert f"step {number} {title}: ok" in stdout
    assert "asking for 'Juniper' got 'Juniper'" in stdout
    # The restart's closing of the connections the room had is routine: no
    # unexplained WARNING, the story says it (issue 42).
    assert "WARNING" not in stdout
    assert "counts the connections it had as dropped" in stdout


@pytest.mark.parametrize(
    ("signum", "status"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"]
)
async def test_a_signal_after_the_first_step_announces_and_exits_128_plus_its_number(
    signum: signal.Signals, status: int
) -> None:
    """Ctrl-C, and SIGTERM as systemd or ``docker stop`` send it (issue 42)."""
    marker = b"Step 1 (a dropped stream): ok"
    with trio.fail_after(STORY_BUDGET):
        process = await trio.lowlevel.open_process(
            [*DEMO_COMMAND, "--speed", "5", "--no-live"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={k: v for k, v in os.environ.items() if k != "LETAGENTS_TOKEN"},
        )
        assert process.stdout is not None
        try:
            seen = b""
            while marker not in seen:
                chunk = await process.stdout.receive_some()
                assert chunk, seen.decode()
                seen += chunk
            process.send_signal(signum)
            while chunk := await process.stdout.receive_some():
                seen += chunk
            assert await process.wait() == status
        finally:
            if process.returncode is None:
                process.kill()
                with trio.move_on_after(5, shield=True):
                    await process.wait()
            await process.stdout.aclose()
    text = seen.decode()
    assert "Interrupted: every process exits and announces it." in text
    assert "Summary: every session held" in text
    assert "step 2" not in text
    for name in ("Aspen", "Birch", "Cedar"):
        assert f"process 1 {name:<16} exit announced in" in text
    assert text.count(": recorded") == 3


def test_help_lists_every_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    for option in ("--workers", "--speed", "--api-url", "--no-live", "--db", "--owner-token"):
        assert option in out


@pytest.mark.parametrize(
    "argv",
    [
        ["--workers", "0"],
        ["--workers", "11"],
        ["--speed", "0"],
        ["--speed", "nan"],
        ["--api-url", "http://127.0.0.1:9"],
        ["--api-url", "http://127.0.0.1:9", "--owner-token", "t", "--db", "x.db"],
    ],
)
def test_bad_options_exit_2(argv: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LETAGENTS_TOKEN", raising=False)
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2


def test_an_unreachable_room_is_reported_with_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    # Port 9 (discard) has no listener on loopback: the connection is refused at once.
    status = main(["--api-url", "http://127.0.0.1:9", "--owner-token", "t", "--no-live"])
    assert status == 1
    assert "RoomUnreachable" in capsys.readouterr().out
