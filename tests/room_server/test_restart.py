"""A room that starts again over its store (issue 30, row 2, the room's half).

A room killed while it held process connections (or in the middle of their
goodbye) left each row saying its connection was open: no drop, no exit. The
room that starts again over the same store holds none of them, so before it
serves it closes each as a drop at its start, and the gone rules of
PROTOCOL §7.2 run from there: the same host's registration takes the name 15 s
later, another machine's 10 min later, instead of never (while the row looked
connected) or after the 10-minute silence of a dead room. Sessions that
exited, dropped, ended, or that the new room already holds, are left alone.
The end-to-end form, a real room process killed mid-goodbye, is
``tests/e2e/test_room_crash.py``.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING

import attrs
import trio
import trio.testing

from letagents_trio.room_server import Room, RoomConfig, RoomStore, TrioClock
from letagents_trio.room_server._sessions._presence import evidence_of, exited, gone
from letagents_trio.room_server._sessions._streams import ProcessStream

from .helpers import EPOCH, OWNER_TOKEN, ROOM, credentials, registration

if TYPE_CHECKING:
    import pytest

HOST = "host_a"
ROOM_SERVER_PAGE = (Path(__file__).resolve().parents[2] / "docs" / "room-server.md").read_text()


def restarted(store: RoomStore, at_ms: int) -> Room:
    return Room(
        store=store,
        clock=TrioClock(at_ms),
        owner_tokens={OWNER_TOKEN: "owner"},
        config=RoomConfig(),
    )


async def left_open(store: RoomStore, count: int) -> list[str]:
    """The sessions a first room registered and left with their connections open."""
    first = restarted(store, EPOCH)
    sessions = []
    for i in range(count):
        reply = await first.register(OWNER_TOKEN, ROOM, registration(name=f"W{i}", host=HOST))
        assert reply.status == 201, reply.body
        sid = reply.body["session_id"]
        row = store.get_session(sid)
        assert row is not None
        store.put_session(
            attrs.evolve(row, process_seen_at=EPOCH, process_connection_id=f"c-{sid}")
        )
        sessions.append(sid)
    return sessions


async def test_a_restarted_room_closes_the_connections_it_no_longer_holds(
    store: RoomStore,
    autojump_clock: trio.testing.MockClock,
    nursery: trio.Nursery,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # What the first room left: four open connections; then one exited, one dropped, one ended.
    sessions = await left_open(store, 4)
    exited_id, dropped_id, ended_id, open_id = sessions
    row = store.get_session(exited_id)
    assert row is not None
    store.put_session(
        attrs.evolve(row, process_connection_id="exited", process_disconnected_at=EPOCH)
    )
    row = store.get_session(dropped_id)
    assert row is not None
    store.put_session(attrs.evolve(row, process_disconnected_at=EPOCH + 5))
    row = store.get_session(ended_id)
    assert row is not None
    store.put_session(attrs.evolve(row, ended_at=EPOCH + 7))
    before = {sid: store.get_session(sid) for sid in sessions}

    start = EPOCH + 60_000
    second = restarted(store, start)
    caplog.set_level(logging.INFO, "letagents_trio.room_server")
    await nursery.start(second.run)

    closed = store.get_session(open_id)
    assert closed is not None
    assert (closed.process_connection_id, closed.process_disconnected_at) == (
        f"c-{open_id}",
        start,
    )
    assert closed.process_seen_at == start
    for sid in (exited_id, dropped_id, ended_id):
        assert store.get_session(sid) == before[sid]
    assert "room start: 1 process connection(s) open when the room stopped" in caplog.text
    # The gone rules run from the start: the same host's registration 15 s later.
    evidence = evidence_of(closed, delivery_connected=False)
    assert not exited(evidence, now=start + 14_999, observer_host_id=HOST)
    assert exited(evidence, now=start + 15_000, observer_host_id=HOST)
    assert gone(evidence, now=start + 15_000, observer_host_id=HOST)
    assert not gone(evidence, now=start + 599_999, observer_host_id="host_b")
    assert gone(evidence, now=start + 600_000, observer_host_id="host_b")


async def test_a_connection_the_starting_room_already_holds_is_left_open(
    store: RoomStore, autojump_clock: trio.testing.MockClock
) -> None:
    room = restarted(store, EPOCH)
    reply = await room.register(OWNER_TOKEN, ROOM, registration())
    session = dict(reply.body)
    creds = credentials(session)
    assert isinstance(room.open_process_stream(ROOM, session["session_id"], creds), ProcessStream)
    async with trio.open_nursery() as nursery:
        await nursery.start(room.run)
        row = room.session(session["session_id"])
        assert row is not None
        assert row.process_disconnected_at is None
        nursery.cancel_scope.cancel(reason="test over")


async def test_a_restarted_room_says_how_many_connections_it_closed(
    store: RoomStore,
    autojump_clock: trio.testing.MockClock,
    nursery: trio.Nursery,
    caplog: pytest.LogCaptureFixture,
) -> None:
    await left_open(store, 2)
    caplog.set_level(logging.INFO, "letagents_trio.room_server")
    await nursery.start(restarted(store, EPOCH + 60_000).run)
    [record] = [r for r in caplog.records if r.getMessage().startswith("room start:")]
    # It follows every restart that had workers connected (a graceful stop
    # records nothing): information for the operator, never a warning (issue 42).
    assert record.levelno == logging.INFO
    said = record.getMessage()
    assert said.startswith("room start: 2 process connection(s) open when the room stopped")
    # docs/room-server.md shows the line as the room says it (with 3 connections).
    assert said.replace(" 2 ", " 3 ", 1) in ROOM_SERVER_PAGE
