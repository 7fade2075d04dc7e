"""Who is calling: owner accounts (R1, R2) and session credentials (§2.2 step 2).

Dev auth: an owner bearer token maps to an account login (``owner_tokens``);
each login gets an account row whose id is derived from the login, so a
restart over the same SQLite file agrees. Tokens are compared in constant time.

A call with session credentials is authenticated by :meth:`Accounts.authenticate`
(PROTOCOL.md §2.2 step 2): an optional bearer must be the session's owner, the
session id and token must name a live session of the room, and, for agent
write actions, a worker session. Being authenticated is the agent being heard
(§2.2 step 7): ``last_seen_at`` and ``agent_heard_at`` move to now.

A room's admins (:meth:`Accounts.room_admin`) are the people behind the room's
owner-only routes: with dev auth and no memberships, the accounts that own a
session (live or ended) in the room, calling with their owner bearer.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, final

import attrs

from .._protocol import (
    AGENT_SESSION_ENDED_ADVICE,
    BEARER_MISMATCH_TEXT,
    IDENTITY_TOO_LONG_CODE,
    IDENTITY_TOO_LONG_TEXT,
    INVALID_CREDENTIALS_TEXT,
    SESSION_REQUIRED_READ_TEXT,
    SESSION_REQUIRED_TEXT,
    WORKER_REQUIRED_TEXT,
)
from ._registration import MAX_ACTOR_KEY_CHARS
from ._store import Account
from ._wire import (
    OWNER_AUTH_TEXT,
    ROOM_NOT_FOUND_TEXT,
    Credentials,
    Refusal,
    Reply,
    opt_str,
    refuse,
    token_matches,
    valid_room_id,
)

if TYPE_CHECKING:
    from ._clock import RoomClock
    from ._store import RoomStore, SessionRow

__all__ = ["AGENT_NAME_REQUIRED_TEXT", "Accounts", "account_id", "agent_identity"]

# Ours (upstream's text was not read, PROTOCOL.md §9.7).
AGENT_NAME_REQUIRED_TEXT: Final = "name is required"


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


@final
@attrs.define(eq=False)
class Accounts:
    """Owner accounts and the authentication of session credentials.

    Args:
        store: the room's rows.
        clock: the room's clock (epoch ms).
        owner_tokens: owner bearer token → account login.
    """

    store: RoomStore
    clock: RoomClock
    owner_tokens: Mapping[str, str] = attrs.field(repr=False)
    _agents: dict[str, dict[str, dict[str, Any]]] = attrs.field(init=False, factory=dict)

    def __attrs_post_init__(self) -> None:
        for login in set(self.owner_tokens.values()):
            if self.store.get_account(login) is None:
                self.store.put_account(Account(account_id=account_id(login), login=login))

    def owner(self, owner_token: str | None) -> Account | None:
        """The account of an owner bearer token, if it is one."""
        if not owner_token:
            return None
        for token, login in self.owner_tokens.items():
            if hmac.compare_digest(token.encode("utf-8"), owner_token.encode("utf-8")):
                return self.store.get_account(login)
        return None

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

    def room_admin(self, room_id: str, owner_token: str | None, refusal: str) -> Account:
        """The person calling, if they are one of the room's admins; else refuse.

        With dev auth there are no memberships: a room's admins are the accounts
        that own at least one session (live or ended) in it.

        Args:
            room_id: the room (its existence is the caller's check).
            owner_token: the bearer token; a missing or unknown one is 401.
            refusal: the 403 text for a known account that is not an admin.
        """
        account = self.owner(owner_token)
        if account is None:
            refuse(401, OWNER_AUTH_TEXT)
        if not any(
            row.owner_account_id == account.account_id for row in self.store.room_sessions(room_id)
        ):
            refuse(403, refusal)
        return account

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
            The session's row, now heard (stored).
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
        self.store.put_session(heard)
        return heard
