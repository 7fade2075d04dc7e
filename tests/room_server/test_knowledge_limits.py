"""Room memory and requests at their edges: every bound at N and N + 1, links Python cannot
parse, absent fields, the 200-record list, and an unknown room (both stores).

Each bound is the letagents API's; at the bound a record is saved (201), one
character more is refused 400 with the room's text and stores nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing

from .helpers import ROOM, owner_headers, registered, registration, session_headers
from .test_knowledge import ASK, FACT, post, read

if TYPE_CHECKING:
    import httpx2

    from letagents_trio.room_server import Room

# A link of exactly n characters.
LINK = "https://example.test/"


def link(n: int) -> str:
    return LINK + "a" * (n - len(LINK))


# (kind, field, value at the bound, value one past it, the refusal's text)
BOUNDS = [
    (
        "memory",
        "title",
        "t" * 160,
        "t" * 161,
        "Title must be nonempty text of at most 160 characters.",
    ),
    (
        "memory",
        "body",
        "b" * 8000,
        "b" * 8001,
        "Context must be nonempty text of at most 8000 characters.",
    ),
    (
        "attention",
        "recommendation",
        "r" * 2000,
        "r" * 2001,
        "Recommendation must be text of at most 2000 characters.",
    ),
    (
        "attention",
        "unblocks",
        "u" * 1000,
        "u" * 1001,
        "What this unblocks must be text of at most 1000 characters.",
    ),
    (
        "memory",
        "source_url",
        link(2048),
        link(2049),
        "Source URL must be text of at most 2048 characters.",
    ),
    (
        "memory",
        "client_id",
        "c" * 80,
        "c" * 81,
        "Use a stable client ID of 8–80 letters, numbers, underscores or hyphens.",
    ),
    (
        "memory",
        "client_id",
        "c" * 8,
        "c" * 7,
        "Use a stable client ID of 8–80 letters, numbers, underscores or hyphens.",
    ),
]


@pytest.mark.parametrize(("kind", "field", "edge", "past", "text"), BOUNDS)
async def test_each_bound_takes_n_and_refuses_one_more(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    kind: str,
    field: str,
    edge: str,
    past: str,
    text: str,
) -> None:
    a = await registered(client, registration(name="A"))
    base = FACT if kind == "memory" else ASK
    r = await post(client, kind, session_headers(a), {**base, field: past})
    assert (r.status_code, r.json()) == (400, {"error": text})
    assert room.store.room_knowledge(ROOM, kind) == []
    r = await post(client, kind, session_headers(a), {**base, field: edge})
    assert r.status_code == 201, r.text
    saved = r.json()["record"]
    assert saved["id" if field == "client_id" else field] == edge


@pytest.mark.parametrize(
    "url", ["http://[::1", "http://[zz]/", "http://\u2100/", "https://", "https:///path"]
)
async def test_a_link_python_cannot_parse_or_without_a_host_is_400(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room, url: str
) -> None:
    a = await registered(client, registration(name="A"))
    r = await post(client, "memory", session_headers(a), {**FACT, "source_url": url})
    assert (r.status_code, r.json()) == (
        400,
        {"error": "Source URL must be an HTTP or HTTPS link."},
    )
    assert room.store.room_knowledge(ROOM, "memory") == []


@pytest.mark.parametrize("url", ["http://example.test/a", "https://[::1]:8080/b?c#d"])
async def test_an_http_or_https_link_with_a_host_is_kept(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, url: str
) -> None:
    a = await registered(client, registration(name="A"))
    r = await post(client, "memory", session_headers(a), {**FACT, "source_url": url})
    assert (r.status_code, r.json()["record"]["source_url"]) == (201, url)


@pytest.mark.parametrize("url", ["https://user@x.test/", "https://:secret@x.test/"])
async def test_a_link_with_a_user_or_a_password_is_400(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room, url: str
) -> None:
    a = await registered(client, registration(name="A"))
    r = await post(client, "memory", session_headers(a), {**FACT, "source_url": url})
    text = "Source URL must be an HTTP or HTTPS link without credentials."
    assert (r.status_code, r.json()) == (400, {"error": text})
    assert room.store.room_knowledge(ROOM, "memory") == []


@pytest.mark.parametrize("absent", [{}, {"source_url": ""}, {"source_url": None}])
async def test_no_link_is_kept_as_none(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, absent: dict[str, Any]
) -> None:
    a = await registered(client, registration(name="A"))
    r = await post(client, "memory", session_headers(a), {**FACT, **absent})
    assert r.status_code == 201, r.text
    assert r.json()["record"]["source_url"] == ""


@pytest.mark.parametrize(
    ("source", "text"),
    [
        ("9" * 10, "The source message does not exist in this room."),
        ("9" * 11, "Invalid source message."),
        ("msg_" + "9" * 10, "The source message does not exist in this room."),
        ("01", "Invalid source message."),
        ("x" * 40, "Invalid source message."),
        ("x" * 41, "Source message must be text of at most 40 characters."),
    ],
)
async def test_a_cited_message_is_a_number_of_at_most_ten_digits(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    source: str,
    text: str,
) -> None:
    a = await registered(client, registration(name="A"))
    r = await post(client, "memory", session_headers(a), {**FACT, "source_message_id": source})
    assert (r.status_code, r.json()) == (400, {"error": text})
    assert room.store.room_knowledge(ROOM, "memory") == []


@pytest.mark.parametrize("kind", ["memory", "attention"])
async def test_an_empty_record_is_refused_with_the_apis_words(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, kind: str
) -> None:
    a = await registered(client, registration(name="A"))
    r = await post(client, kind, session_headers(a), {})
    assert (r.status_code, r.json()) == (400, {"error": "A record is required."})


async def test_a_list_shows_200_records_and_says_when_there_are_more(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a = await registered(client, registration(name="A"))
    headers = session_headers(a)
    for n in range(200):
        r = await post(client, "memory", headers, {**FACT, "client_id": f"fact-{n:04}"})
        assert r.status_code == 201, r.text
    page = await read(client, "memory", headers)
    assert (len(page["records"]), page["truncated"]) == (200, False)
    await trio.sleep(0.001)  # one millisecond later: the most recent record
    r = await post(client, "memory", headers, {**FACT, "client_id": "fact-last"})
    assert r.status_code == 201, r.text
    page = await read(client, "memory", headers)
    assert (len(page["records"]), page["truncated"]) == (200, True)
    assert page["records"][0]["id"] == "fact-last"  # the most recent first


async def test_an_unknown_room_is_404_for_every_knowledge_route(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    """Whoever asks, an unknown room is 404, before any check of who asks (a person
    answering a request there too, not 403)."""
    a = await registered(client, registration(name="A"))
    nowhere = "/rooms/room_nowhere"
    answers = [
        await client.get(f"{nowhere}/memory", headers=owner_headers()),
        await client.post(f"{nowhere}/memory", json=FACT, headers=owner_headers()),
        await client.post(
            f"{nowhere}/attention/ask-00001/respond",
            json={"response": "yes", "expected_version": 1},
            headers=owner_headers(),
        ),
        await client.post(
            f"{nowhere}/attention/ask-00001/respond",
            json={"response": "yes", "expected_version": 1},
            headers=session_headers(a),
        ),
    ]
    assert [r.status_code for r in answers] == [404, 404, 404, 404]
    assert len({r.text for r in answers}) == 1
