"""When the room wakes an agent, and what the rule looks like after each wake.

A timer fires at its time, or within its 10-minute grace when the room was
down, and expires after it; a task rule fires for its own task only, for a
move it waits for, even to a final status; a repeating rule stays active
(counting its wakes) until its expiry, which wakes the agent once more; a
wake the storage refused is tried again 5 s later, the rule unchanged until
then. The room runs on ``TrioClock(EPOCH)`` under ``autojump_clock``, so
every time here is exact.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing

from letagents_trio.room_server import SQLiteStore
from letagents_trio.room_server._wire import iso

from .helpers import (
    claimed_task,
    patch_task,
    person_headers,
    registered,
    registration,
    session_headers,
)
from .test_full_disk import fill
from .wake_calls import added, listed, wakes

if TYPE_CHECKING:
    import httpx2

    from letagents_trio.room_server import Room

GRACE_S = 600


async def rules(client: httpx2.AsyncClient, session: dict[str, Any]) -> Any:
    return await listed(client, session_headers(session))


async def move(client: httpx2.AsyncClient, session: dict[str, Any], task_id: str, to: str) -> None:
    """``session`` moves its task ``to`` a status, which the board must take."""
    moved = await patch_task(client, session_headers(session), task_id, status=to)
    assert moved.status_code == 200, moved.text


def repeating(task_id: str, expires_ms: int | None = None) -> dict[str, Any]:
    """A repeating rule on ``task_id``'s moves, expiring at ``expires_ms`` (epoch ms)."""
    rule = {"event": "task.status_changed", "arguments": {"task_id": task_id}, "repeat": True}
    return rule if expires_ms is None else {**rule, "expires_at": iso(expires_ms)}


@pytest.mark.parametrize(
    ("late_s", "status", "opening"),
    [
        (GRACE_S - 0.001, "fired", "fired: Scheduled check-in."),
        (
            GRACE_S,
            "expired",
            "expired without firing. You were waiting until 2027-01-15 08:01 UTC.",
        ),
    ],
)
async def test_a_missed_timer_fires_within_its_grace_and_expires_after_it(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
    late_s: float,
    status: str,
    opening: str,
) -> None:
    a = await registered(client, registration(name="A"))
    rule = await added(client, a, {"event": "timer", "arguments": {"after_ms": 60_000}})
    await trio.sleep(60 + late_s)  # the room's loop is not running: the room is down
    await nursery.start(room.run)
    await trio.testing.wait_all_tasks_blocked()
    (wake,) = await wakes(client, a)
    assert wake["text"].startswith(f"Your wake rule {rule['id']} {opening}")
    (ended,) = (await rules(client, a))["recent"]
    assert (ended["status"], ended["fire_count"]) == (status, 1)
    assert ended["last_fired_at"] == iso(room.clock.now_ms())


async def test_a_task_rule_wakes_for_its_own_task_only_and_for_a_final_move_it_waits_for(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    b = await registered(client, registration(name="B"))
    watched, _ = await claimed_task(client, a, "watched")
    other, _ = await claimed_task(client, b, "other")
    final = {"event": "task.status_changed", "arguments": {"task_id": watched, "to": ["cancelled"]}}
    rule = await added(client, a, final)
    any_move = await added(
        client, b, {"event": "task.status_changed", "arguments": {"task_id": watched}}
    )
    await move(client, b, other, "in_progress")
    assert await wakes(client, a) == []
    finished = await patch_task(client, person_headers(), watched, status="cancelled")
    assert finished.status_code == 200, finished.text
    woken = await wakes(client, a)
    for_a = [m for m in woken if m["addressed_to"]["agent_key"] == a["agent_key"]]
    for_b = [m for m in woken if m["addressed_to"]["agent_key"] == b["agent_key"]]
    assert [m["display_text"] for m in for_a] == [
        f"{a['display_name']} woke up · {watched} moved to cancelled"
    ]
    assert [m["display_text"] for m in for_b] == [
        f"{b['display_name']} woke up · {watched} moved to cancelled"
    ]
    recent = {r["id"]: r for r in (await rules(client, a))["recent"]}
    assert (recent[rule["id"]]["status"], recent[rule["id"]]["ended_reason"]) == ("fired", None)
    assert recent[any_move["id"]]["status"] == "fired"


async def test_a_repeating_rule_stays_active_counting_its_wakes_and_its_expiry_wakes_once_more(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
) -> None:
    a = await registered(client, registration(name="A"))
    task_id, _ = await claimed_task(client, a)
    await nursery.start(room.run)
    expires = room.clock.now_ms() + 300_000
    rule = await added(client, a, repeating(task_id, expires))
    await trio.sleep(10)
    await move(client, a, task_id, "in_progress")
    fired_at = iso(room.clock.now_ms())
    (watching,) = (await rules(client, a))["active"]
    assert (watching["id"], watching["status"], watching["fire_count"]) == (rule["id"], "active", 1)
    assert (watching["last_fired_at"], watching["ended_reason"]) == (fired_at, None)
    (first,) = await wakes(client, a)
    assert first["text"].endswith(
        f"This rule keeps watching until {iso(expires)}. Cancel it with cancel_wake_rule"
        " when you no longer need it."
    )
    # Nothing more moves: the next wake is the expiry's, at exactly its time.
    await trio.sleep((expires - room.clock.now_ms()) / 1000 - 0.001)
    assert len(await wakes(client, a)) == 1
    await trio.sleep(0.001)
    await trio.testing.wait_all_tasks_blocked()
    (_, last) = await wakes(client, a)
    assert last["text"].startswith(
        f"Your repeating wake rule {rule['id']} reached its expiry after waking you 1 time."
    )
    (ended,) = (await rules(client, a))["recent"]
    assert (ended["status"], ended["fire_count"]) == ("expired", 2)
    assert ended["wake_message_id"] == last["id"]
    assert ended["last_fired_at"] == ended["updated_at"] == iso(expires)


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
async def test_a_wake_the_storage_refused_is_tried_again_five_seconds_later(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
) -> None:
    a = await registered(client, registration(name="A"))
    rule = await added(client, a, {"event": "timer", "arguments": {"after_ms": 60_000}})
    await nursery.start(room.run)
    store = room.store
    assert isinstance(store, SQLiteStore)
    due = trio.current_time() + 60
    store._db.execute("PRAGMA query_only = 1")  # every write refused, as on a broken disk
    await trio.sleep_until(due + 1)
    store._db.execute("PRAGMA query_only = 0")
    assert await wakes(client, a) == []
    (waiting,) = (await rules(client, a))["active"]
    assert (waiting["id"], waiting["fire_count"]) == (rule["id"], 0)
    await trio.sleep_until(due + 5 - 0.001)
    assert await wakes(client, a) == []
    await trio.sleep_until(due + 5)
    await trio.testing.wait_all_tasks_blocked()
    (wake,) = await wakes(client, a)
    assert wake["text"].startswith(f"Your wake rule {rule['id']} fired: Scheduled check-in.")


async def test_a_timer_fires_at_exactly_its_time_when_the_room_looked_just_before(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
) -> None:
    a = await registered(client, registration(name="A"))
    await nursery.start(room.run)
    due = trio.current_time() + 45
    rule = await added(client, a, {"event": "timer", "arguments": {"after_ms": 45_000}})
    await trio.sleep_until(due - 0.5)
    await added(client, a, {"event": "github.pr_closed", "arguments": {"pr": 1}})  # a look
    await trio.sleep_until(due - 0.00001)
    assert await wakes(client, a) == []
    await trio.sleep_until(due)
    await trio.testing.wait_all_tasks_blocked()
    (wake,) = await wakes(client, a)
    assert wake["text"].startswith(f"Your wake rule {rule['id']} fired")


async def test_a_task_rule_wakes_once_and_a_later_move_of_its_task_wakes_no_more(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    task_id, _ = await claimed_task(client, a)
    await added(client, a, {"event": "task.status_changed", "arguments": {"task_id": task_id}})
    for status in ("in_progress", "blocked"):
        await move(client, a, task_id, status)
    (wake,) = await wakes(client, a)
    assert wake["display_text"] == f"{a['display_name']} woke up · {task_id} moved to in progress"


async def test_a_repeat_after_its_quiet_minute_wakes_only_for_a_new_move_and_keeps_its_times(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
) -> None:
    a = await registered(client, registration(name="A"))
    task_id, _ = await claimed_task(client, a)
    await nursery.start(room.run)
    await added(client, a, repeating(task_id))
    await move(client, a, task_id, "in_progress")
    (after_wake,) = (await rules(client, a))["active"]
    await trio.sleep(61)  # the quiet minute ends and the room looks: nothing new
    assert len(await wakes(client, a)) == 1
    # A look that finds nothing to do changes nothing the room shows (as the API).
    assert (await rules(client, a))["active"] == [after_wake]
    await move(client, a, task_id, "blocked")
    (_, second) = await wakes(client, a)
    assert f"- {task_id}: in_progress → blocked" in second["text"]


async def test_a_repeat_whose_quiet_minute_reaches_its_expiry_wakes_at_once(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
) -> None:
    a = await registered(client, registration(name="A"))
    task_id, _ = await claimed_task(client, a)
    await nursery.start(room.run)
    expires = room.clock.now_ms() + 120_000
    await added(client, a, repeating(task_id, expires))
    await trio.sleep(60)  # the first wake's quiet minute ends exactly at the expiry
    await move(client, a, task_id, "in_progress")
    await trio.sleep(10)
    await move(client, a, task_id, "blocked")
    woken = await wakes(client, a)
    assert [w["display_text"].rsplit(" ", 1)[1] for w in woken] == ["progress", "blocked"]


async def test_a_repeat_that_fires_at_its_expiry_is_finished(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    a = await registered(client, registration(name="A"))
    task_id, _ = await claimed_task(client, a)
    expires = room.clock.now_ms() + 60_000
    made = await added(client, a, repeating(task_id, expires))
    await trio.sleep(60)
    await move(client, a, task_id, "in_progress")
    listed = await rules(client, a)
    assert listed["active"] == []
    (done,) = listed["recent"]
    assert (done["id"], done["status"], done["fire_count"]) == (made["id"], "fired", 1)


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
async def test_a_task_wake_the_full_storage_refused_is_tried_again_five_seconds_later(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
) -> None:
    a = await registered(client, registration(name="A"))
    task_id, _ = await claimed_task(client, a)
    rule = await added(
        client, a, {"event": "task.status_changed", "arguments": {"task_id": task_id}}
    )
    await nursery.start(room.run)
    fill(room.store)  # the task's row is rewritten in place; a new message finds no room
    await move(client, a, task_id, "in_progress")
    moved_at = trio.current_time()
    assert await wakes(client, a) == []
    await trio.sleep(1)
    assert isinstance(room.store, SQLiteStore)
    room.store._db.execute("PRAGMA max_page_count = 1073741823")  # space again
    await trio.sleep_until(moved_at + 5 - 0.001)
    assert await wakes(client, a) == []
    await trio.sleep_until(moved_at + 5)
    await trio.testing.wait_all_tasks_blocked()
    (wake,) = await wakes(client, a)
    assert wake["text"].startswith(
        f"Your wake rule {rule['id']} fired: {task_id} moved to in progress."
    )


async def test_each_new_rule_wakes_the_rooms_loop_not_only_the_first(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
) -> None:
    a = await registered(client, registration(name="A"))
    await nursery.start(room.run)
    await added(client, a, {"event": "timer", "arguments": {"after_ms": 120_000}})
    await trio.sleep(1)  # the loop sleeps its longest, a minute, with nothing due sooner
    start = trio.current_time()
    sooner = await added(client, a, {"event": "timer", "arguments": {"after_ms": 31_000}})
    await trio.sleep_until(start + 31 - 0.001)
    assert await wakes(client, a) == []
    await trio.sleep_until(start + 31)
    await trio.testing.wait_all_tasks_blocked()
    (wake,) = await wakes(client, a)
    assert wake["text"].startswith(f"Your wake rule {sooner['id']} fired")
