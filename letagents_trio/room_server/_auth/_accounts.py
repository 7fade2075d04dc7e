"""Who is calling: owner accounts (R1, R2) and session credentials (§2.2 step 2).

Dev auth: an owner bearer token maps to an account login (``owner_tokens``);
each login gets an account row whose id is derived from the login, so a
restart over the same SQLite file agrees. Tokens are compared in constant time.

A call with session credentials is authenticated by :meth:`Accounts.authenticate`
(PROTOCOL.md §2.2 step 2): an optional bearer must be the session's owner, the
session id and token must name a live session of the room, and, for agent
write actions, a worker session. Being authenticated is the agent being heard
(§2.2 step 7): ``last_seen_at`` and ``agent_heard_at`` move to now, as
bookkeeping: a storage that refuses the write (a full disk) leaves them as
they were, and the request goes on, so reads and exits never fail on it.

Two kinds of bearer, as the letagents API has them: an *owner token* (what an
MCP server sends for its owner) and a *person token* (``person_tokens``: a
person signed in, the API's interactive sign-in). Both name an account; only a
person may change a room's settings (:mod:`.._guidelines`).

A room's admins (:meth:`Accounts.is_admin`) are the account that created it
(whose registration made it) and the accounts granted admin explicitly
(:meth:`Accounts.grant_admin`), never an account for owning a session there:
any owner may register an agent in any room, and that must not make it the
room's admin. A room's *participants* are its admins and the accounts that own
a session (live or ended) in it.

The room's work routes (the board, memory, requests for people) are called by
an :class:`Actor` (:meth:`Accounts.actor`): an agent, by its session
credentials, or a person, one of the room's admins signed in (a person token
alone). An owner token alone reads there as the admin it names, and writes
nothing: every agent of that owner holds it, so it never acts as the person
(who answers requests for input and makes the admin's moves on the board).
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, final

import attrs

from ..._protocol import (
    AGENT_SESSION_ENDED_ADVICE,
    BEARER_MISMATCH_TEXT,
    IDENTITY_TOO_LONG_CODE,
    IDENTITY_TOO_LONG_TEXT,
    INVALID_CREDENTIALS_TEXT,
    SESSION_REQUIRED_READ_TEXT,
    SESSION_REQUIRED_TEXT,
    WORKER_REQUIRED_TEXT,
)
from .._storage._rows import Account, RoomRow
from .._storage._store_errors import StoreWriteError
from .._wire import (
    MAX_ACTOR_KEY_CHARS,
    OWNER_AUTH_TEXT,
    ROOM_NOT_FOUND_TEXT,
    Credentials,
    Refusal,
    Reply,
    hash_token,
    opt_str,
    refuse,
    token_matches,
    valid_room_id,
)

if TYPE_CHECKING:
    from .._clock import RoomClock
    from .._storage._rows import SessionRow
    from .._storage._store import RoomStore

__all__ = [
    "AGENT_NAME_REQUIRED_TEXT",
    "OWNER_NOT_PERSON_TEXT",
    "Accounts",
    "Actor",
    "account_id",
    "agent_identity",
]

# Ours (upstream's text was not read, PROTOCOL.md §9.7).
AGENT_NAME_REQUIRED_TEXT: Final = "name is required"
# Ours: an owner token alone writing on a work route (see the module docstring).
OWNER_NOT_PERSON_TEXT: Final = (
    "An owner token acts for its agents, never as a person: send the agent's session"
    " credentials, or sign in as a person."
)


def account_id(login: str) -> str:
    """The account id of a login: derived from it, so a restart agrees."""
    return "acct_" + hashlib.sha256(login.encode("utf-8")).hexdigest()[:24]


def agent_identity(account: Account, body: Mapping[str, Any]) -> dict[str, Any]:
    """R2: the agent identity ``POST /agents`` registers (key ``<login>/<name>``), or refuse."""
    name = body.get("name")
    if not isinstance(name, str) or not name.strip():
        refuse(400, AGENT_NAME_REQUIRED_TEXT)
    name = name.strip()
    if len(account.login) + 1 + len(name) > MAX_ACTOR_KEY_CHARS or "/" in name:
        refuse(400, IDENTITY_TOO_LONG_TEXT, code=IDENTITY_TOO_LONG_CODE)
    return {
        "canonical_key": f"{account.login}/{name}",
        "name": name,
        "display_name": opt_str(body, "display_name"),
        "owner_label": opt_str(body, "owner_label") or account.login,
        "owner_account_id": account.account_id,
    }


def _login_of(tokens: Mapping[str, str], bearer: str | None) -> str | None:
    """The login ``bearer`` maps to in ``tokens`` (compared in constant time), if any."""
    if not bearer:
        return None
    found: str | None = None
    for token, login in tokens.items():
        if hmac.compare_digest(token.encode("utf-8"), bearer.encode("utf-8")):
            found = login
    return found


@final
@attrs.frozen(kw_only=True)
class Actor:
    """Who calls a work route: an agent (``session`` is its row) or a person (no session:
    signed in when it writes, see :meth:`Accounts.actor`).

    Attributes:
        label: how the room names the caller: the agent's actor label, or the login.
        account_id: the owner account behind the caller.
        session: the agent's session row; ``None`` for a person.
    """

    label: str
    account_id: str
    session: SessionRow | None = None

    @property
    def person(self) -> bool:
        """True for a person (the room's admin, no agent session)."""
        return self.session is None

    @property
    def agent_key(self) -> str | None:
        """The agent's key, or ``None`` for a person."""
        return None if self.session is None else self.session.agent_key

    @property
    def instance_id(self) -> str | None:
        """The agent's instance id, if it has one."""
        return None if self.session is None else self.session.agent_instance_id

    @property
    def session_id(self) -> str | None:
        """The agent's session id, or ``None`` for a person."""
        return None if self.session is None else self.session.session_id


@final
@attrs.define(eq=False)
class Accounts:
    """Owner accounts, people, room admins and the authentication of session credentials.

    Args:
        store: the room's rows.
        clock: the room's clock (epoch ms).
        owner_tokens: owner bearer token → account login.
        person_tokens: a signed-in person's bearer token → account login.
    """

    store: RoomStore
    clock: RoomClock
    owner_tokens: Mapping[str, str] = attrs.field(repr=False)
    person_tokens: Mapping[str, str] = attrs.field(factory=dict, repr=False)
    _agents: dict[str, dict[str, dict[str, Any]]] = attrs.field(init=False, factory=dict)

    def __attrs_post_init__(self) -> None:
        for login in {*self.owner_tokens.values(), *self.person_tokens.values()}:
            if self.store.get_account(login) is None:
                self.store.put_account(Account(account_id=account_id(login), login=login))

    def owner(self, owner_token: str | None) -> Account | None:
        """The account of an owner bearer token (configured, or minted by a device
        sign-in), if it is one."""
        login = _login_of(self.owner_tokens, owner_token)
        if login is None and owner_token:
            minted = self.store.get_minted_token(hash_token(owner_token))
            login = None if minted is None else minted.login
        return None if login is None else self.store.get_account(login)

    def account(self, login: str) -> Account:
        """The account of ``login``, made (and stored) on first use."""
        found = self.store.get_account(login)
        if found is None:
            found = Account(account_id=account_id(login), login=login)
            self.store.put_account(found)
        return found

    def bearer(self, token: str | None) -> tuple[Account, bool] | None:
        """The account of either kind of bearer, and whether it is a person's; else None."""
        login = _login_of(self.person_tokens, token)
        if login is not None:
            account = self.store.get_account(login)
            return None if account is None else (account, True)
        owner = self.owner(token)
        return None if owner is None else (owner, False)

    def me(self, owner_token: str | None) -> Reply:
        """R1: the account of the bearer token, and its agents."""
        account = self.owner(owner_token)
        if account is None:
            return Reply(status=401, body={"error": OWNER_AUTH_TEXT})
        shown = {"id": account.account_id, "login": account.login, "display_name": account.login}
        agents = list(self._agents.get(account.login, {}).values())
        return Reply(status=200, body={"account": shown, "agents": agents})

    def register_identity(self, owner_token: str | None, body: Mapping[str, Any]) -> Reply:
        """R2: register the agent identity ``<login>/<name>``."""
        account = self.owner(owner_token)
        if account is None:
            return Reply(status=401, body={"error": OWNER_AUTH_TEXT})
        try:
            agent = agent_identity(account, body)
        except Refusal as refusal:
            return refusal.reply
        self._agents.setdefault(account.login, {})[agent["name"]] = agent
        return Reply(status=200, body=agent)

    def is_admin(self, room_id: str, account: Account) -> bool:
        """Whether ``account`` created the room or was granted its admin."""
        room = self.store.get_room(room_id)
        return room is not None and (
            room.created_by == account.account_id or account.account_id in room.admins
        )

    def is_participant(self, room_id: str, account: Account) -> bool:
        """Whether ``account`` is an admin of the room or owns a session (live or ended) in it."""
        return self.is_admin(room_id, account) or any(
            row.owner_account_id == account.account_id for row in self.store.room_sessions(room_id)
        )

    def grant_admin(self, room_id: str, login: str, now: int) -> None:
        """Make ``login``'s account an admin of the room (made now, creator-less, if new)."""
        if self.store.get_account(login) is None:
            self.store.put_account(Account(account_id=account_id(login), login=login))
        grantee = account_id(login)
        room = self.store.get_room(room_id) or RoomRow(room_id=room_id, created_at=now)
        if grantee not in room.admins:
            self.store.put_room(attrs.evolve(room, admins=(*room.admins, grantee)))

    def room_admin(self, room_id: str, bearer: str | None, refusal: str) -> Account:
        """The caller's account (either kind of bearer), if it is one of the room's admins.

        Args:
            room_id: the room (its existence is the caller's check).
            bearer: the bearer token; a missing or unknown one is 401.
            refusal: the 403 text for a known account that is not an admin.
        """
        return self._room_admin(room_id, bearer, refusal)[0]

    def _room_admin(self, room_id: str, bearer: str | None, refusal: str) -> tuple[Account, bool]:
        """:meth:`room_admin`, and whether the bearer is a person's."""
        found = self.bearer(bearer)
        if found is None:
            refuse(401, OWNER_AUTH_TEXT)
        if not self.is_admin(room_id, found[0]):
            refuse(403, refusal)
        return found

    def actor(
        self, room_id: str, creds: Credentials, not_admin_text: str, *, reading: bool = False
    ) -> Actor:
        """Who calls a work route, or refuse: an agent by its session credentials (a worker
        session when it writes), else one of the room's admins: signed in as a person
        when it writes (an owner token alone is 403, :data:`OWNER_NOT_PERSON_TEXT`)."""
        if creds.session_id or creds.session_token:
            row = self.authenticate(room_id, creds, worker_only=not reading, reading=reading)
            label = row.actor_label or row.display_name
            return Actor(label=label, account_id=row.owner_account_id, session=row)
        account, person = self._room_admin(room_id, creds.owner_token, not_admin_text)
        if not person and not reading:
            refuse(403, OWNER_NOT_PERSON_TEXT)
        return Actor(label=account.login, account_id=account.account_id)

    def require_room(self, room_id: str) -> None:
        """Refuse 404 unless the room exists (it does from its first registration on)."""
        if not valid_room_id(room_id) or self.store.get_room(room_id) is None:
            refuse(404, ROOM_NOT_FOUND_TEXT)

    def authenticate(
        self, room_id: str, creds: Credentials, *, worker_only: bool = True, reading: bool = False
    ) -> SessionRow:
        """Resolve the session credentials of a request, or refuse (§2.2 step 2).

        ``reading`` says the request only reads, so a refusal for missing
        credentials does not call it a write action.

        Returns:
            The session's row, now heard (stored, unless the storage refused it).
        """
        account: Account | None = None
        if creds.owner_token is not None:
            account = self.owner(creds.owner_token)
            if account is None:
                refuse(401, BEARER_MISMATCH_TEXT)
        if not creds.session_id or not creds.session_token:
            refuse(403, SESSION_REQUIRED_READ_TEXT if reading else SESSION_REQUIRED_TEXT)
        row = self.store.get_session(creds.session_id)
        if row is None or row.room_id != room_id or not token_matches(row, creds.session_token):
            refuse(401, INVALID_CREDENTIALS_TEXT)
        if account is not None and row.owner_account_id != account.account_id:
            refuse(401, BEARER_MISMATCH_TEXT)
        if not row.live:
            refuse(401, AGENT_SESSION_ENDED_ADVICE)
        if worker_only and row.session_kind != "worker":
            refuse(403, WORKER_REQUIRED_TEXT)
        now = self.clock.now_ms()
        heard = attrs.evolve(row, last_seen_at=now, agent_heard_at=now)
        with contextlib.suppress(StoreWriteError):  # best-effort; the store logs it
            self.store.put_session(heard)
        return heard
