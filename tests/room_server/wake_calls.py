"""The wake-rule routes as the room's tests call them: add, list, cancel, and the wakes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from .helpers import ROOM, session_headers

if TYPE_CHECKING:
    import httpx2

RULES: Final = f"/rooms/{ROOM}/wake-rules"


async def add(client: httpx2.AsyncClient, session: dict[str, Any], rule: dict[str, Any]) -> Any:
    """``POST …/wake-rules`` as ``session``; the response."""
    return await client.post(RULES, json={"rule": rule}, headers=session_headers(session))


async def added(client: httpx2.AsyncClient, session: dict[str, Any], rule: dict[str, Any]) -> Any:
    """Add a rule the room must take (201); the rule."""
    r = await add(client, session, rule)
    assert r.status_code == 201, r.text
    return r.json()["rule"]


async def listed(client: httpx2.AsyncClient, headers: dict[str, str], **query: str) -> Any:
    """``GET …/wake-rules`` with ``headers``, which must answer 200; the listing."""
    r = await client.get(RULES, params=query, headers=headers)
    assert r.status_code == 200, r.text
    return r.json()


async def cancel(client: httpx2.AsyncClient, rule_id: str, headers: dict[str, str]) -> Any:
    """``POST …/wake-rules/{id}/cancel`` with ``headers``; the response."""
    return await client.post(f"{RULES}/{rule_id}/cancel", json={}, headers=headers)


async def wakes(client: httpx2.AsyncClient, session: dict[str, Any]) -> list[dict[str, Any]]:
    """The wake messages of the room's newest page, as ``session`` reads them."""
    r = await client.get(f"/rooms/{ROOM}/messages", headers=session_headers(session))
    return [m for m in r.json()["messages"] if m["source"] == "wake_rule"]
