"""Threads: which thread a new message joins, and how a message shows its thread.

A message may answer another (``reply_to``) and may name the thread it is
posted into (``thread_root_id``), as the letagents API takes them. Each must
be the id of a message of the same room. The thread a new message joins is
the thread of what it names: the root of the named thread, else the root of
the message it answers (a message that is in no thread is its own root). When
both are given they must agree. A message that answers nothing and names no
thread is in no thread.

As JSON, every message says ``thread_root_id`` (its root, or its own id),
``thread_reply_to_id`` (what it answers, or null), ``reply_to`` (a short
reference to what it answers, or null) and ``thread`` (the thread's summary:
its root, how many replies it has, the newest of them), present on a thread's
replies and on a root that has replies. :func:`thread_of` decides, the JSON
helpers render; :class:`~._messages.MessageBoard` reads the rows they need.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

from .._wire import iso, refuse

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .._storage._rows import MessageRow

__all__ = [
    "REPLY_OUTSIDE_THREAD_TEXT",
    "REPLY_TO_INVALID_TEXT",
    "REPLY_TO_MISSING_TEXT",
    "THREAD_ROOT_INVALID_TEXT",
    "THREAD_ROOT_MISSING_TEXT",
    "message_ref",
    "reference_json",
    "root_of",
    "thread_json",
    "thread_of",
]

# The letagents API's texts (400) for a reference that names no message here.
REPLY_TO_INVALID_TEXT: Final = "reply_to must be a valid message id"
REPLY_TO_MISSING_TEXT: Final = "reply_to must reference an existing message in this room"
THREAD_ROOT_INVALID_TEXT: Final = "thread_root_id must be a valid message id"
THREAD_ROOT_MISSING_TEXT: Final = "thread_root_id must reference an existing message in this room"
REPLY_OUTSIDE_THREAD_TEXT: Final = "reply_to must belong to the requested thread"
# Longer than this is no message id (and would not fit the store's integer).
_MAX_ID_DIGITS: Final = 18


def message_ref(body: Mapping[str, Any], key: str, invalid_text: str) -> int | None:
    """The message id ``body[key]`` names (absent, null or blank: ``None``), or refuse 400."""
    value = body.get(key)
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    if isinstance(value, str):
        value = value.strip()
    if not (
        isinstance(value, str)
        and value.isascii()
        and value.isdigit()
        and len(value) <= _MAX_ID_DIGITS
    ):
        refuse(400, invalid_text)
    number = int(value)
    if number < 1:
        refuse(400, invalid_text)
    return number


def root_of(message: MessageRow) -> int:
    """The root of ``message``'s thread: its own id when it is in none."""
    return message.thread_root_id if message.thread_root_id is not None else message.message_id


def thread_of(reply_to: MessageRow | None, thread_root: MessageRow | None) -> int | None:
    """The thread a new message joins, from what it answers and the thread it names.

    Raises (as refusals): 400 when the message it answers is in another thread.
    """
    if thread_root is not None:
        root = root_of(thread_root)
        if reply_to is not None and root_of(reply_to) != root:
            refuse(400, REPLY_OUTSIDE_THREAD_TEXT)
        return root
    return None if reply_to is None else root_of(reply_to)


def reference_json(message: MessageRow) -> dict[str, Any]:
    """A short reference to a message (what ``reply_to`` and ``latest_reply`` show)."""
    return {
        "id": str(message.message_id),
        "sender": message.sender,
        "text": message.text,
        "source": message.source,
        "timestamp": iso(message.created_at),
    }


def thread_json(root_id: int, reply_count: int, latest: MessageRow | None) -> dict[str, Any]:
    """A thread's summary: its root, how many replies, and the newest reply."""
    return {
        "root_message_id": str(root_id),
        "reply_count": reply_count,
        "latest_reply": None if latest is None else reference_json(latest),
    }
