"""Signing the owner in with the device flow, and out again: the host layer of onboarding.

The room's device flow (``POST /auth/device/start``, ``GET
/auth/device/poll/{request_id}``) ends in an owner token, which is stored in
the state file exactly where the Node client stores a sign-in, so either
server on the machine finds it (PROTOCOL §6.3):

* ``pending_device_auth``, while a sign-in is started and not finished:
  ``request_id``, ``user_code``, ``verification_uri``, ``interval_seconds``,
  ``expires_at`` (ISO), ``started_at`` (ISO) and ``suggested_room_id`` when
  known. An expired one counts as absent (and the next update here drops it).
* ``auth``, once approved (:meth:`~._state.LocalStateStore.save_auth`, which
  removes ``pending_device_auth`` in the same write): ``token``,
  ``expires_at`` when the room gave one, ``account``, ``stored_at``,
  ``source: "device_flow"``.

Every write is one locked update of the state file (``0600``, atomic), so a
failure leaves it as it was. The token is in the poll's answer and nowhere
else: it is written to the file and never returned, logged or put in an
error. The ``request_id`` is a secret too (whoever holds it may collect the
token once the person approved), so it is kept in the file and never put in
an answer; it is part of the poll's path (the API's route), which an HTTP log
at ``DEBUG`` shows.

A denied, expired or unknown request forgets the pending sign-in and keeps
any sign-in stored before it (the Node client forgets that one too; a
refused *new* sign-in signing the machine out helps no one).
:func:`clear_sign_in` removes the sign-in and the pending request, and
nothing else of the file.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, final
from urllib.parse import quote

import attrs

from .._errors import ApiError, RoomUnreachable, WorkerError
from ._stateparts import PENDING_DEVICE_AUTH_KEY, iso_now, mapping_at, parse_iso

if TYPE_CHECKING:
    from .._client import RoomClient
    from ._state import LocalStateStore

__all__ = [
    "DENIED_TEXT",
    "NO_PENDING_TEXT",
    "PendingSignIn",
    "PollOutcome",
    "clear_sign_in",
    "pending_sign_in",
    "poll_sign_in",
    "start_sign_in",
]

START_PATH: Final = "/auth/device/start"
POLL_PATH: Final = "/auth/device/poll/"
# The Node client's text when nothing is saved and no request_id was passed.
NO_PENDING_TEXT: Final = "No pending device auth request found."
# Ours: what a chat does about a request the room no longer knows, was denied, or expired.
UNKNOWN_TEXT: Final = (
    "The device sign-in is unknown to the room or expired ({detail}). Start again with"
    " start_device_auth."
)
DENIED_TEXT: Final = (
    "The person denied the device sign-in. Start again with start_device_auth if that was"
    " a mistake."
)
EXPIRED_TEXT: Final = "The device sign-in expired before it was approved. Start again."
# What each refusal of a poll says (None: the unknown-request text, with the room's words).
_REFUSED: Final[Mapping[int, str | None]] = {403: DENIED_TEXT, 404: None, 410: EXPIRED_TEXT}
NO_TOKEN_TEXT: Final = (
    "The room authorized the device sign-in but sent no token; nothing was stored."
)


@final
@attrs.frozen(kw_only=True)
class PendingSignIn:
    """A started device sign-in, as the state file keeps it.

    Attributes:
        request_id: the room's request id (a secret: never shown).
        user_code: the code the person types on the page.
        verification_uri: the page where the person approves.
        interval_seconds: how long to wait between polls.
        expires_at: ISO time the code expires.
        started_at: ISO time it was started.
        suggested_room_id: a room to join once signed in, if one was named.
    """

    request_id: str = attrs.field(repr=False)
    user_code: str
    verification_uri: str
    interval_seconds: int
    expires_at: str
    started_at: str
    suggested_room_id: str | None = None

    def record(self) -> dict[str, Any]:
        """The state file's ``pending_device_auth`` record, in the Node client's key order."""
        fields = attrs.asdict(self)
        return {key: value for key, value in fields.items() if value is not None}

    def public(self) -> dict[str, Any]:
        """What a chat may see: everything but the request id."""
        shown = self.record()
        del shown["request_id"]
        return shown


@final
@attrs.frozen(kw_only=True)
class PollOutcome:
    """What a poll came to: still ``pending`` (or ``slow_down``), or ``authorized``.

    Attributes:
        status: ``pending``, ``slow_down`` or ``authorized``.
        interval: seconds to wait before the next poll (not authorized).
        expires_in: seconds left to approve (not authorized), if the room said.
        account: the signed-in account (authorized).
        expires_at: when the stored token expires, if the room said.
        suggested_room_id: the room the sign-in was started for, if any.
    """

    status: str
    interval: int | None = None
    expires_in: int | None = None
    account: Mapping[str, Any] | None = None
    expires_at: str | None = None
    suggested_room_id: str | None = None


def _int(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def _from_record(record: Mapping[str, Any]) -> PendingSignIn | None:
    try:
        return PendingSignIn(
            request_id=record["request_id"],
            user_code=record["user_code"],
            verification_uri=record["verification_uri"],
            interval_seconds=_int(record.get("interval_seconds")) or 5,
            expires_at=record["expires_at"],
            started_at=record.get("started_at") or record["expires_at"],
            suggested_room_id=record.get("suggested_room_id") or None,
        )
    except (KeyError, TypeError):
        return None


def _expired(pending: PendingSignIn, now: float) -> bool:
    deadline = parse_iso(pending.expires_at)
    return deadline is not None and deadline <= now


def pending_sign_in(
    data: Mapping[str, Any], wall_clock: Callable[[], float] = time.time
) -> PendingSignIn | None:
    """The state's pending device sign-in, unless absent, malformed or expired."""
    record = mapping_at(data, PENDING_DEVICE_AUTH_KEY)
    pending = None if record is None else _from_record(record)
    if pending is None or _expired(pending, wall_clock()):
        return None
    return pending


async def start_sign_in(
    client: RoomClient,
    store: LocalStateStore,
    *,
    suggested_room_id: str | None = None,
    force: bool = False,
) -> tuple[PendingSignIn, bool]:
    """Start a device sign-in, or reuse the one pending (unless ``force``).

    Returns:
        The pending sign-in and whether it was reused.

    Raises:
        ApiError, RoomUnreachable: the room refused or did not answer; nothing
            was written.
        StateUnavailable, StateError: the state file could not be written.

    Cancellation:
        A checkpoint; cancelled before the state file is written, the room's
        request is simply never polled (it expires).
    """
    existing = pending_sign_in(store.read().data, store.wall_clock)
    if existing is not None and not force:
        return existing, True
    answer = await client.call("POST", START_PATH)
    fields = answer if isinstance(answer, Mapping) else {}
    texts = [fields.get(key) for key in ("request_id", "user_code", "verification_uri")]
    expires_in, interval = _int(fields.get("expires_in")), _int(fields.get("interval"))
    if not all(isinstance(text, str) and text for text in texts) or expires_in is None:
        raise RoomUnreachable(f"POST {START_PATH} answered without a device sign-in")
    now = store.wall_clock()
    pending = PendingSignIn(
        request_id=str(texts[0]),
        user_code=str(texts[1]),
        verification_uri=str(texts[2]),
        interval_seconds=interval or 5,
        expires_at=iso_now(lambda: now + expires_in),
        started_at=iso_now(lambda: now),
        suggested_room_id=suggested_room_id,
    )

    def save(state: dict[str, Any]) -> None:
        state[PENDING_DEVICE_AUTH_KEY] = pending.record()

    await store.update(save)
    return pending, False


async def _forget_pending(store: LocalStateStore, request_id: str) -> None:
    """Drop the pending sign-in if it is still ``request_id``'s (another may have replaced it)."""

    def forget(state: dict[str, Any]) -> None:
        record = mapping_at(state, PENDING_DEVICE_AUTH_KEY)
        if record is not None and record.get("request_id") == request_id:
            del state[PENDING_DEVICE_AUTH_KEY]

    await store.update(forget)


async def poll_sign_in(
    client: RoomClient, store: LocalStateStore, *, request_id: str | None = None
) -> PollOutcome:
    """Poll the pending device sign-in (or ``request_id``'s); store the token once authorized.

    Raises:
        WorkerError: nothing is pending; the request is unknown, expired or
            denied (the pending record is dropped, any earlier sign-in kept);
            or the room authorized without a token (nothing stored).
        ApiError, RoomUnreachable: another refusal, or no answer.
        StateUnavailable, StateError: the state file could not be written.

    Cancellation:
        A checkpoint; cancelled after the room handed out the token but before
        it was stored, the token is lost and the person approves again.
    """
    saved = pending_sign_in(store.read().data, store.wall_clock)
    pending = saved if request_id is None or (saved and saved.request_id == request_id) else None
    asked = request_id or (pending.request_id if pending is not None else None)
    if asked is None:
        raise WorkerError(NO_PENDING_TEXT)
    try:
        answer = await client.call("GET", POLL_PATH + quote(asked, safe=""))
    except ApiError as exc:
        if exc.status == 429:
            return PollOutcome(status="slow_down", interval=_interval_of(exc.body, pending))
        if exc.status not in _REFUSED:
            raise
        refusal: str | None = _REFUSED[exc.status] or UNKNOWN_TEXT.format(detail=str(exc))
    else:
        refusal = None
    if refusal is not None:
        await _forget_pending(store, asked)
        raise WorkerError(refusal)
    fields: Mapping[str, Any] = answer if isinstance(answer, Mapping) else {}
    status = fields.get("status")
    suggested = None if pending is None else pending.suggested_room_id
    if status in ("pending", "slow_down"):
        return PollOutcome(
            status=str(status),
            interval=_int(fields.get("interval")),
            expires_in=_int(fields.get("expires_in")),
            suggested_room_id=suggested,
        )
    token = fields.get("letagents_token")
    if status != "authorized" or not isinstance(token, str) or not token:
        raise WorkerError(NO_TOKEN_TEXT)
    account = fields.get("account") if isinstance(fields.get("account"), Mapping) else None
    expires_at = fields.get("expires_at") if isinstance(fields.get("expires_at"), str) else None
    await store.save_auth(token, expires_at=expires_at, account=account)
    return PollOutcome(
        status="authorized", account=account, expires_at=expires_at, suggested_room_id=suggested
    )


def _interval_of(body: str, pending: PendingSignIn | None) -> int:

    try:
        parsed = json.loads(body)
    except ValueError:
        parsed = None
    interval = _int(parsed.get("interval")) if isinstance(parsed, dict) else None
    return interval or (pending.interval_seconds if pending is not None else 5)


async def clear_sign_in(store: LocalStateStore) -> dict[str, bool]:
    """Remove the stored sign-in and the pending one, and nothing else.

    Returns:
        ``{"auth": removed?, "pending_device_auth": removed?}``.

    Cancellation:
        As :meth:`~._state.LocalStateStore.update`.
    """

    def clear(state: dict[str, Any]) -> dict[str, bool]:
        return {
            "auth": state.pop("auth", None) is not None,
            PENDING_DEVICE_AUTH_KEY: state.pop(PENDING_DEVICE_AUTH_KEY, None) is not None,
        }

    return await store.update(clear)
