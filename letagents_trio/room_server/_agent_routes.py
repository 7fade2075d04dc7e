"""The routes of what agents keep beyond chat: wake rules, reasoning, workspace captures.

Each is a path pattern and its handlers, as ``_app.py``'s table takes them:
:func:`agent_routes` answers the patterns whose tail is all fixed text and,
apart, those that end in a parameter, so the table can keep its order (see
``_app.py``). A handler reads the request through :class:`RouteRequest` and
calls one method of the room's work (:mod:`._wake._wakes`,
:mod:`._reports._reasoning`, :mod:`._reports._agent_work`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from ._wire import Credentials, Reply
    from ._work import RoomWork

__all__ = ["RouteRequest", "agent_routes"]


class RouteRequest(Protocol):
    """What a handler reads of a matched request."""

    @property
    def params(self) -> Mapping[str, str]: ...

    def query(self, name: str) -> str | None: ...

    async def body(self, *, lone_surrogates: bool = False) -> dict[str, Any]: ...

    def credentials(self, body: Mapping[str, Any] | None = None) -> Credentials: ...


Handler = Callable[[RouteRequest], "Awaitable[Reply] | Reply"]
Routes = list[tuple[str, dict[str, Handler]]]


def agent_routes(work: RoomWork) -> tuple[Routes, Routes]:
    """The routes of wake rules, reasoning and captures: ``(fixed tail, parameter last)``."""
    wakes, reasoning, agent_work = work.wakes, work.reasoning, work.agent_work

    def list_rules(r: RouteRequest) -> Reply:
        return wakes.listing(r.params["room"], r.credentials(), agent_key=r.query("agent_key"))

    async def add_rule(r: RouteRequest) -> Reply:
        body = await r.body()
        return wakes.add(r.params["room"], r.credentials(body), body)

    async def cancel_rule(r: RouteRequest) -> Reply:
        body = await r.body()
        return wakes.cancel(r.params["room"], r.params["rule"], r.credentials(body))

    def list_reasoning(r: RouteRequest) -> Reply:
        return reasoning.sessions(
            r.params["room"],
            r.credentials(),
            open_only=r.query("open") != "false",
            actor_label=r.query("actor_label"),
            task_id=r.query("task_id"),
            limit=r.query("limit"),
        )

    async def open_reasoning(r: RouteRequest) -> Reply:
        body = await r.body()
        return reasoning.create(r.params["room"], r.credentials(body), body)

    def get_reasoning(r: RouteRequest) -> Reply:
        return reasoning.session(
            r.params["room"], r.params["reasoning"], r.credentials(), r.query("limit")
        )

    async def update_reasoning(r: RouteRequest) -> Reply:
        body = await r.body()
        return reasoning.append(r.params["room"], r.params["reasoning"], r.credentials(body), body)

    def list_work(r: RouteRequest) -> Reply:
        return agent_work.listing(r.params["room"], r.credentials())

    async def post_work(r: RouteRequest) -> Reply:
        body = await r.body()
        return agent_work.post(r.params["room"], r.credentials(body), body)

    sessions = "/rooms/{room+}/reasoning-sessions"
    fixed: Routes = [
        ("/rooms/{room+}/wake-rules", {"GET": list_rules, "POST": add_rule}),
        ("/rooms/{room+}/reasoning", {"GET": list_reasoning}),
        (sessions, {"GET": list_reasoning, "POST": open_reasoning}),
        ("/rooms/{room+}/agent-work", {"GET": list_work, "POST": post_work}),
    ]
    parametric: Routes = [
        ("/rooms/{room+}/wake-rules/{rule}/cancel", {"POST": cancel_rule}),
        (sessions + "/{reasoning}/updates", {"POST": update_reasoning}),
        (sessions + "/{reasoning}", {"GET": get_reasoning}),
    ]
    return fixed, parametric
