"""The single entry point for checks: ``nox -s tests lint typing docs nurseries``.

Each session installs the project with the extras its programs import and one
PEP 735 dependency group from pyproject.toml, so the lists of tools and of
dependencies live in one place.

``nox -s mutate [-- _sse room_server/_sessions/_presence ...]`` (on demand, never in CI)
is mutation testing with mutmut of the core, the reference room's rule modules
and the host layer's pure modules: each module runs in its own folder
``mutants/<module>/`` (``mutants/room_server._presence/`` for a sub-package's)
holding links to the package and the tests and a pyproject.toml that tells
mutmut which one file to mutate and which tests exercise it. mutmut copies that
folder into ``mutants/<module>/mutants/``, mutates the one file there and runs
each mutant against the tests that call the mutated function, one worker at a
time. The session then prints, per module, the raw score, the score over the
mutants that change behaviour (the survivors judged equivalent are listed, with
why, in docs/mutation.md) and the diff of every other survivor.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests", "lint", "typing", "docs", "nurseries"]
# The Pythons the package promises (pyproject.toml's classifiers): `nox -s tests`
# runs the suite on each one installed and skips, with a message, each one that
# is not, so a machine with Python 3.11 alone runs it once (also where nox
# would make a missing interpreter an error: CI=true).
PYTHONS = ("3.11", "3.12", "3.13")
nox.options.error_on_missing_interpreters = False

PYPROJECT = nox.project.load_toml("pyproject.toml")
SOURCE_FOLDERS = ("letagents_trio", "nurseries", "tests", "bench")
# Functions that take task_status, so flake8-async's ASYNC113 knows them.
STARTABLES = ",".join(
    (
        "serve_connection_manager",
        "serve_room",
        "serve_tiny_room",
        "run",
        "hold",
        "hold_stream",
        "run_server",
        "_serve",
        "_run_process",
        "_run_hypercorn",
        "serve_hypercorn",
        "_holders_nursery",
        "_watch_idle",
    )
)


# Every extra: the tests, mypy and autodoc import every program.
ALL_EXTRAS = tuple(PYPROJECT["project"]["optional-dependencies"])


def install(session: nox.Session, *groups: str, extras: tuple[str, ...] = ()) -> None:
    session.install("--upgrade", "pip")
    deps: list[str] = []
    for group in groups:
        deps.extend(nox.project.dependency_groups(PYPROJECT, group))
    project = f".[{','.join(extras)}]" if extras else "."
    session.install("-e", project, *deps)


@nox.session(python=PYTHONS)
def tests(session: nox.Session) -> None:
    """Run the test suite on each Python installed (``-s tests-3.12`` picks one)."""
    install(session, "test", extras=ALL_EXTRAS)
    session.run("pytest", *session.posargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff with the ASYNC rules, then flake8-async for the rules ruff lacks."""
    install(session, "lint")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")
    # The standalone flake8-async takes files, not folders.
    files = sorted(str(path) for folder in SOURCE_FOLDERS for path in Path(folder).rglob("*.py"))
    session.run(
        "flake8-async",
        "--startable-in-context-manager=" + STARTABLES,
        *files,
    )


@nox.session
def typing(session: nox.Session) -> None:
    """mypy --strict over the package, nurseries, tests and benchmarks."""
    install(session, "typing", extras=ALL_EXTRAS)
    session.run("mypy")


@nox.session
def docs(session: nox.Session) -> None:
    """Build the docs with warnings as errors and nitpicky references."""
    install(session, "docs", extras=ALL_EXTRAS)
    session.run(
        "sphinx-build", "-W", "-n", "--keep-going", "-b", "html", "docs", "docs/_build/html"
    )


@nox.session
def nurseries(session: nox.Session) -> None:
    """Run every example program in nurseries/, beside a room of their own.

    The embedder's program holds workers in a running room, as a user's does:
    the session starts ``letagents-trio room --memory`` on a free port (never
    3001, which a user may be serving) and names it in ``LETAGENTS_API_URL``
    and ``LETAGENTS_TOKEN``.
    """
    install(session, extras=("mcp", "room", "testing"))
    token = secrets.token_urlsafe(24)
    python = str(Path(session.bin) / "python")
    command = ["-m", "letagents_trio", "room", "--memory", "--port", "0", "--log-level", "WARNING"]
    room = subprocess.Popen(
        [python, *command],
        env={**os.environ, "LETAGENTS_ROOM_OWNER_TOKENS": f"{token}=nurseries"},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert room.stderr is not None
        started = None
        for line in room.stderr:
            if started := re.match(r"letagents room on (\S+)$", line.strip()):
                break
        if started is None:
            session.error(f"the room did not start (status {room.wait()})")
        # The room's later lines go on to this session's stderr.
        threading.Thread(target=shutil.copyfileobj, args=(room.stderr, sys.stderr)).start()
        env = {"LETAGENTS_API_URL": started[1], "LETAGENTS_TOKEN": token}
        for program in sorted(Path("nurseries").glob("*.py")):
            session.run("python", str(program), env=env)
    finally:
        room.terminate()
        room.wait(timeout=10)


@nox.session
def demo(session: nox.Session) -> None:
    """The main job: the demo against the embedded reference room."""
    install(session, extras=("demo",))
    session.run("letagents-trio", "demo", *session.posargs)


@nox.session
def bench(session: nox.Session) -> None:
    """Benchmarks that print figures (never timed tests)."""
    install(session, extras=("room", "testing"))
    for program in sorted(Path("bench").glob("bench_*.py")):
        session.run("python", str(program), *session.posargs)


# The tests that exercise the WebSocket connector and its socket.
_WEBSOCKET_TESTS = (
    "tests/test_websocket*.py",
    "tests/test_connector.py",
    "tests/test_holder*.py",
    "tests/test_manager*.py",
)
# The tests of the lean HTTP/1.1 path: requests, the exits' kept-alive
# connections, the seam that picks a stack, floods, and the client's bounds.
_HTTP_TESTS = (
    "tests/test_http_request.py",
    "tests/test_http_pool.py",
    "tests/test_http_pool_handed.py",
    "tests/test_http_stack.py",
    "tests/test_http_floods.py",
    "tests/test_client_bounds.py",
    "tests/test_connector.py",
)
# The lean path's socket I/O and its TLS stream: their own tests, the requests
# that read through them, and real loopback sockets (plain and TLS).
_SOCKET_IO_TESTS = (
    "tests/test_http_sockio.py",
    "tests/test_http_request.py",
    "tests/e2e/test_events_at_once.py",
    "tests/e2e/test_lean_tls.py",
    "tests/e2e/test_websocket_tls_exit.py",
)
# The reference room's tests: every rule is reached through its routes (the
# FakeRoom's tests serve the same room behind the fault layer).
_ROOM_TESTS = ("tests/room_server/test_*.py", "tests/testing/test_*.py")
# The host layer's tests: records, handles and the state file.
_WORKER_TESTS = ("tests/workers/test_*.py",)
# The MCP server's tests: every tool over the SDK's in-memory client, against
# the reference room (a FakeRoom), in hosted and local rooms.
_MCP_TESTS = ("tests/mcp_server/test_*.py",)
# Workspace captures: the host layer's tests and the MCP capture tools' (the only
# ones that diff a repository's edits).
_CAPTURE_TESTS = (
    *_WORKER_TESTS,
    "tests/mcp_server/test_wake_capture_tools.py",
    "tests/mcp_server/test_capture_refusals.py",
)
# Board governance and review work: the room's tests (the governed board's
# routes, and every task move, which asks the governance hooks) and the MCP
# tools that propose, decide and carry out intents and verdicts.
_BOARD_GOVERNANCE_TESTS = (*_ROOM_TESTS, "tests/mcp_server/test_governance_tools.py")
# The worker loop's host calls: their own tests (walks over pages, credentials)
# and the tools that make them.
_ROOM_WORK_TESTS = (
    "tests/workers/test_room_work*.py",
    "tests/workers/test_thread_lookups.py",
    *_MCP_TESTS,
)
# The modules under mutation testing (paths under letagents_trio/, without
# ".py"), each with the test files (globs) that exercise it; mutmut then runs
# each mutant against those of their tests that call the mutated function.
MUTATION_TARGETS: dict[str, tuple[str, ...]] = {
    "_sse": ("tests/test_sse.py", "tests/test_hostile_streams.py", "tests/test_connector.py"),
    "_policy": ("tests/test_policy.py",),
    # The SSE process stream; the goodbye's exits go through it too.
    "_sse_connector": (
        "tests/test_connector.py",
        "tests/test_hostile_streams.py",
        "tests/test_client.py",
        "tests/test_manager*.py",
        # The quiet reads of one heartbeat act only on a real socket: loopback.
        "tests/e2e/test_events_at_once.py",
    ),
    "_holder": (
        "tests/test_holder*.py",
        "tests/test_manager*.py",
        "tests/test_connector.py",
        "tests/test_websocket*.py",
        "tests/test_hostile_streams.py",
        # Holders opening in a burst, counted for the collector's pause.
        "tests/test_collector.py",
    ),
    "_manager": (
        "tests/test_manager*.py",
        "tests/test_holder*.py",
        "tests/test_websocket*.py",
        "tests/test_collector.py",
    ),
    "_goodbye": (
        "tests/test_manager*.py",
        "tests/test_websocket*.py",
        # Exits written at once (leave_nowait) need a plain socket: real loopback.
        "tests/e2e/test_websocket_loopback.py",
    ),
    "_websocket": _WEBSOCKET_TESTS,
    # The socket's exits written at once and its quiet reads of one ping act
    # only on a real socket: loopback too.
    "_ws_socket": (
        *_WEBSOCKET_TESTS,
        "tests/e2e/test_websocket_loopback.py",
        "tests/e2e/test_websocket_tls_exit.py",
        "tests/e2e/test_events_at_once.py",
    ),
    # The room client: its requests, bounds and stacks, and the exits it POSTs
    # (through the pool, and each on a connection of its own), and the upgrades
    # it starts for the WebSocket connector.
    "_client": (
        "tests/test_client*.py",
        "tests/test_http_stack.py",
        "tests/test_http_pool.py",
        "tests/test_http_request.py",
        "tests/test_connector.py",
        "tests/test_manager*.py",
        "tests/test_websocket*.py",
    ),
    "_http/_pool": _HTTP_TESTS,
    "_http/_lanes": _HTTP_TESTS,
    "_http/_lane_answers": _HTTP_TESTS,
    # The requests, and the quiet reads of a held stream's body on a real socket.
    "_http/_request": (*_HTTP_TESTS, "tests/test_http_body.py", "tests/e2e/test_events_at_once.py"),
    # A stream's body read without h11: its own tests (held to h11's) and the requests'.
    "_http/_body": (*_HTTP_TESTS, "tests/test_http_body.py"),
    "_http/_lean": _HTTP_TESTS,
    # The lean path's socket I/O: its own tests, the requests that read through
    # it, and the real loopback (plain and TLS) where the kernel keeps a
    # heartbeat: the quiet reads act only on a real TCP socket on Linux.
    "_http/_sockio": _SOCKET_IO_TESTS,
    "_http/_socknow": _SOCKET_IO_TESTS,
    "_http/_tls": (
        *_SOCKET_IO_TESTS,
        "tests/e2e/test_lean_http.py",
        "tests/e2e/test_tls_memory.py",
    ),
    "_collector": (
        "tests/test_collector.py",
        "tests/test_holder_events.py",
        "tests/test_manager*.py",
    ),
    # The reference room's rules: which session keeps a name, who is present,
    # leases, liveness, guidelines and the process streams.
    "room_server/_sessions/_registration": _ROOM_TESTS,
    "room_server/_sessions/_presence": _ROOM_TESTS,
    "room_server/_board/_leases": _ROOM_TESTS,
    "room_server/_liveness": _ROOM_TESTS,
    "room_server/_guidelines": _ROOM_TESTS,
    "room_server/_sessions/_streams": _ROOM_TESTS,
    # The room's work rules: the board (tasks, leases), messages and threads,
    # memory and requests for people.
    "room_server/_board/_tasks": _ROOM_TESTS,
    "room_server/_board/_taskboard": _ROOM_TESTS,
    "room_server/_messaging/_messages": _ROOM_TESTS,
    "room_server/_messaging/_threads": _ROOM_TESTS,
    "room_server/_knowledge": _ROOM_TESTS,
    # The worker loop's host layer and the MCP server's tool modules.
    "workers/_room_work": _ROOM_WORK_TESTS,
    "mcp_server/_facade": _MCP_TESTS,
    "mcp_server/_session_tools": _MCP_TESTS,
    "mcp_server/_message_tools": _MCP_TESTS,
    "mcp_server/_wait_tool": _MCP_TESTS,
    "mcp_server/_task_tools": _MCP_TESTS,
    "mcp_server/_knowledge_tools": _MCP_TESTS,
    "mcp_server/_turn_tools": _MCP_TESTS,
    # Wake rules, reports of reasoning and agent work, and workspace captures:
    # the room's rules, the host layer's captures and their tools.
    "room_server/_wake/_rules": _ROOM_TESTS,
    "room_server/_wake/_wakes": _ROOM_TESTS,
    "room_server/_reports/_reasoning": _ROOM_TESTS,
    "room_server/_reports/_agent_work": _ROOM_TESTS,
    "workers/_workspace": _CAPTURE_TESTS,
    "workers/_capture_git": _CAPTURE_TESTS,
    # Board governance (modes, managers, intents and their decisions) and review work.
    "room_server/_board/_governance": _BOARD_GOVERNANCE_TESTS,
    "room_server/_board/_intents": _BOARD_GOVERNANCE_TESTS,
    "room_server/_board/_reviews": _BOARD_GOVERNANCE_TESTS,
    "room_server/_board/_decisions": _BOARD_GOVERNANCE_TESTS,
    "mcp_server/_wake_tools": _MCP_TESTS,
    "mcp_server/_reasoning_tool": _MCP_TESTS,
    "mcp_server/_workspace_tools": _MCP_TESTS,
    # The host layer's pure modules: the records of the state file, the
    # acting worker, names and codenames (the room allocates with them too),
    # and the state file's lock.
    "workers/_records": _WORKER_TESTS,
    "workers/_acting": _WORKER_TESTS,
    "workers/_names": (*_WORKER_TESTS, *_ROOM_TESTS),
    "workers/_statelock": _WORKER_TESTS,
}
# Scale tests (thousands of sessions, seconds each) would run against every
# mutant of the goodbye; the unit tests assert the same promises in milliseconds.
# A mutant that hangs a test (a goodbye that never ends spins the mock clock
# forever) fails it after 60 s of wall time, where each test takes under one on
# a quiet machine; on a shared one a test of a hundred hypothesis examples took
# over 15 s, and a clean run that fails stops the module's whole run.
MUTATION_PYTEST_ARGS = ("-m", "not slow and not load", "--timeout=60")
# Where the survivors judged equivalent are listed, each with why.
EQUIVALENT_MUTANTS_DOC = Path("docs/mutation.md")
# A conftest.py at the root of mutmut's copy: it stops the run if pytest (or the
# pytest11 entry point of an installed letagents-trio) imported the package from
# anywhere but the mutated copy, which would make every mutant survive unseen,
# and lifts hypothesis's deadline, which a loaded machine misses at random.
MUTATION_GUARD = """\
from pathlib import Path

import letagents_trio
import letagents_trio._pytest_plugin
from hypothesis import settings

# A mutant is judged by what the tests assert, not by how fast hypothesis's
# examples run on a loaded machine.
settings.register_profile("mutation", deadline=None)
settings.load_profile("mutation")


def pytest_configure(config):
    here = Path(__file__).resolve().parent
    for module in (letagents_trio, letagents_trio._pytest_plugin):
        where = Path(module.__file__).resolve()
        if not where.is_relative_to(here):
            raise RuntimeError(f"{module.__name__} imported from {where}, not from {here}")
"""
# mutmut's exit codes of a mutant that a test caught, as its own stats table
# reads them: killed (a test failed) or timed out (mutmut's CPU limit). Any
# other verdict (survived, no test calls the function, ...) is a miss.
KILLED_EXIT_CODES = frozenset({1, 3})
TIMEOUT_EXIT_CODES = frozenset({24, -24, 152, 255, 36})
VERDICTS = {0: "survived", 5: "no tests", 33: "no tests", None: "not checked"}


def _folder(module: str) -> Path:
    """``mutants/<module>/``, one level down for every module (``room_server._presence``)."""
    return Path("mutants") / module.replace("/", ".")


def _mutation_folder(module: str) -> Path:
    """Lay out ``mutants/<module>/`` for one mutmut run over ``letagents_trio/<module>.py``."""
    folder = _folder(module)
    # A fresh copy each run: mutmut keeps a verdict while the function is
    # unchanged, so a survivor would stay one after a test that kills it.
    shutil.rmtree(folder / "mutants", ignore_errors=True)
    folder.mkdir(parents=True, exist_ok=True)
    # The docs too: tests read the commands and names the pages give.
    for name in ("letagents_trio", "tests", "docs"):
        link = folder / name
        if not link.is_symlink():
            link.symlink_to(Path("..", "..", name), target_is_directory=True)
    (folder / "conftest.py").write_text(MUTATION_GUARD)
    settings = {
        "source_paths": ["letagents_trio"],
        "only_mutate": [f"letagents_trio/{module}.py"],
        "also_copy": ["conftest.py", "docs"],
        "pytest_add_cli_args_test_selection": sorted(
            str(path) for pattern in MUTATION_TARGETS[module] for path in Path().glob(pattern)
        ),
        "pytest_add_cli_args": list(MUTATION_PYTEST_ARGS),
        "use_git_change_detection": False,
    }
    table = "\n".join(f"{key} = {json.dumps(value)}" for key, value in settings.items())
    pyproject = Path("pyproject.toml").read_text()
    (folder / "pyproject.toml").write_text(f"{pyproject}\n[tool.mutmut]\n{table}\n")
    return folder


def _equivalent_mutants() -> set[str]:
    """The names of the survivors judged equivalent, as docs/mutation.md lists them."""
    text = EQUIVALENT_MUTANTS_DOC.read_text(encoding="utf-8")
    return set(re.findall(r"`(letagents_trio\.[^`\s]+__mutmut_\d+)`", text))


def _mutation_report(session: nox.Session, module: str, folder: Path) -> str:
    """Print one module's missed mutants with their diffs; return its line of the scores."""
    meta = folder / "mutants" / "letagents_trio" / f"{module}.py.meta"
    codes: dict[str, int | None] = json.loads(meta.read_text())["exit_code_by_key"]
    killed = sum(1 for code in codes.values() if code in KILLED_EXIT_CODES)
    timeouts = sum(1 for code in codes.values() if code in TIMEOUT_EXIT_CODES)
    caught = killed + timeouts
    missed = {
        name: VERDICTS.get(code, f"exit code {code}")
        for name, code in sorted(codes.items())
        if code not in KILLED_EXIT_CODES and code not in TIMEOUT_EXIT_CODES
    }
    equivalent = _equivalent_mutants() & set(missed)
    with session.chdir(folder):
        for name, verdict in missed.items():
            if name in equivalent:
                session.log(f"{verdict} (equivalent, see {EQUIVALENT_MUTANTS_DOC}): {name}")
            else:
                session.log(f"{verdict}: {name}")
                session.log(session.run("mutmut", "show", name, silent=True))
    raw = 100.0 * caught / max(1, len(codes))
    judged = len(codes) - len(equivalent)
    score = 100.0 * caught / max(1, judged)
    return (
        f"{module:<26} {raw:5.1f} % raw ({caught}/{len(codes)}: {killed} killed, {timeouts} "
        f"timeouts, {len(missed)} missed)  {score:5.1f} % behaviour ({caught}/{judged}, "
        f"{len(equivalent)} equivalent)"
    )


@nox.session
def mutate(session: nox.Session) -> None:
    """Mutation testing, module by module (``-- _sse workers/_names`` picks some).

    ``-- --report [modules]`` prints the last run's scores and misses again
    (after editing the list of equivalent survivors) without running mutmut.
    """
    # Every extra, as the tests session: the room's tests import the MCP server too.
    install(session, "mutate", extras=ALL_EXTRAS)
    args = list(session.posargs)
    report_only = "--report" in args
    modules = [arg for arg in args if arg != "--report"] or list(MUTATION_TARGETS)
    unknown = sorted(set(modules) - set(MUTATION_TARGETS))
    if unknown:
        session.error(f"unknown modules {unknown}; pick from {sorted(MUTATION_TARGETS)}")
    # One worker: a second one would only compete for the machine's two cores.
    workers = os.environ.get("MUTATE_WORKERS", "1")
    table = []
    for module in modules:
        if report_only:
            folder = _folder(module)
        else:
            folder = _mutation_folder(module)
            with session.chdir(folder):
                session.run("mutmut", "run", "--max-children", workers)
        table.append(_mutation_report(session, module, folder))
    session.log("mutation scores:")
    for line in table:
        session.log(line)
