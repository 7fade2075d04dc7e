"""Sphinx configuration: MyST Markdown pages, furo.

Every page is plain Markdown that reads the same on GitHub (``tests/test_docs.py``
checks): the API reference is written from the docstrings by
``docs/_reference.py``. What only the site needs is added here as the pages
are read: the index's links become its navigation (a hidden toctree of the
pages it links, in order), and the changelog page shows ``CHANGELOG.md`` in
full where the page itself links to it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import letagents_trio

DOCS = Path(__file__).parent
# A link to another page of docs/: [text](page.md).
_PAGE_LINK = re.compile(r"\]\((?P<page>[\w-]+)\.md\)")

project = "letagents-trio"
author = "letagents-trio developers"
release = letagents_trio.__version__
version = release

extensions = ["myst_parser"]
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build"]
html_theme = "furo"
html_title = "letagents-trio"
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

# Every cross-reference must resolve (-n): a broken link between pages fails the build.
nitpicky = True


def _site_only(app: Any, docname: str, source: list[str]) -> None:
    """Add what only the site needs to a page as it is read (see the module docstring)."""
    if docname == "index":
        pages = list(dict.fromkeys(m["page"] for m in _PAGE_LINK.finditer(source[0])))
        source[0] += "\n```{toctree}\n:hidden:\n\n" + "\n".join(pages) + "\n```\n"
    elif docname == "changelog":
        source[0] = (DOCS.parent / "CHANGELOG.md").read_text(encoding="utf-8")


def setup(app: Any) -> dict[str, bool]:
    app.connect("source-read", _site_only)
    return {"parallel_read_safe": True}
