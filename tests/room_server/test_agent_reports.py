"""Reasoning sessions, published captures (``…/agent-work``) and a message's client id.

On both stores (the ``store`` fixture is parametrized), over the streaming
transport, on ``autojump_clock``.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Any

from .helpers import ROOM, owner_headers, registered, registration, session_headers

if TYPE_CHECKING:
    import httpx2
    import trio.testing

    from letagents_trio.room_server import Room

SUMMARY: dict[str, Any] = {
    "version": 3,
    "contribution": {"files": [{"path": "a.py", "status": "modified"}], "additions": 1},
}


async def test_a_reasoning_snapshot_replaces_the_latest_and_keeps_its_history(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    sessions = f"/rooms/{ROOM}/reasoning-sessions"
    r = await client.post(sessions, json={"summary": " reading "}, headers=session_headers(a))
    assert r.status_code == 201, r.text
    opened = r.json()["session"]
    assert (opened["summary"], opened["actor_label"]) == ("reading", a["actor_label"])
    r = await client.post(
        f"{sessions}/{opened['id']}/updates",
        json={"summary": "found it", "status": "reviewing", "confidence": 0.5},
        headers=session_headers(a),
    )
    assert r.status_code == 201, r.text
    listed = (await client.get(f"/rooms/{ROOM}/reasoning", headers=owner_headers())).json()
    (latest,) = listed["sessions"]
    assert (latest["summary"], latest["status"]) == ("found it", "reviewing")
    one = (await client.get(f"{sessions}/{opened['id']}", headers=session_headers(a))).json()
    assert [u["payload"]["summary"] for u in one["updates"]] == ["found it", "reading"]
    for body, text in [
        ({"summary": " "}, "summary is required"),
        ({"summary": "s", "status": "sleeping"}, "status must be one of: idle, working"),
        ({"summary": "s", "confidence": 2}, "confidence must be a number between 0 and 1"),
    ]:
        bad = await client.post(sessions, json=body, headers=session_headers(a))
        assert (bad.status_code, bad.json()["error"][: len(text)]) == (400, text)
    missing = await client.post(
        f"{sessions}/nope/updates", json={"summary": "s"}, headers=session_headers(a)
    )
    assert (missing.status_code, missing.json()["error"]) == (404, "Reasoning session not found")
    by_owner = await client.post(sessions, json={"summary": "s"}, headers=owner_headers())
    assert by_owner.status_code == 403  # a worker session writes


async def test_a_client_message_id_posts_once(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    body = {"text": "summary", "client_message_id": "mcp-workspace:1"}
    first = await client.post(f"/rooms/{ROOM}/messages", json=body, headers=session_headers(a))
    again = await client.post(f"/rooms/{ROOM}/messages", json=body, headers=session_headers(a))
    assert (first.status_code, again.status_code) == (201, 201)
    assert again.json()["id"] == first.json()["id"]
    long = {"text": "x", "client_message_id": "c" * 201}
    r = await client.post(f"/rooms/{ROOM}/messages", json=long, headers=session_headers(a))
    assert r.status_code == 400


def page(data: str, index: int, total: int, digest: str) -> dict[str, Any]:
    return {"digest": digest, "index": index, "total": total, "data": data}


async def test_a_capture_is_one_attempt_per_message_and_its_files_show_on_the_message(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    said = await client.post(
        f"/rooms/{ROOM}/messages", json={"text": "did it"}, headers=session_headers(a)
    )
    message_id = said.json()["id"]
    work = f"/rooms/{ROOM}/agent-work"
    data = "QUJD" * (64 * 1024 // 4)
    digest = hashlib.sha256(data.encode()).hexdigest()
    body = {"source_message_id": message_id, "summary": SUMMARY}
    r = await client.post(
        work, json={**body, "review_page": page(data, 0, 2, digest)}, headers=session_headers(a)
    )
    assert r.status_code == 200, r.text
    first = r.json()["work"]
    assert first["review"] == {"digest": digest, "total": 2, "received": 1, "complete": False}
    r = await client.post(
        work, json={**body, "review_page": page("QUJD", 1, 2, digest)}, headers=session_headers(a)
    )
    second = r.json()["work"]
    assert (second["attempt_id"], second["review"]["complete"]) == (first["attempt_id"], True)
    other = await client.post(
        work, json={**body, "review_page": page("QUJD", 1, 2, "0" * 64)}, headers=session_headers(a)
    )
    assert other.status_code == 409
    not_mine = await client.post(work, json=body, headers=session_headers(b))
    assert not_mine.status_code == 403
    for bad in (
        {**body, "summary": {"version": 2}},
        {**body, "review_page": page("QUJD", 0, 2, digest)},  # a short page before the last
        {**body, "review_page": page("not base64!", 0, 1, digest)},
        {**body, "source_message_id": "999"},
    ):
        assert (await client.post(work, json=bad, headers=session_headers(a))).status_code == 400
    read = await client.get(f"/rooms/{ROOM}/messages", headers=session_headers(b))
    (shown,) = [m for m in read.json()["messages"] if m["id"] == message_id]
    assert shown["agent_work"]["files"] == SUMMARY["contribution"]["files"]
    listed = (await client.get(work, headers=session_headers(b))).json()["work"]
    assert [w["attempt_id"] for w in listed] == [first["attempt_id"]]
