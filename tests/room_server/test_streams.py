"""_streams: the evidence a process stream leaves (pure functions of a row and a time), how a
stream is served, and the registry that holds them."""

from __future__ import annotations

from typing import TYPE_CHECKING

import attrs
import trio
import trio.testing

from letagents_trio.room_server._sessions._streams import (
    SSE_FORM,
    WEBSOCKET_FORM,
    CloseMode,
    ProcessStream,
    StreamForm,
    closed_at_start,
    dropped,
    exit_recorded,
    opened,
    refresh_outcome,
    serve_stream,
)
from letagents_trio.room_server._storage._rows import SessionRow

from .helpers import OWNER_TOKEN, ROOM, credentials, registration

if TYPE_CHECKING:
    from letagents_trio.room_server import Room

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


def test_an_exit_of_an_ended_or_unknown_session_is_not_recorded() -> None:
    current = opened(ROW, "c1", 200)
    assert exit_recorded(attrs.evolve(current, ended_at=250), "c1", 300) is None
    assert exit_recorded(None, "c1", 300) is None


# --- serving a stream: what it writes, and how it closes ----------------------------------------


async def served(
    form: StreamForm, outcomes: list[CloseMode | None], *, for_s: float
) -> tuple[list[bytes], ProcessStream]:
    """Serve a stream in ``form`` for ``for_s`` seconds; each refresh takes the next outcome."""
    stream = ProcessStream(session_id="s", room_id="r", connection_id="c1")
    frames: list[bytes] = []

    async def write(frame: bytes) -> None:
        await trio.lowlevel.checkpoint()
        frames.append(frame)

    def refresh(_: ProcessStream) -> CloseMode | None:
        return outcomes.pop(0) if outcomes else None

    with trio.move_on_after(for_s):
        await serve_stream(
            stream, write, form=form, heartbeat_interval=5, refresh_interval=30, refresh=refresh
        )
    return frames, stream


async def test_a_websocket_stream_writes_no_heartbeat_of_its_own(
    autojump_clock: trio.testing.MockClock,
) -> None:
    frames, _ = await served(WEBSOCKET_FORM, [], for_s=61)
    assert frames == [b'{"event":"open","connection_id":"c1","exit_ack":true}']


async def test_a_refresh_that_finds_the_session_ended_writes_ended_and_closes(
    autojump_clock: trio.testing.MockClock,
) -> None:
    frames, stream = await served(SSE_FORM, [None, "ended"], for_s=3600)
    assert trio.current_time() == 60
    assert stream.close_mode == "ended"
    assert frames[-1] == b"event: ended\ndata: {}\n\n"
    assert frames.count(b": heartbeat\n\n") == 11  # every 5 s until the refresh at 60 s


# --- the registry, through the room ---------------------------------------------------------------


async def test_a_session_is_held_while_any_of_its_streams_is(
    autojump_clock: trio.testing.MockClock, room: Room, nursery: trio.Nursery
) -> None:
    session = dict((await room.register(OWNER_TOKEN, ROOM, registration())).body)
    first = room.open_process_stream(ROOM, session["session_id"], credentials(session))
    second = room.open_process_stream(ROOM, session["session_id"], credentials(session))
    assert isinstance(first, ProcessStream)
    assert isinstance(second, ProcessStream)

    async def serve(stream: ProcessStream) -> None:
        async def write(frame: bytes) -> None:
            pass

        await room.run_process_stream(stream, write)

    nursery.start_soon(serve, first)
    nursery.start_soon(serve, second)
    await trio.sleep(30)  # the first, replaced, closes at its refresh
    await trio.testing.wait_all_tasks_blocked()
    assert first.close_mode == "replaced"
    assert room.process_streams(session["session_id"]) == [second]
    assert room.statistics().open_process_streams == 1
    room.close_all_process_streams()
    assert second.close_mode == "shutdown"
    await trio.testing.wait_all_tasks_blocked()
    assert room.process_streams(session["session_id"]) == []


async def test_an_exit_frame_over_the_held_socket_is_recorded_once(
    autojump_clock: trio.testing.MockClock, room: Room
) -> None:
    session = dict((await room.register(OWNER_TOKEN, ROOM, registration())).body)
    stream = room.open_process_stream(ROOM, session["session_id"], credentials(session))
    assert isinstance(stream, ProcessStream)
    body = {"process_connection_id": stream.connection_id}
    assert room.exit_over_socket(stream, body) is True
    assert room.exit_over_socket(stream, body) is False
