"""The facade's rules at their edges (``_facade.py``): who a call acts as, and its result.

* With a worker bearer, a call acts as the bearer's marker session only when
  it names neither a worker nor another session: a ``worker_id`` or an
  ``agent_session_id`` this server does not hold is refused, nothing sent.
* A local room's long wait looks again, every 0.25 s, whether the worker it
  waits as is still this server's: named by its session's id (the legacy
  argument), or beside a blank ``agent_session_id`` (or the other way round),
  it waits its whole timeout.
* A result is compact JSON with its text as written (no ``\\u`` escapes), and a
  credential that reaches a result (an owner token pasted into a message) is
  replaced and reported on the server's log.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Final

import pytest
import trio
import trio.testing
from mcp import Client

from letagents_trio.mcp_server import create_server

from .helpers import HTTPS_URL, ROOM, call_error, call_ok, config_for, register, text_of
from .test_local_rooms import LOCAL_ROOM, local_server

if TYPE_CHECKING:
    from pathlib import Path

    from letagents_trio.testing import FakeRoom

BEARER: Final = "lasb_a-supervisors-worker-bearer"
GUARD_LOG: Final = "a tool result carried a credential; it was redacted"


@pytest.mark.parametrize(
    "named", [{"worker_id": "worker_" + "0" * 32}, {"agent_session_id": "ses_not_held"}]
)
async def test_a_worker_bearer_call_naming_someone_else_is_not_the_markers(
    fake_room: FakeRoom, tmp_path: Path, named: dict[str, str]
) -> None:
    config = config_for(fake_room, tmp_path, token=None, worker_bearer=BEARER, api_url=HTTPS_URL)
    with trio.fail_after(10):
        async with Client(create_server(config, transport=fake_room.transport)) as client:
            await call_error(client, "send_message", {"room_id": ROOM, "text": "hi", **named})
    assert fake_room.requests == []


@pytest.mark.parametrize(
    "how", ["worker's session", "worker, blank session", "session, blank worker"]
)
async def test_a_local_wait_as_a_held_session_lasts_its_whole_timeout(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path, how: str
) -> None:
    """The wait as a worker, named by its handle, by its session's id (the legacy
    argument), or by both with the other one blank."""
    server = local_server(fake_room, tmp_path)
    with trio.fail_after(100):
        async with Client(server, mode="legacy") as client:
            worker = await register(client, "k1", "Juniper", room=LOCAL_ROOM)
            worker_id, session_id = worker["worker_id"], worker["agent_session"]["session_id"]
            who = {
                "worker's session": {"agent_session_id": session_id},
                "worker, blank session": {"worker_id": worker_id, "agent_session_id": "  "},
                "session, blank worker": {"worker_id": " ", "agent_session_id": session_id},
            }[how]
            sent = await call_ok(client, "send_message", {**who, "text": "first"})
            start = trio.current_time()
            args = {**who, "after_message_id": sent["id"], "timeout": 2_000}
            waited = await call_ok(client, "wait_for_messages", args)
            assert trio.current_time() - start == 2.0
    assert waited["messages"] == []


async def test_a_result_is_compact_json_with_its_text_as_written(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
    with trio.fail_after(30):
        async with Client(server, mode="legacy") as client:
            worker_id = (await register(client))["worker_id"]
            await call_ok(client, "send_message", {"worker_id": worker_id, "text": "héllo ✓"})
            read = await client.call_tool("read_messages", {"worker_id": worker_id})
    assert '"text":"héllo ✓"' in text_of(read)
    assert [m["text"] for m in json.loads(text_of(read))["messages"]] == ["héllo ✓"]


async def test_a_credential_in_a_result_is_replaced_and_logged(
    autojump_clock: trio.testing.MockClock,
    fake_room: FakeRoom,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
    caplog.set_level(logging.INFO, logger="letagents_trio.mcp_server")
    with trio.fail_after(30):
        async with Client(server, mode="legacy") as client:
            worker_id = (await register(client))["worker_id"]
            text = f"the token is {fake_room.owner_token}"
            await call_ok(client, "send_message", {"worker_id": worker_id, "text": "clean"})
            clean = [r for r in caplog.records if r.levelno >= logging.ERROR]
            await call_ok(client, "send_message", {"worker_id": worker_id, "text": text})
            read = await client.call_tool("read_messages", {"worker_id": worker_id})
    assert clean == []
    assert fake_room.owner_token not in text_of(read)
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert GUARD_LOG in errors
