"""The ``letagents-trio`` command: ``demo``, ``room`` and ``mcp``.

Each subcommand lives with its concern; this module only dispatches, and
imports each one lazily so ``letagents-trio room`` never loads the MCP SDK.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

USAGE = """\
usage: letagents-trio {demo,room,mcp} [options]

  demo   play the process-connection story against an embedded reference room
  room   serve the reference room server (letagents-trio room --help)
  mcp    run the MCP server on stdio, for MCP hosts (letagents-trio mcp --help)
"""


def _demo(argv: Sequence[str]) -> int:
    from ._demo import main

    return main(list(argv))


def _room(argv: Sequence[str]) -> int:
    from .room_server._cli import main

    return main(list(argv))


def _mcp(argv: Sequence[str]) -> int:
    from .mcp_server._main import main

    return main(list(argv))


COMMANDS: dict[str, Callable[[Sequence[str]], int]] = {"demo": _demo, "room": _room, "mcp": _mcp}


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``letagents-trio``; returns the process exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(USAGE, end="")
        return 0 if args else 2
    command = COMMANDS.get(args[0])
    if command is None:
        print(f"letagents-trio: unknown command {args[0]!r}\n\n{USAGE}", end="", file=sys.stderr)
        return 2
    return command(args[1:])


if __name__ == "__main__":
    sys.exit(main())
