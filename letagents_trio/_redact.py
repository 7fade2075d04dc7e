"""Redaction: the one place that hides secrets in text before anyone sees it.

A room may echo a credential back in an error body or a message, as it was
sent or JSON-escaped (with ``\\uXXXX`` escapes or without). :func:`redact`
replaces every form of every secret with :data:`REDACTED`:

1. drop secrets shorter than :data:`MIN_SECRET_LENGTH` (replacing every
   ``"ab"`` would garble the text, and so short a credential protects nothing);
2. for each remaining secret collect three forms: raw, JSON-escaped ASCII,
   JSON-escaped Unicode;
3. replace the forms longest first, so a secret that contains another is
   hidden whole rather than left half shown.

Used by :class:`~letagents_trio.RoomClient` (error bodies, logged hook errors)
and by the MCP tools (every result text, as a last guard).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from collections.abc import Iterable

__all__ = ["MIN_SECRET_LENGTH", "REDACTED", "redact"]

# What a hidden secret reads as.
REDACTED: Final = "[redacted]"
# Shorter "secrets" are not redacted: replacing every "ab" would garble text,
# and a credential that short protects nothing anyway.
MIN_SECRET_LENGTH: Final = 4


def redact(text: str, secrets: Iterable[str | None]) -> str:
    """``text`` with every form of every secret replaced by :data:`REDACTED`.

    Args:
        text: what is about to be shown, logged or returned.
        secrets: the credentials to hide; ``None`` and short ones are skipped.

    Returns:
        The text with each secret's raw and JSON-escaped forms replaced.
    """
    forms: set[str] = set()
    for secret in secrets:
        if secret is not None and len(secret) >= MIN_SECRET_LENGTH:
            forms.add(secret)
            forms.add(json.dumps(secret)[1:-1])
            forms.add(json.dumps(secret, ensure_ascii=False)[1:-1])
    for form in sorted(forms, key=len, reverse=True):
        text = text.replace(form, REDACTED)
    return text
