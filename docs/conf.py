"""Sphinx configuration: MyST Markdown pages, furo, autodoc with napoleon."""

from __future__ import annotations

import letagents_trio

project = "letagents-trio"
author = "letagents-trio developers"
release = letagents_trio.__version__
version = release

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
]
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build"]
html_theme = "furo"
html_title = "letagents-trio"
myst_enable_extensions = ["colon_fence", "deflist"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "show-inheritance": False}
napoleon_google_docstring = True
napoleon_numpy_docstring = False

# The docs build offline (no intersphinx): references into other projects'
# docs cannot resolve, so they are listed here instead of silenced wholesale.
nitpicky = True
nitpick_ignore_regex = [
    (r"py:.*", r"(trio|httpx2|attrs|random|enum|contextlib|collections|typing|types|os|pathlib|datetime|starlette|hypercorn|mcp)(\..*)?"),
    (r"py:.*", r"(Mapping|Iterator|AsyncIterator|Awaitable|Callable|Sequence|Any|NoReturn|Protocol|Path|PathLike|Random|Outcome\..*)"),
    (r"py:class", r"(BaseException|Exception|object|float|int|str|bool|bytes|dict|list|tuple|None|T)"),
]
