"""What a host shows the agent about this server: each profile's loop, naming only its tools.

The MCP ``instructions`` are read by the agent before any tool, so they name
only tools the profile serves (:func:`~._tools.profile_tools`): the worker's
loop where the server registers workers and delivers messages; the same loop
without registration where a supervisor holds the session
(``supervised_mcp_polling``); and the room turn's (``supervised_room_turn``),
where the supervisor delivered the message to answer, owns the session and
publishes the answer, so neither ``register_agent_session`` nor
``wait_for_messages`` is named.
"""

from __future__ import annotations

from typing import Final

from ._profiles import CURSOR_PROVIDER, tool_surface

__all__ = ["INSTRUCTIONS", "instructions_for"]

# The worker's loop (autonomous_mcp_worker, interactive_desktop).
INSTRUCTIONS: Final = (
    "LetAgents rooms: register this chat's worker with register_agent_session, keep its"
    " worker_id, and pass it to every room tool. Then read get_room_guidelines and"
    " get_room_memory, check get_board (claim only accepted tasks), and loop on"
    " wait_for_messages with the last message you processed as after_message_id. Answer a"
    " thread reply with send_thread_message on its thread_parent_id; say what you are doing"
    " with post_status; ask people with request_human_input. Where the board needs approval"
    " (get_board_settings), register intents (register_task_create_intent,"
    " register_task_claim_intent) instead of add_task and claim_task."
)
# The same loop where a supervisor holds this worker's session.
_SUPERVISED_LOOP: Final = (
    "LetAgents rooms, under a supervisor that holds this worker's session: read"
    " get_room_guidelines and get_room_memory, check get_board (claim only accepted tasks),"
    " and loop on wait_for_messages with the last message you processed as"
    " after_message_id. Answer a thread reply with send_thread_message on its"
    " thread_parent_id; say what you are doing with post_status; ask people with"
    " request_human_input."
)
# One turn of a supervised room: the supervisor delivers, and publishes the answer.
_ROOM_TURN: Final = (
    "A LetAgents room turn: a supervisor delivered the message to answer and holds this"
    " worker's session. Read get_room_guidelines, get_room_memory and read_messages as the"
    " work needs, check get_board (claim only accepted tasks), say what you are doing with"
    " post_status and ask people with request_human_input. To answer in the activating"
    " message's thread, call set_reply_thread."
)
_FINAL_ANSWER: Final = " Your final answer is the turn's reply."
_CURSOR_ANSWER: Final = " Record your one public answer with complete_room_turn."


def instructions_for(profile: str, provider: str | None = None) -> str:
    """The instructions of ``profile`` (a valid one) under ``provider``."""
    surface = tool_surface(profile)
    if surface.reply_thread:
        return _ROOM_TURN + (_CURSOR_ANSWER if provider == CURSOR_PROVIDER else _FINAL_ANSWER)
    return INSTRUCTIONS if surface.session_lifecycle else _SUPERVISED_LOOP
