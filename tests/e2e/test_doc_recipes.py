"""The recipes of ``docs/testing.md`` run as pasted (issue 29).

The page's blocks marked ``<!-- as: NAME -->`` are joined per name (see
``tests/test_doc_code.py``), written to a temporary directory and run with
pytest in a fresh interpreter, as a reader of the page would run them.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ..doc_blocks import ROOT, pytest_in, runnable

PAGE = ROOT / "docs" / "testing.md"
# One interpreter start and a handful of mock-clock tests, on a busy machine.
BUDGET = 60

pytestmark = pytest.mark.slow


def test_the_page_has_its_configuration_and_its_recipes() -> None:
    files = runnable(PAGE)
    assert set(files) == {"pyproject.toml", "test_recipes.py"}
    assert files["test_recipes.py"].count("\nasync def test_") == 7


async def test_the_recipes_pass_as_pasted(tmp_path: Path) -> None:
    out = await pytest_in(tmp_path, runnable(PAGE), BUDGET)
    assert re.search(r"^7 passed in [\d.]+s$", out, re.MULTILINE), out
