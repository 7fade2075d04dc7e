"""Who registers a worker: the owner, and their account login (PROTOCOL §5.2).

Who registers is an :class:`Owner`: the account login of the state file's
sign-in (``auth.account.login``) when the client's token is that sign-in's,
else from ``GET /agents/me`` (:func:`account_login`), or the local owner slug
without an owner token (:class:`AccountCache`). A hosted room refuses a
registration without an account (:func:`no_sign_in`).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING, final
from urllib.parse import urlsplit

import attrs
import trio

from .._errors import ApiError, LetAgentsError, RoomUnreachable, WorkerError
from ._paths import OWNER_TOKEN_ENV
from ._wire import (
    ACCOUNT_UNVERIFIED_TEXT,
    DAMAGED_STATE_SIGN_IN_TEXT,
    EMBEDDER_WORDING,
    NO_ACCOUNT_ADVICE,
    NOT_A_ROOM_ADVICE,
    RESTART_ADVICE,
    ROOM_FAILING_ADVICE,
    SIGN_IN_AGAIN_ADVICE,
    TOKEN_REFUSED_ADVICE,
    UNREACHABLE_ADVICE,
    HostWording,
    sign_in_text,
)

if TYPE_CHECKING:
    from .._client import RoomClient
    from ._state import LocalStateStore

__all__ = ["AccountCache", "Owner", "account_login", "no_sign_in"]

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
