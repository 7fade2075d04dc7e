"""Tests of RoomClient: paths, credentials, errors, PROTOCOL §5.7 rules, busy retries.

Rules of this module:

- The room is a scripted ``httpx2.MockTransport`` (:class:`Room`) that records
  every request with the trio time it arrived; the process stream is also
  served once by a real ASGI app through ``open_streaming_transport``.
- The state file is a :class:`Hooks` recorder satisfying ``StateHooks``.
- Timing tests take ``autojump_clock`` and assert exact virtual times.
  ``Retry-After`` HTTP dates are read against ``time.time()``, so the dates
  used are far in the past or far in the future, never near now.
- Every test runs under a trio-clock budget (``fail_after``) besides the
  global pytest-timeout.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from contextlib import aclosing, asynccontextmanager
from typing import TYPE_CHECKING, Any

import attrs
import httpx2
import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

from letagents_trio._client import (
    RoomClient,
    _retry_after,
    encode_room_path,
    encode_session_path,
)
from letagents_trio._errors import ApiError, RoomUnreachable
from letagents_trio._protocol import (
    AGENT_SESSION_ENDED_ADVICE,
    AGENT_SESSION_ENDED_ERROR,
    SESSION_ID_HEADER,
    SESSION_TOKEN_HEADER,
)
from letagents_trio._session import AgentSession
from letagents_trio._sse_connector import STREAM_HEADERS
from letagents_trio.testing._transport import open_streaming_transport
from letagents_trio.workers._state import LocalStateStore

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, MutableMapping
    from pathlib import Path

    from letagents_trio._http import Response
    from letagents_trio._refusals import StateHooks

API = "http://room.test"
OWNER_TOKEN = "owner-token-5b0c9e1f"
SESSION_TOKEN = "session-token-77aa31"
CONNECTION_TOKEN = "connection-token-c0ffee"
BODY_SESSION_TOKEN = "body-session-token-d00d"
REPLACE_TOKEN = "replace-token-beef42"
ALL_SECRETS = (OWNER_TOKEN, SESSION_TOKEN, CONNECTION_TOKEN, BODY_SESSION_TOKEN, REPLACE_TOKEN)
ISO_MS = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$")

SESSION = AgentSession(session_id="ses/1", session_token=SESSION_TOKEN, room_id="owner/repo name")
SESSION_PATH = "/rooms/owner/repo%20name/agent-sessions/ses%2F1"

Handler = Callable[[httpx2.Request], httpx2.Response]


@attrs.define(eq=False)
class Seen:
    """One request as the room received it."""

    at: float
    method: str
    raw_path: bytes
    headers: httpx2.Headers
    content: bytes

    def json(self) -> Any:
        return json.loads(self.content)


@attrs.define(eq=False)
class Room:
    """A MockTransport handler answering from a script, recording requests."""

    answers: list[httpx2.Response | Handler | Exception]
    seen: list[Seen] = attrs.Factory(list)

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        self.seen.append(
            Seen(
                at=trio.current_time(),
                method=request.method,
                raw_path=request.url.raw_path,
                headers=request.headers,
                content=request.content,
            )
        )
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        if isinstance(answer, httpx2.Response):
            return answer
        return answer(request)

    @property
    def times(self) -> list[float]:
        return [seen.at for seen in self.seen]


@attrs.define(eq=False)
class Hooks:
    """A StateHooks recorder; ``fail`` makes both hooks raise after recording."""

    fail: Exception | None = None
    ended: list[tuple[str, str | None, str]] = attrs.Factory(list)
    auth_cleared: int = 0

    async def end_session(
        self, session_id: str, ended_at: str | None, expected_token: str
    ) -> object:
        await trio.lowlevel.checkpoint()
        self.ended.append((session_id, ended_at, expected_token))
        if self.fail is not None:
            raise self.fail
        return True

    async def clear_auth(self, refused_token: str) -> object:
        await trio.lowlevel.checkpoint()
        self.auth_cleared += 1
        if self.fail is not None:
            raise self.fail
        return True


def answer(status: int, body: object = None, **headers: str) -> httpx2.Response:
    """A response with a JSON body (a str body is sent as is)."""
    content = body if isinstance(body, str) else ("" if body is None else json.dumps(body))
    return httpx2.Response(status, content=content.encode(), headers=headers)


def asgi_of(room: Room) -> Any:
    """The scripted room as an ASGI app, for the lean requests (process stream, exit).

    An exception in the script cuts the connection, as a network error would.
    """

    async def app(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        message = await receive()
        target = scope["raw_path"] + (
            b"?" + scope["query_string"] if scope["query_string"] else b""
        )
        request = httpx2.Request(
            scope["method"],
            API + target.decode("latin-1"),
            headers=[(k, v) for k, v in scope["headers"] if k != b"host"],
            content=message.get("body", b""),
        )
        response = room(request)
        headers = [(k.lower(), v) for k, v in response.headers.raw]
        await send(
            {"type": "http.response.start", "status": response.status_code, "headers": headers}
        )
        try:
            # A scripted answer may be given again: its content was read once.
            chunks = [response.content]
        except httpx2.ResponseNotRead:
            # Scripted bodies end: read them before answering.
            chunks = []
            async with aclosing(response.aiter_raw()) as raw:
                async for chunk in raw:
                    chunks.append(chunk)
        for chunk in chunks:
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    return app


@asynccontextmanager
async def client_for(
    room: Room,
    *,
    owner_token: str | None = OWNER_TOKEN,
    state: StateHooks | None = None,
) -> AsyncIterator[RoomClient]:
    """A client whose calls go to ``room`` through httpx2 and whose lean requests through h11.

    An error raised in the block comes out as itself, not in the group of the
    in-memory server's nursery.
    """
    try:
        async with open_streaming_transport(asgi_of(room)) as lean:
            async with RoomClient(
                API + "/",
                owner_token=owner_token,
                transport=httpx2.MockTransport(room),
                opener=lean,
                state=state,
            ) as client:
                yield client
    except BaseExceptionGroup as group:
        if len(group.exceptions) == 1:
            [sole] = group.exceptions  # a test's one error, unwrapped
            raise sole from None
        raise


async def refused(
    status: int,
    body: object,
    *,
    json_body: object = None,
    session: AgentSession | None = None,
    owner_token: str | None = OWNER_TOKEN,
    state: Hooks | None = None,
) -> tuple[ApiError, Hooks]:
    """Make one POST the room answers with ``status``/``body``; return the error."""
    hooks = Hooks() if state is None else state
    room = Room([answer(status, body)])
    with trio.fail_after(1):
        async with client_for(room, owner_token=owner_token, state=hooks) as client:
            with pytest.raises(ApiError) as caught:
                await client.call("POST", "/rooms/r/messages", json=json_body, session=session)
    return caught.value, hooks


def assert_no_secret(text: str) -> None:
    for secret in ALL_SECRETS:
        assert secret not in text


# --- call: requests ------------------------------------------------------------


async def test_call_returns_parsed_json_with_json_content_type_and_owner_bearer() -> None:
    room = Room([answer(200, {"a": [1, None]}), answer(201, {"created": True})])
    with trio.fail_after(1):
        async with client_for(room) as client:
            assert await client.call("GET", "/agents/me") == {"a": [1, None]}
            assert await client.call("POST", "/agents", json={"name": "w é"}) == {"created": True}
    get, post = room.seen
    assert (get.method, get.raw_path, get.content) == ("GET", b"/agents/me", b"")
    assert (post.method, post.raw_path) == ("POST", b"/agents")
    assert post.json() == {"name": "w é"}
    for seen in room.seen:
        assert seen.headers["Content-Type"] == "application/json"
        assert seen.headers["Authorization"] == f"Bearer {OWNER_TOKEN}"
        assert SESSION_ID_HEADER not in seen.headers
        assert SESSION_TOKEN_HEADER not in seen.headers


async def test_call_without_owner_token_sends_no_bearer() -> None:
    room = Room([answer(200, {})])
    with trio.fail_after(1):
        async with client_for(room, owner_token=None) as client:
            assert not client.has_owner_token
            await client.call("GET", "/x")
    assert "Authorization" not in room.seen[0].headers
    assert room.seen[0].headers["Content-Type"] == "application/json"


async def test_call_with_session_sends_both_session_headers() -> None:
    room = Room([answer(200, {})])
    with trio.fail_after(1):
        async with client_for(room) as client:
            await client.call("GET", "/x", session=SESSION)
    headers = room.seen[0].headers
    assert headers[SESSION_ID_HEADER] == "ses/1"
    assert headers[SESSION_TOKEN_HEADER] == SESSION_TOKEN
    assert headers["Authorization"] == f"Bearer {OWNER_TOKEN}"


@pytest.mark.parametrize(
    "response",
    [httpx2.Response(204), answer(200, ""), answer(200, " \r\n\t"), answer(202, "")],
)
async def test_empty_2xx_body_is_none(response: httpx2.Response) -> None:
    with trio.fail_after(1):
        async with client_for(Room([response])) as client:
            assert await client.call("POST", "/x", json={}) is None


@pytest.mark.parametrize("body", ["not json", "{", "<html>oops</html>"])
async def test_invalid_json_is_room_unreachable(body: str) -> None:
    with trio.fail_after(1):
        async with client_for(Room([answer(200, body)])) as client:
            with pytest.raises(RoomUnreachable, match="invalid JSON"):
                await client.call("GET", "/rooms/r")


async def test_an_answer_in_a_content_coding_is_refused_undecoded() -> None:
    """Calls ask for identity (issue 13 row 2): a gzip answer is refused, never inflated."""
    gzip_lie = httpx2.Response(
        200, stream=httpx2.ByteStream(b"not gzip"), headers={"Content-Encoding": "gzip"}
    )
    room = Room([gzip_lie])
    with trio.fail_after(1):
        async with client_for(room) as client:
            with pytest.raises(RoomUnreachable, match="content coding it was not asked for"):
                await client.call("GET", "/rooms/r")
    assert room.seen[0].headers["Accept-Encoding"] == "identity"


@pytest.mark.parametrize(
    "error",
    [
        httpx2.ConnectError(f"refused while sending {OWNER_TOKEN} {SESSION_TOKEN}"),
        httpx2.ReadTimeout(f"slow {CONNECTION_TOKEN}"),
        httpx2.RemoteProtocolError(f"reset {SESSION_TOKEN}"),
    ],
)
async def test_network_error_is_room_unreachable_without_secrets(
    error: httpx2.TransportError,
) -> None:
    with trio.fail_after(1):
        async with client_for(Room([error])) as client:
            with pytest.raises(RoomUnreachable) as caught:
                await client.call(
                    "POST",
                    f"{SESSION_PATH}/disconnect?token={OWNER_TOKEN}",
                    json={"connection_token": CONNECTION_TOKEN},
                    session=SESSION,
                )
    message = str(caught.value)
    path = "/rooms/owner/repo name/agent-sessions/ses/1/disconnect"
    assert message == f"POST {path} failed: {type(error).__name__}"
    assert_no_secret(message)
    assert caught.value.__cause__ is error


# --- paths -------------------------------------------------------------------------


def test_room_path_is_encoded_per_segment_and_session_path_whole() -> None:
    assert encode_room_path("owner/repo name") == "owner/repo%20name"
    assert encode_room_path("a?b/c#d/%") == "a%3Fb/c%23d/%25"
    assert encode_room_path("room_shared") == "room_shared"
    assert encode_session_path("a/b") == "a%2Fb"
    assert encode_session_path("a b?c#%") == "a%20b%3Fc%23%25"


async def test_server_receives_encoded_paths() -> None:
    session = AgentSession(session_id="a/b", session_token=SESSION_TOKEN, room_id="owner/repo name")
    room = Room([answer(200, {})])
    with trio.fail_after(1):
        async with client_for(room) as client:
            assert client.api_url == API
            await client.call("GET", client.session_url(session, "/x"), session=session)
            await client.call("GET", f"/rooms/{encode_room_path('owner/repo name')}/messages")
            await client.announce_exit(session, None)
            async with open_process_stream(client, session):
                pass
    assert [seen.raw_path for seen in room.seen] == [
        b"/rooms/owner/repo%20name/agent-sessions/a%2Fb/x",
        b"/rooms/owner/repo%20name/messages",
        b"/rooms/owner/repo%20name/agent-sessions/a%2Fb/process/exit",
        b"/rooms/owner/repo%20name/agent-sessions/a%2Fb/process",
    ]


# --- non-2xx answers and redaction --------------------------------------------------


@pytest.mark.parametrize("status", [400, 403, 404, 409, 410, 500, 502])
async def test_non_2xx_is_api_error_with_status_body_and_message(status: int) -> None:
    body = '{"error":"nope","code":"x"}'
    error, hooks = await refused(status, body, json_body={"a": 1})
    assert (error.status, error.body) == (status, body)
    assert str(error) == f"API error {status}: {body}"
    assert error.retry_after is None
    assert (hooks.ended, hooks.auth_cleared) == ([], 0)


async def test_secrets_echoed_by_the_room_are_redacted_everywhere(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    echo = " ".join(ALL_SECRETS)
    body = {
        "connection_token": CONNECTION_TOKEN,
        "agent_session_id": "ses/1",
        "agent_session_token": BODY_SESSION_TOKEN,
        "replace_agent_session_token": REPLACE_TOKEN,
    }
    room = Room([answer(400, {"error": f"bad credentials {echo}"})])
    with trio.fail_after(1):
        async with client_for(room, state=Hooks()) as client:
            with pytest.raises(ApiError) as caught:
                await client.call("POST", "/rooms/r/agent-sessions", json=body, session=SESSION)
            shown = [str(caught.value), caught.value.body, repr(caught.value), repr(client)]
    assert caught.value.body.count("[redacted]") == len(ALL_SECRETS)
    assert caught.value.body == json.dumps(
        {"error": "bad credentials " + " ".join(["[redacted]"] * 5)}
    )
    for text in shown:
        assert_no_secret(text)
    assert caplog.records  # httpx2 logged the request
    assert_no_secret(caplog.text)
    for record in caplog.records:
        assert_no_secret(record.getMessage())


async def test_redaction_hides_a_longer_secret_that_contains_a_shorter_one() -> None:
    owner = "abcd1234"
    session = AgentSession(session_id="s", session_token=owner + "-and-more", room_id="r")
    room = Room([answer(401, f"echo {session.session_token} / {owner}")])
    with trio.fail_after(1):
        async with client_for(room, owner_token=owner) as client:
            with pytest.raises(ApiError) as caught:
                await client.call("GET", "/x", session=session)
    assert caught.value.body == "echo [redacted] / [redacted]"


async def test_redaction_hides_json_escaped_secrets() -> None:
    token = 'tok"en\\é-1234'
    body = json.dumps({"a": token}) + json.dumps({"b": token}, ensure_ascii=False)
    room = Room([answer(409, body)])
    with trio.fail_after(1):
        async with client_for(room, owner_token=None) as client:
            with pytest.raises(ApiError) as caught:
                await client.call("POST", "/x", json={"connection_token": token})
    assert caught.value.body == '{"a": "[redacted]"}{"b": "[redacted]"}'


async def test_very_short_values_are_not_treated_as_secrets() -> None:
    room = Room([answer(400, "a bad abc")])
    with trio.fail_after(1):
        async with client_for(room, owner_token="abc") as client:
            with pytest.raises(ApiError) as caught:
                await client.call("GET", "/x", json={"connection_token": "a"})
    assert caught.value.body == "a bad abc"


def test_repr_shows_no_token() -> None:
    client = RoomClient(API, owner_token=OWNER_TOKEN, state=Hooks())
    assert repr(client) == "<RoomClient api_url='http://room.test' owner_token=set>"
    assert repr(RoomClient(API)) == "<RoomClient api_url='http://room.test' owner_token=none>"


@pytest.mark.parametrize(
    "url", ["localhost:3001", "127.0.0.1:3001", "ftp://room.test", "http://", "/api", ""]
)
def test_a_url_that_is_not_http_is_refused_when_the_client_is_made(url: str) -> None:
    # Issue 29: RoomClient("localhost:3001") was accepted and failed at the first call.
    with pytest.raises(ValueError, match="is not an http") as caught:
        RoomClient(url)
    assert str(caught.value) == (
        f"api_url {url!r} is not an http(s) URL: give the room API's address with its"
        " scheme and host, for example http://localhost:3001"
    )


@pytest.mark.parametrize(
    "url", ["http://localhost:3001", "https://room.test/api/", "http://[::1]:1"]
)
def test_http_and_https_urls_are_accepted(url: str) -> None:
    assert RoomClient(url).api_url == url.rstrip("/")


# --- a 401 for an ended session (PROTOCOL §5.7) ------------------------------------


@pytest.mark.parametrize(
    "body",
    [
        {"error": AGENT_SESSION_ENDED_ADVICE},
        f"prefix {AGENT_SESSION_ENDED_ERROR} suffix",
    ],
)
async def test_ended_401_marks_the_header_session_ended(body: object) -> None:
    error, hooks = await refused(
        401,
        body,
        session=SESSION,
        json_body={"agent_session_id": "other", "agent_session_token": "other-token"},
    )
    assert error.status == 401
    # No time: the state stamps it with its own (injectable) wall clock.
    assert hooks.ended == [("ses/1", None, SESSION_TOKEN)]
    assert hooks.auth_cleared == 0


async def test_ended_401_takes_ids_from_the_body_without_session_headers() -> None:
    _, hooks = await refused(
        401,
        {"error": AGENT_SESSION_ENDED_ADVICE},
        json_body={"agent_session_id": "ses-b", "agent_session_token": BODY_SESSION_TOKEN},
    )
    assert [(sid, token) for sid, _, token in hooks.ended] == [("ses-b", BODY_SESSION_TOKEN)]
    assert hooks.auth_cleared == 0  # agent_session_token makes it a worker call


@pytest.mark.parametrize(
    "json_body",
    [
        None,
        {"agent_session_token": BODY_SESSION_TOKEN},
        {"agent_session_id": "ses-b", "agent_session_token": ""},
        {"agent_session_id": 7, "agent_session_token": BODY_SESSION_TOKEN},
    ],
)
async def test_ended_401_without_both_ids_ends_nothing(json_body: object) -> None:
    _, hooks = await refused(401, AGENT_SESSION_ENDED_ADVICE, json_body=json_body)
    assert hooks.ended == []


@pytest.mark.parametrize(
    ("status", "body"),
    [
        (403, AGENT_SESSION_ENDED_ADVICE),
        (410, AGENT_SESSION_ENDED_ADVICE),
        (401, '{"error":"Invalid agent session credentials."}'),
        (401, "This agent session has ended"),  # no full stop: not the text
    ],
)
async def test_other_refusals_of_a_worker_call_change_nothing(status: int, body: str) -> None:
    error, hooks = await refused(status, body, session=SESSION)
    assert error.status == status
    assert (hooks.ended, hooks.auth_cleared) == ([], 0)


async def test_failing_state_hook_is_swallowed_and_logged_without_secrets(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    hooks = Hooks(fail=RuntimeError(f"token {SESSION_TOKEN} did not match"))
    error, _ = await refused(401, AGENT_SESSION_ENDED_ADVICE, session=SESSION, state=hooks)
    assert error.status == 401
    assert len(hooks.ended) == 1
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert warning.getMessage() == (
        "could not mark the session ended in local state: "
        "RuntimeError: token [redacted] did not match"
    )
    assert warning.exc_info is None
    assert_no_secret(caplog.text)


async def test_failing_clear_auth_is_swallowed() -> None:
    hooks = Hooks(fail=OSError("disk full"))
    error, _ = await refused(401, {"error": "Invalid token"}, state=hooks)
    assert (error.status, hooks.auth_cleared) == (401, 1)


async def test_cancelled_state_hook_is_not_swallowed(autojump_clock: trio.abc.Clock) -> None:
    @attrs.define(eq=False)
    class Stuck(Hooks):
        async def end_session(
            self, session_id: str, ended_at: str | None, expected_token: str
        ) -> object:
            await trio.sleep_forever()

    room = Room([answer(401, AGENT_SESSION_ENDED_ADVICE)])
    with trio.fail_after(1):
        async with client_for(room, state=Stuck()) as client:
            with trio.move_on_after(0.25) as scope:
                await client.call("GET", "/x", session=SESSION)
    assert scope.cancelled_caught
    assert trio.current_time() == 0.25


async def test_no_state_hooks_means_401_is_only_an_error() -> None:
    room = Room([answer(401, AGENT_SESSION_ENDED_ADVICE)])
    with trio.fail_after(1):
        async with client_for(room, state=None) as client:
            with pytest.raises(ApiError, match=r"^API error 401: This agent session has ended\."):
                await client.call("GET", "/x", session=SESSION)


# --- a 401 on an owner call (PROTOCOL §5.7) -------------------------------------------


@pytest.mark.parametrize("json_body", [None, {"name": "w"}, {"agent_session_id": "s"}])
async def test_owner_call_401_clears_stored_auth(json_body: object) -> None:
    _, hooks = await refused(401, {"error": "Invalid token"}, json_body=json_body)
    assert hooks.auth_cleared == 1
    assert hooks.ended == []


@pytest.mark.parametrize(
    ("session", "json_body"),
    [
        (SESSION, None),
        (None, {"agent_session_token": BODY_SESSION_TOKEN}),
        (None, {"replace_agent_session_token": REPLACE_TOKEN}),
        (None, {"connection_token": CONNECTION_TOKEN}),
        (None, {"connection_token": None}),  # the key alone marks a worker call
    ],
)
async def test_worker_call_401_never_clears_auth(
    session: AgentSession | None, json_body: object
) -> None:
    _, hooks = await refused(
        401, {"error": "Invalid agent session credentials."}, json_body=json_body, session=session
    )
    assert hooks.auth_cleared == 0


async def test_401_without_owner_token_clears_nothing() -> None:
    # Not owner mode: the request carried no owner credential to blame.
    _, hooks = await refused(401, {"error": "Invalid token"}, owner_token=None)
    assert hooks.auth_cleared == 0


@pytest.mark.parametrize("status", [400, 403, 500])
async def test_owner_call_non_401_clears_nothing(status: int) -> None:
    _, hooks = await refused(status, {"error": "Invalid token"})
    assert hooks.auth_cleared == 0


async def test_both_rules_are_applied_independently() -> None:
    # The rules overlap only on an owner call whose 401 says "ended": the
    # auth is cleared, and the session part needs a token the owner call
    # cannot carry, so nothing is ended. A worker call with the same answer
    # ends its session and keeps the auth. A failing hook stops neither.
    _, owner = await refused(
        401,
        AGENT_SESSION_ENDED_ADVICE,
        json_body={"agent_session_id": "s"},
        state=Hooks(fail=OSError("x")),
    )
    assert (owner.auth_cleared, owner.ended) == (1, [])
    _, worker = await refused(401, AGENT_SESSION_ENDED_ADVICE, session=SESSION)
    assert (worker.auth_cleared, len(worker.ended)) == (0, 1)


# --- call_when_free ---------------------------------------------------------------

BUSY = {"error": "Agent session registration is busy. Retry shortly."}


async def when_free(room: Room, *, json_body: object = None, state: Hooks | None = None) -> Any:
    with trio.fail_after(100):
        async with client_for(room, state=state) as client:
            return await client.call_when_free("POST", "/rooms/r/agent-sessions", json=json_body)


async def test_busy_is_retried_after_1_then_2_seconds(autojump_clock: trio.abc.Clock) -> None:
    room = Room([answer(503, BUSY), answer(503, BUSY), answer(201, {"session_id": "s"})])
    assert await when_free(room, json_body={"a": 1}) == {"session_id": "s"}
    assert room.times == [0, 1, 3]
    assert trio.current_time() == 3
    assert [seen.json() for seen in room.seen] == [{"a": 1}] * 3


async def test_third_busy_answer_is_raised(autojump_clock: trio.abc.Clock) -> None:
    busy = answer(503, BUSY, **{"Retry-After": "1"})
    room = Room([busy, busy, busy, answer(201, {})])
    with pytest.raises(ApiError) as caught:
        await when_free(room)
    assert caught.value.status == 503
    assert caught.value.retry_after == 1
    assert room.times == [0, 1, 3]
    assert trio.current_time() == 3


@pytest.mark.parametrize("status", [400, 401, 403, 404, 409, 500, 502, 504])
async def test_any_other_status_is_final_at_once(
    autojump_clock: trio.abc.Clock, status: int
) -> None:
    room = Room([answer(status, {"error": "x"}), answer(201, {})])
    with pytest.raises(ApiError) as caught:
        await when_free(room)
    assert caught.value.status == status
    assert room.times == [0]
    assert trio.current_time() == 0


async def test_network_error_is_not_retried(autojump_clock: trio.abc.Clock) -> None:
    room = Room([httpx2.ConnectError("down"), answer(201, {})])
    with pytest.raises(RoomUnreachable):
        await when_free(room)
    assert room.times == [0]


@pytest.mark.parametrize(
    ("retry_after", "times"),
    [
        ("5", [0, 5, 7]),  # longer than ours: the room's
        ("0", [0, 1, 3]),  # shorter than ours: ours
        ("99999", [0, 30, 32]),  # capped
        ("999999999999999999999999999999", [0, 30, 32]),
        ("Thu, 01 Jan 1970 00:00:00 GMT", [0, 1, 3]),  # in the past: ours
        ("Fri, 31 Dec 9999 23:59:59 GMT", [0, 30, 32]),  # far future: capped
        ("soon", [0, 1, 3]),  # garbage: ours
        ("1.5", [0, 1, 3]),
        ("-5", [0, 1, 3]),
        ("", [0, 1, 3]),
    ],
)
async def test_retry_after_on_the_first_busy_answer(
    autojump_clock: trio.abc.Clock, retry_after: str, times: list[float]
) -> None:
    room = Room(
        [answer(503, BUSY, **{"Retry-After": retry_after}), answer(503, BUSY), answer(201, {})]
    )
    assert await when_free(room) == {}
    assert room.times == times


async def test_retry_after_applies_to_each_wait(autojump_clock: trio.abc.Clock) -> None:
    busy = answer(503, BUSY, **{"Retry-After": "4"})
    room = Room([busy, answer(503, BUSY, **{"Retry-After": "4"}), answer(201, {})])
    await when_free(room)
    assert room.times == [0, 4, 8]


async def test_call_when_free_is_cancellable_during_a_wait(
    autojump_clock: trio.abc.Clock,
) -> None:
    room = Room([answer(503, BUSY), answer(201, {})])
    with trio.fail_after(100):
        async with client_for(room) as client:
            with trio.move_on_after(0.5) as scope:
                await client.call_when_free("POST", "/rooms/r/agent-sessions", json={})
            assert scope.cancelled_caught
            assert trio.current_time() == 0.5
            await trio.sleep(10)
    assert room.times == [0]


async def test_401_mid_registration_is_final_and_keeps_owner_auth(
    autojump_clock: trio.abc.Clock,
) -> None:
    hooks = Hooks()
    room = Room([answer(503, BUSY), answer(401, {"error": "Invalid agent session credentials."})])
    with pytest.raises(ApiError) as caught:
        await when_free(room, json_body={"connection_token": CONNECTION_TOKEN}, state=hooks)
    assert caught.value.status == 401
    assert trio.current_time() == 1
    assert room.times == [0, 1]
    assert hooks.auth_cleared == 0
    assert_no_secret(str(caught.value))


async def test_401_mid_owner_registration_clears_owner_auth(
    autojump_clock: trio.abc.Clock,
) -> None:
    hooks = Hooks()
    room = Room([answer(503, BUSY), answer(401, {"error": "Invalid token"})])
    with pytest.raises(ApiError):
        await when_free(room, json_body={"actor_key": "a"}, state=hooks)
    assert trio.current_time() == 1
    assert hooks.auth_cleared == 1


@given(st.text(max_size=64))
def test_retry_after_parser_never_raises(value: str) -> None:
    seconds = _retry_after(value)
    assert seconds is None or 0 <= seconds <= 86_400


def test_retry_after_parser() -> None:
    assert _retry_after(None) is None
    assert _retry_after(" 7 ") == 7
    assert _retry_after("0000000000005") == 5
    assert _retry_after("9" * 400) == 86_400
    assert _retry_after("Thu, 01 Jan 1970 00:00:00 GMT") == 0
    assert _retry_after("Fri, 31 Dec 9999 23:59:59 GMT") == 86_400
    assert _retry_after("٣") is None  # a digit, but not an ASCII one
    assert _retry_after("1e3") is None


# --- the process stream -----------------------------------------------------------------


@attrs.define(eq=False)
class TrackedStream(httpx2.AsyncByteStream):
    chunks: list[bytes]
    closed: bool = False
    read: int = 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for chunk in self.chunks:
            self.read += 1
            yield chunk

    async def aclose(self) -> None:
        self.closed = True


@asynccontextmanager
async def open_process_stream(client: RoomClient, session: AgentSession) -> AsyncIterator[Response]:
    """``GET …/process`` as the SSE connector sends it, through the client's seam."""
    url = client.session_url(session, "/process")
    response = await client.start_request("GET", url, session=session, headers=STREAM_HEADERS)
    try:
        yield response
    finally:
        await response.aclose()


async def read_all(response: Response) -> bytes:
    chunks = []
    while chunk := await response.next_chunk():
        chunks.append(chunk)
    return b"".join(chunks)


@pytest.mark.parametrize(
    ("status", "content_type"),
    [(200, "text/event-stream"), (410, "application/json"), (404, "text/html"), (503, "")],
)
async def test_process_stream_yields_the_unread_response_whatever_the_status(
    status: int, content_type: str
) -> None:
    body = TrackedStream([b": connected\n\n", b"data: x\n\n"])
    room = Room([httpx2.Response(status, headers={"Content-Type": content_type}, stream=body)])
    with trio.fail_after(1):
        async with client_for(room) as client:
            async with open_process_stream(client, SESSION) as response:
                assert response.status == status
                assert response.header("Content-Type") == content_type
                assert await read_all(response) == b": connected\n\ndata: x\n\n"
    [seen] = room.seen
    assert (seen.method, seen.raw_path) == ("GET", SESSION_PATH.encode() + b"/process")
    assert seen.headers["Accept"] == "text/event-stream"
    assert seen.headers[SESSION_ID_HEADER] == "ses/1"
    assert seen.headers[SESSION_TOKEN_HEADER] == SESSION_TOKEN
    assert seen.headers["Authorization"] == f"Bearer {OWNER_TOKEN}"


async def test_process_stream_closes_an_endless_stream_on_exit(
    autojump_clock: trio.abc.Clock,
) -> None:
    disconnected = trio.Event()
    scopes: list[MutableMapping[str, Any]] = []

    async def app(scope: MutableMapping[str, Any], receive: Any, send: Any) -> None:
        scopes.append(scope)
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"text/event-stream")],
            }
        )
        await send({"type": "http.response.body", "body": b": connected\n\n", "more_body": True})
        while (await receive())["type"] != "http.disconnect":
            pass
        disconnected.set()

    with trio.fail_after(60):
        async with (
            open_streaming_transport(app) as transport,
            RoomClient(
                API, owner_token=OWNER_TOKEN, transport=transport, opener=transport
            ) as client,
        ):
            async with open_process_stream(client, SESSION) as response:
                # Unread: reading to the end would close it before we leave.
                assert response.status == 200
                await trio.testing.wait_all_tasks_blocked()
                assert not disconnected.is_set()
            await disconnected.wait()
    assert trio.current_time() == 0
    [scope] = scopes
    assert scope["raw_path"] == SESSION_PATH.encode() + b"/process"
    assert (b"accept", b"text/event-stream") in scope["headers"]


async def test_process_stream_network_errors_are_room_unreachable() -> None:
    room = Room([httpx2.ConnectError(f"refused {SESSION_TOKEN}")])
    with trio.fail_after(1):
        async with client_for(room) as client:
            # The room's side cuts the connection before answering.
            with pytest.raises(RoomUnreachable, match="failed: RemoteProtocolError") as caught:
                async with open_process_stream(client, SESSION):
                    pytest.fail("the stream opened")  # pragma: no cover
    assert_no_secret(str(caught.value))


async def test_process_stream_read_errors_are_room_unreachable() -> None:
    class Broken(httpx2.AsyncByteStream):
        async def __aiter__(self) -> AsyncIterator[bytes]:
            yield b": connected\n\n"
            raise httpx2.ReadError("connection reset")

    room = Room(
        [httpx2.Response(200, headers={"Content-Type": "text/event-stream"}, stream=Broken())]
    )
    with trio.fail_after(1):
        async with client_for(room) as client:
            # A reset cuts the chunked body short.
            with pytest.raises(RoomUnreachable, match="failed: RemoteProtocolError"):
                async with open_process_stream(client, SESSION) as response:
                    await read_all(response)


# --- announce_exit ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("answer_body", "recorded"),
    [
        ({"recorded": True}, True),
        ({"recorded": False}, False),
        ({}, False),
        ("", False),
        ({"recorded": 1}, False),
    ],
)
@pytest.mark.parametrize("connection_id", ["pc_1", None])
async def test_announce_exit_sends_the_exact_body_and_returns_recorded(
    answer_body: object, recorded: bool, connection_id: str | None
) -> None:
    room = Room([answer(200, answer_body)])
    with trio.fail_after(1):
        async with client_for(room) as client:
            assert await client.announce_exit(SESSION, connection_id) is recorded
    [seen] = room.seen
    assert (seen.method, seen.raw_path) == ("POST", SESSION_PATH.encode() + b"/process/exit")
    expected = {
        "agent_session_id": "ses/1",
        "agent_session_token": SESSION_TOKEN,
        "process_connection_id": connection_id,
    }
    assert seen.content == json.dumps(expected, separators=(",", ":")).encode()
    assert seen.headers["Content-Type"] == "application/json"
    assert seen.headers[SESSION_ID_HEADER] == "ses/1"
    assert seen.headers[SESSION_TOKEN_HEADER] == SESSION_TOKEN


async def test_announce_exit_refused_is_api_error_without_the_token() -> None:
    room = Room(
        [answer(403, {"error": f"A process speaks only for its own session. {SESSION_TOKEN}"})]
    )
    with trio.fail_after(1):
        async with client_for(room) as client:
            with pytest.raises(ApiError) as caught:
                await client.announce_exit(SESSION, "pc_1")
    assert caught.value.status == 403
    assert_no_secret(str(caught.value))


# --- lifetime ------------------------------------------------------------------------------


async def test_context_manager_closes_the_http_client() -> None:
    closed = trio.Event()

    class Transport(httpx2.MockTransport):
        async def aclose(self) -> None:
            closed.set()
            await super().aclose()

    with trio.fail_after(1):
        async with RoomClient(API, transport=Transport(Room([answer(200, {})]))) as client:
            await client.call("GET", "/x")
            assert not closed.is_set()
        assert closed.is_set()
        with pytest.raises(RuntimeError):
            await client.call("GET", "/x")


# --- with the real LocalStateStore ---------------------------------------------------------

DURABLE = "worker_" + "0" * 31 + "1"


def stored_sessions(path: Path) -> dict[str, Any]:
    sessions: dict[str, Any] = json.loads(path.read_text())["agent_sessions"]
    return sessions


@pytest.fixture
async def store(tmp_path: Path) -> LocalStateStore:
    store = LocalStateStore(tmp_path / "state.json")
    await store.save_auth(OWNER_TOKEN)

    def seed(state: dict[str, Any]) -> None:
        state["agent_sessions"] = {
            "ses/1": {**SESSION.to_json(), "agent_instance_id": DURABLE},
            "ses-b": {
                "session_id": "ses-b",
                "session_token": "successor-token-1234",
                "room_id": "r",
                "agent_instance_id": DURABLE,
                "ended_at": None,
            },
        }
        state["current_agent_session_ids"] = {"owner/repo name": "ses/1"}

    await store.update(seed)
    return store


async def test_real_store_ended_401_ends_the_stored_session(store: LocalStateStore) -> None:
    room = Room([answer(401, {"error": AGENT_SESSION_ENDED_ADVICE})])
    with trio.fail_after(5):
        async with client_for(room, state=store) as client:
            with pytest.raises(ApiError):
                await client.call("GET", f"{SESSION_PATH}/x", session=SESSION)
    ended = store.stored_session("ses/1")
    assert ended is not None
    assert ended.ended_at is not None
    assert ISO_MS.match(ended.ended_at)
    assert json.loads(store.path.read_text())["current_agent_session_ids"] == {}
    assert store.auth() is not None  # a worker call never logs the owner out


async def test_real_store_guards_the_successor_by_its_token(store: LocalStateStore) -> None:
    # A late "ended" about a predecessor's token cannot end the successor.
    room = Room([answer(401, {"error": AGENT_SESSION_ENDED_ADVICE})])
    body = {"agent_session_id": "ses-b", "agent_session_token": "predecessor-token-99"}
    with trio.fail_after(5):
        async with client_for(room, state=store) as client:
            with pytest.raises(ApiError):
                await client.call("POST", "/rooms/r/messages", json=body)
    assert stored_sessions(store.path)["ses-b"]["ended_at"] is None


async def test_real_store_owner_401_clears_auth_and_keeps_sessions(
    store: LocalStateStore,
) -> None:
    room = Room([answer(401, {"error": "Invalid token"})])
    with trio.fail_after(5):
        async with client_for(room, state=store) as client:
            with pytest.raises(ApiError):
                await client.call("GET", "/agents/me")
    assert store.auth() is None
    assert "auth" not in json.loads(store.path.read_text())
    assert stored_sessions(store.path)["ses/1"]["ended_at"] is None


async def test_real_store_damaged_file_is_left_alone_and_the_error_still_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(b'{"auth": {"token": "tru')
    room = Room([answer(401, {"error": AGENT_SESSION_ENDED_ADVICE})])
    with trio.fail_after(5):
        async with client_for(room, state=LocalStateStore(path)) as client:
            with pytest.raises(ApiError) as caught:
                await client.call("GET", "/x", json={"agent_session_id": "s"})
    assert caught.value.status == 401
    assert path.read_bytes() == b'{"auth": {"token": "tru'
    assert "StateUnavailable" in caplog.text


async def test_real_store_401_mid_registration_keeps_auth(
    autojump_clock: trio.abc.Clock, store: LocalStateStore
) -> None:
    room = Room([answer(503, BUSY), answer(401, {"error": "Invalid agent session credentials."})])
    with trio.fail_after(100):
        async with client_for(room, state=store) as client:
            with pytest.raises(ApiError) as caught:
                await client.call_when_free(
                    "POST", "/rooms/r/agent-sessions", json={"connection_token": CONNECTION_TOKEN}
                )
    assert caught.value.status == 401
    assert trio.current_time() == 1
    auth = store.auth()
    assert auth is not None
    assert auth.token == OWNER_TOKEN
