"""PROTOCOL §8.2 (worker-name-recovery-stdio): names, recovery and ended sessions over stdio.

The real server as a subprocess (the SDK's stdio client) against the
reference room on loopback whose process routes answer 404, as §8.2's fake
room does. The reference room never gives a held name twice (it hands out a
codename instead of §8.2's ``Substitute<n>``), and adopts an ended session's
task leases on its next registration, so scenarios 6 and 12 run on the
room's own rules.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

import httpx2
import pytest
import trio
from mcp import Client

from letagents_trio import _protocol
from letagents_trio.testing import ProcessMode
from letagents_trio.workers import LocalStateStore

from ..mcp_server.helpers import ROOM, call_error, call_ok, register
from .mcp_loopback import (
    BUDGET,
    OWNER_TOKEN,
    PERSON_TOKEN,
    open_loopback_room,
    server_env,
    stdio_params,
)

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX pipes")


def recover(name: str) -> dict[str, Any]:
    """The arguments of a recovery by name in :data:`ROOM`."""
    return {"room_id": ROOM, "display_name": name, "recover_lost_worker": True}


async def take_work_lease(base_url: str, store: LocalStateStore, session_id: str) -> str:
    """Create a task, accept it as the room's admin, and claim it (which takes its work
    lease) as ``session_id``; return the task id.

    Cancellation:
        A checkpoint; cancelled, the task may exist unclaimed.
    """
    session = store.stored_session(session_id)
    assert session is not None
    owner = {"Authorization": f"Bearer {OWNER_TOKEN}"}
    worker = {
        **owner,
        _protocol.SESSION_ID_HEADER: session.session_id,
        _protocol.SESSION_TOKEN_HEADER: session.session_token,
    }
    async with httpx2.AsyncClient(base_url=base_url) as http:
        task = await http.post(f"/rooms/{ROOM}/tasks", json={"title": "the work"}, headers=worker)
        assert task.status_code == 201, task.text
        task_id: str = task.json()["id"]
        path = f"/rooms/{ROOM}/tasks/{task_id}"
        person = {"Authorization": f"Bearer {PERSON_TOKEN}"}  # the room's admin, signed in
        accepted = await http.patch(path, json={"status": "accepted"}, headers=person)
        assert accepted.status_code == 200, accepted.text
        claim = {"status": "assigned", "assignee": session.extra["actor_label"]}
        claimed = await http.patch(path, json=claim, headers=worker)
        assert claimed.status_code == 200, claimed.text
    return task_id


async def test_name_notice_recovery_and_ended_sessions(tmp_path: Path) -> None:
    """§8.2.1-4, 6, 11-13 in one server process, in the order the test file runs them."""
    store = LocalStateStore(tmp_path / "mcp-state.json")
    with trio.fail_after(BUDGET):
        async with open_loopback_room() as room:
            room.fake.set_process_mode(ProcessMode.UNKNOWN)
            async with Client(stdio_params(server_env(room, tmp_path)), mode="legacy") as client:
                # 1. A first worker under its own name: no notice.
                a = await register(client, "K1", "Juniper")
                a_sid = a["agent_session"]["session_id"]
                assert "name_notice" not in a
                # 2. A new key asking for the same name: a new worker, a notice that
                # mentions recovery and never A's handle.
                b = await register(client, "K2", "juniper")
                assert b["worker_id"] != a["worker_id"]
                assert "recover_lost_worker" in b["name_notice"]
                assert a["worker_id"] not in json.dumps(b)
                b_name = b["agent_session"]["display_name"]
                assert b_name.lower() != "juniper"  # the room never gives a held name twice
                # 3. Recovering "Juniper" resumes A once the room confirms it (one registration
                # in the lost-answer form that changes nothing), and it can send.
                count = len(room.registrations)
                recovered = await call_ok(client, "register_agent_session", recover("Juniper"))
                assert recovered["worker_id"] == a["worker_id"]
                assert recovered["agent_session"]["session_id"] == a_sid
                assert recovered["agent_session"]["display_name"] == "Juniper"
                assert len(room.registrations) == count + 1
                await call_ok(client, "send_message", {"worker_id": a["worker_id"], "text": "hi"})
                # 4. Nobody by that name.
                assert "no worker named" in await call_error(
                    client, "register_agent_session", recover("Nobody")
                )
                # 6. Recovery matches the name the worker lives under.
                by_given = await call_ok(client, "register_agent_session", recover(b_name))
                assert by_given["worker_id"] == b["worker_id"]
                # 11. The room ends A (holding a work lease); the next send learns it.
                task_id = await take_work_lease(room.url, store, a_sid)
                room.room.end_session(a_sid)
                error = await call_error(
                    client, "send_message", {"worker_id": a["worker_id"], "text": "late"}
                )
                assert "register_agent_session" in error
                ended = store.stored_session(a_sid)
                assert ended is not None
                assert ended.ended_at
                # 12. Reconnecting registers again and hands back the adopted lease once.
                count = len(room.registrations)
                again = await call_ok(
                    client,
                    "register_agent_session",
                    {"worker_id": a["worker_id"], "room_id": ROOM},
                )
                assert len(room.registrations) == count + 1
                assert again["worker_id"] == a["worker_id"]
                assert f"{task_id} (work)" in again["resumed_work"]
                assert "adopted_task_leases" not in (tmp_path / "mcp-state.json").read_text()
                await call_ok(client, "send_message", {"worker_id": a["worker_id"], "text": "back"})
                # 13. A 403 with the ended advice, or a 401 with other text, fails the
                # send and leaves the stored session live.
                rowan = await register(client, "K3", "Rowan")
                r_sid = rowan["agent_session"]["session_id"]
                for status, text in (
                    (403, _protocol.AGENT_SESSION_ENDED_ADVICE),
                    (401, "Invalid agent session credentials."),
                ):
                    room.message_refusals[r_sid] = (status, {"error": text})
                    refused = await call_error(
                        client, "send_message", {"worker_id": rowan["worker_id"], "text": "x"}
                    )
                    assert refused.startswith(f"API error {status}: "), refused
                    stored = store.stored_session(r_sid)
                    assert stored is not None
                    assert not stored.ended_at, status
