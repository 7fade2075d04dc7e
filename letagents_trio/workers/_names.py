"""Name keys, codenames and actor labels (PROTOCOL.md §5.4).

Both the client's local rooms and the room server decide who may go by which
name with the rules in this module, so the two never disagree.

Name keys
    Two display names are *the same name* when their keys are equal. The key is
    the name as a mention would route it: ``routing_handle`` (ASCII
    letters folded to lower case, every character outside ``[a-z0-9_.:/-]``
    dropped), or, when that leaves nothing, ``routing_sender`` (trimmed,
    folded, whitespace runs collapsed to one space). So ``FieldMeadow``,
    ``fieldmeadow`` and ``Field Meadow`` share the key ``fieldmeadow``, while
    ``FieldMeadow 1`` has the key ``fieldmeadow1``. Only ASCII ``A``-``Z`` are
    folded, exactly as upstream does, so keys never depend on Unicode tables.
    "Whitespace" is JavaScript's ``\\s`` set (which upstream's ``trim`` and
    regexes use), not Python's ``str.isspace``.

Codenames
    A codename is two words of the fixed 102-word list :data:`CODENAME_WORDS`,
    kept in upstream's (non-alphabetical) order. The index is the first four
    bytes of ``sha256(utf8(key))`` read as a big-endian unsigned integer, modulo
    :data:`AGENT_CODENAME_SPACE` (102 x 102), plus an offset, wrapped back into
    the space. The first word is ``words[idx // 102]``, the second
    ``words[idx % 102]``; the display name is both words title-cased and joined
    (``RiverValley``), the slug both words in lower case (``rivervalley``).

Allocation
    A registration asks for a base name. Offset 0 is the base itself; offset
    ``k >= 1`` is ``codename(agent_key + ":" + str(k))``. The first candidate
    that is not held wins; the room scans up to offset 1 024 and gives up
    (``None``) after that. A held name is never given a number suffix: a name
    like ``FieldMeadow 2`` cannot be mentioned as typed. A *generic* base name
    (empty, or made only of IDE-ish words such as ``claude`` or ``worker``)
    is replaced by ``codename(agent_key)`` first, see :func:`allocation_base`.

Actor labels
    ``"<display> | <owner>'s agent | <IDE>"``, with ``<owner>' agent`` when the
    owner's name ends in ``s``, and the IDE label normalised through a small map
    of known clients (:func:`normalize_ide_label`).

Invite codes
    A room's invite code is groups of four letters or digits joined by ``-``
    (``ABCX-7291``); the client takes a name of that shape, in any case, for a
    code (:func:`looks_like_invite_code`), and the room never makes a named
    room of that shape on a join.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Callable, Iterator
from typing import Final, final

import attrs

from .._protocol import JS_SPACE

__all__ = [
    "AGENT_CODENAME_SPACE",
    "CODENAME_WORDS",
    "DEFAULT_IDE_LABEL",
    "GENERIC_NAME_TOKENS",
    "MAX_DISPLAY_NAME_COLLISION_OFFSET",
    "Codename",
    "actor_label",
    "allocate_name",
    "allocation_base",
    "allocation_candidates",
    "codename",
    "fold",
    "is_durable_worker_id",
    "is_generic_name",
    "js_trim",
    "looks_like_invite_code",
    "name_key",
    "normalize_agent_base_name",
    "normalize_ide_label",
    "owner_attribution",
    "routing_handle",
    "routing_sender",
]

# Upstream's word list, in upstream's order: the order *is* the mapping from a
# hash to a name, so a re-sorted list would give every agent another codename.
CODENAME_WORDS: Final[tuple[str, ...]] = (
    "amber", "anchor", "autumn", "badger", "bay", "bear", "brook", "calm", "canyon",
    "cedar", "clear", "cloud", "comet", "copper", "creek", "crisp", "crest", "dawn",
    "delta", "dune", "ember", "falcon", "fern", "field", "firefly", "fjord", "forest",
    "fox", "garden", "glade", "golden", "granite", "grove", "harbor", "hawk", "hollow",
    "indigo", "ivory", "jade", "juniper", "lagoon", "lake", "lantern", "leaf", "lively",
    "lunar", "lynx", "maple", "marsh", "meadow", "mesa", "misty", "moon", "morrow",
    "moss", "noble", "oak", "olive", "opal", "otter", "owl", "peak", "pearl", "pine",
    "quiet", "raven", "reef", "ridge", "river", "rook", "sage", "scarlet", "shore",
    "silver", "sky", "solar", "sparrow", "spring", "star", "stone", "storm", "summit",
    "sun", "sunlit", "swift", "thicket", "tidal", "timber", "trail", "valley",
    "verdant", "vista", "warm", "wave", "west", "wild", "willow", "wind", "winter",
    "wolf", "wood", "wren",
)  # fmt: skip
# Every ordered pair of words: the number of distinct codenames.
AGENT_CODENAME_SPACE: Final = len(CODENAME_WORDS) ** 2
# The room's bound on the codename scan: enough to find a free name in any real
# room, small enough that a full room answers "nothing free" quickly.
MAX_DISPLAY_NAME_COLLISION_OFFSET: Final = 1_024
# Name tokens that say what runs an agent, not who it is: such a name is replaced
# by a codename so two agents in the same IDE do not fight over "Claude".
GENERIC_NAME_TOKENS: Final = frozenset(
    {"antigravity", "codex", "agent", "worker", "local", "claude", "cursor", "cline", "roo"}
)
# The IDE label when a client names none.
DEFAULT_IDE_LABEL: Final = "Agent"

# Display forms of the IDE labels upstream knows, keyed by the lower-case,
# dash-joined tokens of the label (so "Claude Code", "claude_code" and
# "claude-code" all find "Claude Code").
_KNOWN_IDE_LABELS: Final = {
    "agent": "Agent",
    "antigravity": "Antigravity",
    "claude": "Claude",
    "claude-code": "Claude Code",
    "codex": "Codex",
    "cursor": "Cursor",
    "open-model": "Open Model",
    "opencode": "OpenCode",
    "orchestrator": "Orchestrator",
}

# JavaScript's \s (what String.prototype.trim and /\s+/ use), so the keys do
# not depend on Python's wider str.isspace (which adds \x1c-\x1f).
_JS_SPACE: Final = JS_SPACE
_SPACE_RUN: Final = re.compile(f"[{_JS_SPACE}]+")
_TRIM: Final = re.compile(f"^[{_JS_SPACE}]+|[{_JS_SPACE}]+$")
_NOT_HANDLE: Final = re.compile(r"[^a-z0-9_.:/\-]")
_TOKEN_SPLIT: Final = re.compile(f"[{_JS_SPACE}_\\-]+")
_ASCII_FOLD: Final = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")
_DURABLE_WORKER_ID: Final = re.compile(r"worker_[0-9a-f]{32}")
_NOT_SLUG: Final = re.compile(r"[^a-z0-9]+")


def fold(s: str) -> str:
    """Fold ASCII ``A``-``Z`` to lower case; every other character is kept."""
    return s.translate(_ASCII_FOLD)


def js_trim(s: str) -> str:
    """Strip leading and trailing whitespace as JavaScript's ``String.prototype.trim`` does.

    The whitespace set is JavaScript's ``\\s`` (see the module docstring), not
    Python's ``str.strip``, which also strips ``\\x1c``-``\\x1f`` and so would
    make a name that upstream keeps as typed look trimmed here.
    """
    return _TRIM.sub("", s)


def routing_sender(s: str) -> str:
    """Return ``s`` trimmed and folded, with each whitespace run made one space."""
    return _SPACE_RUN.sub(" ", fold(js_trim(s)))


def routing_handle(s: str) -> str:
    """Return ``s`` folded, keeping only the characters ``[a-z0-9_.:/-]``."""
    return _NOT_HANDLE.sub("", fold(s))


def name_key(s: str) -> str:
    """Return the key under which two display names count as the same name.

    Args:
        s: a display name.

    Returns:
        ``routing_handle`` of ``s``, or ``routing_sender`` of ``s`` when
        the handle is empty (a name made only of non-ASCII letters, say).
    """
    return routing_handle(s) or routing_sender(s)


def is_durable_worker_id(s: str | None) -> bool:
    """True when ``s`` is a durable worker id: ``worker_`` and 32 lower-case hex digits."""
    return s is not None and _DURABLE_WORKER_ID.fullmatch(s) is not None


@final
@attrs.frozen(kw_only=True)
class Codename:
    """A two-word codename.

    Attributes:
        display_name: both words title-cased and joined, e.g. ``RiverValley``.
        slug: both words in lower case, e.g. ``rivervalley``.
    """

    display_name: str
    slug: str


def _title(word: str) -> str:
    return word[:1].upper() + word[1:].lower()


def _codename_index(key: str) -> int:
    digest = hashlib.sha256(key.encode("utf-8")).digest()
    return int.from_bytes(digest[:4], "big") % AGENT_CODENAME_SPACE


def codename(key: str, offset: int = 0) -> Codename:
    """Return the codename of ``key``, moved on by ``offset`` places.

    Args:
        key: any string (an agent key, or ``agent_key + ":" + str(k)``).
        offset: added to the hash index; the sum wraps around the codename
            space, negative offsets included.

    Returns:
        The codename, the same for the same arguments on every machine.
    """
    idx = (_codename_index(key) + offset) % AGENT_CODENAME_SPACE
    first, second = divmod(idx, len(CODENAME_WORDS))
    a, b = CODENAME_WORDS[first], CODENAME_WORDS[second]
    return Codename(display_name=_title(a) + _title(b), slug=a + b)


def normalize_agent_base_name(name: str) -> str:
    """An agent name as the account's directory compares it (``normalizeAgentBaseName``).

    NFKD, characters outside ASCII dropped, lower-cased, runs of anything but
    ``a-z0-9`` made one ``-``, trimmed of ``-``, a trailing ``-agent`` dropped;
    ``"agent"`` when nothing is left.
    """
    plain = unicodedata.normalize("NFKD", name).encode("ascii", "ignore").decode("ascii")
    slug = _NOT_SLUG.sub("-", plain.lower()).strip("-")
    return slug.removesuffix("-agent") or "agent"


def _tokens(s: str) -> list[str]:
    return [token.lower() for token in _TOKEN_SPLIT.split(s) if token]


def normalize_ide_label(ide_label: str | None) -> str:
    """Return the display form of an IDE label.

    Known labels (``claude-code``, ``opencode``, ...) get their usual spelling
    whatever their case or separators; others are title-cased word by word,
    with ``-``, ``_`` and whitespace runs made one space.

    Args:
        ide_label: the label a client sent, or ``None``.

    Returns:
        The display label; ``DEFAULT_IDE_LABEL`` for a missing or blank one.
    """
    tokens = _tokens(ide_label or "")
    if not tokens:
        return DEFAULT_IDE_LABEL
    known = _KNOWN_IDE_LABELS.get("-".join(tokens))
    if known is not None:
        return known
    return " ".join(_title(token) for token in tokens)


def owner_attribution(owner: str) -> str:
    """Return ``"<owner>'s agent"``, or ``"<owner>' agent"`` if the owner ends in ``s``.

    The owner is trimmed first; a final ``S`` counts as an ``s``.
    """
    owner = js_trim(owner)
    if owner[-1:] in ("s", "S"):
        return f"{owner}' agent"
    return f"{owner}'s agent"


def actor_label(display_name: str, owner: str, ide_label: str | None) -> str:
    """Return an agent's actor label, ``"<display> | <owner attribution> | <IDE>"``.

    Args:
        display_name: the name the agent goes by in the room.
        owner: the owner's label, e.g. ``"Alice"``. When it is blank the middle
            part is left out (``"<display> | <IDE>"``) rather than showing a
            possessive of nobody.
        ide_label: the client's IDE label, normalised by
            :func:`normalize_ide_label`.

    Returns:
        The label, e.g. ``"RiverValley | James' agent | Claude Code"``.
    """
    ide = normalize_ide_label(ide_label)
    if not js_trim(owner):
        return f"{display_name} | {ide}"
    return f"{display_name} | {owner_attribution(owner)} | {ide}"


def is_generic_name(display_name: str | None, ide_label: str | None) -> bool:
    """True when a name says only what runs the agent, not who it is.

    A name is generic when it is empty, or when every token of it (split on
    whitespace, ``_`` or ``-``, lower-cased) is in :data:`GENERIC_NAME_TOKENS`
    or is a token of the IDE label.

    Args:
        display_name: the name the agent asked for.
        ide_label: the client's IDE label as sent (``"claude-code"``), or ``None``.
    """
    tokens = _tokens(display_name or "")
    allowed = GENERIC_NAME_TOKENS | frozenset(_tokens(ide_label or ""))
    return all(token in allowed for token in tokens)


def allocation_base(display_name: str | None, ide_label: str | None, agent_key: str) -> str:
    """Return the base name a registration scans from.

    Args:
        display_name: the name the agent asked for.
        ide_label: the client's IDE label.
        agent_key: the agent's canonical key.

    Returns:
        ``codename(agent_key).display_name`` for a generic name (see
        :func:`is_generic_name`), else the requested name trimmed.
    """
    if display_name is None or is_generic_name(display_name, ide_label):
        return codename(agent_key).display_name
    return js_trim(display_name)


def allocation_candidates(
    base_name: str, agent_key: str, *, max_offset: int = MAX_DISPLAY_NAME_COLLISION_OFFSET
) -> Iterator[str]:
    """Yield the names a registration tries, in order.

    Args:
        base_name: offset 0, the name asked for (see :func:`allocation_base`).
        agent_key: the registrant's agent key; offset ``k`` is
            ``codename(agent_key + ":" + str(k)).display_name``.
        max_offset: the last offset tried (the room uses 1 024; a local room
            may scan the whole codename space).

    Yields:
        ``max_offset + 1`` names: the base, then one codename per offset. Two
        offsets can give the same codename; callers that care compare keys.
    """
    yield base_name
    for offset in range(1, max_offset + 1):
        yield codename(f"{agent_key}:{offset}").display_name


def allocate_name(
    base_name: str,
    agent_key: str,
    is_held: Callable[[str], bool],
    *,
    max_offset: int = MAX_DISPLAY_NAME_COLLISION_OFFSET,
) -> str | None:
    """Return the first candidate name that is not held, or ``None``.

    Args:
        base_name: the name asked for (offset 0).
        agent_key: the registrant's agent key (seeds the codenames).
        is_held: called with each candidate display name; it should compare by
            :func:`name_key` so ``Field Meadow`` is held when ``FieldMeadow`` is.
        max_offset: the last codename offset tried.

    Returns:
        The base name if free, else the first free codename, else ``None`` when
        every candidate up to ``max_offset`` is held. Never a numbered suffix.
    """
    for candidate in allocation_candidates(base_name, agent_key, max_offset=max_offset):
        if not is_held(candidate):
            return candidate
    return None


# An invite code's shape (the letagents client's ``looksLikeInviteCode``).
_INVITE_CODE: Final = re.compile(r"[A-Z0-9]{4}(?:-[A-Z0-9]{4})+")


def looks_like_invite_code(value: str) -> bool:
    """Whether ``value`` has an invite code's shape (``ABCX-7291``), in any case, blanks ignored."""
    return _INVITE_CODE.fullmatch(value.strip().upper()) is not None
