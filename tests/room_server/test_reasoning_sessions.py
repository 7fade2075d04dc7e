"""Reasoning sessions (``_reports/_reasoning.py``): every field a reader sees, filters, pages.

On both stores, over the streaming transport, on ``autojump_clock``: the
room's times are ``EPOCH`` plus trio's clock, so a snapshot sent 5 s later is
stamped exactly 5 000 ms later.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing

from letagents_trio.room_server._wire import iso

from .helpers import (
    EPOCH,
    OTHER_TOKEN,
    ROOM,
    owner_headers,
    registered,
    registration,
    session_headers,
)

if TYPE_CHECKING:
    import httpx2

    from letagents_trio.room_server import Room

SESSIONS = f"/rooms/{ROOM}/reasoning-sessions"
SESSION_FIELDS = {
    "id",
    "room_id",
    "task_id",
    "anchor_message_id",
    "actor_label",
    "agent_key",
    "status",
    "summary",
    "latest_payload",
    "created_at",
    "updated_at",
    "closed_at",
}


async def opened(client: httpx2.AsyncClient, worker: dict[str, Any], **body: Any) -> dict[str, Any]:
    r = await client.post(SESSIONS, json={"summary": "s", **body}, headers=session_headers(worker))
    assert r.status_code == 201, r.text
    session: dict[str, Any] = r.json()["session"]
    return session


async def test_a_session_and_its_updates_show_every_field(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    body = {
        "summary": " looking ",
        "task_id": " task_3 ",
        "anchor_message_id": " msg_12 ",
        "goal": " fix it ",
        "checking": " ",
        "hypothesis": 7,
        "blocker": None,
        "next_action": "read",
        "milestone": "  ",
        "status": "working",
        "confidence": 0,
    }
    r = await client.post(SESSIONS, json=body, headers=session_headers(a))
    assert r.status_code == 201, r.text
    answer = r.json()
    session, update = answer["session"], answer["update"]
    snapshot = {
        "summary": "looking",
        "goal": "fix it",
        "checking": None,
        "hypothesis": None,
        "blocker": None,
        "next_action": "read",
        "milestone": None,
        "status": "working",
        "confidence": 0,
    }
    started = iso(EPOCH)
    assert answer["room_id"] == ROOM
    assert session == {
        "id": session["id"],
        "room_id": ROOM,
        "task_id": "task_3",
        "anchor_message_id": "msg_12",
        "actor_label": a["actor_label"],
        "agent_key": a["agent_key"],
        "status": "working",
        "summary": "looking",
        "latest_payload": snapshot,
        "created_at": started,
        "updated_at": started,
        "closed_at": None,
    }
    assert update == {
        "id": f"{session['id']}:00000001",
        "session_id": session["id"],
        "actor_label": a["actor_label"],
        "payload": snapshot,
        "created_at": started,
    }
    await trio.sleep(5)
    r = await client.post(
        f"{SESSIONS}/{session['id']}/updates",
        json={"summary": "closer", "confidence": 1},
        headers=session_headers(a),
    )
    assert r.status_code == 201, r.text
    later = r.json()
    # The status stays as it was when a snapshot names none.
    assert (later["session"]["status"], later["session"]["summary"]) == ("working", "closer")
    assert later["session"]["latest_payload"] == {"summary": "closer", "confidence": 1}
    assert later["session"]["created_at"] == started
    assert later["session"]["updated_at"] == iso(EPOCH + 5000)
    assert later["update"]["id"] == f"{session['id']}:00000002"
    assert later["update"]["created_at"] == iso(EPOCH + 5000)
    one = await client.get(f"{SESSIONS}/{session['id']}", headers=session_headers(a))
    assert one.json()["room_id"] == ROOM
    assert one.json()["session"] == later["session"]
    assert [u["id"] for u in one.json()["updates"]] == [later["update"]["id"], update["id"]]


@pytest.mark.parametrize(
    ("field", "value", "text"),
    [
        ("summary", None, "summary is required"),
        ("summary", 3, "summary is required"),
        ("status", "asleep", "status must be one of: idle, working, reviewing, blocked"),
        ("confidence", -0.001, "confidence must be a number between 0 and 1"),
        ("confidence", 1.001, "confidence must be a number between 0 and 1"),
        ("confidence", "high", "confidence must be a number between 0 and 1"),
    ],
)
async def test_a_snapshot_out_of_bounds_is_refused_with_the_apis_text(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    field: str,
    value: object,
    text: str,
) -> None:
    a = await registered(client, registration(name="A"))
    r = await client.post(SESSIONS, json={"summary": "s", field: value}, headers=session_headers(a))
    assert (r.status_code, r.json()["error"]) == (400, text)


async def test_a_snapshot_may_leave_status_and_confidence_unset(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    session = await opened(client, a, status=None, confidence=None)
    assert (session["status"], session["latest_payload"]) == (None, {"summary": "s"})
    for status in ("idle", "reviewing", "blocked"):
        assert (await opened(client, a, status=status))["status"] == status


async def test_updates_go_only_to_a_session_of_this_room(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"), room="room_elsewhere")
    theirs = await client.post(
        "/rooms/room_elsewhere/reasoning-sessions",
        json={"summary": "s"},
        headers=session_headers(b),
    )
    elsewhere = theirs.json()["session"]["id"]
    for method, path in [
        ("POST", f"{SESSIONS}/{elsewhere}/updates"),
        ("GET", f"{SESSIONS}/{elsewhere}"),
        ("GET", f"{SESSIONS}/no-such-session"),
    ]:
        r = await client.request(method, path, json={"summary": "s"}, headers=session_headers(a))
        assert (r.status_code, r.json()["error"]) == (404, "Reasoning session not found")
    # A bad snapshot for a missing session: the session is looked up first.
    r = await client.post(f"{SESSIONS}/nope/updates", json={}, headers=session_headers(a))
    assert r.status_code == 404


async def test_reading_needs_a_participant_and_writing_a_worker_session(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    session = await opened(client, a)
    for path in (SESSIONS, f"/rooms/{ROOM}/reasoning", f"{SESSIONS}/{session['id']}"):
        assert (await client.get(path)).status_code == 401
        assert (await client.get(path, headers=owner_headers())).status_code == 200
    update = await client.post(
        f"{SESSIONS}/{session['id']}/updates", json={"summary": "s"}, headers=owner_headers()
    )
    assert update.status_code == 403
    unknown = await client.get("/rooms/room_unknown/reasoning-sessions", headers=owner_headers())
    assert unknown.status_code == 404
    for path in (SESSIONS, f"{SESSIONS}/{session['id']}"):
        stranger = await client.get(path, headers=owner_headers(OTHER_TOKEN))
        assert stranger.status_code == 403
        assert isinstance(stranger.json()["error"], str)
        assert stranger.json()["error"]


async def test_an_update_by_another_worker_names_it_as_the_writer(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    session = await opened(client, a)
    r = await client.post(
        f"{SESSIONS}/{session['id']}/updates", json={"summary": "b"}, headers=session_headers(b)
    )
    assert r.status_code == 201, r.text
    assert r.json()["session"]["actor_label"] == b["actor_label"]
    assert r.json()["update"]["actor_label"] == b["actor_label"]
    assert r.json()["session"]["agent_key"] == a["agent_key"]  # still the opener's session


async def test_the_list_is_newest_first_and_filters_by_writer_and_task(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    first = await opened(client, a, task_id="task_1")
    await trio.sleep(1)
    second = await opened(client, b, task_id="task_2")
    await trio.sleep(1)
    third = await opened(client, a)
    await trio.sleep(1)
    # An update moves its session to the front.
    await client.post(
        f"{SESSIONS}/{first['id']}/updates", json={"summary": "u"}, headers=session_headers(a)
    )

    async def listed(query: str, path: str = SESSIONS) -> list[str]:
        r = await client.get(f"{path}?{query}", headers=owner_headers())
        assert r.json()["room_id"] == ROOM
        return [s["id"] for s in r.json()["sessions"]]

    assert await listed("") == [first["id"], third["id"], second["id"]]
    assert await listed("open=false", f"/rooms/{ROOM}/reasoning") == await listed("")
    assert await listed(f"actor_label=%20{a['actor_label']}%20") == [first["id"], third["id"]]
    assert await listed("task_id=task_2") == [second["id"]]
    assert await listed(f"task_id=task_1&actor_label={b['actor_label']}") == []
    assert await listed("actor_label=%20&task_id=") == await listed("")


async def test_a_page_holds_50_unless_asked_for_1_to_200(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    first = await opened(client, a)
    for n in range(201):
        await client.post(
            f"{SESSIONS}/{first['id']}/updates",
            json={"summary": f"{n}"},
            headers=session_headers(a),
        )
    for _ in range(200):
        await opened(client, a)
    pages = {
        "": 50,
        "limit=1": 1,
        "limit=200": 200,
        "limit=201": 200,
        "limit=9999999": 200,
        "limit=0": 50,
        "limit=-3": 50,
        "limit=2x": 50,
        "limit=%EF%BC%93": 50,  # a digit, but not an ASCII one
        "limit=0000012": 12,
        "limit=100": 100,
        "limit=" + "9" * 5000: 200,  # past the digits Python turns into an int
        "limit=0000000": 50,
    }
    for query, shown in pages.items():
        sessions = await client.get(f"{SESSIONS}?{query}", headers=owner_headers())
        assert len(sessions.json()["sessions"]) == shown, query
        one = await client.get(f"{SESSIONS}/{first['id']}?{query}", headers=owner_headers())
        updates = one.json()["updates"]
        assert len(updates) == shown, query
        assert updates[0]["payload"]["summary"] == "200"  # the newest first
