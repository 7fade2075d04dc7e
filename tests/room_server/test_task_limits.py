"""The board's bounds at their edges (both stores): a task's title, description and source
message at N and N + 1 characters, and the page of ``GET …/tasks`` at 200 and 500.

At a bound the room takes the text; one character more is 400 with the
letagents API's text and changes nothing. A page is 200 tasks unless
``limit`` asks for fewer; a larger ``limit`` is 500 at most.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from letagents_trio.room_server._storage._rows import TaskRow

from .helpers import EPOCH, ROOM, person_headers, registered, registration, session_headers

if TYPE_CHECKING:
    import httpx2
    import trio.testing

    from letagents_trio.room_server import Room

TASKS = f"/rooms/{ROOM}/tasks"
BOUNDS = [
    ("title", "t" * 512, "t" * 513, "title must be at most 512 characters"),
    ("description", "d" * 100_000, "d" * 100_001, "description must be at most 100000 characters"),
]


@pytest.mark.parametrize(("field", "edge", "past", "text"), BOUNDS)
async def test_a_new_tasks_text_takes_n_characters_and_refuses_one_more(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    field: str,
    edge: str,
    past: str,
    text: str,
) -> None:
    a = await registered(client, registration(name="A"))
    body = {"title": "t", field: past}
    r = await client.post(TASKS, json=body, headers=session_headers(a))
    assert (r.status_code, r.json()) == (400, {"error": text})
    assert room.store.tasks_page(ROOM, after=0, limit=5, statuses=None) == []
    r = await client.post(TASKS, json={**body, field: edge}, headers=session_headers(a))
    assert (r.status_code, r.json()[field]) == (201, edge)


@pytest.mark.parametrize(("field", "edge", "past", "text"), BOUNDS)
async def test_an_edit_takes_n_characters_and_refuses_one_more(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    field: str,
    edge: str,
    past: str,
    text: str,
) -> None:
    a = await registered(client, registration(name="A"))
    r = await client.post(TASKS, json={"title": "t"}, headers=session_headers(a))
    task = r.json()["id"]
    before = room.store.get_task(ROOM, 1)
    r = await client.patch(f"{TASKS}/{task}", json={field: past}, headers=person_headers())
    assert (r.status_code, r.json()) == (400, {"error": text})
    assert room.store.get_task(ROOM, 1) == before
    r = await client.patch(f"{TASKS}/{task}", json={field: edge}, headers=person_headers())
    assert (r.status_code, r.json()[field]) == (200, edge)


async def test_a_source_message_is_at_most_256_characters(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    headers = session_headers(await registered(client, registration(name="A")))
    body = {"title": "t", "source_message_id": "m" * 257}
    r = await client.post(TASKS, json=body, headers=headers)
    assert (r.status_code, r.json()) == (400, {"error": "source_message_id must be a message id"})
    # 256 characters pass the bound and reach the check that it names a message of the room.
    r = await client.post(TASKS, json={**body, "source_message_id": "m" * 256}, headers=headers)
    assert (r.status_code, r.json()) == (
        400,
        {"error": "Invalid source message."},
    )
    r = await client.post(TASKS, json={**body, "source_message_id": ""}, headers=headers)
    assert (r.status_code, r.json()["source_message_id"]) == (201, None)


@pytest.mark.parametrize(
    ("query", "size", "more"),
    [
        ("", 200, True),
        ("limit=0", 200, True),
        ("limit=499", 499, True),
        ("limit=500", 500, True),
        ("limit=501", 500, True),
        ("limit=1000000", 500, True),
        ("limit=500&after=task_1", 500, False),
    ],
)
async def test_a_board_page_is_200_tasks_or_the_limit_up_to_500(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    query: str,
    size: int,
    more: bool,
) -> None:
    a = await registered(client, registration(name="A"))
    for n in range(501):
        room.store.add_task(
            TaskRow(room_id=ROOM, title=f"t{n}", created_by="A", created_at=EPOCH, updated_at=EPOCH)
        )
    r = await client.get(f"{TASKS}?{query}", headers=session_headers(a))
    assert r.status_code == 200, r.text
    page: dict[str, Any] = r.json()
    assert (len(page["tasks"]), page["has_more"]) == (size, more)
    first = 2 if "after" in query else 1
    assert [t["id"] for t in page["tasks"]] == [f"task_{n}" for n in range(first, first + size)]
