"""The docs follow the code: the protocol sections it cites, the public names it exports.

1. **Citations.** Code, tests and doc pages cite the protocol as ``PROTOCOL §N``
   (or a bare ``§N``), meaning ``docs/protocol.md``. Every cited number must be
   a heading of that page, or a numbered item or step of the section one level
   up (``§8.3.14`` and ``§8.3 item 14`` are item 14 of §8.3). Ranges (``§7.2-§7.4``,
   ``§8.1.6–7``) stand for every number in them.
2. **Reference.** ``docs/reference.md`` documents, with one heading each,
   exactly the names in ``__all__`` of every public package, and nothing else,
   and is what ``docs/_reference.py`` writes from their docstrings: a name
   added, moved or removed, or a docstring changed, fails here until the
   script has been run again.
3. **Paths.** Every repository file a doc page names (``letagents_trio/…``,
   ``tests/…``, ``nurseries/…``, ``bench/…``) exists, so a module that moves
   fails here until the pages that name it follow.
4. **Layers.** The import rules ``docs/architecture.md`` states hold in every
   module: core ← host layer ← programs.
5. **Architecture.** ``docs/architecture.md`` has a row for every module of the
   package, in the table of its layer, and every row of "Where each rule
   lives" names files that exist and, in parentheses, names those files define.
6. **Plain Markdown.** The reading pages (every page of ``docs/`` but the Sphinx
   site's own, and the README and CHANGELOG) read complete where Markdown is
   rendered without Sphinx: no MyST role (``{class}`…```, ``{doc}`…```) and no
   directive, on every page (``docs/conf.py`` gives the site its navigation
   and the changelog at build time).
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import pkgutil
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import letagents_trio

ROOT = Path(__file__).parent.parent
DOCS = ROOT / "docs"
PROTOCOL = DOCS / "protocol.md"
REFERENCE = DOCS / "reference.md"

# --- 1. protocol citations ----------------------------------------------------

# The SSE decoder and its tests cite the HTML standard (WHATWG §9.2.5-9.2.6),
# not the protocol.
HTML_STANDARD_CITERS = frozenset({"letagents_trio/_sse.py", "tests/test_sse.py"})

_NUMBER = r"\d+(?:\.\d+)*"
_ITEMS = r"\d+(?:\s*[-–]\s*\d+)?(?:\s*(?:,|and)\s*\d+(?:\s*[-–]\s*\d+)?)*"
CITATION = re.compile(
    rf"(?P<html>WHATWG\s+|HTML\s+)?§(?P<first>{_NUMBER})"
    rf"(?:\s*[-–]\s*§?(?P<last>{_NUMBER}))?"
    rf"(?:\s+(?:items?|steps?)\s+(?P<items>{_ITEMS}))?"
)
HEADING = re.compile(rf"^#{{1,6}}\s+(?P<number>{_NUMBER})\.?\s", re.MULTILINE)

Number = tuple[int, ...]


def _number(text: str) -> Number:
    return tuple(int(part) for part in text.split("."))


def _span(first: Number, last: Number) -> list[Number]:
    """Every number from ``first`` to ``last``; ``last`` may give only its tail."""
    last = first[: len(first) - len(last)] + last
    if first[:-1] != last[:-1] or last[-1] < first[-1]:
        return [first, last]
    return [(*first[:-1], n) for n in range(first[-1], last[-1] + 1)]


def _items(text: str) -> Iterator[int]:
    """``2-4 and 10`` → 2, 3, 4, 10."""
    for part in re.split(r"\s*(?:,|and)\s*", text):
        low, _, high = re.sub(r"\s", "", part).replace("–", "-").partition("-")
        yield from range(int(low), int(high or low) + 1)


def cited_numbers(text: str) -> Iterator[Number]:
    """Every protocol section or item that ``text`` cites."""
    for match in CITATION.finditer(text):
        if match["html"]:
            continue
        first = _number(match["first"])
        numbers = _span(first, _number(match["last"])) if match["last"] else [first]
        if match["items"]:
            numbers = [(*numbers[-1], item) for item in _items(match["items"])]
        yield from numbers


def citing_files() -> list[Path]:
    files = [
        *sorted((ROOT / "letagents_trio").rglob("*.py")),
        *sorted((ROOT / "tests").rglob("*.py")),
    ]
    files += sorted(DOCS.glob("*.md"))
    return [f for f in files if f.relative_to(ROOT).as_posix() not in HTML_STANDARD_CITERS]


def protocol_sections() -> dict[Number, str]:
    """Each numbered heading of docs/protocol.md, with the text up to the next heading."""
    text = PROTOCOL.read_text()
    headings = list(HEADING.finditer(text))
    every = [m.start() for m in re.finditer(r"^#{1,6}\s", text, re.MULTILINE)]
    sections: dict[Number, str] = {}
    for match in headings:
        end = next((start for start in every if start > match.start()), len(text))
        number = _number(match["number"])
        assert number not in sections, f"§{match['number']} is a heading twice"
        sections[number] = text[match.end() : end]
    return sections


def resolves(number: Number, sections: dict[Number, str]) -> bool:
    """A heading, or a top-level numbered item of the section one level up."""
    if number in sections:
        return True
    parent = sections.get(number[:-1])
    return parent is not None and re.search(rf"^{number[-1]}\.\s", parent, re.MULTILINE) is not None


def test_the_citation_parser_reads_every_form() -> None:
    assert list(cited_numbers("PROTOCOL §2.1 R4, §3")) == [(2, 1), (3,)]
    assert list(cited_numbers("PROTOCOL.md §5.4, §7.2-§7.4 and")) == [
        (5, 4),
        (7, 2),
        (7, 3),
        (7, 4),
    ]
    assert list(cited_numbers("§8.1.6–7: after")) == [(8, 1, 6), (8, 1, 7)]
    assert list(cited_numbers("§8.5 items 2-4 and 10")) == [
        (8, 5, 2),
        (8, 5, 3),
        (8, 5, 4),
        (8, 5, 10),
    ]
    assert list(cited_numbers("(§2.2 steps 1-4)")) == [(2, 2, 1), (2, 2, 2), (2, 2, 3), (2, 2, 4)]
    assert list(cited_numbers("the §5.2 item 13 text")) == [(5, 2, 13)]
    assert list(cited_numbers("(WHATWG §9.2.7)")) == []


def test_protocol_headings_are_numbered_in_order() -> None:
    numbers = list(protocol_sections())
    assert numbers == sorted(numbers)
    assert [n for n in numbers if len(n) == 1] == [(n,) for n in range(1, 11)]


def test_every_protocol_citation_is_a_section_of_docs_protocol() -> None:
    sections = protocol_sections()
    unresolved = sorted(
        {
            f"{path.relative_to(ROOT)}: §{'.'.join(map(str, number))}"
            for path in citing_files()
            for number in cited_numbers(path.read_text())
            if not resolves(number, sections)
        }
    )
    assert unresolved == []


def test_the_code_cites_the_protocol_many_times() -> None:
    # A guard on the scan itself: it found the code's citations (about 50 say
    # "PROTOCOL §", more cite a bare §), so the test above is not vacuous.
    files = [f for f in citing_files() if f.suffix == ".py"]
    assert sum(len(list(cited_numbers(f.read_text()))) for f in files) > 150


def test_the_protocol_module_says_where_protocol_citations_point() -> None:
    doc = importlib.import_module("letagents_trio._protocol").__doc__ or ""
    assert "docs/protocol.md" in doc


# --- 2. the reference ------------------------------------------------------------

# Every public package: the root and each subpackage without a leading underscore.
PUBLIC_PACKAGES = [
    "letagents_trio",
    "letagents_trio.workers",
    "letagents_trio.testing",
    "letagents_trio.room_server",
    "letagents_trio.mcp_server",
]

_PACKAGE_HEADING = re.compile(r"^## .*`(?P<package>letagents_trio[\w.]*)`$")
_NAME_HEADING = re.compile(r"^#### `(?P<name>\w+)`$")


def _generator() -> Any:
    spec = importlib.util.spec_from_file_location("_reference", DOCS / "_reference.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def documented_names() -> list[tuple[str, str]]:
    """(package, name) for every name the reference gives a heading of its own."""
    names = []
    package = None
    for line in REFERENCE.read_text(encoding="utf-8").splitlines():
        if m := _PACKAGE_HEADING.match(line):
            package = m["package"]
        elif (m := _NAME_HEADING.match(line)) and package is not None:
            names.append((package, m["name"]))
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


def test_the_reference_is_what_its_script_writes_from_the_docstrings() -> None:
    """Issue 42: Markdown that reads on GitHub, never stale: ``python docs/_reference.py``."""
    assert REFERENCE.read_text(encoding="utf-8") == _generator().render(), (
        "docs/reference.md is stale: run python docs/_reference.py"
    )


def test_the_reference_turns_rest_and_google_style_into_markdown() -> None:
    generator = _generator()
    assert generator.inline("See :class:`~letagents_trio.HoldPolicy` and ``x = 1``.") == (
        "See `HoldPolicy` and `x = 1`."
    )
    assert generator.inline(":meth:`the hold <ConnectionManager.hold>`") == "the hold"

    def sample() -> None:
        """Do it.

        Args:
            first: the first
                thing, continued.
            second (int): the second.

        Call it so::

            do_it()
        """

    assert generator.docstring(sample) == [
        "Do it.",
        "",
        "**Args:**",
        "",
        "- `first`: the first thing, continued.",
        "- `second` (int): the second.",
        "",
        "Call it so:",
        "",
        "```text",
        "do_it()",
        "```",
    ]


# --- 3. paths named in the docs -----------------------------------------------------

PATH = re.compile(r"`(?P<path>(?:letagents_trio|tests|nurseries|bench)/[\w/.-]+\.(?:py|txt))`")


def test_every_repository_file_a_page_names_exists() -> None:
    missing = sorted(
        f"{page.name}: {match['path']}"
        for page in DOCS.glob("*.md")
        for match in PATH.finditer(page.read_text())
        if not (ROOT / match["path"]).is_file()
    )
    assert missing == []


# --- 4. the layers -------------------------------------------------------------------

PACKAGE = ROOT / "letagents_trio"
# Modules at the root that are programs, not core.
ROOT_PROGRAMS = frozenset(
    {"letagents_trio.cli", "letagents_trio.__main__", "letagents_trio._pytest_plugin"}
)


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> Iterator[str]:
    """Every ``letagents_trio`` module ``path`` imports, relative imports resolved."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names if a.name.startswith("letagents_trio"))
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                stem = ".".join(base)
            elif node.module and node.module.startswith("letagents_trio"):
                stem = ""
            else:
                continue
            if node.module:
                yield f"{stem}.{node.module}" if stem else node.module
            else:
                yield from (f"{stem}.{alias.name}" for alias in node.names)


def layer(module: str) -> str:
    """``core``, ``workers``, or the program a module belongs to."""
    parts = module.split(".")
    if module in ROOT_PROGRAMS:
        return parts[1]
    if len(parts) > 1 and (parts[1] == "workers" or not parts[1].startswith("_")):
        return parts[1]
    if len(parts) > 1 and parts[1] == "_demo":
        return "_demo"
    return "core"


# The host layer's pure modules the room and its clients share.
ROOM_SHARES = frozenset(
    {"letagents_trio.workers._names", "letagents_trio.workers._intent_payloads"}
)


def allowed(importer: str, imported: str) -> bool:
    """The rules of docs/architecture.md, "Which way imports go"."""
    source, target = layer(importer), layer(imported)
    if target == source or target == "core":
        return True
    if source == "__main__":
        return imported == "letagents_trio.cli"
    if target in ("_demo", "cli"):
        return False
    if source == "core":
        return False
    if source == "workers":
        return False
    if source == "room_server":
        return imported in ROOM_SHARES
    return True


def test_the_layer_of_a_module() -> None:
    assert layer("letagents_trio") == "core"
    assert layer("letagents_trio._manager") == "core"
    assert layer("letagents_trio.workers._state") == "workers"
    assert layer("letagents_trio.room_server._room") == "room_server"
    assert layer("letagents_trio._demo") == "_demo"
    assert layer("letagents_trio.cli") == "cli"
    assert layer("letagents_trio._pytest_plugin") == "_pytest_plugin"


def test_imports_run_one_way() -> None:
    wrong = sorted(
        f"{_module_name(path)} imports {imported}"
        for path in PACKAGE.rglob("*.py")
        for imported in _imports(path)
        if not allowed(_module_name(path), imported)
    )
    assert wrong == []


def test_the_import_scan_sees_imports() -> None:
    # A guard on the scan itself: the worker handles use the core.
    imported = set(_imports(PACKAGE / "workers" / "_handles.py"))
    assert "letagents_trio._client" in imported
    assert "letagents_trio.workers._state" in imported


# --- 5. the architecture page -----------------------------------------------------------

ARCHITECTURE = DOCS / "architecture.md"
# The module tables of the architecture page, by heading, and the folder their rows are in.
MODULE_TABLES = {
    "### The core: `letagents_trio`": PACKAGE,
    "### The host layer: `letagents_trio.workers`": PACKAGE / "workers",
    "### The programs": PACKAGE,
}
_ROW_NAME = re.compile(r"^\| `(?P<name>[\w/.]+\.py)` \|", re.MULTILINE)
# One place in a "where" cell: a path, then what in it holds the rule.
_PLACE = re.compile(r"`(?P<path>letagents_trio/[\w/.]+\.py)`(?: \((?P<names>[^)]*)\))?")


def _section(text: str, heading: str) -> str:
    start = text.index(heading) + len(heading)
    end = text.find("\n#", start)
    return text[start : end if end != -1 else len(text)]


def _listed_modules() -> set[Path]:
    text = ARCHITECTURE.read_text()
    listed = set()
    for heading, folder in MODULE_TABLES.items():
        for match in _ROW_NAME.finditer(_section(text, heading)):
            listed.add(folder / match["name"])
    return listed


def test_the_architecture_page_has_a_row_for_every_module() -> None:
    modules = set(PACKAGE.rglob("*.py"))
    listed = _listed_modules()
    assert sorted(str(m.relative_to(ROOT)) for m in modules - listed) == []
    assert sorted(str(m.relative_to(ROOT)) for m in listed - modules) == []


def _defines(path: Path, name: str) -> bool:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            if node.name == name:
                return True
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
    return False


def test_each_rule_lives_where_the_architecture_page_says() -> None:
    table = _section(ARCHITECTURE.read_text(), "## Where each rule lives")
    rows = [line for line in table.splitlines() if line.startswith("| ") and "`" in line]
    assert len(rows) > 30
    wrong = []
    for row in rows:
        places = list(_PLACE.finditer(row.rsplit(" | ", 1)[-1]))
        assert places, row
        for place in places:
            path = ROOT / place["path"]
            if not path.is_file():
                wrong.append(f"{place['path']}: no such file")
                continue
            for name in (place["names"] or "").split(","):
                name = name.strip().strip("`")
                if name and not _defines(path, name):
                    wrong.append(f"{place['path']} does not define {name}")
    assert wrong == []


def test_the_architecture_checks_see_a_missing_row_and_a_wrong_place() -> None:
    """The two checks above read the page as written, not whatever they are given."""
    assert PACKAGE / "_manager.py" in _listed_modules()
    assert PACKAGE / "workers" / "_state.py" in _listed_modules()
    assert PACKAGE / "mcp_server" / "_tools.py" in _listed_modules()
    assert _defines(PACKAGE / "_manager.py", "ineligibility")
    assert not _defines(PACKAGE / "_holder.py", "ineligibility")


# --- 6. plain Markdown --------------------------------------------------------------------

_FENCED = re.compile(r"^(?P<fence>```+|~~~+)(?P<info>.*?)$.*?^(?P=fence)[ \t]*$", re.M | re.S)
# A role outside code spans; a code span is matched first where one starts earlier.
_ROLE_OR_CODE = re.compile(
    r"(?P<role>\{[A-Za-z][\w:+-]*\}`[^`]+`)|(?P<code>(`+)[\s\S]*?(?<!`)\3(?!`))"
)
_COLON_DIRECTIVE = re.compile(r"^:::+\s*\{", re.MULTILINE)


def sphinx_markup(text: str) -> list[str]:
    """The MyST roles and directives in ``text``: what only Sphinx renders."""
    found = [m["info"].strip() for m in _FENCED.finditer(text) if m["info"].strip()[:1] == "{"]
    prose = _FENCED.sub("", text)
    found += [m["role"] for m in _ROLE_OR_CODE.finditer(prose) if m["role"]]
    found += [m.group(0) for m in _COLON_DIRECTIVE.finditer(prose)]
    return found


def reading_pages() -> list[Path]:
    return [*sorted(DOCS.glob("*.md")), ROOT / "README.md", ROOT / "CHANGELOG.md"]


def test_the_reading_pages_hold_no_sphinx_markup() -> None:
    markup = {
        str(page.relative_to(ROOT)): found
        for page in reading_pages()
        if (found := sphinx_markup(page.read_text(encoding="utf-8")))
    }
    assert markup == {}


def test_the_markup_scan_sees_roles_and_directives_but_not_code() -> None:
    text = (
        "See {class}`~letagents_trio.HoldPolicy` and {meth}`X.y\n<a.X.y>`, not `GET R/{t}`.\n"
        "```{toctree}\nquickstart\n```\n```python\nx = {b}`\n```\n:::{note}\nhi\n:::\n"
    )
    assert sphinx_markup(text) == [
        "{toctree}",
        "{class}`~letagents_trio.HoldPolicy`",
        "{meth}`X.y\n<a.X.y>`",
        ":::{",
    ]
    # Issue 42: the site's own pages too (the index, the changelog, the reference).
    assert {page.name for page in reading_pages()} >= {
        "cancellation.md",
        "README.md",
        "index.md",
        "changelog.md",
        "reference.md",
    }
