"""What one served connection remembers between tool calls: the room it joined, its names.

The Node server keeps both in its process: the room the chat joined last
(``get_current_room``; the state file's ``current_room`` is the *saved* one,
which survives a restart and which ``resume_room_session`` rejoins), and the
names ``set_agent_name`` gave single conversations (``conversation_id``).
One :class:`ChatContext` per :class:`~._facade.ServerState`.
"""

from __future__ import annotations

from typing import Any, final

import attrs

__all__ = ["ChatContext"]


@final
@attrs.define(eq=False)
class ChatContext:
    """The joined room and the conversation-scoped agent names of one connection.

    Attributes:
        current_room: the room joined in this process (``room_id``, ``code``,
            ``display_name``, ``joined_via``), or None.
        conversation_identities: ``conversation_id`` → the agent identity
            ``set_agent_name`` gave it.
    """

    current_room: dict[str, Any] | None = None
    conversation_identities: dict[str, dict[str, Any]] = attrs.field(factory=dict)
