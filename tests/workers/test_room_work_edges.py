"""The room-work calls at their edges: the walks' bounds, the room's id, odd pages, the wire.

Every room here is an ``httpx2.MockTransport`` handler shaped as the
letagents API answers (``msg_<n>`` and ``task_<n>`` ids, ``before``/``after``
cursors, ``has_older``/``has_more``), recording each request, so that the
assertions are on what a letagents room reads and what a tool is answered.
Bounds are tested at their edge: N items pass whole, N + 1 are truncated.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any, Final

import httpx2
import pytest
import trio
import trio.testing

from letagents_trio import ApiError, RoomClient, RoomUnreachable
from letagents_trio._errors import WorkerError
from letagents_trio._session import AgentSession
from letagents_trio.workers._identity import PROCESS_INSTANCE_ID
from letagents_trio.workers._room_work import (
    MAX_BOARD_PAGES,
    MAX_READ,
    PAGE,
    Acting,
    RoomWork,
)

from .helpers import ROOM

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

API: Final = "http://room.test"
# The id a room gives itself when a call named it otherwise (an alias, a name).
CANONICAL: Final = "room_canonical"
# The board's bound in tasks: MAX_BOARD_PAGES pages of PAGE.
BOARD_BOUND: Final = MAX_BOARD_PAGES * PAGE


def work_over(handler: Callable[[httpx2.Request], httpx2.Response]) -> RoomWork:
    """A RoomWork whose room is ``handler`` (the owner token is ``t``)."""
    return RoomWork(RoomClient(API, owner_token="t", transport=httpx2.MockTransport(handler)))


def answer(body: object) -> httpx2.Response:
    return httpx2.Response(200, json=body)


def query(request: httpx2.Request) -> dict[str, str]:
    return dict(request.url.params)


def worker(**extra: Any) -> AgentSession:
    """A worker session whose room-sent fields are ``extra``."""
    return AgentSession(session_id="s1", session_token="tok", room_id=ROOM, extra=extra)


def message_room(
    count: int, seen: list[httpx2.Request], *, older_key: str = "has_older", room: str | None = None
) -> Callable[[httpx2.Request], httpx2.Response]:
    """A room of ``count`` messages ``msg_1``…: ``before`` pages back (``older_key`` says
    whether older ones remain), ``after`` pages forward (``has_more``)."""
    ids = [f"msg_{n}" for n in range(1, count + 1)]
    index = {m: i for i, m in enumerate(ids)}

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        params = request.url.params
        size = int(params["limit"])
        body: dict[str, Any] = {} if room is None else {"room_id": room}
        if "before" in params:
            end = count if params["before"] == "latest" else index[params["before"]]
            start = max(0, end - size)
            body[older_key] = start > 0
        else:
            start = 0 if "after" not in params else index[params["after"]] + 1
            end = min(count, start + size)
            body["has_more"] = end < count
        body["messages"] = [{"id": m, "text": m} for m in ids[start:end]]
        return answer(body)

    return handler


def task_room(
    count: int, seen: list[httpx2.Request], *, page: int = PAGE, room: str | None = None
) -> Callable[[httpx2.Request], httpx2.Response]:
    """A board of ``count`` tasks ``task_1``…, ``page`` a page whatever was asked."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        after = request.url.params.get("after")
        start = 0 if after is None else int(after.removeprefix("task_"))
        end = min(count, start + page)
        tasks = [{"id": f"task_{n}"} for n in range(start + 1, end + 1)]
        body: dict[str, Any] = {"tasks": tasks, "has_more": end < count}
        return answer(body if room is None else {**body, "room_id": room})

    return handler


# --- the whole history and the newest messages ---------------------------------------


@pytest.mark.parametrize(("count", "truncated"), [(MAX_READ, False), (MAX_READ + 1, True)])
async def test_the_whole_history_is_its_newest_messages_at_most_the_reads_bound(
    autojump_clock: trio.testing.MockClock, count: int, truncated: bool
) -> None:
    """``limit`` 0 reads the whole history: MAX_READ messages whole; one more, and the
    oldest is the one left out (truncated), never the newest."""
    seen: list[httpx2.Request] = []
    work = work_over(message_room(count, seen))
    with trio.fail_after(10):
        read = await work.recent_messages(Acting(room_id=ROOM), 0)
    assert read["truncated"] is truncated
    assert len(read["messages"]) == MAX_READ
    assert read["messages"][-1]["id"] == f"msg_{count}"
    assert read["messages"][0]["id"] == f"msg_{count - MAX_READ + 1}"
    assert len(seen) == MAX_READ // PAGE


async def test_a_read_of_one_is_the_newest_message(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[httpx2.Request] = []
    work = work_over(message_room(3, seen))
    with trio.fail_after(10):
        read = await work.recent_messages(Acting(room_id=ROOM), 1)
    assert (read["messages"], read["truncated"]) == ([{"id": "msg_3", "text": "msg_3"}], True)
    assert [query(r) for r in seen] == [
        {"before": "latest", "limit": "1", "include_prompt_only": "1"}
    ]


async def test_a_room_that_says_has_more_for_older_messages_is_paged_back(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """A room that answers ``has_more`` where the letagents API says ``has_older``: the
    read and a thread lookup still page back."""
    seen: list[httpx2.Request] = []
    work = work_over(message_room(PAGE + 100, seen, older_key="has_more"))
    acting = Acting(room_id=ROOM)
    with trio.fail_after(10):
        read = await work.recent_messages(acting, PAGE + 3)
        assert (len(read["messages"]), read["truncated"]) == (PAGE + 3, True)
        seen.clear()
        assert await work.thread_root(acting, "msg_2") == "msg_2"
    assert [r.url.params["before"] for r in seen] == ["latest", f"msg_{101}"]


@pytest.mark.parametrize("oldest_id", [" ", 7, None])
async def test_a_page_whose_oldest_message_has_no_id_ends_the_read_truncated(
    autojump_clock: trio.testing.MockClock, oldest_id: object
) -> None:
    """Older messages remain but no cursor leads to them: the read stops, saying so."""
    seen: list[httpx2.Request] = []

    def room(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        messages = [{"id": oldest_id, "text": "a"}, {"id": "msg_9", "text": "b"}]
        return answer({"messages": messages, "has_older": True, "has_more": True})

    work = work_over(room)
    acting = Acting(room_id=ROOM)
    with trio.fail_after(10):
        read = await work.recent_messages(acting, 50)
        assert (len(read["messages"]), read["truncated"], len(seen)) == (2, True, 1)
        assert await work.thread_root(acting, "msg_1") == "msg_1"
        assert len(seen) == 2


@pytest.mark.parametrize("last_id", [" ", 7, None])
async def test_a_board_page_whose_last_task_has_no_id_ends_the_walk_truncated(
    autojump_clock: trio.testing.MockClock, last_id: object
) -> None:
    seen: list[httpx2.Request] = []

    def room(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return answer({"tasks": [{"id": "task_1"}, {"id": last_id}], "has_more": True})

    work = work_over(room)
    with trio.fail_after(10):
        board = await work.board(Acting(room_id=ROOM), status=None, open_only=False)
    assert (len(board["tasks"]), board["truncated"], len(seen)) == (2, True, 1)


async def test_an_empty_page_that_claims_more_ends_the_walk_truncated(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[httpx2.Request] = []

    def room(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return answer({"tasks": [], "messages": [], "has_more": True, "has_older": True})

    work = work_over(room)
    acting = Acting(room_id=ROOM)
    with trio.fail_after(10):
        board = await work.board(acting, status=None, open_only=False)
        read = await work.recent_messages(acting, 10)
    assert (board["tasks"], board["truncated"]) == ([], True)
    assert (read["messages"], read["truncated"]) == ([], True)
    assert len(seen) == 2


@pytest.mark.parametrize("listed", [None, "msg_1", {"id": "msg_1"}, 3])
async def test_a_page_without_a_list_of_records_holds_none(
    autojump_clock: trio.testing.MockClock, listed: object
) -> None:
    def room(request: httpx2.Request) -> httpx2.Response:
        return answer({"messages": listed, "tasks": listed, "has_older": False})

    work = work_over(room)
    acting = Acting(room_id=ROOM)
    with trio.fail_after(10):
        assert (await work.recent_messages(acting, 10))["messages"] == []
        assert (await work.board(acting, status=None, open_only=False))["tasks"] == []


@pytest.mark.parametrize("body", [[1, 2], "ok", None, 3])
async def test_an_answer_that_is_no_object_is_read_as_an_empty_one(
    autojump_clock: trio.testing.MockClock, body: object
) -> None:
    work = work_over(lambda request: answer(body))
    with trio.fail_after(10):
        assert await work.task(Acting(room_id=ROOM), "task_1") == {}


# --- the room's own id ---------------------------------------------------------------


@pytest.mark.parametrize(("named", "expected"), [(CANONICAL, CANONICAL), (None, ROOM)])
async def test_a_walk_answers_the_room_id_its_pages_give_else_the_one_asked(
    autojump_clock: trio.testing.MockClock, named: str | None, expected: str
) -> None:
    seen: list[httpx2.Request] = []
    messages = work_over(message_room(PAGE + 1, seen, room=named))
    tasks = work_over(task_room(PAGE + 1, seen, room=named))
    acting = Acting(room_id=ROOM)
    with trio.fail_after(10):
        newest = await messages.recent_messages(acting, PAGE + 1)
        history = await messages.recent_messages(acting, 0)
        board = await tasks.board(acting, status=None, open_only=False)
    assert newest["room_id"] == history["room_id"] == board["room_id"] == expected


# --- the board's walk --------------------------------------------------------------------


async def test_a_board_read_asks_each_page_after_the_last_task(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[httpx2.Request] = []
    work = work_over(task_room(PAGE + 1, seen))
    with trio.fail_after(10):
        await work.board(Acting(room_id=ROOM), status="accepted", open_only=True)
    first = {"status": "accepted", "open": "true"}
    assert [(r.method, r.url.path, query(r)) for r in seen] == [
        ("GET", f"/rooms/{ROOM}/tasks", first),
        ("GET", f"/rooms/{ROOM}/tasks", first | {"after": "task_500"}),
    ]


@pytest.mark.parametrize(
    ("count", "truncated", "pages"),
    [(BOARD_BOUND, False, MAX_BOARD_PAGES), (BOARD_BOUND + 1, True, MAX_BOARD_PAGES)],
)
async def test_a_board_holds_its_bound_whole_and_one_more_is_truncated(
    autojump_clock: trio.testing.MockClock, count: int, truncated: bool, pages: int
) -> None:
    seen: list[httpx2.Request] = []
    work = work_over(task_room(count, seen))
    with trio.fail_after(30):
        board = await work.board(Acting(room_id=ROOM), status=None, open_only=False)
    assert (len(board["tasks"]), board["truncated"], len(seen)) == (BOARD_BOUND, truncated, pages)


async def test_a_room_that_sends_larger_pages_stops_the_board_at_its_bound(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Pages of 1,000 tasks (more than asked): the walk stops once it holds its bound."""
    seen: list[httpx2.Request] = []
    work = work_over(task_room(3 * BOARD_BOUND, seen, page=1_000))
    with trio.fail_after(30):
        board = await work.board(Acting(room_id=ROOM), status=None, open_only=False)
    assert (len(board["tasks"]), board["truncated"]) == (BOARD_BOUND, True)
    assert len(seen) == BOARD_BOUND // 1_000


# --- thread roots ----------------------------------------------------------------------


async def test_a_lookup_asks_for_the_newest_page_with_prompt_only_messages(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[httpx2.Request] = []
    work = work_over(message_room(3, seen))
    with trio.fail_after(10):
        assert await work.thread_root(Acting(room_id=ROOM), "msg_2") == "msg_2"
    assert [(r.method, query(r)) for r in seen] == [
        ("GET", {"before": "latest", "limit": str(PAGE), "include_prompt_only": "1"})
    ]


async def test_a_thread_root_the_room_names_is_taken_without_walking_replies(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[httpx2.Request] = []
    messages = [
        {"id": "msg_1", "reply_to": None},
        {"id": "msg_2", "reply_to": "msg_1"},
        {"id": "msg_3", "reply_to": {"id": "msg_2"}, "thread_root_id": "msg_1"},
        {"id": "msg_4", "reply_to": "msg_5"},
        {"id": "msg_5", "reply_to": "msg_4"},
        {"id": "msg_6", "reply_to": "  "},
        {"id": "msg_7", "reply_to": 12},
    ]

    def room(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return answer({"messages": messages, "has_older": False})

    work = work_over(room)
    acting = Acting(room_id=ROOM)
    with trio.fail_after(10):
        assert await work.thread_root(acting, "msg_3") == "msg_1"
        assert len(seen) == 1
        assert await work.thread_root(acting, "msg_4") == "msg_4"  # a cycle: two lookups
        assert len(seen) == 3
        assert await work.thread_root(acting, "msg_6") == "msg_6"  # a blank reference
        assert await work.thread_root(acting, "msg_7") == "msg_7"  # no reference at all
        assert len(seen) == 5


# --- the long poll ---------------------------------------------------------------------


async def test_a_long_poll_the_room_never_answers_is_abandoned_after_abort_ms(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def silent(request: httpx2.Request) -> httpx2.Response:
        await trio.sleep_forever()

    work = RoomWork(RoomClient(API, owner_token="t", transport=httpx2.MockTransport(silent)))
    start = trio.current_time()
    with trio.fail_after(3_600), pytest.raises(RoomUnreachable) as caught:
        await work.poll(Acting(room_id=ROOM), after=None, timeout_ms=2_000, abort_ms=2_500)
    assert trio.current_time() - start == 2.5
    assert str(caught.value) == "The room did not answer the long poll within 2500 ms."


# --- each route's method, as its errors name it ----------------------------------------

ACTING: Final = Acting(room_id=ROOM, session=worker(agent_key="o/k", actor_label="Juniper"))
CALLS: Final[list[tuple[str, Callable[[RoomWork], Awaitable[object]]]]] = [
    ("POST messages", lambda w: w.send(ACTING, "hi")),
    ("GET messages", lambda w: w.recent_messages(ACTING, 5)),
    ("GET messages", lambda w: w.thread_root(ACTING, "msg_1")),
    ("GET messages/poll", lambda w: w.poll(ACTING, after=None, timeout_ms=1, abort_ms=9_000)),
    ("GET tasks", lambda w: w.board(ACTING, status=None, open_only=False)),
    ("GET tasks/task_1", lambda w: w.task(ACTING, "task_1")),
    ("POST tasks", lambda w: w.add_task(ACTING, {"title": "t"})),
    ("PATCH tasks/task_1", lambda w: w.update_task(ACTING, "task_1", {"status": "done"})),
    ("POST tasks/task_1/lease-action", lambda w: w.lease_action(ACTING, "task_1", {})),
    ("GET agent-guidelines", lambda w: w.guidelines(ACTING)),
    ("GET memory", lambda w: w.knowledge(ACTING, "memory")),
    ("POST attention", lambda w: w.save_knowledge(ACTING, "attention", {"title": "t"})),
    ("POST presence", lambda w: w.sync_presence(ACTING)),
]


@pytest.mark.parametrize(("route", "call"), CALLS)
async def test_a_failed_call_names_its_method_and_route(
    autojump_clock: trio.testing.MockClock,
    route: str,
    call: Callable[[RoomWork], Awaitable[object]],
) -> None:
    def unreachable(request: httpx2.Request) -> httpx2.Response:
        raise httpx2.ConnectError("refused", request=request)

    method, _, path = route.partition(" ")
    with trio.fail_after(10), pytest.raises(RoomUnreachable) as caught:
        await call(work_over(unreachable))
    assert str(caught.value) == f"{method} /rooms/{ROOM}/{path} failed: ConnectError"


# --- the bodies a worker's writes send -----------------------------------------------


def bodies(seen: list[httpx2.Request]) -> list[dict[str, Any]]:
    return [json.loads(r.content) for r in seen if r.method != "GET"]


def recording(seen: list[httpx2.Request]) -> RoomWork:
    """A RoomWork over a room that records each request and answers ``{}``."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return answer({})

    return work_over(handler)


@pytest.mark.parametrize(
    ("session", "sent"),
    [
        (None, {"text": "hi"}),
        (worker(), {"text": "hi"}),
        (worker(actor_label=""), {"text": "hi"}),
        (worker(actor_label="Juniper"), {"sender": "Juniper", "text": "hi"}),
    ],
)
async def test_a_message_names_its_sender_only_by_a_label(
    autojump_clock: trio.testing.MockClock, session: AgentSession | None, sent: dict[str, Any]
) -> None:
    seen: list[httpx2.Request] = []
    work = recording(seen)
    with trio.fail_after(10):
        await work.send(Acting(room_id=ROOM, session=session), "hi")
    assert bodies(seen) == [sent]


async def test_a_workers_task_names_it_after_the_title_and_description(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[httpx2.Request] = []
    work = recording(seen)
    fields = {"priority": "high", "description": "d", "title": "t"}
    named = worker(actor_label="Juniper", agent_key="o/k", agent_instance_id="inst_1")
    with trio.fail_after(10):
        await work.add_task(Acting(room_id=ROOM, session=named), fields)
        await work.add_task(Acting(room_id=ROOM, session=worker()), {"title": "u"})
    first, second = bodies(seen)
    assert list(first.items()) == [
        ("title", "t"),
        ("description", "d"),
        ("created_by", "Juniper"),
        ("actor_label", "Juniper"),
        ("actor_key", "o/k"),
        ("actor_instance_id", "inst_1"),
        ("priority", "high"),
    ]
    assert second["actor_instance_id"] == PROCESS_INSTANCE_ID


def claim_room(
    seen: list[httpx2.Request], task: dict[str, Any]
) -> Callable[[httpx2.Request], httpx2.Response]:
    def handler(request: httpx2.Request) -> httpx2.Response:
        seen.append(request)
        return answer(task if request.method == "GET" else {**task, "status": "assigned"})

    return handler


@pytest.mark.parametrize(
    ("session", "patched"),
    [
        (None, {"status": "assigned"}),
        (worker(actor_label="", agent_key=""), {"status": "assigned"}),
        (
            worker(actor_label="Juniper", agent_key="o/k"),
            {"status": "assigned", "assignee": "Juniper", "assignee_agent_key": "o/k"},
        ),
    ],
)
async def test_a_claim_assigns_the_task_to_the_workers_label_and_key(
    autojump_clock: trio.testing.MockClock, session: AgentSession | None, patched: dict[str, Any]
) -> None:
    seen: list[httpx2.Request] = []
    work = work_over(claim_room(seen, {"id": "task_1", "status": "accepted"}))
    with trio.fail_after(10):
        await work.claim_task(Acting(room_id=ROOM, session=session), "task_1")
    assert [r.method for r in seen] == ["GET", "PATCH"]
    assert bodies(seen) == [patched]


async def test_only_a_string_key_makes_an_assigned_task_the_workers_own(
    autojump_clock: trio.testing.MockClock,
) -> None:
    seen: list[httpx2.Request] = []
    work = work_over(claim_room(seen, {"status": "assigned", "assignee_agent_key": 7}))
    with trio.fail_after(10), pytest.raises(WorkerError, match="is assigned, not accepted"):
        await work.claim_task(Acting(room_id=ROOM, session=worker(agent_key=7)), "task_1")
    assert [r.method for r in seen] == ["GET"]


async def test_a_refused_presence_other_than_a_missing_route_is_raised(
    autojump_clock: trio.testing.MockClock,
) -> None:
    work = work_over(lambda request: httpx2.Response(403, json={"error": "no"}))
    with trio.fail_after(10), pytest.raises(ApiError, match="API error 403"):
        await work.sync_presence(ACTING)
