"""The reference room: every rule of the room API, independent of HTTP.

Routes (``_app.py``) only parse requests and render :class:`~._wire.Reply`
values; the rules live beside :class:`Room`, so the HTTP app,
``testing.FakeRoom`` and the demo all run the same code. Each module holds the
pure rules of one concern (functions of rows, bodies and times, tested without
I/O) and, where the concern keeps state, the small part that applies them:

* ``_accounts``: owner accounts (R1, R2), session authentication and who calls
  a work route (:class:`~._auth._accounts.Accounts`, :class:`~._auth._accounts.Actor`);
* ``_device``: device sign-in, a person's approval, the owner tokens it mints
  (:class:`~._auth._device.DeviceSignIn`, the page in ``_device_page``);
* ``_entry``: invite rooms and joining rooms (:class:`~._rooms._entry.RoomEntry`);
* ``_registration``: body checks, naming and the hand-over plan (R3, §7.3);
* ``_presence``: has a session's process exited, is it gone (§7.2);
* ``_streams``: process streams, their evidence and announced exits (R4, R5;
  :class:`~._sessions._streams.StreamRegistry`);
* ``_liveness``: offline and recovery notices (§7.5;
  :class:`~._sessions._liveness.LivenessSweep`);
* the room's work (:class:`~._work.RoomWork`, the route table calls it
  directly): ``_messages`` and ``_threads`` (messages, threads, long polls and
  delivery connections, R7, R8), ``_guidelines``, ``_tasks`` and ``_leases``
  (the board's rules) with ``_taskboard`` (the board), and ``_knowledge``
  (memory and requests for people);
* ``_wire``: :class:`~._wire.Credentials`, :class:`~._wire.Reply`, refusals,
  row JSON; ``_rows``, ``_store`` and ``_sqlite``: the rows and where they live.

``Room`` builds the parts over one store and clock, owns the registration
locks, runs a registration from its rules, ends sessions (which touches
streams and polls), and answers the session routes with thin public methods.

Consistency. The room runs on one trio thread and its store calls are
synchronous, so a read-check-write sequence with no ``await`` in it is atomic:
that is how opening a process connection (PROTOCOL.md §2.2 step 4), refreshing
it, recording a drop or an exit, and a whole registration are each one
"transaction". A registration may wait once, outside the lock: if the name it
asks for is held only by same-owner holders that will be gone within 15 s
(``name_comes_free_at``), it sleeps until that moment + 500 ms. So
registrations are also serialised per room by a ``trio.Lock`` taken with a
5 s timeout (503 busy when it cannot be had, §10). Sessions a registration
ends are told so (their streams get ``event: ended``) after the lock is let go.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn, final

import attrs
import trio

from .._protocol import (
    OWN_DISCONNECT_TEXT,
    REGISTRATION_AUTH_TEXT,
    SESSION_ID_REQUIRED_TEXT,
    SESSION_NOT_FOUND_TEXT,
)
from ._auth._accounts import Accounts
from ._auth._device import DeviceSignIn
from ._clock import RoomClock, SystemClock
from ._config import RoomConfig
from ._liveness import LivenessSweep
from ._rooms._entry import RoomEntry
from ._sessions import _registration
from ._sessions._presence import SessionEvidence, evidence_of, exited
from ._sessions._streams import SSE_FORM, ProcessStream, StreamForm, StreamRegistry
from ._statistics import RoomCounters, RoomStatistics
from ._storage._rows import (
    END_REASON_DISCONNECT,
    END_REASON_NAME_HANDOVER,
    END_REASON_REPLACED,
    Account,
    MessageRow,
    RoomRow,
    SessionRow,
)
from ._work import RoomWork

if TYPE_CHECKING:
    from ._storage._store import RoomStore

from ._wire import (
    ROOM_NOT_FOUND_TEXT,
    Credentials,
    Refusal,
    Reply,
    busy,
    hash_token,
    projection,
    refuse,
    valid_room_id,
)

__all__ = ["Room"]

logger = logging.getLogger("letagents_trio.room_server")


@final
@attrs.define(eq=False)
class Room:
    """The reference room service.

    Args:
        store: where rows live (:class:`MemoryStore` or :class:`SQLiteStore`).
        clock: the clock every time-based rule reads (epoch ms).
        owner_tokens: owner bearer token → account login (dev auth).
        person_tokens: bearer token of a person signed in → account login
            (the API's interactive sign-in; only a person changes a room's
            settings).
        config: intervals and limits; upstream's defaults unless given (the
            room never reads the environment: its entry point does).

    The five are set once: the room's parts hold them.

    Attributes:
        work: the parts that serve the room's work routes (messages,
            guidelines, the board, memory and requests).
        entry: making invite rooms and joining rooms.
        sign_in: device sign-in (pending requests and the tokens they end in).
    """

    store: RoomStore = attrs.field(on_setattr=attrs.setters.frozen)
    clock: RoomClock = attrs.field(factory=SystemClock, on_setattr=attrs.setters.frozen)
    owner_tokens: Mapping[str, str] = attrs.field(
        factory=dict, repr=False, on_setattr=attrs.setters.frozen
    )
    person_tokens: Mapping[str, str] = attrs.field(
        factory=dict, repr=False, on_setattr=attrs.setters.frozen
    )
    config: RoomConfig = attrs.field(factory=RoomConfig, on_setattr=attrs.setters.frozen)
    work: RoomWork = attrs.field(init=False)
    entry: RoomEntry = attrs.field(init=False)
    sign_in: DeviceSignIn = attrs.field(init=False)
    _accounts: Accounts = attrs.field(init=False)
    _streams: StreamRegistry = attrs.field(init=False)
    _liveness: LivenessSweep = attrs.field(init=False)
    _counters: RoomCounters = attrs.field(init=False)
    _locks: dict[str, trio.Lock] = attrs.field(init=False, factory=dict)

    def __attrs_post_init__(self) -> None:
        store, clock, config = self.store, self.clock, self.config
        self._accounts = accounts = Accounts(store, clock, self.owner_tokens, self.person_tokens)
        self.entry = RoomEntry(store, clock, accounts)
        self.sign_in = DeviceSignIn(store, clock, accounts)
        self._streams = StreamRegistry(
            store,
            clock,
            accounts,
            heartbeat_interval=config.heartbeat_interval,
            refresh_interval=config.refresh_interval,
        )
        self.work = RoomWork.build(
            store,
            clock,
            accounts,
            poll_max_ms=config.poll_max_ms,
            reachable=lambda sid: self.reachable(sid, self.now_ms()),
            wake_min_lead_ms=config.wake_min_lead_ms,
        )
        self._liveness = LivenessSweep(
            store,
            clock,
            self.work.messages,
            self.work.tasks,
            reachable=self.reachable,
            grace_ms=config.liveness_notice_after_ms,
        )
        self._counters = RoomCounters(accounts, self._streams, self.work.messages.deliveries)

    # --- state and evidence ---------------------------------------------------------------

    def now_ms(self) -> int:
        """The room's time in epoch ms."""
        return self.clock.now_ms()

    def registration_lock(self, room_id: str) -> trio.Lock:
        """The lock that serialises registrations in ``room_id`` (hold it to make them busy)."""
        return self._locks.setdefault(room_id, trio.Lock())

    def session(self, session_id: str) -> SessionRow | None:
        """Return the stored row of a session, if any."""
        return self.store.get_session(session_id)

    def statistics(self) -> RoomStatistics:
        """Return a snapshot of the open streams and polls."""
        return self._counters.snapshot()

    def process_statistics(self, room_id: str, owner_token: str | None) -> Reply:
        """``GET /rooms/{room}/process-statistics`` (ours): one room's stream counters.

        Read-only, for the room's admins (the bearer alone is looked at, an
        owner's or a person's): 404 for an unknown room, 401 without a known
        bearer, 403 for an account that neither created the room nor was
        granted its admin.

        Returns:
            200 with ``room_id`` and the room's stream counters (``held``,
            ``exits_announced``, ``exits_recorded``, ``exits_matched``,
            ``exits_over_socket``): streams held now and the exits announced,
            recorded, matched to the open connection and sent over the socket
            since the room started.
        """
        return self._counters.process_statistics(room_id, owner_token)

    def delivery_connected(self, session_id: str, now: int | None = None) -> bool:
        """True while a poll of the session is open, or closed less than 12 s ago."""
        now = self.now_ms() if now is None else now
        return self.work.messages.deliveries.connected(session_id, now)

    def reachable(self, session_id: str, now: int) -> bool:
        """Whether the session can be reached now: a held process stream, or delivery."""
        return self._streams.holds(session_id) or self.delivery_connected(session_id, now)

    def evidence(self, row: SessionRow, now: int | None = None) -> SessionEvidence:
        """Return the presence evidence of a session row (§7.1)."""
        return evidence_of(row, delivery_connected=self.delivery_connected(row.session_id, now))

    # --- accounts (R1, R2) ----------------------------------------------------------------

    def me(self, owner_token: str | None) -> Reply:
        """``GET /agents/me`` (R1): the account of the bearer token, and its agents."""
        return self._accounts.me(owner_token)

    def register_agent_identity(self, owner_token: str | None, body: Mapping[str, Any]) -> Reply:
        """``POST /agents`` (R2): the canonical key is ``<login>/<name>``."""
        return self._accounts.register_identity(owner_token, body)

    # --- registration (R3) ----------------------------------------------------------------

    async def register(
        self, owner_token: str | None, room_id: str, body: Mapping[str, Any]
    ) -> Reply:
        """``POST /rooms/{room}/agent-sessions`` (R3): create or resume a session.

        Args:
            owner_token: the bearer token.
            room_id: the room (created on first use).
            body: the parsed JSON body (§5.3).

        Returns:
            201 with the session JSON, ``session_token``, ``worker_bearer``
            (always null here) and ``adopted_task_leases`` when non-empty; or
            the refusals of §2.1.

        Cancellation:
            A checkpoint. Cancelled during the one name wait or while waiting
            for the registration lock, nothing has been written.
        """
        try:
            account = self._accounts.owner(owner_token)
            if account is None:
                refuse(401, REGISTRATION_AUTH_TEXT)
            if not valid_room_id(room_id):
                refuse(404, ROOM_NOT_FOUND_TEXT)
            req = _registration.parse_registration(account, body)
            now = self.now_ms()
            wait = _registration.name_wait(
                req,
                account,
                self.store.room_sessions(room_id),
                now=now,
                holder_of=lambda s: _registration.holder(s, self.evidence(s, now)),
            )
            if wait is not None:
                logger.info("registration in %s waits %d ms for a name to come free", room_id, wait)
                await trio.sleep(wait / 1000)
            lock = self.registration_lock(room_id)
            acquired = False
            with trio.move_on_after(self.config.registration_lock_timeout):
                await lock.acquire()
                acquired = True
            if not acquired:
                logger.warning("registration in %s found the room busy", room_id)
                return busy()
            try:
                with self.store.atomic():  # the hand-over and the new row, or nothing
                    reply, ended = self._register_locked(account, room_id, req)
            finally:
                lock.release()
            for row in ended:
                self._session_ended(row)
            return reply
        except Refusal as refusal:
            await trio.lowlevel.checkpoint()
            return refusal.reply

    def _register_locked(
        self, account: Account, room_id: str, req: _registration.RegistrationRequest
    ) -> tuple[Reply, list[SessionRow]]:
        """Decide and write one registration; return its reply and the rows it ended."""
        now = self.now_ms()
        if self.store.get_room(room_id) is None:  # its creator is its first admin
            self.store.put_room(
                RoomRow(room_id=room_id, created_at=now, created_by=account.account_id)
            )
        plan = _registration.plan_registration(
            req,
            account=account,
            room_id=room_id,
            sessions=self.store.room_sessions(room_id),
            proof=None if req.replace_id is None else self.store.get_session(req.replace_id),
            now=now,
            holder_of=lambda s: _registration.holder(s, self.evidence(s, now)),
            max_offset=self.config.max_name_offset,
        )
        if plan.retry is not None:
            assert req.connection_token is not None
            return _registration.created_reply(plan.retry, req.connection_token, []), []
        ended = [
            *(self._end_row(r, now, END_REASON_NAME_HANDOVER) for r in plan.takeover),
            *(self._end_row(r, now, END_REASON_REPLACED) for r in plan.replace),
        ]
        token = req.connection_token or secrets.token_urlsafe(32)
        row = _registration.registered_row(
            req, plan, account=account, room_id=room_id, token_hash=hash_token(token), now=now
        )
        self.store.put_session(row)
        observer = req.process_host_id
        adopted = self.work.tasks.adopt(
            row,
            plan.rotate,
            exited=lambda s: exited(self.evidence(s, now), now=now, observer_host_id=observer),
        )
        if plan.rotate is not None:
            # The rotated row's old streams belong to the old token: end them.
            self._streams.close(row.session_id, "replaced")
        rotated = " (rotated)" if plan.rotate is not None else ""
        logger.info(
            "registered session %s in %s as %r%s", row.session_id, room_id, plan.name, rotated
        )
        return _registration.created_reply(row, token, adopted), ended

    # --- ending sessions -------------------------------------------------------------------

    def _end_row(self, row: SessionRow, now: int, reason: str | None) -> SessionRow:
        ended = attrs.evolve(row, ended_at=now, updated_at=now, end_reason=reason)
        self.store.put_session(ended)
        return ended

    def _session_ended(self, row: SessionRow) -> None:
        """After an end is stored: tell held streams and wake the session's polls."""
        self._streams.close(row.session_id, "ended")
        self.work.messages.wake(row.room_id)

    def end_session(self, session_id: str, *, reason: str | None = None) -> SessionRow | None:
        """End a live session and tell its held process streams (``event: ended``).

        Args:
            session_id: the session.
            reason: stored as ``end_reason`` (``"room_admin"`` passes no leases on).

        Returns:
            The ended row, or ``None`` if there is no such live session.
        """
        row = self.store.get_session(session_id)
        if row is None or not row.live:
            return None
        ended = self._end_row(row, self.now_ms(), reason)
        self._session_ended(ended)
        logger.info("session %s ended (%s)", session_id, reason or "no reason")
        return ended

    # --- process stream (R4), exit (R5), disconnect (R6) ------------------------------------

    def open_process_stream(
        self, room_id: str, session_id: str, creds: Credentials
    ) -> ProcessStream | Reply:
        """Authenticate and open a process connection (§2.2 steps 1-4).

        Returns:
            The stream handle (the connection is recorded: ``process_seen_at``,
            a new ``process_connection_id``, no ``process_disconnected_at``), or
            the refusal to send.
        """
        return self._streams.open(room_id, session_id, creds)

    def process_streams(self, session_id: str) -> list[ProcessStream]:
        """Return the live process streams held for a session."""
        return self._streams.of(session_id)

    def close_all_process_streams(self) -> None:
        """Close every held process stream silently (server shutdown: records nothing)."""
        self._streams.close_all("shutdown")

    async def run_process_stream(
        self,
        stream: ProcessStream,
        write: Callable[[bytes], Awaitable[None]],
        form: StreamForm = SSE_FORM,
    ) -> None:
        """Write a process stream until it closes (§3; the WebSocket form, §3.1).

        ``: connected``, ``event: open``, then ``: heartbeat`` every heartbeat
        interval, a refresh every refresh interval, and ``event: ended`` when
        the session ends. Returns when the stream is closed: the caller ends
        the HTTP body. The caller calls ``stream.close("dropped")`` when the
        client goes away.

        Args:
            stream: from :meth:`open_process_stream`.
            write: sends one chunk of the body (one text frame on a WebSocket).
            form: the transport's framing (the SSE body by default).

        Cancellation:
            A checkpoint. Cancelled (server shutdown), the stream is forgotten
            and nothing is recorded, unless it had already been marked dropped.
        """
        await self._streams.serve(stream, write, form)

    def exit_over_socket(self, stream: ProcessStream, body: Mapping[str, Any]) -> bool:
        """An exit announced over a held WebSocket (§3.1): R5's rule; whether it was recorded."""
        return self._streams.record_socket_exit(stream, body)

    def exit_process(
        self, room_id: str, session_id: str, creds: Credentials, body: Mapping[str, Any]
    ) -> Reply:
        """``POST …/process/exit`` (R5): record an announced exit under §2.2's rules."""
        return self._streams.record_exit(room_id, session_id, creds, body)

    def disconnect(self, room_id: str, session_id: str, creds: Credentials) -> Reply:
        """``POST …/disconnect`` (R6): the worker ends its own session."""
        try:
            self._accounts.require_room(room_id)
            if not creds.session_id:
                refuse(400, SESSION_ID_REQUIRED_TEXT)
            self._accounts.authenticate(room_id, creds)
            if self.store.get_session(session_id) is None:
                refuse(404, SESSION_NOT_FOUND_TEXT)
            if creds.session_id != session_id:
                refuse(403, OWN_DISCONNECT_TEXT)
        except Refusal as refusal:
            return refusal.reply
        ended = self.end_session(session_id, reason=END_REASON_DISCONNECT)
        row = ended if ended is not None else self.store.get_session(session_id)
        assert row is not None
        body = {"room_id": room_id, "agent_session": projection(row), "delivery_session": None}
        return Reply(status=200, body=body)

    # --- admins -------------------------------------------------------------------------------

    def grant_admin(self, room_id: str, login: str) -> None:
        """Make ``login``'s account an admin of ``room_id`` (the room is made if new).

        Admin rights come from creating the room (the first registration) or
        from this grant, never from owning a session in it.
        """
        self._accounts.grant_admin(room_id, login, self.now_ms())

    def active_work_task_ids(self, session_id: str) -> list[str]:
        """Task ids of the active work leases a session holds, oldest lease first."""
        return self.work.tasks.work_task_ids(session_id)

    # --- liveness notices (§7.5) ------------------------------------------------------------

    def sweep_liveness(self) -> list[MessageRow]:
        """Post the offline and recovery notices due now (§7.5, see ``_liveness``).

        Returns:
            The notices posted by this sweep.
        """
        return self._liveness.sweep()

    async def run(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> NoReturn:
        """Run the room's background work: a liveness sweep every
        ``config.liveness_sweep_interval`` seconds and the wake rules' timers
        (:meth:`~._wake._wakes.WakeBoard.run`), forever. :func:`serve_room`
        starts it before it serves; an in-process embedder starts it with
        ``nursery.start``.

        First, before it reports started, the room closes every process
        connection its rows say is open but it does not hold (a graceful stop
        closes its streams without recording them; a crash cannot record
        them): each becomes a drop at this start and the gone rules run from
        there (``StreamRegistry.close_unheld``), so a downtime never counts
        against a process that reconnects. Logged at INFO, not as a warning:
        it follows every restart.

        Cancellation:
            Runs until cancelled; a sweep is synchronous, so cancellation
            never leaves one half done.
        """
        closed = self._streams.close_unheld()
        if closed:
            logger.info(
                "room start: %d process connection(s) open when the room stopped are counted"
                " as dropped now; their processes reconnect, and names pass only from those"
                " that do not",
                closed,
            )
        async with trio.open_nursery() as nursery:
            await nursery.start(self.work.wakes.run)
            task_status.started()
            await self._liveness.run(self.config.liveness_sweep_interval)
