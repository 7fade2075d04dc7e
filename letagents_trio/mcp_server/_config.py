"""The MCP server's configuration, read once from the environment.

The variables are the Node MCP server's, with its rules (PROTOCOL §1, §6.1, §7.6):

* ``LETAGENTS_API_URL``: the room API; default ``http://localhost:3001``,
  trailing slashes removed.
* ``LETAGENTS_TOKEN``: the owner's bearer token; when unset or empty, the
  ``auth.token`` of the state file (if present and not expired), read afresh
  for every request (:meth:`ServerConfig.room_credential`), so a sign-out
  (a 401 clears it) or a sign-in written by another process takes effect at
  the next request, as in the Node client.
* ``LETAGENTS_STATE_PATH``: the state file; default ``~/.letagents/mcp-state.json``.
* ``LETAGENTS_CHAT_STORAGE_SETTINGS_PATH``: which rooms are local; default
  ``~/.letagents/chat-storage.json``.
* ``LETAGENTS_LOCAL_CHAT_DB``: the SQLite file of local rooms' chat; default
  ``~/.letagents/local-chat.sqlite`` (an empty value counts as unset).
* ``LETAGENTS_EXECUTION_PROFILE``: which tool surface to serve
  (:mod:`._profiles`); unset or blank means ``autonomous_mcp_worker``, as in
  the Node server. ``supervised_room_turn`` needs
  ``LETAGENTS_SUPERVISED_BOUNDED_TURNS=1``, and the flag needs it.
* ``LETAGENTS_SUPERVISOR_PROVIDER``: reported as ``provider`` by the
  readiness resource; ``cursor`` adds ``complete_room_turn`` to the room turn.
* ``LETAGENTS_RUNTIME`` and ``LETAGENTS_IDE``: the runtime and IDE labels of
  worker registrations; default ``python`` and ``Agent``.
* ``LETAGENTS_AGENT_SESSION_BEARER``: set by a supervisor: the worker
  bearer, the process's only credential (no owner token, no session
  headers, no worker handles, no process connections; :mod:`._profiles`).
* ``LETAGENTS_POLL_MAX_MS``: the long-poll cap; parsed by the same function
  the reference room uses, so both sides agree by construction.

The token is a secret: it is hidden from ``repr`` and never logged.

This is the one place the MCP server (and the host layer below it) reads the
process environment: every path, label and mode is passed down from here. A
path variable that is unset or empty means ``~/.letagents/<file>``, as in the
Node client.

What cannot work is refused at start-up, because it would otherwise surface
only at the first tool call, or never: an API URL that is not an
``http``/``https`` URL with a host, an unknown profile (it silently changed
which tools are served), and the combinations of profile, bearer, owner token
and API URL the Node server refuses (:func:`~._profiles.credential_mode`).
:meth:`ServerConfig.from_env` raises :class:`ConfigError` naming the variable
and what to set instead; a :class:`ServerConfig` built in code checks its
profile and credentials the same way. :func:`read_config` is what the command
uses: the Node server's refusals still raise, but a bad API URL (ours alone)
gives the default address and the problem, for a server that starts and
answers every tool call with :func:`refusal_text`.
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
from ._profiles import (
    AUTONOMOUS_WORKER_PROFILE,
    BOUNDED_TURNS_ENV,
    EXECUTION_PROFILES,
    FACADE_PROFILES,
    INTERACTIVE_DESKTOP_PROFILE,
    OWNER,
    SUPERVISED,
    SUPERVISED_ROOM_TURN_PROFILE,
    WORKER,
    WORKER_BEARER_ENV,
    ConfigError,
    NodeRefusal,
    ToolSurface,
    check_profile,
    credential_mode,
    tool_surface,
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
    "read_config",
    "refusal_text",
]

# When LETAGENTS_EXECUTION_PROFILE is unset: the Node server's default.
DEFAULT_PROFILE: Final = AUTONOMOUS_WORKER_PROFILE
# Every profile the server knows; any other value is refused at start-up.
KNOWN_PROFILES: Final = frozenset(EXECUTION_PROFILES)
# Profiles where a supervisor owns the session lifecycle.
SUPERVISED_PROFILES: Final = KNOWN_PROFILES - FACADE_PROFILES
# Where the owner token came from, for errors that must say which one to fix.
TOKEN_ENV: Final = OWNER_TOKEN_ENV


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


def _strip_slashes(url: str) -> str:
    return url.rstrip("/")


def _text(environ: Mapping[str, str], name: str) -> str | None:
    value = environ.get(name, "").strip()
    return value or None


def _path(environ: Mapping[str, str], name: str, default_file: str) -> Path:
    """The path in variable ``name``; unset or empty means ``~/.letagents/<default_file>``."""
    configured = environ.get(name)
    return Path(configured) if configured else letagents_file(default_file)


def _known_profile(instance: object, attribute: attrs.Attribute[str], value: str) -> None:
    check_profile(value, bounded_turns=value == SUPERVISED_ROOM_TURN_PROFILE)


def _mode(config: ServerConfig) -> str:
    return credential_mode(
        profile=config.profile,
        bearer=config.worker_bearer,
        owner_token=config.token,
        api_url=config.api_url,
    )


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
        profile: the execution profile (decides the tool surface): one of
            the Node server's four, else ``ConfigError``.
        provider: ``LETAGENTS_SUPERVISOR_PROVIDER``, reported by the readiness
            resource (``cursor`` adds ``complete_room_turn`` to the room turn).
        poll_max_ms: the long-poll cap in milliseconds.
        token_origin: where ``token`` came from (``LETAGENTS_TOKEN``, or the
            state file's ``auth.token``), so an error can say which to fix.
        runtime_label: the runtime label of worker registrations.
        ide_label: the IDE label of worker registrations (normalised, §5.4).
        worker_bearer: ``LETAGENTS_AGENT_SESSION_BEARER`` (never shown in
            ``repr``): then every room call carries it and nothing else.
        mode: whose credential room calls carry (see ``_profiles.py``):
            ``"owner"``, ``"worker"`` (the bearer) or ``"supervised"``
            (none: the supervisor's bridge lends it, and this server has none).
            Worked out from the rest; a combination the Node server refuses
            raises :class:`ConfigError`.
    """

    api_url: str = attrs.field(default=DEFAULT_API_URL, converter=_strip_slashes)
    token: str | None = attrs.field(default=None, repr=False)
    state_path: Path = attrs.field(factory=lambda: letagents_file(STATE_FILE))
    chat_storage_settings_path: Path = attrs.field(
        factory=lambda: letagents_file(CHAT_STORAGE_FILE)
    )
    local_chat_path: Path = attrs.field(factory=lambda: letagents_file(LOCAL_CHAT_FILE))
    profile: str = attrs.field(default=DEFAULT_PROFILE, validator=_known_profile)
    provider: str | None = None
    poll_max_ms: int = attrs.field(factory=lambda: poll_max_from_env({}))
    token_origin: str | None = None
    runtime_label: str = DEFAULT_RUNTIME_LABEL
    ide_label: str = DEFAULT_IDE_LABEL
    worker_bearer: str | None = attrs.field(default=None, repr=False)
    mode: str = attrs.field(default=attrs.Factory(_mode, takes_self=True), init=False)

    def room_credential(self, store: LocalStateStore) -> OwnerTokenSource:
        """The bearer room calls carry, as the room client's ``owner_token`` source.

        In owner mode ``LETAGENTS_TOKEN`` when set, else a callable reading the
        state file's ``auth`` for every request (cheaply:
        :meth:`letagents_trio.workers.LocalStateStore.owner_token` re-reads the
        file only when it changed); in worker mode the worker bearer; in
        supervised mode none.
        """
        if self.mode == WORKER:
            return self.worker_bearer
        if self.mode == SUPERVISED:
            return None
        return self.token if self.token else store.owner_token

    @property
    def owner_mode(self) -> bool:
        """Whether this process acts for the owner (PROTOCOL §4.1).

        Then it has worker handles and process connections, and a refused owner
        token is forgotten; the manager and the handles take it from here.
        """
        return self.mode == OWNER

    @property
    def worker_facade(self) -> bool:
        """Whether room tools take ``worker_id`` (PROTOCOL §5.1)."""
        return self.profile in FACADE_PROFILES

    @property
    def surface(self) -> ToolSurface:
        """The profile's tool surface (``_profiles.tool_surface``)."""
        return tool_surface(self.profile)

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> ServerConfig:
        """Read the configuration the Node MCP server would read.

        Args:
            environ: the environment; ``os.environ`` when None.

        The state file is not read here: its sign-in is read for every
        request (:meth:`room_credential`).

        Raises:
            ConfigError: ``LETAGENTS_API_URL`` is not an http(s) URL,
                ``LETAGENTS_EXECUTION_PROFILE`` names no known profile or
                disagrees with ``LETAGENTS_SUPERVISED_BOUNDED_TURNS``, or the
                profile, worker bearer, owner token and API URL make a
                combination the Node server refuses (its text).
        """
        env = os.environ if environ is None else environ
        api_url = check_api_url(env.get("LETAGENTS_API_URL") or DEFAULT_API_URL)
        profile = check_profile(
            _text(env, "LETAGENTS_EXECUTION_PROFILE") or DEFAULT_PROFILE,
            bounded_turns=_text(env, BOUNDED_TURNS_ENV) == "1",
        )
        state_path = _path(env, STATE_PATH_ENV, STATE_FILE)
        token = _text(env, TOKEN_ENV)
        bearer = _text(env, WORKER_BEARER_ENV)
        # The Node server's rules need the API URL as set: a default is not "explicit".
        credential_mode(
            profile=profile,
            bearer=bearer,
            owner_token=token,
            api_url=_text(env, "LETAGENTS_API_URL"),
        )
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
            worker_bearer=bearer,
        )


# Where a refusal tells the user to fix a setting: the server reads it once, at start.
REFUSAL_FIX: Final = (
    "Correct it in the env of this server's entry in the MCP host's configuration,"
    " then restart the server."
)


def refusal_text(problems: list[str]) -> str:
    """What every tool call answers when the server started with ``problems``."""
    return (
        "The letagents MCP server started with a setting it cannot use, so no tool works: "
        + " ".join(problems)
        + f" {REFUSAL_FIX}"
    )


def read_config(environ: Mapping[str, str] | None = None) -> tuple[ServerConfig, str | None]:
    """The configuration to serve, and what is wrong with it (None when nothing is).

    An API URL that is not one is our own refusal, not the Node server's: the
    server starts anyway with the default address and answers every tool call
    with :func:`refusal_text`, as a host shows a tool's error but only
    "Connection closed" for a server that exits.

    Raises:
        NodeRefusal: a configuration the Node server refuses as it starts
            (checked with the API URL unset when it was not one).
    """
    env = os.environ if environ is None else environ
    try:
        return ServerConfig.from_env(env), None
    except NodeRefusal:
        raise
    except ConfigError as exc:
        unset_url = {name: value for name, value in env.items() if name != "LETAGENTS_API_URL"}
        return ServerConfig.from_env(unset_url), str(exc)
