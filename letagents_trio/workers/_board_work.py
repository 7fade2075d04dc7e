"""A governed board's routes for a worker chat: Board Manager intents, review work, the record.

The host layer's client of the letagents room routes a room uses to govern
its board (the MCP tools call these; an embedder may too), beside
:class:`~letagents_trio.workers._room_work.RoomWork`, whose one call path
(:meth:`RoomWork.call`: the client's deadline, answer cap, refusal
translation, and the one choice of a call's credentials) each method takes.
``R`` is ``/rooms/{room}``:

* settings and managers: ``GET``/``PATCH R/board-settings``, ``POST
  R/board-managers``, ``DELETE R/board-managers/active``;
* intents: ``GET``/``POST R/board-intents``, ``POST
  R/board-intents/{id}/approve`` and ``…/deny``;
* review work: ``POST R/tasks/{t}/review-lease-action`` and ``…/review-verdict``;
* the record: ``GET``/``POST R/artifacts``, ``GET R/events``.

An intent's payload is built as the board later rebuilds it from the action
(:mod:`letagents_trio.workers._intent_payloads`, shared with the reference room).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, final
from urllib.parse import quote

import attrs

if TYPE_CHECKING:
    from ._room_work import Acting, RoomWork

__all__ = ["BoardWork", "active_work_lease_id"]


def active_work_lease_id(task: Mapping[str, Any]) -> str | None:
    """The id of a task's active work lease, from its answer (``active_leases``)."""
    leases = task.get("active_leases")
    for lease in leases if isinstance(leases, list) else ():
        if (
            isinstance(lease, Mapping)
            and lease.get("kind") == "work"
            and lease.get("status") == "active"
            and isinstance(lease.get("id"), str)
            and lease["id"].strip()
        ):
            return str(lease["id"])
    return None


def _task(task_id: str, suffix: str) -> str:
    return f"tasks/{quote(task_id, safe='')}/{suffix}"


@final
@attrs.define(eq=False)
class BoardWork:
    """A governed board's routes, over the host layer's :class:`RoomWork`.

    Every method raises what :meth:`RoomWork.call` raises (``ApiError`` with
    the room's status and body, ``RoomUnreachable``).

    Cancellation:
        Every method is a checkpoint; cancelled, the request in flight is
        closed (the room may have acted on a write).
    """

    work: RoomWork

    # --- settings and managers ---------------------------------------------------------

    async def settings(self, acting: Acting) -> dict[str, Any]:
        """``GET R/board-settings``: the mode, the active manager, the pending count."""
        return await self.work.call(acting, "GET", "board-settings")

    async def set_mode(self, acting: Acting, fields: Mapping[str, Any]) -> dict[str, Any]:
        """``PATCH R/board-settings``: the manager mode (and failover)."""
        return await self.work.call(acting, "PATCH", "board-settings", body=dict(fields))

    async def assign_manager(self, acting: Acting, fields: Mapping[str, Any]) -> dict[str, Any]:
        """``POST R/board-managers``: promote a live worker session."""
        return await self.work.call(acting, "POST", "board-managers", body=dict(fields))

    async def release_manager(self, acting: Acting, fields: Mapping[str, Any]) -> dict[str, Any]:
        """``DELETE R/board-managers/active``: release the active manager."""
        return await self.work.call(acting, "DELETE", "board-managers/active", body=dict(fields))

    # --- intents -----------------------------------------------------------------------

    async def intents(self, acting: Acting, status: str | None) -> dict[str, Any]:
        """``GET R/board-intents``: the room's intents (of ``status``, if given)."""
        query = {} if status is None else {"status": status}
        return await self.work.call(acting, "GET", "board-intents", query=query)

    async def register(self, acting: Acting, fields: Mapping[str, Any]) -> dict[str, Any]:
        """``POST R/board-intents``: register an intent."""
        return await self.work.call(acting, "POST", "board-intents", body=dict(fields))

    async def decide(
        self, acting: Acting, intent_id: str, verb: str, fields: Mapping[str, Any]
    ) -> dict[str, Any]:
        """``POST R/board-intents/{id}/approve`` or ``…/deny`` (``verb``)."""
        route = f"board-intents/{quote(intent_id, safe='')}/{verb}"
        return await self.work.call(acting, "POST", route, body=dict(fields))

    # --- review work -------------------------------------------------------------------

    async def review_lease(
        self, acting: Acting, task_id: str, fields: Mapping[str, Any]
    ) -> dict[str, Any]:
        """``POST R/tasks/{t}/review-lease-action``: claim or release review authority."""
        route = _task(task_id, "review-lease-action")
        return await self.work.call(acting, "POST", route, body=dict(fields))

    async def verdict(
        self, acting: Acting, task_id: str, fields: Mapping[str, Any]
    ) -> dict[str, Any]:
        """``POST R/tasks/{t}/review-verdict``: submit a review verdict."""
        route = _task(task_id, "review-verdict")
        return await self.work.call(acting, "POST", route, body=dict(fields))

    # --- the record --------------------------------------------------------------------

    async def artifacts(
        self, acting: Acting, *, task_id: str | None, limit: int | None
    ) -> dict[str, Any]:
        """``GET R/artifacts``: the room's shared artifacts (or one task's)."""
        query: dict[str, str | int] = {}
        if task_id:
            query["task_id"] = task_id
        if limit:
            query["limit"] = limit
        return await self.work.call(acting, "GET", "artifacts", query=query)

    async def publish(self, acting: Acting, fields: Mapping[str, Any]) -> dict[str, Any]:
        """``POST R/artifacts``: publish one artifact."""
        return await self.work.call(acting, "POST", "artifacts", body=dict(fields))

    async def events(self, acting: Acting, query: Mapping[str, str | int]) -> dict[str, Any]:
        """``GET R/events``: a page of the room's events."""
        return await self.work.call(acting, "GET", "events", query=dict(query))
