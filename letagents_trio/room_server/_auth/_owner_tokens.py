"""The reference room's owner tokens, from a file, the environment or the command line.

An owner token is a bearer secret, so how it reaches the room matters: any
local user can read another process's command line (``/proc/PID/cmdline``,
``ps``), so ``--owner-token TOKEN=LOGIN`` is for single-user machines. The
safe forms:

* ``--owner-tokens-file PATH``: one ``TOKEN=LOGIN`` per line; blank lines and
  lines starting with ``#`` are ignored. The file must be a regular file owned
  by the user running the room, with no access for group or others (``0600``
  or ``0400``), else the room refuses to start, before reading a byte of it;
* :data:`OWNER_TOKENS_ENV` (``LETAGENTS_ROOM_OWNER_TOKENS``): ``TOKEN=LOGIN``
  entries separated by commas or newlines (a process's environment is
  readable by its own user only).

All sources are merged; one token given two different logins is an error.
Errors name the source and the line or entry number, never the token.

*Person tokens* (a person signed in, who alone may change a room's settings)
come the same two safe ways: ``--person-tokens-file PATH`` and
:data:`PERSON_TOKENS_ENV` (``LETAGENTS_ROOM_PERSON_TOKENS``), with the same
rules (the ``kind`` and ``variable`` arguments below).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final

__all__ = [
    "OWNER_TOKENS_ENV",
    "PERSON_TOKENS_ENV",
    "OwnerTokensError",
    "merge_owner_tokens",
    "owner_tokens_from_env",
    "parse_entry",
    "read_owner_tokens_file",
]

# The environment variable the room CLI reads owner tokens from.
OWNER_TOKENS_ENV: Final = "LETAGENTS_ROOM_OWNER_TOKENS"
# The environment variable the room CLI reads person (sign-in) tokens from.
PERSON_TOKENS_ENV: Final = "LETAGENTS_ROOM_PERSON_TOKENS"
# A tokens file is a few lines; anything larger is not one, and is not read whole.
MAX_TOKENS_FILE_BYTES: Final = 1024 * 1024
# Group and other permission bits: a tokens file with any of them is refused.
_SHARED_BITS: Final = 0o077


class OwnerTokensError(ValueError):
    """Owner tokens could not be read; the message never contains a token."""


def parse_entry(entry: str) -> tuple[str, str] | None:
    """``TOKEN=LOGIN`` as a pair, or ``None`` if it is not one (a login has no ``/``)."""
    token, sep, login = entry.strip().partition("=")
    token, login = token.strip(), login.strip()
    if not sep or not token or not login or "/" in login:
        return None
    return token, login


def _parse_all(entries: Iterable[tuple[int, str]], where: str) -> dict[str, str]:
    tokens: dict[str, str] = {}
    for number, entry in entries:
        pair = parse_entry(entry)
        if pair is None:
            raise OwnerTokensError(f"{where} {number}: expected TOKEN=LOGIN (a login has no '/')")
        merge_owner_tokens(tokens, dict([pair]), f"{where} {number}")
    return tokens


def merge_owner_tokens(into: dict[str, str], more: Mapping[str, str], where: str) -> None:
    """Add ``more`` to ``into``; a token already mapped to another login is an error."""
    for token, login in more.items():
        if into.setdefault(token, login) != login:
            raise OwnerTokensError(f"{where}: a token is given two different logins")


def _check_private(path: Path, info: os.stat_result, kind: str) -> None:
    if not stat.S_ISREG(info.st_mode):
        raise OwnerTokensError(f"{kind} file {path}: not a regular file")
    if hasattr(os, "geteuid") and info.st_uid != os.geteuid():
        raise OwnerTokensError(
            f"{kind} file {path}: owned by uid {info.st_uid}, not by this user (uid {os.geteuid()})"
        )
    mode = stat.S_IMODE(info.st_mode)
    if mode & _SHARED_BITS:
        raise OwnerTokensError(
            f"{kind} file {path}: mode {mode:04o} lets other users read or change it;"
            f" it must be 0600 (chmod 600 {path})"
        )


def read_owner_tokens_file(path: Path, *, kind: str = "owner tokens") -> dict[str, str]:
    """The tokens in ``path``, after checking it is the user's own and private.

    ``kind`` names the file in errors (``"person tokens"`` for those).

    Raises:
        OwnerTokensError: missing, not a regular file, not owned by this user,
            readable or writable by group or others, too large, or a line is
            not ``TOKEN=LOGIN``.
    """
    try:
        # O_NONBLOCK: a FIFO in its place must not hang the start-up.
        flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
        fd = os.open(path, flags)
    except OSError as exc:
        raise OwnerTokensError(f"{kind} file {path}: {exc.strerror}") from exc
    try:
        _check_private(path, os.fstat(fd), kind)
        raw = b""
        while len(raw) <= MAX_TOKENS_FILE_BYTES and (
            chunk := os.read(fd, MAX_TOKENS_FILE_BYTES + 1 - len(raw))
        ):
            raw += chunk
    finally:
        os.close(fd)
    if len(raw) > MAX_TOKENS_FILE_BYTES:
        raise OwnerTokensError(f"{kind} file {path}: larger than {MAX_TOKENS_FILE_BYTES}")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise OwnerTokensError(f"{kind} file {path}: not UTF-8") from exc
    lines = (
        (number, line)
        for number, line in enumerate(text.splitlines(), start=1)
        if line.strip() and not line.lstrip().startswith("#")
    )
    return _parse_all(lines, f"{kind} file {path}, line")


def owner_tokens_from_env(
    environ: Mapping[str, str], *, variable: str = OWNER_TOKENS_ENV
) -> dict[str, str]:
    """The tokens in ``variable`` (commas or newlines between entries).

    Raises:
        OwnerTokensError: an entry is not ``TOKEN=LOGIN``.
    """
    value = environ.get(variable, "")
    entries = [e for e in value.replace("\n", ",").split(",") if e.strip()]
    return _parse_all(enumerate(entries, start=1), f"${variable}, entry")
