"""Write ``docs/reference.md``, the API reference, from the public names' docstrings.

Run ``python docs/_reference.py`` after changing a public name or its
docstring; ``tests/test_docs.py`` renders the page again and fails while the
checked-in one differs, so it never goes stale. The page is plain Markdown: it
reads on GitHub as it does in the Sphinx site.

Each public package (``__all__``) is a section; its names come in the groups
listed in :data:`GROUPS`, and a name not listed there goes into the package's
last group, so a new public name only needs a run of this script. Each name
shows its signature (a ``text`` block: a class's is its constructor's, which
is no Python statement) and its docstring, turned from reST and Google style into
Markdown: ``code`` and cross-references become code spans, ``Args:``-style
sections become bold headings with lists, and ``::`` blocks become fenced code.
Public methods and properties of a class follow it.
"""

from __future__ import annotations

import enum
import importlib
import inspect
import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

PAGE = Path(__file__).with_name("reference.md")

# (package, its section's title, [(group title, [names])]).
GROUPS: list[tuple[str, str, list[tuple[str, list[str]]]]] = [
    (
        "letagents_trio",
        "The core",
        [
            (
                "Connection manager",
                [
                    "open_connection_manager",
                    "serve_connection_manager",
                    "ConnectionManager",
                    "ExitAnnouncement",
                    "ManagerStatistics",
                    "HolderStateHooks",
                ],
            ),
            (
                "Holders",
                [
                    "ProcessHolder",
                    "HolderStatus",
                    "HolderStatistics",
                    "HoldPolicy",
                    "Outcome",
                    "HolderEvent",
                    "EventKind",
                ],
            ),
            ("The room API", ["RoomClient", "StateHooks", "AgentSession"]),
            (
                "The process connection's transports",
                [
                    "SSEConnector",
                    "WebSocketConnector",
                    "AutoConnector",
                    "ProcessConnector",
                    "ProcessStream",
                    "StreamNews",
                    "AttemptRejected",
                ],
            ),
            (
                "Errors",
                [
                    "LetAgentsError",
                    "ApiError",
                    "RoomUnreachable",
                    "StreamProtocolError",
                    "IneligibleSession",
                    "__version__",
                ],
            ),
        ],
    ),
    (
        "letagents_trio.workers",
        "The host layer",
        [
            (
                "Worker handles",
                ["WorkerHandles", "WorkerRegistration", "WorkerHandlesStatistics", "WorkerError"],
            ),
            (
                "The local state file and this machine's identity",
                [
                    "LocalStateStore",
                    "StateSnapshot",
                    "OwnerAuth",
                    "process_host_id",
                    "MachineFacts",
                    "StateError",
                    "StateUnavailable",
                    "StateLockTimeout",
                ],
            ),
            (
                "Local rooms' chat",
                [
                    "ChatStorage",
                    "ChatStorageSettings",
                    "LocalChat",
                    "LocalChatStatistics",
                    "LocalChatError",
                    "LocalChatUnavailable",
                    "LocalChatBusy",
                ],
            ),
        ],
    ),
    (
        "letagents_trio.testing",
        "Testing kit",
        [
            (
                "The fake room",
                [
                    "open_fake_room",
                    "FakeRoom",
                    "ProcessMode",
                    "ExitRecord",
                    "RequestRecord",
                    "RuleBuilder",
                    "Rule",
                    "Hold",
                    "register_worker",
                ],
            ),
            ("The streaming transport", ["StreamingASGITransport", "open_streaming_transport"]),
        ],
    ),
    (
        "letagents_trio.room_server",
        "The reference room server",
        [
            (
                "The room and serving it",
                [
                    "Room",
                    "RoomConfig",
                    "RoomStatistics",
                    "RoomWork",
                    "Reply",
                    "Credentials",
                    "ProcessStream",
                    "CloseMode",
                    "create_app",
                    "serve_room",
                ],
            ),
            ("Clocks", ["RoomClock", "SystemClock", "TrioClock"]),
            (
                "Storage",
                [
                    "RoomStore",
                    "MemoryStore",
                    "SQLiteStore",
                    "Account",
                    "SessionRow",
                    "TaskRow",
                    "LeaseRow",
                    "GuidelinesRow",
                    "KnowledgeRow",
                    "MessageRow",
                ],
            ),
        ],
    ),
    (
        "letagents_trio.mcp_server",
        "The MCP server",
        [
            (
                "The server",
                [
                    "create_server",
                    "LetAgentsMCPServer",
                    "ServerConfig",
                    "ServerState",
                    "READINESS_URI",
                ],
            ),
        ],
    ),
]

HEADER = """\
# API reference

Every public name of every public package, and nothing else: this page is
written from their docstrings by `docs/_reference.py`, and `tests/test_docs.py`
fails while it differs from what the script writes, or names other names than
each package's `__all__`. Everything else is private and may change without
notice. How the packages depend on each other is in
[the architecture](architecture.md).
"""

_SECTION = re.compile(
    r"^(Args|Arguments|Attributes|Returns|Yields|Raises|Cancellation|Example|Examples"
    r"|Note|Notes|Warning|See Also|Keyword Args|Parameters):\s*$"
)
_LIST_SECTIONS = frozenset({"Args", "Arguments", "Attributes", "Raises", "Keyword Args"})
_ITEM = re.compile(r"^(?P<name>[\w.*, ]+?)(?: \((?P<type>[^)]*)\))?:\s*(?P<text>.*)$")
_ROLE = re.compile(r":(?:py:)?\w+:`(?P<body>[^`]+)`")
_LITERAL = re.compile(r"``(?P<code>[^`]+?)``")
_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


def _role(match: re.Match[str]) -> str:
    body = match["body"]
    if m := re.fullmatch(r"(?P<text>.+?)\s*<(?P<target>[^>]+)>", body, re.S):
        return m["text"]
    body = body.lstrip("~")
    if match.group(0).startswith((":class:", ":func:", ":meth:", ":data:", ":exc:", ":attr:")):
        if match.group(0).count("~"):
            body = body.rsplit(".", 1)[-1]
        return f"`{body.lstrip('.')}`"
    return body


def inline(text: str) -> str:
    """reST inline markup as Markdown: code spans for literals and cross-references."""
    text = _ROLE.sub(_role, text)
    return _LITERAL.sub(lambda m: f"`{m['code']}`", text)


def _dedent(lines: list[str]) -> list[str]:
    indents = [len(line) - len(line.lstrip()) for line in lines if line.strip()]
    cut = min(indents, default=0)
    return [line[cut:] for line in lines]


def _blocks(lines: list[str]) -> Iterator[str]:
    """Prose lines as Markdown: ``::`` literal blocks fenced, the rest inline-converted."""
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.rstrip().endswith("::") and not line.strip().startswith(".."):
            head = line.rstrip()[:-1].rstrip()
            if head.endswith(":"):
                head = head[:-1] + ":"
            elif head:
                head += ":"
            if head:
                yield inline(head)
            base = len(line) - len(line.lstrip())
            i += 1
            block: list[str] = []
            while i < len(lines) and (
                not lines[i].strip() or len(lines[i]) - len(lines[i].lstrip()) > base
            ):
                block.append(lines[i])
                i += 1
            while block and not block[-1].strip():
                block.pop()
            while block and not block[0].strip():
                block.pop(0)
            yield ""
            yield "```text"
            yield from _dedent(block)
            yield "```"
            yield ""
            continue
        yield inline(line.strip()) if line.strip() else ""
        i += 1


def docstring(obj: object) -> list[str]:
    """The object's own docstring as Markdown lines (none for an inherited one)."""
    doc = obj.__doc__ if isinstance(obj, type) else inspect.getdoc(obj)
    if isinstance(obj, type):
        doc = inspect.cleandoc(doc) if doc else None
    if not doc:
        return []
    out: list[str] = []
    lines = doc.splitlines()
    i = 0
    while i < len(lines):
        section = _SECTION.match(lines[i].strip()) if not lines[i].startswith(" ") else None
        if section is None:
            start = i
            while i < len(lines) and not (
                not lines[i].startswith(" ") and _SECTION.match(lines[i].strip())
            ):
                i += 1
            out.extend(_blocks(lines[start:i]))
            continue
        name = section[1]
        i += 1
        body: list[str] = []
        while i < len(lines) and (not lines[i].strip() or lines[i].startswith(" ")):
            body.append(lines[i])
            i += 1
        body = _dedent(body)
        while body and not body[-1].strip():
            body.pop()
        out.extend(["", f"**{name}:**", ""])
        if name in _LIST_SECTIONS:
            out.extend(_items(body))
        else:
            out.extend(_blocks(body))
        out.append("")
    return _squeeze(out)


def _items(body: list[str]) -> Iterator[str]:
    """``name: text`` items (continued on deeper lines) as a Markdown list."""
    current: list[str] = []
    for line in body:
        if line and not line.startswith(" ") and (m := _ITEM.match(line)):
            if current:
                yield " ".join(current)
            kind = f" ({inline(m['type'])})" if m["type"] else ""
            current = [f"- `{m['name'].strip()}`{kind}: {inline(m['text'])}".rstrip()]
        elif line.strip():
            if not current:
                current = ["-"]
            current.append(inline(line.strip()))
        elif current:
            yield " ".join(current)
            current = []
    if current:
        yield " ".join(current)


def _squeeze(lines: list[str]) -> list[str]:
    """No blank line twice, none at either end."""
    out: list[str] = []
    for line in lines:
        if not line.strip() and (not out or not out[-1].strip()):
            continue
        out.append(line.rstrip())
    while out and not out[-1]:
        out.pop()
    return out


def _annotation(value: Any) -> str:
    if value is inspect.Parameter.empty:
        return ""
    return value if isinstance(value, str) else inspect.formatannotation(value)


def signature(name: str, obj: object) -> str | None:
    """``def name(...) -> ...`` or ``class Name(...)``, or None for plain values."""
    if isinstance(obj, type):
        if issubclass(obj, BaseException | enum.Enum):
            bases = ", ".join(b.__name__ for b in obj.__bases__)
            return f"class {name}({bases})"
        try:
            sig = inspect.signature(obj)
        except (TypeError, ValueError):
            return f"class {name}"
        return f"class {name}{_parameters(sig)}"
    if callable(obj):
        try:
            sig = inspect.signature(obj)
        except (TypeError, ValueError):
            return None
        prefix = "async def" if inspect.iscoroutinefunction(obj) else "def"
        returns = _annotation(sig.return_annotation)
        return f"{prefix} {name}{_parameters(sig)}" + (f" -> {returns}" if returns else "")
    return None


def _parameters(sig: inspect.Signature) -> str:
    parts: list[str] = []
    star = False
    for param in sig.parameters.values():
        if param.name == "self":
            continue
        if param.kind is param.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        text = param.name
        if param.kind is param.VAR_POSITIONAL:
            text, star = f"*{param.name}", True
        elif param.kind is param.VAR_KEYWORD:
            text = f"**{param.name}"
        if annotation := _annotation(param.annotation):
            text += f": {annotation}"
        if param.default is not param.empty:
            text += f" = {_ADDRESS.sub('', repr(param.default))}"
        parts.append(text)
        if param.kind is param.POSITIONAL_ONLY:
            parts.append("/")
    return f"({', '.join(parts)})"


def _members(cls: type) -> Iterator[tuple[str, object]]:
    """The public methods and properties a class defines itself, in source order."""
    for member_name, member in vars(cls).items():
        if member_name.startswith("_"):
            continue
        if isinstance(member, property | staticmethod | classmethod) or inspect.isfunction(member):
            yield member_name, member


def entry(package: str, name: str, obj: object) -> list[str]:
    lines = [f"#### `{name}`", ""]
    if (sig := signature(name, obj)) is not None:
        lines += ["```text", sig, "```", ""]
    elif not isinstance(obj, type):
        value = json.dumps(obj) if isinstance(obj, str) else _ADDRESS.sub("", repr(obj))
        lines += ["```python", f"{name} = {value}", "```", ""]
    lines += docstring(obj) if callable(obj) or isinstance(obj, type) else []
    if isinstance(obj, type) and issubclass(obj, enum.Enum):
        lines += ["", "Members: " + ", ".join(f"`{m.name}`" for m in obj) + "."]
    if isinstance(obj, type) and not issubclass(obj, BaseException | enum.Enum):
        for member_name, member in _members(obj):
            function = member.fget if isinstance(member, property) else member
            if isinstance(function, staticmethod | classmethod):
                function = function.__func__
            lines += ["", f"##### `{name}.{member_name}`", ""]
            if isinstance(member, property):
                lines += ["*Property.*", ""]
            elif (sig := signature(member_name, function)) is not None:
                lines += ["```text", sig, "```", ""]
            lines += docstring(function)
    return [*_squeeze(lines), ""]


def render() -> str:
    """The whole page."""
    out = [HEADER.rstrip(), ""]
    for package, title, groups in GROUPS:
        module = importlib.import_module(package)
        exported = list(module.__all__)
        listed = {name for _, names in groups for name in names}
        groups = [(g, [n for n in names if n in exported]) for g, names in groups]
        extra = sorted(name for name in exported if name not in listed)
        if extra:
            groups[-1] = (groups[-1][0], [*groups[-1][1], *extra])
        out += [f"## {title}: `{package}`", ""]
        intro = module.__doc__.split("\n\n", 1)[0] if module.__doc__ else ""
        if intro:
            out += [inline(" ".join(intro.split())), ""]
        for group, names in groups:
            if not names:
                continue
            out += [f"### {group}", ""]
            for name in names:
                out += entry(package, name, getattr(module, name))
    return "\n".join(_squeeze(out)) + "\n"


def main() -> int:
    PAGE.write_text(render(), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
