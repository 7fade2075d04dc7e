"""JSON as the Node client reads and writes it, so both clients' state files are the same bytes.

Reading: UTF-8 (a byte-order mark is an error, as in ``JSON.parse``), and the
constants ``NaN`` and ``Infinity`` are rejected, as ``JSON.parse`` rejects them.
Writing: ``JSON.stringify(value, null, 2)`` plus a newline, which means two
spaces of indent, non-ASCII characters as they are, and each object's keys in
the order a JavaScript object keeps them: integer-like keys (array indices,
``0`` .. ``2**32 - 2``) first in ascending order, then the others in insertion
order.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any, Final, NoReturn

__all__ = ["decode_json", "encode_json", "json_type"]

# JavaScript's array indices are 0 .. 2**32 - 2; such keys come first in its objects.
_MAX_ARRAY_INDEX: Final = 2**32 - 1
_MAX_INDEX_DIGITS: Final = len(str(_MAX_ARRAY_INDEX))


def decode_json(raw: bytes) -> object:
    """Parse ``raw`` as ``JSON.parse`` would, nested at most :data:`MAX_NESTING` deep.

    Raises:
        UnicodeDecodeError: not UTF-8.
        ValueError: not JSON (``NaN`` and ``Infinity`` included).
        RecursionError: nested deeper than :data:`MAX_NESTING`.
    """
    text = raw.decode("utf-8")
    if nesting(text) > MAX_NESTING:
        raise RecursionError(f"JSON nested more than {MAX_NESTING} deep")
    return json.loads(text, parse_constant=_reject_constant)


# Deeper than any record the protocol stores (a handful of levels), and below
# what Python 3.11's parser and writer manage (about 900), which 3.12 and 3.13
# exceed: every supported Python refuses the same files.
MAX_NESTING = 500
# Strings (escapes included) hold no brackets that count.
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)
_NOT_BRACKETS = {ord(c): None for c in map(chr, range(0x80)) if c not in "[]{}"}


def nesting(text: str) -> int:
    """How deep the arrays and objects of the JSON ``text`` nest (0 for a scalar)."""
    brackets = _STRING.sub("", text).translate(_NOT_BRACKETS)
    depth = deepest = 0
    for char in brackets:
        if char in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]}":
            depth -= 1
    return deepest


def json_type(value: object) -> str:
    """How a parsed value is named in messages: ``null``, ``a number``, ``an object``, ..."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _reject_constant(name: str) -> NoReturn:
    # JSON.parse rejects NaN and Infinity; so do we, so both clients agree.
    raise ValueError(f"{name} is not JSON")


def _is_array_index(key: str) -> bool:
    # "0", "7", "10", ... up to 2**32 - 2: the keys JavaScript objects list first.
    if key == "0":
        return True
    return (
        key.isascii()
        and key.isdigit()
        and key[0] != "0"
        and len(key) <= _MAX_INDEX_DIGITS
        and int(key) < _MAX_ARRAY_INDEX
    )


def _js_ordered(value: Any) -> Any:
    """The value with each object's keys in the order a JavaScript object keeps them.

    JavaScript lists integer-like keys first, ascending, then the others in
    insertion order; ordering ours the same way makes our file byte for byte
    what the Node client would write for the same data.
    """
    if isinstance(value, dict):
        items = [(key, _js_ordered(item)) for key, item in value.items()]
        if any(_is_array_index(key) for key, _ in items):
            indexed = sorted(
                (kv for kv in items if _is_array_index(kv[0])), key=lambda kv: int(kv[0])
            )
            items = indexed + [kv for kv in items if not _is_array_index(kv[0])]
        return dict(items)
    if isinstance(value, list):
        return [_js_ordered(item) for item in value]
    return value


def encode_json(state: Mapping[str, Any]) -> bytes:
    """2-space JSON plus a newline, keys in JavaScript's order, as JSON.stringify writes it."""
    ordered = _js_ordered(state)
    text = json.dumps(ordered, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    try:
        return text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate cannot be UTF-8; the escaped form is the same JSON.
        return (json.dumps(ordered, indent=2, allow_nan=False) + "\n").encode("ascii")
