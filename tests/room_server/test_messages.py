"""Messages, the long poll (R7, §7.6) and the delivery connection it stands for."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing

from letagents_trio._protocol import liveness_notice_after_from_env, poll_max_from_env
from letagents_trio.mcp_server import ServerConfig
from letagents_trio.room_server import RoomConfig
from letagents_trio.room_server._messaging._messages import (
    Deliveries,
    parse_cursor,
    parse_page_size,
    parse_wait_ms,
)
from letagents_trio.room_server._wire import Refusal

from .helpers import ROOM, registered, registration, say, session_headers

if TYPE_CHECKING:
    import httpx2

    from letagents_trio.room_server import Room


async def poll(
    client: httpx2.AsyncClient, session: dict[str, Any], query: str = ""
) -> httpx2.Response:
    return await client.get(f"/rooms/{ROOM}/messages/poll{query}", headers=session_headers(session))


async def test_send_and_list_messages(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    s = await registered(client, registration(name="Alice"))
    for i in range(3):
        await say(client, s, f"m{i}")
    r = await client.get(f"/rooms/{ROOM}/messages?limit=2", headers=session_headers(s))
    page = r.json()
    assert [m["text"] for m in page["messages"]] == ["m0", "m1"]
    assert page["has_more"] is True
    assert page["room_id"] == ROOM
    assert page["messages"][0]["sender"] == "Alice"
    after = page["messages"][-1]["id"]
    r = await client.get(f"/rooms/{ROOM}/messages?after={after}", headers=session_headers(s))
    assert [m["text"] for m in r.json()["messages"]] == ["m2"]
    assert r.json()["has_more"] is False
    r = await client.get(f"/rooms/{ROOM}/messages?after=x", headers=session_headers(s))
    assert (r.status_code, r.json()) == (400, {"error": "after must be a message id"})
    r = await client.post(f"/rooms/{ROOM}/messages", json={"text": " "}, headers=session_headers(s))
    assert (r.status_code, r.json()) == (400, {"error": "text is required"})
    # Issue 29: the refusal of a long text says the limit.
    long = {"text": "x" * (64 * 1024 + 1)}
    r = await client.post(f"/rooms/{ROOM}/messages", json=long, headers=session_headers(s))
    assert (r.status_code, r.json()) == (
        413,
        {"error": "text is too long: at most 65536 characters"},
    )
    fits = {"text": "x" * (64 * 1024)}
    r = await client.post(f"/rooms/{ROOM}/messages", json=fits, headers=session_headers(s))
    assert r.status_code == 201


async def test_poll_wakes_on_a_new_message(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, nursery: trio.Nursery
) -> None:
    reader = await registered(client, registration(name="Reader"))
    writer = await registered(client, registration(name="Writer"))

    async def later() -> None:
        await trio.sleep(7)
        await say(client, writer, "hello")

    nursery.start_soon(later)
    r = await poll(client, reader, "?timeout=60000&include_prompt_only=1")
    assert trio.current_time() == 7
    assert [m["text"] for m in r.json()["messages"]] == ["hello"]


async def test_poll_returns_at_once_when_messages_wait(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    s = await registered(client, registration())
    await say(client, s, "already")
    r = await poll(client, s, "?after=0&timeout=60000")
    assert trio.current_time() == 0
    assert [m["text"] for m in r.json()["messages"]] == ["already"]


@pytest.mark.parametrize(("query", "returns_at"), [("", 30), ("?timeout=5000", 5)])
async def test_poll_timeouts(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    query: str,
    returns_at: float,
) -> None:
    s = await registered(client, registration())
    r = await poll(client, s, query)
    assert r.json()["messages"] == []
    assert trio.current_time() == returns_at


async def test_poll_is_capped(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    assert room.config.poll_max_ms == 180_000
    s = await registered(client, registration())
    await poll(client, s, "?timeout=86400000")
    assert trio.current_time() == 180


async def test_poll_returns_when_the_session_ends(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
) -> None:
    s = await registered(client, registration())

    async def end_later() -> None:
        await trio.sleep(3)
        room.end_session(s["session_id"])

    nursery.start_soon(end_later)
    r = await poll(client, s, "?timeout=60000")
    assert r.status_code == 200
    assert trio.current_time() == 3


async def test_an_open_poll_and_its_12_s_linger_are_a_delivery_connection(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
) -> None:
    s = await registered(client, registration())
    sid = s["session_id"]
    assert not room.delivery_connected(sid)
    nursery.start_soon(poll, client, s, "?timeout=10000")
    await trio.testing.wait_all_tasks_blocked()
    assert room.delivery_connected(sid)
    assert room.statistics().open_polls == 1
    await trio.sleep(10)
    await trio.testing.wait_all_tasks_blocked()
    assert room.statistics().open_polls == 0
    await trio.sleep(11.999)
    assert room.delivery_connected(sid)
    await trio.sleep(0.001)
    assert not room.delivery_connected(sid)


async def test_a_poll_whose_client_goes_away_stops_counting(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    s = await registered(client, registration())
    with trio.move_on_after(4):
        await poll(client, s, "?timeout=60000")
    await trio.testing.wait_all_tasks_blocked()
    assert room.statistics().open_polls == 0
    await trio.sleep(11.999)
    assert room.delivery_connected(s["session_id"])
    await trio.sleep(0.001)
    assert not room.delivery_connected(s["session_id"])


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, 180_000),
        ("", 180_000),
        ("   ", 180_000),
        ("abc", 180_000),
        ("nan", 180_000),
        ("inf", 180_000),
        ("Infinity", 180_000),
        ("1e999", 180_000),
        ("1e4", 180_000),
        ("3.6e7", 180_000),
        ("200_000", 180_000),
        ("999", 180_000),
        ("-5000", 180_000),
        ("\u0661\u0662\u0663\u0664", 180_000),
        ("1000", 1_000),
        ("2500.7", 2_500),
        ("5000ms", 5_000),
        (" \t+7000 ", 7_000),
        ("\ufeff\u30008000", 8_000),
        ("0x10000", 180_000),
        ("100000000", 86_400_000),
        ("9" * 5000, 86_400_000),
    ],
)
def test_poll_cap_from_env_as_parse_int_reads_it(raw: str | None, expected: int) -> None:
    """Node ``src/shared/poll-timeout-cap.ts``: unset or ``""`` is 180 000; otherwise
    ``Number.parseInt(raw, 10)``, ``NaN`` or below 1 000 is 180 000, clamped to
    86 400 000. ``inf`` crashed both programs at start (OverflowError), and ``1e4``,
    ``3.6e7``, ``200_000`` and ``5000ms`` gave other values. One function serves
    the room and the MCP server, so the cap agrees (PROTOCOL §7.6)."""
    env = {} if raw is None else {"LETAGENTS_POLL_MAX_MS": raw}
    assert poll_max_from_env(env) == expected
    assert RoomConfig.from_env(env).poll_max_ms == expected
    assert ServerConfig.from_env(env).poll_max_ms == expected


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        (None, 1_800_000),
        ("", 1_800_000),
        ("119999", 1_800_000),
        ("120000", 120_000),
        ("120000.9", 120_000),
        (" 1.5e5 ", 150_000),
        ("0x1D4C0", 120_000),
        ("+200000", 200_000),
        ("3600000", 3_600_000),
        ("3600001", 1_800_000),
        ("200_000", 1_800_000),
        ("200000ms", 1_800_000),
        ("Infinity", 1_800_000),
        ("nan", 1_800_000),
        ("\u0662\u0660\u0660\u0660\u0660\u0660", 1_800_000),
        ("x", 1_800_000),
    ],
)
def test_liveness_grace_from_env_as_number_reads_it(raw: str | None, expected: int) -> None:
    """Node ``resolveOfflineAnnounceAfterMs`` (``liveness-sweep.ts``): ``Number(value)``,
    finite and within 120 000-3 600 000, floored; else 1 800 000. ``Number`` refuses
    ``200_000`` and non-ASCII digits (Python's ``float`` took both)."""
    env = {} if raw is None else {"LETAGENTS_LIVENESS_NOTICE_AFTER_MS": raw}
    assert liveness_notice_after_from_env(env) == expected


# --- the pure checks and the delivery linger ---------------------------------------------------


@pytest.mark.parametrize(("after", "cursor"), [(None, 0), ("", 0), ("0", 0), ("42", 42)])
def test_a_cursor_is_a_message_id(after: str | None, cursor: int) -> None:
    assert parse_cursor(after) == cursor


@pytest.mark.parametrize("after", ["-1", "x", "1.5", "9" * 19])
def test_anything_else_is_no_cursor(after: str) -> None:
    with pytest.raises(Refusal) as caught:
        parse_cursor(after)
    assert caught.value.reply.status == 400


@pytest.mark.parametrize(
    ("limit", "size"), [(None, 50), ("", 50), ("0", 1), ("7", 7), ("9999999", 200)]
)
def test_a_page_is_clamped_to_1_to_200(limit: str | None, size: int) -> None:
    assert parse_page_size(limit) == size


@pytest.mark.parametrize(
    ("wait_ms", "wait"), [(None, 30_000), ("", 30_000), ("-5", -5), ("1e9", 1e9)]
)
def test_a_poll_timeout_is_any_number_capped_later(wait_ms: str | None, wait: float) -> None:
    assert parse_wait_ms(wait_ms) == wait


def test_delivery_lingers_12_s_after_the_last_poll_closed() -> None:
    deliveries = Deliveries()
    assert not deliveries.connected("s", 0)
    deliveries.poll_opened("s")
    deliveries.poll_opened("s")
    deliveries.poll_closed("s", 1_000)
    assert deliveries.connected("s", 60_000)  # one still open
    deliveries.poll_closed("s", 2_000)
    assert deliveries.open_polls() == 0
    assert deliveries.connected("s", 13_999)
    assert not deliveries.connected("s", 14_000)
