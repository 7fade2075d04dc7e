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
_EXTERNAL = (
    "trio|httpx2|attrs|random|enum|contextlib|collections|typing|types|os|pathlib"
    "|datetime|hypercorn|mcp|mcp_types|re"
)
_TYPING = (
    "Mapping|Iterator|AsyncIterator|Awaitable|Callable|Sequence|Any|NoReturn|Protocol"
    "|Path|PathLike|Random|AbstractAsyncContextManager"
)
_BUILTINS = "BaseException|Exception|object|float|int|str|bool|bytes|dict|list|tuple|None|T"
nitpick_ignore_regex = [
    (r"py:.*", rf"({_EXTERNAL})(\..*)?"),
    (r"py:.*", rf"({_TYPING})"),
    (r"py:class", rf"({_BUILTINS})"),
    (r"py:.*", r"Outcome\..*"),
    # Private modules and type aliases that appear in signatures.
    (r"py:.*", r"letagents_trio\.(\w+\.)?_\w+\..*"),
    (
        r"py:class",
        r"(Emit|SessionHook|StillOurs|ASGIApp|Receive|Send|Message|CloseMode|Notifier"
        r"|OwnerTokenSource|Opener|Response|Origin|_SSEStream|_SocketBlock|OpeningBurst"
        r"|CollectorPause|Answer|DropConnection|_asgi\.DropConnection"
        r"|HostWording|Context|CallToolResult|InputRequiredResult)",
    ),
    # The testing kit's instruction to its servers, raised by its rules.
    (r"py:exc", r"DropConnection"),
    # Module constants and row types named in docstrings but not documented on their own.
    (r"py:.*", r"(GRACEFUL_TIMEOUT|SHUTDOWN_TIMEOUT|RoomRow)"),
    # Private helpers and constants of the host layer and the MCP server that
    # their public docstrings name; private, so not in the reference.
    (
        r"py:.*",
        r"(local_owner_slug|local_host_id|detect_runtime_label"
        r"|default_local_chat_path|message_cursor|register_tools|_exit_now"
        r"|MAX_MESSAGE_PAGE|MAX_MESSAGE_CHARS|WAIT_RECHECK_INTERVAL|ConfigError"
        r"|Accounts|MessageBoard|GuidelinesBoard|TaskBoard|KnowledgeBoard)",
    ),
    # Napoleon reads "Returns: X (y: z)" lines as a type.
    (r"py:class", r"(The stream handle|the connection is recorded)"),
]
