"""The two tools of a supervised room turn (profile ``supervised_room_turn``).

Served only in that profile, as the Node server's ``tools/supervised-room-turn.ts``
registers them; the supervisor (the desktop daemon) owns what they stand for,
so neither makes a room call:

* ``complete_room_turn`` (provider ``cursor`` only): the turn's one public
  answer, proposed over its own channel because Cursor's final text holds its
  progress narration too. The tool checks the proposal (``reply`` needs a
  text of at most 32 KiB, ``no_reply`` none) and answers ``accepted``; the
  supervisor, which sees the call, publishes it.
* ``set_reply_thread`` (every provider): asks for the answer to go in the
  activating message's thread. It takes no arguments, and without the
  supervisor's turn it can only refuse, with the Node server's text.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Final, Literal

import trio

# Tool signatures are evaluated at run time (the SDK reads them).
from mcp_types import CallToolResult, TextContent
from pydantic import Field

from ._facade import ToolContext, failed, server_state

__all__ = [
    "MAX_ROOM_REPLY_BYTES",
    "REPLY_THREAD_TEXT",
    "complete_room_turn",
    "set_reply_thread",
]

# A room reply's limit, in UTF-8 bytes of the trimmed text (Node's MAX_ROOM_REPLY_BYTES).
MAX_ROOM_REPLY_BYTES: Final = 32 * 1024
# The Node server's texts.
REPLY_THREAD_TEXT: Final = "set_reply_thread requires the active daemon-owned room turn."
COMPLETION_INSTRUCTION: Final = (
    "The daemon recorded this exact turn completion. End the provider turn without sending"
    " the activating reply through another tool."
)
_NEEDS_TEXT: Final = "complete_room_turn requires non-empty text when outcome is reply."
_TOO_LONG: Final = "complete_room_turn reply exceeds the 32 KiB public-message limit."
_NO_TEXT: Final = "complete_room_turn must omit text when outcome is no_reply."


async def complete_room_turn(
    ctx: ToolContext,
    outcome: Annotated[
        Literal["reply", "no_reply"],
        Field(
            description=(
                "Use reply to publish one answer, or no_reply when the activating message"
                " needs no response."
            )
        ),
    ],
    text: Annotated[
        str | None,
        Field(description="The concise public room reply. Required only when outcome is reply."),
    ] = None,
) -> CallToolResult:
    """Record the single public completion for this supervised room turn. Call exactly once
    after all work is finished. Progress text outside this tool is live activity only and
    is never published as the room reply."""
    await trio.lowlevel.checkpoint()
    normalized = (text or "").strip()
    if outcome == "reply" and not normalized:
        return failed(server_state(ctx), _NEEDS_TEXT)
    if outcome == "reply" and len(normalized.encode("utf-8")) > MAX_ROOM_REPLY_BYTES:
        return failed(server_state(ctx), _TOO_LONG)
    if outcome == "no_reply" and normalized:
        return failed(server_state(ctx), _NO_TEXT)
    payload: dict[str, Any] = {
        "accepted": True,
        "outcome": outcome,
        "instruction": COMPLETION_INSTRUCTION,
    }
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(payload, separators=(",", ":")))],
        structured_content=payload,
    )


async def set_reply_thread(ctx: ToolContext) -> CallToolResult:
    """Place your final answer in the activating room message's thread. Takes no arguments,
    sends no message, and does not finish the turn. Continue working and use your normal
    final completion when ready. Unavailable for synthetic task continuations or
    corrections."""
    await trio.lowlevel.checkpoint()
    return failed(server_state(ctx), REPLY_THREAD_TEXT)
