"""The route table: patterns, parameters, and the 404 / 405 answers around them."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import pytest

from letagents_trio.room_server._app import _Route

from .helpers import owner_headers

if TYPE_CHECKING:
    import httpx2
    import trio.testing

    from letagents_trio.room_server._wire import Reply


def _unused(_: object) -> Reply:
    raise AssertionError("not called")


def route(path: str) -> _Route:
    return _Route(path, {"GET": _unused})


@pytest.mark.parametrize(
    ("pattern", "path", "params"),
    [
        ("/agents/me", "/agents/me", {}),
        ("/agents/me", "/agents/me/", None),
        ("/rooms/{room+}/messages", "/rooms/r/messages", {"room": "r"}),
        ("/rooms/{room+}/messages", "/rooms/owner/repo/messages", {"room": "owner/repo"}),
        ("/rooms/{room+}/messages", "/rooms/owner//messages", None),
        ("/rooms/{room+}/messages", "/rooms/messages", None),
        ("/rooms/{room+}/messages", "/rooms/r/messages/poll", None),
        (
            "/rooms/{room+}/agent-sessions/{session}/process/exit",
            "/rooms/a/b/agent-sessions/s1/process/exit",
            {"room": "a/b", "session": "s1"},
        ),
        (
            "/rooms/{room+}/agent-sessions/{session}/process",
            "/rooms/agent-sessions/s1/process",
            None,
        ),
        (
            "/rooms/{room+}/tasks/{task}/lease-action",
            "/rooms/r/tasks//lease-action",
            {"room": "r", "task": ""},
        ),
    ],
)
def test_a_pattern_matches_whole_paths_and_names_their_parts(
    pattern: str, path: str, params: dict[str, str] | None
) -> None:
    assert route(pattern).match(path[1:].split("/")) == params


@pytest.mark.parametrize(
    ("method", "path", "status", "allow"),
    [
        ("DELETE", "/rooms/r/messages", 405, "GET, POST"),
        ("GET", "/rooms/r/agent-sessions", 405, "POST"),
        ("POST", "/rooms/r/agent-sessions/s/process", 405, "GET"),
        ("GET", "/rooms/r/agent-sessions/s/process/exit", 405, "POST"),
        ("PUT", "/healthz", 405, "GET"),
        ("GET", "/rooms/r/unknown", 404, None),
        ("GET", "/rooms/r", 404, None),
        ("GET", "/nowhere", 404, None),
    ],
)
async def test_a_known_path_with_another_method_is_405_and_says_which(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    method: str,
    path: str,
    status: int,
    allow: str | None,
) -> None:
    r = await client.request(method, path, headers=owner_headers())
    assert (r.status_code, r.headers.get("allow")) == (status, allow)


# The Node client's isMissingRouteError: a 404 or 405 whose body says so.
NODE_MISSING_ROUTE = re.compile(
    r"Cannot (GET|POST|PATCH)|Not Found|Cannot GET \/rooms|Cannot POST \/rooms", re.IGNORECASE
)


@pytest.mark.parametrize(
    ("method", "path", "status"),
    [
        ("PATCH", "/rooms/r/messages", 405),
        ("POST", "/rooms/r/tasks/task_1", 405),
        ("GET", "/rooms/r/board-governance", 404),
        ("GET", "/rooms/r/tasks/task_1/review-verdict", 405),
        ("POST", "/nowhere?x=1", 404),
    ],
)
async def test_a_missing_route_says_so_as_the_node_client_reads_it(
    autojump_clock: trio.testing.MockClock,
    client: httpx2.AsyncClient,
    method: str,
    path: str,
    status: int,
) -> None:
    """404 or 405 with Express's ``Cannot <METHOD> <path>``, so Node skips instead of failing."""
    r = await client.request(method, path, headers=owner_headers())
    assert r.status_code == status
    error = r.json()["error"]
    assert error == f"Cannot {method} {path.split('?')[0]}"
    assert NODE_MISSING_ROUTE.search(error)


def _sample_paths(pattern: str) -> list[str]:
    """Paths the pattern matches, with parameters that look like other routes' literals."""
    paths = []
    for room, value in (("r", "x"), ("owner/repo", "exit"), ("a/b/c", "process")):
        paths.append(pattern.replace("{room+}", room).replace("{", "").replace("}", ""))
        path = pattern.replace("{room+}", room)
        paths.append(re.sub(r"\{[a-z]+\}", value, path))
    return paths


def test_the_index_finds_the_route_a_full_scan_finds_for_every_path() -> None:
    """Only the routes whose last segment fits are tried, in the table's order: the
    same route wins as trying every route, for every route's paths and tricky others
    (``/rooms/r/reasoning-sessions/reasoning`` fits two patterns: the first wins)."""
    from letagents_trio.room_server import MemoryStore, Room
    from letagents_trio.room_server._app import _RouteIndex, _routes

    routes = _routes(Room(store=MemoryStore()))
    index = _RouteIndex(routes)
    paths = [p for r in routes for p in _sample_paths(r.path)]
    paths += ["/", "/rooms/r/tasks/exit", "/rooms/r/tasks/exit/x", "/nowhere", "/rooms/r"]
    for path in paths:
        segments = path[1:].split("/")
        scanned = [r for r in routes if r.match(segments) is not None]
        indexed = [r for r in index.of(segments) if r.match(segments) is not None]
        assert indexed[:1] == scanned[:1], path
    assert len(index.of(["rooms", "r", "agent-sessions", "s", "process", "exit"])) <= 4
