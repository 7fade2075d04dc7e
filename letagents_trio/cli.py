"""The ``letagents-trio`` command: ``demo``, ``room`` and ``mcp`` (and ``--version``).

``python -m letagents_trio`` runs the same ``main``, for a shell or host whose
PATH does not reach the installed command.

Each subcommand lives with its concern; this module only dispatches, and
imports each one lazily so ``letagents-trio room`` never loads the MCP SDK.

The core installs with trio, httpx2, h11, attrs and wsproto only; each
command's third-party needs come with an extra of the same name
(``pip install 'letagents-trio[mcp]'``). A command whose extra is missing says
so in one line, with a pip command that works for this installation (from a
checkout too), and exits with status 2, instead of a traceback.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Sequence

from ._extras import EXTRA_MODULES, missing_extra_text
from ._version import __version__

USAGE = """\
usage: letagents-trio {demo,room,mcp} [options]
       letagents-trio --version
       python -m letagents_trio ...   (the same, without the command on PATH)

  demo   play the process-connection story against an embedded reference room
  room   serve the reference room server (letagents-trio room --help)
  mcp    run the MCP server on stdio, for MCP hosts (letagents-trio mcp --help)
"""

# Where each command's ``main(argv) -> int`` lives; imported only when run.
COMMANDS: dict[str, str] = {
    "demo": "letagents_trio._demo",
    "room": "letagents_trio.room_server._cli",
    "mcp": "letagents_trio.mcp_server._main",
}

# Exit status for a usage problem, as argparse uses.
USAGE_ERROR = 2


def missing_extra_message(command: str, module: str) -> str:
    """What to tell a user who ran ``command`` without its extra (its extra has its name)."""
    return missing_extra_text(f"letagents-trio {command}", command, module) + "\n"


def _load(command: str) -> Callable[[list[str]], int]:
    """Import ``command``'s module and return its ``main``.

    Raises:
        ModuleNotFoundError: the module, or something it imports, is not installed.
    """
    main: Callable[[list[str]], int] = importlib.import_module(COMMANDS[command]).main
    return main


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``letagents-trio``; returns the process exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0 if args else USAGE_ERROR
    if args[0] == "--version":
        print(f"letagents-trio {__version__}")
        return 0
    if args[0] not in COMMANDS:
        print(f"letagents-trio: unknown command {args[0]!r}\n\n{USAGE}", end="", file=sys.stderr)
        return USAGE_ERROR
    try:
        command = _load(args[0])
    except ModuleNotFoundError as exc:
        missing = (exc.name or "").partition(".")[0]
        if missing not in EXTRA_MODULES[args[0]]:
            raise
        print(missing_extra_message(args[0], missing), end="", file=sys.stderr)
        return USAGE_ERROR
    return command(args[1:])


if __name__ == "__main__":
    sys.exit(main())
