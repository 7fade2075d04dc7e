"""Published captures (``_reports/_agent_work.py``): each bound at its edge, each field shown.

The bounds are the letagents API's: a preview of at most 480 KiB and 200
files a part, a review of at most 2 048 pages of 64 KiB of base64, every page
but the last full. On both stores, over the streaming transport, on
``autojump_clock`` (the room's times are ``EPOCH`` plus trio's clock).
"""

from __future__ import annotations

import hashlib
import json
from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing

from letagents_trio.room_server._reports._agent_work import (
    OTHER_REVIEW_TEXT,
    PAGE_INVALID_TEXT,
    PREVIEW_LIMIT,
    SOURCE_MISSING_TEXT,
    SOURCE_NOT_YOURS_TEXT,
    SUMMARY_INVALID_TEXT,
)
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

WORK = f"/rooms/{ROOM}/agent-work"
PAGE = 64 * 1024
DIGEST = "ab" * 32
SUMMARY: dict[str, Any] = {
    "version": 3,
    "contribution": {
        "files": [{"path": "a.py", "status": "modified"}],
        "additions": 3,
        "deletions": 1,
    },
}


async def posted(client: httpx2.AsyncClient, worker: dict[str, Any], text: str = "did it") -> str:
    r = await client.post(
        f"/rooms/{ROOM}/messages", json={"text": text}, headers=session_headers(worker)
    )
    assert r.status_code == 201, r.text
    message_id: str = r.json()["id"]
    return message_id


def page(
    index: int, total: int, data: str = "QUJD" * (PAGE // 4), digest: str = DIGEST
) -> dict[str, Any]:
    return {"digest": digest, "index": index, "total": total, "data": data}


async def test_an_attempt_shows_its_fields_and_counts_each_page_once(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    message = await posted(client, a)
    body = {"source_message_id": f" {message} ", "summary": SUMMARY}
    r = await client.post(
        WORK, json={**body, "review_page": page(0, 3)}, headers=session_headers(a)
    )
    assert r.status_code == 200, r.text
    work = r.json()["work"]
    assert work == {
        "attempt_id": work["attempt_id"],
        "room_id": ROOM,
        "agent_key": a["agent_key"],
        "actor_label": a["actor_label"],
        "source_message_id": message,
        "summary": SUMMARY,
        "review": {"digest": DIGEST, "total": 3, "received": 1, "complete": False},
        "created_at": iso(EPOCH),
        "updated_at": iso(EPOCH),
    }
    await trio.sleep(2)
    again = await client.post(
        WORK, json={**body, "review_page": page(0, 3)}, headers=session_headers(a)
    )
    assert again.json()["work"]["review"]["received"] == 1  # the same page again
    assert again.json()["work"]["updated_at"] == iso(EPOCH + 2000)
    assert again.json()["work"]["created_at"] == iso(EPOCH)
    last = await client.post(
        WORK, json={**body, "review_page": page(2, 3, "QUJD")}, headers=session_headers(a)
    )
    assert last.json()["work"]["review"] == {
        "digest": DIGEST,
        "total": 3,
        "received": 2,
        "complete": False,
    }
    middle = await client.post(
        WORK, json={**body, "review_page": page(1, 3)}, headers=session_headers(a)
    )
    assert middle.json()["work"]["review"]["complete"] is True
    assert middle.json()["work"]["attempt_id"] == work["attempt_id"]


async def test_a_capture_without_a_review_is_complete_and_shows_on_its_message(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    with_files, bare = await posted(client, a, "one"), await posted(client, a, "two")
    r = await client.post(
        WORK, json={"source_message_id": with_files, "summary": SUMMARY}, headers=session_headers(a)
    )
    assert r.json()["work"]["review"] == {
        "digest": None,
        "total": 0,
        "received": 0,
        "complete": True,
    }
    bare_work = await client.post(
        WORK,
        json={"source_message_id": bare, "summary": {"version": 3}, "review_page": None},
        headers=session_headers(a),
    )
    assert bare_work.status_code == 200, bare_work.text
    read = await client.get(f"/rooms/{ROOM}/messages", headers=session_headers(a))
    shown = {m["id"]: m.get("agent_work") for m in read.json()["messages"]}
    assert shown[with_files] == {
        "attempt_id": r.json()["work"]["attempt_id"],
        "files": SUMMARY["contribution"]["files"],
        "additions": 3,
        "deletions": 1,
        "review_complete": True,
    }
    assert shown[bare] == {
        "attempt_id": bare_work.json()["work"]["attempt_id"],
        "files": [],
        "additions": 0,
        "deletions": 0,
        "review_complete": True,
    }


@pytest.mark.parametrize(
    "source",
    [None, 7, "", "msg_", "msg_x1", "msg_999", "1" * 19, "9" * 19, "msg_" + "1" * 19, "msg_０"],
)
async def test_a_source_that_names_no_message_of_this_room_is_refused(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    source: object,
) -> None:
    a = await registered(client, registration(name="A"))
    await posted(client, a)
    r = await client.post(
        WORK, json={"source_message_id": source, "summary": SUMMARY}, headers=session_headers(a)
    )
    assert (r.status_code, r.json()["error"]) == (400, SOURCE_MISSING_TEXT)


async def test_a_source_is_named_with_or_without_its_prefix_and_must_be_the_workers_own(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    mine = await posted(client, a)
    bare = mine.removeprefix("msg_")
    r = await client.post(
        WORK, json={"source_message_id": bare, "summary": SUMMARY}, headers=session_headers(a)
    )
    assert (r.status_code, r.json()["work"]["source_message_id"]) == (200, mine)
    r = await client.post(
        WORK, json={"source_message_id": mine, "summary": SUMMARY}, headers=session_headers(b)
    )
    assert (r.status_code, r.json()["error"]) == (403, SOURCE_NOT_YOURS_TEXT)
    # Named in another room, the message names nothing there.
    elsewhere = await registered(client, registration(name="C"), room="room_elsewhere")
    r = await client.post(
        "/rooms/room_elsewhere/agent-work",
        json={"source_message_id": mine, "summary": SUMMARY},
        headers=session_headers(elsewhere),
    )
    assert r.status_code == 400


def files(count: int) -> list[dict[str, Any]]:
    return [{"path": f"f{n}.py", "status": "added"} for n in range(count)]


def padded(size: int) -> dict[str, Any]:
    """A version-3 summary whose compact JSON is exactly ``size`` bytes."""
    summary: dict[str, Any] = {"version": 3, "pad": ""}
    empty = len(json.dumps(summary, separators=(",", ":")).encode())
    summary["pad"] = "x" * (size - empty)
    return summary


@pytest.mark.parametrize(
    ("summary", "taken"),
    [
        ({"version": 3, "workspace": {"files": files(200)}, "contribution": None}, True),
        ({"version": 3, "workspace": {"files": files(201)}}, False),
        ({"version": 3, "contribution": {"files": files(201)}}, False),
        ({"version": 3, "contribution": {"files": {}}}, False),
        ({"version": 3, "workspace": {"no": "files"}}, False),
        ({"version": 3, "workspace": "ready"}, False),
        ({"version": "3"}, False),
        ({"version": 4}, False),
        ({}, False),
        ([3], False),
        (padded(PREVIEW_LIMIT), True),
        (padded(PREVIEW_LIMIT + 1), False),
    ],
    ids=[
        "200 files",
        "201 workspace files",
        "201 contribution files",
        "files not a list",
        "a part without files",
        "a part not an object",
        "version as text",
        "version 4",
        "no version",
        "not an object",
        "480 KiB",
        "480 KiB and 1 byte",
    ],
)
async def test_a_preview_is_a_version_3_summary_of_at_most_480_kib_and_200_files_a_part(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    summary: object,
    taken: bool,
) -> None:
    a = await registered(client, registration(name="A"))
    message = await posted(client, a)
    r = await client.post(
        WORK, json={"source_message_id": message, "summary": summary}, headers=session_headers(a)
    )
    if taken:
        assert r.status_code == 200, r.text
    else:
        assert (r.status_code, r.json()["error"]) == (400, SUMMARY_INVALID_TEXT)


FULL = "QUJD" * (PAGE // 4)


@pytest.mark.parametrize(
    ("review_page", "taken"),
    [
        (page(0, 1, "QUJD"), True),
        (page(0, 1, ""), False),
        (page(2047, 2048, "QQ=="), True),
        (page(0, 2049), False),
        (page(0, 0), False),
        (page(1, 1, "QUJD"), False),
        (page(-1, 2, "QUJD"), False),
        (page(0, 1, FULL), True),
        (page(0, 1, FULL + "QUJD"), False),
        (page(0, 2, FULL[:-4]), False),
        (page(0, 1, "QUJD==="), False),
        (page(0, 1, "QU JD"), False),
        (page(0, 1, "QUJD", digest="AB" * 32), False),
        (page(0, 1, "QUJD", digest="ab" * 31), False),
        ({**page(0, 1, "QUJD"), "index": True}, False),
        ({**page(0, 1, "QUJD"), "total": 1.0}, False),
        ({**page(0, 1, "QUJD"), "data": 7}, False),
        ({**page(0, 1, "QUJD"), "extra": 1}, False),
        ({k: v for k, v in page(0, 1, "QUJD").items() if k != "digest"}, False),
        ("QUJD", False),
    ],
    ids=[
        "one short page",
        "an empty page",
        "the 2048th page",
        "2049 pages",
        "no pages",
        "an index past the last",
        "a negative index",
        "a full last page",
        "a page over 64 KiB",
        "a short page before the last",
        "three pad characters",
        "a space",
        "an upper-case digest",
        "a short digest",
        "a boolean index",
        "a fractional total",
        "data not text",
        "an extra field",
        "no digest",
        "not an object",
    ],
)
async def test_a_review_page_is_checked_field_by_field(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    review_page: object,
    taken: bool,
) -> None:
    a = await registered(client, registration(name="A"))
    message = await posted(client, a)
    body = {"source_message_id": message, "summary": SUMMARY, "review_page": review_page}
    r = await client.post(WORK, json=body, headers=session_headers(a))
    if taken:
        assert r.status_code == 200, r.text
    else:
        assert (r.status_code, r.json()["error"]) == (400, PAGE_INVALID_TEXT)


async def test_a_page_of_another_review_is_refused_and_changes_nothing(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    message = await posted(client, a)
    body = {"source_message_id": message, "summary": SUMMARY}
    first = await client.post(
        WORK, json={**body, "review_page": page(0, 2)}, headers=session_headers(a)
    )
    other = hashlib.sha256(b"another review").hexdigest()
    r = await client.post(
        WORK, json={**body, "review_page": page(1, 2, "QUJD", other)}, headers=session_headers(a)
    )
    assert (r.status_code, r.json()["error"]) == (409, OTHER_REVIEW_TEXT)
    listed = await client.get(WORK, headers=owner_headers())
    assert listed.json()["work"][0]["review"] == first.json()["work"]["review"]


async def test_the_list_shows_the_50_newest_attempts(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    made, messages = [], []
    for n in range(51):
        message = await posted(client, a, f"capture {n}")
        messages.append(message)
        r = await client.post(
            WORK,
            json={"source_message_id": message, "summary": SUMMARY},
            headers=session_headers(a),
        )
        made.append(r.json()["work"]["attempt_id"])
        await trio.sleep(1)
    # A later page of an old attempt does not move it up the list.
    await client.post(
        WORK,
        json={
            "source_message_id": messages[0],
            "summary": SUMMARY,
            "review_page": page(0, 1, "QQ=="),
        },
        headers=session_headers(a),
    )
    listed = await client.get(WORK, headers=owner_headers())
    assert (listed.status_code, listed.json()["room_id"]) == (200, ROOM)
    assert [w["attempt_id"] for w in listed.json()["work"]] == made[::-1][:50]
    assert (await client.get(WORK)).status_code == 401
    stranger = await client.get(WORK, headers=owner_headers(OTHER_TOKEN))
    assert stranger.status_code == 403
    assert isinstance(stranger.json()["error"], str)
    assert stranger.json()["error"]
