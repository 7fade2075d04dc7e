"""Bad input never reaches the rules: documented 4xx, never a 500, never a changed row."""

from __future__ import annotations

import json
from typing import Any

import attrs
import httpx2
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from letagents_trio.room_server import MemoryStore, Room, create_app
from letagents_trio.testing._transport import open_streaming_transport

from .helpers import OWNER_TOKEN, ROOM, owner_headers, registered, registration, session_headers

SESSION_ROUTES = [
    ("GET", "agent-sessions/{sid}/process"),
    ("POST", "agent-sessions/{sid}/process/exit"),
    ("POST", "agent-sessions/{sid}/disconnect"),
    ("GET", "messages"),
    ("POST", "messages"),
    ("GET", "messages/poll?timeout=1000"),
    ("POST", "tasks"),
    ("PATCH", "tasks/task_1"),
    ("POST", "tasks/task_1/lease-action"),
    ("POST", "memory"),
    ("POST", "attention"),
]


def snapshot(room: Room) -> list[Any]:
    """Every row a request could change: sessions, tasks, leases, knowledge, messages."""
    store = room.store
    rows: list[Any] = []
    for r in store.room_ids():
        rows.extend(store.room_sessions(r))
        rows.extend(store.tasks_page(r, after=0, limit=1000, statuses=None))
        rows.extend(store.active_leases(r))
        rows.extend(store.room_knowledge(r, "memory") + store.room_knowledge(r, "attention"))
        rows.extend(store.messages_after(r, 0, 1000))
    return [attrs.asdict(row) for row in rows]


@pytest.mark.parametrize(("method", "route"), SESSION_ROUTES)
async def test_unknown_room_is_404_and_changes_nothing(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    method: str,
    route: str,
) -> None:
    s = await registered(client, registration())
    before = snapshot(room)
    path = "/rooms/no_such_room/" + route.format(sid=s["session_id"])
    r = await client.request(method, path, json={}, headers=session_headers(s))
    assert (r.status_code, r.json()) == (404, {"error": "Room not found"})
    assert snapshot(room) == before


@pytest.mark.parametrize(("method", "route"), SESSION_ROUTES)
async def test_missing_or_wrong_credentials_are_4xx_and_change_nothing(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    method: str,
    route: str,
) -> None:
    s = await registered(client, registration())
    before = snapshot(room)
    path = f"/rooms/{ROOM}/" + route.format(sid=s["session_id"])
    for headers in (
        {},
        owner_headers(),
        dict(session_headers(s), **{"X-LetAgents-Agent-Session-Token": "wrong"}),
        dict(session_headers(s), **{"X-LetAgents-Agent-Session-Id": "x" * 5000}),
    ):
        r = await client.request(method, path, json={}, headers=headers)
        assert 400 <= r.status_code < 500, (headers.keys(), r.status_code, r.text)
        assert "error" in r.json()
    assert snapshot(room) == before


async def test_ids_over_routing_bounds_are_4xx(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    s = await registered(client, registration())
    before = snapshot(room)
    huge = "s" * 20_000
    for path in (
        f"/rooms/{ROOM}/agent-sessions/{huge}/process",
        f"/rooms/{'r' * 1000}/messages",
        f"/rooms/{ROOM}/tasks/{huge}",
        f"/rooms/{ROOM}/tasks/{huge}/lease-action",
        f"/rooms/{ROOM}/attention/{huge}/respond",
        "/rooms/%ZZ/messages",
        "/rooms/%FF%FE/messages",
        "/rooms//messages",
    ):
        for method in ("GET", "POST"):
            r = await client.request(method, path, json={}, headers=session_headers(s))
            assert 400 <= r.status_code < 500, (path[:40], method, r.status_code)
    assert snapshot(room) == before


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=50),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
registration_keys = st.sampled_from(sorted(registration()))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    changes=st.dictionaries(registration_keys, json_values, max_size=6),
    raw=st.one_of(st.none(), st.binary(max_size=64)),
)
async def test_random_registration_bodies_never_500(
    changes: dict[str, Any], raw: bytes | None
) -> None:
    room = Room(store=MemoryStore(), owner_tokens={OWNER_TOKEN: "owner"})
    with trio.fail_after(10):
        async with (
            open_streaming_transport(create_app(room)) as transport,
            httpx2.AsyncClient(transport=transport, base_url="http://room.test") as client,
        ):
            body = dict(registration(), **changes)
            content = raw if raw is not None else json.dumps(body).encode()
            r = await client.post(
                f"/rooms/{ROOM}/agent-sessions",
                content=content,
                headers=dict(owner_headers(), **{"Content-Type": "application/json"}),
            )
            assert r.status_code in (201, 400, 403, 409, 413), r.text
            rows = room.store.room_sessions(ROOM)
            assert len(rows) == (1 if r.status_code == 201 else 0)


@settings(max_examples=150, deadline=None)
@given(
    segments=st.lists(
        st.sampled_from(
            [
                "rooms",
                "room_shared",
                "agent-sessions",
                "process",
                "exit",
                "messages",
                "poll",
                "tasks",
                "task_1",
                "lease-action",
                "memory",
                "attention",
                "respond",
                "disconnect",
                "agents",
                "me",
                "",
                "%2F",
                "%00",
                "x",
            ]
        ),
        max_size=7,
    ),
    method=st.sampled_from(["GET", "POST", "PUT", "PATCH", "DELETE"]),
)
async def test_random_paths_never_500(segments: list[str], method: str) -> None:
    room = Room(store=MemoryStore(), owner_tokens={OWNER_TOKEN: "owner"})
    with trio.fail_after(10):
        async with (
            open_streaming_transport(create_app(room)) as transport,
            httpx2.AsyncClient(transport=transport, base_url="http://room.test") as client,
        ):
            r = await client.request(
                method,
                "http://room.test/" + "/".join(segments) + "?timeout=0",
                json={},
                headers=owner_headers(),
            )
            assert r.status_code < 500, r.text
