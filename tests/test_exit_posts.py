"""Exits handed over by the room client (``hand_exit``, ``deliver_exits``): each settled as
``announce_exit`` would answer, from the same request."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from letagents_trio import AgentSession, ApiError, RoomClient, RoomUnreachable
from letagents_trio._protocol import AGENT_SESSION_ENDED_ERROR
from letagents_trio._request_parts import dumps, exit_body, exit_json

from .test_http_pool import OK, Action, ScriptedRoom

if TYPE_CHECKING:
    from letagents_trio._exits import HandedExit

SESSION = AgentSession(session_id="s/1 x", session_token="tok-1", room_id="owner/repo x")


def answer(status: int, body: bytes, *fields: str) -> bytes:
    head = "".join(f"{field}\r\n" for field in fields)
    return b"HTTP/1.1 %d X\r\n%sContent-Length: %d\r\n\r\n%s" % (
        status,
        head.encode(),
        len(body),
        body,
    )


class State:
    """The state hooks, noting each rule applied."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, ...]] = []

    async def end_session(self, session_id: str, ended_at: str | None, expected_token: str) -> None:
        await trio.lowlevel.checkpoint()
        self.calls.append(("end_session", session_id, expected_token))

    async def clear_auth(self, refused_token: str) -> None:
        await trio.lowlevel.checkpoint()
        self.calls.append(("clear_auth", refused_token))


@pytest.fixture
async def room(nursery: trio.Nursery) -> ScriptedRoom:
    return ScriptedRoom(nursery=nursery)


async def handed_exit(
    room: ScriptedRoom, reply: Action, state: State | None = None
) -> tuple[HandedExit, list[HandedExit], list[str]]:
    """One exit handed over and delivered, answered with ``reply``: it, its settling, its
    stream's closes (told once the exit was written)."""
    room.script = lambda connection, request: reply
    settled: list[HandedExit] = []
    closed: list[str] = []
    async with RoomClient("http://room.test", opener=room, state=state) as client:
        handed = client.hand_exit(SESSION, "conn-1", sent=lambda: closed.append("closed"))
        assert handed.send(settled.append)
        assert (settled, closed) == ([], [])
        await client.deliver_exits()
    return handed, settled, closed


async def test_a_handed_exit_is_the_request_announce_exit_sends(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    handed, settled, closed = await handed_exit(room, OK)
    assert settled == [handed]
    assert (handed.recorded, handed.failure, closed) == (True, None, ["closed"])
    async with RoomClient("http://room.test", opener=room) as client:
        assert await client.announce_exit(SESSION, "conn-1") is True
    (first_target, first), (second_target, second) = [
        (target, request)
        for (_, _, target, _), request in zip(room.seen, room.requests, strict=True)
    ]
    assert first_target == second_target
    assert first_target == "/rooms/owner/repo%20x/agent-sessions/s%2F1%20x/process/exit"
    assert first == second
    assert json.loads(first[1]) == exit_body(SESSION, "conn-1")


@pytest.mark.parametrize(
    ("reply", "recorded", "failure"),
    [
        (answer(200, b'{"recorded":false}'), False, None),
        (answer(200, b""), False, None),
        (answer(200, b"not json"), False, RoomUnreachable),
        (answer(503, b"busy", "Retry-After: 7"), False, ApiError),
        ("close", False, RoomUnreachable),
    ],
    ids=["not recorded", "empty", "not json", "busy", "hung up"],
)
async def test_a_handed_exit_is_settled_as_announce_exit_would_answer(
    autojump_clock: trio.testing.MockClock,
    room: ScriptedRoom,
    reply: Action,
    recorded: bool,
    failure: type[Exception] | None,
) -> None:
    handed, settled, _ = await handed_exit(room, reply)
    assert settled == [handed]
    assert handed.recorded is recorded
    if failure is None:
        assert handed.failure is None
    else:
        assert isinstance(handed.failure, failure)
    if isinstance(handed.failure, ApiError):
        assert (handed.failure.status, handed.failure.retry_after) == (503, 7.0)
    if isinstance(handed.failure, RoomUnreachable):
        # Its path, never the host or a credential.
        assert "/rooms/owner/repo x/agent-sessions/s/1 x/process/exit" in str(handed.failure)
        assert "room.test" not in str(handed.failure)


async def test_a_401_to_a_handed_exit_is_applied_to_local_state_by_the_delivery(
    autojump_clock: trio.testing.MockClock, room: ScriptedRoom
) -> None:
    state = State()
    body = json.dumps({"error": AGENT_SESSION_ENDED_ERROR + " tok-1"}).encode()
    handed, settled, _ = await handed_exit(room, answer(401, body), state)
    assert settled == [handed]
    assert isinstance(handed.failure, ApiError)
    assert handed.failure.status == 401
    assert "tok-1" not in str(handed.failure)  # redacted
    assert state.calls == [("end_session", SESSION.session_id, "tok-1")]


@given(
    session_id=st.text(),
    token=st.text(),
    connection_id=st.none() | st.text(),
)
def test_the_exit_body_written_at_once_is_the_one_dumps_writes(
    session_id: str, token: str, connection_id: str | None
) -> None:
    session = AgentSession(session_id=session_id, session_token=token, room_id="r")
    write: Callable[[], bytes] = lambda: dumps(exit_body(session, connection_id))  # noqa: E731
    try:
        expected = write()
    except UnicodeEncodeError:
        with pytest.raises(UnicodeEncodeError):
            exit_json(session, connection_id)
        return
    assert exit_json(session, connection_id) == expected


async def test_an_exit_that_cannot_be_written_is_not_handed_over(room: ScriptedRoom) -> None:
    """A session id no header can carry: nothing is sent, and the stream's leave() then
    fails it as announce_exit does."""
    session = AgentSession(session_id="s\u00e9", session_token="t", room_id="r")
    async with RoomClient("http://room.test", opener=room) as client:
        handed = client.hand_exit(session, "conn-1", sent=lambda: None)
        assert handed.send(lambda exit: None) is False
        with pytest.raises(RoomUnreachable, match="LocalProtocolError"):
            await client.announce_exit(session, "conn-1")
    assert room.opened == 0
