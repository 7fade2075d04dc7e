"""Each :class:`ProcessMode` does what its docstring says, at the times it names (issue 29).

A tester expecting ``[0, 46, 93]`` for two silences got ``[0, 46, 92]``: a
silent stream opens first, which resets the backoff. The docstrings now say
what each mode does and when a holder attempts; this runs each claim.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import trio

from letagents_trio import HolderStatus, open_connection_manager
from letagents_trio.testing import ProcessMode

if TYPE_CHECKING:
    from trio.testing import MockClock

    from letagents_trio.testing import FakeRoom

PAGE = Path(__file__).parents[2] / "docs" / "testing.md"
TIMES = re.compile(r"attempts (?:are )?at ((?:\d+, )+\d+) s")
# The status a holder is in once each mode has had its say.
SETTLED = {
    ProcessMode.SERVED: HolderStatus.OPEN,
    ProcessMode.ENDED: HolderStatus.ENDED,
}


def claimed_times(mode: ProcessMode) -> list[float]:
    found = TIMES.search(" ".join((mode.__doc__ or "").split()))
    return [float(t) for t in found[1].split(", ")] if found else []


def test_every_member_has_a_docstring_of_its_own() -> None:
    docs = {mode: mode.__doc__ for mode in ProcessMode}
    assert all(doc and doc != ProcessMode.__doc__ for doc in docs.values()), docs
    assert len(set(docs.values())) == len(docs)
    assert ProcessMode("silent") is ProcessMode.SILENT
    assert ProcessMode.SLOW.value == "slow"


@pytest.mark.parametrize("mode", list(ProcessMode), ids=[m.name for m in ProcessMode])
async def test_each_mode_attempts_when_its_docstring_says(
    autojump_clock: MockClock, fake_room: FakeRoom, mode: ProcessMode
) -> None:
    times = claimed_times(mode) or [0]
    session = await fake_room.add_worker()
    fake_room.set_process_mode(mode)
    async with fake_room.client() as client, open_connection_manager(client) as manager:
        holder = manager.hold(session)
        await fake_room.wait_until(lambda: len(fake_room.process_requests()) == len(times))
        if mode in SETTLED:
            await holder.wait_status(SETTLED[mode])
            await trio.sleep(1000)  # and nothing more happens
        assert [r.time for r in fake_room.process_requests()] == times


def test_the_retried_modes_name_their_times() -> None:
    named = {mode for mode in ProcessMode if claimed_times(mode)}
    assert named == set(ProcessMode) - set(SETTLED)


def test_the_testing_page_gives_each_mode_the_same_times() -> None:
    """One fact in two places (the reference and the guide): they agree."""
    rows = re.findall(r"^\| `([A-Z]+)` \|.*\| ([\d, ]+) \|$", PAGE.read_text(), re.MULTILINE)
    table = {ProcessMode[name]: [float(t) for t in times.split(", ")] for name, times in rows}
    assert table == {mode: claimed_times(mode) or [0] for mode in ProcessMode}
