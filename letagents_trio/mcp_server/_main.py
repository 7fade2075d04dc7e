"""The stdio entry point: ``python -m letagents_trio.mcp_server`` and ``letagents-trio mcp``.

``main`` configures logging on stderr (stdout carries nothing but protocol),
reads the configuration from the environment, runs
``trio.run(server.run_stdio_async)``, and then ends the process at once.
``--letagents-runtime-contract`` prints the runtime contract instead
(upstream's flag) and exits.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
from typing import Any, Final, NoReturn

import trio

from ._config import ServerConfig
from ._server import create_server
from ._tools import registered_tool_names

__all__ = ["RUNTIME_CONTRACT_ARG", "main", "runtime_contract"]

# Upstream's flag for printing the runtime contract.
RUNTIME_CONTRACT_ARG: Final = "--letagents-runtime-contract"
# Log level for stderr (DEBUG, INFO, WARNING, ...); INFO says what a host needs.
LOG_LEVEL_ENV: Final = "LETAGENTS_LOG_LEVEL"

USAGE: Final = f"""\
usage: letagents-trio mcp [{RUNTIME_CONTRACT_ARG}]

Serve the letagents MCP tools on stdin/stdout for an MCP host.
Configuration comes from the environment: LETAGENTS_API_URL, LETAGENTS_TOKEN,
LETAGENTS_STATE_PATH, LETAGENTS_CHAT_STORAGE_SETTINGS_PATH,
LETAGENTS_EXECUTION_PROFILE, LETAGENTS_POLL_MAX_MS (see docs/mcp-hosts.md).
Stops on SIGINT, SIGTERM or stdin end, announcing every exit within 1.5 s;
a second signal meanwhile changes nothing, a third forces an exit at once.
"""


def runtime_contract(api_url: str | None = None) -> dict[str, Any]:
    """The contract ``--letagents-runtime-contract`` prints: tools per supervised profile.

    Each list comes from the same registration path as the served tools.
    """
    base = ServerConfig() if api_url is None else ServerConfig(api_url=api_url)

    def tools(profile: str) -> list[str]:
        return registered_tool_names(ServerConfig(api_url=base.api_url, profile=profile))

    return {
        "format": 1,
        "profiles": {
            "supervised_mcp_polling": {
                "contract": "custodial_polling_v1",
                "tools": tools("supervised_mcp_polling"),
            },
            "cursor_supervised_room_turn": {"tools": tools("cursor_supervised_room_turn")},
        },
    }


def main(argv: list[str] | None = None) -> int:
    """Run the MCP server on stdio until the host stops it.

    Returns the exit code for ``--letagents-runtime-contract``, ``--help`` and
    bad arguments. When it served, it does not return: once the server has
    stopped (every exit announced), the process exits 0 at once, skipping the
    interpreter's slow teardown (see :func:`_exit_now`).
    """
    args = sys.argv[1:] if argv is None else argv
    if RUNTIME_CONTRACT_ARG in args:
        sys.stdout.write(
            json.dumps(runtime_contract(os.environ.get("LETAGENTS_API_URL") or None)) + "\n"
        )
        return 0
    if args and args[0] in ("-h", "--help"):
        sys.stdout.write(USAGE)
        return 0
    if args:
        sys.stderr.write(f"letagents-trio mcp: unexpected arguments {args!r}\n\n{USAGE}")
        return 2
    level = os.environ.get(LOG_LEVEL_ENV, "INFO").upper()
    logging.basicConfig(
        level=level if level in logging.getLevelNamesMapping() else "INFO",
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    server = create_server(ServerConfig.from_env())
    trio.run(server.run_stdio_async)
    logging.getLogger("letagents_trio.mcp_server").info("stopped")
    _exit_now(0)


def _exit_now(code: int) -> NoReturn:
    """End the process at once: everything is closed and every exit announced.

    The interpreter's own teardown (finalising the SDK, pydantic, httpx2 and
    their modules) takes 0.2-0.5 s on a busy machine; a host that sent SIGTERM
    counts that time against the shutdown budget, so it is skipped.
    """
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(code)
