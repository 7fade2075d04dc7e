"""The code on the pages is the code that runs (issue 29).

The docs read complete as plain Markdown, in a clone or on a forge: every
example is inline, never a Sphinx ``{literalinclude}`` (which such a reader
sees as nothing). An HTML comment before a fenced block, invisible on every
renderer, says where the block comes from:

* ``<!-- file: PATH -->``: the block is the whole repository file ``PATH``
  (a program of ``nurseries/``, run by ``tests/e2e/test_nurseries.py``, or its
  checked-in output);
* ``<!-- excerpt: PATH -->``: the block is consecutive lines of ``PATH``, as
  they are there but for a common indentation;
* ``<!-- as: NAME -->``: the block is (a part of) a file ``NAME`` that a test
  writes out and runs as a reader would (``tests/e2e/test_quickstarts.py``,
  ``tests/e2e/test_doc_recipes.py``): blocks of one page with the same name
  are joined in order.

Every other Python block must at least be Python (fragments may ``await``).
"""

from __future__ import annotations

import ast
import re
import textwrap
import tomllib
from typing import Final

import pytest
from packaging.requirements import Requirement

from .doc_blocks import PAGES, ROOT, Block, blocks

ALL_BLOCKS: Final = [block for page in PAGES for block in blocks(page)]


def test_no_page_includes_code_the_reader_cannot_see() -> None:
    assert [
        str(page.relative_to(ROOT)) for page in PAGES if "{literalinclude}" in page.read_text()
    ] == []


@pytest.mark.parametrize(
    "block", [b for b in ALL_BLOCKS if b.kind == "file"], ids=lambda b: f"{b}:{b.target}"
)
def test_a_block_that_shows_a_file_is_that_file(block: Block) -> None:
    assert block.target is not None
    assert block.code == (ROOT / block.target).read_text(), f"{block} differs from {block.target}"


@pytest.mark.parametrize(
    "block", [b for b in ALL_BLOCKS if b.kind == "excerpt"], ids=lambda b: f"{b}:{b.target}"
)
def test_an_excerpt_is_consecutive_lines_of_its_file(block: Block) -> None:
    assert block.target is not None
    source = (ROOT / block.target).read_text().splitlines()
    wanted = textwrap.dedent(block.code).splitlines()
    windows = (
        textwrap.dedent("\n".join(source[i : i + len(wanted)])).splitlines()
        for i in range(len(source) - len(wanted) + 1)
    )
    assert wanted in windows, f"{block} is not in {block.target}"


@pytest.mark.parametrize(
    "block",
    [b for b in ALL_BLOCKS if b.info in ("python", "py") and b.kind != "file"],
    ids=str,
)
def test_every_python_block_is_python(block: Block) -> None:
    ast.parse(textwrap.dedent(block.code), str(block), feature_version=(3, 11))


def test_every_nursery_program_is_shown_and_linked_by_name() -> None:
    """Each program of ``nurseries/`` is on a page, linked so a forge's reader can open it."""
    shown = {b.target for b in ALL_BLOCKS if b.kind == "file"}
    linked = {
        match[1]
        for page in PAGES
        for match in re.finditer(r"\]\((?:\.\./)?(nurseries/[\w.]+)\)", page.read_text())
    }
    programs = {f"nurseries/{p.name}" for p in (ROOT / "nurseries").glob("*.py")}
    assert programs - shown == set()
    assert programs - linked == set()


def test_the_markers_are_read() -> None:
    # A guard on the parser itself: the pages use each kind.
    kinds = {b.kind for b in ALL_BLOCKS}
    assert {"file", "excerpt", "as"} <= kinds


# --- facts the pages state -----------------------------------------------------------

NUMBERS: Final = {"four": 4, "five": 5, "six": 6}
DOCS: Final = ROOT / "docs"


def core_dependencies() -> list[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return [Requirement(r).name for r in project["dependencies"]]


def test_the_install_page_names_the_cores_dependencies() -> None:
    """Issue 29: it said four (trio, httpx2, attrs, trio-websocket)."""
    text = " ".join((ROOT / "docs" / "install.md").read_text().split())
    found = re.search(r"The core installs with (\w+) dependencies \(([^)]*)\)", text)
    assert found is not None
    assert [name.strip() for name in found[2].split(",")] == core_dependencies()
    assert NUMBERS[found[1]] == len(core_dependencies())


def test_the_readme_names_the_cores_dependencies() -> None:
    text = " ".join((ROOT / "README.md").read_text().split())
    found = re.search(r"The core needs only ([\w, ]+) and (\w+);", text)
    assert found is not None
    assert [*found[1].split(", "), found[2]] == core_dependencies()


def test_the_mcp_hosts_page_starts_the_room_as_the_room_page_does_with_its_token() -> None:
    """Issue 29: it started the room with ``--owner-token`` on the command line (which
    the room's page and ``--help`` call unsafe), under another example token."""
    hosts = (DOCS / "mcp-hosts.md").read_text()
    room = (DOCS / "room-server.md").read_text()
    assert "--owner-token " not in hosts
    assert "letagents-trio room --owner-tokens-file ~/.letagents/owner-tokens" in hosts
    made = re.search(
        r"printf '(?P<token>[^=']+)=(?P<login>\w+)\\n' > ~/\.letagents/owner-tokens", room
    )
    assert made is not None
    tokens = set(re.findall(r"LETAGENTS_TOKEN(?:\": \"|=)([\w-]+)", hosts))
    assert tokens == {made["token"]}
