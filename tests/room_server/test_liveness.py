"""Liveness notices (§7.5): only for workers holding work, texts word for word."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import pytest
import trio
import trio.testing

from letagents_trio.room_server import Credentials, MemoryStore, Room, RoomConfig, TrioClock
from letagents_trio.room_server._liveness import (
    announceable,
    format_offline_duration,
    offline_notice,
    offline_text,
    recovery_notice,
)
from letagents_trio.room_server._storage._rows import SessionRow

from .helpers import (
    EPOCH,
    OWNER_TOKEN,
    PERSON_TOKEN,
    ROOM,
    claimed_task,
    drop,
    hold,
    registered,
    registration,
)

if TYPE_CHECKING:
    import httpx2

LABEL = "Builder | owner's agent | Claude Code"
TAIL = (
    ". It may still be working; reassign only after it or its supervisor confirms it has"
    " stopped, or a human directs the transfer."
)


async def worker_with_work(
    client: httpx2.AsyncClient, *, tasks: int = 1
) -> tuple[dict[str, Any], list[str]]:
    s = await registered(client, registration(name="Builder"))
    ids = [(await claimed_task(client, s, f"t{i}"))[0] for i in range(tasks)]
    return s, ids


async def test_offline_after_exactly_the_grace_then_recovery(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
) -> None:
    s, (task,) = await worker_with_work(client)
    await drop(await nursery.start(hold, client, s))
    await trio.sleep(1799.999)
    assert room.sweep_liveness() == []
    await trio.sleep(0.001)
    (notice,) = room.sweep_liveness()
    assert notice.text == f"[status] {LABEL} has been offline for 30m while holding {task}{TAIL}"
    assert (notice.sender, notice.source, notice.prompt_kind) == (
        "letagents",
        "agent_liveness",
        "auto",
    )
    assert notice.dedupe_id == f"agent_liveness:offline:{s['session_id']}:{EPOCH}"
    await trio.sleep(60)
    assert room.sweep_liveness() == []  # once per outage
    await nursery.start(hold, client, s)
    (back,) = room.sweep_liveness()
    assert back.text == f"[status] {LABEL} is connected to the room again."
    announced = EPOCH + 1_800_000
    assert back.dedupe_id == f"agent_liveness:recovered:{s['session_id']}:{announced}"
    assert room.sweep_liveness() == []


async def test_no_notice_without_work_or_for_ended_sessions(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
) -> None:
    idle = await registered(client, registration(name="Idle"))
    await drop(await nursery.start(hold, client, idle))
    ended, _ = await worker_with_work(client)
    room.end_session(ended["session_id"])
    await trio.sleep(1800)
    assert room.sweep_liveness() == []


async def test_never_after_60_min_and_task_list_is_shortened(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    _s, tasks = await worker_with_work(client, tasks=5)
    await trio.sleep(3600.001)
    assert room.sweep_liveness() == []
    assert offline_text(LABEL, 1_800_000, tasks).startswith(
        f"[status] {LABEL} has been offline for 30m while holding"
        f" {tasks[0]}, {tasks[1]}, {tasks[2]} and 2 more. It may"
    )


async def test_the_periodic_sweep_posts_at_the_grace(
    autojump_clock: trio.testing.MockClock, nursery: trio.Nursery
) -> None:
    room = Room(
        store=MemoryStore(),
        clock=TrioClock(EPOCH),
        owner_tokens={OWNER_TOKEN: "owner"},
        person_tokens={PERSON_TOKEN: "owner"},
        config=RoomConfig(liveness_notice_after_ms=120_000),
    )
    await nursery.start(room.run)
    body = registration(name="Builder")
    created = await room.register(OWNER_TOKEN, ROOM, body)
    session = dict(created.body)
    tasks = room.work.tasks
    task = tasks.create(ROOM, _creds(session), {"title": "t"}).body["id"]
    admin = Credentials(owner_token=PERSON_TOKEN)
    assert tasks.patch(ROOM, task, admin, {"status": "accepted"}).status == 200
    claim = {"status": "assigned", "assignee": session["actor_label"]}
    assert tasks.patch(ROOM, task, _creds(session), claim).status == 200
    await trio.sleep(60)
    await trio.testing.wait_all_tasks_blocked()
    assert room.store.messages_after(ROOM, 0, 10) == []  # the sweep at 60 s: too early
    await trio.sleep(60)
    await trio.testing.wait_all_tasks_blocked()
    (notice,) = room.store.messages_after(ROOM, 0, 10)
    assert notice.created_at == EPOCH + 120_000
    assert "has been offline for 2m while holding" in notice.text


def _creds(session: dict[str, Any]) -> Credentials:
    return Credentials(session_id=session["session_id"], session_token=session["session_token"])


@pytest.mark.parametrize(
    ("ms", "text"),
    [(0, "1m"), (59_999, "1m"), (120_000, "2m"), (3_600_000, "1h"), (4_500_000, "1h 15m")],
)
def test_durations(ms: int, text: str) -> None:
    assert format_offline_duration(ms) == text


# --- the pure decisions --------------------------------------------------------------------------

GRACE = 30 * 60_000
QUIET = SessionRow(
    session_id="s",
    room_id=ROOM,
    token_hash="h",
    actor_label="Builder",
    updated_at=1_000,
    last_seen_at=1_000,
    process_seen_at=5_000,
    process_disconnected_at=5_000,
)


def test_an_unreachable_worker_with_work_is_announced_once_per_outage() -> None:
    assert offline_notice(QUIET, ["t1"], 5_000 + GRACE - 1, grace_ms=GRACE) is None
    assert offline_notice(QUIET, [], 5_000 + GRACE, grace_ms=GRACE) is None
    notice = offline_notice(QUIET, ["t1"], 5_000 + GRACE, grace_ms=GRACE)
    assert notice is not None
    assert notice.dedupe_id == "agent_liveness:offline:s:5000"
    assert notice.text.startswith("[status] Builder has been offline for 30m while holding t1.")
    assert (notice.row.offline_epoch_announced, notice.row.offline_announced_at) == (
        5_000,
        5_000 + GRACE,
    )
    assert offline_notice(notice.row, ["t1"], 5_000 + GRACE + 1, grace_ms=GRACE) is None
    assert offline_notice(QUIET, ["t1"], 5_000 + 3_600_001, grace_ms=GRACE) is None


def test_a_recovery_follows_an_offline_notice_once() -> None:
    assert recovery_notice(QUIET, 10_000) is None
    announced = attrs.evolve(QUIET, offline_announced_at=9_000)
    notice = recovery_notice(announced, 10_000)
    assert notice is not None
    assert notice.text == "[status] Builder is connected to the room again."
    assert notice.dedupe_id == "agent_liveness:recovered:s:9000"
    assert recovery_notice(notice.row, 11_000) is None


def test_only_live_unsupervised_workers_are_announced() -> None:
    assert announceable(QUIET)
    assert not announceable(attrs.evolve(QUIET, ended_at=1))
    assert not announceable(attrs.evolve(QUIET, supervisor_grant_id="g"))
    assert not announceable(attrs.evolve(QUIET, session_kind="controller"))


@pytest.mark.parametrize("latest", ["last_seen_at", "agent_heard_at", "process_seen_at"])
def test_offline_counts_from_the_latest_sign_of_the_agent(latest: str) -> None:
    signs: dict[str, Any] = {
        "last_seen_at": 1_000,
        "agent_heard_at": 2_000,
        "process_seen_at": 3_000,
    }
    row = attrs.evolve(QUIET, **{**signs, latest: 9_000})
    assert offline_notice(row, ["t1"], 9_000 + GRACE - 1, grace_ms=GRACE) is None
    assert offline_notice(row, ["t1"], 9_000 + GRACE, grace_ms=GRACE) is not None


def test_offline_notices_go_out_until_exactly_60_min() -> None:
    assert offline_notice(QUIET, ["t1"], 5_000 + 3_600_000, grace_ms=GRACE) is not None
    assert offline_notice(QUIET, ["t1"], 5_000 + 3_600_001, grace_ms=GRACE) is None


def test_a_recovery_in_the_same_ms_as_its_outage_is_announced_once() -> None:
    same = attrs.evolve(QUIET, offline_announced_at=9_000, recovery_announced_at=9_000)
    assert recovery_notice(same, 9_000) is None


def test_the_task_list_names_three_tasks_whole_and_counts_the_rest() -> None:
    three = offline_text("Builder", GRACE, ["a", "b", "c"])
    assert three.startswith("[status] Builder has been offline for 30m while holding a, b, c. It")
    four = offline_text("Builder", GRACE, ["a", "b", "c", "d"])
    assert four.startswith("[status] Builder has been offline for 30m while holding a, b, c and 1")


async def gone_quiet_with_work(client: httpx2.AsyncClient, nursery: trio.Nursery) -> dict[str, Any]:
    """A worker holding work whose stream dropped 30 min ago: its offline notice is due."""
    s, _ = await worker_with_work(client)
    await drop(await nursery.start(hold, client, s))
    await trio.sleep(1800)
    return s


async def test_a_recovery_is_recorded_on_the_row(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
) -> None:
    s = await gone_quiet_with_work(client, nursery)
    assert len(room.sweep_liveness()) == 1
    await trio.sleep(60)
    await nursery.start(hold, client, s)
    assert len(room.sweep_liveness()) == 1
    row = room.session(s["session_id"])
    assert row is not None
    assert (row.offline_announced_at, row.recovery_announced_at) == (
        EPOCH + 1_800_000,
        EPOCH + 1_860_000,
    )


async def test_the_sweep_goes_on_past_sessions_it_does_not_announce(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
) -> None:
    s = await gone_quiet_with_work(client, nursery)
    quiet = room.session(s["session_id"])
    assert quiet is not None
    # Before it in session-id order: a controller, and a worker holding no work.
    room.store.put_session(attrs.evolve(quiet, session_id="!0", session_kind="controller"))
    room.store.put_session(attrs.evolve(quiet, session_id="!1"))
    (notice,) = room.sweep_liveness()
    assert notice.dedupe_id == f"agent_liveness:offline:{s['session_id']}:{EPOCH}"
