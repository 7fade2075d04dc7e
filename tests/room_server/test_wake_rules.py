"""Wake rules (``…/wake-rules``): timers on the room's clock, task transitions, expiry.

The room runs its background work (``Room.run``) in the test's nursery, on
``TrioClock(EPOCH)`` under ``autojump_clock``: a timer fires at exactly its
time, and every wake is a message from ``letagents`` addressed to the agent.
Both stores (the ``store`` fixture is parametrized).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx2
import pytest
import trio
import trio.testing

from letagents_trio.room_server import (
    MemoryStore,
    Room,
    RoomConfig,
    SQLiteStore,
    TrioClock,
    create_app,
)
from letagents_trio.room_server._wake._rules import DEFAULT_TTL_MS, parse_rule
from letagents_trio.room_server._wire import Refusal
from letagents_trio.testing._transport import open_streaming_transport

from .helpers import (
    EPOCH,
    OWNER_TOKEN,
    PERSON_TOKEN,
    ROOM,
    claimed_task,
    person_headers,
    registered,
    registration,
    session_headers,
)
from .wake_calls import RULES, add, wakes

if TYPE_CHECKING:
    from pathlib import Path


async def test_a_timer_wakes_its_agent_at_exactly_its_time_with_a_message_addressed_to_it(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
) -> None:
    a = await registered(client, registration(name="A"))
    await nursery.start(room.run)
    start = trio.current_time()
    r = await add(client, a, {"event": "timer", "arguments": {"after_ms": 45_000}, "note": "ci"})
    assert r.status_code == 201, r.text
    rule = r.json()["rule"]
    assert (rule["status"], rule["event"], rule["note"], r.json()["created"]) == (
        "active",
        "timer",
        "ci",
        True,
    )
    again = await add(client, a, {"event": "timer", "arguments": {"at": rule["arguments"]["at"]}})
    assert (again.status_code, again.json()["rule"]["id"]) == (200, rule["id"])
    await trio.sleep(44.999)
    assert await wakes(client, a) == []
    await trio.sleep(0.001)
    await trio.testing.wait_all_tasks_blocked()
    (wake,) = await wakes(client, a)
    assert trio.current_time() - start == pytest.approx(45.0)
    assert wake["sender"] == "letagents"
    assert wake["addressed_to"] == {"agent_key": a["agent_key"], "reason": "wake_rule"}
    assert wake["text"].startswith(f"Your wake rule {rule['id']} fired: Scheduled check-in.")
    assert "Your note: ci" in wake["text"]
    listed = (await client.get(RULES, headers=session_headers(a))).json()
    assert listed["active"] == []
    (done,) = listed["recent"]
    assert (done["id"], done["status"], done["fire_count"]) == (rule["id"], "fired", 1)
    assert done["wake_message_id"] == wake["id"]


async def test_a_task_rule_fires_from_the_tasks_own_transition(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    task_id, _ = await claimed_task(client, a)
    r = await add(client, a, {"event": "task.status_changed", "arguments": {"task_id": task_id}})
    assert r.status_code == 201, r.text
    rule = r.json()["rule"]
    patched = await client.patch(
        f"/rooms/{ROOM}/tasks/{task_id}", json={"status": "in_progress"}, headers=session_headers(a)
    )
    assert patched.status_code == 200, patched.text
    # No background loop runs here: the board's own write fired the rule.
    (wake,) = await wakes(client, a)
    assert wake["text"].startswith(
        f"Your wake rule {rule['id']} fired: {task_id} moved to in progress."
    )
    assert f"- {task_id}: assigned → in_progress" in wake["text"]
    assert wake["display_text"] == f"{a['display_name']} woke up · {task_id} moved to in progress"


async def test_a_task_rule_with_to_waits_for_those_and_ends_when_the_task_ends(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    task_id, _ = await claimed_task(client, a)
    tasks = f"/rooms/{ROOM}/tasks/{task_id}"
    already = await add(
        client,
        a,
        {"event": "task.status_changed", "arguments": {"task_id": task_id, "to": ["assigned"]}},
    )
    assert (already.status_code, already.json()["error"]) == (
        409,
        f"{task_id} is already assigned. There is nothing to wait for.",
    )
    r = await add(
        client,
        a,
        {"event": "task.status_changed", "arguments": {"task_id": task_id, "to": ["in_review"]}},
    )
    rule = r.json()["rule"]
    await client.patch(tasks, json={"status": "in_progress"}, headers=session_headers(a))
    assert await wakes(client, a) == []  # not what it waits for
    r = await client.patch(tasks, json={"status": "cancelled"}, headers=person_headers())
    assert r.status_code == 200, r.text
    (wake,) = await wakes(client, a)
    assert wake["text"].startswith(
        f"Your wake rule {rule['id']} ended because {task_id} is cancelled."
    )
    (ended,) = (await client.get(RULES, headers=session_headers(a))).json()["recent"]
    assert (ended["status"], ended["ended_reason"]) == ("retired", f"{task_id} is cancelled")


async def test_a_repeating_rule_wakes_at_most_once_a_minute(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
) -> None:
    a = await registered(client, registration(name="A"))
    task_id, _ = await claimed_task(client, a)
    tasks = f"/rooms/{ROOM}/tasks/{task_id}"
    await nursery.start(room.run)
    rule = {"event": "task.status_changed", "arguments": {"task_id": task_id}, "repeat": True}
    assert (await add(client, a, rule)).status_code == 201
    await client.patch(tasks, json={"status": "in_progress"}, headers=session_headers(a))
    start = trio.current_time()
    await client.patch(tasks, json={"status": "blocked"}, headers=session_headers(a))
    assert len(await wakes(client, a)) == 1  # the second change waits out the minute
    await trio.sleep(59.999)
    assert len(await wakes(client, a)) == 1
    await trio.sleep(0.001)
    await trio.testing.wait_all_tasks_blocked()
    woken = await wakes(client, a)
    assert len(woken) == 2
    assert trio.current_time() - start == pytest.approx(60.0)
    assert "moved to blocked" in woken[1]["text"]


async def test_rules_expire_with_a_wake_and_github_rules_are_kept_but_never_fire(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
) -> None:
    a = await registered(client, registration(name="A"))
    await nursery.start(room.run)
    r = await add(client, a, {"event": "github.pr_closed", "arguments": {"pr": "#12"}})
    assert r.status_code == 201, r.text
    rule = r.json()["rule"]
    assert rule["arguments"] == {"pr": 12}
    await trio.sleep(DEFAULT_TTL_MS / 1000 - 0.001)
    assert await wakes(client, a) == []
    await trio.sleep(0.001)
    await trio.testing.wait_all_tasks_blocked()
    (wake,) = await wakes(client, a)
    assert wake["text"].startswith(f"Your wake rule {rule['id']} expired without firing.")
    assert (
        wake["display_text"]
        == f"{a['display_name']} stopped waiting · #12 to close didn't happen in time"
    )


async def test_cancel_is_the_agents_own_or_an_admins(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    rule = (await add(client, a, {"event": "timer", "arguments": {"after_ms": 60_000}})).json()[
        "rule"
    ]
    cancel = f"{RULES}/{rule['id']}/cancel"
    by_b = await client.post(cancel, json={}, headers=session_headers(b))
    assert (by_b.status_code, by_b.json()["error"]) == (
        403,
        "You can cancel only your own wake rules.",
    )
    missing = await client.post(f"{RULES}/wake_0/cancel", json={}, headers=session_headers(a))
    assert (missing.status_code, missing.json()["error"]) == (
        404,
        "Wake rule not found in this room.",
    )
    mine = await client.post(cancel, json={}, headers=session_headers(a))
    assert mine.status_code == 200, mine.text
    assert mine.json()["rule"]["cancelled_by"]["kind"] == "agent"
    twice = await client.post(cancel, json={}, headers=person_headers())
    assert (twice.status_code, twice.json()["error"]) == (409, "This wake rule already ended.")


@pytest.mark.parametrize(
    ("rule", "text"),
    [
        ({"event": "cron"}, "event must be one of timer, task.status_changed,"),
        (
            {"event": "timer", "arguments": {"after_ms": 1000}},
            "A timer must be at least 30 seconds away.",
        ),
        (
            {"event": "timer", "arguments": {"at": "2020-01-01T00:00:00Z"}},
            "A timer must be at least",
        ),
        (
            {"event": "timer", "arguments": {"after_ms": 8 * 86_400_000}},
            "A timer can be at most 7 days away.",
        ),
        ({"event": "timer", "arguments": {"at": "soon"}}, "at must be an ISO 8601 time."),
        (
            {"event": "timer", "arguments": {"after_ms": 60_000}, "repeat": True},
            "A timer fires once",
        ),
        (
            {"event": "task.status_changed", "arguments": {"task_id": "41"}},
            "task_id must be a task id",
        ),
        (
            {"event": "github.pr_closed", "arguments": {}},
            "github.pr_closed needs exactly one of pr, mine.",
        ),
        ({"event": "timer", "arguments": {"after_ms": 60_000, "x": 1}}, "timer does not accept x."),
    ],
)
def test_bad_rules_are_refused_with_the_cause(rule: dict[str, Any], text: str) -> None:
    with pytest.raises(Refusal) as refused:
        parse_rule(rule, EPOCH)
    assert refused.value.reply.status == 400
    assert refused.value.reply.body["error"].startswith(text)


async def test_rules_survive_a_restart_on_sqlite_and_a_missed_timer_fires_late(
    autojump_clock: trio.testing.MockClock, tmp_path: Path
) -> None:
    def open_room(store: SQLiteStore | MemoryStore) -> Room:
        return Room(
            store=store,
            clock=TrioClock(EPOCH),
            owner_tokens={OWNER_TOKEN: "owner"},
            person_tokens={PERSON_TOKEN: "owner"},  # the room's admin moves tasks
            config=RoomConfig(),
        )

    path = tmp_path / "room.db"
    first = open_room(SQLiteStore(path))
    async with (
        open_streaming_transport(create_app(first)) as transport,
        httpx2.AsyncClient(transport=transport, base_url="http://room.test") as client,
    ):
        a = await registered(client, registration(name="A"))
        r = await add(client, a, {"event": "timer", "arguments": {"after_ms": 60_000}})
        rule = r.json()["rule"]
    first.store.close()
    await trio.sleep(90)  # the room is down when the timer comes due
    second = open_room(SQLiteStore(path))
    async with (
        trio.open_nursery() as nursery,
        open_streaming_transport(create_app(second)) as transport,
        httpx2.AsyncClient(transport=transport, base_url="http://room.test") as client,
    ):
        await nursery.start(second.run)
        await trio.testing.wait_all_tasks_blocked()
        (wake,) = await wakes(client, a)
        assert wake["text"].startswith(f"Your wake rule {rule['id']} fired")
        nursery.cancel_scope.cancel(reason="test done")
    second.store.close()
