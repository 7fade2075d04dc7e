"""The MCP server's configuration, read once from the environment.

The variables are the Node MCP server's, with its rules (PROTOCOL §1, §6.1, §7.6):

* ``LETAGENTS_API_URL``: the room API; default ``http://localhost:3001``,
  trailing slashes removed.
* ``LETAGENTS_TOKEN``: the owner's bearer token; when unset or empty, the
  ``auth.token`` of the state file (if present and not expired).
* ``LETAGENTS_STATE_PATH``: the state file; default ``~/.letagents/mcp-state.json``.
* ``LETAGENTS_CHAT_STORAGE_SETTINGS_PATH``: which rooms are local; default
  ``~/.letagents/chat-storage.json``.
* ``LETAGENTS_LOCAL_CHAT_DB``: the SQLite file of local rooms' chat; default
  ``~/.letagents/local-chat.sqlite`` (an empty value counts as unset).
* ``LETAGENTS_EXECUTION_PROFILE``: which tool surface to serve. Unset or blank
  means ``interactive_desktop``: a desktop host runs one server per chat,
  which is what that profile describes (PROTOCOL leaves the default open; we
  chose the one whose worker_id facade a chat needs).
* ``LETAGENTS_SUPERVISOR_PROVIDER``: reported as ``provider`` by the
  readiness resource, nothing more.
* ``LETAGENTS_POLL_MAX_MS``: the long-poll cap; parsed by the same function
  the reference room uses, so both sides agree by construction.

The token is a secret: it is hidden from ``repr`` and never logged.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Final, final

import attrs

from .._protocol import DEFAULT_API_URL, poll_max_from_env
from ..workers._local_chat import LOCAL_CHAT_DB_ENV, default_local_chat_path
from ..workers._state import LocalStateStore

__all__ = [
    "AUTONOMOUS_WORKER_PROFILE",
    "DEFAULT_PROFILE",
    "FACADE_PROFILES",
    "INTERACTIVE_DESKTOP_PROFILE",
    "SUPERVISED_PROFILES",
    "ServerConfig",
    "default_chat_storage_settings_path",
]

# A chat in a desktop host: durable workers, worker_id on room tools.
INTERACTIVE_DESKTOP_PROFILE: Final = "interactive_desktop"
# An autonomous agent process: the same surface as a desktop chat.
AUTONOMOUS_WORKER_PROFILE: Final = "autonomous_mcp_worker"
# When LETAGENTS_EXECUTION_PROFILE is unset: what a desktop host runs.
DEFAULT_PROFILE: Final = INTERACTIVE_DESKTOP_PROFILE
# Profiles whose room tools get the worker_id facade (PROTOCOL §5.1).
FACADE_PROFILES: Final = frozenset({INTERACTIVE_DESKTOP_PROFILE, AUTONOMOUS_WORKER_PROFILE})
# Set by a supervisor: this process speaks for it, not for an owner, and
# holds no process connections (PROTOCOL §4.1).
WORKER_BEARER_ENV: Final = "LETAGENTS_AGENT_SESSION_BEARER"
# Profiles where a supervisor owns the session lifecycle: no session tools.
SUPERVISED_PROFILES: Final = frozenset({"supervised_mcp_polling", "cursor_supervised_room_turn"})


def default_chat_storage_settings_path() -> Path:
    """``~/.letagents/chat-storage.json``, the Node client's default."""
    return Path.home() / ".letagents" / "chat-storage.json"


def _strip_slashes(url: str) -> str:
    return url.rstrip("/")


def _text(environ: Mapping[str, str], name: str) -> str | None:
    value = environ.get(name, "").strip()
    return value or None


@final
@attrs.frozen(kw_only=True)
class ServerConfig:
    """Everything the MCP server reads from its environment.

    Attributes:
        api_url: the room API's base URL, without trailing slashes.
        token: the owner's bearer token, or None (never shown in ``repr``).
        state_path: the shared local state file.
        chat_storage_settings_path: the file that says which rooms are local.
        local_chat_path: the SQLite file that keeps local rooms' chat.
        profile: the execution profile (decides the tool surface).
        provider: ``LETAGENTS_SUPERVISOR_PROVIDER``, reported by the readiness resource.
        poll_max_ms: the long-poll cap in milliseconds.
        owner_mode: whether this process acts for the owner: false when a
            supervisor set ``LETAGENTS_AGENT_SESSION_BEARER`` (PROTOCOL §4.1).
            The connection manager and the worker handles both take it from here.
    """

    api_url: str = attrs.field(default=DEFAULT_API_URL, converter=_strip_slashes)
    token: str | None = attrs.field(default=None, repr=False)
    state_path: Path = attrs.field(factory=lambda: LocalStateStore().path)
    chat_storage_settings_path: Path = attrs.field(factory=default_chat_storage_settings_path)
    local_chat_path: Path = attrs.field(factory=default_local_chat_path)
    profile: str = DEFAULT_PROFILE
    provider: str | None = None
    poll_max_ms: int = attrs.field(factory=lambda: poll_max_from_env({}))
    owner_mode: bool = True

    @property
    def worker_facade(self) -> bool:
        """Whether room tools take ``worker_id`` (PROTOCOL §5.1)."""
        return self.profile in FACADE_PROFILES

    @property
    def session_tools(self) -> bool:
        """Whether the agent-session tools are served (not under a supervisor)."""
        return self.profile not in SUPERVISED_PROFILES

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ServerConfig:
        """Read the configuration the Node MCP server would read.

        Args:
            environ: the environment; ``os.environ`` when None.

        The state file is read (without its lock) only when ``LETAGENTS_TOKEN``
        is unset, to find the stored owner token.
        """
        env = os.environ if environ is None else environ
        state_path = Path(p) if (p := env.get("LETAGENTS_STATE_PATH")) else None
        store = LocalStateStore(state_path)
        token = _text(env, "LETAGENTS_TOKEN")
        if token is None:
            auth = store.auth()
            token = auth.token if auth is not None else None
        chat = env.get("LETAGENTS_CHAT_STORAGE_SETTINGS_PATH")
        local_chat = env.get(LOCAL_CHAT_DB_ENV)
        return cls(
            api_url=env.get("LETAGENTS_API_URL") or DEFAULT_API_URL,
            token=token,
            state_path=store.path,
            chat_storage_settings_path=Path(chat) if chat else default_chat_storage_settings_path(),
            local_chat_path=(
                Path(local_chat) if local_chat else Path.home() / ".letagents" / "local-chat.sqlite"
            ),
            profile=_text(env, "LETAGENTS_EXECUTION_PROFILE") or DEFAULT_PROFILE,
            provider=_text(env, "LETAGENTS_SUPERVISOR_PROVIDER"),
            poll_max_ms=poll_max_from_env(env),
            owner_mode=not env.get(WORKER_BEARER_ENV),
        )
