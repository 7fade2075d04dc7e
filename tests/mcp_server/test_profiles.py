"""Profiles, tool surfaces and whose credential room calls carry (issue 28 rows 1, 3, 4).

The Node sources: ``runtime/execution-profile.ts`` (the four profiles, the
bounded-turns flag), ``runtime/tool-surface-policy.ts`` and
``register-tools.ts`` (what each serves), ``runtime-contract.ts`` (the
contract), ``tools/supervised-room-turn.ts`` (the room turn's two tools),
``runtime/worker-bearer.ts`` (the credential modes and their start-up
refusals), ``runtime/api.ts`` (the bearer on every request),
``runtime/agent-sessions.ts`` (no session headers with a bearer; the
``worker_bearer`` marker; ``requireWorkerAgentSession``) and
``tools/agent-sessions.ts`` (the legacy answer in worker-bearer mode).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import pytest
import trio
from mcp import Client

from letagents_trio.mcp_server import ServerConfig, create_server
from letagents_trio.mcp_server._config import ConfigError
from letagents_trio.mcp_server._main import runtime_contract
from letagents_trio.mcp_server._tools import ROOM_TOOLS, registered_tool_names
from letagents_trio.workers._wire import (
    SUPERVISED_TEXT,
    WORKER_KIND_REQUIRED_TEXT,
    WORKER_SESSION_REQUIRED_TEXT,
)

from .helpers import HTTPS_URL, ROOM, call_error, call_ok, config_for, supervised_config, text_of

if TYPE_CHECKING:
    from letagents_trio.testing import FakeRoom

BEARER: Final = "lasb_the-supervisors-worker-bearer"
MESSAGES: Final = f"/rooms/{ROOM}/messages"
SUPERVISED_CREDENTIAL: Final = (
    "The daemon-supervised worker credential is stale or missing its exact context."
)


def env_for(tmp_path: Path, **variables: str) -> dict[str, str]:
    return {"LETAGENTS_STATE_PATH": str(tmp_path / "s.json"), **variables}


# --- row 3: profiles -----------------------------------------------------------------------


def test_the_default_profile_is_autonomous_mcp_worker(tmp_path: Path) -> None:
    """Node ``execution-profile.ts``: ``configured || "autonomous_mcp_worker"``."""
    assert ServerConfig.from_env(env_for(tmp_path)).profile == "autonomous_mcp_worker"
    assert ServerConfig().profile == "autonomous_mcp_worker"


@pytest.mark.parametrize(
    ("variables", "error"),
    [
        (
            {"LETAGENTS_EXECUTION_PROFILE": "cursor_supervised_room_turn"},
            "LETAGENTS_EXECUTION_PROFILE='cursor_supervised_room_turn' is not a profile",
        ),
        (
            {"LETAGENTS_EXECUTION_PROFILE": "supervised_room_turn"},
            "LETAGENTS_EXECUTION_PROFILE=supervised_room_turn and"
            " LETAGENTS_SUPERVISED_BOUNDED_TURNS=1 must be configured together.",
        ),
        (
            {"LETAGENTS_SUPERVISED_BOUNDED_TURNS": "1"},
            "LETAGENTS_EXECUTION_PROFILE=supervised_room_turn and"
            " LETAGENTS_SUPERVISED_BOUNDED_TURNS=1 must be configured together.",
        ),
    ],
)
def test_profiles_the_node_server_refuses_are_refused(
    tmp_path: Path, variables: dict[str, str], error: str
) -> None:
    """Node ``execution-profile.ts``: four profiles; ``cursor_supervised_room_turn`` is a
    runtime-contract key, not one of them; the room turn and the bounded-turns
    flag go together."""
    with pytest.raises(ConfigError) as caught:
        ServerConfig.from_env(env_for(tmp_path, **variables))
    assert str(caught.value).startswith(error)


def test_the_room_turn_is_accepted_with_its_flag(tmp_path: Path) -> None:
    """Node ``execution-profile.ts``: ``supervised_room_turn`` is a profile (ours refused
    it); ``worker-bearer.ts``: without a bearer its mode is ``supervised``."""
    env = env_for(
        tmp_path,
        LETAGENTS_EXECUTION_PROFILE="supervised_room_turn",
        LETAGENTS_SUPERVISED_BOUNDED_TURNS="1",
        LETAGENTS_API_URL="https://room.example",
    )
    config = ServerConfig.from_env(env)
    assert (config.profile, config.mode, config.owner_mode) == (
        "supervised_room_turn",
        "supervised",
        False,
    )


def test_a_config_built_in_code_refuses_an_unknown_profile() -> None:
    """Node ``runtime/execution-profile.ts``: ``executionProfile`` takes only a value of
    its ``EXECUTION_PROFILES`` list and throws on any other. A ``ServerConfig`` built in
    code (no environment read) accepted any profile string; it refuses one as the
    environment's reading does."""
    with pytest.raises(ConfigError):
        ServerConfig(profile="cursor_supervised_room_turn")


def test_each_profile_serves_its_surface() -> None:
    """Node ``tool-surface-policy.ts`` and ``register-tools.ts`` (asserted by
    ``execution-profile-tools.test.ts``): the room turn serves no ``wait_for_messages``
    and no session tools, but ``set_reply_thread``, and ``complete_room_turn`` for
    Cursor only; polling is the room turn (Codex) less ``set_reply_thread`` plus
    ``wait_for_messages``."""
    turn_codex = registered_tool_names("supervised_room_turn", "codex")
    turn_cursor = registered_tool_names("supervised_room_turn", "cursor")
    polling = registered_tool_names("supervised_mcp_polling", "codex")
    assert "wait_for_messages" not in turn_codex
    assert "register_agent_session" not in turn_codex
    assert "set_reply_thread" in turn_codex
    assert sorted([*turn_codex, "complete_room_turn"]) == turn_cursor
    for provider in ("codex", "claude-code", "open-model", None):
        assert "complete_room_turn" not in registered_tool_names("supervised_room_turn", provider)
    assert polling == sorted(
        [n for n in turn_codex if n != "set_reply_thread"] + ["wait_for_messages"]
    )
    for profile in ("autonomous_mcp_worker", "interactive_desktop", "supervised_mcp_polling"):
        assert "set_reply_thread" not in registered_tool_names(profile, "cursor")
        assert "complete_room_turn" not in registered_tool_names(profile, "cursor")
    assert registered_tool_names("autonomous_mcp_worker") == registered_tool_names(
        "interactive_desktop"
    )


def test_the_runtime_contract_is_derived_from_the_registration_path() -> None:
    """Node ``runtime-contract.ts``: ``supervised_mcp_polling`` with provider ``codex``,
    and the key ``cursor_supervised_room_turn`` for the room turn under ``cursor``."""
    room = sorted(ROOM_TOOLS)
    assert runtime_contract() == {
        "format": 1,
        "profiles": {
            "supervised_mcp_polling": {
                "contract": "custodial_polling_v1",
                "tools": sorted([*room, "wait_for_messages"]),
            },
            "cursor_supervised_room_turn": {
                "tools": sorted([*room, "complete_room_turn", "set_reply_thread"])
            },
        },
    }


async def test_the_room_turns_tools_answer_as_the_node_servers(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    """Node ``tools/supervised-room-turn.ts``: ``complete_room_turn`` checks its proposal
    and answers ``accepted``; ``set_reply_thread`` refuses without the daemon's turn;
    neither asks the room."""
    config = supervised_config(fake_room, tmp_path, "supervised_room_turn", provider="cursor")
    with trio.fail_after(10):
        async with Client(create_server(config, transport=fake_room.transport)) as client:
            accepted = await client.call_tool(
                "complete_room_turn", {"outcome": "reply", "text": "  Done.  "}
            )
            assert not accepted.is_error
            refusals = [
                await call_error(client, "complete_room_turn", {"outcome": "reply"}),
                await call_error(
                    client, "complete_room_turn", {"outcome": "reply", "text": "x" * 32769}
                ),
                await call_error(
                    client, "complete_room_turn", {"outcome": "no_reply", "text": "hi"}
                ),
                await call_error(client, "set_reply_thread", {}),
            ]
            quiet = await call_ok(client, "complete_room_turn", {"outcome": "no_reply"})
    payload = json.loads(text_of(accepted))
    assert payload == {
        "accepted": True,
        "outcome": "reply",
        "instruction": "The daemon recorded this exact turn completion. End the provider turn"
        " without sending the activating reply through another tool.",
    }
    assert accepted.structured_content == payload
    assert text_of(accepted).startswith('{"accepted":true')  # compact, as every answer
    assert refusals == [
        "complete_room_turn requires non-empty text when outcome is reply.",
        "complete_room_turn reply exceeds the 32 KiB public-message limit.",
        "complete_room_turn must omit text when outcome is no_reply.",
        "set_reply_thread requires the active daemon-owned room turn.",
    ]
    assert quiet["outcome"] == "no_reply"
    assert fake_room.requests == []


# --- row 1: the worker bearer ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("variables", "error"),
    [
        (
            {"LETAGENTS_API_URL": "https://room.example", "LETAGENTS_TOKEN": "owner-token"},
            "Worker bearer mode refuses LETAGENTS_TOKEN. Remove the owner token from this"
            " process before starting the worker.",
        ),
        ({}, "Worker bearer mode requires an explicit LETAGENTS_API_URL."),
        (
            {"LETAGENTS_API_URL": "http://room.example"},
            "Worker bearer mode requires HTTPS unless LETAGENTS_API_URL uses an exact loopback"
            " host.",
        ),
        (
            {
                "LETAGENTS_API_URL": "https://room.example",
                "LETAGENTS_EXECUTION_PROFILE": "supervised_mcp_polling",
            },
            "Custodial polling refuses environment credentials; borrow exact daemon worker"
            " authority.",
        ),
        (
            {
                "LETAGENTS_API_URL": "https://room.example",
                "LETAGENTS_EXECUTION_PROFILE": "supervised_room_turn",
                "LETAGENTS_SUPERVISED_BOUNDED_TURNS": "1",
            },
            "Daemon-supervised bounded turns refuse LETAGENTS_AGENT_SESSION_BEARER;"
            " credentials must be borrowed from the exact supervisor generation.",
        ),
    ],
)
def test_a_worker_bearer_the_node_server_refuses_at_start_is_refused(
    tmp_path: Path, variables: dict[str, str], error: str
) -> None:
    """Node ``worker-bearer.ts`` (``getWorkerBearerRuntime``, checked at start by
    ``server.ts``): bearer plus ``LETAGENTS_TOKEN`` and the rest; ours started."""
    env = env_for(tmp_path, LETAGENTS_AGENT_SESSION_BEARER=BEARER, **variables)
    with pytest.raises(ConfigError) as caught:
        ServerConfig.from_env(env)
    assert str(caught.value) == error
    assert BEARER not in str(caught.value)


@pytest.mark.parametrize(
    "url", ["https://room.example", "http://127.0.0.1:3001", "http://localhost"]
)
def test_a_worker_bearer_with_an_explicit_safe_url_starts(tmp_path: Path, url: str) -> None:
    """Node ``worker-bearer.ts``: an explicit HTTPS URL, or HTTP on an exact loopback host."""
    config = ServerConfig.from_env(
        env_for(tmp_path, LETAGENTS_AGENT_SESSION_BEARER=BEARER, LETAGENTS_API_URL=url)
    )
    assert (config.mode, config.owner_mode) == ("worker", False)
    assert BEARER not in repr(config)


async def test_a_worker_bearer_is_the_only_credential_room_tools_send(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    """Node ``runtime/api.ts`` (``Authorization: Bearer <bearer>`` on every request) and
    ``runtime/agent-sessions.ts`` (no session headers nor body credentials with a
    bearer): room tools sent the owner token from the state file (or nothing).
    The legacy registration answers the ``worker_bearer`` marker without a request
    (``tools/agent-sessions.ts``); the durable one is refused (PROTOCOL §5.2.4)."""
    # The reference room mints no bearers: these rules answer as a room that took it.
    fake_room.on("POST", MESSAGES).respond(201, {"id": "msg_1", "text": "hi"}, times=2)
    fake_room.on("GET", MESSAGES).respond(200, {"messages": [], "room_id": ROOM})
    config = config_for(fake_room, tmp_path, token=None, worker_bearer=BEARER, api_url=HTTPS_URL)
    with trio.fail_after(10):
        async with Client(create_server(config, transport=fake_room.transport)) as client:
            legacy = await client.call_tool("register_agent_session", {"room_id": ROOM})
            durable = await call_error(
                client, "register_agent_session", {"room_id": ROOM, "registration_key": "k"}
            )
            assert fake_room.requests == []
            await call_ok(client, "send_message", {"room_id": ROOM, "text": "hi"})
            await call_ok(
                client,
                "send_message",
                {"room_id": ROOM, "text": "hi", "agent_session_id": "worker_bearer"},
            )
            await call_ok(client, "read_messages", {"room_id": ROOM})
    answer: dict[str, Any] = json.loads(text_of(legacy))
    assert text_of(legacy).startswith('{"success":true,"worker_bearer_mode":true')
    assert answer["agent_session_id"] == answer["agent_session"]["session_id"] == "worker_bearer"
    assert answer["use_agent_session_id"] == (
        "This local worker-bearer session marker may be passed to room tools. The supplied"
        " bearer remains the only server credential."
    )
    assert answer["agent_session"]["room_id"] == ROOM
    assert answer["agent_session"]["agent_key"].startswith("instance:")
    assert durable == SUPERVISED_TEXT
    seen = [
        (r.method, r.path, r.bearer, r.session_id, r.has_session_token, r.body)
        for r in fake_room.requests
    ]
    assert seen == [
        ("POST", MESSAGES, BEARER, None, False, {"text": "hi"}),
        ("POST", MESSAGES, BEARER, None, False, {"text": "hi"}),
        ("GET", MESSAGES, BEARER, None, False, None),
    ]
    assert not (tmp_path / "mcp-state.json").exists()
    assert fake_room.process_requests() == []


async def test_supervised_mode_sends_nothing_without_its_supervisors_bridge(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    """Node ``runtime/api.ts``: in a supervised profile without a bearer every request
    borrows its credential from the desktop daemon; with no supervisor context the
    call fails (``SupervisedWorkerCredentialError``). This server has no bridge."""
    config = supervised_config(fake_room, tmp_path, "supervised_mcp_polling")
    with trio.fail_after(10):
        async with Client(create_server(config, transport=fake_room.transport)) as client:
            for tool in ("read_messages", "send_message", "get_room_guidelines"):
                arguments: dict[str, Any] = {"room_id": ROOM, "text": "x"}
                if tool != "send_message":
                    del arguments["text"]
                assert await call_error(client, tool, arguments) == SUPERVISED_CREDENTIAL
    assert fake_room.requests == []


# --- row 4: send_message is a write ----------------------------------------------------------


async def test_send_message_without_a_session_is_refused_in_a_hosted_room(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    """Node ``tools/messages/send-tool.ts`` resolves the sender with
    ``requireWorkerAgentSession`` (``runtime/agent-sessions.ts``): no session, or a
    controller's, is refused before anything is sent. Ours let the owner post."""
    await fake_room.add_worker()  # the room exists
    with trio.fail_after(10):
        server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
        async with Client(server) as client:
            alone = await call_error(client, "send_message", {"room_id": ROOM, "text": "hi"})
            mark = len(fake_room.requests)
            controller = await call_ok(
                client, "register_agent_session", {"room_id": ROOM, "session_kind": "controller"}
            )
            as_controller = await call_error(
                client,
                "send_message",
                {"agent_session_id": controller["agent_session_id"], "text": "hi"},
            )
    assert (alone, as_controller) == (WORKER_SESSION_REQUIRED_TEXT, WORKER_KIND_REQUIRED_TEXT)
    # Issue 42: the advice names the handle register_agent_session returns.
    assert "then pass the returned worker_id" in alone
    assert fake_room.requests_to("POST", MESSAGES) == []
    assert len(fake_room.requests) > mark  # the controller did register
