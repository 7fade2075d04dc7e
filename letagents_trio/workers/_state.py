"""The local state file: one JSON object shared by every MCP server on the machine.

The file (``~/.letagents/mcp-state.json`` unless a path is given) holds the
owner's sign-in, the host id, the stored agent sessions and the worker handles
(PROTOCOL §6.3). The Node client reads and writes the same file, so this module
follows its protocol exactly; a Python and a Node server on one machine then
never lose each other's updates.

Reading needs no lock. Every write replaces the whole file by a rename, so a
reader sees the old file or the new one, never a mix. Three outcomes:

* the file is missing: an empty state, *complete* (nothing was ever stored);
* it cannot be read, is not valid JSON, is nested deeper than the parser or
  the writer can go, or is not a JSON object: an empty
  state, *incomplete*. Nothing is ever written over such a file; every write
  path raises :class:`StateUnavailable` so the user can restore it;
* otherwise the object, with every key kept, known or not.

Writing is only ever a locked read-modify-write (:meth:`LocalStateStore.update`);
an unlocked whole-file write would silently undo another process's update.
The bytes read and written are JSON exactly as the Node client parses and
stringifies it (:mod:`._nodejson`).

The lock is the file ``<path>.lock``, shared with the Node client; taking it,
breaking a stale one without ever removing a fresh one, and noticing a lost
one are :mod:`._statelock`'s concern.

Inside the lock everything is synchronous: re-read the file, refuse if it is
incomplete, call the update function on the parsed object, and write only if
the JSON changed, so a no-op or failed update leaves the file byte for byte
as it was. The write goes to ``<path>.<pid>.<12 hex>.tmp`` (mode 0600), is
flushed and fsynced, renamed over the target, and the temp file is removed in
``finally``. Right before the rename two checks refuse the write (raising
:class:`StateLockTimeout`, nothing written): the lock must still be ours and
safely short of the stale age (:meth:`HeldLock.ensure_held`), and the state
file must still be the one read (device, inode, size, mtime), so a write that
slipped past the lock is never undone. Each locked update first sweeps the
temp files of killed writers (:func:`._statelock.sweep_leftovers`). Because
no checkpoint happens while the lock is held, two trio tasks of one process
never contend for it, and a cancelled update has either done nothing or
everything.
"""

from __future__ import annotations

import errno
import logging
import os
import secrets
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, TypeVar, final

import attrs
import trio

from .._errors import StateError, StateLockTimeout, StateUnavailable
from ._names import is_durable_worker_id
from ._nodejson import decode_json, encode_json, json_type
from ._paths import STATE_FILE, letagents_file
from ._statelock import (
    HOLD_LIMIT,
    LOCK_POLL_INTERVAL,
    LOCK_STALE_AFTER,
    LOCK_TIMEOUT,
    HeldLock,
    acquire_lock,
    sweep_leftovers,
)
from ._stateparts import (
    PENDING_DEVICE_AUTH_KEY,
    STATE_UNAVAILABLE_MESSAGE,
    ensure_mapping,
    iso_now,
    mapping_at,
    parse_iso,
    session_in,
)

if TYPE_CHECKING:
    from .._session import AgentSession

__all__ = [
    "HOLD_LIMIT",
    "LOCK_POLL_INTERVAL",
    "LOCK_STALE_AFTER",
    "LOCK_TIMEOUT",
    "LocalStateStore",
    "OwnerAuth",
    "StateSnapshot",
]

logger = logging.getLogger("letagents_trio.state")

T = TypeVar("T")

# Owner-only: the file holds the owner's token and session tokens.
_FILE_MODE: Final = 0o600
# 12 hex characters of randomness in temp names, as the Node client uses.
_TEMP_RANDOM_BYTES: Final = 6
# Failures that say the disk cannot take a write (full, over quota, read-only),
# not that the state is damaged: the file is fine, and nothing is to be restored.
_NO_ROOM_ERRNOS: Final = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EROFS})


def _to_path(value: os.PathLike[str] | str | None) -> Path:
    return letagents_file(STATE_FILE) if value is None else Path(value)


@final
@attrs.frozen(kw_only=True)
class StateSnapshot:
    """One read of the state file.

    Attributes:
        data: the parsed object (empty when the file is missing or damaged).
            It holds secrets, so it is not shown in ``repr``. Treat as read-only.
        complete: ``False`` when the file exists but could not be used.
        problem: why the snapshot is incomplete, or ``None``.
    """

    data: Mapping[str, Any] = attrs.field(repr=False)
    complete: bool
    problem: str | None = None


@final
@attrs.frozen(kw_only=True)
class OwnerAuth:
    """The owner's stored sign-in (the ``auth`` record).

    Attributes:
        token: the owner's bearer token (never shown in ``repr``).
        expires_at: ISO time after which the token is void, or ``None``.
        account: the account the room reported (``login`` and so on), or ``None``.
        stored_at: ISO time the record was saved, or ``None`` if not recorded.
        source: how the token was obtained (``"device_flow"``), or ``None``.
    """

    token: str = attrs.field(repr=False)
    expires_at: str | None = None
    account: Mapping[str, Any] | None = None
    stored_at: str | None = None
    source: str | None = None


def _auth_expired(record: Mapping[str, Any], now: float) -> bool:
    expires_at = record.get("expires_at")
    if not isinstance(expires_at, str) or not expires_at:
        return False
    # An unparseable expiry is not an expiry (JavaScript's NaN compares false);
    # the room will answer 401 if the token is void, which clears it.
    deadline = parse_iso(expires_at)
    return deadline is not None and deadline < now


def _drop_expired_auth(state: dict[str, Any], now: float) -> bool:
    record = mapping_at(state, "auth")
    if record is not None and _auth_expired(record, now):
        del state["auth"]
        return True
    return False


@final
@attrs.define(eq=False)
class LocalStateStore:
    """The local state file, shared with other processes through its lock.

    Args:
        path: the state file; ``None`` means ``~/.letagents/mcp-state.json``
            (the MCP server passes ``LETAGENTS_STATE_PATH`` when it is set).
        wall_clock: Unix time source for timestamps, auth expiry and the stale
            lock check (tests pass one that follows a ``MockClock``).
    """

    path: Path = attrs.field(default=None, converter=_to_path)
    wall_clock: Callable[[], float] = attrs.field(default=time.time, kw_only=True, repr=False)
    # owner_token()'s cache: the file's identity when last read, and its auth record.
    _auth_seen: tuple[object, Mapping[str, Any] | None] | None = attrs.field(
        default=None, init=False, repr=False
    )

    @property
    def lock_path(self) -> Path:
        """``<path>.lock``, the lock file shared with the Node client."""
        return self.path.with_name(self.path.name + ".lock")

    # --- reading -------------------------------------------------------------

    def read(self) -> StateSnapshot:
        """Read the file without the lock (writes are atomic renames).

        A short synchronous file read. A missing file gives an empty, complete
        snapshot; an unreadable, invalid or non-object file gives an empty,
        incomplete one with the reason in ``problem``.
        """
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return StateSnapshot(data={}, complete=True)
        except OSError as exc:
            return StateSnapshot(data={}, complete=False, problem=f"unreadable: {exc}")
        try:
            data = decode_json(raw)
            encode_json(data if isinstance(data, dict) else {})  # every writer must manage it
        except (UnicodeDecodeError, ValueError) as exc:
            return StateSnapshot(data={}, complete=False, problem=f"not valid JSON: {exc}")
        except RecursionError:
            # Valid JSON, but nested deeper than the parser or the writer can go.
            return StateSnapshot(data={}, complete=False, problem="nested too deeply")
        if not isinstance(data, dict):
            return StateSnapshot(
                data={}, complete=False, problem=f"not a JSON object but {json_type(data)}"
            )
        return StateSnapshot(data=data, complete=True)

    def stored_session(self, session_id: str) -> AgentSession | None:
        """The stored record of a session, or ``None``.

        ``None`` also when the file is damaged or the record is malformed,
        as the Node client's plain read gives an empty state then.
        """
        return session_in(self.read().data, session_id)

    async def is_still_ours(self, session: AgentSession) -> bool:
        """True while the session is stored, not ended, and has the same token.

        The connection manager asks this before each attempt: a session that
        another process replaced, or that was marked ended, is no longer held.
        Any problem reading the file counts as "not ours".

        Cancellation:
            A checkpoint, then a short synchronous read; nothing to clean up.
        """
        await trio.lowlevel.checkpoint()
        stored = self.stored_session(session.session_id)  # read() absorbs every read error
        return (
            stored is not None
            and stored.ended_at is None
            and secrets.compare_digest(stored.session_token, session.session_token)
        )

    def auth(self) -> OwnerAuth | None:
        """The owner's sign-in, or ``None`` when absent, malformed, expired or unreadable.

        An expired record is removed by the next locked update, or at once by
        :meth:`clear_expired_auth`.
        """
        record = mapping_at(self.read().data, "auth")
        if record is None or _auth_expired(record, self.wall_clock()):
            return None
        token = record.get("token")
        if not isinstance(token, str) or not token:
            return None
        account = mapping_at(record, "account")

        def text(key: str) -> str | None:
            value = record.get(key)
            return value if isinstance(value, str) else None

        return OwnerAuth(
            token=token,
            expires_at=text("expires_at"),
            account=dict(account) if account is not None else None,
            stored_at=text("stored_at"),
            source=text("source"),
        )

    def owner_token(self) -> str | None:
        """The stored owner token now, cheaply: the file is re-read only when it changed.

        The file's identity (inode, size, mtime in ns) is compared with the
        last read's; every write is a rename, so a changed file always shows a
        new identity. Expiry is checked on every call. ``None`` when there is
        no usable sign-in or the file cannot be read. For
        :class:`~letagents_trio.RoomClient`'s ``owner_token`` source, which
        asks before every request (PROTOCOL §2: the Node client reads the
        token afresh for every request).
        """
        try:
            stat = self.path.stat()
        except OSError:
            self._auth_seen = None
            return None
        seen = (stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if self._auth_seen is None or self._auth_seen[0] != seen:
            self._auth_seen = (seen, mapping_at(self.read().data, "auth"))
        record = self._auth_seen[1]
        if record is None or _auth_expired(record, self.wall_clock()):
            return None
        token = record.get("token")
        return token if isinstance(token, str) and token else None

    # --- writing -------------------------------------------------------------

    async def update(self, fn: Callable[[dict[str, Any]], T]) -> T:
        """Apply ``fn`` to the state under the lock and write the result back.

        ``fn`` receives the freshly re-read state object, changes it in place and
        returns any value, which ``update`` returns. The file is written only if
        the JSON changed. An expired owner ``auth`` record is dropped on the way.

        Raises:
            StateUnavailable: the file exists but is damaged or unreadable; ``fn``
                is not called and nothing is written.
            StateLockTimeout: another process held the lock for 2 s; or this
                update held it past ``HOLD_LIMIT`` (9 s) or lost it, or the file
                changed under it, and wrote nothing. Retrying is safe.
            StateError: the new file could not be written (the old one stays).
            Exception: whatever ``fn`` raises; nothing is written then.

        Cancellation:
            A checkpoint first; cancellation can also land while waiting for
            another process's lock, before anything was done. Once the lock is
            taken the read-modify-write runs synchronously to the end, so a
            cancelled update never leaves a half-done change or a lock file.
        """
        await trio.lowlevel.checkpoint()
        return await self._with_lock(lambda held: self._update_locked(held, fn))

    async def end_session(self, session_id: str, ended_at: str | None, expected_token: str) -> bool:
        """Mark a stored session ended, guarded by its token (PROTOCOL §6.5).

        Nothing happens if the record is missing, or if it belongs to a durable
        worker (``agent_instance_id`` is a worker id) and ``expected_token`` is
        not its token: a late answer about a predecessor cannot end its
        successor. Otherwise ``ended_at``, ``updated_at`` and ``last_seen_at``
        become ``ended_at`` (None: now, by the store's ``wall_clock``) and the id leaves
        ``current_agent_session_ids``.

        Returns:
            True if the record was marked ended.

        Raises:
            StateUnavailable, StateLockTimeout, StateError: as :meth:`update`.

        Cancellation:
            As :meth:`update`.
        """

        def end(state: dict[str, Any]) -> bool:
            sessions = mapping_at(state, "agent_sessions")
            record = None if sessions is None else sessions.get(session_id)
            if not isinstance(record, dict):
                return False
            stored_token = record.get("session_token")
            instance_id = record.get("agent_instance_id")
            durable = isinstance(instance_id, str) and is_durable_worker_id(instance_id)
            if durable and not (
                isinstance(stored_token, str)
                and secrets.compare_digest(stored_token, expected_token)
            ):
                return False
            stamp = iso_now(self.wall_clock) if ended_at is None else ended_at
            record["ended_at"] = record["updated_at"] = record["last_seen_at"] = stamp
            current = mapping_at(state, "current_agent_session_ids")
            if current is not None:
                for room_id in [k for k, v in current.items() if v == session_id]:
                    del state["current_agent_session_ids"][room_id]
            return True

        return await self.update(end)

    async def mark_ended(self, session: AgentSession) -> None:
        """The connection manager's ``on_ended`` hook: the room says this session ended.

        Ends the stored record now, guarded by the session's own token. Errors
        are logged (without secrets), never raised: the room has already spoken.

        Cancellation:
            As :meth:`update`; a cancellation is re-raised, not logged.
        """
        try:
            await self.end_session(
                session.session_id, iso_now(self.wall_clock), session.session_token
            )
        except (StateError, OSError) as exc:
            logger.warning(
                "could not mark session %s ended in %s: %s", session.session_id, self.path, exc
            )

    async def save_auth(
        self,
        token: str,
        *,
        expires_at: str | None = None,
        account: Mapping[str, Any] | None = None,
        source: str = "device_flow",
    ) -> None:
        """Store the owner's sign-in, replacing the known fields of any previous one.

        Unknown keys of an existing record are kept. A pending device sign-in
        (``pending_device_auth``) is over once a sign-in is stored, and is
        removed in the same write, as the Node client does.

        Raises:
            StateUnavailable: the file is damaged, or ``auth`` is not an object.
            StateLockTimeout, StateError: as :meth:`update`.

        Cancellation:
            As :meth:`update`.
        """
        stored_at = iso_now(self.wall_clock)

        def save(state: dict[str, Any]) -> None:
            record = ensure_mapping(state, "auth")
            for key in ("token", "expires_at", "account", "stored_at", "source"):
                record.pop(key, None)
            record["token"] = token
            if expires_at is not None:
                record["expires_at"] = expires_at
            if account is not None:
                record["account"] = dict(account)
            record["stored_at"] = stored_at
            record["source"] = source
            state.pop(PENDING_DEVICE_AUTH_KEY, None)

        await self.update(save)

    async def clear_auth(self, refused_token: str | None = None) -> bool:
        """Forget the owner's sign-in (after a 401 on an owner call).

        Args:
            refused_token: the token the room refused: the sign-in is forgotten
                only if it is the stored one (compared under the lock), so a
                wrong ``LETAGENTS_TOKEN`` never signs every other process on
                the machine out, nor does a refusal that raced a new sign-in.
                None forgets the sign-in whatever it holds.

        Returns:
            True if a record was removed.

        Cancellation:
            As :meth:`update`.
        """

        def clear(state: dict[str, Any]) -> bool:
            if refused_token is not None:
                record = mapping_at(state, "auth")
                stored = record.get("token") if record is not None else None
                if not isinstance(stored, str) or not secrets.compare_digest(
                    stored.encode("utf-8"), refused_token.encode("utf-8")
                ):
                    return False
            return state.pop("auth", None) is not None

        return await self.update(clear)

    async def clear_expired_auth(self) -> bool:
        """Remove the owner's sign-in if it has expired.

        Returns:
            True if an expired record was removed.

        Cancellation:
            As :meth:`update`.
        """
        await trio.lowlevel.checkpoint()
        return await self._with_lock(
            lambda held: self._update_locked(
                held, lambda state: _drop_expired_auth(state, self.wall_clock()), drop_expired=False
            )
        )

    # --- the lock and the atomic write ---------------------------------------

    async def _with_lock(self, callback: Callable[[HeldLock], T]) -> T:
        lock = self.lock_path
        try:
            lock.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self._not_locked(exc, f"cannot create {lock.parent}") from exc
        try:
            held = await acquire_lock(lock, self.wall_clock)
        except OSError as exc:
            raise self._not_locked(exc, f"cannot create the lock {lock}") from exc
        try:
            return callback(held)
        finally:
            held.release()

    def _update_locked(
        self, held: HeldLock, fn: Callable[[dict[str, Any]], T], *, drop_expired: bool = True
    ) -> T:
        sweep_leftovers(self.path, self.wall_clock)
        read_identity = self._file_identity()
        snapshot = self.read()
        if not snapshot.complete:
            raise self._unavailable(snapshot.problem)
        state = dict(snapshot.data)
        before = encode_json(state)
        if drop_expired:
            _drop_expired_auth(state, self.wall_clock())
        result = fn(state)
        after = encode_json(state)
        if after != before:
            self._write_atomic(after, held, read_identity)
        return result

    def _file_identity(self) -> tuple[int, int, int, int] | None:
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise self._unavailable(f"unreadable: {exc}") from exc
        return (stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns)

    def _ensure_unchanged(self, held: HeldLock, read_identity: object) -> None:
        """Refuse to write unless the lock is ours and the file is the one read."""
        held.ensure_held()
        if self._file_identity() != read_identity:
            raise StateLockTimeout(
                f"The local state file {self.path} changed while we held the lock at"
                f" {held.path}; nothing was written"
            )

    def _write_atomic(self, payload: bytes, held: HeldLock, read_identity: object) -> None:
        temp = self.path.with_name(
            f"{self.path.name}.{os.getpid()}.{secrets.token_hex(_TEMP_RANDOM_BYTES)}.tmp"
        )
        try:
            fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, _FILE_MODE)
            try:
                if hasattr(os, "fchmod"):  # POSIX: whatever the umask, exactly 0600
                    os.fchmod(fd, _FILE_MODE)
                view = memoryview(payload)
                while view:
                    view = view[os.write(fd, view) :]
                os.fsync(fd)
            finally:
                os.close(fd)
            self._ensure_unchanged(held, read_identity)
            os.replace(temp, self.path)
        except OSError as exc:
            raise self._not_written(exc) from exc
        finally:
            temp.unlink(missing_ok=True)

    def _not_written(self, exc: OSError) -> StateError:
        reason = errno.errorcode.get(exc.errno or 0, "") or type(exc).__name__
        return StateError(
            f"Could not write the local state file {self.path} ({reason}: {exc.strerror});"
            " it is unchanged"
        )

    def _not_locked(self, exc: OSError, problem: str) -> StateError:
        """A lock that cannot be taken: the disk refused a write (a full disk is no
        damage to restore), or the state cannot be reached there at all."""
        if exc.errno in _NO_ROOM_ERRNOS:
            return self._not_written(exc)
        return self._unavailable(f"{problem}: {exc}")

    def _unavailable(self, problem: str | None) -> StateUnavailable:
        error = StateUnavailable(STATE_UNAVAILABLE_MESSAGE)
        error.add_note(f"state file {self.path}: {problem}")
        return error
