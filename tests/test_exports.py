"""Keep the public packages' ``__all__`` honest (httpx's test_exported_members, our way).

For each public package: ``__all__`` is sorted, has no duplicates, names only
things that exist, and equals the set of public names in the module's namespace
(submodules and ``from __future__`` features aside). Every exported class is
``typing.final``, unless it is meant to be subclassed or matched structurally:
an Enum, a Protocol, or an exception with subclasses (a branch of the
error tree). Every exported class or function was
defined in the package (nothing borrowed from a dependency) and names the
public package as its ``__module__``.
"""

from __future__ import annotations
import __future__

import enum
import importlib
import inspect
import subprocess
import sys
import types
from typing import Any

import pytest

PACKAGES = [
    "letagents_trio",
    "letagents_trio.workers",
    "letagents_trio.testing",
    "letagents_trio.room_server",
    "letagents_trio.mcp_server",
]

# Dunder names a package exports on purpose.
EXPORTED_DUNDERS = frozenset({"__version__"})


def public_names(module: types.ModuleType) -> set[str]:
    return {
        name
        for name, value in vars(module).items()
        if (not name.startswith("_") or name in EXPORTED_DUNDERS)
        and not isinstance(value, types.ModuleType)
        and not isinstance(value, __future__._Feature)
    }


def exported(package: str) -> list[tuple[str, Any]]:
    module = importlib.import_module(package)
    return [(name, getattr(module, name)) for name in module.__all__]


@pytest.fixture(params=PACKAGES)
def module(request: pytest.FixtureRequest) -> types.ModuleType:
    return importlib.import_module(request.param)


def _isort_style(name: str) -> tuple[int, str]:
    # ruff's RUF022 order: CONSTANTS, then Classes, then functions (and dunders).
    return (0 if name.isupper() else 1 if name[:1].isupper() else 2, name)


def test_all_is_sorted_without_duplicates(module: types.ModuleType) -> None:
    assert list(module.__all__) == sorted(set(module.__all__), key=_isort_style)


def test_all_names_exist(module: types.ModuleType) -> None:
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert missing == []


def test_all_is_exactly_the_public_namespace(module: types.ModuleType) -> None:
    assert sorted(public_names(module)) == sorted(module.__all__)


def test_star_import_gives_exactly_all(module: types.ModuleType) -> None:
    namespace: dict[str, Any] = {}
    exec(f"from {module.__name__} import *", namespace)
    namespace.pop("__builtins__")
    assert sorted(namespace) == sorted(module.__all__)


def _may_be_subclassed(cls: type) -> bool:
    # Exceptions stay open only where the tree branches (LetAgentsError, StateError).
    return (
        issubclass(cls, enum.Enum)
        or bool(getattr(cls, "_is_protocol", False))
        or (issubclass(cls, BaseException) and bool(cls.__subclasses__()))
    )


@pytest.mark.parametrize("package", PACKAGES)
def test_exported_classes_are_final_unless_meant_to_be_extended(package: str) -> None:
    open_classes = [
        name
        for name, value in exported(package)
        if inspect.isclass(value)
        and not getattr(value, "__final__", False)
        and not _may_be_subclassed(value)
    ]
    assert open_classes == []


@pytest.mark.parametrize("package", PACKAGES)
def test_exported_objects_say_where_users_import_them_from(package: str) -> None:
    # Defined in the package's private modules (nothing borrowed from a
    # dependency), and their __module__ rewritten to the public path.
    elsewhere = [
        (name, value.__module__)
        for name, value in exported(package)
        if (inspect.isclass(value) or inspect.isfunction(value)) and value.__module__ != package
    ]
    assert elsewhere == []


def test_the_errors_exported_are_the_whole_tree() -> None:
    import letagents_trio

    # The core exports the core's errors, the host layer its own: together the tree.
    errors = {
        name
        for package in ("letagents_trio", "letagents_trio.workers")
        for name, value in exported(package)
        if inspect.isclass(value) and issubclass(value, BaseException)
    }
    assert all(
        issubclass(value, letagents_trio.LetAgentsError)
        for package in ("letagents_trio", "letagents_trio.workers")
        for name, value in exported(package)
        if name in errors
    )
    defined = {
        name
        for name, value in vars(importlib.import_module("letagents_trio._errors")).items()
        if inspect.isclass(value) and issubclass(value, letagents_trio.LetAgentsError)
    }
    assert defined <= errors


def test_version_is_a_string() -> None:
    import letagents_trio

    assert isinstance(letagents_trio.__version__, str)
    assert letagents_trio.__version__


def test_the_lead_asked_for_these_core_names() -> None:
    import letagents_trio

    for name in (
        "AgentSession",
        "AttemptRejected",
        "HoldPolicy",
        "Outcome",
        "ProcessConnector",
        "RoomClient",
        "SSEConnector",
        "StreamNews",
        "open_connection_manager",
    ):
        assert name in letagents_trio.__all__


def test_importing_the_library_imports_no_test_framework() -> None:
    """``import letagents_trio`` leaves ``trio.testing`` and pytest unloaded.

    ``trio.testing`` imports pytest and with it some 170 modules: every
    program that holds sessions would pay for them in memory and start-up
    time. Run in a fresh interpreter, since this one has pytest loaded.
    """
    code = (
        "import sys, letagents_trio, letagents_trio.workers\n"
        "print(sorted(m for m in ('trio.testing', 'pytest', '_pytest') if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert out.strip() == "[]"
