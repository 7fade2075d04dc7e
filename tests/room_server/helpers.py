"""Shared helpers for the room-server tests: request bodies and an SSE frame reader."""

from __future__ import annotations

import re
import secrets
import uuid
from collections.abc import AsyncIterator
from contextlib import aclosing, asynccontextmanager
from typing import TYPE_CHECKING, Any, Final

import trio
import trio.testing

from .paths import process_path

if TYPE_CHECKING:
    import httpx2

from letagents_trio.room_server._wire import Credentials
from letagents_trio.workers._wire import durable_registration_body

EPOCH: Final = 1_800_000_000_000
OWNER_TOKEN: Final = "owner-test-token"
OTHER_TOKEN: Final = "other-owner-token"
# Person (sign-in) tokens of the same two accounts: only a person changes settings.
PERSON_TOKEN: Final = "owner-person-token"
OTHER_PERSON_TOKEN: Final = "other-person-token"
# Each owner's person token (the same account, signed in).
PERSON_OF: Final = {OWNER_TOKEN: PERSON_TOKEN, OTHER_TOKEN: OTHER_PERSON_TOKEN}
ROOM: Final = "room_shared"
UUID4: Final = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


def worker_id() -> str:
    return "worker_" + uuid.uuid4().hex


def connection_token() -> str:
    return secrets.token_urlsafe(32)


def owner_headers(token: str = OWNER_TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def person_headers(token: str = PERSON_TOKEN) -> dict[str, str]:
    """A person's bearer (signed in): the only bearer that acts as the person."""
    return owner_headers(token)


def credentials(session: dict[str, Any], owner: str = OWNER_TOKEN) -> Credentials:
    """A session's credentials, as the room reads them from a request (for direct calls)."""
    return Credentials(
        owner_token=owner, session_id=session["session_id"], session_token=session["session_token"]
    )


def session_headers(session: dict[str, Any], token: str = OWNER_TOKEN) -> dict[str, str]:
    return {
        "Authorization": f"Bearer {token}",
        "X-LetAgents-Agent-Session-Id": session["session_id"],
        "X-LetAgents-Agent-Session-Token": session["session_token"],
    }


def registration(
    *,
    name: str = "FieldMeadow",
    instance: str | None = None,
    token: str | None = None,
    host: str | None = "host_a",
    login: str = "owner",
    actor: str | None = None,
    replace: dict[str, Any] | None = None,
    ide_label: str = "claude-code",
) -> dict[str, Any]:
    """A durable worker's registration body (§5.3 step 8), as worker handles send it."""
    instance = instance or worker_id()
    return durable_registration_body(
        actor_key=actor or f"{login}/{instance.replace('_', '-')}",
        worker_id=instance,
        display_name=name,
        connection_token=token or connection_token(),
        process_host_id=host,
        registration_liveness={
            "host_id": host,
            "host_kind": "machine",
            "host_label": None,
            "liveness_capability": "process_connection",
            "tool_bridge_id": None,
        },
        ide_label=ide_label,
        predecessor=(replace["session_id"], replace["session_token"]) if replace else None,
    )


async def register(
    client: httpx2.AsyncClient, body: dict[str, Any], *, room: str = ROOM, owner: str = OWNER_TOKEN
) -> httpx2.Response:
    return await client.post(
        f"/rooms/{room}/agent-sessions", json=body, headers=owner_headers(owner)
    )


async def registered(
    client: httpx2.AsyncClient, body: dict[str, Any], *, room: str = ROOM, owner: str = OWNER_TOKEN
) -> dict[str, Any]:
    response = await register(client, body, room=room, owner=owner)
    assert response.status_code == 201, response.text
    data: dict[str, Any] = response.json()
    return data


class FrameReader:
    """Reads an SSE body as frames (text up to each blank line), comments included."""

    def __init__(self, response: httpx2.Response) -> None:
        self.response = response
        self._chunks = response.aiter_raw()
        self._buffer = b""
        self.eof = False

    async def next(self) -> str | None:
        """Return the next frame without its blank line, or ``None`` at end of body."""
        while b"\n\n" not in self._buffer:
            try:
                chunk = await anext(self._chunks)
            except StopAsyncIteration:
                self.eof = True
                return None
            self._buffer += chunk
        frame, self._buffer = self._buffer.split(b"\n\n", 1)
        return frame.decode("utf-8")


@asynccontextmanager
async def open_process(
    client: httpx2.AsyncClient,
    session: dict[str, Any],
    *,
    headers: dict[str, str] | None = None,
    room: str = ROOM,
    owner: str = OWNER_TOKEN,
) -> AsyncIterator[FrameReader]:
    """Open a session's process stream and read it frame by frame."""
    async with client.stream(
        "GET",
        process_path(session, room),
        headers=session_headers(session, owner) if headers is None else headers,
    ) as response:
        reader = FrameReader(response)
        async with aclosing(reader._chunks):
            yield reader


async def hold(
    client: httpx2.AsyncClient,
    session: dict[str, Any],
    owner: str = OWNER_TOKEN,
    *,
    task_status: trio.TaskStatus[trio.CancelScope] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Hold a session's process stream, reading every frame, until cancelled.

    ``await nursery.start(hold, client, session)`` returns the scope; cancelling
    it drops the stream as a vanished client would.
    """
    with trio.CancelScope() as scope:
        async with open_process(client, session, owner=owner) as reader:
            assert await reader.next() == ": connected"
            assert (await reader.next() or "").startswith("event: open")
            task_status.started(scope)
            while await reader.next() is not None:
                pass


async def drop(scope: trio.CancelScope) -> None:
    """Drop a stream held by :func:`hold` and let the room record it."""
    scope.cancel()
    await trio.testing.wait_all_tasks_blocked()


async def say(client: httpx2.AsyncClient, session: dict[str, Any], text: str = "hi") -> None:
    """Post a message as the session (the agent is heard)."""
    r = await client.post(
        f"/rooms/{ROOM}/messages", json={"text": text}, headers=session_headers(session)
    )
    assert r.status_code == 201, r.text


async def claimed_task(
    client: httpx2.AsyncClient,
    session: dict[str, Any],
    title: str = "t",
    *,
    room: str = ROOM,
    owner: str = OWNER_TOKEN,
) -> tuple[str, dict[str, Any]]:
    """A task the session created, the owner (the room's admin) accepted and the session
    claimed; return its id and the work lease the claim took."""
    tasks = f"/rooms/{room}/tasks"
    r = await client.post(tasks, json={"title": title}, headers=session_headers(session, owner))
    assert r.status_code == 201, r.text
    task_id: str = r.json()["id"]
    r = await client.patch(
        f"{tasks}/{task_id}", json={"status": "accepted"}, headers=person_headers(PERSON_OF[owner])
    )
    assert r.status_code == 200, r.text
    claim = {"status": "assigned", "assignee": session["actor_label"]}
    r = await client.patch(
        f"{tasks}/{task_id}", json=claim, headers=session_headers(session, owner)
    )
    assert r.status_code == 200, r.text
    (lease,) = r.json()["active_leases"]
    return task_id, lease


async def announce_exit(client: httpx2.AsyncClient, session: dict[str, Any]) -> bool:
    """Post the process exit (no connection id) and return ``recorded``."""
    r = await client.post(
        process_path(session) + "/exit",
        json={
            "agent_session_id": session["session_id"],
            "agent_session_token": session["session_token"],
            "process_connection_id": None,
        },
    )
    assert r.status_code == 200
    recorded: bool = r.json()["recorded"]
    return recorded


async def patch_task(
    client: httpx2.AsyncClient,
    headers: dict[str, str],
    task_id: str,
    *,
    room: str = ROOM,
    **body: Any,
) -> httpx2.Response:
    """``PATCH`` a task of the room with ``body``, as ``headers`` say who."""
    return await client.patch(f"/rooms/{room}/tasks/{task_id}", json=body, headers=headers)


async def disconnect(client: httpx2.AsyncClient, session: dict[str, Any]) -> None:
    """End a session as its worker does when it leaves the room."""
    r = await client.post(
        f"/rooms/{ROOM}/agent-sessions/{session['session_id']}/disconnect",
        json={
            "agent_session_id": session["session_id"],
            "agent_session_token": session["session_token"],
        },
    )
    assert r.status_code == 200, r.text
