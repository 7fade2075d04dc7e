"""Hostile input to every route (issue 13, rows 4 and 5): 4xx, never a 500.

Rows: JSON integers over Python's 4,300-digit limit, lone surrogates anywhere
in a body (session ids, tokens, actor keys: SQLite cannot encode them), and
Unicode digits in query parameters (``str.isdigit`` accepts ``²`` and ``①``,
``int`` does not). Then a property-based test sends arbitrary JSON, Unicode
and query strings to every route, as the owner and as a registered session,
against both stores, and asserts no 5xx.
"""

from __future__ import annotations

import json
import re
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx2
import pytest
import trio
import trio.testing
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from letagents_trio.room_server import MemoryStore, Room, RoomStore, SQLiteStore, create_app
from letagents_trio.room_server._app import _routes
from letagents_trio.testing._transport import open_streaming_transport

from .helpers import OWNER_TOKEN, ROOM, owner_headers, registered, registration, session_headers

BIG_INT = "1" * 5000
LONE_SURROGATE = "\\ud800"  # as JSON escapes it: a valid JSON text, an unencodable str
JSON_HEADERS = {"Content-Type": "application/json"}


def body_with(raw_value: str, key: str, base: dict[str, Any] | None = None) -> bytes:
    """``base`` as JSON with ``key`` set to the raw JSON text ``raw_value``."""
    text = json.dumps(dict(base or {}, **{key: "__HOLE__"}))
    return text.replace('"__HOLE__"', raw_value).encode()


@pytest.mark.parametrize("raw_value", [BIG_INT, f'"{LONE_SURROGATE}"', f'"a{LONE_SURROGATE}b"'])
@pytest.mark.parametrize(
    ("method", "route", "key"),
    [
        ("POST", "agent-sessions", "actor_key"),
        ("POST", "agent-sessions", "display_name"),
        ("POST", "agent-sessions/{sid}/process/exit", "agent_session_id"),
        ("POST", "agent-sessions/{sid}/process/exit", "agent_session_token"),
        ("POST", "agent-sessions/{sid}/disconnect", "agent_session_id"),
        ("POST", "messages", "agent_session_id"),
        ("POST", "messages", "text"),
        ("POST", "tasks", "title"),
    ],
)
async def test_big_ints_and_lone_surrogates_are_400(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    room: Room,
    method: str,
    route: str,
    key: str,
    raw_value: str,
) -> None:
    """Before: 500 with a traceback (ValueError from the digit limit, SQLite's
    UnicodeEncodeError), no credentials needed. After: 400, nothing changed."""
    s = await registered(client, registration())
    base = registration() if route == "agent-sessions" else {}
    path = f"/rooms/{ROOM}/" + route.format(sid=s["session_id"])
    headers = dict(owner_headers() if route == "agent-sessions" else session_headers(s))
    r = await client.request(
        method, path, content=body_with(raw_value, key, base), headers=headers | JSON_HEADERS
    )
    assert r.status_code == 400, r.text
    assert "error" in r.json()


@pytest.mark.parametrize(
    "query",
    ["after=%C2%B2", "limit=%C2%B9", "after=%EF%BC%91%EF%BC%92", "limit=%E2%91%A0"],
)
async def test_unicode_digits_in_list_queries_are_400(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, query: str
) -> None:
    """``?after=²`` and ``?limit=¹`` were 500; fullwidth ``１２`` was read as 12."""
    s = await registered(client, registration())
    r = await client.get(f"/rooms/{ROOM}/messages?{query}", headers=session_headers(s))
    assert r.status_code == 400, r.text


@pytest.mark.parametrize("query", ["after=%E2%91%A0", "after=%C2%B2", "timeout=%EF%BC%91"])
async def test_unicode_digits_in_poll_queries_are_400(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient, query: str
) -> None:
    s = await registered(client, registration())
    r = await client.get(f"/rooms/{ROOM}/messages/poll?{query}", headers=session_headers(s))
    assert r.status_code == 400, r.text


@pytest.mark.parametrize("length", ["²", "１２", "-1", "1e3"])
async def test_a_content_length_that_is_no_ascii_number_is_4xx(
    autojump_clock: trio.testing.MockClock, room: Room, length: str
) -> None:
    """The body limit's Content-Length check used ``isdigit`` too."""
    app = create_app(room)
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> MutableMapping[str, Any]:
        await trio.lowlevel.checkpoint()
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        await trio.lowlevel.checkpoint()
        sent.append(message)

    scope = {
        "type": "http",
        "method": "POST",
        "path": f"/rooms/{ROOM}/tasks",
        "raw_path": f"/rooms/{ROOM}/tasks".encode(),
        "query_string": b"",
        "headers": [(b"content-length", length.encode()), *owner_headers_raw()],
    }
    await app(scope, receive, send)
    assert 400 <= sent[0]["status"] < 500


def owner_headers_raw() -> list[tuple[bytes, bytes]]:
    return [(k.lower().encode(), v.encode()) for k, v in owner_headers().items()]


# --- every route, arbitrary input -------------------------------------------------------


def every_route() -> list[tuple[str, str]]:
    """(method, path pattern) of every route in the app's table, whatever it holds."""
    table = _routes(Room(store=MemoryStore(), owner_tokens={}))
    return sorted((method, route.path) for route in table for method in route.handlers)


ROUTES = every_route()
# Every character, lone surrogates included (hypothesis leaves them out by default).
any_text = st.text(st.characters(codec=None, exclude_categories=()), max_size=24)
huge_ints = st.sampled_from([BIG_INT, "-" + BIG_INT, "1e400", "-0", "1" * 4300])
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | any_text,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(any_text, children, max_size=3)
    ),
    max_leaves=8,
)
body_keys = st.sampled_from(
    sorted(
        {*registration(), "agent_session_id", "agent_session_token", "text", "title", "kind"}
        | {"process_connection_id", "reply_to", "lease_id"}
    )
)
query_names = st.sampled_from(["after", "limit", "timeout", "x"])
query_values = st.one_of(any_text, st.sampled_from(["²", "①", "１２", "9" * 30, "nan", "-1"]))
PARAMS = st.fixed_dictionaries(
    {
        "route": st.sampled_from(ROUTES),
        "as_session": st.booleans(),
        "changes": st.dictionaries(body_keys, json_values, max_size=5),
        "hole": st.one_of(st.none(), st.tuples(body_keys, huge_ints)),
        "raw": st.one_of(st.none(), st.binary(max_size=48)),
        "query": st.lists(st.tuples(query_names, query_values), max_size=3),
        "segment": st.one_of(st.none(), any_text),
    }
)


def request_of(params: dict[str, Any], session: dict[str, Any]) -> tuple[str, str, bytes]:
    """The method, URL and body one example sends."""
    method, pattern = params["route"]
    segment = params["segment"]
    odd = quote(segment.encode("utf-8", "surrogatepass"), safe="") if segment else "x"
    own = segment is None or params["as_session"]
    path = re.sub(
        r"\{([a-z_]+)\+?\}",
        lambda m: {"room": ROOM, "session": session["session_id"] if own else odd}.get(m[1], odd),
        pattern,
    )
    query = "&".join(
        f"{name}={quote(value.encode('utf-8', 'surrogatepass'), safe='')}"
        for name, value in params["query"]
    )
    if params["raw"] is not None:
        return method, f"{path}?{query}", params["raw"]
    base = registration() if pattern.endswith(("agent-sessions", "/agents")) else {}
    body = dict(base, **params["changes"])
    if params["hole"] is not None:
        key, raw_value = params["hole"]
        return method, f"{path}?{query}", body_with(raw_value, key, body)
    return method, f"{path}?{query}", json.dumps(body).encode()


async def exercise(store: RoomStore, params: dict[str, Any]) -> None:
    room = Room(store=store, owner_tokens={OWNER_TOKEN: "owner"})
    with trio.fail_after(3600):
        async with (
            open_streaming_transport(create_app(room)) as transport,
            httpx2.AsyncClient(transport=transport, base_url="http://room.test") as client,
        ):
            session = await registered(client, registration())
            method, url, content = request_of(params, session)
            headers = session_headers(session) if params["as_session"] else owner_headers()
            async with client.stream(
                method, url, content=content, headers=headers | JSON_HEADERS
            ) as r:
                # A process stream that opened is read no further: it is served.
                assert r.status_code < 500, (method, url, content[:200])


# 300 examples, each with its own store: over 10 s with SQLite.
@pytest.mark.slow
@pytest.mark.parametrize("kind", ["memory", "sqlite"])
@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(params=PARAMS)
def test_arbitrary_input_to_every_route_is_never_5xx(
    tmp_path: Path, kind: str, params: dict[str, Any]
) -> None:
    store: RoomStore = MemoryStore() if kind == "memory" else SQLiteStore(tmp_path / "h.db")
    try:
        trio.run(exercise, store, params, clock=trio.testing.MockClock(autojump_threshold=0))
    finally:
        store.close()
        if kind == "sqlite":
            for leftover in tmp_path.glob("h.db*"):
                leftover.unlink()


def test_the_routes_come_from_the_table() -> None:
    """The examples cover the app's own table, so a new route is exercised too."""
    assert ("POST", "/rooms/{room+}/agent-sessions/{session}/process/exit") in ROUTES
    assert len(ROUTES) >= 14
