"""FakeRoom's fault rules (``fake_room.on(...)``) and its request log.

Each test talks to the fake room over plain HTTP (an ``httpx2.AsyncClient`` on
its in-process transport) and checks two sides: what the client got, and what
the reference room behind the rules did (``POST /agents`` leaves a trace in
``GET /agents/me``, so "the room acted" is observable). Timing tests take
``autojump_clock`` and assert exact virtual times; the one test over real
sockets uses the real clock, bounded by ``trio.fail_after``.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator
from functools import partial
from typing import TYPE_CHECKING, Any

import httpx2
import pytest
import trio
from hypercorn.config import Config
from hypercorn.trio import serve

from letagents_trio.testing import Hold, Rule

if TYPE_CHECKING:
    from trio.testing import MockClock

    from letagents_trio.testing import FakeRoom


@pytest.fixture
async def http(fake_room: FakeRoom) -> AsyncIterator[httpx2.AsyncClient]:
    """A raw HTTP client of the fake room, signed in as its owner."""
    async with httpx2.AsyncClient(
        base_url=fake_room.api_url,
        transport=fake_room.transport,
        headers={"Authorization": f"Bearer {fake_room.owner_token}"},
    ) as client:
        yield client


def _agent(name: str) -> dict[str, Any]:
    return {"name": name, "display_name": name, "owner_label": "Owner"}


async def _agents_the_room_has(http: httpx2.AsyncClient) -> list[str]:
    """What the room itself stored, read through a request no rule here matches."""
    answer = await http.get("/agents/me")
    assert answer.status_code == 200
    return [agent["canonical_key"] for agent in answer.json()["agents"]]


# --- respond -----------------------------------------------------------------------------


async def test_respond_answers_instead_of_the_room_once_by_default(
    fake_room: FakeRoom, http: httpx2.AsyncClient
) -> None:
    rule = fake_room.on("post", "/agents").respond(
        503, {"error": "down"}, headers={"Retry-After": "7"}
    )
    assert rule.method == "POST"
    assert fake_room.rules == (rule,)
    refused = await http.post("/agents", json=_agent("worker-a"))
    assert (refused.status_code, refused.json()) == (503, {"error": "down"})
    assert refused.headers["retry-after"] == "7"
    assert refused.headers["content-type"] == "application/json"
    # The room never saw it; the rule is spent and gone.
    assert await _agents_the_room_has(http) == []
    assert (rule.hits, rule.times_left, rule.active) == (1, 0, False)
    assert list(fake_room.rules) == []
    created = await http.post("/agents", json=_agent("worker-a"))
    assert created.status_code == 200
    assert await _agents_the_room_has(http) == ["owner/worker-a"]
    # Every request is in the log, the ones a rule answered too.
    assert [f"{r.method} {r.path}" for r in fake_room.requests] == [
        "POST /agents",
        "GET /agents/me",
        "POST /agents",
        "GET /agents/me",
    ]


async def test_respond_without_json_sends_an_empty_body(
    fake_room: FakeRoom, http: httpx2.AsyncClient
) -> None:
    fake_room.on("GET", "/agents/me").respond(204)
    answer = await http.get("/agents/me")
    assert (answer.status_code, answer.content) == (204, b"")
    assert "content-type" not in answer.headers


async def test_times_none_acts_until_the_rule_is_removed(
    fake_room: FakeRoom, http: httpx2.AsyncClient
) -> None:
    rule = fake_room.on("GET", "/agents/me").respond(503, {"error": "down"}, times=None)
    statuses = [(await http.get("/agents/me")).status_code for _ in range(3)]
    assert statuses == [503, 503, 503]
    assert (rule.hits, rule.times_left, rule.active) == (3, None, True)
    rule.remove()
    rule.remove()  # removing twice is harmless
    assert not rule.active
    assert (await http.get("/agents/me")).status_code == 200


async def test_rules_are_tried_in_the_order_they_were_armed(
    fake_room: FakeRoom, http: httpx2.AsyncClient
) -> None:
    first = fake_room.on("GET", "/agents/me").respond(501, times=2)
    second = fake_room.on("GET", "/agents/me").respond(502)
    statuses = [(await http.get("/agents/me")).status_code for _ in range(4)]
    assert statuses == [501, 501, 502, 200]
    assert (first.hits, second.hits) == (2, 1)


async def test_clear_rules_removes_every_rule(
    fake_room: FakeRoom, http: httpx2.AsyncClient
) -> None:
    fake_room.on("GET", "/agents/me").respond(503, times=None)
    fake_room.on("POST", "/agents").drop_before_commit(times=None)
    fake_room.clear_rules()
    assert fake_room.rules == ()
    assert (await http.get("/agents/me")).status_code == 200


@pytest.mark.parametrize("times", [0, -1])
async def test_times_must_be_positive_or_none(
    fake_room: FakeRoom, http: httpx2.AsyncClient, times: int
) -> None:
    with pytest.raises(ValueError, match="times must be at least 1"):
        fake_room.on("GET", "/agents/me").respond(503, times=times)
    assert fake_room.rules == ()
    # Nothing was armed: the room answers.
    assert (await http.get("/agents/me")).status_code == 200


# --- matching ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("pattern", "path", "matches"),
    [
        ("/rooms/{room}/messages", "/rooms/r1/messages", True),
        ("/rooms/{room}/messages", "/rooms/r1/x/messages", False),  # one segment only
        ("/rooms/{room}/messages", "/rooms/r1/messages/poll", False),  # the whole path
        ("/rooms/{room}/agent-sessions/{sid}", "/rooms/a/agent-sessions/b", True),
        ("/agents", "/agents/me", False),
        ("/a.b", "/axb", False),  # the rest is literal, not a regex
        (re.compile(r"/rooms/.+/messages"), "/rooms/r1/x/messages", True),
        (re.compile(r"/rooms/.+"), "/agents", False),
    ],
)
async def test_a_rule_matches_its_method_and_the_whole_path(
    fake_room: FakeRoom,
    http: httpx2.AsyncClient,
    pattern: str | re.Pattern[str],
    path: str,
    matches: bool,
) -> None:
    rule = fake_room.on("GET", pattern).respond(599)
    await http.post(path)  # another method never matches
    answer = await http.get(path)
    assert (answer.status_code == 599) is matches
    assert rule.hits == int(matches)
    assert len(fake_room.requests_to("GET", pattern)) == int(matches)


async def test_the_log_keeps_each_json_body_out_of_the_repr(
    fake_room: FakeRoom, http: httpx2.AsyncClient
) -> None:
    await http.post("/agents", json={**_agent("worker-a"), "token": "s3cret"})
    await http.get("/agents/me")
    await http.post("/agents", content=b"not json")
    posted, read, garbled = fake_room.requests
    assert posted.body == {**_agent("worker-a"), "token": "s3cret"}
    assert "s3cret" not in repr(posted)
    assert read.body is None
    assert garbled.body is None
    assert fake_room.requests_to("post", "/agents") == [posted, garbled]


# --- losing requests and answers -----------------------------------------------------------


async def test_drop_before_commit_loses_the_request_before_the_room_sees_it(
    fake_room: FakeRoom, http: httpx2.AsyncClient
) -> None:
    fake_room.on("POST", "/agents").drop_before_commit()
    with pytest.raises(httpx2.ConnectError):
        await http.post("/agents", json=_agent("worker-a"))
    assert await _agents_the_room_has(http) == []
    assert len(fake_room.requests_to("POST", "/agents")) == 1


async def test_drop_after_commit_loses_the_answer_of_what_the_room_did(
    fake_room: FakeRoom, http: httpx2.AsyncClient
) -> None:
    fake_room.on("POST", "/agents").drop_after_commit()
    with pytest.raises(httpx2.RemoteProtocolError):
        await http.post("/agents", json=_agent("worker-a"))
    assert await _agents_the_room_has(http) == ["owner/worker-a"]


# --- hold ----------------------------------------------------------------------------------


async def test_hold_keeps_the_answer_until_released_at_an_exact_time(
    autojump_clock: MockClock, fake_room: FakeRoom, http: httpx2.AsyncClient
) -> None:
    held = fake_room.on("POST", "/agents").hold(times=2)
    assert isinstance(held, Hold)
    assert isinstance(held.rule, Rule)
    answered_at: list[float] = []

    async def post(name: str) -> None:
        answer = await http.post("/agents", json=_agent(name))
        assert answer.status_code == 200
        answered_at.append(trio.current_time())

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(post, "worker-a")
            await held.wait_held()
            assert trio.current_time() == 0
            # The room has acted; only its answer waits.
            assert await _agents_the_room_has(http) == ["owner/worker-a"]
            await trio.sleep(5)
            assert (held.held, held.released, answered_at) == (1, False, [])
            held.release()
        assert answered_at == [5]
        assert held.released
        # Released for good: the rule's second answer passes at once.
        await post("worker-b")
    assert answered_at == [5, 5]
    assert (held.held, held.rule.active) == (2, False)


async def test_wait_held_counts_every_held_answer(
    autojump_clock: MockClock, fake_room: FakeRoom, http: httpx2.AsyncClient
) -> None:
    held = fake_room.on("POST", "/agents").hold(times=None)
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for delay, name in [(1, "worker-a"), (3, "worker-b")]:
                nursery.start_soon(_post_later, http, delay, name)
            await held.wait_held(2)
            assert trio.current_time() == 3
            held.release()


async def _post_later(http: httpx2.AsyncClient, delay: float, name: str) -> None:
    await trio.sleep(delay)
    await http.post("/agents", json=_agent(name))


# --- rewrite --------------------------------------------------------------------------------


async def test_rewrite_changes_the_rooms_json_answer_and_keeps_its_status(
    fake_room: FakeRoom, http: httpx2.AsyncClient
) -> None:
    seen: list[Any] = []

    def change(answer: Any) -> Any:
        seen.append(answer)
        return {**answer, "canonical_key": "someone/else", "extra": "é" * 10}

    fake_room.on("POST", "/agents").rewrite(change)
    answer = await http.post("/agents", json=_agent("worker-a"))
    assert answer.status_code == 200
    assert seen == [{**seen[0], "canonical_key": "owner/worker-a"}]
    assert answer.json() == {**seen[0], "canonical_key": "someone/else", "extra": "é" * 10}
    assert int(answer.headers["content-length"]) == len(answer.content)
    # Only the delivery changed: the room stored what it decided.
    assert await _agents_the_room_has(http) == ["owner/worker-a"]


# --- over real sockets ------------------------------------------------------------------------


async def test_the_app_serves_rules_over_hypercorn_where_drops_become_500s(
    fake_room: FakeRoom,
) -> None:
    """Real sockets and the real clock: ``fake_room.app`` under hypercorn."""
    config = Config()
    config.bind = ["127.0.0.1:0"]
    config.accesslog = None
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            binds: list[str] = await nursery.start(
                partial(serve, fake_room.app, config, mode="asgi")  # type: ignore[arg-type]
            )
            headers = {"Authorization": f"Bearer {fake_room.owner_token}"}
            async with httpx2.AsyncClient(base_url=binds[0], headers=headers) as http:
                fake_room.on("GET", "/agents/me").respond(503, {"error": "down"})
                fake_room.on("POST", "/agents").drop_before_commit()
                assert (await http.get("/agents/me")).status_code == 503
                assert (await http.post("/agents", json=_agent("worker-a"))).status_code == 500
                assert await _agents_the_room_has(http) == []
            nursery.cancel_scope.cancel(reason="test over")
