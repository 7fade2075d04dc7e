"""Registration rules (R3; PROTOCOL.md §5.3, §7.3), as pure decisions.

Everything here is a function of the request body, the room's session rows
and the time; the room reads the rows, calls these, and writes what they
decide. A refusal is raised (:func:`~.._wire.refuse`) from inside the check
that makes it.

1. :func:`parse_registration`: the body checks (400 ``actor_key``, identity
   bounds, the durable credential, the replacement pair; 403 for a foreign
   ``actor_key``).
2. :func:`name_wait`: how long the room's one wait lasts, if at all: until
   the holders of the name wanted (:func:`wanted_name`) are gone.
3. :func:`plan_registration`, under the room's registration lock:

   * lost-response retry: the ``connection_token`` of an existing row of this
     instance returns that row unchanged (409 if it has ended);
   * replacement proof: must name a row of the same room, agent key and
     instance, with its token (else 409 ``agent_instance_already_active``);
     a durable worker must prove its row (which it then keeps: *rotation*); a
     non-durable one may skip the proof once its predecessor has been unseen
     100 s (those rows are *replaced*);
   * the name (:func:`choose_name`): a durable worker keeps its name (or takes
     back the one it first asked for once free); otherwise the base name (or a
     codename for a generic one) if not held, else ``codename(agent_key + ":"
     + k)``. Same-owner holders that are gone do not hold the base name: live
     ones are ended (the *takeover*).

4. :func:`registered_row`: the session row written; the leases it adopts
   are ``_leases.adopts``'s to decide (§7.3).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Final, NoReturn, final

import attrs

from ..._protocol import (
    ACTOR_KEY_NOT_OWNED_TEXT,
    ACTOR_KEY_REQUIRED_TEXT,
    ALREADY_ACTIVE_CODE,
    ALREADY_ACTIVE_TEXT,
    DURABLE_CREDENTIAL_TEXT,
    IDENTITY_TOO_LONG_CODE,
    IDENTITY_TOO_LONG_TEXT,
    NAMES_EXHAUSTED_CODE,
    NAMES_EXHAUSTED_TEXT,
    REPLACEMENT_PAIR_TEXT,
    REPLACEMENT_PROOF_CODE,
    SAME_INSTANCE_RECLAIM_STALE_AFTER,
)
from ...workers._names import (
    actor_label,
    allocation_base,
    allocation_candidates,
    is_durable_worker_id,
    name_key,
)
from .._storage._rows import Account, LeaseRow, SessionRow
from .._wire import (
    MAX_ACTOR_KEY_CHARS,
    MAX_DISPLAY_NAME_CHARS,
    MAX_INSTANCE_ID_CHARS,
    Reply,
    opt_str,
    projection,
    refuse,
    token_matches,
)
from ._presence import (
    Holder,
    Registrant,
    SessionEvidence,
    is_releasable,
    name_comes_free_at,
    name_wait_ms,
)

__all__ = [
    "NameChoice",
    "Plan",
    "RegistrationRequest",
    "choose_name",
    "created_reply",
    "holder",
    "holders",
    "name_wait",
    "parse_registration",
    "plan_registration",
    "registered_row",
    "registrant",
    "wanted_name",
]

# A connection credential is base64url; the client sends 43 characters.
_TOKEN_RE: Final = re.compile(r"[A-Za-z0-9_-]{32,256}")
# The _protocol.py value the room compares with its millisecond clock.
SAME_INSTANCE_RECLAIM_STALE_AFTER_MS: Final = round(SAME_INSTANCE_RECLAIM_STALE_AFTER * 1000)


@final
@attrs.frozen(kw_only=True)
class RegistrationRequest:
    """A registration body, checked (§5.3). Tokens are never shown."""

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
        """Whether the registrant is a durable worker (``worker_<hex>`` instance)."""
        return is_durable_worker_id(self.instance_id)


def parse_registration(account: Account, body: Mapping[str, Any]) -> RegistrationRequest:
    """Check a registration body of ``account`` (step 1), or refuse."""
    actor_key = body.get("actor_key")
    if not isinstance(actor_key, str) or not actor_key.strip():
        refuse(400, ACTOR_KEY_REQUIRED_TEXT)
    instance_id = opt_str(body, "agent_instance_id")
    display_name = body.get("display_name")
    requested = body.get("requested_base_display_name")
    too_long = (
        len(actor_key) > MAX_ACTOR_KEY_CHARS
        or (instance_id is not None and len(instance_id) > MAX_INSTANCE_ID_CHARS)
        or (isinstance(display_name, str) and len(display_name) > MAX_DISPLAY_NAME_CHARS)
        or (isinstance(requested, str) and len(requested) > MAX_DISPLAY_NAME_CHARS)
    )
    if too_long:
        refuse(400, IDENTITY_TOO_LONG_TEXT, code=IDENTITY_TOO_LONG_CODE)
    if not actor_key.startswith(account.login + "/") or actor_key == account.login + "/":
        refuse(403, ACTOR_KEY_NOT_OWNED_TEXT)
    connection_token = body.get("connection_token")
    token = connection_token if isinstance(connection_token, str) else None
    if token is not None and _TOKEN_RE.fullmatch(token) is None:
        token = None
    if is_durable_worker_id(instance_id) and token is None:
        refuse(400, DURABLE_CREDENTIAL_TEXT)
    replace_id = opt_str(body, "replace_agent_session_id")
    replace_token = opt_str(body, "replace_agent_session_token")
    if (replace_id is None) != (replace_token is None):
        refuse(400, REPLACEMENT_PAIR_TEXT, code=REPLACEMENT_PROOF_CODE)
    liveness = body.get("registration_liveness")
    live: Mapping[str, Any] = liveness if isinstance(liveness, Mapping) else {}
    kind = opt_str(body, "session_kind") or "worker"
    return RegistrationRequest(
        actor_key=actor_key,
        instance_id=instance_id,
        display_name=display_name if isinstance(display_name, str) else None,
        requested_base=requested if isinstance(requested, str) else None,
        session_kind=kind if kind in ("worker", "controller") else "worker",
        runtime=opt_str(body, "runtime"),
        ide_label=opt_str(body, "ide_label"),
        repo_branch=opt_str(body, "repo_branch"),
        host_id=opt_str(live, "host_id"),
        host_kind=opt_str(live, "host_kind"),
        host_label=opt_str(live, "host_label"),
        liveness_capability=opt_str(live, "liveness_capability"),
        tool_bridge_id=opt_str(live, "tool_bridge_id"),
        process_host_id=opt_str(body, "process_host_id"),
        connection_token=token,
        replace_id=replace_id,
        replace_token=replace_token,
    )


def registrant(account: Account, req: RegistrationRequest) -> Registrant:
    """The registrant, as the presence rules see it."""
    return Registrant(
        owner_id=account.account_id,
        agent_key=req.actor_key,
        instance_id=req.instance_id,
        process_host_id=req.process_host_id,
    )


def holder(row: SessionRow, evidence: SessionEvidence) -> Holder:
    """A session row as a name holder, with its presence evidence."""
    return Holder(
        evidence=evidence,
        name=row.display_name,
        owner_id=row.owner_account_id or None,
        supervised=row.supervisor_grant_id is not None,
        agent_key=row.agent_key,
    )


def holders(sessions: Sequence[SessionRow]) -> list[SessionRow]:
    """The rows that hold names (§7.3): live worker sessions, and durable workers even ended."""
    return [
        s
        for s in sessions
        if s.session_kind == "worker" and (s.live or is_durable_worker_id(s.agent_instance_id))
    ]


def _base_name(req: RegistrationRequest) -> str:
    return allocation_base(
        req.display_name if req.display_name is not None else req.requested_base,
        req.ide_label,
        req.actor_key,
    )


def wanted_name(req: RegistrationRequest, sessions: Sequence[SessionRow]) -> str:
    """The name whose holders the one wait is about (step 2)."""
    if req.durable:
        for s in sessions:
            if s.agent_key == req.actor_key and s.agent_instance_id == req.instance_id:
                return s.assigned_base_display_name or s.display_name
    return _base_name(req)


def name_wait(
    req: RegistrationRequest,
    account: Account,
    sessions: Sequence[SessionRow],
    *,
    now: int,
    holder_of: Callable[[SessionRow], Holder],
) -> float | None:
    """How long, in ms, the one wait before the lock lasts; ``None``: no wait (step 2).

    A registration waits once when the name it wants is held only by holders
    of its owner that will be gone within 15 s (``name_comes_free_at``).
    """
    at = name_comes_free_at(
        wanted_name(req, sessions),
        [holder_of(s) for s in holders(sessions)],
        registrant=registrant(account, req),
        now=now,
    )
    return None if at is None else name_wait_ms(at, now=now)


@final
@attrs.frozen(kw_only=True)
class NameChoice:
    """The name a registration gets, the base it asked for, and the live holders it ends."""

    name: str
    base: str
    takeover: tuple[SessionRow, ...] = ()


def choose_name(
    req: RegistrationRequest,
    *,
    rotate: SessionRow | None,
    others: Sequence[SessionRow],
    sessions: Sequence[SessionRow],
    releasable: Callable[[SessionRow], bool],
    max_offset: int,
) -> NameChoice:
    """Choose the registration's name (step 3), or refuse 409 when every codename is held.

    Args:
        req: the registration.
        rotate: the durable worker's own row, kept under its session id.
        others: the name holders that are not this instance's rows.
        sessions: every session of the room (live agent names are reserved).
        releasable: whether a holder's name may pass to the registrant
            (``_presence.is_releasable``); asked only about names wanted.
        max_offset: the last codename offset tried.
    """
    by_key: dict[str, list[SessionRow]] = {}
    for s in others:
        by_key.setdefault(name_key(s.display_name), []).append(s)
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

    def taken_over(name: str, base: str) -> NameChoice:
        live = (s for s in by_key.get(name_key(name), ()) if s.live and releasable(s))
        return NameChoice(name=name, base=base, takeover=tuple(live))

    if rotate is not None:
        requested = rotate.assigned_base_display_name or rotate.display_name
        current = rotate.display_name
        if name_key(requested) != name_key(current) and not blocked(requested, takeover=True):
            return taken_over(requested, requested)
        if not blocked(current, takeover=True, live_only=True, seniority=True):
            return taken_over(current, requested)
        base = requested
    else:
        base = _base_name(req)
    base_key = name_key(base)
    for candidate in allocation_candidates(base, req.actor_key, max_offset=max_offset):
        takeover = name_key(candidate) == base_key
        if blocked(candidate, takeover=takeover):
            continue
        return taken_over(candidate, base) if takeover else NameChoice(name=candidate, base=base)
    refuse(409, NAMES_EXHAUSTED_TEXT, code=NAMES_EXHAUSTED_CODE)


def _already_active(session_id: str | None) -> NoReturn:
    refuse(409, ALREADY_ACTIVE_TEXT, code=ALREADY_ACTIVE_CODE, active_session_id=session_id)


def _predecessor(
    proof: SessionRow | None,
    req: RegistrationRequest,
    *,
    room_id: str,
    account_id: str,
    own: Sequence[SessionRow],
) -> SessionRow | None:
    """The row a replacement proof names, checked; ``None`` when no proof was given."""
    if req.replace_id is None or req.replace_token is None:
        return None
    valid = (
        proof is not None
        and proof.room_id == room_id
        and proof.agent_key == req.actor_key
        and proof.agent_instance_id == req.instance_id
        and proof.owner_account_id == account_id
        and token_matches(proof, req.replace_token)
    )
    if not valid or proof is None:
        live = [s for s in own if s.live]
        _already_active(live[0].session_id if live else None)
    return proof


@final
@attrs.frozen(kw_only=True)
class Plan:
    """What a registration does, decided under the lock from the room's rows.

    Attributes:
        retry: a lost-response retry: answer this row again, change nothing.
        rotate: a durable worker's own row, kept (its id) with the new token.
        replace: rows of this instance to end as ``replaced``.
        takeover: other holders of the name to end as ``name_handover``.
        name: the display name given.
        base: the base name asked for (stored as ``assigned_base_display_name``).
    """

    retry: SessionRow | None = None
    rotate: SessionRow | None = None
    replace: tuple[SessionRow, ...] = ()
    takeover: tuple[SessionRow, ...] = ()
    name: str = ""
    base: str = ""


def plan_registration(
    req: RegistrationRequest,
    *,
    account: Account,
    room_id: str,
    sessions: Sequence[SessionRow],
    proof: SessionRow | None,
    now: int,
    holder_of: Callable[[SessionRow], Holder],
    max_offset: int,
) -> Plan:
    """Decide a registration (step 3), or refuse.

    Args:
        req: the checked registration.
        account: its owner's account.
        room_id: the room.
        sessions: every session row of the room, read under the lock.
        proof: the row ``req.replace_id`` names, if any.
        now: the room's time in ms.
        holder_of: a row as a name holder, with its evidence now.
        max_offset: the last codename offset tried.
    """
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
    if req.connection_token is not None:
        for row in own:
            if token_matches(row, req.connection_token):
                if not row.live:
                    _already_active(row.session_id)
                return Plan(retry=row)
    predecessor = _predecessor(proof, req, room_id=room_id, account_id=account.account_id, own=own)
    replace: list[SessionRow] = []
    rotate: SessionRow | None = None
    if req.durable:
        if own and (predecessor is None or predecessor.session_id != own[0].session_id):
            _already_active(own[0].session_id)
        rotate = own[0] if own else None
    else:
        for row in own:
            if not row.live:
                continue
            if predecessor is not None and row.session_id == predecessor.session_id:
                replace.append(row)
                continue
            last = row.last_seen_at if row.last_seen_at is not None else row.created_at
            if now - last < SAME_INSTANCE_RECLAIM_STALE_AFTER_MS:
                _already_active(row.session_id)
            replace.append(row)
    own_ids = {row.session_id for row in own}
    asking = registrant(account, req)
    cache: dict[str, bool] = {}

    def releasable(s: SessionRow) -> bool:
        # Evidence is built only for holders of a name actually asked about.
        if s.session_id not in cache:
            cache[s.session_id] = is_releasable(holder_of(s), registrant=asking, now=now)
        return cache[s.session_id]

    choice = choose_name(
        req,
        rotate=rotate,
        others=[s for s in holders(sessions) if s.session_id not in own_ids],
        sessions=sessions,
        releasable=releasable,
        max_offset=max_offset,
    )
    return Plan(
        rotate=rotate,
        replace=tuple(replace),
        takeover=choice.takeover,
        name=choice.name,
        base=choice.base,
    )


def registered_row(
    req: RegistrationRequest,
    plan: Plan,
    *,
    account: Account,
    room_id: str,
    token_hash: str,
    now: int,
) -> SessionRow:
    """The session row a planned registration writes: the rotated row, or a new one."""
    common: dict[str, Any] = {
        "token_hash": token_hash,
        "session_kind": req.session_kind,
        "runtime": req.runtime,
        "host_id": req.host_id,
        "host_kind": req.host_kind,
        "host_label": req.host_label,
        "liveness_capability": req.liveness_capability,
        "tool_bridge_id": req.tool_bridge_id,
        "actor_label": actor_label(plan.name, account.login, req.ide_label),
        "display_name": plan.name,
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
    if plan.rotate is not None:
        return attrs.evolve(plan.rotate, **common)
    return SessionRow(
        session_id=str(uuid.uuid4()),
        room_id=room_id,
        agent_key=req.actor_key,
        agent_instance_id=req.instance_id,
        assigned_base_display_name=plan.base,
        owner_account_id=account.account_id,
        owner_label=account.login,
        created_at=now,
        **common,
    )


def created_reply(row: SessionRow, token: str, adopted: Sequence[LeaseRow]) -> Reply:
    """The 201 of a registration: the session, its token, and the leases it adopted."""
    body = projection(row)
    body["session_token"] = token
    body["worker_bearer"] = None
    if adopted:
        body["adopted_task_leases"] = [
            {"lease_id": lease.lease_id, "task_id": lease.task_id, "kind": lease.kind}
            for lease in adopted
        ]
    return Reply(status=201, body=body)
