"""Execution profiles, their tool surfaces, and whose credential the server speaks with.

The Node MCP server's rules, in one place (its ``runtime/execution-profile.ts``,
``runtime/tool-surface-policy.ts`` and ``runtime/worker-bearer.ts``):

**Profiles** (:data:`EXECUTION_PROFILES`). ``LETAGENTS_EXECUTION_PROFILE`` is
one of ``supervised_room_turn``, ``supervised_mcp_polling``,
``autonomous_mcp_worker`` (the default) and ``interactive_desktop``.
``supervised_room_turn`` is valid exactly when
``LETAGENTS_SUPERVISED_BOUNDED_TURNS=1`` is set, and the flag only with it.
(``cursor_supervised_room_turn`` is no profile: it is the runtime contract's
key for the room turn under the provider ``cursor``.)

**Tool surfaces** (:func:`tool_surface`). The two supervised profiles serve no
agent-session tools (their supervisor owns the session), no onboarding (the
supervisor signs in) and no ``resume_room_session``; the room turn serves
no delivery loop (``wait_for_messages``: the supervisor delivers) but
``set_reply_thread``, and ``complete_room_turn`` when the provider is
``cursor``.

**Credential modes** (:func:`credential_mode`), decided at start, refused
there when they cannot work, with the Node server's texts:

* ``owner``: no worker bearer and no supervised profile. The owner's token
  (``LETAGENTS_TOKEN``, else the state file's sign-in) goes out as
  ``Authorization: Bearer``, with the session's headers when a call acts as
  a session.
* ``worker``: ``LETAGENTS_AGENT_SESSION_BEARER`` is set. It is the whole
  credential: every room call sends ``Authorization: Bearer <bearer>`` and no
  session headers or body credentials; no worker handles, no process
  connections. It needs an explicit ``LETAGENTS_API_URL`` (HTTPS unless the
  host is exactly a loopback one), and refuses ``LETAGENTS_TOKEN``.
* ``supervised``: a supervised profile without a bearer. The Node server
  borrows each call's credential from its desktop daemon over a local
  bridge; this server has no such bridge, so it serves the profile's tools
  and refuses every room call with the Node server's text for a missing
  supervisor context (:data:`SUPERVISED_CREDENTIAL_TEXT`), sending nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final, final
from urllib.parse import urlsplit

import attrs

__all__ = [
    "AUTONOMOUS_WORKER_PROFILE",
    "BOUNDED_TURNS_ENV",
    "CURSOR_PROVIDER",
    "EXECUTION_PROFILES",
    "FACADE_PROFILES",
    "INTERACTIVE_DESKTOP_PROFILE",
    "NODE_REFUSAL_EXIT",
    "OWNER",
    "SUPERVISED",
    "SUPERVISED_CREDENTIAL_TEXT",
    "SUPERVISED_POLLING_PROFILE",
    "SUPERVISED_ROOM_TURN_PROFILE",
    "WORKER",
    "WORKER_BEARER_ENV",
    "ConfigError",
    "NodeRefusal",
    "ToolSurface",
    "credential_mode",
    "tool_surface",
]


class ConfigError(ValueError):
    """A variable holds a value the server cannot run with; the message says which and why."""


# The exit status of a configuration the Node server refuses (its uncaught start error).
NODE_REFUSAL_EXIT: Final = 1


class NodeRefusal(ConfigError):
    """A configuration the Node server refuses as it starts, with its text: it exits 1
    on these, and ``letagents-trio mcp`` does too (2 stays for our own refusals)."""


# --- profiles ------------------------------------------------------------------------

# A bounded turn a supervisor runs: it delivers the room's messages itself.
SUPERVISED_ROOM_TURN_PROFILE: Final = "supervised_room_turn"
# A custodial poller under a supervisor (contract custodial_polling_v1).
SUPERVISED_POLLING_PROFILE: Final = "supervised_mcp_polling"
# An autonomous agent process: durable workers, worker_id on room tools.
AUTONOMOUS_WORKER_PROFILE: Final = "autonomous_mcp_worker"
# A chat in a desktop host: the same surface.
INTERACTIVE_DESKTOP_PROFILE: Final = "interactive_desktop"
# Node's EXECUTION_PROFILES, in its order.
EXECUTION_PROFILES: Final = (
    SUPERVISED_ROOM_TURN_PROFILE,
    SUPERVISED_POLLING_PROFILE,
    AUTONOMOUS_WORKER_PROFILE,
    INTERACTIVE_DESKTOP_PROFILE,
)
# Profiles whose room tools get the worker_id facade (PROTOCOL §5.1).
FACADE_PROFILES: Final = frozenset({AUTONOMOUS_WORKER_PROFILE, INTERACTIVE_DESKTOP_PROFILE})
# Must be "1" exactly when the profile is the room turn.
BOUNDED_TURNS_ENV: Final = "LETAGENTS_SUPERVISED_BOUNDED_TURNS"
# The provider whose room turns record their answer with complete_room_turn.
CURSOR_PROVIDER: Final = "cursor"


@final
@attrs.frozen(kw_only=True)
class ToolSurface:
    """What a profile serves beyond the room tools every profile has.

    Attributes:
        session_lifecycle: ``register_agent_session`` and ``disconnect_agent_session``.
        delivery_loop: ``wait_for_messages``.
        reply_thread: ``set_reply_thread`` (the room turn only).
        onboarding: the sign-in and naming tools (``get_onboarding_status``, ...).
        room_resume: ``resume_room_session``.
        workspace_capture: ``begin_workspace_capture`` and ``publish_workspace_capture``
            (the two profiles of a worker on its own).
    """

    session_lifecycle: bool
    delivery_loop: bool
    reply_thread: bool = False
    onboarding: bool = False
    room_resume: bool = False
    workspace_capture: bool = False


_SURFACES: Final[Mapping[str, ToolSurface]] = {
    SUPERVISED_POLLING_PROFILE: ToolSurface(session_lifecycle=False, delivery_loop=True),
    SUPERVISED_ROOM_TURN_PROFILE: ToolSurface(
        session_lifecycle=False, delivery_loop=False, reply_thread=True
    ),
    AUTONOMOUS_WORKER_PROFILE: ToolSurface(
        session_lifecycle=True,
        delivery_loop=True,
        onboarding=True,
        room_resume=True,
        workspace_capture=True,
    ),
    INTERACTIVE_DESKTOP_PROFILE: ToolSurface(
        session_lifecycle=True,
        delivery_loop=True,
        onboarding=True,
        room_resume=True,
        workspace_capture=True,
    ),
}


def tool_surface(profile: str) -> ToolSurface:
    """The tool surface of ``profile`` (one of :data:`EXECUTION_PROFILES`)."""
    return _SURFACES[profile]


def check_profile(profile: str, *, bounded_turns: bool) -> str:
    """``profile`` if it is valid, and valid with the bounded-turns flag as it is.

    Raises:
        ConfigError: an unknown profile (naming every valid one), or the room
            turn without ``LETAGENTS_SUPERVISED_BOUNDED_TURNS=1`` or the flag
            without it (Node's text).
    """
    if profile not in EXECUTION_PROFILES:
        raise NodeRefusal(
            f"Invalid LETAGENTS_EXECUTION_PROFILE: {profile}. Use one of:"
            f" {', '.join(sorted(EXECUTION_PROFILES))} (unset means {AUTONOMOUS_WORKER_PROFILE})."
        )
    if bounded_turns != (profile == SUPERVISED_ROOM_TURN_PROFILE):
        raise NodeRefusal(
            f"LETAGENTS_EXECUTION_PROFILE={SUPERVISED_ROOM_TURN_PROFILE} and"
            f" {BOUNDED_TURNS_ENV}=1 must be configured together."
        )
    return profile


# --- credential modes ----------------------------------------------------------------

OWNER: Final = "owner"
WORKER: Final = "worker"
SUPERVISED: Final = "supervised"
# Set by a supervisor that minted a worker session for this process.
WORKER_BEARER_ENV: Final = "LETAGENTS_AGENT_SESSION_BEARER"
# Node's SupervisedWorkerCredentialError("SUPERVISED_CREDENTIAL_STALE"): no
# supervisor context lends this process a credential.
SUPERVISED_CREDENTIAL_TEXT: Final = (
    "The daemon-supervised worker credential is stale or missing its exact context."
)
# Hosts an http:// API URL may name in worker-bearer mode.
_LOOPBACK_HOSTS: Final = frozenset({"localhost", "127.0.0.1", "::1", "[::1]"})


def credential_mode(
    *,
    profile: str,
    bearer: str | None,
    owner_token: str | None,
    api_url: str | None,
) -> str:
    """Whose credential the server speaks with: :data:`OWNER`, :data:`WORKER` or :data:`SUPERVISED`.

    Node's ``getWorkerBearerRuntime``, in its order.

    Args:
        profile: a valid profile (see :func:`check_profile`).
        bearer: ``LETAGENTS_AGENT_SESSION_BEARER``, trimmed, or None.
        owner_token: ``LETAGENTS_TOKEN``, trimmed, or None.
        api_url: ``LETAGENTS_API_URL`` as set, trimmed, or None when unset.

    Raises:
        ConfigError: a combination the Node server refuses, with its text.
    """
    supervised = profile == SUPERVISED_ROOM_TURN_PROFILE
    polling = profile == SUPERVISED_POLLING_PROFILE
    if polling and (bearer or owner_token):
        raise NodeRefusal(
            "Custodial polling refuses environment credentials;"
            " borrow exact daemon worker authority."
        )
    if not bearer and not supervised and not polling:
        return OWNER
    if bearer and supervised:
        raise NodeRefusal(
            "Daemon-supervised bounded turns refuse LETAGENTS_AGENT_SESSION_BEARER;"
            " credentials must be borrowed from the exact supervisor generation."
        )
    if not api_url:
        raise NodeRefusal("Worker bearer mode requires an explicit LETAGENTS_API_URL.")
    parts = urlsplit(api_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise NodeRefusal(
            "Worker bearer mode requires LETAGENTS_API_URL to be a valid HTTP(S) URL."
        )
    if parts.scheme == "http" and (parts.hostname or "") not in _LOOPBACK_HOSTS:
        raise NodeRefusal(
            "Worker bearer mode requires HTTPS unless LETAGENTS_API_URL uses an exact"
            " loopback host."
        )
    if bearer and owner_token:
        raise NodeRefusal(
            "Worker bearer mode refuses LETAGENTS_TOKEN. Remove the owner token from this"
            " process before starting the worker."
        )
    return WORKER if bearer else SUPERVISED
