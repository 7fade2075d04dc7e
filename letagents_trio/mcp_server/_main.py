"""The stdio entry point: ``python -m letagents_trio.mcp_server`` and ``letagents-trio mcp``.

``main`` configures logging on stderr (stdout carries nothing but protocol),
reads the configuration from the environment, runs
``trio.run(server.run_stdio_async)``, and then ends the process at once.
``--letagents-runtime-contract`` prints the runtime contract instead
(upstream's flag) and exits. A configuration the Node server refuses (an
unknown profile, a worker bearer with an owner token) is refused before anything
starts; one only we refuse (an API URL or log level that is not one) is served
with every tool call answering what to fix.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import sys
from typing import Any, Final, NoReturn

import trio

from .._protocol import DEFAULT_API_URL
from .._version import __version__
from ..workers._identity import DEFAULT_RUNTIME_LABEL
from ..workers._names import DEFAULT_IDE_LABEL
from ._config import DEFAULT_PROFILE, KNOWN_PROFILES, ConfigError, read_config, refusal_text
from ._profiles import (
    CURSOR_PROVIDER,
    NODE_REFUSAL_EXIT,
    SUPERVISED_POLLING_PROFILE,
    SUPERVISED_ROOM_TURN_PROFILE,
    NodeRefusal,
)
from ._server import create_server
from ._tools import registered_tool_names

__all__ = [
    "ENVIRONMENT",
    "RUNTIME_CONTRACT_ARG",
    "configure_logging",
    "main",
    "runtime_contract",
    "usage",
]

# Upstream's flag for printing the runtime contract.
RUNTIME_CONTRACT_ARG: Final = "--letagents-runtime-contract"
# Log level for stderr (DEBUG, INFO, WARNING, ...); INFO says what a host needs.
LOG_LEVEL_ENV: Final = "LETAGENTS_LOG_LEVEL"

# Every variable the server reads, its default, and what it means: the help
# text is built from this, so `letagents-trio mcp --help` lists them all.
ENVIRONMENT: Final[tuple[tuple[str, str, str], ...]] = (
    ("LETAGENTS_API_URL", DEFAULT_API_URL, "the room API (an http or https URL)"),
    ("LETAGENTS_TOKEN", "auth.token of the state file", "the owner's bearer token"),
    ("LETAGENTS_STATE_PATH", "~/.letagents/mcp-state.json", "the state file (shared with Node)"),
    (
        "LETAGENTS_CHAT_STORAGE_SETTINGS_PATH",
        "~/.letagents/chat-storage.json",
        "which rooms keep their chat locally",
    ),
    ("LETAGENTS_LOCAL_CHAT_DB", "~/.letagents/local-chat.sqlite", "local rooms' chat (SQLite)"),
    (
        "LETAGENTS_EXECUTION_PROFILE",
        DEFAULT_PROFILE,
        "the tool surface (the profiles are listed below)",
    ),
    ("LETAGENTS_SUPERVISOR_PROVIDER", "unset", "reported as provider by the readiness resource"),
    ("LETAGENTS_POLL_MAX_MS", "180000", "the long-poll cap in ms (set the same on the room)"),
    ("LETAGENTS_RUNTIME", DEFAULT_RUNTIME_LABEL, "the runtime label of registrations"),
    ("LETAGENTS_IDE", DEFAULT_IDE_LABEL, "the IDE label of registrations"),
    (
        "LETAGENTS_AGENT_SESSION_BEARER",
        "unset",
        "set by a supervisor: the only credential (refuses LETAGENTS_TOKEN; no worker handles)",
    ),
    (
        "LETAGENTS_SUPERVISED_BOUNDED_TURNS",
        "unset",
        "1 exactly with the profile supervised_room_turn",
    ),
    (LOG_LEVEL_ENV, "INFO", "log level on stderr (DEBUG adds every HTTP request)"),
)
# Logged per request by the HTTP client at INFO; shown only at DEBUG.
HTTP_LOGGER: Final = "httpx2"
# Where a user reads more: the installed package has no docs/ directory.
DOCS_HINT: Final = "Docs: the 'MCP hosts' page of the letagents-trio documentation."


def _parser() -> argparse.ArgumentParser:
    width = max(len(name) for name, _, _ in ENVIRONMENT)
    rows = "\n".join(
        f"  {name:<{width}}  {meaning}\n  {'':<{width}}  (default: {default})"
        for name, default, meaning in ENVIRONMENT
    )
    parser = argparse.ArgumentParser(
        prog="letagents-trio mcp",
        description=(
            "Serve the letagents MCP tools on stdin/stdout for an MCP host.\n"
            "Stops on SIGINT, SIGTERM or stdin end, announcing every exit within 1.5 s;\n"
            "a second signal meanwhile changes nothing, a third forces an exit at once."
        ),
        epilog=(
            f"environment (read once at start-up):\n{rows}\n\n"
            f"profiles: {', '.join(sorted(KNOWN_PROFILES))}\n\n{DOCS_HINT}"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"letagents-trio {__version__}")
    parser.add_argument(
        RUNTIME_CONTRACT_ARG,
        action="store_true",
        help="print the tools of the supervised profiles as JSON and exit",
    )
    return parser


def usage() -> str:
    """The ``--help`` text."""
    return _parser().format_help()


def runtime_contract() -> dict[str, Any]:
    """The contract ``--letagents-runtime-contract`` prints, as the Node server's
    ``letAgentsRuntimeContract`` (``runtime-contract.ts``): the custodial poller's
    tools (provider ``codex``) and the room turn's under the provider ``cursor``,
    keyed ``cursor_supervised_room_turn`` (a key, not a profile).

    Each list comes from the same registration path as the served tools.
    """
    return {
        "format": 1,
        "profiles": {
            "supervised_mcp_polling": {
                "contract": "custodial_polling_v1",
                "tools": registered_tool_names(SUPERVISED_POLLING_PROFILE, "codex"),
            },
            "cursor_supervised_room_turn": {
                "tools": registered_tool_names(SUPERVISED_ROOM_TURN_PROFILE, CURSOR_PROVIDER),
            },
        },
    }


def configure_logging(level_name: str) -> None:
    """Log on stderr at ``level_name`` (empty: INFO); HTTP requests only at DEBUG.

    The HTTP client logs every request at INFO; a long poll every 30 s would
    bury what a host needs to read, so those lines appear only when asked for.

    Raises:
        ConfigError: ``level_name`` is no log level (it used to mean INFO, silently).
    """
    level = level_name.strip().upper() or "INFO"
    if level not in logging.getLevelNamesMapping():
        raise ConfigError(
            f"{LOG_LEVEL_ENV}={level_name!r} is not a log level."
            " Use one of: DEBUG, INFO, WARNING, ERROR, CRITICAL (unset means INFO)."
        )
    logging.basicConfig(
        level=level,
        stream=sys.stderr,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    http_level = logging.DEBUG if level == "DEBUG" else logging.WARNING
    logging.getLogger(HTTP_LOGGER).setLevel(http_level)


def main(argv: list[str] | None = None) -> int:
    """Run the MCP server on stdio until the host stops it.

    Returns the exit code for ``--letagents-runtime-contract``, ``--help``,
    ``--version``, bad arguments and a configuration the Node server refuses
    at start-up (1, one line on stderr with its text, as it exits then). Our
    own refusals (an API URL or log level that is not one) start the server
    anyway: one line each on stderr, and every tool call answers them with the
    fix (:func:`~._config.refusal_text`), which a host shows where it shows
    only "Connection closed" for a server that exits. When it served, it does not
    return: once the server has stopped (every exit announced), the process
    exits 0 at once, skipping the interpreter's slow teardown (see :func:`_exit_now`).
    """
    args = sys.argv[1:] if argv is None else argv
    try:
        options = _parser().parse_args(args)
    except SystemExit as exc:  # --help, --version, or a usage error (already printed)
        return exc.code if isinstance(exc.code, int) else 2
    if options.letagents_runtime_contract:
        sys.stdout.write(json.dumps(runtime_contract(), separators=(",", ":")) + "\n")
        return 0
    problems: list[str] = []
    try:
        configure_logging(os.environ.get(LOG_LEVEL_ENV, "INFO"))
    except ConfigError as exc:
        configure_logging("INFO")
        problems.append(str(exc))
    try:
        config, problem = read_config()
    except NodeRefusal as exc:
        sys.stderr.write(f"letagents-trio mcp: {exc}\n")
        return NODE_REFUSAL_EXIT
    if problem is not None:
        problems.append(problem)
    for text in problems:
        sys.stderr.write(f"letagents-trio mcp: {text}\n")
    server = create_server(config, refusal=refusal_text(problems) if problems else None)
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
