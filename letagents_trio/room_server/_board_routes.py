"""The governed board's HTTP routes, beside the room's route table (``_app.py``).

Each handler parses the query, the credentials and the JSON body of one
request and calls one method of the room's work parts (:class:`~._work.RoomWork`):
Board Manager settings and assignments, intents and their decisions, review
leases and verdicts, artifacts and events. :func:`board_routes` answers them
as two groups of ``(pattern, {method: handler})``: patterns whose tail is all
fixed text, which the table lists first, and patterns with a parameter after
the room (see the table's ordering rule in ``_app.py``).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ._room import Room
    from ._wire import Credentials, Reply

__all__ = ["BoardRequest", "board_routes"]


class BoardRequest(Protocol):
    """What a handler reads of a matched request (the table's request object)."""

    @property
    def params(self) -> Mapping[str, str]: ...

    def query(self, name: str) -> str | None: ...

    async def body(self, *, lone_surrogates: bool = False) -> dict[str, Any]: ...

    def credentials(self, body: Mapping[str, Any] | None = None) -> Credentials: ...


Handler = Callable[[Any], "Awaitable[Reply] | Reply"]
Routes = list[tuple[str, dict[str, Handler]]]
_EVENT_QUERY = ("event_type", "object_id", "actor", "since", "until", "after", "limit")


def board_routes(room: Room) -> tuple[Routes, Routes]:
    """The governed board's routes: ``(fixed-tail patterns, patterns with a parameter)``."""
    work = room.work
    governance, decisions, reviews, record = (
        work.governance,
        work.decisions,
        work.reviews,
        work.record,
    )

    def settings(r: BoardRequest) -> Reply:
        return governance.settings(r.params["room"], r.credentials())

    async def set_mode(r: BoardRequest) -> Reply:
        body = await r.body()
        return governance.set_mode(r.params["room"], r.credentials(body), body)

    async def assign(r: BoardRequest) -> Reply:
        body = await r.body()
        return governance.assign(r.params["room"], r.credentials(body), body)

    async def release(r: BoardRequest) -> Reply:
        body = await r.body()
        return governance.release(r.params["room"], r.credentials(body), body)

    def intents(r: BoardRequest) -> Reply:
        return governance.intents(r.params["room"], r.credentials(), r.query("status"))

    async def register(r: BoardRequest) -> Reply:
        body = await r.body()
        return decisions.register(r.params["room"], r.credentials(body), body)

    async def approve(r: BoardRequest) -> Reply:
        body = await r.body()
        room_id, intent = r.params["room"], r.params["intent"]
        return decisions.approve(room_id, intent, r.credentials(body), body)

    async def deny(r: BoardRequest) -> Reply:
        body = await r.body()
        return decisions.deny(r.params["room"], r.params["intent"], r.credentials(body), body)

    def artifacts(r: BoardRequest) -> Reply:
        return record.artifacts(
            r.params["room"], r.credentials(), task_id=r.query("task_id"), limit=r.query("limit")
        )

    async def publish(r: BoardRequest) -> Reply:
        body = await r.body()
        return record.publish(r.params["room"], r.credentials(body), body)

    def events(r: BoardRequest) -> Reply:
        query = {name: r.query(name) for name in _EVENT_QUERY}
        return record.events(r.params["room"], r.credentials(), query)

    async def review_lease(r: BoardRequest) -> Reply:
        body = await r.body()
        room_id, task = r.params["room"], r.params["task"]
        return reviews.lease_action(room_id, task, r.credentials(body), body)

    async def verdict(r: BoardRequest) -> Reply:
        body = await r.body()
        return reviews.verdict(r.params["room"], r.params["task"], r.credentials(body), body)

    base = "/rooms/{room+}"
    fixed: Routes = [
        (f"{base}/board-settings", {"GET": settings, "PATCH": set_mode}),
        (f"{base}/board-managers", {"POST": assign}),
        (f"{base}/board-managers/active", {"DELETE": release}),
        (f"{base}/board-intents", {"GET": intents, "POST": register}),
        (f"{base}/artifacts", {"GET": artifacts, "POST": publish}),
        (f"{base}/events", {"GET": events}),
    ]
    with_parameter: Routes = [
        (f"{base}/board-intents/{{intent}}/approve", {"POST": approve}),
        (f"{base}/board-intents/{{intent}}/deny", {"POST": deny}),
        (f"{base}/tasks/{{task}}/review-lease-action", {"POST": review_lease}),
        (f"{base}/tasks/{{task}}/review-verdict", {"POST": verdict}),
    ]
    return fixed, with_parameter
