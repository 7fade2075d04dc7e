"""RoomClient: where calls go, what their errors say, and the bounds at their edges.

Rules of this module: the room is ``tests.test_client``'s scripted
``httpx2.MockTransport`` (its exits go through the lean path over an
in-process ASGI app); every test runs under a trio-clock budget.
"""

from __future__ import annotations

import email.utils
import logging
import time
from collections.abc import Iterator

import httpx2
import pytest
import trio
import trio.testing

from letagents_trio._client import RoomClient, _retry_after
from letagents_trio._errors import ApiError, RoomUnreachable
from letagents_trio._protocol import (
    AGENT_SESSION_ENDED_ADVICE,
    SESSION_ID_HEADER,
    SESSION_TOKEN_HEADER,
)

from .test_client import (
    API,
    BODY_SESSION_TOKEN,
    OWNER_TOKEN,
    SESSION,
    Hooks,
    Room,
    answer,
    assert_no_secret,
    client_for,
    refused,
)

EXIT_PATH = "/rooms/owner/repo name/agent-sessions/ses/1/process/exit"


# --- where a call goes -----------------------------------------------------------------


async def test_a_path_goes_under_the_api_url_and_a_full_url_as_given() -> None:
    """The API URL's own path is kept (only trailing slashes go); full URLs are not rebased."""
    urls: list[str] = []

    def record(request: httpx2.Request) -> httpx2.Response:
        urls.append(str(request.url))
        return answer(200, {})

    with trio.fail_after(1):
        async with RoomClient(
            "http://room.test/api/X//", transport=httpx2.MockTransport(record)
        ) as c:
            assert c.api_url == "http://room.test/api/X"
            await c.call("GET", "/rooms/r")
            await c.call("GET", "https://other.test/y")
            await c.call("GET", "http://other.test/z")
    assert urls == [
        "http://room.test/api/X/rooms/r",
        "https://other.test/y",
        "http://other.test/z",
    ]


async def test_a_closed_client_never_calls_the_room() -> None:
    """Closed before its first ordinary call, it makes no HTTP client and sends nothing."""
    room = Room([answer(200, {})])
    client = RoomClient(API, transport=httpx2.MockTransport(room))
    await client.aclose()
    with trio.fail_after(1), pytest.raises(RuntimeError, match=r"^the RoomClient is closed$"):
        await client.call("GET", "/rooms/r")
    assert room.seen == []


async def test_busy_retries_keep_the_sessions_credentials(
    autojump_clock: trio.testing.MockClock,
) -> None:
    busy = answer(503, {"error": "busy"})
    room = Room([busy, answer(201, {"ok": True})])
    with trio.fail_after(5):
        async with client_for(room) as client:
            got = await client.call_when_free("POST", "/rooms/r/x", json={}, session=SESSION)
    assert got == {"ok": True}
    assert [
        (seen.at, seen.headers[SESSION_ID_HEADER], seen.headers[SESSION_TOKEN_HEADER])
        for seen in room.seen
    ] == [(0, "ses/1", SESSION.session_token), (1, "ses/1", SESSION.session_token)]


# --- bodies and answers ----------------------------------------------------------------


async def test_a_body_that_json_cannot_carry_is_refused_before_it_is_sent() -> None:
    """NaN and infinities are no JSON: the call fails at once, the room receives nothing."""
    room = Room([answer(200, {})])
    with trio.fail_after(1):
        async with client_for(room) as client:
            for value in (float("nan"), float("inf")):
                with pytest.raises(ValueError, match="JSON"):
                    await client.call("POST", "/rooms/r/x", json={"v": value})
    assert room.seen == []


async def test_a_300_answer_is_a_refusal() -> None:
    """Only 2xx answers are answers: a 300 (never followed) is an ApiError with its body."""
    with trio.fail_after(1):
        async with client_for(Room([answer(300, {"error": "elsewhere"})])) as client:
            with pytest.raises(ApiError) as caught:
                await client.call("GET", "/rooms/r")
    assert (caught.value.status, caught.value.body) == (300, '{"error": "elsewhere"}')


async def test_invalid_json_is_named_by_method_and_path_on_calls_and_exits() -> None:
    room = Room([answer(200, "not json")])
    with trio.fail_after(1):
        async with client_for(room) as client:
            with pytest.raises(RoomUnreachable) as call:
                await client.call("GET", "/rooms/r%20s/x?q=1")
            with pytest.raises(RoomUnreachable) as exit_:
                await client.announce_exit(SESSION, "pc_1")
    assert str(call.value) == "GET /rooms/r s/x answered with invalid JSON"
    assert str(exit_.value) == f"POST {EXIT_PATH} answered with invalid JSON"


async def test_a_body_over_the_cap_is_named_by_method_and_path() -> None:
    room = Room([answer(200, "x" * 5000)])
    with trio.fail_after(1):
        async with RoomClient(
            API, transport=httpx2.MockTransport(room), max_answer_bytes=4096
        ) as client:
            with pytest.raises(RoomUnreachable) as caught:
                await client.call("DELETE", "/rooms/r/x")
    assert str(caught.value) == (
        "DELETE /rooms/r/x answered with a body larger than 4096 bytes; refused"
    )


async def test_the_smallest_bounds_are_accepted_and_hold(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """Half a second and one byte are bounds like any other."""
    one_byte = Room([answer(200, "7")])
    with trio.fail_after(1):
        async with RoomClient(
            API, transport=httpx2.MockTransport(one_byte), call_timeout=0.5, max_answer_bytes=1
        ) as client:
            assert await client.call("GET", "/rooms/r") == 7

    async def never(request: httpx2.Request) -> httpx2.Response:
        await trio.sleep_forever()

    with trio.fail_after(1):
        async with RoomClient(
            API, transport=httpx2.MockTransport(never), call_timeout=0.5
        ) as client:
            with pytest.raises(RoomUnreachable, match=r"^GET /rooms/r: no answer within 0.5 s$"):
                await client.call("GET", "/rooms/r")
    assert trio.current_time() == 0.5


async def test_refusals_not_in_utf_8_are_shown_with_replacement_characters() -> None:
    """A room's bytes that are not UTF-8 never fail the call: exits and calls alike."""
    broken = httpx2.Response(503, content=b"busy \xff\xfe")
    with trio.fail_after(1):
        async with client_for(Room([broken])) as client:
            with pytest.raises(ApiError) as call:
                await client.call("POST", "/rooms/r/x", json={})
            with pytest.raises(ApiError) as exit_:
                await client.announce_exit(SESSION, "pc_1")
    assert call.value.body == exit_.value.body == "busy \ufffd\ufffd"


async def test_a_refusal_is_read_in_the_charset_it_names() -> None:
    latin = httpx2.Response(
        409,
        content="café occupé".encode("latin-1"),
        headers={"Content-Type": "text/plain; charset=iso-8859-1"},
    )
    with trio.fail_after(1):
        async with client_for(Room([latin])) as client:
            with pytest.raises(ApiError) as caught:
                await client.call("POST", "/rooms/r/x", json={})
    assert caught.value.body == "café occupé"


# --- what a refused call logs --------------------------------------------------------------


async def test_a_failing_owner_logout_is_logged_without_the_owner_token(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    hooks = Hooks(fail=RuntimeError(f"stored token {OWNER_TOKEN} differs"))
    error, _ = await refused(401, {"error": "Unauthorized"}, state=hooks)
    assert (error.status, hooks.auth_cleared) == (401, 1)
    assert [r.getMessage() for r in caplog.records if "local state" in r.getMessage()] == [
        "could not clear the stored owner auth in local state: "
        "RuntimeError: stored token [redacted] differs"
    ]
    assert_no_secret(caplog.text)


async def test_a_failing_end_is_logged_without_the_token_the_body_carried(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING)
    hooks = Hooks(fail=RuntimeError(f"token {BODY_SESSION_TOKEN} did not match"))
    body = {"agent_session_id": "ses-9", "agent_session_token": BODY_SESSION_TOKEN}
    error, _ = await refused(401, AGENT_SESSION_ENDED_ADVICE, json_body=body, state=hooks)
    assert error.status == 401
    assert hooks.ended == [("ses-9", None, BODY_SESSION_TOKEN)]
    assert [r.getMessage() for r in caplog.records if "local state" in r.getMessage()] == [
        "could not mark the session ended in local state: "
        "RuntimeError: token [redacted] did not match"
    ]
    assert_no_secret(caplog.text)


# --- Retry-After dates ---------------------------------------------------------------------


@pytest.fixture
def far_from_utc(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The process's local time zone five hours behind UTC (no summer time)."""
    monkeypatch.setenv("TZ", "EST+05")
    time.tzset()
    try:
        yield
    finally:
        monkeypatch.undo()
        time.tzset()


@pytest.mark.usefixtures("far_from_utc")
@pytest.mark.parametrize("zone", ["-0000", "GMT", "+0100"])
def test_a_retry_after_date_is_read_in_its_own_zone_whatever_the_local_one(zone: str) -> None:
    """A date with no zone (``-0000``) is UTC; a date with one keeps it."""
    when = time.time() + 120
    if zone == "+0100":
        text = email.utils.formatdate(when + 3600, usegmt=False)[:-5] + "+0100"
    else:
        text = email.utils.formatdate(when, usegmt=zone == "GMT")
    assert text.endswith(zone)
    seconds = _retry_after(text)
    assert seconds is not None
    assert 100 < seconds <= 120
