"""ServerConfig.from_env reads upstream's variables with upstream's rules; the contract flag."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
from pathlib import Path

import pytest
import trio

from letagents_trio.mcp_server import ServerConfig
from letagents_trio.mcp_server._config import ConfigError
from letagents_trio.mcp_server._main import (
    HTTP_LOGGER,
    RUNTIME_CONTRACT_ARG,
    configure_logging,
    runtime_contract,
)
from letagents_trio.mcp_server._tools import ROOM_TOOLS
from letagents_trio.workers import LocalChat, LocalStateStore
from letagents_trio.workers._chat_storage import ChatStorage

HTTPS = "https://room.example"


def test_defaults(tmp_path: Path) -> None:
    """Unset variables give the Node client's defaults; no token without a state file."""
    config = ServerConfig.from_env({"LETAGENTS_STATE_PATH": str(tmp_path / "s.json")})
    assert config.api_url == "http://localhost:3001"
    assert config.token is None
    assert config.profile == "autonomous_mcp_worker"
    assert config.worker_facade
    assert config.poll_max_ms == 180_000


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("http://room:3001/", "http://room:3001"),
        ("http://room:3001///", "http://room:3001"),
        ("", "http://localhost:3001"),
    ],
)
def test_api_url_loses_trailing_slashes(tmp_path: Path, raw: str, expected: str) -> None:
    env = {"LETAGENTS_API_URL": raw, "LETAGENTS_STATE_PATH": str(tmp_path / "s.json")}
    assert ServerConfig.from_env(env).api_url == expected


async def test_token_falls_back_to_the_state_file_read_afresh(tmp_path: Path) -> None:
    """LETAGENTS_TOKEN wins; else auth.token of the state file, read at each ask (a
    sign-in or sign-out written later counts); the token is not in repr."""
    store = LocalStateStore(tmp_path / "s.json")
    env = {"LETAGENTS_STATE_PATH": str(store.path)}
    config = ServerConfig.from_env(env)
    assert config.token is None
    source = config.room_credential(store)
    assert callable(source)
    assert source() is None
    await store.save_auth("stored-owner-token")
    assert source() == "stored-owner-token"
    await store.clear_auth()
    assert source() is None
    config = ServerConfig.from_env({**env, "LETAGENTS_TOKEN": "env-token"})
    assert config.token == "env-token"
    assert config.room_credential(store) == "env-token"
    assert "env-token" not in repr(config)


PATH_VARIABLES = {
    "LETAGENTS_STATE_PATH": ("state_path", "mcp-state.json"),
    "LETAGENTS_CHAT_STORAGE_SETTINGS_PATH": ("chat_storage_settings_path", "chat-storage.json"),
    "LETAGENTS_LOCAL_CHAT_DB": ("local_chat_path", "local-chat.sqlite"),
}


@pytest.mark.parametrize("variable", PATH_VARIABLES)
@pytest.mark.parametrize("raw", [None, "", "/elsewhere/file"])
def test_paths_are_the_node_clients(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, raw: str | None
) -> None:
    """Each variable, else ~/.letagents/<file> (empty counts as unset): the files
    LocalStateStore(), ChatStorage() and LocalChat() open when given no path."""
    monkeypatch.setenv("HOME", str(tmp_path))
    env = {} if raw is None else {variable: raw}
    field, name = PATH_VARIABLES[variable]
    expected = Path(raw) if raw else tmp_path / ".letagents" / name
    assert getattr(ServerConfig.from_env(env), field) == expected
    assert getattr(ServerConfig(), field) == tmp_path / ".letagents" / name
    assert ServerConfig().state_path == LocalStateStore().path
    assert ServerConfig().chat_storage_settings_path == ChatStorage().path
    assert ServerConfig().local_chat_path == LocalChat().path


def test_runtime_and_ide_labels_come_from_the_environment(tmp_path: Path) -> None:
    """LETAGENTS_RUNTIME (trimmed) and LETAGENTS_IDE (normalised), read here only."""
    env = {"LETAGENTS_STATE_PATH": str(tmp_path / "s.json")}
    config = ServerConfig.from_env(env)
    assert (config.runtime_label, config.ide_label) == ("python", "Agent")
    config = ServerConfig.from_env(
        {**env, "LETAGENTS_RUNTIME": " codex ", "LETAGENTS_IDE": "claude-code"}
    )
    assert (config.runtime_label, config.ide_label) == ("codex", "Claude Code")


@pytest.mark.parametrize(("bearer", "owner_mode"), [(None, True), ("", True), ("lasb_x", False)])
def test_a_worker_bearer_turns_owner_mode_off(
    tmp_path: Path, bearer: str | None, owner_mode: bool
) -> None:
    """§4.1: under a supervisor's worker bearer the process holds nothing; read here only."""
    env = {"LETAGENTS_STATE_PATH": str(tmp_path / "s.json"), "LETAGENTS_API_URL": HTTPS}
    if bearer is not None:
        env["LETAGENTS_AGENT_SESSION_BEARER"] = bearer
    assert ServerConfig.from_env(env).owner_mode is owner_mode


async def test_runtime_contract_flag_prints_the_supervised_surfaces() -> None:
    """--letagents-runtime-contract prints the contract (no session tools under a supervisor),
    as compact JSON and a newline: Node's ``src/mcp/server.ts`` writes
    ``JSON.stringify(letAgentsRuntimeContract())`` (issue 28 row 10)."""
    with trio.fail_after(60):
        result = await trio.run_process(
            [sys.executable, "-m", "letagents_trio.mcp_server", RUNTIME_CONTRACT_ARG],
            capture_stdout=True,
            capture_stderr=True,
        )
    printed = json.loads(result.stdout)
    assert printed == runtime_contract()
    assert result.stdout == json.dumps(printed, separators=(",", ":")).encode() + b"\n"
    assert set(printed["profiles"]) == {"supervised_mcp_polling", "cursor_supervised_room_turn"}
    polling = printed["profiles"]["supervised_mcp_polling"]["tools"]
    turn = printed["profiles"]["cursor_supervised_room_turn"]["tools"]
    assert set(ROOM_TOOLS) <= set(polling) & set(turn)
    assert "register_agent_session" not in polling
    assert ("wait_for_messages" in polling, "wait_for_messages" in turn) == (True, False)


@pytest.mark.parametrize("raw", ["not a url", "localhost:3001", "ftp://room", "http://"])
def test_an_api_url_that_is_not_one_is_refused_naming_the_variable(
    tmp_path: Path, raw: str
) -> None:
    env = {"LETAGENTS_API_URL": raw, "LETAGENTS_STATE_PATH": str(tmp_path / "s.json")}
    with pytest.raises(ConfigError) as caught:
        ServerConfig.from_env(env)
    assert str(caught.value) == (
        f"LETAGENTS_API_URL={raw!r} is not an http(s) URL. Set it to the room API's address,"
        " for example http://localhost:3001 (the default when unset)."
    )


def test_an_unknown_profile_is_refused_listing_the_valid_ones(tmp_path: Path) -> None:
    env = {
        "LETAGENTS_EXECUTION_PROFILE": "typo_profile",
        "LETAGENTS_STATE_PATH": str(tmp_path / "s.json"),
    }
    with pytest.raises(ConfigError) as caught:
        ServerConfig.from_env(env)
    # Issue 44: the Node server's text first, then the valid ones.
    assert str(caught.value) == (
        "Invalid LETAGENTS_EXECUTION_PROFILE: typo_profile. Use one"
        " of: autonomous_mcp_worker, interactive_desktop, supervised_mcp_polling,"
        " supervised_room_turn (unset means autonomous_mcp_worker)."
    )


async def test_the_config_says_where_the_token_came_from(tmp_path: Path) -> None:
    store = LocalStateStore(tmp_path / "s.json")
    env = {"LETAGENTS_STATE_PATH": str(store.path)}
    # The stored sign-in is read for every request, so it is the origin even
    # before anything is stored.
    assert ServerConfig.from_env(env).token_origin == f"auth.token of {store.path}"
    await store.save_auth("stored-owner-token")
    assert ServerConfig.from_env(env).token_origin == f"auth.token of {store.path}"
    assert ServerConfig.from_env({**env, "LETAGENTS_TOKEN": "t"}).token_origin == "LETAGENTS_TOKEN"


@pytest.mark.parametrize(
    ("level", "http_level"), [("INFO", "WARNING"), ("debug", "DEBUG"), ("", "WARNING")]
)
def test_http_request_logs_appear_only_at_debug(
    monkeypatch: pytest.MonkeyPatch, level: str, http_level: str
) -> None:
    http = logging.getLogger(HTTP_LOGGER)
    monkeypatch.setattr(http, "level", http.level)  # restored after the test
    monkeypatch.setattr(logging, "basicConfig", lambda **kwargs: None)
    configure_logging(level)
    assert logging.getLevelName(http.level) == http_level


@pytest.mark.parametrize("level", ["LOUD", "verbose", "5"])
def test_an_unknown_log_level_is_refused_not_taken_for_info(level: str) -> None:
    with pytest.raises(ConfigError) as caught:
        configure_logging(level)
    assert str(caught.value) == (
        f"LETAGENTS_LOG_LEVEL={level!r} is not a log level. Use one of: DEBUG, INFO, WARNING,"
        " ERROR, CRITICAL (unset means INFO)."
    )


def test_read_config_serves_the_default_address_and_names_a_bad_api_url() -> None:
    """Issue 42: our own refusal starts the server anyway, with the problem to answer."""
    from letagents_trio.mcp_server._config import read_config

    config, problem = read_config({"LETAGENTS_API_URL": "not a url"})
    assert config.api_url == "http://localhost:3001"
    assert problem is not None
    assert problem.startswith("LETAGENTS_API_URL='not a url' is not an http(s) URL.")
    assert read_config({"LETAGENTS_API_URL": "http://room:3001/"})[1] is None


def test_read_config_still_raises_what_the_node_server_refuses() -> None:
    """A worker bearer needs an explicit, valid API URL: the Node server exits then."""
    from letagents_trio.mcp_server._config import read_config
    from letagents_trio.mcp_server._profiles import NodeRefusal

    with pytest.raises(NodeRefusal, match="requires an explicit LETAGENTS_API_URL"):
        read_config({"LETAGENTS_API_URL": "not a url", "LETAGENTS_AGENT_SESSION_BEARER": "b"})


def test_building_the_server_leaves_the_programs_logging_alone(tmp_path: Path) -> None:
    """Issue 42: the SDK's server configures the root logger (a rich handler at
    INFO); a host building ours in-process keeps its own logging, configured or not.
    A fresh interpreter, so that nothing (pytest included) configured it before."""
    program = (
        "import logging, pathlib;"
        "from letagents_trio.mcp_server import ServerConfig, create_server;"
        f"tmp = pathlib.Path({str(tmp_path)!r});"
        "create_server(ServerConfig(api_url='http://127.0.0.1:9', token='t',"
        " state_path=tmp / 's.json', chat_storage_settings_path=tmp / 'c.json'));"
        "root = logging.getLogger();"
        "print(root.level, root.handlers)"
    )
    done = subprocess.run(
        [sys.executable, "-c", program], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.split() == [str(logging.WARNING), "[]"], done.stderr
