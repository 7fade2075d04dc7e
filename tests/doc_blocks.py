"""The fenced code blocks of the pages, and where each says it comes from.

The markers are described in ``tests/test_doc_code.py``, which checks them;
the tests that run a page's examples read them from here.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Final

import attrs
import trio

ROOT: Final = Path(__file__).parent.parent
PAGES: Final = (*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md")
FENCE: Final = re.compile(
    r"(?:^<!-- (?P<kind>file|excerpt|as): (?P<target>\S+) -->\n)?"
    r"^```(?P<info>[^\n`]*)\n(?P<code>.*?)^```$",
    re.MULTILINE | re.DOTALL,
)


@attrs.frozen
class Block:
    page: Path
    line: int
    info: str
    code: str
    kind: str | None
    target: str | None

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    text = page.read_text()
    return [
        Block(
            page=page,
            line=text.count("\n", 0, match.start("code")),
            info=match["info"].strip(),
            code=match["code"],
            kind=match["kind"],
            target=match["target"],
        )
        for match in FENCE.finditer(text)
    ]


def runnable(page: Path) -> dict[str, str]:
    """NAME -> code, the ``as:`` blocks of ``page`` joined in order."""
    joined: dict[str, list[str]] = {}
    for block in blocks(page):
        if block.kind == "as" and block.target is not None:
            joined.setdefault(block.target, []).append(block.code)
    return {name: "\n\n".join(parts) for name, parts in joined.items()}


async def pytest_in(directory: Path, names: dict[str, str], budget: float) -> str:
    """Write ``names`` (file name -> code) into ``directory``, run pytest there; its output.

    A fresh interpreter in that directory, as a reader would run it. Fails the
    test when pytest fails.
    """
    for name, code in names.items():
        (directory / name).write_text(code)
    with trio.fail_after(budget):
        result = await trio.run_process(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider"],
            cwd=directory,
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    out = result.stdout.decode()
    assert result.returncode == 0, out + result.stderr.decode()
    return out
