"""Shared pieces of the worker-handle tests: simulated processes, state seeding, request views.

The room is always the reference room in a ``FakeRoom``; the faults the
upstream tests inject (``/agents/me`` failing, a registration answered by the
room but its response lost, a disconnect whose answer is held, a 201 tampered
with, forced answers on ``POST …/messages``) are FakeRoom rules
(``fake_room.on(...)``), and every request is in ``fake_room.requests``.

A *process* here is what one MCP server owns: a :class:`LocalStateStore`, a
:class:`RoomClient`, a connection manager and a :class:`WorkerHandles`. Two
of them on one state file, each with its own client, are two MCP servers.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, final

import attrs

from letagents_trio import ConnectionManager, RoomClient, open_connection_manager
from letagents_trio.workers._handles import WorkerHandles
from letagents_trio.workers._state import LocalStateStore

if TYPE_CHECKING:
    import httpx2

    from letagents_trio._client import OwnerTokenSource
    from letagents_trio.testing import FakeRoom, RequestRecord
    from letagents_trio.workers._chat_storage import ChatStorage

OWNER_TOKEN: Final = "owner-test-token"
ROOM: Final = "room_shared"
OTHER_ROOM: Final = "room_other"
LOCAL_ROOM: Final = "room_local"
BEARER: Final = "unused-bearer-secret"
# The registration route (R3), as FakeRoom rules and requests_to match paths.
REGISTRATIONS: Final = "/rooms/{room}/agent-sessions"


def requests(fake_room: FakeRoom, since: int = 0) -> list[str]:
    """``"METHOD path"`` of each request the room received, from index ``since``."""
    return [f"{r.method} {r.path}" for r in fake_room.requests[since:]]


def registrations(fake_room: FakeRoom) -> list[RequestRecord]:
    """The registration requests the room received, in order."""
    return fake_room.requests_to("POST", REGISTRATIONS)


def registration_bodies(fake_room: FakeRoom) -> list[dict[str, Any]]:
    """The bodies of those registration requests."""
    return [r.body for r in registrations(fake_room)]


@final
@attrs.frozen(kw_only=True)
class Proc:
    """One simulated MCP server process."""

    store: LocalStateStore
    client: RoomClient
    manager: ConnectionManager
    handles: WorkerHandles

    async def send(self, text: str, **target: Any) -> dict[str, Any]:
        """``send_message`` as a worker: POST …/messages inside :meth:`WorkerHandles.acting_as`."""
        async with self.handles.acting_as(**target) as session:
            answer = await self.client.call(
                "POST",
                f"/rooms/{session.room_id}/messages",
                json={"text": text},
                session=session,
            )
        assert isinstance(answer, dict)
        return answer


@asynccontextmanager
async def open_proc(
    transport: httpx2.AsyncBaseTransport | None,
    path: Path,
    *,
    api_url: str = "http://room.test",
    owner_token: OwnerTokenSource = OWNER_TOKEN,
    chat_storage: ChatStorage | None = None,
    owner_mode: bool = True,
) -> AsyncIterator[Proc]:
    """Open one simulated MCP server on the state file ``path``.

    ``transport=None`` uses the network (``api_url`` of a served room).
    """
    store = LocalStateStore(path)
    async with (
        RoomClient(api_url, owner_token=owner_token, transport=transport, state=store) as client,
        open_connection_manager(client, state=store, owner_mode=owner_mode) as manager,
    ):
        handles = WorkerHandles(
            client=client,
            state=store,
            manager=manager,
            chat_storage=chat_storage,
            owner_mode=owner_mode,
        )
        yield Proc(store=store, client=client, manager=manager, handles=handles)


async def seed_state(path: Path) -> LocalStateStore:
    """The upstream tests' starting state: the owner signed in, nothing else."""
    store = LocalStateStore(path)
    await store.save_auth(OWNER_TOKEN)
    return store


def read_bytes(path: Path) -> bytes:
    """The state file's bytes (a sync helper: async tests must not touch files directly)."""
    return path.read_bytes()


def write_text(path: Path, text: str) -> None:
    """Write a file (a sync helper, as :func:`read_bytes`)."""
    path.write_text(text, "utf-8")


def read_json(path: Path) -> dict[str, Any]:
    """The state file as JSON."""
    data = json.loads(path.read_text("utf-8"))
    assert isinstance(data, dict)
    return data
