"""Issue 40's "done when": three chats run a governed room's loop over stdio, against
``letagents-trio room``.

Three ``letagents-trio mcp`` processes (chats A, B and C, each with its own
state file), driven by the official MCP SDK's stdio client, and a real
``letagents-trio room`` process (the memory store, then a SQLite file). The
room's admin (chat A's owner, calling without a worker) sets
``intent_required`` and makes B the Board Manager. A registers a create
intent, B approves it and the task exists without any ``add_task``; A
registers a claim intent, B approves it, and A holds the task and its work
lease; A completes it with a PR link; C claims its review, publishes an
artifact and submits a verdict; A reads the artifacts and the events. A
denied intent and an ``add_task`` without approval are refused with the
room's error. Each chat's readiness resource lists exactly what its
``tools/list`` serves.

Real clock and real processes, bounded (:data:`BUDGET`); the steps are logged
(``letagents_trio.tests.governed_room``).
"""

from __future__ import annotations

import json
import logging
import sys
from typing import TYPE_CHECKING, Any, Final

import pytest
import trio
from mcp import Client
from mcp_types import TextResourceContents

from letagents_trio.mcp_server import READINESS_URI

from ..mcp_server.helpers import ROOM, call_error, call_ok
from .room_process import errors_in, running_room
from .test_mcp_worker_loop import chat

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX pipes")

logger = logging.getLogger("letagents_trio.tests.governed_room")

# Three server processes and a room start, register and run about thirty calls.
BUDGET: Final = 90
PR_URL: Final = "https://github.com/letagents/letagents-trio/pull/40"
HEAD: Final = "4f0c3a1d2e5b6a7980c1d2e3f4a5b6c7d8e9f012"
APPROVAL_REQUIRED: Final = "Board Manager approval is required for this board action."


async def tool(client: Client, name: str, who: str, **arguments: Any) -> dict[str, Any]:
    """Call a tool that must succeed, logging who called what."""
    result = await call_ok(client, name, arguments)
    logger.info("%s %s %s", who, name, {k: v for k, v in arguments.items() if k != "worker_id"})
    return result


async def join(client: Client, key: str, name: str) -> tuple[str, str]:
    """Register the chat's worker: its worker id and its session id."""
    registered = await call_ok(
        client,
        "register_agent_session",
        {"room_id": ROOM, "registration_key": key, "display_name": name},
    )
    return registered["worker_id"], registered["agent_session"]["session_id"]


async def served_exactly_what_readiness_lists(client: Client) -> None:
    listed = sorted(t.name for t in (await client.list_tools()).tools)
    (content,) = (await client.read_resource(READINESS_URI)).contents
    assert isinstance(content, TextResourceContents)
    assert json.loads(content.text)["tools"] == listed


@pytest.mark.parametrize("store", ["memory", "sqlite"])
async def test_three_chats_run_a_governed_rooms_loop_over_stdio(tmp_path: Path, store: str) -> None:
    db = tmp_path / "room.sqlite3" if store == "sqlite" else None
    with trio.fail_after(BUDGET):
        async with running_room("--log-level", "WARNING", db=db) as room:
            async with (
                Client(chat(room.url, tmp_path / "a"), mode="legacy") as a,
                Client(chat(room.url, tmp_path / "b"), mode="legacy") as b,
                Client(chat(room.url, tmp_path / "c"), mode="legacy") as c,
            ):
                wa, _ = await join(a, "chat-a", "Alder")
                wb, session_b = await join(b, "chat-b", "Birch")
                wc, _ = await join(c, "chat-c", "Cedar")
                for client in (a, b, c):
                    await served_exactly_what_readiness_lists(client)
                # The room's admin (A's owner, as a person: no worker) governs the board.
                mode = await tool(
                    a,
                    "set_board_manager_mode",
                    "admin",
                    room_id=ROOM,
                    manager_mode="intent_required",
                )
                assert mode["settings"]["manager_mode"] == "intent_required"
                manager = await tool(
                    a, "assign_board_manager", "admin", room_id=ROOM, agent_session_id=session_b
                )
                assert manager["manager"]["agent_session_id"] == session_b
                # add_task without approval: the room's refusal.
                refused = await call_error(a, "add_task", {"worker_id": wa, "title": "Fix CI"})
                assert refused.startswith("API error 409: ")
                assert APPROVAL_REQUIRED in refused
                # A create intent, approved by B: the task exists, no add_task.
                create = await tool(
                    a, "register_task_create_intent", "A", worker_id=wa, title="Fix CI"
                )
                pending = await tool(b, "list_board_intents", "B", worker_id=wb, status="pending")
                assert [i["id"] for i in pending["intents"]] == [create["intent"]["id"]]
                approved = await tool(
                    b, "approve_board_intent", "B", worker_id=wb, intent_id=create["intent"]["id"]
                )
                assert approved["result"]["kind"] == "task_created"
                task_id = approved["result"]["task"]["id"]
                board = await tool(a, "get_board", "A", worker_id=wa)
                assert [(t["id"], t["title"], t["status"]) for t in board["tasks"]] == [
                    (task_id, "Fix CI", "accepted")
                ]
                # A denied intent is refused when used.
                other = await tool(
                    a, "register_task_create_intent", "A", worker_id=wa, title="Rewrite it all"
                )
                denied_id = other["intent"]["id"]
                denied = await tool(
                    b, "deny_board_intent", "B", worker_id=wb, intent_id=denied_id, reason="no"
                )
                assert denied["intent"]["status"] == "denied"
                refused = await call_error(
                    a,
                    "add_task",
                    {"worker_id": wa, "title": "Rewrite it all", "board_intent_id": denied_id},
                )
                assert f"Board intent {denied_id} is denied, not approved." in refused
                # A claim intent, approved by B: A holds the task and its work lease.
                claim = await tool(
                    a, "register_task_claim_intent", "A", worker_id=wa, task_id=task_id
                )
                claimed = await tool(
                    b, "approve_board_intent", "B", worker_id=wb, intent_id=claim["intent"]["id"]
                )
                assert claimed["result"]["kind"] == "task_claimed"
                assert claimed["result"]["requires_follow_up"] is False
                (held,) = (await tool(a, "get_board", "A", worker_id=wa))["tasks"]
                (lease,) = held["active_leases"]
                assert held["status"] == "assigned"
                assert (lease["kind"], lease["actor_label"]) == ("work", held["assignee"])
                # A works it and completes it with a PR link.
                await tool(
                    a, "update_task", "A", worker_id=wa, task_id=task_id, status="in_progress"
                )
                done = await tool(
                    a, "complete_task", "A", worker_id=wa, task_id=task_id, pr_url=PR_URL
                )
                assert (done["task"]["status"], done["task"]["pr_url"]) == ("in_review", PR_URL)
                # C reviews it: the review lease, an artifact, a verdict.
                review = await tool(c, "claim_task_review", "C", worker_id=wc, task_id=task_id)
                assert review["lease"]["kind"] == "review"
                published = await tool(
                    c,
                    "publish_room_artifact",
                    "C",
                    worker_id=wc,
                    task_id=task_id,
                    artifact={"provider": "git", "kind": "commit", "id": HEAD, "title": "head"},
                )
                assert published["artifact"]["linked_task_ids"] == [task_id]
                verdict = await tool(
                    c,
                    "submit_review_verdict",
                    "C",
                    worker_id=wc,
                    task_id=task_id,
                    verdict="approve",
                    expected_head_sha=HEAD,
                    idempotency_key="review-1",
                    body="Looks right.",
                )
                assert (verdict["success"], verdict["effect"]["state"]) == (True, "succeeded")
                # A reads the task's artifacts and the room's events.
                artifacts = await tool(a, "get_room_artifacts", "A", worker_id=wa, task_id=task_id)
                assert {(x["kind"], x["url"] or x["id"]) for x in artifacts["artifacts"]} == {
                    ("pull_request", PR_URL),
                    ("commit", HEAD),
                }
                events = await tool(a, "get_room_events", "A", worker_id=wa, limit=100)
                seen = [(e["event_type"], e["action"]) for e in events["events"]]
                for step in (
                    ("board_settings", "mode_changed"),
                    ("board_manager", "assigned"),
                    ("board_intent", "approved"),
                    ("task", "created"),
                    ("board_intent", "denied"),
                    ("task", "assigned"),
                    ("task", "in_review"),
                    ("pull_request", "linked"),
                    ("review_lease", "claimed"),
                    ("artifact", "published"),
                    ("pull_request_review", "submitted"),
                ):
                    assert step in seen, step
                assert seen.index(("task", "created")) < seen.index(
                    ("pull_request_review", "submitted")
                )
            log = await room.stop()
    assert errors_in(log) == []
