"""_streams: the evidence a process stream leaves, as pure functions of a row and a time."""

from __future__ import annotations

import attrs

from letagents_trio.room_server._rows import SessionRow
from letagents_trio.room_server._streams import (
    ProcessStream,
    closed_at_start,
    dropped,
    exit_recorded,
    opened,
    refresh_outcome,
)

ROW = SessionRow(session_id="s", room_id="r", token_hash="h", agent_heard_at=100)
STREAM = ProcessStream(session_id="s", room_id="r", connection_id="c1")


def test_opening_sets_seen_and_a_new_connection_and_clears_the_drop() -> None:
    row = opened(attrs.evolve(ROW, process_disconnected_at=50), "c1", 200)
    assert (row.process_seen_at, row.process_connection_id, row.process_disconnected_at) == (
        200,
        "c1",
        None,
    )


def test_a_refresh_keeps_the_current_stream_and_closes_the_others() -> None:
    current = opened(ROW, "c1", 200)
    assert refresh_outcome(current, STREAM) is None
    assert refresh_outcome(opened(ROW, "c2", 300), STREAM) == "replaced"
    assert refresh_outcome(attrs.evolve(current, ended_at=400), STREAM) == "ended"
    assert refresh_outcome(None, STREAM) == "ended"


def test_a_drop_is_recorded_only_for_the_current_stream_of_a_live_session() -> None:
    current = opened(ROW, "c1", 200)
    row = dropped(current, STREAM, 250)
    assert row is not None
    assert (row.process_seen_at, row.process_disconnected_at) == (250, 250)
    assert dropped(opened(ROW, "c2", 200), STREAM, 250) is None
    assert dropped(attrs.evolve(current, ended_at=220), STREAM, 250) is None


def test_an_exit_names_the_current_connection_or_follows_a_drop() -> None:
    current = opened(ROW, "c1", 200)
    named = exit_recorded(current, "c1", 300)
    assert named is not None
    assert (named.process_connection_id, named.process_disconnected_at) == ("exited", 300)
    assert exit_recorded(current, "c0", 300) is None
    assert exit_recorded(current, None, 300) is None
    after_drop = dropped(current, STREAM, 250)
    assert exit_recorded(after_drop, None, 300) is not None
    assert exit_recorded(ROW, None, 300) is None  # never had a process connection
    controller = attrs.evolve(current, session_kind="controller")
    assert exit_recorded(controller, "c1", 300) is None


def test_an_exit_is_stamped_no_earlier_than_the_agent_was_heard() -> None:
    heard_late = attrs.evolve(opened(ROW, "c1", 200), agent_heard_at=500)
    row = exit_recorded(heard_late, "c1", 300)
    assert row is not None
    assert (row.process_seen_at, row.process_disconnected_at) == (500, 500)


def test_a_start_closes_a_connection_a_row_says_is_open_as_a_drop_now() -> None:
    """Issue 30, row 2: a room that starts holds nothing, so an open connection
    in a row is from before it stopped (a crash mid-goodbye)."""
    row = closed_at_start(opened(ROW, "c1", 200), 900)
    assert row is not None
    assert (row.process_connection_id, row.process_seen_at, row.process_disconnected_at) == (
        "c1",
        900,
        900,
    )
    dropped_before = dropped(opened(ROW, "c1", 200), STREAM, 250)
    assert dropped_before is not None
    exited = exit_recorded(opened(ROW, "c1", 200), "c1", 300)
    for untouched in (
        ROW,  # never had a process connection
        dropped_before,  # already closed: its drop time stands
        exited,  # exited: the exit stands
        attrs.evolve(opened(ROW, "c1", 200), ended_at=300),  # ended: nothing recorded
        attrs.evolve(opened(ROW, "c1", 200), session_kind="controller"),
    ):
        assert untouched is not None
        assert closed_at_start(untouched, 900) is None
