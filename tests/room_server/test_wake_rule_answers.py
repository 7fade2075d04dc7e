"""What the wake-rule routes answer: a rule whole, who cancelled it, the limits at their edge.

An agent (or the MCP tool that shows its answer) reads a rule as the letagents
API renders it (``toWakeRule``): every field, its times as ``toISOString``
writes them. The listing is what an agent resumes from, so which rules it
shows and in what order is held here, with the room's bounds at their edge:
20 active rules an agent, the 50 most recently ended, ended within 7 days.
Both stores (the ``store`` fixture is parametrized); the room's clock is
``TrioClock(EPOCH)`` under ``autojump_clock``.
"""

from __future__ import annotations

import re
from typing import Any

import httpx2
import trio
import trio.testing

from letagents_trio.room_server import Room, RoomConfig, RoomStore, TrioClock, create_app
from letagents_trio.room_server._auth._accounts import account_id
from letagents_trio.room_server._board._tasks import ADMIN_TEXT
from letagents_trio.room_server._wire import iso
from letagents_trio.testing._transport import open_streaming_transport

from .helpers import (
    EPOCH,
    OTHER_PERSON_TOKEN,
    OWNER_TOKEN,
    ROOM,
    claimed_task,
    owner_headers,
    patch_task,
    person_headers,
    registered,
    registration,
    session_headers,
)
from .wake_calls import RULES, add, added, cancel, listed, wakes

LIMIT_TEXT = (
    "You already have 20 active wake rules in this room. Cancel one you no longer need first."
)


def closed(pr: int) -> dict[str, Any]:
    """A rule that never fires here (the reference room hears nothing from GitHub)."""
    return {"event": "github.pr_closed", "arguments": {"pr": pr}}


async def listing(client: httpx2.AsyncClient, **query: str) -> Any:
    return await listed(client, owner_headers(), **query)


async def test_a_new_rule_is_answered_whole_and_a_fired_one_says_when_and_by_which_wake(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
) -> None:
    a = await registered(client, registration(name="A"))
    await nursery.start(room.run)
    made = room.clock.now_ms()
    r = await add(client, a, {"event": "timer", "arguments": {"after_ms": 45_000}, "note": " ci "})
    assert r.status_code == 201, r.text
    rule = r.json()["rule"]
    assert re.fullmatch(r"wake_[0-9a-f]{20}", rule["id"])
    whole = {
        "id": rule["id"],
        "room_id": ROOM,
        "agent_key": a["agent_key"],
        "agent_name": a["display_name"],
        "event": "timer",
        "arguments": {"at": iso(made + 45_000)},
        "repeat": False,
        "expires_at": iso(made + 45_000 + 600_000),  # a timer's 10-minute grace
        "note": "ci",
        "status": "active",
        "created_at": iso(made),
        "updated_at": iso(made),
        "fire_count": 0,
        "last_fired_at": None,
        "wake_message_id": None,
        "cancelled_by": None,
        "ended_reason": None,
    }
    assert r.json() == {"rule": whole, "created": True}
    await trio.sleep(45)
    await trio.testing.wait_all_tasks_blocked()
    (wake,) = await wakes(client, a)
    fired = iso(made + 45_000)
    after = {
        **whole,
        "status": "fired",
        "fire_count": 1,
        "last_fired_at": fired,
        "updated_at": fired,
        "wake_message_id": wake["id"],
    }
    assert await listing(client) == {"room_id": ROOM, "active": [], "recent": [after]}


async def test_who_cancelled_a_rule_is_kept_with_it_an_agent_or_a_person(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    own = await added(client, a, closed(1))
    other = await added(client, b, closed(1))
    await trio.sleep(10)
    by_agent = await cancel(client, own["id"], session_headers(a))
    assert by_agent.status_code == 200, by_agent.text
    now = iso(room.clock.now_ms())
    assert by_agent.json() == {
        "rule": {
            **own,
            "status": "cancelled",
            "updated_at": now,
            "cancelled_by": {"kind": "agent", "id": a["agent_key"], "label": a["actor_label"]},
        }
    }
    by_person = await cancel(client, other["id"], person_headers())
    assert by_person.status_code == 200, by_person.text
    assert by_person.json()["rule"]["cancelled_by"] == {
        "kind": "human",
        "id": account_id("owner"),
        "label": "owner",
    }
    # An owner's token alone reads the rules but cancels none: a person signs in to.
    third = await added(client, b, closed(2))
    refused = await cancel(client, third["id"], owner_headers())
    assert refused.status_code == 403, refused.text
    assert (await listing(client))["active"] == [third]


async def test_an_agent_has_at_most_20_active_rules_and_asking_again_gives_back_the_one_it_has(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    rules = [await added(client, a, closed(pr)) for pr in range(1, 21)]
    over = await add(client, a, closed(21))
    assert (over.status_code, over.json()) == (409, {"error": LIMIT_TEXT})
    again = await add(client, a, closed(5))  # the same thing, at the limit: the rule it has
    assert (again.status_code, again.json()) == (200, {"rule": rules[4], "created": False})
    await added(client, b, closed(21))  # the limit is each agent's
    assert (await cancel(client, rules[0]["id"], session_headers(a))).status_code == 200
    await added(client, a, closed(21))  # a cancelled rule counts no more
    ended_again = await add(client, a, closed(1))  # nor is it the rule asked for again
    assert (ended_again.status_code, ended_again.json()) == (409, {"error": LIMIT_TEXT})


async def test_the_listing_shows_active_rules_by_next_check_and_ended_ones_newest_first(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    later = await added(client, a, {"event": "timer", "arguments": {"after_ms": 120_000}})
    sooner = await added(client, a, {"event": "timer", "arguments": {"after_ms": 60_000}})
    day = await added(client, a, closed(1))  # checked at its expiry, in 24 hours
    first = await added(client, a, closed(2))
    second = await added(client, a, closed(3))
    of_b = await added(client, b, closed(1))
    for rule in (first, second):
        await trio.sleep(1)
        assert (await cancel(client, rule["id"], session_headers(a))).status_code == 200
    mine = await listing(client, agent_key=f" {a['agent_key']} ")
    assert [r["id"] for r in mine["active"]] == [sooner["id"], later["id"], day["id"]]
    assert [r["id"] for r in mine["recent"]] == [second["id"], first["id"]]
    everyone = await listing(client)
    assert of_b["id"] in [r["id"] for r in everyone["active"]]
    assert len(everyone["active"]) == 4


async def test_the_listing_keeps_the_50_newest_ended_rules_of_the_last_7_days(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    ended = []
    for pr in range(1, 52):
        rule = await added(client, a, closed(pr))
        await trio.sleep(1)
        assert (await cancel(client, rule["id"], session_headers(a))).status_code == 200
        ended.append(rule["id"])
    newest_first = ended[::-1]
    assert [r["id"] for r in (await listing(client))["recent"]] == newest_first[:50]
    # The second rule ended 2 s after the room's start (EPOCH): seven days on it is
    # still shown, a millisecond later it is not.
    week_ms = 7 * 24 * 3600 * 1000
    await trio.sleep((EPOCH + 2_000 + week_ms - 1 - room.clock.now_ms()) / 1000)
    assert [r["id"] for r in (await listing(client))["recent"]] == newest_first[:50]
    await trio.sleep(0.001)
    assert [r["id"] for r in (await listing(client))["recent"]] == newest_first[:49]


async def test_a_task_rule_needs_a_task_on_the_board_that_is_not_yet_where_it_waits(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    missing = await add(
        client, a, {"event": "task.status_changed", "arguments": {"task_id": "task_99"}}
    )
    assert (missing.status_code, missing.json()) == (
        404,
        {"error": "task_99 is not on this room's board."},
    )
    task_id, _ = await claimed_task(client, a)
    moved = await patch_task(client, session_headers(a), task_id, status="in_progress")
    assert moved.status_code == 200, moved.text
    rule = {
        "event": "task.status_changed",
        "arguments": {"task_id": task_id, "to": ["in_progress"]},
    }
    already = await add(client, a, rule)
    assert (already.status_code, already.json()) == (
        409,
        {"error": f"{task_id} is already in progress. There is nothing to wait for."},
    )


async def test_the_same_arguments_for_another_event_are_another_rule(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    closing = await added(client, a, closed(1))
    review = await added(client, a, {"event": "github.review_submitted", "arguments": {"pr": 1}})
    assert review["id"] != closing["id"]


async def test_another_owners_person_neither_lists_nor_cancels_a_rooms_rules(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    rule = await added(client, a, closed(1))
    outsider = person_headers(OTHER_PERSON_TOKEN)
    listed = await client.get(RULES, headers=outsider)
    assert (listed.status_code, listed.json()) == (403, {"error": ADMIN_TEXT})
    cancelled = await cancel(client, rule["id"], outsider)
    assert (cancelled.status_code, cancelled.json()) == (403, {"error": ADMIN_TEXT})


async def test_a_room_with_a_shorter_least_lead_takes_timers_that_soon(
    autojump_clock: trio.testing.MockClock, store: RoomStore
) -> None:
    room = Room(
        store=store,
        clock=TrioClock(EPOCH),
        owner_tokens={OWNER_TOKEN: "owner"},
        config=RoomConfig(wake_min_lead_ms=5_000),
    )
    async with (
        open_streaming_transport(create_app(room)) as transport,
        httpx2.AsyncClient(transport=transport, base_url="http://room.test") as client,
    ):
        a = await registered(client, registration(name="A"))
        await added(client, a, {"event": "timer", "arguments": {"after_ms": 5_000}})
        soon = await add(client, a, {"event": "timer", "arguments": {"after_ms": 4_999}})
        assert (soon.status_code, soon.json()) == (
            400,
            {"error": "A timer must be at least 5 seconds away."},
        )
