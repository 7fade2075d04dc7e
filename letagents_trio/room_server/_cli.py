"""``letagents-trio room``: run the reference room from the command line.

::

    letagents-trio room [--host 127.0.0.1] [--port 3001] [--db PATH | --memory]
                        [--owner-tokens-file PATH] [--owner-token TOKEN=LOGIN]...
                        [--person-tokens-file PATH] [--room-admin ROOM=LOGIN]...
                        [--max-silent-connections N]

Rooms, sessions, messages and leases live in a SQLite file (``--db``, default
``~/.letagents/room.sqlite3``) so a restart keeps them; ``--memory`` keeps
nothing. Owner tokens map a bearer token to an account login; they come from
``--owner-tokens-file`` (a 0600 file of the user's), the environment
(``LETAGENTS_ROOM_OWNER_TOKENS``) or ``--owner-token``, which any local user
can read from ``/proc/PID/cmdline`` (:mod:`._auth._owner_tokens`). Person tokens
(a person signed in: only a person changes a room's settings) come from
``--person-tokens-file`` or ``LETAGENTS_ROOM_PERSON_TOKENS``. With no owner
token, one dev account ``dev`` gets a fresh random owner token and person
token, written to stderr at start (this is the server's own terminal: the
tokens are how you connect). A room's admins are its creator (whose
registration made it) and the logins ``--room-admin ROOM=LOGIN`` grants it.
SIGINT or SIGTERM stops the room gracefully (held streams close silently,
open requests get a bounded time to finish).

The room speaks plain HTTP: no TLS. On loopback (the default) that is the
machine's own traffic; bound to any other address, owner and session bearer
tokens cross the network in clear, so ``--help`` says so and the room warns
at start (put it behind a TLS-terminating proxy instead).
"""

from __future__ import annotations

import argparse
import ipaddress
import logging
import os
import secrets
import signal
import sys
from collections.abc import Mapping, Sequence
from functools import partial
from pathlib import Path
from typing import Final

import attrs
import trio

from ._auth._owner_tokens import (
    OWNER_TOKENS_ENV,
    PERSON_TOKENS_ENV,
    OwnerTokensError,
    merge_owner_tokens,
    owner_tokens_from_env,
    parse_entry,
    read_owner_tokens_file,
)
from ._config import MAX_SILENT_CONNECTIONS, RoomConfig
from ._room import Room
from ._serve import serve_room
from ._storage._sqlite import SQLiteStore
from ._storage._store import MemoryStore, RoomStore

__all__ = ["DEFAULT_DB_PATH", "build_parser", "is_loopback", "main"]

DEFAULT_DB_PATH: Final = Path("~/.letagents/room.sqlite3")
# The database's folder when we create it (and our default folder always):
# owner-only, so no other local user can list or read the room's files.
DB_FOLDER_MODE: Final = 0o700
DEV_LOGIN: Final = "dev"


def _owner_token(value: str) -> tuple[str, str]:
    pair = parse_entry(value)
    if pair is None:
        raise argparse.ArgumentTypeError("expected TOKEN=LOGIN (a login has no '/')")
    return pair


def _room_admin(value: str) -> tuple[str, str]:
    room, sep, login = value.rpartition("=")
    if not sep or not room.strip() or not login.strip() or "/" in login:
        raise argparse.ArgumentTypeError("expected ROOM=LOGIN (a login has no '/')")
    return room.strip(), login.strip()


def _positive(value: str) -> int:
    number = int(value)
    if number < 1:
        raise argparse.ArgumentTypeError("expected a positive integer")
    return number


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``letagents-trio room``."""
    parser = argparse.ArgumentParser(
        prog="letagents-trio room",
        description="Run the reference letagents room (HTTP, hypercorn on trio).",
        epilog=(
            f"Owner tokens also come from ${OWNER_TOKENS_ENV}, person tokens from"
            f" ${PERSON_TOKENS_ENV} (TOKEN=LOGIN entries separated by commas or newlines)."
            " All sources are merged; with no owner token, a dev account gets a fresh owner"
            " token and person token, written to stderr."
        ),
    )
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help=(
            "address to bind (127.0.0.1). UNSAFE beyond loopback: the room speaks plain HTTP,"
            " no TLS, so owner and session bearer tokens cross the network in clear; serve"
            " other machines through a TLS-terminating proxy"
        ),
    )
    parser.add_argument("--port", type=int, default=3001, help="port to bind; 0 = any (3001)")
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--db", type=Path, default=None, help=f"SQLite file (default {DEFAULT_DB_PATH})"
    )
    where.add_argument("--memory", action="store_true", help="keep nothing across restarts")
    parser.add_argument(
        "--owner-token",
        action="append",
        type=_owner_token,
        default=[],
        metavar="TOKEN=LOGIN",
        help=(
            "map an owner bearer token to an account login (repeatable). UNSAFE on a shared"
            " machine: any local user can read it from /proc/PID/cmdline or ps; use"
            " --owner-tokens-file or the environment there"
        ),
    )
    parser.add_argument(
        "--owner-tokens-file",
        type=Path,
        default=None,
        metavar="PATH",
        help=(
            "read owner tokens from PATH: one TOKEN=LOGIN per line, # comments; refused"
            " unless it is yours and mode 0600"
        ),
    )
    parser.add_argument(
        "--person-tokens-file",
        type=Path,
        default=None,
        metavar="PATH",
        help=(
            "read person tokens (a person signed in: only a person changes a room's"
            " settings) from PATH, as --owner-tokens-file"
        ),
    )
    parser.add_argument(
        "--room-admin",
        action="append",
        type=_room_admin,
        default=[],
        metavar="ROOM=LOGIN",
        help=(
            "make LOGIN an admin of ROOM (repeatable); a room's creator is its admin too,"
            " an agent's owner never is for that alone"
        ),
    )
    parser.add_argument(
        "--max-silent-connections",
        type=_positive,
        default=None,
        metavar="N",
        help=(
            "connections kept at most without a request; one more closes the oldest"
            f" (default: a quarter of the open-file limit, at least {MAX_SILENT_CONNECTIONS};"
            " held process streams never count)"
        ),
    )
    parser.add_argument("--log-level", default="INFO", help="logging level (INFO)")
    return parser


def is_loopback(host: str) -> bool:
    """Whether ``host`` binds only this machine's loopback (``localhost`` or a loopback address)."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a name: it may resolve to any address


def _owner_tokens(args: argparse.Namespace, environ: Mapping[str, str]) -> dict[str, str]:
    """Every source's owner tokens, merged (see :mod:`._auth._owner_tokens`)."""
    tokens: dict[str, str] = {}
    if args.owner_tokens_file is not None:
        merge_owner_tokens(tokens, read_owner_tokens_file(args.owner_tokens_file), "the file")
    merge_owner_tokens(tokens, owner_tokens_from_env(environ), f"${OWNER_TOKENS_ENV}")
    merge_owner_tokens(tokens, dict(args.owner_token), "--owner-token")
    return tokens


def _person_tokens(args: argparse.Namespace, environ: Mapping[str, str]) -> dict[str, str]:
    """Every source's person tokens, merged."""
    tokens: dict[str, str] = {}
    if args.person_tokens_file is not None:
        found = read_owner_tokens_file(args.person_tokens_file, kind="person tokens")
        merge_owner_tokens(tokens, found, "the file")
    found = owner_tokens_from_env(environ, variable=PERSON_TOKENS_ENV)
    merge_owner_tokens(tokens, found, f"${PERSON_TOKENS_ENV}")
    return tokens


async def _run(room: Room, host: str, port: int) -> None:
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            url = await nursery.start(partial(serve_room, room, host=host, port=port))
            sys.stderr.write(f"letagents room on {url}\n")
            async for signum in signals:
                logging.getLogger("letagents_trio.room_server").info(
                    "signal %s: stopping", signal.Signals(signum).name
                )
                nursery.cancel_scope.cancel(reason="signal")
                break


def main(argv: Sequence[str] | None = None) -> int:
    """Run the room until SIGINT or SIGTERM.

    Args:
        argv: the arguments after ``room`` (``sys.argv[2:]`` style); ``None``
            reads ``sys.argv[1:]``.

    Returns:
        The process exit status (0 after a graceful stop).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        owner_tokens = _owner_tokens(args, os.environ)
        person_tokens = _person_tokens(args, os.environ)
        if set(owner_tokens) & set(person_tokens):
            raise OwnerTokensError("a token is given as both an owner token and a person token")
    except OwnerTokensError as exc:
        parser.error(str(exc))
    logging.basicConfig(
        level=str(args.log_level).upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if not is_loopback(args.host):
        logging.getLogger("letagents_trio.room_server").warning(
            "binding %s, beyond loopback: the room speaks plain HTTP (no TLS), so owner and"
            " session bearer tokens cross the network in clear; serve other machines through"
            " a TLS-terminating proxy",
            args.host,
        )
    if not owner_tokens:
        token, person = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
        owner_tokens = {token: DEV_LOGIN}
        person_tokens.setdefault(person, DEV_LOGIN)
        # One token a line, and last on its line: a copied word takes nothing else.
        sys.stderr.write(f"dev account {DEV_LOGIN!r} owner token: {token}\n")
        sys.stderr.write(f"dev account {DEV_LOGIN!r} person token: {person}\n")
    store: RoomStore
    if args.memory:
        store = MemoryStore()
    else:
        path = (args.db or DEFAULT_DB_PATH).expanduser()
        path.parent.mkdir(mode=DB_FOLDER_MODE, parents=True, exist_ok=True)
        if args.db is None:  # our own folder: owner-only even if an older run made it 0755
            path.parent.chmod(DB_FOLDER_MODE)
        store = SQLiteStore(path)
        sys.stderr.write(f"room database: {path}\n")
    config = attrs.evolve(RoomConfig.from_env(), max_silent_connections=args.max_silent_connections)
    room = Room(store=store, owner_tokens=owner_tokens, person_tokens=person_tokens, config=config)
    for room_id, login in args.room_admin:
        room.grant_admin(room_id, login)
    try:
        trio.run(_run, room, args.host, args.port)
    finally:
        store.close()
        logging.getLogger("letagents_trio.room_server").info("room stopped")
    return 0
