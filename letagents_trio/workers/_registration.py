"""One registration of a worker in a room, past the fast path (PROTOCOL §5.3 steps 3-9).

:class:`~letagents_trio.workers.WorkerHandles` decides *whether* to register
(in-flight de-duplication, the pinned fast path) and keeps what it gets (pins,
held connections). A :class:`Registrar` does the registration itself:

1. *Identity*: the canonical key of the worker's agent name
   ``worker-<hex>`` (``POST /agents``, hosted rooms only: a local room's key
   is ``<owner>/worker-<hex>``). A hosted room needs a signed-in account.
2. *Prepared operation*: ``{operation_id, connection_token}`` (the token is
   43 characters of base64url) is stored under ``rooms[room].pending``
   together with the predecessor's id and token, **before** anything is sent.
   A pending operation left by a lost response is finished instead, with its
   stored token: the room recognises the token and answers with the session
   it already made, so a lost response never becomes a second session.
3. *Finish (hosted)*: ``POST /rooms/{room}/agent-sessions`` through the
   busy-retry wrapper, carrying ``process_host_id`` and
   ``registration_liveness``. The 201 is validated field by field
   (:func:`~._records.confirmed_record`); ``worker_bearer`` is dropped and
   ``adopted_task_leases`` returned once, never stored. Under the lock, and
   only if ``pending`` is still this operation, the session is stored, made
   the room's current one, and ``pending`` removed. A definite refusal (4xx)
   removes the pending operation (the room stored nothing); a lost answer, a
   5xx or a cancellation keeps it, to be finished later with the same token.
   A room that no longer knows the predecessor (it forgot its sessions: a
   room restarted without its store) refuses the proof with 409
   ``agent_instance_already_active`` naming no live session; the worker is
   then registered once more without a proof, and the room makes it a new
   session, which replaces the forgotten one in the state file.
4. *Finish (local room)*: no HTTP. The session is made in the state file
   (:func:`~._records.store_local_session`): its id is
   ``local_`` + ``sha256_hex(worker_id + "\\n" + room)``, and a first
   registration de-duplicates its name against the room's other sessions
   with codenames (never numbered suffixes).

*Confirm* (:meth:`Registrar.confirm`): a session this process pinned is
asked for again in the lost-response form (its own token as the
``connection_token``, itself as the proof). A room that still has it answers
it unchanged (no new token, the held stream untouched); one that forgot it
refuses the proof, and the worker registers again as above.

Who registers is an :class:`~._owner.Owner` (``_owner.py``).
"""

from __future__ import annotations

import json
import logging
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, final

import attrs
import trio

from .._client import encode_room_path
from .._errors import ApiError, RoomUnreachable, StateError, WorkerError
from .._protocol import ALREADY_ACTIVE_CODE
from .._session import AgentSession
from ._git import git_branch
from ._identity import local_host_id, process_host_id, registration_liveness
from ._names import codename
from ._owner import no_sign_in
from ._records import (
    LocalSessionFacts,
    Operation,
    confirmed_record,
    drop_operation,
    pending_operation,
    prepare_operation,
    store_hosted_session,
    store_local_session,
)
from ._stateparts import iso_now
from ._wire import (
    EMBEDDER_WORDING,
    NO_CANONICAL_IDENTITY_TEXT,
    NOT_CONFIRMED_TEXT,
    HostWording,
    durable_registration_body,
    new_connection_token,
    worker_agent_name,
)

if TYPE_CHECKING:
    from .._client import RoomClient
    from ._owner import Owner
    from ._state import LocalStateStore

__all__ = ["Confirmation", "Registrar", "disconnect_at_room", "forgotten_by_room"]

Confirmation = Literal["live", "forgotten", "refused"]
"""What the room said of a pinned session (:meth:`Registrar.confirm`)."""

logger = logging.getLogger("letagents_trio.workers")


@final
@attrs.frozen(kw_only=True)
class Registrar:
    """Registers one worker in one room: identity, prepared operation, finish.

    Knows nothing of pins, held connections or concurrent calls: the worker
    handles build one per registration and keep what it returns.

    Args:
        client: the room client.
        state: the shared state file.
        runtime_label: the runtime label when a registration names none.
        ide_label: the IDE label of every registration.
        wording: how the host's user gives an owner token, for the sign-in text.
    """

    client: RoomClient
    state: LocalStateStore
    runtime_label: str
    ide_label: str
    wording: HostWording = EMBEDDER_WORDING

    async def register(
        self,
        owner: Owner,
        worker: Mapping[str, Any],
        room_id: str,
        room: Mapping[str, Any],
        *,
        local: bool,
        runtime: str | None,
        cwd: str | None,
        prove: bool = True,
    ) -> tuple[AgentSession, tuple[dict[str, str], ...]]:
        """Register ``worker`` in ``room_id`` (its stored room record is ``room``).

        ``prove=False`` sends no proof of the current session: the room said it
        forgot it (:meth:`confirm`).

        Returns:
            The stored session and the leases the room moved to it (hosted only).

        Raises:
            WorkerError: a §5.2 rule (sign-in, no canonical identity, not
                confirmed, superseded, in progress, ...).
            ApiError, RoomUnreachable: the room refused or did not answer; a
                prepared operation stays stored unless the refusal was a 4xx.
            StateUnavailable, StateLockTimeout: the state file.

        Cancellation:
            A checkpoint. Cancelled while the registration is in flight, the
            prepared operation stays stored and the next call finishes it.
        """
        worker_id = str(worker["worker_id"])
        if not local and owner.login is None:
            raise no_sign_in(self.state, self.wording)
        canonical_key = await self._canonical_key(owner, worker, local=local)
        operation = pending_operation(room)
        if operation is not None:
            logger.info(
                "worker %s in %s: finishing operation %s left pending",
                worker_id,
                room_id,
                operation.operation_id,
            )
        else:
            operation = await self._prepare(worker_id, room_id, prove=prove or local)
        if local:
            session = await self._finish_local(
                owner, worker, room_id, operation, canonical_key, runtime=runtime, cwd=cwd
            )
            return session, ()
        try:
            return await self._finish_hosted(
                worker, room_id, operation, canonical_key, runtime=runtime, cwd=cwd
            )
        except ApiError as exc:
            if operation.predecessor is None or not forgotten_by_room(exc):
                raise
        logger.info(
            "worker %s in %s: the room no longer knows session %s; registering a new one",
            worker_id,
            room_id,
            operation.predecessor_id,
        )
        operation = await self._prepare(worker_id, room_id, prove=False)
        return await self._finish_hosted(
            worker, room_id, operation, canonical_key, runtime=runtime, cwd=cwd
        )

    async def confirm(
        self,
        worker: Mapping[str, Any],
        room_id: str,
        pin: AgentSession,
        *,
        runtime: str | None,
        cwd: str | None,
    ) -> Confirmation:
        """Whether the room still has ``pin``, this process's session of ``worker``, live.

        Asked as a lost response is finished: ``pin``'s own token as the
        ``connection_token`` and ``pin`` as the proof, so a room that has the
        session answers it unchanged and nothing is written anywhere.

        Returns:
            ``"live"`` when the room answered ``pin`` (or could not be reached:
            the held stream goes on trying); ``"forgotten"`` when the room
            knows no session of the worker (register without a proof);
            ``"refused"`` when it refused ``pin`` otherwise (it ended the
            session, or another process registered the worker): register again.

        Raises:
            WorkerError: the room answered another session (§5.2.10's text).
            ApiError: the room refused otherwise than with 409.

        Cancellation:
            A checkpoint; nothing is written, before or after.
        """
        worker_id = str(worker["worker_id"])
        actor_key = pin.extra.get("agent_key")
        if not isinstance(actor_key, str) or not actor_key:
            await trio.lowlevel.checkpoint()
            return "refused"
        own = Operation(
            operation_id="confirm",
            connection_token=pin.session_token,
            predecessor_id=pin.session_id,
            predecessor_token=pin.session_token,
        )
        body = await self._body(worker, own, actor_key, runtime=runtime, cwd=cwd)
        try:
            answer = await self.client.call_when_free(
                "POST", f"/rooms/{encode_room_path(room_id)}/agent-sessions", json=body
            )
        except RoomUnreachable as exc:
            logger.info("could not confirm session %s with the room: %s", pin.session_id, exc)
            return "live"
        except ApiError as exc:
            if exc.status != 409:
                raise
            logger.debug("the room refused session %s: %s", pin.session_id, exc.body)
            return "forgotten" if forgotten_by_room(exc) else "refused"
        record, _ = confirmed_record(
            answer,
            operation=own,
            worker_id=worker_id,
            canonical_key=actor_key,
            room_id=room_id,
            display_name=pin.display_name,
        )
        if record["session_id"] != pin.session_id:
            raise WorkerError(NOT_CONFIRMED_TEXT)
        return "live"

    async def _body(
        self,
        worker: Mapping[str, Any],
        operation: Operation,
        canonical_key: str,
        *,
        runtime: str | None,
        cwd: str | None,
    ) -> dict[str, Any]:
        """The registration body of ``operation`` for ``worker``."""
        worker_id = str(worker["worker_id"])
        runtime_label = runtime or self.runtime_label
        host_id = await local_host_id(self.state)
        return durable_registration_body(
            actor_key=canonical_key,
            worker_id=worker_id,
            display_name=str(worker.get("display_name") or codename(worker_id).display_name),
            connection_token=operation.connection_token,
            process_host_id=process_host_id(host_id),
            registration_liveness=registration_liveness(host_id, runtime_label),
            runtime=runtime_label,
            ide_label=self.ide_label,
            repo_branch=git_branch(cwd),
            predecessor=operation.predecessor,
        )

    async def _canonical_key(self, owner: Owner, worker: Mapping[str, Any], *, local: bool) -> str:
        name = worker_agent_name(str(worker["worker_id"]))
        if local:
            await trio.lowlevel.checkpoint()
            return f"{owner.key_owner}/{name}"
        answer = await self.client.call(
            "POST",
            "/agents",
            json={
                "name": name,
                "display_name": worker.get("display_name"),
                "owner_label": owner.label,
            },
        )
        key = answer.get("canonical_key") if isinstance(answer, Mapping) else None
        if not isinstance(key, str) or not key:
            raise WorkerError(NO_CANONICAL_IDENTITY_TEXT)
        return key

    async def _prepare(self, worker_id: str, room_id: str, *, prove: bool = True) -> Operation:
        """Store a new pending operation (with the predecessor proof) before sending it."""
        token = new_connection_token()
        operation_id = str(uuid.uuid4())
        return await self.state.update(
            lambda state: prepare_operation(
                state,
                worker_id,
                room_id,
                operation_id=operation_id,
                connection_token=token,
                prove=prove,
            )
        )

    async def _abandon(self, worker_id: str, room_id: str, operation: Operation) -> None:
        """Remove ``operation`` from ``pending`` (if it is still there): the room refused it."""
        try:
            await self.state.update(
                lambda state: drop_operation(state, worker_id, room_id, operation)
            )
        except StateError as exc:
            # The room's refusal is the news; a pending left behind is
            # finished (and refused again) by the next call.
            logger.warning("could not drop a refused operation: %s", type(exc).__name__)

    async def _finish_hosted(
        self,
        worker: Mapping[str, Any],
        room_id: str,
        operation: Operation,
        canonical_key: str,
        *,
        runtime: str | None,
        cwd: str | None,
    ) -> tuple[AgentSession, tuple[dict[str, str], ...]]:
        worker_id = str(worker["worker_id"])
        display_name = str(worker.get("display_name") or codename(worker_id).display_name)
        body = await self._body(worker, operation, canonical_key, runtime=runtime, cwd=cwd)
        refusal: ApiError | None = None
        try:
            created = await self.client.call_when_free(
                "POST", f"/rooms/{encode_room_path(room_id)}/agent-sessions", json=body
            )
        except ApiError as exc:
            refusal = exc
        if refusal is not None:
            if 400 <= refusal.status < 500:
                # A definite refusal: the room stored nothing for this token.
                await self._abandon(worker_id, room_id, operation)
            raise refusal
        record, leases = confirmed_record(
            created,
            operation=operation,
            worker_id=worker_id,
            canonical_key=canonical_key,
            room_id=room_id,
            display_name=display_name,
        )
        now = iso_now(self.state.wall_clock)
        await self.state.update(
            lambda state: store_hosted_session(
                state, worker_id, room_id, operation, record, now=now
            )
        )
        logger.info(
            "worker %s registered in %s as session %s (%r)",
            worker_id,
            room_id,
            record["session_id"],
            record.get("display_name"),
        )
        return AgentSession.from_json(record), leases

    async def _finish_local(
        self,
        owner: Owner,
        worker: Mapping[str, Any],
        room_id: str,
        operation: Operation,
        canonical_key: str,
        *,
        runtime: str | None,
        cwd: str | None,
    ) -> AgentSession:
        worker_id = str(worker["worker_id"])
        facts = LocalSessionFacts(
            canonical_key=canonical_key,
            worker_name=str(worker.get("display_name") or codename(worker_id).display_name),
            owner_label=owner.label,
            ide_label=self.ide_label,
            runtime=runtime or self.runtime_label,
            repo_branch=git_branch(cwd),
            now=iso_now(self.state.wall_clock),
        )
        record = await self.state.update(
            lambda state: store_local_session(state, worker_id, room_id, operation, facts)
        )
        logger.info(
            "worker %s registered in local room %s as %r",
            worker_id,
            room_id,
            record["display_name"],
        )
        return AgentSession.from_json(record)


def forgotten_by_room(refusal: ApiError) -> bool:
    """Whether a registration's refusal says the room knows no live session of the worker.

    The room refuses a replacement proof it cannot check with 409
    ``agent_instance_already_active``; naming no ``active_session_id``, it
    holds no session of this worker at all (PROTOCOL §7.3).
    """
    if refusal.status != 409:
        return False
    try:
        body = json.loads(refusal.body)
    except ValueError:
        return False
    return (
        isinstance(body, Mapping)
        and body.get("code") == ALREADY_ACTIVE_CODE
        and body.get("active_session_id") is None
    )


async def disconnect_at_room(client: RoomClient, session: AgentSession) -> str | None:
    """End ``session`` at the room with its own credentials (R6); the room's ``ended_at``.

    Raises:
        ApiError, RoomUnreachable: the room refused or did not answer.

    Cancellation:
        A checkpoint; cancelled in flight, the room may have ended the session.
    """
    answer = await client.call(
        "POST",
        client.session_url(session, "/disconnect"),
        json={
            "agent_session_id": session.session_id,
            "agent_session_token": session.session_token,
        },
    )
    row = answer.get("agent_session") if isinstance(answer, Mapping) else None
    stamp = row.get("ended_at") if isinstance(row, Mapping) else None
    return stamp if isinstance(stamp, str) and stamp else None
