"""Which TLS session a new connection is offered, and when (``letagents_trio._http._resume``).

The rules alone, under ``autojump_clock`` with exact virtual times: sessions
are stand-ins (the rules never look inside one). Real handshakes resuming
are in tests/e2e/test_tls_resume.py.
"""

from __future__ import annotations

import ssl
from typing import cast

import trio

from letagents_trio._http._resume import MAX_ROOMS, SESSION_WAIT, RoomSessions, TLSSessions

SESSION = cast("ssl.SSLSession", object())
NEWER = cast("ssl.SSLSession", object())


async def _offers(
    room: RoomSessions, count: int
) -> list[tuple[float, ssl.SSLSession | None, bool]]:
    """``count`` connections asking at once: when each was answered, what, whether it went first."""
    answers: list[tuple[float, ssl.SSLSession | None, bool]] = []

    async def ask() -> None:
        session, first = await room.offer()
        answers.append((trio.current_time(), session, first is not None))

    async with trio.open_nursery() as nursery:
        for _ in range(count):
            nursery.start_soon(ask)
    return answers


async def test_with_no_session_the_first_goes_alone_and_the_others_get_its_session(
    autojump_clock: trio.abc.Clock,
) -> None:
    room = RoomSessions()
    session, first = await room.offer()
    assert (session, trio.current_time()) == (None, 0)
    assert first is not None

    async def first_handshake() -> None:
        await trio.sleep(0.3)
        room.keep(SESSION, first)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(first_handshake)
        answers = await _offers(room, 3)
    assert answers == [(0.3, SESSION, False)] * 3
    assert room.session is SESSION


async def test_a_first_connection_with_no_session_lets_the_others_go_at_once(
    autojump_clock: trio.abc.Clock,
) -> None:
    room = RoomSessions()
    _, first = await room.offer()

    async def first_handshake() -> None:
        await trio.sleep(0.2)
        room.keep(None, first)  # failed, or the room sent no ticket

    async with trio.open_nursery() as nursery:
        nursery.start_soon(first_handshake)
        answers = await _offers(room, 2)
    assert answers == [(0.2, None, False)] * 2
    # The next opening goes first in its turn.
    assert [(s, f) for _, s, f in await _offers(room, 1)] == [(None, True)]


async def test_a_first_connection_that_never_tells_holds_the_others_up_once_for_the_bound(
    autojump_clock: trio.abc.Clock,
) -> None:
    room = RoomSessions()
    await room.offer()  # goes first, then is never heard of
    assert await _offers(room, 2) == [(SESSION_WAIT, None, False)] * 2
    answers = await _offers(room, 2)
    assert answers == [(SESSION_WAIT, None, True), (2 * SESSION_WAIT, None, False)]


async def test_a_session_kept_is_offered_at_once_and_a_later_one_replaces_it(
    autojump_clock: trio.abc.Clock,
) -> None:
    room = RoomSessions()
    room.keep(SESSION)
    assert await _offers(room, 2) == [(0, SESSION, False)] * 2
    room.keep(NEWER)
    room.keep(None)
    assert room.session is NEWER


async def test_a_refused_session_is_offered_no_more_and_the_next_opening_goes_first(
    autojump_clock: trio.abc.Clock,
) -> None:
    room = RoomSessions()
    room.keep(SESSION)
    room.refused(NEWER)  # not the one kept: nothing changes
    kept = [room.session]
    room.refused(SESSION)
    assert [*kept, room.session] == [SESSION, None]
    assert [(s, f) for _, s, f in await _offers(room, 1)] == [(None, True)]


async def test_cancelled_while_waiting_leaves_the_first_connection_going(
    autojump_clock: trio.abc.Clock,
) -> None:
    room = RoomSessions()
    _, first = await room.offer()
    with trio.move_on_after(0.1):
        await room.offer()
    assert trio.current_time() == 0.1
    room.keep(SESSION, first)
    assert await _offers(room, 1) == [(0.1, SESSION, False)]


def test_rooms_are_told_apart_by_name_port_and_the_contexts_checks() -> None:
    context = ssl.create_default_context()
    sessions = TLSSessions(context)
    room = sessions.room("room.example", 443)
    assert sessions.room("room.example", 443) is room
    others = [sessions.room("other.example", 443), sessions.room("room.example", 8443)]
    context.verify_flags |= ssl.VERIFY_X509_STRICT
    others.append(sessions.room("room.example", 443))
    context.check_hostname = False
    others.append(sessions.room("room.example", 443))
    context.verify_mode = ssl.CERT_NONE
    others.append(sessions.room("room.example", 443))
    assert len({id(r) for r in [room, *others]}) == 6


def test_the_rooms_kept_are_bounded() -> None:
    sessions = TLSSessions(ssl.create_default_context())
    first = sessions.room("room-0.example", 443)
    for index in range(1, MAX_ROOMS + 1):
        sessions.room(f"room-{index}.example", 443)
    assert sessions.room("room-0.example", 443) is not first
    assert repr(sessions) == "<TLSSessions rooms=2>"
