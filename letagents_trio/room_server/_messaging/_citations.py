"""A message cited by a record or a task (``source_message_id``): one of its own room's.

A memory record, a request for input and a task may name the message they
come from. The name is this room's id (``12``) or the letagents API's form of
it (``msg_12``); anything else is 400 ``Invalid source message.``, and a
message the room does not have (another room's included) is 400 ``The
source message does not exist in this room.``, the letagents API's texts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from .._wire import refuse

if TYPE_CHECKING:
    from .._storage._store import RoomStore

__all__ = ["INVALID_SOURCE_TEXT", "SOURCE_MESSAGE_TEXT", "check_source", "source_number"]

SOURCE_MESSAGE_TEXT: Final = "The source message does not exist in this room."
INVALID_SOURCE_TEXT: Final = "Invalid source message."


def source_number(source: str) -> int | None:
    """The message a citation names: ``<n>`` (this room's ids) or ``msg_<n>`` (the API's)."""
    digits = source.removeprefix("msg_")
    if not (digits.isascii() and digits.isdigit()) or len(digits) > 10 or digits.startswith("0"):
        return None
    return int(digits)


def check_source(store: RoomStore, room_id: str, source: str | None) -> None:
    """Refuse 400 unless ``source`` (when given) names a message of ``room_id``."""
    if not source:
        return
    number = source_number(source)
    if number is None:
        refuse(400, INVALID_SOURCE_TEXT)
    if store.get_message(room_id, number) is None:
        refuse(400, SOURCE_MESSAGE_TEXT)
