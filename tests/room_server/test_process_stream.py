"""The process stream (R4), exit (R5) and disconnect (R6): PROTOCOL.md §2.2 and §3.

Each test runs the app in-process under ``autojump_clock``; times are exact.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing

from letagents_trio._protocol import AGENT_SESSION_ENDED_ADVICE

from .helpers import (
    EPOCH,
    ROOM,
    UUID4,
    FrameReader,
    open_process,
    registered,
    registration,
    session_headers,
)
from .paths import process_path

if TYPE_CHECKING:
    import httpx2

    from letagents_trio.room_server import Room


async def open_frames(reader: FrameReader) -> str:
    """Read ``: connected`` and ``event: open``; return the connection id."""
    assert await reader.next() == ": connected"
    frame = await reader.next()
    assert frame is not None
    event, data = frame.split("\n")
    assert event == "event: open"
    assert data.startswith('data: {"connection_id":"')
    connection_id: str = json.loads(data.removeprefix("data: "))["connection_id"]
    assert UUID4.fullmatch(connection_id)
    assert data == f'data: {{"connection_id":"{connection_id}"}}'
    return connection_id


async def test_stream_headers_open_and_row(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    session = await registered(client, registration())
    async with open_process(client, session) as reader:
        r = reader.response
        assert r.status_code == 200
        assert r.headers["content-type"] == "text/event-stream"
        assert r.headers["cache-control"] == "no-cache, no-transform"
        assert r.headers["connection"] == "keep-alive"
        assert r.headers["x-accel-buffering"] == "no"
        connection_id = await open_frames(reader)
        row = room.session(session["session_id"])
        assert row is not None
        assert row.process_connection_id == connection_id
        assert row.process_seen_at == EPOCH
        assert row.process_disconnected_at is None
        assert [s.connection_id for s in room.process_streams(session["session_id"])] == [
            connection_id
        ]


async def test_heartbeats_every_15_s_and_refresh_every_30_s(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    session = await registered(client, registration())
    async with open_process(client, session) as reader:
        await open_frames(reader)
        seen: list[tuple[float, int | None]] = []
        for _ in range(4):
            assert await reader.next() == ": heartbeat"
            row = room.session(session["session_id"])
            assert row is not None
            seen.append((trio.current_time(), row.process_seen_at))
    assert seen == [
        (15, EPOCH),
        (30, EPOCH + 30_000),
        (45, EPOCH + 30_000),
        (60, EPOCH + 60_000),
    ]


async def test_end_session_sends_ended_and_records_no_drop(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    session = await registered(client, registration())
    async with open_process(client, session) as reader:
        await open_frames(reader)
        await trio.sleep(10)
        assert room.end_session(session["session_id"], reason="room_admin") is not None
        assert await reader.next() == "event: ended\ndata: {}"
        assert await reader.next() is None
        assert trio.current_time() == 10
    row = room.session(session["session_id"])
    assert row is not None
    assert row.ended_at == EPOCH + 10_000
    assert row.process_disconnected_at is None
    assert room.process_streams(session["session_id"]) == []


async def test_client_going_away_records_the_drop(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    session = await registered(client, registration())
    async with open_process(client, session) as reader:
        connection_id = await open_frames(reader)
        await trio.sleep(20)
    await trio.testing.wait_all_tasks_blocked()
    row = room.session(session["session_id"])
    assert row is not None
    assert row.process_connection_id == connection_id
    assert row.process_seen_at == EPOCH + 20_000
    assert row.process_disconnected_at == EPOCH + 20_000
    assert row.ended_at is None


async def test_reconnect_clears_the_disconnect_and_counts_as_heard(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    session = await registered(client, registration())
    async with open_process(client, session) as reader:
        first = await open_frames(reader)
    await trio.sleep(3)
    async with open_process(client, session) as reader:
        second = await open_frames(reader)
        row = room.session(session["session_id"])
        assert row is not None
        assert second != first
        assert row.process_connection_id == second
        assert row.process_disconnected_at is None
        assert row.process_seen_at == EPOCH + 3_000
        assert row.agent_heard_at == EPOCH + 3_000


async def test_replaced_stream_closes_silently_at_its_refresh(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    session = await registered(client, registration())
    async with open_process(client, session) as old_reader:
        await open_frames(old_reader)
        await trio.sleep(10)
        async with open_process(client, session) as new_reader:
            new_id = await open_frames(new_reader)
            assert await old_reader.next() == ": heartbeat"  # at 15
            assert await old_reader.next() is None  # at 30: refresh finds it replaced
            assert trio.current_time() == 30
            row = room.session(session["session_id"])
            assert row is not None
            assert row.process_connection_id == new_id
            assert row.process_disconnected_at is None
            assert row.process_seen_at == EPOCH + 10_000


async def test_shutdown_closes_silently_and_records_nothing(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    session = await registered(client, registration())
    async with open_process(client, session) as reader:
        await open_frames(reader)
        await trio.sleep(5)
        room.close_all_process_streams()
        assert await reader.next() is None
    await trio.testing.wait_all_tasks_blocked()
    row = room.session(session["session_id"])
    assert row is not None
    assert row.process_disconnected_at is None
    assert row.process_seen_at == EPOCH


async def test_handle_close_dropped_records_the_drop(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    session = await registered(client, registration())
    async with open_process(client, session) as reader:
        await open_frames(reader)
        await trio.sleep(7)
        (stream,) = room.process_streams(session["session_id"])
        stream.close("dropped")
        assert await reader.next() is None
    row = room.session(session["session_id"])
    assert row is not None
    assert row.process_disconnected_at == EPOCH + 7_000


async def test_ended_session_reconnect_is_410(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    session = await registered(client, registration())
    room.end_session(session["session_id"])
    r = await client.get(process_path(session), headers=session_headers(session))
    assert r.status_code == 410
    assert r.json() == {"error": "Agent session has ended.", "code": "agent_session_ended"}


async def test_stream_identity_errors(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    session = await registered(client, registration())
    other = await registered(client, registration(name="Other"))
    path = process_path(session)
    r = await client.get(path, headers={"Authorization": "Bearer owner-test-token"})
    assert (r.status_code, r.json()) == (
        403,
        {"error": "Registered worker session is required for agent write actions."},
    )
    bad = dict(session_headers(session), **{"X-LetAgents-Agent-Session-Token": "x" * 43})
    r = await client.get(path, headers=bad)
    assert (r.status_code, r.json()) == (401, {"error": "Invalid agent session credentials."})
    r = await client.get(path, headers=session_headers(other))
    assert (r.status_code, r.json()) == (
        403,
        {"error": "A process connection belongs to its own session."},
    )
    r = await client.get(path, headers=session_headers(session, token="other-owner-token"))
    assert (r.status_code, r.json()) == (
        401,
        {"error": "Invalid or mismatched agent session bearer credentials."},
    )
    r = await client.get(path, headers=session_headers(session, token="nobody"))
    assert r.status_code == 401
    r = await client.get(
        process_path(session, room="no_such_room"), headers=session_headers(session)
    )
    assert (r.status_code, r.json()) == (404, {"error": "Room not found"})
    row = room.session(session["session_id"])
    assert row is not None
    assert row.process_seen_at is None


async def test_ended_credentials_on_other_routes_get_the_advice(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    session = await registered(client, registration())
    room.end_session(session["session_id"])
    r = await client.post(
        f"/rooms/{ROOM}/messages", json={"text": "hi"}, headers=session_headers(session)
    )
    assert (r.status_code, r.json()) == (401, {"error": AGENT_SESSION_ENDED_ADVICE})


# --- exit (R5) ----------------------------------------------------------------------


def exit_path(session: dict[str, Any]) -> str:
    return process_path(session) + "/exit"


def exit_body(session: dict[str, Any], connection_id: str | None) -> dict[str, Any]:
    return {
        "agent_session_id": session["session_id"],
        "agent_session_token": session["session_token"],
        "process_connection_id": connection_id,
    }


async def test_exit_with_the_current_connection_id_is_recorded(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    session = await registered(client, registration())
    async with open_process(client, session) as reader:
        connection_id = await open_frames(reader)
        await trio.sleep(4)
    await trio.sleep(1)
    r = await client.post(
        exit_path(session), json=exit_body(session, connection_id), headers=session_headers(session)
    )
    assert (r.status_code, r.json()) == (200, {"recorded": True})
    row = room.session(session["session_id"])
    assert row is not None
    assert row.process_connection_id == "exited"
    # The exit call itself is heard at 5 s: max(now, heard) = 5 s.
    assert row.process_seen_at == row.process_disconnected_at == EPOCH + 5_000
    assert row.ended_at is None


async def test_exit_with_a_stale_connection_id_is_not_recorded(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    session = await registered(client, registration())
    async with open_process(client, session) as reader:
        connection_id = await open_frames(reader)
        stale = "00000000-0000-4000-8000-000000000000"
        r2 = await client.post(
            exit_path(session), json=exit_body(session, stale), headers=session_headers(session)
        )
        assert r2.json() == {"recorded": False}
        row = room.session(session["session_id"])
        assert row is not None
        assert row.process_connection_id == connection_id


async def test_exit_without_id_needs_a_closed_connection(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    session = await registered(client, registration())
    body = exit_body(session, None)
    r = await client.post(exit_path(session), json=body)
    assert r.json() == {"recorded": False}  # never had a process connection
    async with open_process(client, session) as reader:
        await open_frames(reader)
        r = await client.post(exit_path(session), json=body)
        assert r.json() == {"recorded": False}  # still open
    await trio.testing.wait_all_tasks_blocked()
    r = await client.post(exit_path(session), json=dict(body, process_connection_id=""))
    assert r.json() == {"recorded": True}


@pytest.mark.parametrize("replayed_id", ["the same", None])
async def test_a_replayed_exit_changes_nothing_and_says_so(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    replayed_id: str | None,
) -> None:
    """Issue 13 row 15. Before: a replay (null id) answered ``recorded: true``
    again and moved the exit time forward. After: the first exit stands."""
    session = await registered(client, registration())
    async with open_process(client, session) as reader:
        connection_id = await open_frames(reader)
    await trio.testing.wait_all_tasks_blocked()
    headers = session_headers(session)
    body = exit_body(session, connection_id)
    r = await client.post(exit_path(session), json=body, headers=headers)
    assert r.json() == {"recorded": True}

    def exit_fields() -> tuple[object, ...]:
        row = room.session(session["session_id"])
        assert row is not None
        return (row.process_connection_id, row.process_seen_at, row.process_disconnected_at)

    first = exit_fields()
    await trio.sleep(60)
    replay = exit_body(session, connection_id if replayed_id else None)
    r = await client.post(exit_path(session), json=replay, headers=headers)
    assert (r.status_code, r.json()) == (200, {"recorded": False, "already_recorded": True})
    assert exit_fields() == first


async def test_exit_for_another_session_is_403(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    session = await registered(client, registration())
    other = await registered(client, registration(name="Other"))
    r = await client.post(exit_path(session), json=exit_body(other, None))
    assert (r.status_code, r.json()) == (
        403,
        {"error": "A process speaks only for its own session."},
    )


# --- disconnect (R6) --------------------------------------------------------------------


async def test_disconnect_ends_the_session_and_tells_the_stream(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    session = await registered(client, registration())
    async with open_process(client, session) as reader:
        await open_frames(reader)
        await trio.sleep(2)
        r = await client.post(
            f"/rooms/{ROOM}/agent-sessions/{session['session_id']}/disconnect",
            json={
                "agent_session_id": session["session_id"],
                "agent_session_token": session["session_token"],
            },
        )
        assert r.status_code == 200
        data = r.json()
        assert data["room_id"] == ROOM
        assert data["agent_session"]["ended_at"] == "2027-01-15T08:00:02.000Z"
        assert "session_token" not in data["agent_session"]
        assert await reader.next() == "event: ended\ndata: {}"
        assert await reader.next() is None


async def test_disconnect_refusals(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    session = await registered(client, registration())
    other = await registered(client, registration(name="Other"))
    base = f"/rooms/{ROOM}/agent-sessions"
    r = await client.post(f"{base}/{session['session_id']}/disconnect", json={})
    assert (r.status_code, r.json()) == (400, {"error": "agent_session_id is required"})
    creds = {
        "agent_session_id": other["session_id"],
        "agent_session_token": other["session_token"],
    }
    r = await client.post(f"{base}/{session['session_id']}/disconnect", json=creds)
    assert (r.status_code, r.json()) == (
        403,
        {"error": "Worker sessions can only disconnect themselves."},
    )
    r = await client.post(f"{base}/nope/disconnect", json=creds)
    assert (r.status_code, r.json()) == (404, {"error": "Agent session not found"})
    row = room.session(session["session_id"])
    assert row is not None
    assert row.ended_at is None
