"""PROTOCOL §8.2 and §8.3 scenarios through the in-memory client, against a FakeRoom.

The stdio tests (``test_stdio_*.py``) run the scenarios that need real
processes; these need only the tools' behaviour, so they run in memory: a
"second MCP process" is a second server on the same state file, with its own
pins. Faults are FakeRoom rules. Real clock (the holders' streams are live),
every test bounded.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Final

import trio
from mcp import Client

from letagents_trio.mcp_server import create_server
from letagents_trio.testing import ProcessMode
from letagents_trio.workers import LocalStateStore
from letagents_trio.workers._wire import (
    AMBIGUOUS_ROOM_TEXT,
    RECOVER_ARGUMENTS_TEXT,
    SUPERVISED_TEXT,
    UNKNOWN_WORKER_TEXT,
)

from .helpers import HTTPS_URL, ROOM, call_error, call_ok, config_for, register

if TYPE_CHECKING:
    from pathlib import Path

    from letagents_trio.mcp_server import LetAgentsMCPServer
    from letagents_trio.testing import FakeRoom

OTHER_ROOM: Final = "room_other"
REGISTRATIONS: Final = f"/rooms/{ROOM}/agent-sessions"


def server(fake_room: FakeRoom, tmp_path: Path) -> LetAgentsMCPServer:
    """One MCP server "process" on the state files under ``tmp_path``."""
    return create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)


def recover(name: str | None, **extra: Any) -> dict[str, Any]:
    """The arguments of a recovery by ``name`` in :data:`ROOM`."""
    args: dict[str, Any] = {"room_id": ROOM, "recover_lost_worker": True, **extra}
    if name is not None:
        args["display_name"] = name
    return args


async def test_recovery_needs_a_name_and_no_handle(fake_room: FakeRoom, tmp_path: Path) -> None:
    """§8.2.5: recovering with a registration_key, a worker_id, or without a display_name
    fails with the §5.2 text; nothing is registered."""
    with trio.fail_after(10):
        async with Client(server(fake_room, tmp_path), mode="legacy") as client:
            a = await register(client, "K1", "Juniper")
            for args in (
                recover("Juniper", registration_key="K1"),
                recover("Juniper", worker_id=a["worker_id"]),
                recover(None),
                recover("   "),
            ):
                error = await call_error(client, "register_agent_session", args)
                assert error == RECOVER_ARGUMENTS_TEXT, args
    assert len(fake_room.requests_to("POST", REGISTRATIONS)) == 1


async def test_recovery_by_name_across_workers_and_processes(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    """§8.2.7-10, with the process routes answering 404 as §8.2's fake room does."""
    fake_room.set_process_mode(ProcessMode.UNKNOWN)
    with trio.fail_after(20):
        async with Client(server(fake_room, tmp_path), mode="legacy") as first:
            a = await register(first, "K1", "Juniper")
            # 7. The room allows a duplicate name once: a third worker lives as "Juniper"
            # too. Recovery cannot tell them apart and names neither handle.
            fake_room.on("POST", REGISTRATIONS).rewrite(
                lambda answer: {**answer, "display_name": "Juniper"}
            )
            c = await register(first, "K3", "Juniper")
            assert c["agent_session"]["display_name"] == "Juniper"
            error = await call_error(first, "register_agent_session", recover("Juniper"))
            assert "more than one" in error
            assert a["worker_id"] not in error
            assert c["worker_id"] not in error
            await call_ok(first, "disconnect_agent_session", {"worker_id": c["worker_id"]})
            # 8. Its own name, no name, or K1 again: no notice, and K1 is A.
            cedar = await register(first, "K4", "Cedar")
            nameless = await register(first, "K5", None)
            again = await register(first, "K1", "Juniper")
            for result in (cedar, nameless, again):
                assert "name_notice" not in result, result
            assert again["worker_id"] == a["worker_id"]
            # ...and with C disconnected, "Juniper" is A's alone again.
            recovered = await call_ok(first, "register_agent_session", recover("Juniper"))
            assert recovered["worker_id"] == a["worker_id"]
            # 9. A second process holds nothing: no notice, nothing to recover.
            async with Client(server(fake_room, tmp_path), mode="legacy") as second:
                other = await register(second, "K6", "Juniper")
                assert "name_notice" not in other
                error = await call_error(second, "register_agent_session", recover("Cedar"))
                assert "no worker named" in error
            # 10. Cedar disconnected in the first process: no longer recoverable.
            await call_ok(first, "disconnect_agent_session", {"worker_id": cedar["worker_id"]})
            error = await call_error(first, "register_agent_session", recover("Cedar"))
            assert "no worker named" in error


async def test_a_refused_send_keeps_the_owner_signed_in(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    """§8.3.9: a send answered 401 fails, the owner's stored sign-in survives (the request
    carried worker credentials), and the worker goes on reading and sending."""
    store = LocalStateStore(tmp_path / "mcp-state.json")
    await store.save_auth(fake_room.owner_token)
    with trio.fail_after(10):
        async with Client(server(fake_room, tmp_path), mode="legacy") as client:
            worker_id = (await register(client, "K1", "Juniper"))["worker_id"]
            fake_room.on("POST", f"/rooms/{ROOM}/messages").respond(
                401, {"error": "Invalid agent session credentials."}
            )
            error = await call_error(client, "send_message", {"worker_id": worker_id, "text": "x"})
            assert error.startswith("API error 401: ")
            auth = store.auth()
            assert auth is not None
            assert auth.token == fake_room.owner_token
            await call_ok(client, "read_messages", {"worker_id": worker_id})
            await call_ok(client, "send_message", {"worker_id": worker_id, "text": "still here"})


async def test_a_lost_registration_answer_is_finished_by_the_retry(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    """§8.3.12: the room stores a registration whose answer is lost; the create fails, its
    retry succeeds with no extra session (3 in all); a worker in two rooms must name one;
    an unknown worker_<0 x 32> fails."""
    with trio.fail_after(10):
        async with Client(server(fake_room, tmp_path), mode="legacy") as client:
            await register(client, "K1", "Juniper")
            await register(client, "K2", "Cedar")
            fake_room.on("POST", REGISTRATIONS).drop_after_commit()
            create = {"room_id": ROOM, "registration_key": "K3", "display_name": "Rowan"}
            await call_error(client, "register_agent_session", create)
            rowan = await call_ok(client, "register_agent_session", create)
            assert len(fake_room.room.store.room_sessions(ROOM)) == 3
            worker_id = rowan["worker_id"]
            args = {"worker_id": worker_id, "room_id": OTHER_ROOM}
            await call_ok(client, "register_agent_session", args)
            error = await call_error(client, "send_message", {"worker_id": worker_id, "text": "x"})
            assert error == AMBIGUOUS_ROOM_TEXT
            args = {"worker_id": worker_id, "room_id": OTHER_ROOM, "text": "there"}
            sent = await call_ok(client, "send_message", args)
            assert sent["room_id"] == OTHER_ROOM
            unknown = "worker_" + "0" * 32
            # Issue 29: upstream's text, why, and the tool and argument that register one.
            unknown_text = (
                f"{UNKNOWN_WORKER_TEXT} No worker {unknown} is stored in this state file. To"
                " create a worker for this chat, call register_agent_session with a new"
                " registration_key; to resume one, pass a worker_id that register_agent_session"
                " returned for this account and API."
            )
            args = {"worker_id": unknown, "room_id": ROOM}
            assert await call_error(client, "register_agent_session", args) == unknown_text
            args = {"worker_id": unknown, "text": "x"}
            assert await call_error(client, "send_message", args) == unknown_text


async def test_register_keeps_its_own_worker_id(fake_room: FakeRoom, tmp_path: Path) -> None:
    """§8.3.2 on our tools: the facade adds worker_id to room tools (those taking
    room_id), and not to register_agent_session, whose worker_id is its own resume handle."""
    with trio.fail_after(10):
        async with Client(server(fake_room, tmp_path), mode="legacy") as client:
            tools = {tool.name: tool for tool in (await client.list_tools()).tools}
    facade = tools["send_message"].input_schema["properties"]["worker_id"]
    own = tools["register_agent_session"].input_schema["properties"]["worker_id"]
    assert own["description"] != facade["description"]
    assert "resume" in own["description"]
    for name, tool in tools.items():
        properties = tool.input_schema["properties"]
        if name != "register_agent_session" and "room_id" in properties:
            assert properties["worker_id"] == facade, name


async def test_the_configs_labels_reach_the_registration(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    """LETAGENTS_RUNTIME and LETAGENTS_IDE, read by ServerConfig.from_env only, are what
    the worker handles send."""
    config = config_for(fake_room, tmp_path, runtime_label="codex", ide_label="Claude Code")
    with trio.fail_after(10):
        async with Client(
            create_server(config, transport=fake_room.transport), mode="legacy"
        ) as client:
            await register(client)
    (sent,) = fake_room.requests_to("POST", REGISTRATIONS)
    assert (sent.body["runtime"], sent.body["ide_label"]) == ("codex", "Claude Code")
    liveness = sent.body["registration_liveness"]
    assert liveness["liveness_capability"] == "codex_app_server_runtime_stream"


async def test_without_owner_mode_worker_handles_are_refused(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    """§4.1: under a supervisor's bearer (owner_mode off) nothing is registered or held."""
    config = config_for(
        fake_room, tmp_path, token=None, worker_bearer="lasb_test_bearer", api_url=HTTPS_URL
    )
    with trio.fail_after(10):
        async with Client(
            create_server(config, transport=fake_room.transport), mode="legacy"
        ) as client:
            args = {"room_id": ROOM, "registration_key": "k1"}
            assert await call_error(client, "register_agent_session", args) == SUPERVISED_TEXT
    assert fake_room.requests_to("POST", REGISTRATIONS) == []
