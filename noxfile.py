"""The single entry point for checks: ``nox -s tests lint typing docs nurseries``.

Each session installs the project with the extras its programs import and one
PEP 735 dependency group from pyproject.toml, so the lists of tools and of
dependencies live in one place.
"""

from __future__ import annotations

from pathlib import Path

import nox

nox.options.default_venv_backend = "venv"
nox.options.reuse_existing_virtualenvs = True
nox.options.sessions = ["tests", "lint", "typing", "docs", "nurseries"]

PYPROJECT = nox.project.load_toml("pyproject.toml")
SOURCE_FOLDERS = ("letagents_trio", "nurseries", "tests", "bench")
# Functions that take task_status, so flake8-async's ASYNC113 knows them.
STARTABLES = ",".join(
    (
        "serve_connection_manager",
        "serve_room",
        "run",
        "hold",
        "hold_stream",
        "run_server",
        "_serve",
        "_run_process",
        "_run_hypercorn",
        "serve_hypercorn",
        "_holders_nursery",
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


@nox.session
def tests(session: nox.Session) -> None:
    """Run the test suite (the README's test command runs this)."""
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
    """Run every example program in nurseries/."""
    install(session, extras=("mcp", "room", "testing"))
    for program in sorted(Path("nurseries").glob("*.py")):
        session.run("python", str(program))


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
