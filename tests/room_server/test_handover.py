"""Who keeps a name, and when it passes: PROTOCOL.md §5.4, §7.2-§7.4 and the §8.5 scenarios.

The registrant reports ``process_host_id`` ``host_a`` unless a test says
otherwise. Times are exact (autojump clock; the room on ``TrioClock(EPOCH)``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs
import pytest
import trio
import trio.testing

from letagents_trio.room_server import Room, RoomConfig, TrioClock, create_app
from letagents_trio.testing._transport import open_streaming_transport
from letagents_trio.workers._names import codename

from .helpers import (
    EPOCH,
    OTHER_TOKEN,
    OWNER_TOKEN,
    ROOM,
    announce_exit,
    connection_token,
    drop,
    hold,
    register,
    registered,
    registration,
    say,
    session_headers,
    worker_id,
)

if TYPE_CHECKING:
    import httpx2

    from letagents_trio.room_server import RoomStore

NAME = "FieldMeadow"


def row(room: Room, session: dict[str, Any]) -> Any:
    found = room.session(session["session_id"])
    assert found is not None
    return found


def live_names(room: Room) -> list[str]:
    return sorted(s.display_name for s in room.store.room_sessions(ROOM) if s.live)


async def closed_holder(
    client: httpx2.AsyncClient, nursery: trio.Nursery, *, name: str = NAME, host: str = "host_a"
) -> dict[str, Any]:
    """A worker that held ``name``, opened its process stream, and lost it now."""
    holder = await registered(client, registration(name=name, host=host))
    await drop(await nursery.start(hold, client, holder))
    return holder


# --- §8.5.1: a closed same-host holder's name passes -------------------------------


async def test_name_passes_after_a_same_host_close_and_one_session_remains(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
) -> None:
    holder = await closed_holder(client, nursery)
    for _restart in range(3):
        await trio.sleep(20)
        start = trio.current_time()
        taker = await registered(client, registration(name=NAME))
        assert trio.current_time() == start  # no wait: already 20 s closed
        assert taker["display_name"] == NAME
        old = row(room, holder)
        assert old.ended_at == EPOCH + round(start * 1000)
        assert old.end_reason == "name_handover"
        assert [s.session_id for s in room.store.room_sessions(ROOM) if s.live] == [
            taker["session_id"]
        ]
        await drop(await nursery.start(hold, client, taker))
        holder = taker


async def test_takeover_tells_the_holders_stream(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
) -> None:
    # A holder whose process is gone (silent 10 min) but whose stream the room
    # still holds (a half-open connection): the takeover ends it with `ended`.
    holder = await registered(client, registration(name=NAME, host="host_b"))
    await say(client, holder)
    room.store.put_session(
        attrs.evolve(row(room, holder), process_seen_at=EPOCH, process_connection_id="gone")
    )
    await trio.sleep(601)
    taker = await registered(client, registration(name=NAME))
    assert taker["display_name"] == NAME
    assert row(room, holder).ended_at is not None


# --- §8.5.2: holders that are not taken ------------------------------------------


async def test_connected_but_quiet_for_10_h_is_not_taken(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
) -> None:
    holder = await registered(client, registration(name=NAME))
    await nursery.start(hold, client, holder)
    await trio.sleep(10 * 3600)
    other = await registered(client, registration(name=NAME))
    assert other["display_name"] != NAME
    assert row(room, holder).ended_at is None


@pytest.mark.parametrize("durable", [True, False])
async def test_old_client_quiet_9_min_is_not_taken_and_60_min_is_exact(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    durable: bool,
) -> None:
    body = registration(name=NAME)
    if not durable:
        body["agent_instance_id"] = "legacy-instance-1"
        body["actor_key"] = "owner/legacy"
    holder = await registered(client, body)
    await trio.sleep(9 * 60)
    assert (await registered(client, registration(name=NAME)))["display_name"] != NAME
    await trio.sleep(51 * 60 - 0.001)
    assert (await registered(client, registration(name=NAME)))["display_name"] != NAME
    await trio.sleep(0.001)
    assert (await registered(client, registration(name=NAME)))["display_name"] == NAME
    assert row(room, holder).ended_at == EPOCH + 3_600_000


async def test_durable_old_client_without_host_is_never_taken(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    body = registration(name=NAME)
    body["process_host_id"] = None
    await registered(client, body)
    await trio.sleep(24 * 3600)
    assert (await registered(client, registration(name=NAME)))["display_name"] != NAME


async def test_closed_120_s_ago_asked_from_another_host_is_not_taken(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    nursery: trio.Nursery,
) -> None:
    await closed_holder(client, nursery)
    await trio.sleep(120)
    start = trio.current_time()
    other = await registered(client, registration(name=NAME, host="host_b"))
    assert other["display_name"] != NAME
    assert trio.current_time() == start  # nothing to wait for from another host


@pytest.mark.parametrize("after", ["close", "exit"])
async def test_heard_1_s_after_a_close_or_exit_is_not_taken(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    nursery: trio.Nursery,
    after: str,
) -> None:
    holder = await closed_holder(client, nursery)
    if after == "exit":
        assert await announce_exit(client, holder)
    await trio.sleep(1)
    await say(client, holder)
    await trio.sleep(20)
    assert (await registered(client, registration(name=NAME)))["display_name"] != NAME
    assert (await registered(client, registration(name=NAME, host="host_b")))[
        "display_name"
    ] != NAME


async def test_an_open_delivery_connection_is_not_taken(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
) -> None:
    holder = await closed_holder(client, nursery)
    assert await announce_exit(client, holder)

    async def poll() -> None:
        await client.get(
            f"/rooms/{ROOM}/messages/poll?timeout=120000", headers=session_headers(holder)
        )

    await trio.sleep(20)
    nursery.start_soon(poll)
    await trio.testing.wait_all_tasks_blocked()
    assert (await registered(client, registration(name=NAME)))["display_name"] != NAME
    assert row(room, holder).ended_at is None


@pytest.mark.parametrize(("minutes", "taken"), [(9, False), (11, True)])
async def test_unseen_from_another_host(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    nursery: trio.Nursery,
    minutes: int,
    taken: bool,
) -> None:
    await closed_holder(client, nursery)
    await trio.sleep(minutes * 60)
    name = (await registered(client, registration(name=NAME, host="host_b")))["display_name"]
    assert (name == NAME) is taken


# --- §8.5.3 and §8.5.4 --------------------------------------------------------------


async def test_exit_announced_1_s_ago_is_taken_at_once_from_anywhere(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
) -> None:
    holder = await closed_holder(client, nursery)
    assert await announce_exit(client, holder)
    await trio.sleep(1)
    start = trio.current_time()
    taker = await registered(client, registration(name=NAME, host="host_b"))
    assert taker["display_name"] == NAME
    assert trio.current_time() == start
    assert row(room, holder).ended_at == EPOCH + 1_000


async def test_server_bookkeeping_after_the_close_is_not_presence(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
) -> None:
    holder = await closed_holder(client, nursery)
    await trio.sleep(10)
    now = room.now_ms()
    room.store.put_session(attrs.evolve(row(room, holder), last_seen_at=now))
    await trio.sleep(10)
    assert (await registered(client, registration(name=NAME)))["display_name"] == NAME


# --- §8.5.5: never taken --------------------------------------------------------------


async def test_other_owner_supervised_and_quiet_live_agents_are_never_taken(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
) -> None:
    foreign = await registered(
        client, registration(name="Foreign", login="other"), owner=OTHER_TOKEN
    )
    await drop(await nursery.start(hold, client, foreign, OTHER_TOKEN))
    assert await announce_exit(client, foreign)
    supervised = await closed_holder(client, nursery, name="Watched")
    assert await announce_exit(client, supervised)
    room.store.put_session(attrs.evolve(row(room, supervised), supervisor_grant_id="grant_1"))
    await registered(client, registration(name="Quiet"))
    await trio.sleep(5 * 60)
    for name in ("Foreign", "Watched", "Quiet"):
        got = await registered(client, registration(name=name, host="host_b"))
        assert got["display_name"] != name
    assert live_names(room).count("Foreign") == 1
    assert row(room, foreign).ended_at is None
    assert row(room, supervised).ended_at is None


# --- the one wait (§7.3, §10 on §9.4) ---------------------------------------------------


@pytest.mark.parametrize(("closed_for", "waits"), [(15.0, 0.0), (14.999, 0.501), (10.0, 5.5)])
async def test_same_host_close_threshold_and_the_one_wait(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
    closed_for: float,
    waits: float,
) -> None:
    holder = await closed_holder(client, nursery)
    await trio.sleep(closed_for)
    start = trio.current_time()
    taker = await registered(client, registration(name=NAME))
    assert trio.current_time() - start == pytest.approx(waits, abs=1e-9)
    assert taker["display_name"] == NAME
    assert row(room, holder).ended_at is not None


async def test_a_worker_registering_again_never_waits_for_its_own_closed_stream(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    nursery: trio.Nursery,
) -> None:
    # The one wait skips the registrant's own (agent key, instance) rows: its
    # own stream, closed a moment ago on its host, is no holder to wait for.
    instance = worker_id()
    holder = await registered(client, registration(name=NAME, instance=instance))
    await drop(await nursery.start(hold, client, holder))
    start = trio.current_time()
    again = await registered(client, registration(name=NAME, instance=instance, replace=holder))
    assert trio.current_time() == start
    assert (again["session_id"], again["display_name"]) == (holder["session_id"], NAME)


async def test_exit_with_a_lingering_delivery_waits_for_close_plus_12_s(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
) -> None:
    holder = await registered(client, registration(name=NAME))
    scope = await nursery.start(hold, client, holder)
    # A poll that ends at 2 s: the delivery lingers until 14 s.
    r = await client.get(
        f"/rooms/{ROOM}/messages/poll?timeout=2000", headers=session_headers(holder)
    )
    assert r.status_code == 200
    await drop(scope)
    assert await announce_exit(client, holder)
    assert trio.current_time() == 2
    taker = await registered(client, registration(name=NAME, host="host_b"))
    # exited at 2 s, delivery lingers to 14 s: wait to 14 s + 0.5 s
    assert trio.current_time() == 14.5
    assert taker["display_name"] == NAME


async def test_holder_that_comes_back_during_the_wait_keeps_its_name(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
) -> None:
    holder = await registered(client, registration(name=NAME))
    first = await nursery.start(hold, client, holder)
    instance = worker_id()
    substitute = await registered(client, registration(name=NAME, instance=instance))
    assert substitute["display_name"] != NAME
    await drop(first)
    await trio.sleep(10)
    replies: list[dict[str, Any]] = []

    async def reregister() -> None:
        body = registration(name=NAME, instance=instance, replace=substitute)
        replies.append(await registered(client, body))

    nursery.start_soon(reregister)
    await trio.sleep(2)
    await nursery.start(hold, client, holder)  # back before the wait ends
    await trio.sleep(4)
    (again,) = replies
    assert again["session_id"] == substitute["session_id"]
    assert again["display_name"] == substitute["display_name"]  # kept, not a third name
    assert row(room, holder).ended_at is None


# --- §8.5.6 and §8.5.8: durable workers ----------------------------------------------------


async def test_substitute_name_session_takes_its_own_name_back(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
) -> None:
    holder = await registered(client, registration(name=NAME))
    scope = await nursery.start(hold, client, holder)
    instance = worker_id()
    substitute = await registered(client, registration(name=NAME, instance=instance))
    assert substitute["display_name"] == codename(f"{substitute['agent_key']}:1").display_name
    assert substitute["assigned_base_display_name"] == NAME
    await drop(scope)
    await trio.sleep(20)
    back = await registered(
        client, registration(name="Ignored", instance=instance, replace=substitute)
    )
    assert back["session_id"] == substitute["session_id"]
    assert back["display_name"] == NAME
    assert row(room, holder).ended_at is not None


async def test_durable_worker_keeps_its_name_whatever_it_sends(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    instance = worker_id()
    first = await registered(client, registration(name=NAME, instance=instance))
    again = await registered(client, registration(name="Renamed", instance=instance, replace=first))
    assert again["display_name"] == NAME


async def test_durable_holders_offline_reservation_and_return(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
) -> None:
    a_instance = worker_id()
    a = await registered(client, registration(name=NAME, instance=a_instance))
    a_scope = await nursery.start(hold, client, a)
    # Ended and only offline: still reserves its name.
    r = await client.post(
        f"/rooms/{ROOM}/agent-sessions/{a['session_id']}/disconnect",
        json={"agent_session_id": a["session_id"], "agent_session_token": a["session_token"]},
    )
    assert r.status_code == 200
    await trio.testing.wait_all_tasks_blocked()
    assert a_scope.cancel_called is False
    assert (await registered(client, registration(name=NAME)))["display_name"] != NAME
    # A comes back with proof, opens its stream, and loses it: 20 s later B gets the name.
    a = await registered(client, registration(name=NAME, instance=a_instance, replace=a))
    assert a["display_name"] == NAME
    await drop(await nursery.start(hold, client, a))
    await trio.sleep(20)
    b = await registered(client, registration(name=NAME))
    assert b["display_name"] == NAME
    assert row(room, a).ended_at is not None
    # A returns with proof: same session and key, a new codename.
    a2 = await registered(client, registration(name=NAME, instance=a_instance, replace=a))
    assert (a2["session_id"], a2["agent_key"]) == (a["session_id"], a["agent_key"])
    assert a2["display_name"] not in (NAME, "")
    # It cannot rename itself back while B is there.
    a3 = await registered(client, registration(name=NAME, instance=a_instance, replace=a2))
    assert a3["display_name"] == a2["display_name"]
    # B never opened a process connection; 1 h of silence later A takes its name back.
    await trio.sleep(3600)
    a4 = await registered(client, registration(name=NAME, instance=a_instance, replace=a3))
    assert a4["display_name"] == NAME
    assert a4["session_id"] == a["session_id"]
    assert row(room, b).ended_at is not None


# --- §8.5.9: allocation ------------------------------------------------------------------


async def test_held_names_give_deterministic_letters_only_codenames(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    await registered(client, registration(name=NAME))
    one = await registered(client, registration(name=NAME))
    two = await registered(client, registration(name=NAME))
    for got in (one, two):
        assert got["display_name"] == codename(f"{got['agent_key']}:1").display_name
        assert got["display_name"].isalpha()
    assert one["display_name"] != two["display_name"]


async def test_generic_names_get_the_agents_codename(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    got = await registered(client, registration(name="Claude Code worker"))
    assert got["display_name"] == codename(got["agent_key"]).display_name


async def test_exhausted_names_are_409(
    store: RoomStore, autojump_clock: trio.testing.MockClock
) -> None:
    import httpx2

    room = Room(
        store=store,
        clock=TrioClock(EPOCH),
        owner_tokens={OWNER_TOKEN: "owner"},
        config=RoomConfig(max_name_offset=0),
    )
    async with (
        open_streaming_transport(create_app(room)) as transport,
        httpx2.AsyncClient(transport=transport, base_url="http://room.test") as client,
    ):
        await registered(client, registration(name=NAME))
        r = await register(client, registration(name=NAME))
        assert (r.status_code, r.json()) == (
            409,
            {
                "error": "Could not allocate a unique active worker display name for this room.",
                "code": "agent_session_display_name_exhausted",
            },
        )


async def sharing_a_name(
    client: httpx2.AsyncClient, room: Room
) -> tuple[str, str, dict[str, Any], dict[str, Any]]:
    """Two live workers, the older first by 1 s, made to share NAME (as two racing rooms
    could leave it): their instances and sessions."""
    old_instance, young_instance = worker_id(), worker_id()
    old = await registered(client, registration(name=NAME, instance=old_instance))
    await trio.sleep(1)
    young = await registered(client, registration(name="Other", instance=young_instance))
    room.store.put_session(
        attrs.evolve(row(room, young), display_name=NAME, assigned_base_display_name=NAME)
    )
    return old_instance, young_instance, old, young


async def test_seniority_the_older_live_worker_keeps_a_shared_name(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    old_instance, young_instance, old, young = await sharing_a_name(client, room)
    young2 = await registered(
        client, registration(name=NAME, instance=young_instance, replace=young)
    )
    assert young2["display_name"] != NAME
    old2 = await registered(client, registration(name=NAME, instance=old_instance, replace=old))
    assert old2["display_name"] == NAME


async def test_seniority_the_older_live_worker_keeps_a_shared_name_while_the_younger_holds_it(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    # §8.5.9, the other order: the older registers again first, while the
    # younger (live, not gone) still shares its name. The older keeps the name
    # and ends no one; the younger, registering next, is the one moved on.
    old_instance, young_instance, old, young = await sharing_a_name(client, room)
    old2 = await registered(client, registration(name=NAME, instance=old_instance, replace=old))
    assert (old2["session_id"], old2["display_name"]) == (old["session_id"], NAME)
    assert row(room, young).live
    young2 = await registered(
        client, registration(name=NAME, instance=young_instance, replace=young)
    )
    assert (young2["session_id"], young2["display_name"] != NAME) == (young["session_id"], True)
    assert live_names(room) == sorted([NAME, young2["display_name"]])


async def test_seniority_ties_break_by_session_id(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, room: Room
) -> None:
    instances = [worker_id(), worker_id()]
    sessions = [
        await registered(client, registration(name=f"N{i}", instance=i_))
        for i, i_ in enumerate(instances)
    ]
    for s in sessions:
        room.store.put_session(
            attrs.evolve(
                row(room, s), display_name=NAME, assigned_base_display_name=NAME, created_at=EPOCH
            )
        )
    order = sorted(range(2), key=lambda i: sessions[i]["session_id"])
    first, second = order
    got_second = await registered(
        client, registration(name=NAME, instance=instances[second], replace=sessions[second])
    )
    got_first = await registered(
        client, registration(name=NAME, instance=instances[first], replace=sessions[first])
    )
    assert got_first["display_name"] == NAME
    assert got_second["display_name"] != NAME


async def test_a_name_equal_to_another_keys_last_segment_is_held(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    await registered(client, registration(name="Someone", actor="owner/river"))
    got = await registered(client, registration(name="River"))
    assert got["display_name"] != "River"


async def test_another_owners_registration_never_ends_ours(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    nursery: trio.Nursery,
) -> None:
    holder = await closed_holder(client, nursery)
    assert await announce_exit(client, holder)
    other = await registered(
        client, registration(name=NAME, login="other", token=connection_token()), owner=OTHER_TOKEN
    )
    assert other["display_name"] != NAME
    assert row(room, holder).ended_at is None
