"""Message ids as the letagents API writes them: ``msg_<n>``.

The store numbers messages 1, 2, ... (an integer column, so a database written
before keeps its rows as they are); the wire names message ``n`` as
``msg_<n>``, as the real room does. A reference that *names* a message in a
write (``reply_to``, ``thread_root_id``) must have that form, the API's
``^msg_\\d+$``; a cursor a client kept (``after``, ``before``) is read in
either form, so a host that remembered ``"7"`` from a room of an older version
reads on from the same place.
"""

from __future__ import annotations

from typing import Final

__all__ = ["MESSAGE_ID_PREFIX", "message_id", "message_number"]

# The prefix of every message id the letagents API writes.
MESSAGE_ID_PREFIX: Final = "msg_"
# Longer than this is no message id (and would not fit the store's integer).
_MAX_DIGITS: Final = 18


def message_id(number: int) -> str:
    """The wire id of stored message ``number``: ``msg_<number>``."""
    return f"{MESSAGE_ID_PREFIX}{number}"


def message_number(text: str, *, bare: bool = False) -> int | None:
    """The stored number ``text`` names (``msg_<n>``; also ``<n>`` with ``bare``), or ``None``.

    ``None`` for anything else: another prefix, no digits, a sign, digits that
    are not ASCII, more than 18 of them, or a number below 1.
    """
    digits = text.removeprefix(MESSAGE_ID_PREFIX)
    if digits == text and not bare:
        return None
    if not (digits.isascii() and digits.isdigit()) or len(digits) > _MAX_DIGITS:
        return None
    number = int(digits)
    return number if number > 0 else None
