"""The reference room: every rule of the room API, independent of HTTP.

Routes (``_app.py``) only parse requests and render :class:`Reply` values; the
rules live here, in :class:`Room`, so the HTTP app, ``testing.FakeRoom`` and the
demo all run the same code.

Consistency. The room runs on one trio thread and its store calls are
synchronous, so a read-check-write sequence with no ``await`` in it is atomic:
that is how opening a process connection (PROTOCOL.md §2.2 step 4), refreshing
it, recording a drop or an exit, and a whole registration are each one
"transaction". A registration may wait once (below), so registrations are also
serialised per room by a ``trio.Lock`` taken with a 5 s timeout (503 busy when
it cannot be had, §10).

Registration (R3, §5.3, §7.3), in order:

1. Owner token → account (401), the body checks (400 ``actor_key``,
   identity bounds, the durable credential, the replacement pair; 403 for a
   foreign ``actor_key``).
2. The one wait: if the name asked for is held only by same-owner holders that
   will be gone within 15 s (``name_comes_free_at``), sleep once until that
   moment + 500 ms, outside the lock.
3. Under the lock, re-read the room and decide:
   * lost-response retry: the ``connection_token`` of an existing row of this
     instance returns that row unchanged (409 if it has ended);
   * replacement proof: must name a row of the same room, agent key and
     instance, with its token (else 409 ``agent_instance_already_active``);
     a durable worker must prove its row; a non-durable one may skip the proof
     once its predecessor has been unseen 100 s;
   * the name: a durable worker keeps its name (or takes back the one it first
     asked for once free); otherwise the base name (or a codename for a
     generic one) if not held, else ``codename(agent_key + ":" + k)``. Same-
     owner holders that are gone do not hold the base name: live ones are ended
     (the takeover) and their streams are told ``event: ended``;
   * leases held by ended sessions move to the new session (§7.3 adoption).

Process streams (R4, §2.2, §3): :meth:`Room.open_process_stream` authenticates
and opens the connection atomically; :meth:`Room.run_process_stream` writes
``: connected``, ``event: open``, a heartbeat every 15 s, refreshes every 30 s,
and ends with ``event: ended`` when the session ends, silently when replaced or
when the server shuts down. A stream that ends because the client went away
(mode ``"dropped"``) records ``process_disconnected_at``; no other close does.

Delivery (long polls, R7): an open poll, and the 12 s after the last one
closed, count as an open delivery connection for the presence rules.

Liveness notices (§7.5): :meth:`Room.sweep_liveness` posts the offline and
recovery notices for workers that hold an active work lease.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import re
import secrets
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final, Literal, NoReturn, final

import attrs
import trio

from .._protocol import (
    ACTOR_KEY_NOT_OWNED_TEXT,
    ACTOR_KEY_REQUIRED_TEXT,
    AGENT_PROCESS_EXITED,
    AGENT_SESSION_ENDED_ADVICE,
    AGENT_SESSION_ENDED_CODE,
    ALREADY_ACTIVE_CODE,
    ALREADY_ACTIVE_TEXT,
    BAD_CURSOR_TEXT,
    BEARER_MISMATCH_TEXT,
    BUSY_TEXT,
    DEFAULT_MESSAGE_PAGE,
    DEFAULT_POLL_TIMEOUT,
    DURABLE_CREDENTIAL_TEXT,
    IDENTITY_TOO_LONG_CODE,
    IDENTITY_TOO_LONG_TEXT,
    INVALID_CREDENTIALS_TEXT,
    MAX_MESSAGE_CHARS,
    MAX_MESSAGE_PAGE,
    NAMES_EXHAUSTED_CODE,
    NAMES_EXHAUSTED_TEXT,
    OFFLINE_ANNOUNCE_MAX_AGE,
    OWN_DISCONNECT_TEXT,
    OWN_EXIT_TEXT,
    OWN_PROCESS_TEXT,
    REGISTRATION_AUTH_TEXT,
    REPLACEMENT_PAIR_TEXT,
    REPLACEMENT_PROOF_CODE,
    SAME_INSTANCE_RECLAIM_STALE_AFTER,
    SESSION_ENDED_410_TEXT,
    SESSION_ID_REQUIRED_TEXT,
    SESSION_NOT_FOUND_TEXT,
    SESSION_REQUIRED_TEXT,
    TEXT_REQUIRED_TEXT,
    TEXT_TOO_LONG_TEXT,
    WORKER_REQUIRED_TEXT,
    format_iso,
)
from .._util import Notifier
from ..workers._names import (
    actor_label,
    allocation_base,
    allocation_candidates,
    is_durable_worker_id,
    name_key,
)
from ._clock import RoomClock, SystemClock
from ._config import RoomConfig
from ._presence import (
    AGENT_DELIVERY_LINGERS_MS,
    Holder,
    Registrant,
    SessionEvidence,
    exited,
    is_releasable,
    name_comes_free_at,
    name_wait_ms,
)
from ._store import (
    Account,
    LeaseRow,
    MessageRow,
    RoomRow,
    RoomStore,
    SessionRow,
    TaskRow,
)

__all__ = [
    "CloseMode",
    "Credentials",
    "ProcessStream",
    "Reply",
    "Room",
    "RoomStatistics",
    "hash_token",
]

logger = logging.getLogger("letagents_trio.room_server")

CloseMode = Literal["ended", "replaced", "shutdown", "dropped"]

# The exact texts and codes of PROTOCOL.md §2.1 are imported from _protocol.py
# (one copy for the room and its clients).
# --- texts of our own (upstream's were not read, PROTOCOL.md §9.7) ---------------
ROOM_NOT_FOUND_TEXT: Final = "Room not found"
OWNER_AUTH_TEXT: Final = "Authentication required."
AGENT_NAME_REQUIRED_TEXT: Final = "name is required"
TITLE_REQUIRED_TEXT: Final = "title is required"
TASK_NOT_FOUND_TEXT: Final = "Task not found"
LEASE_NOT_FOUND_TEXT: Final = "Lease not found"
BAD_TIMEOUT_TEXT: Final = "timeout must be a number of milliseconds"
BAD_LEASE_KIND_TEXT: Final = "kind must be a non-empty string"

# --- bounds and sizes ----------------------------------------------------------
# Identity fields longer than these cannot be routed in mentions; upstream's
# exact bounds were not read, so these are ours (documented in docs/room-server.md).
MAX_ACTOR_KEY_CHARS: Final = 256
MAX_INSTANCE_ID_CHARS: Final = 128
MAX_DISPLAY_NAME_CHARS: Final = 128
# Room and session ids beyond this are refused before any lookup.
MAX_ROUTING_ID_CHARS: Final = 256
# Poll timeout when the request names none, in the room's milliseconds.
DEFAULT_POLL_TIMEOUT_MS: Final = round(DEFAULT_POLL_TIMEOUT * 1000)
# A connection credential is base64url; the client sends 43 characters.
_TOKEN_RE: Final = re.compile(r"[A-Za-z0-9_-]{32,256}")
# The _protocol.py values the room compares with its millisecond clock.
SAME_INSTANCE_RECLAIM_STALE_AFTER_MS: Final = round(SAME_INSTANCE_RECLAIM_STALE_AFTER * 1000)
OFFLINE_ANNOUNCE_MAX_AGE_MS: Final = round(OFFLINE_ANNOUNCE_MAX_AGE * 1000)
# How the session was ended, stored in end_reason.
END_REASON_DISCONNECT: Final = "disconnect"
END_REASON_REPLACED: Final = "replaced"
END_REASON_NAME_HANDOVER: Final = "name_handover"
END_REASON_ROOM_ADMIN: Final = "room_admin"
LIVENESS_SENDER: Final = "letagents"
LIVENESS_SOURCE: Final = "agent_liveness"


def hash_token(token: str) -> str:
    """Return the SHA-256 hex of a token: the only form in which tokens are stored."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def _token_matches(row: SessionRow, token: str) -> bool:
    return hmac.compare_digest(row.token_hash, hash_token(token))


def iso_ms(ms: int | None) -> str | None:
    """Render optional epoch ms as JavaScript's ``toISOString`` does (``None`` stays)."""
    return None if ms is None else format_iso(ms / 1000)


def _account_id(login: str) -> str:
    # Derived from the login so a restart over the same SQLite file agrees.
    return "acct_" + hashlib.sha256(login.encode("utf-8")).hexdigest()[:24]


@final
@attrs.frozen(kw_only=True)
class Reply:
    """A route's answer: status, JSON body, extra headers."""

    status: int
    body: Mapping[str, Any]
    headers: Mapping[str, str] = attrs.field(factory=dict)


@final
class _Refusal(Exception):  # internal control flow: never escapes Room
    def __init__(self, reply: Reply) -> None:
        super().__init__(reply.status)
        self.reply = reply


def _refuse(status: int, error: str, **extra: Any) -> NoReturn:
    raise _Refusal(Reply(status=status, body={"error": error, **extra}))


def _busy() -> Reply:
    return Reply(status=503, body={"error": BUSY_TEXT}, headers={"Retry-After": "1"})


@final
@attrs.frozen(kw_only=True)
class Credentials:
    """What a request carried to say who it is. Tokens are never shown.

    Attributes:
        owner_token: the bearer token, if any.
        session_id: the session id from the header or body, if any.
        session_token: the session token from the header or body, if any.
    """

    owner_token: str | None = attrs.field(default=None, repr=False)
    session_id: str | None = None
    session_token: str | None = attrs.field(default=None, repr=False)


@final
@attrs.frozen(kw_only=True)
class RoomStatistics:
    """A snapshot of the room's in-memory state."""

    open_process_streams: int
    open_polls: int


@final
@attrs.define(eq=False)
class ProcessStream:
    """One held process connection (R4), as the room sees it.

    Attributes:
        session_id: the session the stream belongs to.
        room_id: its room.
        connection_id: the lowercase UUID v4 sent in ``event: open``.
    """

    session_id: str
    room_id: str
    connection_id: str
    _mode: CloseMode | None = None
    _close_requested: trio.Event = attrs.field(factory=trio.Event)

    @property
    def close_mode(self) -> CloseMode | None:
        """How the stream was (or is being) closed; ``None`` while open."""
        return self._mode

    def close(self, mode: CloseMode) -> None:
        """Ask the stream to close; the first mode asked for wins.

        ``"ended"`` writes ``event: ended`` first; ``"replaced"`` and
        ``"shutdown"`` close silently and record nothing; ``"dropped"`` closes as
        if the client vanished and records ``process_disconnected_at``.
        """
        if self._mode is None:
            self._mode = mode
        self._close_requested.set()


@attrs.define(eq=False)
class _Delivery:
    open_polls: int = 0
    closed_at: int | None = None


@attrs.frozen(kw_only=True)
class _RegistrationRequest:
    actor_key: str
    instance_id: str | None
    display_name: str | None
    requested_base: str | None
    session_kind: str
    runtime: str | None
    ide_label: str | None
    repo_branch: str | None
    host_id: str | None
    host_kind: str | None
    host_label: str | None
    liveness_capability: str | None
    tool_bridge_id: str | None
    process_host_id: str | None
    connection_token: str | None = attrs.field(repr=False)
    replace_id: str | None
    replace_token: str | None = attrs.field(repr=False)

    @property
    def durable(self) -> bool:
        return is_durable_worker_id(self.instance_id)


def _opt_str(body: Mapping[str, Any], key: str) -> str | None:
    value = body.get(key)
    return value if isinstance(value, str) and value != "" else None


def _valid_room_id(room_id: str) -> bool:
    return (
        0 < len(room_id) <= MAX_ROUTING_ID_CHARS
        and room_id.isprintable()
        and room_id.strip() == room_id
    )


@final
@attrs.define(eq=False)
class Room:
    """The reference room service.

    Args:
        store: where rows live (:class:`MemoryStore` or :class:`SQLiteStore`).
        clock: the clock every time-based rule reads (epoch ms).
        owner_tokens: owner bearer token → account login (dev auth).
        config: intervals and limits; upstream's defaults unless given (the
            room never reads the environment: its entry point does).
    """

    store: RoomStore
    clock: RoomClock = attrs.field(factory=SystemClock)
    owner_tokens: Mapping[str, str] = attrs.field(factory=dict, repr=False)
    config: RoomConfig = attrs.field(factory=RoomConfig)
    _streams: dict[str, list[ProcessStream]] = attrs.field(init=False, factory=dict)
    _delivery: dict[str, _Delivery] = attrs.field(init=False, factory=dict)
    _room_changed: dict[str, Notifier] = attrs.field(init=False, factory=dict)
    _locks: dict[str, trio.Lock] = attrs.field(init=False, factory=dict)
    _agents: dict[str, dict[str, dict[str, Any]]] = attrs.field(init=False, factory=dict)

    def __attrs_post_init__(self) -> None:
        for login in set(self.owner_tokens.values()):
            if self.store.get_account(login) is None:
                self.store.put_account(Account(account_id=_account_id(login), login=login))

    # --- small helpers ------------------------------------------------------

    def now_ms(self) -> int:
        """The room's time in epoch ms."""
        return self.clock.now_ms()

    def _owner(self, owner_token: str | None) -> Account | None:
        if not owner_token:
            return None
        for token, login in self.owner_tokens.items():
            if hmac.compare_digest(token.encode("utf-8"), owner_token.encode("utf-8")):
                return self.store.get_account(login)
        return None

    def registration_lock(self, room_id: str) -> trio.Lock:
        """The lock that serialises registrations in ``room_id`` (fault injection: hold it)."""
        return self._locks.setdefault(room_id, trio.Lock())

    def session(self, session_id: str) -> SessionRow | None:
        """Return the stored row of a session, if any."""
        return self.store.get_session(session_id)

    def statistics(self) -> RoomStatistics:
        """Return a snapshot of the open streams and polls."""
        return RoomStatistics(
            open_process_streams=sum(len(s) for s in self._streams.values()),
            open_polls=sum(d.open_polls for d in self._delivery.values()),
        )

    def delivery_connected(self, session_id: str, now: int | None = None) -> bool:
        """True while a poll of the session is open, or closed less than 12 s ago."""
        delivery = self._delivery.get(session_id)
        if delivery is None:
            return False
        if delivery.open_polls > 0:
            return True
        now = self.now_ms() if now is None else now
        return delivery.closed_at is not None and now - delivery.closed_at < (
            AGENT_DELIVERY_LINGERS_MS
        )

    def evidence(self, row: SessionRow, now: int | None = None) -> SessionEvidence:
        """Return the presence evidence of a session row (§7.1)."""
        return SessionEvidence(
            process_seen_at=row.process_seen_at,
            process_connection_id=row.process_connection_id,
            process_disconnected_at=row.process_disconnected_at,
            process_host_id=row.process_host_id,
            agent_heard_at=row.agent_heard_at,
            last_seen_at=row.last_seen_at,
            ended_at=row.ended_at,
            delivery_connected=self.delivery_connected(row.session_id, now),
            agent_instance_id=row.agent_instance_id,
        )

    def _holder(self, row: SessionRow, now: int) -> Holder:
        return Holder(
            evidence=self.evidence(row, now),
            name=row.display_name,
            owner_id=row.owner_account_id or None,
            supervised=row.supervisor_grant_id is not None,
            agent_key=row.agent_key,
        )

    def _wake_room(self, room_id: str) -> None:
        changed = self._room_changed.get(room_id)
        if changed is not None:
            changed.notify()

    @staticmethod
    def projection(row: SessionRow) -> dict[str, Any]:
        """The session JSON the room returns (no token, no bearer)."""
        return {
            "session_id": row.session_id,
            "room_id": row.room_id,
            "session_kind": row.session_kind,
            "runtime": row.runtime,
            "host_id": row.host_id,
            "host_kind": row.host_kind,
            "host_label": row.host_label,
            "liveness_capability": row.liveness_capability,
            "tool_bridge_id": row.tool_bridge_id,
            "actor_label": row.actor_label,
            "agent_key": row.agent_key,
            "agent_instance_id": row.agent_instance_id,
            "display_name": row.display_name,
            "assigned_base_display_name": row.assigned_base_display_name,
            "owner_account_id": row.owner_account_id,
            "supervisor_grant_id": row.supervisor_grant_id,
            "owner_label": row.owner_label,
            "ide_label": row.ide_label,
            "repo_branch": row.repo_branch,
            "created_at": iso_ms(row.created_at),
            "updated_at": iso_ms(row.updated_at),
            "last_seen_at": iso_ms(row.last_seen_at),
            "ended_at": iso_ms(row.ended_at),
            "end_reason": row.end_reason,
        }

    # --- accounts (R1, R2) ---------------------------------------------------------

    def me(self, owner_token: str | None) -> Reply:
        """``GET /agents/me`` (R1): the account of the bearer token, and its agents."""
        account = self._owner(owner_token)
        if account is None:
            return Reply(status=401, body={"error": OWNER_AUTH_TEXT})
        agents = list(self._agents.get(account.login, {}).values())
        return Reply(
            status=200,
            body={
                "account": {
                    "id": account.account_id,
                    "login": account.login,
                    "display_name": account.login,
                },
                "agents": agents,
            },
        )

    def register_agent_identity(self, owner_token: str | None, body: Mapping[str, Any]) -> Reply:
        """``POST /agents`` (R2): the canonical key is ``<login>/<name>``."""
        account = self._owner(owner_token)
        if account is None:
            return Reply(status=401, body={"error": OWNER_AUTH_TEXT})
        name = body.get("name")
        if not isinstance(name, str) or not name.strip():
            return Reply(status=400, body={"error": AGENT_NAME_REQUIRED_TEXT})
        name = name.strip()
        if len(account.login) + 1 + len(name) > MAX_ACTOR_KEY_CHARS or "/" in name:
            return Reply(
                status=400,
                body={"error": IDENTITY_TOO_LONG_TEXT, "code": IDENTITY_TOO_LONG_CODE},
            )
        agent = {
            "canonical_key": f"{account.login}/{name}",
            "name": name,
            "display_name": _opt_str(body, "display_name"),
            "owner_label": _opt_str(body, "owner_label") or account.login,
            "owner_account_id": account.account_id,
        }
        self._agents.setdefault(account.login, {})[name] = agent
        return Reply(status=200, body=agent)

    # --- registration (R3) -----------------------------------------------------------

    def _parse_registration(
        self, account: Account, body: Mapping[str, Any]
    ) -> _RegistrationRequest:
        actor_key = body.get("actor_key")
        if not isinstance(actor_key, str) or not actor_key.strip():
            _refuse(400, ACTOR_KEY_REQUIRED_TEXT)
        instance_id = _opt_str(body, "agent_instance_id")
        display_name = body.get("display_name")
        requested = body.get("requested_base_display_name")
        too_long = (
            len(actor_key) > MAX_ACTOR_KEY_CHARS
            or (instance_id is not None and len(instance_id) > MAX_INSTANCE_ID_CHARS)
            or (isinstance(display_name, str) and len(display_name) > MAX_DISPLAY_NAME_CHARS)
            or (isinstance(requested, str) and len(requested) > MAX_DISPLAY_NAME_CHARS)
        )
        if too_long:
            _refuse(400, IDENTITY_TOO_LONG_TEXT, code=IDENTITY_TOO_LONG_CODE)
        if not actor_key.startswith(account.login + "/") or actor_key == account.login + "/":
            _refuse(403, ACTOR_KEY_NOT_OWNED_TEXT)
        connection_token = body.get("connection_token")
        token = connection_token if isinstance(connection_token, str) else None
        if token is not None and _TOKEN_RE.fullmatch(token) is None:
            token = None
        if is_durable_worker_id(instance_id) and token is None:
            _refuse(400, DURABLE_CREDENTIAL_TEXT)
        replace_id = _opt_str(body, "replace_agent_session_id")
        replace_token = _opt_str(body, "replace_agent_session_token")
        if (replace_id is None) != (replace_token is None):
            _refuse(400, REPLACEMENT_PAIR_TEXT, code=REPLACEMENT_PROOF_CODE)
        liveness = body.get("registration_liveness")
        live: Mapping[str, Any] = liveness if isinstance(liveness, Mapping) else {}
        kind = _opt_str(body, "session_kind") or "worker"
        return _RegistrationRequest(
            actor_key=actor_key,
            instance_id=instance_id,
            display_name=display_name if isinstance(display_name, str) else None,
            requested_base=requested if isinstance(requested, str) else None,
            session_kind=kind if kind in ("worker", "controller") else "worker",
            runtime=_opt_str(body, "runtime"),
            ide_label=_opt_str(body, "ide_label"),
            repo_branch=_opt_str(body, "repo_branch"),
            host_id=_opt_str(live, "host_id"),
            host_kind=_opt_str(live, "host_kind"),
            host_label=_opt_str(live, "host_label"),
            liveness_capability=_opt_str(live, "liveness_capability"),
            tool_bridge_id=_opt_str(live, "tool_bridge_id"),
            process_host_id=_opt_str(body, "process_host_id"),
            connection_token=token,
            replace_id=replace_id,
            replace_token=replace_token,
        )

    def _registrant(self, account: Account, req: _RegistrationRequest) -> Registrant:
        return Registrant(
            owner_id=account.account_id,
            agent_key=req.actor_key,
            instance_id=req.instance_id,
            process_host_id=req.process_host_id,
        )

    def _holders(self, sessions: list[SessionRow]) -> list[SessionRow]:
        # §7.3: every live worker session, plus durable workers even when ended.
        return [
            s
            for s in sessions
            if s.session_kind == "worker" and (s.live or is_durable_worker_id(s.agent_instance_id))
        ]

    def _wanted_name(self, req: _RegistrationRequest, sessions: list[SessionRow]) -> str:
        """The name whose holders the one wait is about."""
        if req.durable:
            for s in sessions:
                if s.agent_key == req.actor_key and s.agent_instance_id == req.instance_id:
                    return s.assigned_base_display_name or s.display_name
        return allocation_base(
            req.display_name if req.display_name is not None else req.requested_base,
            req.ide_label,
            req.actor_key,
        )

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
            account = self._owner(owner_token)
            if account is None:
                _refuse(401, REGISTRATION_AUTH_TEXT)
            if not _valid_room_id(room_id):
                _refuse(404, ROOM_NOT_FOUND_TEXT)
            req = self._parse_registration(account, body)
            now = self.now_ms()
            sessions = self.store.room_sessions(room_id)
            at = name_comes_free_at(
                self._wanted_name(req, sessions),
                [self._holder(s, now) for s in self._holders(sessions)],
                registrant=self._registrant(account, req),
                now=now,
            )
            if at is not None:
                wait = name_wait_ms(at, now=now)
                logger.info("registration in %s waits %d ms for a name to come free", room_id, wait)
                await trio.sleep(wait / 1000)
            lock = self.registration_lock(room_id)
            acquired = False
            with trio.move_on_after(self.config.registration_lock_timeout):
                await lock.acquire()
                acquired = True
            if not acquired:
                logger.warning("registration in %s found the room busy", room_id)
                return _busy()
            try:
                reply, ended = self._register_locked(account, room_id, req)
            finally:
                lock.release()
            for row in ended:
                self._session_ended(row)
            return reply
        except _Refusal as refusal:
            await trio.lowlevel.checkpoint()
            return refusal.reply

    def _register_locked(
        self, account: Account, room_id: str, req: _RegistrationRequest
    ) -> tuple[Reply, list[SessionRow]]:
        now = self.now_ms()
        if self.store.get_room(room_id) is None:
            self.store.put_room(RoomRow(room_id=room_id, created_at=now))
        sessions = self.store.room_sessions(room_id)
        own = sorted(
            (
                s
                for s in sessions
                if req.instance_id is not None
                and s.agent_key == req.actor_key
                and s.agent_instance_id == req.instance_id
            ),
            key=lambda s: (s.created_at, s.session_id),
        )
        # A retry of a registration whose response was lost.
        if req.connection_token is not None:
            for row in own:
                if _token_matches(row, req.connection_token):
                    if not row.live:
                        _refuse(
                            409,
                            ALREADY_ACTIVE_TEXT,
                            code=ALREADY_ACTIVE_CODE,
                            active_session_id=row.session_id,
                        )
                    return self._created(row, req.connection_token, []), []
        predecessor = self._predecessor(account, room_id, req, own)
        to_end: list[SessionRow] = []
        rotate: SessionRow | None = None
        if req.durable:
            if own and (predecessor is None or predecessor.session_id != own[0].session_id):
                _refuse(
                    409,
                    ALREADY_ACTIVE_TEXT,
                    code=ALREADY_ACTIVE_CODE,
                    active_session_id=own[0].session_id,
                )
            rotate = own[0] if own else None
        else:
            for row in own:
                if not row.live:
                    continue
                if predecessor is not None and row.session_id == predecessor.session_id:
                    to_end.append(row)
                    continue
                last = row.last_seen_at if row.last_seen_at is not None else row.created_at
                if now - last < SAME_INSTANCE_RECLAIM_STALE_AFTER_MS:
                    _refuse(
                        409,
                        ALREADY_ACTIVE_TEXT,
                        code=ALREADY_ACTIVE_CODE,
                        active_session_id=row.session_id,
                    )
                to_end.append(row)
        own_ids = {row.session_id for row in own}
        others = [s for s in self._holders(sessions) if s.session_id not in own_ids]
        registrant = self._registrant(account, req)
        name, base, takeover = self._choose_name(req, registrant, rotate, others, sessions, now)
        ended_rows: list[SessionRow] = []
        for row in takeover:
            ended_rows.append(self._end_row(row, now, END_REASON_NAME_HANDOVER))
        for row in to_end:
            ended_rows.append(self._end_row(row, now, END_REASON_REPLACED))
        token = req.connection_token or secrets.token_urlsafe(32)
        label = actor_label(name, account.login, req.ide_label)
        common: dict[str, Any] = {
            "token_hash": hash_token(token),
            "session_kind": req.session_kind,
            "runtime": req.runtime,
            "host_id": req.host_id,
            "host_kind": req.host_kind,
            "host_label": req.host_label,
            "liveness_capability": req.liveness_capability,
            "tool_bridge_id": req.tool_bridge_id,
            "actor_label": label,
            "display_name": name,
            "ide_label": req.ide_label,
            "repo_branch": req.repo_branch,
            "updated_at": now,
            "last_seen_at": now,
            "agent_heard_at": now,
            "ended_at": None,
            "end_reason": None,
            "process_seen_at": None,
            "process_connection_id": None,
            "process_disconnected_at": None,
            "process_host_id": req.process_host_id,
        }
        if rotate is not None:
            before = rotate
            row = attrs.evolve(rotate, **common)
        else:
            before = None
            row = SessionRow(
                session_id=str(uuid.uuid4()),
                room_id=room_id,
                agent_key=req.actor_key,
                agent_instance_id=req.instance_id,
                assigned_base_display_name=base,
                owner_account_id=account.account_id,
                owner_label=account.login,
                created_at=now,
                **common,
            )
        self.store.put_session(row)
        adopted = self._adopt_leases(row, before, req, now)
        if rotate is not None:
            # The rotated row's old streams belong to the old token: end them.
            for stream in list(self._streams.get(row.session_id, [])):
                stream.close("replaced")
        logger.info(
            "registered session %s in %s as %r%s",
            row.session_id,
            room_id,
            name,
            " (rotated)" if rotate is not None else "",
        )
        return self._created(row, token, adopted), ended_rows

    def _predecessor(
        self,
        account: Account,
        room_id: str,
        req: _RegistrationRequest,
        own: list[SessionRow],
    ) -> SessionRow | None:
        if req.replace_id is None or req.replace_token is None:
            return None
        row = self.store.get_session(req.replace_id)
        valid = (
            row is not None
            and row.room_id == room_id
            and row.agent_key == req.actor_key
            and row.agent_instance_id == req.instance_id
            and row.owner_account_id == account.account_id
            and _token_matches(row, req.replace_token)
        )
        if not valid or row is None:
            live = [s for s in own if s.live]
            _refuse(
                409,
                ALREADY_ACTIVE_TEXT,
                code=ALREADY_ACTIVE_CODE,
                active_session_id=live[0].session_id if live else None,
            )
        return row

    def _choose_name(
        self,
        req: _RegistrationRequest,
        registrant: Registrant,
        rotate: SessionRow | None,
        others: list[SessionRow],
        sessions: list[SessionRow],
        now: int,
    ) -> tuple[str, str, list[SessionRow]]:
        """Return (name, base name asked for, live holders to end)."""
        by_key: dict[str, list[SessionRow]] = {}
        for s in others:
            by_key.setdefault(name_key(s.display_name), []).append(s)
        releasable_cache: dict[str, bool] = {}

        def releasable(s: SessionRow) -> bool:
            # Evidence is built only for holders of a name actually asked about.
            if s.session_id not in releasable_cache:
                holder = self._holder(s, now)
                releasable_cache[s.session_id] = is_releasable(
                    holder, registrant=registrant, now=now
                )
            return releasable_cache[s.session_id]

        reserved = {
            name_key(s.agent_key.rsplit("/", 1)[-1])
            for s in sessions
            if s.live and s.agent_key and s.agent_key != req.actor_key
        }

        def blocked(
            name: str, *, takeover: bool, live_only: bool = False, seniority: bool = False
        ) -> bool:
            key = name_key(name)
            if key in reserved:
                return True
            for s in by_key.get(key, ()):
                if live_only and not s.live:
                    continue
                if takeover and releasable(s):
                    continue
                if (
                    seniority
                    and rotate is not None
                    and rotate.live
                    and s.live
                    and (s.created_at, s.session_id) > (rotate.created_at, rotate.session_id)
                ):
                    continue  # seniority: the older live session keeps the name
                return True
            return False

        def takeover_of(name: str) -> list[SessionRow]:
            return [s for s in by_key.get(name_key(name), ()) if s.live and releasable(s)]

        if rotate is not None:
            requested = rotate.assigned_base_display_name or rotate.display_name
            current = rotate.display_name
            if name_key(requested) != name_key(current) and not blocked(requested, takeover=True):
                return requested, requested, takeover_of(requested)
            if not blocked(current, takeover=True, live_only=True, seniority=True):
                return current, requested, takeover_of(current)
            base = requested
        else:
            base = allocation_base(
                req.display_name if req.display_name is not None else req.requested_base,
                req.ide_label,
                req.actor_key,
            )
        base_key = name_key(base)
        for candidate in allocation_candidates(
            base, req.actor_key, max_offset=self.config.max_name_offset
        ):
            takeover = name_key(candidate) == base_key
            if not blocked(candidate, takeover=takeover):
                return candidate, base, takeover_of(candidate) if takeover else []
        _refuse(409, NAMES_EXHAUSTED_TEXT, code=NAMES_EXHAUSTED_CODE)

    def _created(self, row: SessionRow, token: str, adopted: list[LeaseRow]) -> Reply:
        body = self.projection(row)
        body["session_token"] = token
        body["worker_bearer"] = None
        if adopted:
            body["adopted_task_leases"] = [
                {"lease_id": lease.lease_id, "task_id": lease.task_id, "kind": lease.kind}
                for lease in adopted
            ]
        return Reply(status=201, body=body)

    def _adopt_leases(
        self,
        row: SessionRow,
        before: SessionRow | None,
        req: _RegistrationRequest,
        now: int,
    ) -> list[LeaseRow]:
        """Move active leases of ended sessions of this owner to ``row`` (§7.3)."""
        adopted: list[LeaseRow] = []
        live_keys = {s.agent_key for s in self.store.room_sessions(row.room_id) if s.live}
        for lease in self.store.room_leases(row.room_id):
            if not lease.active(now):
                continue
            holder = (
                before
                if before is not None and lease.session_id == before.session_id
                else self.store.get_session(lease.session_id)
            )
            if holder is None or holder.live:
                continue
            if (
                holder.end_reason == END_REASON_ROOM_ADMIN
                or holder.supervisor_grant_id is not None
                or holder.owner_account_id != row.owner_account_id
            ):
                continue
            same_identity = holder.agent_key == row.agent_key
            same_instance = holder.agent_instance_id == row.agent_instance_id
            take = same_identity and same_instance
            if not take and exited(
                self.evidence(holder, now), now=now, observer_host_id=req.process_host_id
            ):
                take = same_identity or (
                    lease.kind == "work"
                    and not is_durable_worker_id(holder.agent_instance_id)
                    and name_key(holder.display_name) == name_key(row.display_name)
                    and holder.agent_key not in live_keys
                )
            if not take:
                continue
            moved = attrs.evolve(
                lease,
                session_id=row.session_id,
                epoch=lease.epoch + 1 if lease.kind == "work" else lease.epoch,
            )
            self.store.put_lease(moved)
            adopted.append(moved)
        return adopted

    # --- ending sessions ----------------------------------------------------------------

    def _end_row(self, row: SessionRow, now: int, reason: str | None) -> SessionRow:
        ended = attrs.evolve(row, ended_at=now, updated_at=now, end_reason=reason)
        self.store.put_session(ended)
        return ended

    def _session_ended(self, row: SessionRow) -> None:
        """After an end is stored: tell held streams and wake the session's polls."""
        for stream in list(self._streams.get(row.session_id, [])):
            stream.close("ended")
        self._wake_room(row.room_id)

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

    # --- session authentication -------------------------------------------------------

    def _authenticate(
        self, room_id: str, creds: Credentials, *, worker_only: bool = True
    ) -> SessionRow:
        """Resolve the session credentials of a request, or refuse (§2.2 step 2)."""
        account: Account | None = None
        if creds.owner_token is not None:
            account = self._owner(creds.owner_token)
            if account is None:
                _refuse(401, BEARER_MISMATCH_TEXT)
        if not creds.session_id or not creds.session_token:
            _refuse(403, SESSION_REQUIRED_TEXT)
        row = self.store.get_session(creds.session_id)
        if row is None or row.room_id != room_id or not _token_matches(row, creds.session_token):
            _refuse(401, INVALID_CREDENTIALS_TEXT)
        if account is not None and row.owner_account_id != account.account_id:
            _refuse(401, BEARER_MISMATCH_TEXT)
        if not row.live:
            _refuse(401, AGENT_SESSION_ENDED_ADVICE)
        if worker_only and row.session_kind != "worker":
            _refuse(403, WORKER_REQUIRED_TEXT)
        # §2.2 step 7: a call with session credentials is the agent being heard.
        now = self.now_ms()
        heard = attrs.evolve(row, last_seen_at=now, agent_heard_at=now)
        self.store.put_session(heard)
        return heard

    def _require_room(self, room_id: str) -> None:
        if not _valid_room_id(room_id) or self.store.get_room(room_id) is None:
            _refuse(404, ROOM_NOT_FOUND_TEXT)

    # --- process stream (R4) -------------------------------------------------------------

    def open_process_stream(
        self, room_id: str, session_id: str, creds: Credentials
    ) -> ProcessStream | Reply:
        """Authenticate and open a process connection (§2.2 steps 1-4).

        Returns:
            The stream handle (the connection is recorded: ``process_seen_at``,
            a new ``process_connection_id``, no ``process_disconnected_at``), or
            the refusal to send.
        """
        try:
            self._require_room(room_id)
            try:
                self._authenticate(room_id, creds)
            except _Refusal as refusal:
                if (
                    refusal.reply.status == 401
                    and refusal.reply.body.get("error") == AGENT_SESSION_ENDED_ADVICE
                    and creds.session_id == session_id
                ):
                    _refuse(410, SESSION_ENDED_410_TEXT, code=AGENT_SESSION_ENDED_CODE)
                raise
            if creds.session_id != session_id:
                _refuse(403, OWN_PROCESS_TEXT)
            now = self.now_ms()
            row = self.store.get_session(session_id)
            if (
                row is None
                or not row.live
                or row.session_kind != "worker"
                or row.room_id != room_id
            ):
                _refuse(410, SESSION_ENDED_410_TEXT, code=AGENT_SESSION_ENDED_CODE)
            connection_id = str(uuid.uuid4())
            self.store.put_session(
                attrs.evolve(
                    row,
                    process_seen_at=now,
                    process_connection_id=connection_id,
                    process_disconnected_at=None,
                )
            )
        except _Refusal as refusal:
            return refusal.reply
        stream = ProcessStream(session_id=session_id, room_id=room_id, connection_id=connection_id)
        self._streams.setdefault(session_id, []).append(stream)
        logger.debug("process stream %s opened for %s", connection_id, session_id)
        return stream

    def process_streams(self, session_id: str) -> list[ProcessStream]:
        """Return the live process streams held for a session."""
        return list(self._streams.get(session_id, []))

    def close_all_process_streams(self) -> None:
        """Close every held process stream silently (server shutdown: records nothing)."""
        for streams in list(self._streams.values()):
            for stream in list(streams):
                stream.close("shutdown")

    def _refresh(self, stream: ProcessStream) -> CloseMode | None:
        """The 30 s refresh (§2.2 step 5): keep seen, or say how to close."""
        row = self.store.get_session(stream.session_id)
        if row is None or not row.live:
            return "ended"
        if row.process_connection_id != stream.connection_id:
            return "replaced"
        self.store.put_session(attrs.evolve(row, process_seen_at=self.now_ms()))
        return None

    def _record_drop(self, stream: ProcessStream) -> None:
        """§2.2 step 6: the client went away; record it if still current and live."""
        row = self.store.get_session(stream.session_id)
        if row is None or not row.live or row.process_connection_id != stream.connection_id:
            return
        now = self.now_ms()
        self.store.put_session(attrs.evolve(row, process_seen_at=now, process_disconnected_at=now))

    def _forget_stream(self, stream: ProcessStream) -> None:
        streams = self._streams.get(stream.session_id)
        if streams is not None and stream in streams:
            streams.remove(stream)
            if not streams:
                del self._streams[stream.session_id]

    async def run_process_stream(
        self, stream: ProcessStream, write: Callable[[bytes], Awaitable[None]]
    ) -> None:
        """Write the SSE body of a process stream until it closes (§3).

        ``: connected``, ``event: open``, then ``: heartbeat`` every heartbeat
        interval, a refresh every refresh interval, and ``event: ended`` when
        the session ends. Returns when the stream is closed: the caller ends
        the HTTP body. The caller calls ``stream.close("dropped")`` when the
        client goes away.

        Args:
            stream: from :meth:`open_process_stream`.
            write: sends one chunk of the body.

        Cancellation:
            A checkpoint. Cancelled (server shutdown), the stream is forgotten
            and nothing is recorded, unless it had already been marked dropped.
        """
        cfg = self.config
        try:
            opened = f'event: open\ndata: {{"connection_id":"{stream.connection_id}"}}\n\n'
            await write(b": connected\n\n")
            await write(opened.encode("ascii"))
            start = trio.current_time()
            beats = refreshes = 1
            while not stream._close_requested.is_set():
                next_beat = start + beats * cfg.heartbeat_interval
                next_refresh = start + refreshes * cfg.refresh_interval
                with trio.move_on_at(min(next_beat, next_refresh)):
                    await stream._close_requested.wait()
                if stream._close_requested.is_set():
                    break
                now = trio.current_time()
                if now >= next_refresh:
                    refreshes += 1
                    outcome = self._refresh(stream)
                    if outcome is not None:
                        stream.close(outcome)
                        break
                if now >= next_beat:
                    beats += 1
                    await write(b": heartbeat\n\n")
            if stream.close_mode == "ended":
                await write(b"event: ended\ndata: {}\n\n")
        finally:
            self._forget_stream(stream)
            if stream.close_mode == "dropped":
                self._record_drop(stream)
            logger.debug("process stream %s closed (%s)", stream.connection_id, stream.close_mode)

    # --- exit (R5) and disconnect (R6) ----------------------------------------------------

    def exit_process(
        self, room_id: str, session_id: str, creds: Credentials, body: Mapping[str, Any]
    ) -> Reply:
        """``POST …/process/exit`` (R5): record an announced exit under §2.2's rules."""
        try:
            self._require_room(room_id)
            self._authenticate(room_id, creds)
            if creds.session_id != session_id:
                _refuse(403, OWN_EXIT_TEXT)
        except _Refusal as refusal:
            return refusal.reply
        row = self.store.get_session(session_id)
        connection_id = body.get("process_connection_id")
        given = connection_id if isinstance(connection_id, str) and connection_id else None
        recorded = False
        if (
            row is not None
            and row.live
            and row.session_kind == "worker"
            and row.process_seen_at is not None
            and (
                row.process_connection_id == given
                if given is not None
                else row.process_disconnected_at is not None
            )
        ):
            now = self.now_ms()
            at = max(now, row.agent_heard_at or 0)
            self.store.put_session(
                attrs.evolve(
                    row,
                    process_seen_at=at,
                    process_disconnected_at=at,
                    process_connection_id=AGENT_PROCESS_EXITED,
                )
            )
            recorded = True
        return Reply(status=200, body={"recorded": recorded})

    def disconnect(self, room_id: str, session_id: str, creds: Credentials) -> Reply:
        """``POST …/disconnect`` (R6): the worker ends its own session."""
        try:
            self._require_room(room_id)
            if not creds.session_id:
                _refuse(400, SESSION_ID_REQUIRED_TEXT)
            self._authenticate(room_id, creds)
            if self.store.get_session(session_id) is None:
                _refuse(404, SESSION_NOT_FOUND_TEXT)
            if creds.session_id != session_id:
                _refuse(403, OWN_DISCONNECT_TEXT)
        except _Refusal as refusal:
            return refusal.reply
        ended = self.end_session(session_id, reason=END_REASON_DISCONNECT)
        row = ended if ended is not None else self.store.get_session(session_id)
        assert row is not None
        return Reply(
            status=200,
            body={
                "room_id": room_id,
                "agent_session": self.projection(row),
                "delivery_session": None,
            },
        )

    # --- messages (R7, R8) ---------------------------------------------------------------

    @staticmethod
    def message_json(message: MessageRow) -> dict[str, Any]:
        """The JSON of a message."""
        return {
            "id": str(message.message_id),
            "room_id": message.room_id,
            "sender": message.sender,
            "text": message.text,
            "created_at": iso_ms(message.created_at),
            "agent_session_id": message.agent_session_id,
            "source": message.source,
            "prompt_kind": message.prompt_kind,
        }

    def send_message(self, room_id: str, creds: Credentials, body: Mapping[str, Any]) -> Reply:
        """``POST /rooms/{room}/messages``: post a chat message as the session."""
        try:
            self._require_room(room_id)
            row = self._authenticate(room_id, creds, worker_only=False)
            text = body.get("text")
            if not isinstance(text, str) or not text.strip():
                _refuse(400, TEXT_REQUIRED_TEXT)
            if len(text) > MAX_MESSAGE_CHARS:
                _refuse(413, TEXT_TOO_LONG_TEXT)
        except _Refusal as refusal:
            return refusal.reply
        message = self.store.add_message(
            MessageRow(
                room_id=room_id,
                sender=row.display_name,
                text=text,
                created_at=self.now_ms(),
                agent_session_id=row.session_id,
            )
        )
        self._wake_room(room_id)
        return Reply(status=201, body=self.message_json(message))

    def post_notice(
        self,
        room_id: str,
        text: str,
        *,
        dedupe_id: str,
        source: str = LIVENESS_SOURCE,
        prompt_kind: str = "auto",
    ) -> MessageRow | None:
        """Post a room notice as ``letagents`` once per dedupe id; ``None`` if already posted."""
        if self.store.message_by_dedupe_id(room_id, dedupe_id) is not None:
            return None
        message = self.store.add_message(
            MessageRow(
                room_id=room_id,
                sender=LIVENESS_SENDER,
                text=text,
                created_at=self.now_ms(),
                source=source,
                prompt_kind=prompt_kind,
                dedupe_id=dedupe_id,
            )
        )
        self._wake_room(room_id)
        return message

    @staticmethod
    def _cursor(after: str | None) -> int:
        if after is None or after == "":
            return 0
        if not after.isdigit() or len(after) > 18:
            _refuse(400, BAD_CURSOR_TEXT)
        return int(after)

    def _page(self, room_id: str, after: int, limit: int) -> dict[str, Any]:
        found = self.store.messages_after(room_id, after, limit + 1)
        return {
            "messages": [self.message_json(m) for m in found[:limit]],
            "has_more": len(found) > limit,
            "room_id": room_id,
        }

    def list_messages(
        self, room_id: str, creds: Credentials, *, after: str | None, limit: str | None = None
    ) -> Reply:
        """``GET /rooms/{room}/messages?after=…``: one page of messages after a cursor."""
        try:
            self._require_room(room_id)
            self._authenticate(room_id, creds, worker_only=False)
            cursor = self._cursor(after)
            size = DEFAULT_MESSAGE_PAGE
            if limit:
                if not limit.isdigit():
                    _refuse(400, "limit must be a positive integer")
                size = max(1, min(int(limit[:6]), MAX_MESSAGE_PAGE))
        except _Refusal as refusal:
            return refusal.reply
        return Reply(status=200, body=self._page(room_id, cursor, size))

    async def poll_messages(
        self, room_id: str, creds: Credentials, *, after: str | None, wait_ms: str | None
    ) -> Reply:
        """``GET /rooms/{room}/messages/poll`` (R7): wait for messages after a cursor.

        Waits up to ``min(timeout, poll cap)`` ms (30 000 when no timeout is
        given) and returns as soon as a message after ``after`` exists or the
        session ends. While it waits, and for 12 s after, the session counts as
        having an open delivery connection.

        Cancellation:
            A checkpoint. Cancelled (the client went away), the poll stops
            counting as open; the 12 s linger starts then.
        """
        try:
            self._require_room(room_id)
            row = self._authenticate(room_id, creds, worker_only=False)
            cursor = self._cursor(after)
            wait: float = DEFAULT_POLL_TIMEOUT_MS
            if wait_ms:
                try:
                    wait = float(wait_ms)
                except ValueError:
                    _refuse(400, BAD_TIMEOUT_TEXT)
                if wait != wait:  # NaN
                    _refuse(400, BAD_TIMEOUT_TEXT)
        except _Refusal as refusal:
            await trio.lowlevel.checkpoint()
            return refusal.reply
        wait = max(0.0, min(wait, float(self.config.poll_max_ms)))
        deadline = trio.current_time() + wait / 1000
        delivery = self._delivery.setdefault(row.session_id, _Delivery())
        delivery.open_polls += 1

        def answerable() -> bool:
            if self.store.messages_after(room_id, cursor, 1):
                return True
            current = self.store.get_session(row.session_id)
            return current is None or not current.live

        changed = self._room_changed.setdefault(room_id, Notifier())
        try:
            with trio.move_on_at(deadline):
                await changed.wait_until(answerable)
        finally:
            delivery.open_polls -= 1
            delivery.closed_at = self.now_ms()
            if not changed.waiting:
                self._room_changed.pop(room_id, None)
        return Reply(status=200, body=self._page(room_id, cursor, DEFAULT_MESSAGE_PAGE))

    # --- tasks and leases (minimal) -------------------------------------------------------

    @staticmethod
    def lease_json(lease: LeaseRow) -> dict[str, Any]:
        """The JSON of a lease."""
        return {
            "lease_id": lease.lease_id,
            "room_id": lease.room_id,
            "task_id": lease.task_id,
            "kind": lease.kind,
            "session_id": lease.session_id,
            "epoch": lease.epoch,
            "created_at": iso_ms(lease.created_at),
            "expires_at": iso_ms(lease.expires_at),
            "released_at": iso_ms(lease.released_at),
        }

    def create_task(self, room_id: str, creds: Credentials, body: Mapping[str, Any]) -> Reply:
        """``POST /rooms/{room}/tasks``: create a task (``{"title": ...}``)."""
        try:
            self._require_room(room_id)
            row = self._authenticate(room_id, creds, worker_only=False)
            title = body.get("title")
            if not isinstance(title, str) or not title.strip() or len(title) > MAX_MESSAGE_CHARS:
                _refuse(400, TITLE_REQUIRED_TEXT)
        except _Refusal as refusal:
            return refusal.reply
        task = TaskRow(
            task_id="task_" + uuid.uuid4().hex,
            room_id=room_id,
            title=title,
            created_at=self.now_ms(),
            created_by_session_id=row.session_id,
        )
        self.store.put_task(task)
        return Reply(
            status=201,
            body={
                "task_id": task.task_id,
                "room_id": room_id,
                "title": task.title,
                "created_at": iso_ms(task.created_at),
            },
        )

    def take_lease(
        self, room_id: str, task_id: str, creds: Credentials, body: Mapping[str, Any]
    ) -> Reply:
        """``POST /rooms/{room}/tasks/{task}/leases``: take a lease (default kind ``work``).

        ``ttl_ms`` (optional, positive) makes the lease expire. One active lease
        per (task, kind): taking a lease another session holds answers 409.
        """
        try:
            self._require_room(room_id)
            row = self._authenticate(room_id, creds)
            task = self.store.get_task(task_id)
            if task is None or task.room_id != room_id:
                _refuse(404, TASK_NOT_FOUND_TEXT)
            kind = body.get("kind", "work")
            if not isinstance(kind, str) or not kind or len(kind) > 64:
                _refuse(400, BAD_LEASE_KIND_TEXT)
            ttl = body.get("ttl_ms")
            if ttl is not None and (
                isinstance(ttl, bool) or not isinstance(ttl, int) or not 0 < ttl <= 2**40
            ):
                _refuse(400, "ttl_ms must be a positive integer")
        except _Refusal as refusal:
            return refusal.reply
        now = self.now_ms()
        for lease in self.store.room_leases(room_id):
            if lease.task_id == task_id and lease.kind == kind and lease.active(now):
                if lease.session_id == row.session_id:
                    return Reply(status=200, body=self.lease_json(lease))
                return Reply(
                    status=409,
                    body={"error": "Task is already leased.", "code": "task_already_leased"},
                )
        lease = LeaseRow(
            lease_id="lease_" + uuid.uuid4().hex,
            room_id=room_id,
            task_id=task_id,
            kind=kind,
            session_id=row.session_id,
            epoch=1,
            created_at=now,
            expires_at=None if ttl is None else now + ttl,
        )
        self.store.put_lease(lease)
        return Reply(status=201, body=self.lease_json(lease))

    def release_lease(self, room_id: str, lease_id: str, creds: Credentials) -> Reply:
        """``POST /rooms/{room}/leases/{lease}/release``: the holder gives a lease back."""
        try:
            self._require_room(room_id)
            row = self._authenticate(room_id, creds)
            lease = self.store.get_lease(lease_id)
            if lease is None or lease.room_id != room_id:
                _refuse(404, LEASE_NOT_FOUND_TEXT)
            if lease.session_id != row.session_id:
                _refuse(403, "Only the lease holder can release it.")
        except _Refusal as refusal:
            return refusal.reply
        if lease.released_at is None:
            lease = attrs.evolve(lease, released_at=self.now_ms())
            self.store.put_lease(lease)
        return Reply(status=200, body=self.lease_json(lease))

    def active_work_task_ids(self, session_id: str) -> list[str]:
        """Task ids of the active work leases a session holds, oldest lease first."""
        row = self.store.get_session(session_id)
        if row is None:
            return []
        now = self.now_ms()
        leases = [
            lease
            for lease in self.store.room_leases(row.room_id)
            if lease.session_id == session_id and lease.kind == "work" and lease.active(now)
        ]
        leases.sort(key=lambda lease: (lease.created_at, lease.lease_id))
        return [lease.task_id for lease in leases]

    # --- liveness notices (§7.5) ------------------------------------------------------------

    def _reachable(self, row: SessionRow, now: int) -> bool:
        return bool(self._streams.get(row.session_id)) or self.delivery_connected(
            row.session_id, now
        )

    def sweep_liveness(self) -> list[MessageRow]:
        """Post the offline and recovery notices that are due now (§7.5).

        Only live, unsupervised worker sessions that hold an active work lease
        are announced offline, once per outage epoch, when they have been
        unreachable and unheard for at least the grace and at most 60 min. A
        recovery notice follows when such a session is reachable again.

        Returns:
            The notices posted by this sweep.
        """
        now = self.now_ms()
        grace = self.config.liveness_notice_after_ms
        posted: list[MessageRow] = []
        for room_id in self.store.room_ids():
            for row in self.store.room_sessions(room_id):
                if row.session_kind != "worker" or row.supervisor_grant_id or not row.live:
                    continue
                if self._reachable(row, now):
                    announced = row.offline_announced_at
                    if announced is not None and (
                        row.recovery_announced_at is None or row.recovery_announced_at < announced
                    ):
                        notice = self.post_notice(
                            room_id,
                            f"[status] {row.actor_label} is connected to the room again.",
                            dedupe_id=f"agent_liveness:recovered:{row.session_id}:{announced}",
                        )
                        self.store.put_session(attrs.evolve(row, recovery_announced_at=now))
                        if notice is not None:
                            posted.append(notice)
                    continue
                tasks = self.active_work_task_ids(row.session_id)
                if not tasks:
                    continue
                last_seen = max(
                    row.last_seen_at or 0, row.agent_heard_at or 0, row.process_seen_at or 0
                )
                offline_for = now - last_seen
                if not grace <= offline_for <= OFFLINE_ANNOUNCE_MAX_AGE_MS:
                    continue
                epoch = (
                    row.process_disconnected_at
                    if row.process_disconnected_at is not None
                    else row.updated_at
                )
                if row.offline_epoch_announced == epoch:
                    continue
                notice = self.post_notice(
                    room_id,
                    offline_text(row.actor_label, offline_for, tasks),
                    dedupe_id=f"agent_liveness:offline:{row.session_id}:{epoch}",
                )
                self.store.put_session(
                    attrs.evolve(row, offline_epoch_announced=epoch, offline_announced_at=now)
                )
                if notice is not None:
                    posted.append(notice)
        return posted

    async def run(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> NoReturn:
        """Run the room's background work: a liveness sweep every
        ``config.liveness_sweep_interval`` seconds, forever. :func:`serve_room`
        starts it; an in-process embedder starts it with ``nursery.start``.

        Cancellation:
            Runs until cancelled; a sweep is synchronous, so cancellation
            never leaves one half done.
        """
        task_status.started()
        next_at = trio.current_time()
        while True:
            next_at += self.config.liveness_sweep_interval
            await trio.sleep_until(next_at)
            posted = self.sweep_liveness()
            if posted:
                logger.info("liveness sweep posted %d notice(s)", len(posted))


def format_offline_duration(offline_ms: int) -> str:
    """``<m>m`` (at least 1), ``<h>h`` or ``<h>h <m>m`` (§7.5)."""
    minutes = max(1, offline_ms // 60_000)
    hours, rest = divmod(minutes, 60)
    if hours == 0:
        return f"{minutes}m"
    return f"{hours}h" if rest == 0 else f"{hours}h {rest}m"


def offline_text(label: str, offline_ms: int, task_ids: list[str]) -> str:
    """The offline notice of §7.5, word for word."""
    shown = ", ".join(task_ids[:3])
    if len(task_ids) > 3:
        shown += f" and {len(task_ids) - 3} more"
    return (
        f"[status] {label} has been offline for {format_offline_duration(offline_ms)}"
        f" while holding {shown}. It may still be working; reassign only after it or its"
        " supervisor confirms it has stopped, or a human directs the transfer."
    )
