"""Connecting a stored worker to a room, and what this process remembers of it (PROTOCOL §5.3).

:class:`~letagents_trio.workers.WorkerHandles` checks a call's arguments and
finds (or creates) the worker; :class:`Connections` then connects it to the
room, keeping the two things only this process knows (§6.4):

* **Pins**: the session this process registered for each worker, by session
  id. A pinned session whose stored record is live, whose token equals the
  pin and that has no operation pending is confirmed with the room in one
  request that changes nothing (:meth:`~._registration.Registrar.confirm`)
  and returned as it is, its process connection held again; a local room's
  is returned without asking anyone (the *pinned fast path*). A pin the room
  no longer has is registered again, and when the room answers with a new
  session, the old one's process connection is let go for the new one's.
* **Registrations in flight**: concurrent connects of one (worker, room) share
  one :class:`~._flight.SingleFlight` call, so exactly one registration is
  sent; the leases the room moved are the leader's to report.

Past the fast path a :class:`~._registration.Registrar` registers (a 401 makes
the owner's account be asked again), the session is pinned, and a hosted
room's process connection is held by the connection manager.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from functools import partial
from typing import TYPE_CHECKING, Any, final

import attrs
import trio

from .._errors import ApiError
from ._flight import SingleFlight
from ._legacy import hold_connection
from ._records import pinned_current, room_record, worker_record
from ._registration import Confirmation, Registrar

if TYPE_CHECKING:
    from .._client import RoomClient
    from .._manager import ConnectionManager
    from .._session import AgentSession
    from ._owner import Owner
    from ._state import LocalStateStore
    from ._wire import HostWording

__all__ = ["Connected", "Connections"]

logger = logging.getLogger("letagents_trio.workers")

Connected = tuple["AgentSession", tuple[dict[str, str], ...]]
"""A connect's result: the session, and the leases the room moved to it."""


@final
@attrs.define(eq=False, kw_only=True)
class Connections:
    """This process's pinned sessions and registrations in flight; connects workers.

    Args:
        client: the room client.
        state: the shared state file.
        snapshot: a complete read of the state file (raises when it is damaged).
        manager: holds process connections of hosted sessions; ``None`` holds none.
        runtime_label: the runtime label of registrations that name none.
        ide_label: the IDE label of every registration.
        wording: how the host's user sets what the errors name.
        owner_refused: called when the room refuses the owner's token (401),
            so its account is asked again.
    """

    client: RoomClient
    state: LocalStateStore
    snapshot: Callable[[], Mapping[str, Any]]
    manager: ConnectionManager | None
    runtime_label: str
    ide_label: str
    wording: HostWording
    owner_refused: Callable[[], None]
    pins: dict[str, AgentSession] = attrs.field(factory=dict, init=False)
    _in_flight: SingleFlight[tuple[str, str], Connected] = attrs.field(
        factory=SingleFlight, init=False
    )

    @property
    def in_flight(self) -> int:
        """How many connects are running now."""
        return len(self._in_flight)

    async def connect(
        self,
        owner: Owner,
        worker: Mapping[str, Any],
        room_id: str,
        *,
        local: bool,
        runtime: str | None,
        cwd: str | None,
    ) -> tuple[Connected, bool]:
        """Connect ``worker`` to ``room_id``, once per (worker, room) at a time.

        Returns:
            The session and adopted leases, and whether this call led (a
            joiner shares the leader's session; its leases are the leader's).

        Raises:
            WorkerError, StateUnavailable, ApiError, RoomUnreachable: as
            :meth:`~._registration.Registrar.register`.

        Cancellation:
            A checkpoint; as :meth:`~._registration.Registrar.register`. A
            joiner whose leader was cancelled runs a connect of its own.
        """
        key = (str(worker["worker_id"]), room_id)
        call = partial(self._connect, owner, worker, room_id, local=local, runtime=runtime, cwd=cwd)
        return await self._in_flight.run(key, call)

    async def _connect(
        self,
        owner: Owner,
        worker: Mapping[str, Any],
        room_id: str,
        *,
        local: bool,
        runtime: str | None,
        cwd: str | None,
    ) -> Connected:
        worker_id = str(worker["worker_id"])
        data = self.snapshot()
        record = worker_record(data, worker_id) or worker
        room = room_record(record, room_id)
        registrar = Registrar(
            client=self.client,
            state=self.state,
            runtime_label=self.runtime_label,
            ide_label=self.ide_label,
            wording=self.wording,
        )
        pin = pinned_current(data, self.pins, room)
        said: Confirmation = "refused"
        if pin is not None:
            if local:
                await trio.lowlevel.checkpoint()
                logger.debug("worker %s in %s: pinned fast path", worker_id, room_id)
                return pin, ()
            said = await registrar.confirm(record, room_id, pin, runtime=runtime, cwd=cwd)
            if said == "live":
                logger.debug("worker %s in %s: the room confirmed its pin", worker_id, room_id)
                hold_connection(self.manager, pin)
                return pin, ()
            if said == "forgotten":
                logger.info(
                    "worker %s in %s: the room no longer knows session %s; registering a new one",
                    worker_id,
                    room_id,
                    pin.session_id,
                )
        prior = room.get("session_id")
        try:
            session, leases = await registrar.register(
                owner,
                record,
                room_id,
                room,
                local=local,
                runtime=runtime,
                cwd=cwd,
                prove=said != "forgotten",
            )
        except ApiError as exc:
            if exc.status == 401:  # the room refused the owner: ask for the account again
                self.owner_refused()
            raise
        self.pins[session.session_id] = session
        if isinstance(prior, str) and prior != session.session_id:
            # The room forgot the prior session: its holder follows the new one.
            self.pins.pop(prior, None)
            if self.manager is not None:
                self.manager.release(prior)
        if not local:
            hold_connection(self.manager, session)
        return session, leases
