"""``letagents-trio demo``'s command line: options, signals, exit status.

The options are parsed into a :class:`DemoOptions` (the owner token for
``--api-url`` may come from ``$LETAGENTS_TOKEN``, read here and nowhere
else). SIGINT and SIGTERM set the story's interrupt, so every exit is still
announced before the command returns 128 + the signal number. A room that
could not be used (refused, unreachable) is said in one line, with status 1.
"""

from __future__ import annotations

import argparse
import logging
import math
import os
import signal
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Final

import trio
from rich.console import Console
from rich.logging import RichHandler

from .._errors import LetAgentsError
from ..workers._paths import OWNER_TOKEN_ENV
from ._story import run_demo
from ._values import DEFAULT_WORKERS, MAX_WORKERS, DemoOptions, DemoReport

__all__ = ["OWNER_TOKEN_ENV", "build_parser", "main"]

# Columns given to output that goes to a pipe or file, so the summary fits on one line per row.
SUMMARY_WIDTH: Final = 120
# Exit status of a run that ended on a signal: the shell's 128 + signal number.
SIGNAL_EXIT_BASE: Final = 128


def _positive_speed(value: str) -> float:
    speed = float(value)
    if not (math.isfinite(speed) and speed > 0):
        raise argparse.ArgumentTypeError("speed must be a finite number > 0")
    return speed


def _worker_count(value: str) -> int:
    count = int(value)
    if not 1 <= count <= MAX_WORKERS:
        raise argparse.ArgumentTypeError(f"workers must be between 1 and {MAX_WORKERS}")
    return count


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of ``letagents-trio demo``."""
    parser = argparse.ArgumentParser(
        prog="letagents-trio demo",
        description=(
            "Play the process-connection story (a drop, a room restart, a refusal, "
            "an ended session, a name passing) against an embedded reference room."
        ),
    )
    parser.add_argument(
        "--workers",
        type=_worker_count,
        default=DEFAULT_WORKERS,
        help=f"workers to register and hold (1 to {MAX_WORKERS}; default {DEFAULT_WORKERS})",
    )
    parser.add_argument(
        "--speed",
        type=_positive_speed,
        default=1.0,
        help="divide the pauses between steps by this (default 1)",
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--api-url",
        default=None,
        help="play against another room (only the steps that need no room internals)",
    )
    where.add_argument(
        "--db", type=Path, default=None, help="the embedded room's SQLite file (default: memory)"
    )
    parser.add_argument(
        "--owner-token",
        default=None,
        help=(
            f"owner bearer token for --api-url (default: ${OWNER_TOKEN_ENV}). UNSAFE on a"
            " shared machine: any local user can read it from /proc/PID/cmdline or ps; set"
            f" ${OWNER_TOKEN_ENV} there"
        ),
    )
    parser.add_argument("--room", default=None, help="room id (default: a fresh one)")
    parser.add_argument(
        "--no-live",
        action="store_true",
        help="plain log lines instead of the live view (automatic when stdout is no terminal)",
    )
    return parser


def _options(argv: Sequence[str] | None) -> DemoOptions:
    parser = build_parser()
    args = parser.parse_args(argv)
    token = args.owner_token or os.environ.get(OWNER_TOKEN_ENV) or None
    if args.api_url is not None and token is None:
        parser.error(f"--api-url needs --owner-token or ${OWNER_TOKEN_ENV}")
    return DemoOptions(
        workers=args.workers,
        speed=args.speed,
        api_url=args.api_url,
        owner_token=token if args.api_url is not None else None,
        room_id=args.room,
        live=not args.no_live,
        db=args.db,
    )


async def _main(options: DemoOptions, console: Console) -> tuple[DemoReport, int | None]:
    interrupt = trio.Event()
    received: list[int] = []

    async def watch(signals: AsyncIterator[int]) -> None:
        async for signum in signals:
            received.append(signum)
            interrupt.set()

    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(watch, signals)
            report = await run_demo(options, console=console, interrupt=interrupt)
            nursery.cancel_scope.cancel(reason="the demo is over")
    return report, (received[0] if received else None)


def _leaves(group: BaseExceptionGroup[BaseException]) -> Iterator[BaseException]:
    for exc in group.exceptions:
        if isinstance(exc, BaseExceptionGroup):
            yield from _leaves(exc)
        else:
            yield exc


def main(argv: list[str] | None = None) -> int:
    """Run ``letagents-trio demo``; returns the exit status.

    0 when the story played to its end, 1 when a step failed or the room could
    not be used, 128 + the signal number (130 for Ctrl-C) when a signal cut it
    short, after every exit was announced.
    """
    options = _options(argv)
    console = Console()
    if not console.is_terminal:  # a log or a pipe: no terminal width to respect
        console = Console(width=max(console.width, SUMMARY_WIDTH))
    # Library warnings (an exit the room refused) go through the console, above
    # the live view, instead of a bare stderr line that breaks it; the summary
    # reports each exit anyway.
    logging.basicConfig(
        level=logging.WARNING,
        handlers=[RichHandler(console=console, show_path=False, show_time=False)],
        format="%(message)s",
    )
    failures: list[BaseException] = []
    try:
        report, signum = trio.run(_main, options, console)
    except* (LetAgentsError, OSError) as group:  # the room could not be used: say so, briefly
        failures.extend(_leaves(group))
    if failures:
        for exc in failures:
            console.print(f"[red]letagents-trio demo: {type(exc).__name__}: {exc}[/]")
        return 1
    if signum is not None:
        return SIGNAL_EXIT_BASE + signum
    return 0 if report.ok else 1
