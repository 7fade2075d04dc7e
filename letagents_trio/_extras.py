"""Which extra a program needs, and a pip command that installs it here.

The core installs with its own dependencies only; each program's third-party
needs come with an extra of ``pyproject.toml`` (``mcp``, ``room``, ``demo``,
``testing``). A program used without its extra (a command, an ``import`` of
its package, the ``fake_room`` fixture) fails with one plain line naming the
extra and a command that installs it into the environment of the running
interpreter: from the package index, or, when this copy was installed from a
folder (a checkout: pip records where in the distribution's
``direct_url.json``, PEP 610), from that folder, since the index form fails
("No matching distribution") for a package that is not published.
"""

from __future__ import annotations

import json
import shlex
import sys
from collections.abc import Mapping
from importlib import metadata
from typing import Final
from urllib.parse import urlsplit
from urllib.request import url2pathname

__all__ = [
    "EXTRA_MODULES",
    "install_command",
    "install_command_for",
    "missing_extra",
    "missing_extra_text",
]

DISTRIBUTION: Final = "letagents-trio"
# The top-level modules each extra brings that this package imports (see
# pyproject.toml); any other missing module is a broken install or a bug.
EXTRA_MODULES: Final[Mapping[str, frozenset[str]]] = {
    "mcp": frozenset({"mcp", "mcp_types"}),
    "room": frozenset({"hypercorn"}),
    "demo": frozenset({"hypercorn", "rich"}),
    "testing": frozenset({"hypercorn", "pytest_trio"}),
}


def install_command_for(extra: str, python: str, direct_url: str | None) -> str:
    """The pip command that installs ``extra`` with ``python``.

    Args:
        extra: the extra's name.
        python: the interpreter whose environment lacks it.
        direct_url: the distribution's ``direct_url.json``, or None (installed
            from an index, or not installed at all).
    """
    folder, editable = _local_folder(direct_url)
    target = f"{DISTRIBUTION if folder is None else folder}[{extra}]"
    flag = "-e " if editable else ""
    return f"{shlex.quote(python)} -m pip install {flag}{shlex.quote(target)}"


def _local_folder(direct_url: str | None) -> tuple[str | None, bool]:
    """The folder a ``direct_url.json`` names (``file://``), and whether it is editable."""
    try:
        data = json.loads(direct_url) if direct_url else None
    except ValueError:
        data = None
    if not isinstance(data, dict):
        return None, False
    url = data.get("url")
    info = data.get("dir_info")
    if not isinstance(url, str) or not isinstance(info, dict):
        return None, False  # an archive or a VCS URL: the index form is the honest one
    parts = urlsplit(url)
    if parts.scheme != "file":
        return None, False
    return url2pathname(parts.path), info.get("editable") is True


def install_command(extra: str) -> str:
    """The pip command that installs ``extra`` for this interpreter and this copy."""
    try:
        direct_url = metadata.distribution(DISTRIBUTION).read_text("direct_url.json")
    except metadata.PackageNotFoundError:
        direct_url = None
    return install_command_for(extra, sys.executable or "python", direct_url)


def missing_extra_text(what: str, extra: str, module: str) -> str:
    """``<what> needs letagents-trio's [<extra>] extra …``, with the command to install it."""
    return (
        f"{what} needs letagents-trio's [{extra}] extra (module {module!r} is not installed);"
        f" install it with: {install_command(extra)}"
    )


def missing_extra(error: ModuleNotFoundError, *, what: str, extra: str) -> ModuleNotFoundError:
    """``error`` as the plain line for ``extra`` when one of its modules is what is missing.

    Any other missing module is returned as it is: a broken install or a bug
    keeps its own message. The result keeps ``name`` (the missing module), so
    an ``except ModuleNotFoundError`` that reads it still can.
    """
    module = (error.name or "").partition(".")[0]
    if module not in EXTRA_MODULES[extra]:
        return error
    return ModuleNotFoundError(missing_extra_text(what, extra, module), name=module)
