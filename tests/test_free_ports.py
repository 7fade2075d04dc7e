"""Every example and test binds port 0 (issue 29).

``nurseries/embed_in_your_loop.py`` once served the room on its default port,
3001, so its tests failed ("Address already in use") whenever anything on the
machine served a room there, as a user trying the docs does. This reads the
Python of ``tests/``, ``nurseries/``, ``bench/`` and the pages' code blocks
and finds every place a server is told where to listen:

* ``serve_room(...)``, however it is called (directly, through ``partial`` or
  ``nursery.start``), passes ``port=0``;
* a command line that says ``--port`` says ``0`` after it;
* a hypercorn ``bind`` and ``trio.open_tcp_listeners`` / ``trio.serve_tcp``
  name port 0.
"""

from __future__ import annotations

import ast
import itertools
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from .doc_blocks import PAGES, ROOT, blocks

SOURCES = sorted(
    path for folder in ("tests", "nurseries", "bench") for path in (ROOT / folder).rglob("*.py")
)


def sources() -> Iterator[tuple[str, ast.AST]]:
    for path in SOURCES:
        yield str(path.relative_to(ROOT)), ast.parse(path.read_text())
    for page in PAGES:
        for block in blocks(page):
            if block.info == "python":
                yield str(block), ast.parse(textwrap.dedent(block.code))


def _name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _is_zero(node: ast.AST | None) -> bool:
    return isinstance(node, ast.Constant) and node.value in (0, "0")


def fixed_ports(tree: ast.AST) -> Iterator[int]:
    """Line numbers of the places in ``tree`` that listen on a port other than 0."""
    # A module's own function of that name (a test's small server) is not the room's.
    own = {n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            args = list(node.args)
            callee = _name(node.func)
            if callee in ("partial", "start", "start_soon") and args:
                callee, args = _name(args[0]), args[1:]
            keywords = {k.arg: k.value for k in node.keywords}
            room = callee == "serve_room" and callee not in own
            if room and not _is_zero(keywords.get("port")):
                yield node.lineno
            if callee == "open_tcp_listeners" and not _is_zero(args[0] if args else None):
                yield node.lineno
            if callee == "serve_tcp" and not _is_zero(args[1] if len(args) > 1 else None):
                yield node.lineno
        elif isinstance(node, (ast.List, ast.Tuple)):
            for here, after in itertools.pairwise(node.elts):
                port_option = isinstance(here, ast.Constant) and here.value == "--port"
                if port_option and not _is_zero(after):
                    yield node.lineno
        elif isinstance(node, ast.Assign) and any(_name(t) == "bind" for t in node.targets):
            binds = node.value.elts if isinstance(node.value, ast.List) else [node.value]
            for bind in binds:
                if not (isinstance(bind, ast.Constant) and str(bind.value).endswith(":0")):
                    yield node.lineno


def test_every_server_in_the_tests_examples_and_pages_listens_on_port_0() -> None:
    fixed = [f"{where}: line {line}" for where, tree in sources() for line in fixed_ports(tree)]
    assert fixed == []


@pytest.mark.parametrize(
    "code",
    [
        "await nursery.start(serve_room, room)",
        "await nursery.start(partial(serve_room, room, port=3001))",
        "serve_room(room)",
        "command = ['letagents-trio', 'room', '--port', '3001']",
        "config.bind = ['127.0.0.1:3001']",
        "await trio.open_tcp_listeners(8080)",
        "await nursery.start(trio.serve_tcp, handler, 3001)",
    ],
)
def test_the_scan_finds_a_fixed_port(code: str) -> None:
    assert list(fixed_ports(ast.parse(code))) == [1]


@pytest.mark.parametrize(
    "code",
    [
        "await nursery.start(partial(serve_room, room, port=0))",
        "command = ['letagents-trio', 'room', '--port', '0']",
        "config.bind = ['127.0.0.1:0']",
        "await trio.open_tcp_listeners(0, host='127.0.0.1')",
        "await nursery.start(partial(trio.serve_tcp, handler, 0, host='127.0.0.1'))",
    ],
)
def test_port_0_passes(code: str) -> None:
    assert list(fixed_ports(ast.parse(code))) == []


def test_the_scan_reads_the_files_that_serve() -> None:
    # A guard on the scan: it reads the nursery and the loopback tests.
    names = {Path(where).name for where, _ in sources()}
    assert {"embed_in_your_loop.py", "test_loopback.py", "room_process.py"} <= names
