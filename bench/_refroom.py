"""The reference room (``letagents-trio room``) as a benchmark's peer (not a benchmark itself).

:class:`ReferenceRoom` runs ``python -m letagents_trio room --memory`` on
127.0.0.1 in its own process, as a :class:`~_peer.Child` (its CPU and RSS from
/proc, reaped through a pidfd, SIGKILLed in ``finally``). The room binds port
0 and writes its URL to stderr, which goes to its log; the harness reads it
from there. The owner token is made here and handed over in a 0600 file
(``--owner-tokens-file``); the sessions the harness registers are handed to
the client the same way (``_hold_py.py --sessions-file``), so no token is
ever on a command line.

:func:`register_many` registers sessions :data:`ROOM_SIZE` to a room (a
registration reads every session of its room, so big rooms make registering
quadratic), :data:`REGISTER_CONCURRENCY` at a time. The room's counters are
read from its admin-only ``GET /rooms/{room}/process-statistics``, summed over
the rooms the sessions were registered in.

Loopback only; every wait bounded.
"""

from __future__ import annotations

import json
import secrets
import sys
import uuid
from collections import Counter
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx2
import trio
from _peer import Child, private_file, settled

__all__ = ["LOGIN", "ROOM_SIZE", "ReferenceRoom", "register_many"]

# Sessions per room: registering in a room of n sessions reads all n.
ROOM_SIZE = 100
# Registrations in flight at once: enough to keep the room busy, few sockets.
REGISTER_CONCURRENCY = 16
# Statistics requests in flight at once (one per room).
STATISTICS_CONCURRENCY = 8
# The bench account's login: an actor key is "<login>/<name>".
LOGIN = "bench"
# The room prints its URL within this long of being spawned, or never will.
START_BOUND = 20.0
# The counters the room's statistics route answers, summed over rooms.
COUNTERS = ("held", "exits_announced", "exits_recorded", "exits_matched", "exits_over_socket")


async def register_many(url: str, start: int, count: int, *, token: str) -> list[dict[str, Any]]:
    """Register ``count`` worker sessions (numbered from ``start``) as the owner of ``token``.

    Returns the room's registration answers (each with ``session_id``,
    ``session_token`` and ``room_id``), in order.
    """
    sessions: list[dict[str, Any]] = [{} for _ in range(count)]
    limiter = trio.CapacityLimiter(REGISTER_CONCURRENCY)
    async with httpx2.AsyncClient(
        base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30
    ) as client:

        async def one(i: int) -> None:
            async with limiter:
                instance = "worker_" + uuid.uuid4().hex
                body = {
                    "actor_key": f"{LOGIN}/{instance}",
                    "agent_instance_id": instance,
                    "display_name": f"Bench{start + i}",
                    "session_kind": "worker",
                    "process_host_id": "bench-host",
                    "connection_token": uuid.uuid4().hex + uuid.uuid4().hex,
                }
                room = f"bench_{(start + i) // ROOM_SIZE}"
                r = await client.post(f"/rooms/{room}/agent-sessions", json=body)
                r.raise_for_status()
                sessions[i] = r.json()

        async with trio.open_nursery() as nursery:
            for i in range(count):
                nursery.start_soon(one, i)
    return sessions


class ReferenceRoom:
    """One fresh ``letagents-trio room --memory`` on 127.0.0.1, and its bench owner."""

    def __init__(self, child: Child, url: str, token: str, folder: Path, tag: str) -> None:
        self.child = child
        self.url = url
        self.rooms: list[str] = []
        self._token = token
        self._folder = folder
        self._tag = tag
        self._http = httpx2.AsyncClient(
            base_url=url, headers={"Authorization": f"Bearer {token}"}, timeout=30
        )

    @classmethod
    @asynccontextmanager
    async def open(cls, folder: Path, tag: str) -> AsyncIterator[ReferenceRoom]:
        """Start the room (``folder`` holds its log and the 0600 token files); kill it after."""
        token = secrets.token_urlsafe(24)
        tokens = private_file(folder / f"owner-tokens-{tag}", f"{token}={LOGIN}\n")
        log = folder / f"room-{tag}.log"
        argv = [sys.executable, "-m", "letagents_trio", "room", "--memory"]
        argv += ["--host", "127.0.0.1", "--port", "0", "--owner-tokens-file", str(tokens)]
        argv += ["--log-level", "WARNING"]
        child = await Child.spawn("room", argv, log=log)
        try:
            url = await _listening(log)
            room = cls(child, url, token, folder, tag)
            try:
                yield room
            finally:
                with trio.CancelScope(shield=True):
                    await room._http.aclose()
        finally:
            with trio.CancelScope(shield=True):
                await child.kill()
            tokens.unlink()
            (folder / f"sessions-{tag}.json").unlink(missing_ok=True)

    async def register(self, count: int) -> Path:
        """Register ``count`` sessions; return the 0600 file that holds them for the client."""
        sessions = await register_many(self.url, 0, count, token=self._token)
        self.rooms = sorted({s["room_id"] for s in sessions})
        return private_file(self._folder / f"sessions-{self._tag}.json", json.dumps(sessions))

    async def statistics(self) -> Mapping[str, int]:
        """Every counter of ``…/process-statistics``, summed over this bench's rooms."""
        total: Counter[str] = Counter(dict.fromkeys(COUNTERS, 0))
        limiter = trio.CapacityLimiter(STATISTICS_CONCURRENCY)

        async def one(room: str) -> None:
            async with limiter:
                try:
                    response = await self._http.get(f"/rooms/{room}/process-statistics")
                except (httpx2.ReadError, httpx2.RemoteProtocolError):
                    # The room may close an idle kept-alive connection at any time
                    # (HTTP allows it; its cap on silent connections does, under a
                    # burst of sockets opening): the read is idempotent, ask again.
                    response = await self._http.get(f"/rooms/{room}/process-statistics")
            response.raise_for_status()
            body = response.json()
            total.update({key: int(body[key]) for key in COUNTERS})

        async with trio.open_nursery() as nursery:
            for room in self.rooms:
                nursery.start_soon(one, room)
        return total

    async def settled_statistics(self) -> Mapping[str, Any]:
        """:meth:`statistics` once its exit counters stopped moving.

        The reference room is one Python process: at 10,000 sockets it needs
        seconds to read the exits and closes that arrive at once, and a
        statistics read waits behind them. So the counters must stand still
        for a whole second, within up to 60 s, before they are taken.
        """
        return await settled(self.statistics, COUNTERS[1:], quiet=1.0, within=60.0)


async def _listening(log: Path) -> str:
    """The URL the room writes to its log once it listens (bounded; raises if it never does)."""
    marker = "letagents room on "
    with trio.move_on_after(START_BOUND):
        while True:
            text = await trio.Path(log).read_text(errors="replace")
            if marker in text and text.split(marker, 1)[1].count("\n"):
                return text.split(marker, 1)[1].split("\n", 1)[0].strip()
            await trio.sleep(0.05)
    raise RuntimeError(f"the reference room did not start; see {log}")
