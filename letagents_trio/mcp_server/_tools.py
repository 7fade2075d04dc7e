"""Which tools a profile serves, and the one registration path.

The tools live by area: the session tools (``_session_tools``), messages
(``_message_tools``, ``_wait_tool``), the board (``_task_tools``), its
governance (``_board_tools``, ``_intent_tools``), review work and the record
(``_review_tools``), memory and requests for people (``_knowledge_tools``),
wake rules (``_wake_tools``), the visible reasoning (``_reasoning_tool``),
workspace captures (``_workspace_tools``), finding and joining rooms
(``_room_tools``), onboarding (``_onboarding_tools``), and the supervised room
turn's
(``_turn_tools``); the ``worker_id`` facade, the arguments and the results
they share in ``_facade``.

:func:`profile_tools` is the one answer to which tools a profile serves, in
registration order (upstream's ``register-tools.ts``: agent-session tools,
room inspection, knowledge, wake rules, status, tasks, messages, the delivery
loop, the room turn's). It reads the profile's surface
(``_profiles.tool_surface``, the one table of what each profile has): the
session lifecycle, the delivery loop (``wait_for_messages``), the room turn's
``set_reply_thread`` (with ``complete_room_turn`` for the provider
``cursor``), the workspace captures (:data:`WORKSPACE_TOOLS`),
:data:`ONBOARDING_TOOLS` and :data:`RESUME_TOOLS`; every profile serves
:data:`ROOM_TOOLS` (the rooms and the room's work). :func:`register_tools`
registers exactly those, and
nothing else decides which tools exist: the server registers through it, and
:func:`registered_tool_names` runs it against a recorder, so the readiness
resource and ``--letagents-runtime-contract`` list exactly what a client can
call (upstream's rule: discover through the production registration path).

In the profiles whose room tools get the ``worker_id`` facade (PROTOCOL §5.1)
every tool that takes ``room_id`` but ``register_agent_session`` takes it; in
the others it is not part of any schema.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Final, Protocol, final

# Tool signatures are evaluated at run time (the SDK and _without_parameter read them).
from mcp_types import CallToolResult, ToolAnnotations

from ._board_tools import (
    approve_board_intent,
    assign_board_manager,
    deny_board_intent,
    get_board_settings,
    list_board_intents,
    release_board_manager,
    set_board_manager_mode,
)
from ._intent_tools import (
    register_board_intent,
    register_task_claim_intent,
    register_task_close_intent,
    register_task_create_intent,
    register_task_lease_action_intent,
)
from ._knowledge_tools import (
    get_human_requests,
    get_room_memory,
    remember_room_fact,
    request_human_input,
)
from ._message_tools import (
    get_room_guidelines,
    post_status,
    read_messages,
    send_message,
    send_thread_message,
)
from ._onboarding_tools import (
    clear_saved_auth,
    get_onboarding_status,
    poll_device_auth,
    set_agent_name,
    start_device_auth,
)
from ._profiles import CURSOR_PROVIDER, FACADE_PROFILES, tool_surface
from ._reasoning_tool import post_reasoning
from ._review_tools import (
    claim_task_review,
    get_room_artifacts,
    get_room_events,
    publish_room_artifact,
    release_task_review,
    submit_review_verdict,
)
from ._room_tools import (
    check_repo,
    check_repo_visibility,
    create_project,
    create_room,
    get_current_room,
    initialize_repo,
    join_code,
    join_project,
    join_room,
    resume_room_session,
)
from ._session_tools import disconnect_agent_session, register_agent_session
from ._task_tools import (
    add_task,
    claim_task,
    complete_task,
    get_board,
    handoff_task_lease,
    release_task_lease,
    update_task,
)
from ._turn_tools import complete_room_turn, set_reply_thread
from ._wait_tool import wait_for_messages
from ._wake_tools import add_wake_rule, cancel_wake_rule, list_wake_rules
from ._workspace_tools import begin_workspace_capture, publish_workspace_capture

if TYPE_CHECKING:
    from ._facade import ToolFn

__all__ = [
    "DELIVERY_TOOLS",
    "ONBOARDING_TOOLS",
    "RESUME_TOOLS",
    "ROOM_TOOLS",
    "SESSION_TOOLS",
    "STRICT_TOOLS",
    "TOOLS",
    "TOOL_ANNOTATIONS",
    "WORKSPACE_TOOLS",
    "ToolRegistrar",
    "profile_tools",
    "register_tools",
    "registered_tool_names",
]

# Every tool, by name, in registration order.
TOOLS: Final[Mapping[str, ToolFn]] = {
    "create_room": create_room,
    "create_project": create_project,
    "join_code": join_code,
    "join_project": join_project,
    "join_room": join_room,
    "get_current_room": get_current_room,
    "check_repo": check_repo,
    "initialize_repo": initialize_repo,
    "check_repo_visibility": check_repo_visibility,
    "register_agent_session": register_agent_session,
    "disconnect_agent_session": disconnect_agent_session,
    "get_room_guidelines": get_room_guidelines,
    "get_room_memory": get_room_memory,
    "remember_room_fact": remember_room_fact,
    "request_human_input": request_human_input,
    "get_human_requests": get_human_requests,
    "add_wake_rule": add_wake_rule,
    "list_wake_rules": list_wake_rules,
    "cancel_wake_rule": cancel_wake_rule,
    "post_status": post_status,
    "post_reasoning": post_reasoning,
    "begin_workspace_capture": begin_workspace_capture,
    "publish_workspace_capture": publish_workspace_capture,
    "add_task": add_task,
    "get_board": get_board,
    "get_board_settings": get_board_settings,
    "set_board_manager_mode": set_board_manager_mode,
    "assign_board_manager": assign_board_manager,
    "release_board_manager": release_board_manager,
    "register_board_intent": register_board_intent,
    "register_task_create_intent": register_task_create_intent,
    "register_task_claim_intent": register_task_claim_intent,
    "register_task_close_intent": register_task_close_intent,
    "register_task_lease_action_intent": register_task_lease_action_intent,
    "list_board_intents": list_board_intents,
    "approve_board_intent": approve_board_intent,
    "deny_board_intent": deny_board_intent,
    "get_room_events": get_room_events,
    "get_room_artifacts": get_room_artifacts,
    "publish_room_artifact": publish_room_artifact,
    "claim_task": claim_task,
    "update_task": update_task,
    "complete_task": complete_task,
    "claim_task_review": claim_task_review,
    "release_task_review": release_task_review,
    "release_task_lease": release_task_lease,
    "handoff_task_lease": handoff_task_lease,
    "submit_review_verdict": submit_review_verdict,
    "send_message": send_message,
    "send_thread_message": send_thread_message,
    "read_messages": read_messages,
    "wait_for_messages": wait_for_messages,
    "set_reply_thread": set_reply_thread,
    "complete_room_turn": complete_room_turn,
    "get_onboarding_status": get_onboarding_status,
    "start_device_auth": start_device_auth,
    "poll_device_auth": poll_device_auth,
    "clear_saved_auth": clear_saved_auth,
    "set_agent_name": set_agent_name,
    "resume_room_session": resume_room_session,
}
# Tools whose schema says ``additionalProperties: false``, as Node's strict
# (``z.object({}).strict()``) set_reply_thread (an argument no field takes is
# refused for every tool, before it runs).
STRICT_TOOLS: Final = frozenset({"set_reply_thread"})
# The annotations a tool is registered with (Node's: set_reply_thread is no read).
TOOL_ANNOTATIONS: Final[Mapping[str, ToolAnnotations]] = {
    "set_reply_thread": ToolAnnotations(read_only_hint=False),
}
# The session lifecycle: not served where a supervisor owns it.
SESSION_TOOLS: Final = ("register_agent_session", "disconnect_agent_session")
# The delivery loop: not served where a supervisor delivers.
DELIVERY_TOOLS: Final = ("wait_for_messages",)
# The supervised room turn's.
_TURN_TOOLS: Final = ("set_reply_thread", "complete_room_turn")
# Workspace captures: only where a worker edits a repository on its own.
WORKSPACE_TOOLS: Final = ("begin_workspace_capture", "publish_workspace_capture")
# Signing in and naming the agent: where the chat itself onboards (not under a supervisor).
ONBOARDING_TOOLS: Final = (
    "get_onboarding_status",
    "start_device_auth",
    "poll_device_auth",
    "clear_saved_auth",
    "set_agent_name",
)
# Rejoining the saved room after a restart: likewise.
RESUME_TOOLS: Final = ("resume_room_session",)
# The rooms and the room's work: every profile serves these, in upstream's order.
ROOM_TOOLS: Final = tuple(
    name
    for name in TOOLS
    if name
    not in (
        *SESSION_TOOLS,
        *DELIVERY_TOOLS,
        *_TURN_TOOLS,
        *WORKSPACE_TOOLS,
        *ONBOARDING_TOOLS,
        *RESUME_TOOLS,
    )
)


def profile_tools(profile: str, provider: str | None = None) -> tuple[str, ...]:
    """The tools ``profile`` serves (under ``provider``), in registration order."""
    surface = tool_surface(profile)
    names: list[str] = []
    if surface.session_lifecycle:
        names.extend(SESSION_TOOLS)
    names.extend(ROOM_TOOLS)
    if surface.workspace_capture:
        names.extend(WORKSPACE_TOOLS)
    if surface.delivery_loop:
        names.extend(DELIVERY_TOOLS)
    if surface.reply_thread:
        names.append("set_reply_thread")
        if provider == CURSOR_PROVIDER:
            names.append("complete_room_turn")
    if surface.onboarding:
        names.extend(ONBOARDING_TOOLS)
    if surface.room_resume:
        names.extend(RESUME_TOOLS)
    return tuple(names)


def _without_parameter(fn: ToolFn, name: str) -> ToolFn:
    """``fn`` as a tool whose schema lacks ``name`` (it is then always None)."""
    signature = inspect.signature(fn, eval_str=True)

    @functools.wraps(fn)
    async def call(**kwargs: Any) -> CallToolResult:
        return await fn(**kwargs)

    call.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[p for p in signature.parameters.values() if p.name != name]
    )
    return call


class ToolRegistrar(Protocol):
    """Anything tools can be registered on: the MCP server, or a recorder."""

    def add_tool(
        self,
        fn: Callable[..., Any],
        name: str | None = None,
        *,
        annotations: ToolAnnotations | None = None,
    ) -> None: ...


def register_tools(registrar: ToolRegistrar, profile: str, provider: str | None = None) -> None:
    """Register every tool ``profile`` serves (:func:`profile_tools`): the only place
    that decides."""
    for name in profile_tools(profile, provider):
        fn = TOOLS[name]
        facade = profile in FACADE_PROFILES and name != "register_agent_session"
        has_worker_id = "worker_id" in inspect.signature(fn).parameters
        if has_worker_id and not facade and name != "register_agent_session":
            fn = _without_parameter(fn, "worker_id")
        registrar.add_tool(fn, name=name, annotations=TOOL_ANNOTATIONS.get(name))


@final
class _Recorder:
    def __init__(self) -> None:
        self.names: list[str] = []

    def add_tool(
        self,
        fn: Callable[..., Any],
        name: str | None = None,
        *,
        annotations: ToolAnnotations | None = None,
    ) -> None:
        self.names.append(name or fn.__name__)


def registered_tool_names(profile: str, provider: str | None = None) -> list[str]:
    """The sorted names of the tools :func:`register_tools` registers for ``profile``."""
    recorder = _Recorder()
    register_tools(recorder, profile, provider)
    return sorted(recorder.names)
