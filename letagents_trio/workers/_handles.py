"""Worker handles: create, resume, recover and disconnect durable room workers.

A chat in an MCP host becomes a room worker through a *handle*, ``worker_`` +
32 hex, that it keeps and passes back. The handle lives in the shared state
file (``mcp_workers``), so it survives MCP restarts; the room session it
stands for is re-registered with proof of its predecessor, so a restart keeps
the same ``session_id`` and name. PROTOCOL §5 is the specification; this is
the algorithm.

Scope
    Every handle belongs to one account on one API: ``<api_url>\\n<login>``
    (login lower-cased: the stored sign-in's own when the client's token is
    its token, else from ``GET /agents/me``, cached once it succeeds), or
    ``<api_url>\\nlocal:<slug>`` without an owner token. When an owner token
    exists but the account cannot be read, every call fails *before anything
    is written or sent* ("Could not verify your LetAgents account…").

Create (``registration_key``)
    ``sha256_hex(scope + "\\n" + key)`` names the worker: under the state lock
    an existing worker with that hash in this scope is reused, else a new
    ``worker_<uuid4 hex>`` is stored with the trimmed display name (or the
    codename of its id). Two chats never share a key, so a retried create is
    the same worker, never a second identity.

Connect (create and resume share it)
    1. *In-flight de-duplication*: concurrent calls for one (worker, room) in
       this process share one operation; exactly one registration is sent.
    2. *Pinned fast path*: if this process pinned the worker's current session
       in the room, the stored record is live, its token equals the pin, and no
       operation is pending, the pin is returned (and its process connection
       held) **without asking the room**.
    3. Otherwise a registration (:class:`~._registration.Registrar`): the
       canonical identity, then a *prepared operation* stored **before**
       anything is sent (or the one a lost response left, finished with its
       stored token, so a lost response never becomes a second session), then
       the finish: ``POST …/agent-sessions`` for a hosted room, the state file
       alone for a local one.
    4. The session is pinned in memory and, for hosted rooms, its process
       connection is held by the :class:`~letagents_trio.ConnectionManager`.

Recover (``recover_lost_worker``)
    A chat that lost its handle names the display name it lives under. If this
    process pins exactly one live worker in the room whose *current* name has
    that name key, it is resumed as if its ``worker_id`` had been passed (the
    fast path: nothing is sent). A create whose key is new reports the same
    match as ``name_held_here`` so the MCP layer can say how to recover, never
    naming the other handle.

Acting as a worker (``acting_as``)
    Before a room call: the pinned session, the stored record, no pending
    operation, not ended, and equal tokens. After it, the same check from disk:
    a worker re-registered by another process (the token changed) can no
    longer act here.

Disconnect
    ``POST …/disconnect`` with the worker's own credentials (nothing for local
    rooms), then stop holding its process connection, then end the stored
    record guarded by the token: a late answer about a predecessor never ends
    its successor.

The legacy path (sessions of this process, not workers; and the worker-bearer
marker) is :class:`~._legacy.LegacyRegistrar`'s; :meth:`WorkerHandles.register_legacy`
checks the room and the mode, and hands it over.

Only pins, the in-flight map and adopted leases live in memory (§6.4);
everything else is in the state file, written only through
:meth:`LocalStateStore.update`. This module is the orchestration (what to
ask, in which order, what to keep in memory); every read and change of the
stored records is a pure function in :mod:`._records` and :mod:`._acting`,
and every text and wire shape comes from :mod:`._wire`.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any, final

import attrs
import trio

from .._errors import StateUnavailable, WorkerError
from ._acting import act_as
from ._connect import Connections
from ._identity import DEFAULT_RUNTIME_LABEL, local_owner_slug
from ._legacy import LegacyRegistrar
from ._names import DEFAULT_IDE_LABEL, js_trim
from ._owner import AccountCache, Owner, no_sign_in
from ._records import (
    create_or_reuse_worker,
    held_under,
    known_key,
    registration_key_hash,
    worker_in_scope,
)
from ._registration import disconnect_at_room
from ._results import WorkerHandlesStatistics, WorkerRegistration
from ._stateparts import STATE_UNAVAILABLE_MESSAGE, iso_now
from ._wire import (
    BOTH_HANDLES_TEXT,
    CONTROLLER_TEXT,
    EMBEDDER_WORDING,
    NEW_CHAT_KEY_TEXT,
    RECOVER_ARGUMENTS_TEXT,
    ROOM_REQUIRED_TEXT,
    SUPERVISED_TEXT,
    HostWording,
    new_worker_id,
    recover_ambiguous_text,
    recover_none_text,
)

if TYPE_CHECKING:
    from .._client import RoomClient
    from .._manager import ConnectionManager
    from .._session import AgentSession
    from ._chat_storage import ChatStorage
    from ._state import LocalStateStore

__all__ = ["WorkerHandles", "WorkerHandlesStatistics", "WorkerRegistration"]


logger = logging.getLogger("letagents_trio.workers")


@final
@attrs.define(eq=False, kw_only=True)
class WorkerHandles:
    """Durable worker handles for one process (one per MCP server).

    Owns the pinned connections and the in-flight registration map (both in
    memory only), and asks the connection manager to hold or release process
    connections.

    Args:
        client: the room client (its owner token decides whether an account
            must be verified).
        state: the shared state file.
        manager: holds process connections of hosted workers; ``None`` holds none.
        chat_storage: decides which rooms are local (§6.1); ``None`` means
            every room is hosted.
        owner_mode: false when the process runs under a supervisor or worker
            bearer: worker handles are then refused (the connection manager
            should be opened with the same value).
        local_owner: the owner slug of local identities when no account is
            signed in; default: the user name (:func:`local_owner_slug`).
        runtime_label: the runtime label of registrations that name none
            (the MCP server passes ``LETAGENTS_RUNTIME``'s); default ``"python"``.
        ide_label: the IDE label of every registration (the MCP server passes
            ``LETAGENTS_IDE``'s, normalised); default ``"Agent"``.
        token_origin: where the client's owner token came from (the MCP server
            passes ``LETAGENTS_TOKEN`` or the state file's ``auth.token``), named
            when the room refuses it.
        wording: how this host's user sets the room's address and the owner
            token and registers a worker, as the errors name them. The default
            names the ``RoomClient`` and :meth:`register`; the MCP server passes
            its environment variables and tool names.
    """

    client: RoomClient
    state: LocalStateStore
    manager: ConnectionManager | None = None
    chat_storage: ChatStorage | None = None
    owner_mode: bool = True
    local_owner: str | None = None
    runtime_label: str = DEFAULT_RUNTIME_LABEL
    ide_label: str = DEFAULT_IDE_LABEL
    token_origin: str | None = None
    wording: HostWording = EMBEDDER_WORDING
    _account: AccountCache = attrs.field(
        default=attrs.Factory(
            lambda h: AccountCache(h.client, h.token_origin, h.wording, h.state),
            takes_self=True,
        ),
        init=False,
        repr=False,
    )
    _connections: Connections = attrs.field(
        default=attrs.Factory(
            lambda h: Connections(
                client=h.client,
                state=h.state,
                snapshot=h._snapshot,
                manager=h.manager,
                runtime_label=h.runtime_label,
                ide_label=h.ide_label,
                wording=h.wording,
                owner_refused=h.forget_account,
            ),
            takes_self=True,
        ),
        init=False,
        repr=False,
    )
    _legacy: LegacyRegistrar = attrs.field(
        default=attrs.Factory(
            lambda h: LegacyRegistrar(
                client=h.client,
                state=h.state,
                runtime_label=h.runtime_label,
                ide_label=h.ide_label,
                manager=h.manager,
                owner_label=h.local_owner or local_owner_slug(),
                wording=h.wording,
            ),
            takes_self=True,
        ),
        init=False,
        repr=False,
    )

    def __repr__(self) -> str:
        return (
            f"<WorkerHandles state={str(self.state.path)!r}"
            f" pins={len(self._connections.pins)} in_flight={self._connections.in_flight}>"
        )

    # --- small questions -------------------------------------------------------------

    def is_local_room(self, room_id: str) -> bool:
        """Whether ``room_id`` keeps its chat on this machine (no HTTP, no process connection)."""
        return self.chat_storage is not None and self.chat_storage.is_local(room_id)

    def pinned(self, session_id: str) -> AgentSession | None:
        """This process's pinned copy of a session, or ``None`` (§6.4)."""
        return self._connections.pins.get(session_id)

    def worker_bearer_session(self, room_id: str) -> AgentSession:
        """The worker-bearer marker session in ``room_id`` (``worker_bearer``; ``_legacy.py``)."""
        return self._legacy.worker_bearer_session(room_id)

    def statistics(self) -> WorkerHandlesStatistics:
        """A frozen snapshot: pins, registrations in flight, whether the account is cached."""
        return WorkerHandlesStatistics(
            pinned_sessions=len(self._connections.pins),
            registrations_in_flight=self._connections.in_flight,
            account_cached=self._account.cached,
        )

    def forget_account(self) -> None:
        """Drop the cached account (a changed or removed owner token drops it anyway)."""
        self._account.forget()

    def _snapshot(self) -> Mapping[str, Any]:
        snapshot = self.state.read()
        if not snapshot.complete:
            error = StateUnavailable(STATE_UNAVAILABLE_MESSAGE)
            error.add_note(f"state file {self.state.path}: {snapshot.problem}")
            raise error
        return snapshot.data

    # --- account and scope -------------------------------------------------------------

    async def _owner(self) -> Owner:
        if not self.owner_mode:
            raise WorkerError(SUPERVISED_TEXT)
        login = await self._account.login()
        if login is not None:
            return Owner.signed_in(self.client.api_url, login)
        return Owner.local(self.client.api_url, self.local_owner or local_owner_slug())

    # --- register ----------------------------------------------------------------------

    async def register(
        self,
        *,
        room_id: str | None,
        worker_id: str | None = None,
        registration_key: str | None = None,
        display_name: str | None = None,
        runtime: str | None = None,
        cwd: str | None = None,
        recover_lost_worker: bool = False,
        session_kind: str | None = None,
    ) -> WorkerRegistration:
        """Create, resume or recover a worker and connect it to a room (PROTOCOL §5.3).

        Exactly one of ``worker_id`` (resume), ``registration_key`` (create) or
        ``recover_lost_worker`` with ``display_name`` (recover) says which worker.

        Args:
            room_id: the room; required.
            worker_id: a saved handle, to resume.
            registration_key: this chat's own key, to create (or find again).
            display_name: the name to ask for (create), or to recover by.
            runtime: the runtime label; default the handles' ``runtime_label``.
            cwd: the chat's working directory, for ``repo_branch``.
            recover_lost_worker: recover the one worker this process holds under
                ``display_name`` in the room.
            session_kind: only ``"worker"`` (or ``None``) is accepted.

        Returns:
            The worker's handle and session; ``name_held_here`` and
            ``adopted_task_leases`` as described on :class:`WorkerRegistration`.

        Raises:
            WorkerError: a rule of §5.2 refused the call (the message is the
                exact upstream text).
            StateUnavailable: the state file is damaged; nothing was written.
            ApiError: the room refused the registration.
            RoomUnreachable: the room did not answer; a prepared registration
                stays stored and the next call finishes it with the same token.

        Cancellation:
            A checkpoint. Cancelled before the registration was sent, nothing
            but the worker record (and perhaps the prepared operation) was
            stored. Cancelled while it was in flight, the prepared operation
            stays stored, and the next call finishes it with the same token, so
            the room never makes a second session. Concurrent identical calls
            that were waiting on a cancelled call start their own.
        """
        if session_kind == "controller":
            raise WorkerError(CONTROLLER_TEXT)
        if room_id is None or not js_trim(room_id):
            raise WorkerError(ROOM_REQUIRED_TEXT)
        recover_name = js_trim(display_name or "")
        if recover_lost_worker and (worker_id or registration_key or not recover_name):
            raise WorkerError(RECOVER_ARGUMENTS_TEXT)
        owner = await self._owner()
        local = self.is_local_room(room_id)
        if not local and owner.login is None:
            # Before anything is stored: a refused call leaves the state file as it was.
            raise no_sign_in(self.state, self.wording)
        if recover_lost_worker:
            held = held_under(
                self._snapshot(),
                self._connections.pins,
                name=recover_name,
                scope=owner.scope,
                room_id=room_id,
            )
            if not held:
                raise WorkerError(recover_none_text(recover_name))
            if len(held) > 1:
                raise WorkerError(recover_ambiguous_text(recover_name))
            worker_id = held[0][0]
            logger.info("recovered worker %s by its name in %s", worker_id, room_id)
        if worker_id and registration_key:
            raise WorkerError(BOTH_HANDLES_TEXT)
        name_held_here: str | None = None
        if not worker_id:
            if not registration_key or not js_trim(registration_key):
                raise WorkerError(NEW_CHAT_KEY_TEXT)
            worker_id, name_held_here = await self._create(
                owner, registration_key, display_name, room_id
            )
        worker = worker_in_scope(self._snapshot(), worker_id, owner.scope, self.wording)
        (session, leases), led = await self._connections.connect(
            owner, worker, room_id, local=local, runtime=runtime, cwd=cwd
        )
        return WorkerRegistration(
            worker_id=worker_id,
            session=session,
            name_held_here=name_held_here,
            adopted_task_leases=leases if led else (),
        )

    async def _create(
        self, owner: Owner, registration_key: str, display_name: str | None, room_id: str
    ) -> tuple[str, str | None]:
        """This chat's worker (stored now if its key is new), and a live name it clashes with."""
        key_hash = registration_key_hash(owner.scope, registration_key)
        name = js_trim(display_name or "")
        data = self._snapshot()
        name_held_here: str | None = None
        if not known_key(data, owner.scope, key_hash):
            held = held_under(
                data, self._connections.pins, name=name, scope=owner.scope, room_id=room_id
            )
            name_held_here = held[0][1] if held else None
        new_id = new_worker_id()
        worker_id, created = await self.state.update(
            lambda state: create_or_reuse_worker(
                state, scope=owner.scope, key_hash=key_hash, display_name=name, new_id=new_id
            )
        )
        if created:
            logger.info("created worker %s", worker_id)
        return worker_id, name_held_here

    # --- the legacy path ---------------------------------------------------------------

    async def register_legacy(
        self,
        *,
        room_id: str | None,
        session_kind: str | None = None,
        display_name: str | None = None,
        runtime: str | None = None,
        cwd: str | None = None,
    ) -> WorkerRegistration:
        """Register a session of this process, not a durable worker (§5.8, ``_legacy.py``).

        With a worker bearer (``owner_mode`` false) nothing is sent or stored:
        the answer is the marker session ``worker_bearer``, the bearer being the
        only credential. ``worker_id`` is ``""``.

        Raises:
            WorkerError: no room or sign-in, or a local room.
            ApiError, RoomUnreachable: the room refused or did not answer.
        """
        if room_id is None or not js_trim(room_id):
            raise WorkerError(ROOM_REQUIRED_TEXT)
        if not self.owner_mode:
            await trio.lowlevel.checkpoint()
            session = self._legacy.worker_bearer_session(room_id, runtime=runtime)
            return WorkerRegistration(worker_id="", session=session)
        return await self._legacy.register(
            await self._owner(),
            room_id,
            local=self.is_local_room(room_id),
            session_kind=session_kind or "worker",
            display_name=display_name,
            runtime=runtime,
            cwd=cwd,
        )

    # --- acting as a worker ------------------------------------------------------------

    @asynccontextmanager
    async def acting_as(
        self,
        *,
        worker_id: str | None = None,
        agent_session_id: str | None = None,
        room_id: str | None = None,
        allow_ended: bool = False,
    ) -> AsyncIterator[AgentSession]:
        """Run a room call as a worker, guarded before and after (PROTOCOL §6.6).

        Before the block: this process pinned the worker's current session in
        the room, the stored record exists, no registration is pending, it is
        not ended (unless ``allow_ended``), and its token equals the pin. After
        the block (when it exits normally) the same check runs again from disk.

        Args:
            worker_id: the worker's handle.
            agent_session_id: a legacy session id instead of ``worker_id``; a
                durable worker's session is guarded the same way.
            room_id: the room; may be omitted when the worker has exactly one.
            allow_ended: allow an ended session (disconnect only).

        Yields:
            The stored session to act as (its credentials for the request).

        Raises:
            WorkerError: ``NO_CONNECTION_TEXT`` or ``CONNECTION_REPLACED_TEXT``
                before the block; ``CONNECTION_REPLACED_OR_DISCONNECTED_TEXT``
                after it; the unknown-worker, ambiguous-room and both-targets
                texts for bad arguments.
            StateUnavailable: the state file is damaged.

        Cancellation:
            A checkpoint before the block; nothing to clean up. A block that
            is cancelled (or raises) skips the after-check.
        """
        async with act_as(
            self._snapshot,
            self._connections.pins,
            wording=self.wording,
            worker_id=worker_id,
            agent_session_id=agent_session_id,
            room_id=room_id,
            allow_ended=allow_ended,
        ) as session:
            yield session

    # --- disconnect --------------------------------------------------------------------

    async def disconnect(
        self,
        *,
        worker_id: str | None = None,
        agent_session_id: str | None = None,
        room_id: str | None = None,
    ) -> AgentSession:
        """End a worker's session at the room and here (R6, PROTOCOL §6.5).

        Runs inside :meth:`acting_as` with ``allow_ended=True``: the room is
        told with the worker's own credentials (local rooms: nothing is sent),
        the process connection is released, then the stored record is ended,
        guarded by the token, so a late answer never ends a successor that
        another process registered meanwhile; that case then raises the
        after-check error.

        Returns:
            The ended session.

        Raises:
            WorkerError: as :meth:`acting_as`.
            ApiError, RoomUnreachable: the room refused or did not answer;
                nothing was changed here.

        Cancellation:
            A checkpoint. Cancelled while the request is in flight, the room
            may have ended the session while the local record is still live;
            the next room call is then refused with the ended advice, which
            ends the record.
        """
        async with self.acting_as(
            worker_id=worker_id,
            agent_session_id=agent_session_id,
            room_id=room_id,
            allow_ended=True,
        ) as session:
            ended_at = iso_now(self.state.wall_clock)
            if not session.is_local:
                ended_at = await disconnect_at_room(self.client, session) or ended_at
                if self.manager is not None:
                    self.manager.release(session.session_id)
            await self.state.end_session(session.session_id, ended_at, session.session_token)
            logger.info("session %s disconnected", session.session_id)
        return attrs.evolve(session, ended_at=ended_at)
