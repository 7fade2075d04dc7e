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

Who registers is an :class:`Owner`: the account login of the state file's
sign-in (``auth.account.login``) when the client's token is that sign-in's,
else from ``GET /agents/me`` (:func:`account_login`), or the local owner slug
without an owner token (:class:`AccountCache`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import uuid
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, final
from urllib.parse import urlsplit

import attrs
import trio

from .._client import encode_room_path
from .._errors import ApiError, LetAgentsError, RoomUnreachable, StateError, WorkerError
from .._protocol import ALREADY_ACTIVE_CODE
from .._session import AgentSession
from ._git import git_branch
from ._identity import local_host_id, process_host_id, registration_liveness
from ._names import codename
from ._paths import OWNER_TOKEN_ENV
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
    ACCOUNT_UNVERIFIED_TEXT,
    DAMAGED_STATE_SIGN_IN_TEXT,
    EMBEDDER_WORDING,
    NO_ACCOUNT_ADVICE,
    NO_CANONICAL_IDENTITY_TEXT,
    NOT_A_ROOM_ADVICE,
    NOT_CONFIRMED_TEXT,
    RESTART_ADVICE,
    ROOM_FAILING_ADVICE,
    SIGN_IN_AGAIN_ADVICE,
    TOKEN_REFUSED_ADVICE,
    UNREACHABLE_ADVICE,
    HostWording,
    durable_registration_body,
    new_connection_token,
    sign_in_text,
    worker_agent_name,
)

if TYPE_CHECKING:
    from .._client import RoomClient
    from ._state import LocalStateStore

__all__ = ["Confirmation", "Owner", "Registrar", "account_login"]

Confirmation = Literal["live", "forgotten", "refused"]
"""What the room said of a pinned session (:meth:`Registrar.confirm`)."""

# R1: the owner's account.
ACCOUNT_PATH = "/agents/me"

logger = logging.getLogger("letagents_trio.workers")


@final
@attrs.frozen(kw_only=True)
class Owner:
    """Who registers: the scope string, and the names used for local identities.

    Attributes:
        scope: ``<api_url>\\n<login lower-cased>``, or ``<api_url>\\nlocal:<slug>``.
        login: the account login, or ``None`` without an owner token.
        key_owner: the first segment of local canonical keys: login or slug.
        label: the owner part of local actor labels.
    """

    scope: str
    login: str | None
    key_owner: str
    label: str

    @classmethod
    def signed_in(cls, api_url: str, login: str) -> Owner:
        """The owner of an account: handles are scoped to its lower-cased login."""
        return cls(scope=f"{api_url}\n{login.lower()}", login=login, key_owner=login, label=login)

    @classmethod
    def local(cls, api_url: str, slug: str) -> Owner:
        """The owner without an account: handles are scoped to the local slug."""
        return cls(scope=f"{api_url}\nlocal:{slug}", login=None, key_owner=slug, label=slug)


async def account_login(
    client: RoomClient,
    *,
    token_origin: str | None = None,
    wording: HostWording = EMBEDDER_WORDING,
) -> str:
    """The owner's account login (``GET /agents/me``).

    Args:
        client: the room client, with an owner token.
        token_origin: where that token came from, named when the room refuses it.
        wording: how the host's user sets the room's address, named in the advice.

    Raises:
        WorkerError: the account could not be read; the message names the
            room's address, the cause (the network error, the refusal, the
            status) and what to do next.

    Cancellation:
        A checkpoint; nothing to undo.
    """
    api_url = wording.api_url
    try:
        answer = await client.call("GET", ACCOUNT_PATH)
    except RoomUnreachable as exc:
        network = exc.__cause__ if exc.__cause__ is not None else exc
        detail = str(network).strip() or type(network).__name__
        cause = f"the room did not answer ({type(network).__name__}: {detail})"
        raise _unverified(client, cause, UNREACHABLE_ADVICE.format(api_url=api_url)) from exc
    except ApiError as exc:
        if exc.status in (401, 403):
            cause = f"the room refused the owner token (HTTP {exc.status})"
            raise _unverified(client, cause, _token_refused_advice(token_origin)) from exc
        asked = f"GET {urlsplit(client.api_url).path}{ACCOUNT_PATH}"
        if exc.status in (404, 405):
            cause = f"{asked} answered HTTP {exc.status}"
            raise _unverified(client, cause, NOT_A_ROOM_ADVICE.format(api_url=api_url)) from exc
        if exc.status < 500:
            cause = f"{asked} was refused (HTTP {exc.status})"
            raise _unverified(client, cause, NO_ACCOUNT_ADVICE.format(api_url=api_url)) from exc
        raise _unverified(client, f"HTTP {exc.status}", ROOM_FAILING_ADVICE) from exc
    except LetAgentsError as exc:
        raise _unverified(client, type(exc).__name__, ROOM_FAILING_ADVICE) from exc
    account = answer.get("account") if isinstance(answer, Mapping) else None
    login = account.get("login") if isinstance(account, Mapping) else None
    if not isinstance(login, str) or not login.strip():
        advice = NO_ACCOUNT_ADVICE.format(api_url=api_url)
        raise _unverified(client, "its answer named no account login", advice)
    return login


def _token_refused_advice(token_origin: str | None) -> str:
    """Where the refused token came from, and how a new one takes effect.

    ``LETAGENTS_TOKEN`` is read at start (restart); the state file's sign-in at
    every request (sign in again); a RoomClient's own token as its embedder gives it.
    """
    if token_origin is None:
        return TOKEN_REFUSED_ADVICE.format(origin="the RoomClient's owner_token", then="")
    then = RESTART_ADVICE if token_origin == OWNER_TOKEN_ENV else SIGN_IN_AGAIN_ADVICE
    return TOKEN_REFUSED_ADVICE.format(origin=token_origin, then=then)


def _unverified(client: RoomClient, cause: str, advice: str) -> WorkerError:
    logger.warning("could not read the account at %s: %s", client.api_url, cause)
    return WorkerError(
        ACCOUNT_UNVERIFIED_TEXT.format(api_url=client.api_url, cause=cause, advice=advice)
    )


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


@final
@attrs.define(eq=False)
class AccountCache:
    """The owner's account login, asked once per owner token (``GET /agents/me``).

    The cache belongs to one token: when the client's token changes (another
    process signed in) or goes (a sign-out cleared it), the login is asked
    again, or forgotten. When the client's token is the state file's sign-in
    and that sign-in names its account (``auth.account.login``), the login is
    taken from there and the room is not asked, as the Node client does
    (``identity/directory.ts``): a sign-in knows whose it is, and a local
    room then needs no HTTP at all.
    """

    client: RoomClient
    token_origin: str | None = None
    wording: HostWording = EMBEDDER_WORDING
    state: LocalStateStore | None = None
    _login: str | None = attrs.field(default=None, init=False)
    # Which owner token the cached login belongs to (a digest, never the token).
    _key: str | None = attrs.field(default=None, init=False, repr=False)

    @property
    def cached(self) -> bool:
        """Whether a login is cached."""
        return self._login is not None

    def forget(self) -> None:
        """Drop the cached login."""
        self._login = None
        self._key = None

    async def login(self) -> str | None:
        """The account login, or ``None`` without an owner token.

        Raises:
            WorkerError: as :func:`account_login`.

        Cancellation:
            A checkpoint; a cancelled ask caches nothing.
        """
        key = self.client.owner_token_key
        stored = self._stored_login(key)
        if key is None or stored is not None:
            self.forget()
            self._login, self._key = stored, key
            await trio.lowlevel.checkpoint()
            return stored
        if self._login is None or self._key != key:
            self.forget()
            self._login = await account_login(
                self.client, token_origin=self.token_origin, wording=self.wording
            )
            self._key = key
        else:
            await trio.lowlevel.checkpoint()
        return self._login

    def _stored_login(self, key: str | None) -> str | None:
        """The stored sign-in's account login, if its token is the client's (digest ``key``)."""
        auth = self.state.auth() if self.state is not None and key is not None else None
        if auth is None or hashlib.sha256(auth.token.encode("utf-8")).hexdigest() != key:
            return None
        login = auth.account.get("login") if auth.account is not None else None
        return login.strip() if isinstance(login, str) and login.strip() else None


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


def no_sign_in(state: LocalStateStore, wording: HostWording) -> WorkerError:
    """The refusal of a hosted room's registration without an owner token.

    §5.2's sign-in text for this host, unless the state file that would hold
    the sign-in is damaged: then the error says so (and it is logged), rather
    than sending the owner to sign in again over a file nothing will write.
    """
    snapshot = state.read()
    if snapshot.complete:
        return WorkerError(sign_in_text(state.path, wording))
    logger.error(
        "the state file %s is damaged (%s): its sign-in cannot be read",
        state.path,
        snapshot.problem,
    )
    return WorkerError(
        DAMAGED_STATE_SIGN_IN_TEXT.format(
            state_path=state.path,
            problem=snapshot.problem,
            holder=wording.holder,
            owner_token=wording.owner_token,
        )
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
