"""Device sign-in: a program asks for a code, a person approves it, the program gets a token.

The letagents API runs GitHub's device flow; the reference room has no GitHub,
so it plays both parts itself, with the API's routes, fields and statuses:

1. ``POST /auth/device/start`` (no credential): the room makes a request id
   (32 hex), a *user code* (``XXXX-XXXX``) and answers 201 with
   ``request_id``, ``user_code``, ``verification_uri`` (the room's own
   approval page, ``/device``), ``expires_in`` (seconds) and ``interval``
   (the seconds a poller waits between polls).
2. A person opens the page, signs in there with their person token and
   approves (or denies) the user code (:meth:`DeviceSignIn.decide`).
3. ``GET /auth/device/poll/{request_id}``: ``pending`` (with ``interval`` and
   ``expires_in``) until the person decided; then, once, ``authorized`` with a
   fresh owner token (``letagents_token``) for the approving person's account,
   or 403 ``{"status": "denied"}``. Polling again within ``interval`` seconds
   is 429 ``Polling too quickly``; a request that is unknown, already
   answered or past its expiry is 404
   ``Unknown or expired device authorization request``.

Pending requests live in memory, as the API keeps them: a restart forgets
them (the program starts again). The tokens they end in are rows
(:class:`~.._storage._auth_rows.MintedTokenRow`, only their SHA-256), so a
signed-in program stays signed in across a restart over the same SQLite
file. A token appears once, in the answer of the poll that authorizes it.
"""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING, Final, final

import attrs

from .._storage._auth_rows import MintedTokenRow
from .._wire import Reply, hash_token, random_code

if TYPE_CHECKING:
    from .._clock import RoomClock
    from .._storage._rows import Account
    from .._storage._store import RoomStore
    from ._accounts import Accounts

__all__ = [
    "DEVICE_CODE_TTL",
    "DEVICE_PAGE_PATH",
    "DEVICE_POLL_INTERVAL",
    "UNKNOWN_REQUEST_TEXT",
    "DeviceSignIn",
    "normalize_user_code",
]

# How long a user code can be approved: GitHub's device codes last 15 minutes.
DEVICE_CODE_TTL: Final = 900
# Seconds between polls: GitHub's default interval.
DEVICE_POLL_INTERVAL: Final = 5
# The approval page, on the room's own address.
DEVICE_PAGE_PATH: Final = "/device"
# The API's texts.
UNKNOWN_REQUEST_TEXT: Final = "Unknown or expired device authorization request"
POLLING_TOO_QUICKLY_TEXT: Final = "Polling too quickly"
# Pending requests beyond this are refused (503) rather than kept: memory is bounded.
MAX_PENDING: Final = 10_000
# The answer when that many are pending.
TOO_MANY_PENDING_TEXT: Final = "Too many device sign-ins are pending. Try again later."


def normalize_user_code(code: str) -> str:
    """A user code as typed (any case, spaces, with or without its dash) in canonical form."""
    compact = "".join(code.split()).replace("-", "").upper()
    return f"{compact[:4]}-{compact[4:]}" if len(compact) == 8 else compact


@final
@attrs.define(eq=False)
class _Pending:
    user_code: str
    expires_at: int
    interval: int
    last_poll_at: int | None = None
    approved_login: str | None = None
    denied: bool = False


@final
@attrs.frozen(kw_only=True)
class Decision:
    """What a person's decision on the page came to (the page renders it).

    Attributes:
        status: the page's HTTP status.
        outcome: ``approved``, ``denied``, ``unknown_code``, ``not_signed_in``
            or ``already_decided``.
        login: the account that decided, when one did.
    """

    status: int
    outcome: str
    login: str | None = None


@final
@attrs.define(eq=False)
class DeviceSignIn:
    """The room's device sign-in: pending requests and the tokens they end in.

    Args:
        store: where minted tokens are kept.
        clock: the room's clock.
        accounts: who a person's token belongs to.
    """

    store: RoomStore
    clock: RoomClock
    accounts: Accounts
    _pending: dict[str, _Pending] = attrs.field(factory=dict, init=False, repr=False)

    def _forget_expired(self, now: int) -> None:
        for request_id in [k for k, p in self._pending.items() if p.expires_at <= now]:
            del self._pending[request_id]

    def start(self, base_url: str) -> Reply:
        """``POST /auth/device/start``: a new request (201), shown on ``base_url``'s page."""
        now = self.clock.now_ms()
        self._forget_expired(now)
        if len(self._pending) >= MAX_PENDING:
            return Reply(status=503, body={"error": TOO_MANY_PENDING_TEXT})
        request_id = secrets.token_hex(16)
        taken = {p.user_code for p in self._pending.values()}
        code = random_code()
        while code in taken:  # 27**8 codes: a clash is rare, and retried
            code = random_code()
        self._pending[request_id] = _Pending(
            user_code=code, expires_at=now + DEVICE_CODE_TTL * 1000, interval=DEVICE_POLL_INTERVAL
        )
        return Reply(
            status=201,
            body={
                "request_id": request_id,
                "user_code": code,
                "verification_uri": base_url.rstrip("/") + DEVICE_PAGE_PATH,
                "expires_in": DEVICE_CODE_TTL,
                "interval": DEVICE_POLL_INTERVAL,
            },
        )

    def poll(self, request_id: str) -> Reply:
        """``GET /auth/device/poll/{request_id}``: pending, authorized (once), or refused."""
        now = self.clock.now_ms()
        self._forget_expired(now)
        pending = self._pending.get(request_id)
        if pending is None:
            return Reply(status=404, body={"error": UNKNOWN_REQUEST_TEXT})
        if (
            pending.last_poll_at is not None
            and now - pending.last_poll_at < pending.interval * 1000
        ):
            return Reply(
                status=429, body={"error": POLLING_TOO_QUICKLY_TEXT, "interval": pending.interval}
            )
        pending.last_poll_at = now
        if pending.denied:
            del self._pending[request_id]
            return Reply(status=403, body={"status": "denied"})
        if pending.approved_login is None:
            return Reply(
                status=200,
                body={
                    "status": "pending",
                    "interval": pending.interval,
                    "expires_in": max(0, -(-(pending.expires_at - now) // 1000)),
                },
            )
        account = self.accounts.account(pending.approved_login)
        token = secrets.token_hex(32)
        row = MintedTokenRow(token_hash=hash_token(token), login=account.login, created_at=now)
        self.store.put_minted_token(row)  # a refused write answers 507/503; the request stays
        del self._pending[request_id]
        return Reply(status=200, body=_authorized(token, row, account))

    def decide(self, user_code: str, person_token: str | None, *, approve: bool) -> Decision:
        """A person approves or denies ``user_code``, signed in by ``person_token``."""
        found = self.accounts.bearer(person_token)
        if found is None or not found[1]:
            return Decision(status=401, outcome="not_signed_in")
        account, _ = found
        now = self.clock.now_ms()
        self._forget_expired(now)
        code = normalize_user_code(user_code)
        pending = next((p for p in self._pending.values() if p.user_code == code), None)
        if pending is None:
            return Decision(status=404, outcome="unknown_code", login=account.login)
        if pending.denied or pending.approved_login is not None:
            return Decision(status=409, outcome="already_decided", login=account.login)
        if approve:
            pending.approved_login = account.login
            return Decision(status=200, outcome="approved", login=account.login)
        pending.denied = True
        return Decision(status=200, outcome="denied", login=account.login)


def _authorized(token: str, row: MintedTokenRow, account: Account) -> dict[str, object]:
    return {
        "status": "authorized",
        "letagents_token": token,
        "owner_token_id": "otok_" + row.token_hash[:24],
        "oauth_token_expires_at": None,
        "account": {
            "id": account.account_id,
            "login": account.login,
            "display_name": account.login,
            "avatar_url": None,
            "provider": "letagents_room",
            "provider_user_id": account.account_id,
        },
    }
