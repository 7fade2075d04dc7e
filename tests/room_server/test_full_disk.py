"""A storage that refuses writes (issue 30, row 6): reads and bookkeeping go on, writes say so.

The room runs on a real SQLite file. Two ways to make its writes fail, no
root needed: ``PRAGMA max_page_count`` at the database's size (SQLite then
answers ``database or disk is full``, as on a full disk) and ``PRAGMA
query_only`` (every write fails, ``attempt to write a readonly database``).
Before, ``authenticate()`` wrote ``last_seen_at`` first, so every
authenticated route answered 500 with a traceback, reads and the exit
included. Now that touch is best-effort, a refused write answers 507 (full)
or 503 (any other failure) with a JSON body that says nothing was written,
and nothing already stored is lost or half-written.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import attrs
import pytest
import trio
import trio.testing

from letagents_trio.room_server import Room, RoomStore, SQLiteStore
from letagents_trio.room_server._sessions._streams import ProcessStream
from letagents_trio.room_server._storage._store import MessageRow, SessionRow
from letagents_trio.room_server._storage._store_errors import StoreWriteError

from .helpers import (
    EPOCH,
    OWNER_TOKEN,
    ROOM,
    credentials,
    hold,
    owner_headers,
    register,
    registered,
    registration,
    say,
    session_headers,
)
from .paths import process_path

if TYPE_CHECKING:
    import httpx2

FULL = {
    "error": "The room's storage is full: nothing was written. Try again once it has space.",
    "code": "storage_full",
}
FAILED = {
    "error": "The room could not write to its storage: nothing was written. Try again later.",
    "code": "storage_unavailable",
}


# The conftest's room and client, on its SQLite store only.
pytestmark = pytest.mark.parametrize("store", ["sqlite"], indirect=True)


def read_only(store: RoomStore, on: bool) -> None:
    assert isinstance(store, SQLiteStore)
    store._db.execute(f"PRAGMA query_only = {int(on)}")


def fill(store: RoomStore) -> None:
    """Cap the database at its size and fill its free space: every new row is refused."""
    assert isinstance(store, SQLiteStore)
    pages = store._db.execute("PRAGMA page_count").fetchone()[0]
    store._db.execute(f"PRAGMA max_page_count = {pages}")
    with pytest.raises(StoreWriteError) as refused:  # noqa: PT012 (fills until refused)
        for i in range(10_000):
            store.put_session(SessionRow(session_id=f"filler{i}", room_id="filler", token_hash="h"))
    assert refused.value.full
    with pytest.raises(StoreWriteError) as refused:  # noqa: PT012 (fills until refused)
        for i in range(10_000):
            store.add_message(MessageRow(room_id="filler", sender="x", text="x" * 50, created_at=i))
    assert refused.value.full


def unfill(store: RoomStore) -> None:
    assert isinstance(store, SQLiteStore)
    store._db.execute("PRAGMA max_page_count = 1073741823")


def exit_body(session: dict[str, Any]) -> dict[str, Any]:
    return {
        "agent_session_id": session["session_id"],
        "agent_session_token": session["session_token"],
        "process_connection_id": None,
    }


async def test_reads_answer_and_writes_say_nothing_was_written_when_every_write_fails(
    autojump_clock: trio.testing.MockClock,
    room: Room,
    store: RoomStore,
    client: httpx2.AsyncClient,
    caplog: pytest.LogCaptureFixture,
) -> None:
    session = await registered(client, registration(name="Keeper"))
    await say(client, session, "before")
    async with trio.open_nursery() as nursery:  # a connection, dropped: an exit is recordable
        (await nursery.start(hold, client, session)).cancel(reason="the client leaves")
    before = room.session(session["session_id"])
    assert before is not None
    assert before.process_disconnected_at is not None
    caplog.set_level(logging.WARNING)
    read_only(store, True)

    headers = session_headers(session)
    r = await client.get(f"/rooms/{ROOM}/messages", headers=headers)
    assert r.status_code == 200, r.text  # authenticated: the touch failed, the read did not
    assert [m["text"] for m in r.json()["messages"]] == ["before"]
    r = await client.get("/agents/me", headers=owner_headers())
    assert r.status_code == 200
    r = await client.get(f"/rooms/{ROOM}/agent-guidelines", headers=headers)
    assert r.status_code == 200, r.text

    for method, path, body in (
        ("POST", f"/rooms/{ROOM}/messages", {"text": "lost?"}),
        ("POST", process_path(session) + "/exit", exit_body(session)),
        ("POST", f"/rooms/{ROOM}/agent-sessions", registration(name="Other")),
        ("GET", process_path(session), None),
    ):
        r = await client.request(
            method,
            path,
            json=body,
            headers=owner_headers() if path.endswith("agent-sessions") else headers,
        )
        assert (r.status_code, r.json()) == (503, FAILED), (path, r.text)

    read_only(store, False)
    assert room.session(session["session_id"]) == before  # nothing half-written
    r = await client.get(f"/rooms/{ROOM}/messages", headers=headers)
    assert [m["text"] for m in r.json()["messages"]] == ["before"]
    r = await client.post(process_path(session) + "/exit", json=exit_body(session))
    assert (r.status_code, r.json()) == (200, {"recorded": True})
    assert not [rec for rec in caplog.records if rec.levelno >= logging.ERROR]
    assert "refused 1 write(s): attempt to write a readonly database" in caplog.text


async def test_a_full_database_answers_507_and_loses_nothing(
    autojump_clock: trio.testing.MockClock,
    room: Room,
    store: RoomStore,
    client: httpx2.AsyncClient,
) -> None:
    session = await registered(client, registration(name="Keeper"))
    await say(client, session, "kept")
    fill(store)
    r = await register(client, registration(name="Newcomer"))
    assert (r.status_code, r.json()) == (507, FULL)
    r = await client.post(
        f"/rooms/{ROOM}/messages", json={"text": "x" * 2000}, headers=session_headers(session)
    )
    assert (r.status_code, r.json()) == (507, FULL)
    r = await client.get(f"/rooms/{ROOM}/messages", headers=session_headers(session))
    assert r.status_code == 200
    assert [m["text"] for m in r.json()["messages"]] == ["kept"]
    unfill(store)
    again = await registered(client, registration(name="Newcomer"))
    assert again["display_name"] == "Newcomer"


async def test_a_failed_write_inside_a_transaction_stores_none_of_it(
    store: RoomStore, room: Room, autojump_clock: trio.testing.MockClock
) -> None:
    reply = await room.register(OWNER_TOKEN, ROOM, registration(name="Keeper"))
    row = room.session(reply.body["session_id"])
    assert row is not None
    fill(store)
    with pytest.raises(StoreWriteError), store.atomic():  # noqa: PT012 (two writes, one fails)
        store.put_session(attrs.evolve(row, display_name="Changed"))
        store.add_message(MessageRow(room_id=ROOM, sender="x", text="y" * 5000, created_at=1))
    assert store.get_session(row.session_id) == row


async def test_a_held_stream_and_the_sweep_outlive_a_storage_that_refuses_writes(
    autojump_clock: trio.testing.MockClock,
    room: Room,
    store: RoomStore,
    client: httpx2.AsyncClient,
    nursery: trio.Nursery,
) -> None:
    """The 30 s refresh and the minute's liveness sweep are bookkeeping: refused,
    they leave the rows as they were and the stream and the room running."""
    session = await registered(client, registration(name="Keeper"))
    await nursery.start(room.run)
    scope = await nursery.start(hold, client, session)
    read_only(store, True)
    await trio.sleep(125)  # four refreshes and two sweeps, all refused
    assert room.statistics().open_process_streams == 1
    read_only(store, False)
    scope.cancel(reason="the client leaves")
    await trio.testing.wait_all_tasks_blocked()
    row = room.session(session["session_id"])
    assert row is not None
    assert row.process_disconnected_at == EPOCH + 125_000  # its drop, once writes work


async def test_a_room_starting_over_a_storage_that_refuses_writes_starts_and_says_nothing(
    autojump_clock: trio.testing.MockClock,
    room: Room,
    store: RoomStore,
    client: httpx2.AsyncClient,
    nursery: trio.Nursery,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The start's closing of connections left open is one transaction: refused,
    the rows stay as they were and the room serves all the same."""
    session = await registered(client, registration())
    row = store.get_session(session["session_id"])
    assert row is not None
    left_open = attrs.evolve(row, process_seen_at=EPOCH, process_connection_id="c-left")
    store.put_session(left_open)
    read_only(store, True)
    caplog.set_level(logging.INFO, "letagents_trio.room_server")
    await nursery.start(room.run)
    assert "counted as dropped" not in caplog.text
    assert store.get_session(session["session_id"]) == left_open


async def test_a_drop_the_storage_refuses_to_record_ends_the_stream_quietly(
    autojump_clock: trio.testing.MockClock, room: Room, store: RoomStore
) -> None:
    reply = await room.register(OWNER_TOKEN, ROOM, registration())
    session = dict(reply.body)
    creds = credentials(session)
    stream = room.open_process_stream(ROOM, session["session_id"], creds)
    assert isinstance(stream, ProcessStream)
    before = store.get_session(session["session_id"])

    async def write(frame: bytes) -> None:
        pass

    read_only(store, True)
    stream.close("dropped")
    await room.run_process_stream(stream, write)  # returns: the refused write is not an error
    read_only(store, False)
    assert store.get_session(session["session_id"]) == before
    assert room.process_streams(session["session_id"]) == []
