"""The host layer's room-work API (``workers/_room_work.py``): credentials and bounded walks.

The credential choice and the ordinary walks run against a FakeRoom (the
reference room); the walks' bounds against rooms that misbehave on purpose,
``httpx2.MockTransport`` handlers that answer ``has_more`` forever, repeat a
page, or send messages shaped as the letagents API sends them (``msg_<n>``
ids, ``reply_to`` objects, a ``thread_root_id`` that is the message's own).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import httpx2
import pytest
import trio

from letagents_trio import RoomClient
from letagents_trio._session import AgentSession
from letagents_trio.room_server import Credentials
from letagents_trio.workers._acting import held_session
from letagents_trio.workers._room_work import (
    MAX_BOARD_PAGES,
    MAX_READ,
    MAX_THREAD_HOPS,
    Acting,
    RoomWork,
    claim_refusal,
)

from .helpers import ROOM

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Callable

    import trio.testing

    from letagents_trio.testing import FakeRoom

API = "http://room.test"


def work_over(handler: Callable[[httpx2.Request], httpx2.Response]) -> RoomWork:
    """A RoomWork whose room is ``handler`` (the owner token is ``t``)."""
    return RoomWork(RoomClient(API, owner_token="t", transport=httpx2.MockTransport(handler)))


def answer(body: dict[str, Any]) -> httpx2.Response:
    return httpx2.Response(200, json=body)


@pytest.fixture
async def worker(fake_room: FakeRoom) -> AgentSession:
    """A worker registered in :data:`ROOM` (the room exists from then on)."""
    return await fake_room.add_worker()


@pytest.fixture
async def work(fake_room: FakeRoom) -> AsyncIterator[RoomWork]:
    """A RoomWork over a client of the FakeRoom (closed after the test)."""
    async with fake_room.client() as client:
        yield RoomWork(client)


async def test_a_workers_call_carries_its_session_and_the_owners_carries_none(
    autojump_clock: trio.testing.MockClock,
    fake_room: FakeRoom,
    worker: AgentSession,
    work: RoomWork,
) -> None:
    await work.send(Acting(room_id=ROOM, session=worker), "hi")
    with pytest.raises(Exception, match="API error 403"):
        await work.recent_messages(Acting(room_id=ROOM), 10)
    sent, read = fake_room.requests[-2:]
    assert (sent.method, sent.session_id, sent.has_session_token) == (
        "POST",
        worker.session_id,
        True,
    )
    assert (read.method, read.session_id, read.has_session_token) == ("GET", None, False)
    assert sent.bearer == read.bearer == fake_room.owner_token
    assert work.credentials(Acting(room_id=ROOM, session=worker)) is worker


async def test_the_newest_messages_span_pages_oldest_first(
    autojump_clock: trio.testing.MockClock,
    fake_room: FakeRoom,
    worker: AgentSession,
    work: RoomWork,
) -> None:
    acting = Acting(room_id=ROOM, session=worker)
    for i in range(450):
        await work.send(acting, f"m{i}")
    every = await work.recent_messages(acting, 450)  # the room's pages hold 200
    assert [m["text"] for m in every["messages"]] == [f"m{i}" for i in range(450)]
    assert every["truncated"] is False
    newest = await work.recent_messages(acting, 300)
    assert [m["text"] for m in newest["messages"]] == [f"m{i}" for i in range(150, 450)]
    assert newest["truncated"] is True
    history = await work.recent_messages(acting, 0)
    assert len(history["messages"]) == 450
    assert history["truncated"] is False


async def test_a_room_that_never_stops_paging_costs_a_bounded_read(
    autojump_clock: trio.testing.MockClock,
) -> None:
    calls: list[str] = []

    def endless(request: httpx2.Request) -> httpx2.Response:
        calls.append(str(request.url.params))
        n = len(calls)
        messages = [{"id": str(10**9 - n), "text": "x"}]
        tasks = [{"id": f"task_{n}"}]
        return answer({"messages": messages, "tasks": tasks, "has_more": True, "has_older": True})

    work = work_over(endless)
    acting = Acting(room_id=ROOM)
    newest = await work.recent_messages(acting, 5)
    assert (len(newest["messages"]), newest["truncated"], len(calls)) == (5, True, 5)
    calls.clear()
    history = await work.recent_messages(acting, 0)
    assert history["truncated"] is True
    assert len(calls) == MAX_READ  # one message a page: stops at the read's bound
    calls.clear()
    tasks = await work.board(acting, status=None, open_only=True)
    assert tasks["truncated"] is True
    assert len(calls) == MAX_BOARD_PAGES


async def test_a_page_that_does_not_move_the_cursor_ends_the_walk(
    autojump_clock: trio.testing.MockClock,
) -> None:
    def stuck(request: httpx2.Request) -> httpx2.Response:
        page = {"messages": [{"id": "7"}], "tasks": [{"id": "task_7"}]}
        return answer({**page, "has_more": True, "has_older": True})

    work = work_over(stuck)
    acting = Acting(room_id=ROOM)
    assert (await work.recent_messages(acting, 50))["truncated"] is True
    assert (await work.recent_messages(acting, 0))["truncated"] is True
    board = await work.board(acting, status="accepted", open_only=False)
    assert (len(board["tasks"]), board["truncated"]) == (2, True)


def upstream_messages() -> list[dict[str, Any]]:
    """A thread as the letagents API shows it: msg_3 answers msg_2, which answers msg_1, and
    each names itself as its thread root (no materialized thread)."""
    return [
        {"id": "msg_1", "text": "root", "reply_to": None, "thread_root_id": "msg_1"},
        {"id": "msg_2", "reply_to": {"id": "msg_1"}, "thread_root_id": "msg_2"},
        {"id": "msg_3", "reply_to": {"id": "msg_2"}, "thread_root_id": "msg_3"},
        {"id": "msg_4", "reply_to": "msg_5", "thread_root_id": "msg_4"},
        {"id": "msg_5", "reply_to": "msg_4", "thread_root_id": "msg_5"},
    ]


async def test_a_thread_root_is_found_up_the_reply_chain_boundedly(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[str] = []

    def room(request: httpx2.Request) -> httpx2.Response:
        seen.append(request.url.params["before"])
        return answer({"messages": upstream_messages(), "has_older": False})

    work = work_over(room)
    acting = Acting(room_id=ROOM)
    assert await work.thread_root(acting, "msg_3") == "msg_1"
    assert seen == ["latest"] * 3  # one lookup per hop, each in the newest page
    assert await work.thread_root(acting, "msg_4") == "msg_4"  # a cycle ends the walk
    assert await work.thread_root(acting, "msg_99") == "msg_99"  # not found: itself

    looked_up: list[str] = []

    def chain(request: httpx2.Request) -> httpx2.Response:
        looked_up.append(request.url.params["before"])
        endless = [{"id": f"m{i}", "reply_to": f"m{i + 1}"} for i in range(100)]
        return answer({"messages": endless, "has_older": False})

    work = work_over(chain)
    assert await work.thread_root(acting, "m0") == f"m{MAX_THREAD_HOPS}"  # the last reached
    assert len(looked_up) == MAX_THREAD_HOPS


async def test_the_reference_rooms_thread_root_is_taken_as_given(
    autojump_clock: trio.testing.MockClock,
    fake_room: FakeRoom,
    worker: AgentSession,
    work: RoomWork,
) -> None:
    acting = Acting(room_id=ROOM, session=worker)
    root = await work.send(acting, "root")
    reply = await work.send(acting, "re", reply_to=root["id"])
    deeper = await work.send(acting, "re re", reply_to=reply["id"])
    assert await work.thread_root(acting, deeper["id"]) == root["id"]
    assert await work.thread_root(acting, root["id"]) == root["id"]


async def test_claiming_reads_the_task_first(
    autojump_clock: trio.testing.MockClock,
    fake_room: FakeRoom,
    worker: AgentSession,
    work: RoomWork,
) -> None:
    acting = Acting(room_id=ROOM, session=worker)
    task = await work.add_task(acting, {"title": "t"})
    with pytest.raises(Exception, match="is proposed, not accepted"):
        await work.claim_task(acting, task["id"])
    assert fake_room.requests[-1].method == "GET"  # nothing was changed
    admin = Credentials(owner_token=fake_room.person_token)
    fake_room.room.work.tasks.patch(ROOM, task["id"], admin, {"status": "accepted"})
    claimed = await work.claim_task(acting, task["id"])
    assert (claimed["status"], claimed["assignee_agent_key"]) == (
        "assigned",
        worker.extra["agent_key"],
    )
    again = await work.claim_task(acting, task["id"])  # already ours: answered unchanged
    assert again["active_leases"] == claimed["active_leases"]


@pytest.mark.parametrize(
    ("task", "refused"),
    [
        ({"status": "accepted"}, False),
        ({"status": "assigned", "assignee_agent_key": "owner/me"}, False),
        ({"status": "assigned", "assignee_agent_key": "owner/you"}, True),
        ({"status": "proposed"}, True),
        ({"status": "done"}, True),
        ({}, True),
    ],
)
def test_only_accepted_tasks_are_claimed(task: dict[str, Any], refused: bool) -> None:
    assert (claim_refusal(task, "task_1", "owner/me") is not None) == refused


def test_the_one_live_worker_held_in_a_room_is_read_as() -> None:
    session = AgentSession(session_id="s1", session_token="tok", room_id=ROOM)
    other = AgentSession(session_id="s2", session_token="tok2", room_id=ROOM)

    def state(*sessions: AgentSession) -> dict[str, Any]:
        return {
            "agent_sessions": {
                s.session_id: {
                    "session_id": s.session_id,
                    "session_token": s.session_token,
                    "room_id": ROOM,
                    "session_kind": "worker",
                }
                for s in sessions
            },
            "mcp_workers": {
                f"worker_{i:032x}": {
                    "worker_id": f"worker_{i:032x}",
                    "rooms": {ROOM: {"session_id": s.session_id}},
                }
                for i, s in enumerate(sessions)
            },
        }

    def pinned(*pins: AgentSession) -> Callable[[str], AgentSession | None]:
        return {s.session_id: s for s in pins}.get

    held = held_session(state(session), pinned(session, other), ROOM)
    assert held is not None
    assert held.session_id == "s1"
    assert held_session(state(session), pinned(session), "room_other") is None
    assert held_session(state(session, other), pinned(session, other), ROOM) is None  # two
    assert held_session(state(session), pinned(), ROOM) is None  # not pinned here
    replaced = AgentSession(session_id="s1", session_token="old", room_id=ROOM)
    assert held_session(state(session), pinned(replaced), ROOM) is None
