"""The docs follow the code: the protocol sections it cites, the public names it exports.

2. **Reference.** ``docs/reference.md`` documents, with one autodoc directive
   each, exactly the names in ``__all__`` of every public package, and nothing
   else: a name added to, moved between or removed from the packages fails
   here until the reference follows.
3. **Paths.** Every repository file a doc page names (``tests/…``,
   ``nurseries/…``, ``bench/…``) exists.
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import letagents_trio

ROOT = Path(__file__).parent.parent
DOCS = ROOT / "docs"
PROTOCOL = DOCS / "protocol.md"
REFERENCE = DOCS / "reference.md"

# --- 2. the reference ------------------------------------------------------------

# Every public package: the root and each subpackage without a leading underscore.
PUBLIC_PACKAGES = [
    "letagents_trio",
    "letagents_trio.workers",
    "letagents_trio.testing",
    "letagents_trio.room_server",
    "letagents_trio.mcp_server",
]

DIRECTIVE = re.compile(
    r"^\.\. (?P<kind>auto\w+):: (?P<target>\S+)\n(?P<options>(?:   :.*\n)*)", re.MULTILINE
)


def reference_directives() -> list[tuple[str, str, str]]:
    return [
        (m["kind"], m["target"], m["options"]) for m in DIRECTIVE.finditer(REFERENCE.read_text())
    ]


def documented_names() -> list[tuple[str, str]]:
    """(package, name) for every directive that documents one object."""
    names = []
    for kind, target, _ in reference_directives():
        if kind != "automodule":
            package, _, name = target.rpartition(".")
            names.append((package, name))
    return names


def test_the_public_packages_are_the_root_and_its_public_subpackages() -> None:
    subpackages = {
        f"letagents_trio.{info.name}"
        for info in pkgutil.iter_modules(letagents_trio.__path__)
        if info.ispkg and not info.name.startswith("_")
    }
    assert {"letagents_trio", *subpackages} == set(PUBLIC_PACKAGES)


@pytest.mark.parametrize("package", PUBLIC_PACKAGES)
def test_the_reference_documents_exactly_all(package: str) -> None:
    exported = set(importlib.import_module(package).__all__)
    documented = {name for owner, name in documented_names() if owner == package}
    assert sorted(documented - exported) == [], "documented but not exported"
    assert sorted(exported - documented) == [], "exported but not documented"


def test_the_reference_documents_nothing_else_and_each_name_once() -> None:
    names = documented_names()
    assert sorted({owner for owner, _ in names} - set(PUBLIC_PACKAGES)) == []
    assert len(names) == len(set(names))


def test_modules_in_the_reference_bring_prose_not_members() -> None:
    # An automodule with members would document names this test cannot see.
    modules = [
        (target, options)
        for kind, target, options in reference_directives()
        if kind == "automodule"
    ]
    assert modules
    assert [target for target, options in modules if ":no-members:" not in options] == []


# --- 3. paths named in the docs -----------------------------------------------------

PATH = re.compile(r"`(?P<path>(?:tests|nurseries|bench)/[\w/.-]+\.(?:py|txt))`")


def test_every_repository_file_a_page_names_exists() -> None:
    missing = sorted(
        f"{page.name}: {match['path']}"
        for page in DOCS.glob("*.md")
        for match in PATH.finditer(page.read_text())
        if not (ROOT / match["path"]).is_file()
    )
    assert missing == []
