"""``letagents-trio room``: run the reference room from the command line.

::

    letagents-trio room [--host 127.0.0.1] [--port 3001] [--db PATH | --memory]
                        [--owner-token TOKEN=LOGIN]...

Rooms, sessions, messages and leases live in a SQLite file (``--db``, default
``~/.letagents/room.sqlite3``) so a restart keeps them; ``--memory`` keeps
nothing. Each ``--owner-token`` maps a bearer token to an account login; with
none, one dev account ``dev`` gets a fresh random token, written to stderr at
start (this is the server's own terminal: the token is how you connect).
SIGINT or SIGTERM stops the room gracefully (held streams close silently,
open requests get a bounded time to finish).
"""

from __future__ import annotations

import argparse
import logging
import secrets
import signal
import sys
from collections.abc import Sequence
from functools import partial
from pathlib import Path
from typing import Final

import trio

from ._config import RoomConfig
from ._room import Room
from ._serve import serve_room
from ._store import MemoryStore, RoomStore, SQLiteStore

__all__ = ["DEFAULT_DB_PATH", "build_parser", "main"]

DEFAULT_DB_PATH: Final = Path("~/.letagents/room.sqlite3")
# The database's folder when we create it (and our default folder always):
# owner-only, so no other local user can list or read the room's files.
DB_FOLDER_MODE: Final = 0o700
DEV_LOGIN: Final = "dev"


def _owner_token(value: str) -> tuple[str, str]:
    token, sep, login = value.partition("=")
    if not sep or not token or not login.strip() or "/" in login:
        raise argparse.ArgumentTypeError("expected TOKEN=LOGIN (a login has no '/')")
    return token, login.strip()


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``letagents-trio room``."""
    parser = argparse.ArgumentParser(
        prog="letagents-trio room",
        description="Run the reference letagents room (HTTP, hypercorn on trio).",
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (127.0.0.1)")
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
        help="map an owner bearer token to an account login (repeatable)",
    )
    parser.add_argument("--log-level", default="INFO", help="logging level (INFO)")
    return parser


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
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=str(args.log_level).upper(),
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    owner_tokens = dict(args.owner_token)
    if not owner_tokens:
        token = secrets.token_urlsafe(24)
        owner_tokens = {token: DEV_LOGIN}
        sys.stderr.write(f"dev account {DEV_LOGIN!r}: owner token {token}\n")
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
    room = Room(store=store, owner_tokens=owner_tokens, config=RoomConfig.from_env())
    try:
        trio.run(_run, room, args.host, args.port)
    finally:
        store.close()
        logging.getLogger("letagents_trio.room_server").info("room stopped")
    return 0
