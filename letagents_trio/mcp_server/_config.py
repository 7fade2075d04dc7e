"""The MCP server's configuration, read once from the environment.

The variables are the Node MCP server's, with its rules (PROTOCOL §1, §6.1, §7.6):

* ``LETAGENTS_API_URL``: the room API; default ``http://localhost:3001``,
  trailing slashes removed.
* ``LETAGENTS_TOKEN``: the owner's bearer token; when unset or empty, the
  ``auth.token`` of the state file (if present and not expired), read afresh
  for every request (:meth:`ServerConfig.owner_token_source`), so a sign-out
  (a 401 clears it) or a sign-in written by another process takes effect at
  the next request, as in the Node client.
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
* ``LETAGENTS_RUNTIME`` and ``LETAGENTS_IDE``: the runtime and IDE labels of
  worker registrations; default ``python`` and ``Agent``.
* ``LETAGENTS_AGENT_SESSION_BEARER``: set by a supervisor; any non-empty value
  turns owner mode off (no worker handles, no process connections).
* ``LETAGENTS_POLL_MAX_MS``: the long-poll cap; parsed by the same function
  the reference room uses, so both sides agree by construction.

The token is a secret: it is hidden from ``repr`` and never logged.

This is the one place the MCP server (and the host layer below it) reads the
process environment: every path, label and mode is passed down from here. A
path variable that is unset or empty means ``~/.letagents/<file>``, as in the
Node client.

Two values are checked at start-up, because a mistake in either would
otherwise surface only at the first tool call, or never: the API URL must be
an ``http``/``https`` URL with a host, and the profile one of
:data:`KNOWN_PROFILES` (an unknown one silently changed which tools are
served). :meth:`ServerConfig.from_env` raises :class:`ConfigError` naming the
variable, the value and what to set instead.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Final, final

import attrs

from .._protocol import DEFAULT_API_URL, poll_max_from_env
from .._util import is_http_url
from ..workers._identity import DEFAULT_RUNTIME_LABEL, detect_ide_label, detect_runtime_label
from ..workers._names import DEFAULT_IDE_LABEL
from ..workers._paths import (
    CHAT_STORAGE_FILE,
    CHAT_STORAGE_SETTINGS_ENV,
    LOCAL_CHAT_DB_ENV,
    LOCAL_CHAT_FILE,
    OWNER_TOKEN_ENV,
    STATE_FILE,
    STATE_PATH_ENV,
    letagents_file,
)

if TYPE_CHECKING:
    from .._client import OwnerTokenSource
    from ..workers._state import LocalStateStore

__all__ = [
    "AUTONOMOUS_WORKER_PROFILE",
    "DEFAULT_PROFILE",
    "FACADE_PROFILES",
    "INTERACTIVE_DESKTOP_PROFILE",
    "KNOWN_PROFILES",
    "SUPERVISED_PROFILES",
    "ConfigError",
    "ServerConfig",
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
# Every profile the server knows; any other value is refused at start-up.
KNOWN_PROFILES: Final = FACADE_PROFILES | SUPERVISED_PROFILES
# Where the owner token came from, for errors that must say which one to fix.
TOKEN_ENV: Final = OWNER_TOKEN_ENV


class ConfigError(ValueError):
    """A variable holds a value the server cannot run with; the message says which and why."""


def check_api_url(url: str) -> str:
    """``url`` if it is an ``http(s)://host…`` URL.

    Raises:
        ConfigError: naming ``LETAGENTS_API_URL``, the value and an example.
    """
    if not is_http_url(url):
        raise ConfigError(
            f"LETAGENTS_API_URL={url!r} is not an http(s) URL. Set it to the room API's"
            f" address, for example {DEFAULT_API_URL} (the default when unset)."
        )
    return url


def check_profile(profile: str) -> str:
    """``profile`` if it is one of :data:`KNOWN_PROFILES`.

    Raises:
        ConfigError: naming ``LETAGENTS_EXECUTION_PROFILE`` and every valid value.
    """
    if profile not in KNOWN_PROFILES:
        valid = ", ".join(sorted(KNOWN_PROFILES))
        raise ConfigError(
            f"LETAGENTS_EXECUTION_PROFILE={profile!r} is not a profile this server knows."
            f" Use one of: {valid} (unset means {DEFAULT_PROFILE})."
        )
    return profile


def _strip_slashes(url: str) -> str:
    return url.rstrip("/")


def _text(environ: Mapping[str, str], name: str) -> str | None:
    value = environ.get(name, "").strip()
    return value or None


def _path(environ: Mapping[str, str], name: str, default_file: str) -> Path:
    """The path in variable ``name``; unset or empty means ``~/.letagents/<default_file>``."""
    configured = environ.get(name)
    return Path(configured) if configured else letagents_file(default_file)


@final
@attrs.frozen(kw_only=True)
class ServerConfig:
    """Everything the MCP server reads from its environment.

    Attributes:
        api_url: the room API's base URL, without trailing slashes.
        token: ``LETAGENTS_TOKEN``, or None (never shown in ``repr``); without
            it the state file's sign-in is used, read for every request.
        state_path: the shared local state file.
        chat_storage_settings_path: the file that says which rooms are local.
        local_chat_path: the SQLite file that keeps local rooms' chat.
        profile: the execution profile (decides the tool surface).
        provider: ``LETAGENTS_SUPERVISOR_PROVIDER``, reported by the readiness resource.
        poll_max_ms: the long-poll cap in milliseconds.
        token_origin: where ``token`` came from (``LETAGENTS_TOKEN``, or the
            state file's ``auth.token``), so an error can say which to fix.
        runtime_label: the runtime label of worker registrations.
        ide_label: the IDE label of worker registrations (normalised, §5.4).
        owner_mode: whether this process acts for the owner: false when a
            supervisor set ``LETAGENTS_AGENT_SESSION_BEARER`` (PROTOCOL §4.1).
            The connection manager and the worker handles both take it from here.
    """

    api_url: str = attrs.field(default=DEFAULT_API_URL, converter=_strip_slashes)
    token: str | None = attrs.field(default=None, repr=False)
    state_path: Path = attrs.field(factory=lambda: letagents_file(STATE_FILE))
    chat_storage_settings_path: Path = attrs.field(
        factory=lambda: letagents_file(CHAT_STORAGE_FILE)
    )
    local_chat_path: Path = attrs.field(factory=lambda: letagents_file(LOCAL_CHAT_FILE))
    profile: str = DEFAULT_PROFILE
    provider: str | None = None
    poll_max_ms: int = attrs.field(factory=lambda: poll_max_from_env({}))
    token_origin: str | None = None
    runtime_label: str = DEFAULT_RUNTIME_LABEL
    ide_label: str = DEFAULT_IDE_LABEL
    owner_mode: bool = True

    def owner_token_source(self, store: LocalStateStore) -> OwnerTokenSource:
        """What the room client asks for the owner token before every request.

        ``LETAGENTS_TOKEN`` when set; else a callable reading the state file's
        ``auth`` (cheaply: :meth:`letagents_trio.workers.LocalStateStore.owner_token` re-reads the
        file only when it changed).
        """
        return self.token if self.token else store.owner_token

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

        The state file is not read here: its sign-in is read for every
        request (:meth:`owner_token_source`).

        Raises:
            ConfigError: ``LETAGENTS_API_URL`` is not an http(s) URL, or
                ``LETAGENTS_EXECUTION_PROFILE`` names no known profile.
        """
        env = os.environ if environ is None else environ
        api_url = check_api_url(env.get("LETAGENTS_API_URL") or DEFAULT_API_URL)
        profile = check_profile(_text(env, "LETAGENTS_EXECUTION_PROFILE") or DEFAULT_PROFILE)
        state_path = _path(env, STATE_PATH_ENV, STATE_FILE)
        token = _text(env, TOKEN_ENV)
        # Named when the room refuses the token: the variable, else the state file.
        origin = TOKEN_ENV if token is not None else f"auth.token of {state_path}"
        return cls(
            api_url=api_url,
            token=token,
            token_origin=origin,
            state_path=state_path,
            chat_storage_settings_path=_path(env, CHAT_STORAGE_SETTINGS_ENV, CHAT_STORAGE_FILE),
            local_chat_path=_path(env, LOCAL_CHAT_DB_ENV, LOCAL_CHAT_FILE),
            profile=profile,
            provider=_text(env, "LETAGENTS_SUPERVISOR_PROVIDER"),
            poll_max_ms=poll_max_from_env(env),
            runtime_label=detect_runtime_label(env),
            ide_label=detect_ide_label(env),
            owner_mode=not env.get(WORKER_BEARER_ENV),
        )
