"""The governed board's tools, Node's field names on every tool, and the room_messages resource,
over the SDK's in-memory client against a FakeRoom (the reference room, in-process).

Real clock: the SDK reads a resource's content on a worker thread, and each test is
bounded by ``trio.fail_after``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final

import pytest
import trio
from mcp import Client
from mcp.shared.exceptions import MCPError

from letagents_trio.mcp_server import create_server
from letagents_trio.mcp_server._intent_tools import HANDOFF_TARGET_TEXT, NO_WORK_LEASE_TEXT
from letagents_trio.room_server import MessageRow

from .helpers import ROOM, call_error, call_ok, config_for, register

if TYPE_CHECKING:
    from collections.abc import AsyncIterator

    from letagents_trio.testing import FakeRoom

NODE_TOOLS: Final = Path(__file__).parent / "data" / "node-worker-tools.json"
PR_URL: Final = "https://github.com/letagents/letagents-trio/pull/40"
SHA: Final = "0123456789abcdef0123456789abcdef01234567"


# Issue 41's room and onboarding tools that take no room_id: as in Node's worker facade
# (which adds worker_id only where a tool takes room_id), they take no worker_id.
ROOM_FREE_TOOLS: Final = frozenset(
    {
        "create_room",
        "create_project",
        "join_code",
        "join_project",
        "join_room",
        "get_current_room",
        "check_repo",
        "initialize_repo",
        "check_repo_visibility",
        "get_onboarding_status",
        "clear_saved_auth",
        "set_agent_name",
    }
)


def node_fields() -> dict[str, set[str]]:
    """Node's worker-profile tools and every input field each takes."""
    tools = json.loads(NODE_TOOLS.read_text(encoding="utf-8"))["tools"]
    return {
        name: {*tool.get("required", ()), *tool.get("optional", ())}
        for name, tool in tools.items()
        if tool.get("found", True)
    }


async def schemas(client: Client) -> dict[str, set[str]]:
    return {t.name: set(t.input_schema["properties"]) for t in (await client.list_tools()).tools}


async def test_every_tool_takes_nodes_fields_and_worker_id(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    """Each tool we serve that Node's worker profile has takes every field Node's takes
    (the deprecated ones too) and our worker_id."""
    server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
    with trio.fail_after(20):
        async with Client(server, mode="legacy") as client:
            ours = await schemas(client)
    node = node_fields()
    shared = set(ours) & set(node)
    assert len(shared) >= 36
    for name in shared:
        assert node[name] <= ours[name], (name, node[name] - ours[name])
        if name not in ROOM_FREE_TOOLS:
            assert "worker_id" in ours[name], name


async def test_an_argument_no_field_takes_is_refused_naming_it(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    """Never dropped: the call is refused before anything is sent, naming each argument."""
    server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
    with trio.fail_after(20):
        async with Client(server, mode="legacy") as client:
            worker = (await register(client))["worker_id"]
            names = await schemas(client)
            before = len(fake_room.requests)
            for tool in names:
                given = {"worker_id": worker} if "worker_id" in names[tool] else {}
                text = await call_error(client, tool, {**given, "statsu": "done"})
                assert text == (
                    f"{tool}: unknown argument 'statsu': {tool} takes no such field."
                    f" Correct the arguments and call {tool} again."
                ), tool
            text = await call_error(
                client, "update_task", {"task_id": "task_1", "zeta": 1, "alpha": 2, "ctx": 3}
            )
            assert text.startswith("update_task: unknown arguments 'alpha', 'ctx', 'zeta':")
            assert len(fake_room.requests) == before


async def test_deprecated_fields_are_accepted_and_ignored(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    """Node's deprecated fields (created_by, conversation_id, sender) change nothing sent."""
    server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
    with trio.fail_after(20):
        async with Client(server, mode="legacy") as client:
            worker = (await register(client))["worker_id"]
            old = {"created_by": "someone else", "conversation_id": "c1"}
            task = await call_ok(client, "add_task", {"worker_id": worker, "title": "t", **old})
            assert task["task"]["created_by"] != "someone else"
            said = {"worker_id": worker, "text": "hi", "sender": "x", "conversation_id": "c"}
            await call_ok(client, "send_message", said)
    (create,) = fake_room.requests_to("POST", f"/rooms/{ROOM}/tasks")
    (send,) = fake_room.requests_to("POST", f"/rooms/{ROOM}/messages")
    # As Node's (issue 44): the creator and sender are the worker's own actor label.
    label = task["agent_identity"]["actor_label"]
    assert create.body == {
        "title": "t",
        "created_by": label,
        "actor_label": label,
        "actor_key": task["agent_identity"]["canonical_key"],
        "actor_instance_id": worker,
    }
    assert send.body == {"sender": label, "text": "hi"}


async def test_the_room_messages_resource_pages_the_whole_history(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    """More than one page of a room's history, oldest first; an unknown room is not found
    (-32602), not an internal error."""
    server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
    with trio.fail_after(30):
        async with Client(server, mode="legacy") as client:
            await register(client)
            store = fake_room.room.store
            for n in range(1, 1201):
                store.add_message(MessageRow(room_id=ROOM, sender="s", text=f"m{n}", created_at=n))
            read = await client.read_resource(f"letagents://rooms/{ROOM}/messages")
            payload = json.loads(getattr(read.contents[0], "text"))  # noqa: B009
            texts = [m["text"] for m in payload["messages"]]
            assert (len(texts), texts[0], texts[-1]) == (1200, "m1", "m1200")
            assert payload["truncated"] is False
            with pytest.raises(MCPError) as caught:
                await client.read_resource("letagents://rooms/nowhere-room/messages")
    assert caught.value.code == -32602
    assert "Room not found" in caught.value.error.message


@pytest.fixture
async def governed_chat(
    fake_room: FakeRoom, tmp_path: Path
) -> AsyncIterator[tuple[Client, str, str, dict[str, Any]]]:
    """One server with two workers, A and B (the manager), in an intent_required room."""
    server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
    async with Client(server, mode="legacy") as client:
        a = await register(client, "ka", "Alder")
        b = await register(client, "kb", "Birch")
        await call_ok(
            client, "set_board_manager_mode", {"room_id": ROOM, "manager_mode": "intent_required"}
        )
        session_b = b["agent_session"]["session_id"]
        await call_ok(
            client, "assign_board_manager", {"room_id": ROOM, "agent_session_id": session_b}
        )
        yield client, a["worker_id"], b["worker_id"], a["agent_session"]


async def approved_task(client: Client, wa: str, wb: str) -> str:
    """A task created and claimed by A through approved intents."""
    intent = await call_ok(client, "register_task_create_intent", {"worker_id": wa, "title": "T"})
    created = await call_ok(
        client, "approve_board_intent", {"worker_id": wb, "intent_id": intent["intent"]["id"]}
    )
    task_id: str = created["result"]["task"]["id"]
    claim = await call_ok(
        client, "register_task_claim_intent", {"worker_id": wa, "task_id": task_id}
    )
    await call_ok(
        client, "approve_board_intent", {"worker_id": wb, "intent_id": claim["intent"]["id"]}
    )
    return task_id


async def test_lease_action_intents_name_the_lease_and_follow_up_without_a_token(
    governed_chat: tuple[Client, str, str, dict[str, Any]], fake_room: FakeRoom
) -> None:
    client, wa, wb, _ = governed_chat
    with trio.fail_after(30):
        args = {"worker_id": wa, "task_id": "task_1", "action": "handoff"}
        assert await call_error(client, "register_task_lease_action_intent", args) == (
            HANDOFF_TARGET_TEXT
        )
        task_id = await approved_task(client, wa, wb)
        # A work lease exists now; before the claim there was none to name.
        (lease,) = fake_room.room.store.active_leases(ROOM)
        intent = await call_ok(
            client,
            "register_task_lease_action_intent",
            {"worker_id": wa, "task_id": task_id, "action": "release"},
        )
        assert intent["intent"]["payload"]["lease_id"] == lease.lease_id
        release = {"worker_id": wa, "task_id": task_id}
        refused = await call_error(client, "release_task_lease", release)
        assert "board_intent_required" in refused
        assert fake_room.room.store.active_leases(ROOM) == [lease]  # nothing half-written
        await call_ok(
            client, "approve_board_intent", {"worker_id": wb, "intent_id": intent["intent"]["id"]}
        )
        released = await call_ok(
            client, "release_task_lease", {**release, "board_intent_id": intent["intent"]["id"]}
        )
        assert released["task"]["status"] == "accepted"
        args = {"worker_id": wa, "task_id": task_id, "action": "release"}
        assert await call_error(client, "register_task_lease_action_intent", args) == (
            NO_WORK_LEASE_TEXT
        )


async def test_a_close_intent_is_followed_up_by_update_task_with_the_intent(
    governed_chat: tuple[Client, str, str, dict[str, Any]],
) -> None:
    client, wa, wb, _ = governed_chat
    with trio.fail_after(30):
        task_id = await approved_task(client, wa, wb)
        close = await call_ok(
            client,
            "register_task_close_intent",
            {"worker_id": wa, "task_id": task_id, "status": "cancelled"},
        )
        answer = await call_ok(
            client, "approve_board_intent", {"worker_id": wb, "intent_id": close["intent"]["id"]}
        )
        assert answer["result"] == {"kind": "approval_token", "requires_follow_up": True}
        assert isinstance(answer["approval_token"], str)
        follow = {"worker_id": wa, "task_id": task_id, "status": "cancelled"}
        refused = await call_error(client, "update_task", follow)
        assert "board_intent_required" in refused
        done = await call_ok(
            client, "update_task", {**follow, "board_intent_id": close["intent"]["id"]}
        )
        assert done["task"]["status"] == "cancelled"
        used = await call_ok(client, "list_board_intents", {"worker_id": wa, "status": "used"})
        assert close["intent"]["id"] in {i["id"] for i in used["intents"]}


async def test_review_work_verdicts_replay_and_artifacts_link_to_the_task(
    governed_chat: tuple[Client, str, str, dict[str, Any]], fake_room: FakeRoom
) -> None:
    client, wa, wb, _ = governed_chat
    with trio.fail_after(30):
        task_id = await approved_task(client, wa, wb)
        # Not in review yet: the room's refusal, and nothing stored.
        early = await call_error(client, "claim_task_review", {"worker_id": wb, "task_id": task_id})
        assert "coordination_invalid_task_status" in early
        artifacts = [{"provider": "git", "kind": "branch", "ref": "fix/ci"}]
        await call_ok(
            client,
            "update_task",
            {
                "worker_id": wa,
                "task_id": task_id,
                "status": "in_review",
                "pr_url": PR_URL,
                "workflow_artifacts": artifacts,
            },
        )
        # The worker holding the work lease may not review its own task.
        own = await call_error(client, "claim_task_review", {"worker_id": wa, "task_id": task_id})
        assert "coordination_work_lease_holder" in own
        review = await call_ok(client, "claim_task_review", {"worker_id": wb, "task_id": task_id})
        assert review["lease"]["kind"] == "review"
        verdict = {
            "worker_id": wb,
            "task_id": task_id,
            "verdict": "request_changes",
            "expected_head_sha": SHA.upper(),
            "idempotency_key": "v1",
            "body": "Add a test.",
        }
        first = await call_ok(client, "submit_review_verdict", verdict)
        assert (first["success"], first["message"]) == (True, "The review was published.")
        again = await call_ok(client, "submit_review_verdict", verdict)
        assert again["effect"]["id"] == first["effect"]["id"]
        changed = await call_error(
            client, "submit_review_verdict", {**verdict, "verdict": "approve"}
        )
        assert "workflow_effect_idempotency_conflict" in changed
        bad_sha = await call_error(
            client, "submit_review_verdict", {**verdict, "expected_head_sha": "abc"}
        )
        assert "expected_head_sha" in bad_sha
        released = await call_ok(
            client, "release_task_review", {"worker_id": wb, "task_id": task_id}
        )
        assert released["released_lease"]["status"] == "released"
        none_left = await call_error(
            client, "submit_review_verdict", {**verdict, "idempotency_key": "v2"}
        )
        assert "coordination_review_lease_required" in none_left
        # The task's artifacts: its PR and the branch it named.
        listed = await call_ok(client, "get_room_artifacts", {"worker_id": wa, "task_id": task_id})
        kinds = {(x["kind"], x["url"] or x["ref"]) for x in listed["artifacts"]}
        assert kinds == {("pull_request", PR_URL), ("branch", "fix/ci")}
        bad = {"provider": "svn", "kind": "branch", "ref": "x"}
        refused = await call_error(
            client, "publish_room_artifact", {"worker_id": wa, "artifact": bad}
        )
        assert "artifact[0].provider is invalid" in refused
        huge = {"provider": "git", "kind": "branch", "ref": "x" * 5000}
        refused = await call_error(
            client, "publish_room_artifact", {"worker_id": wa, "artifact": huge}
        )
        assert "at most 2048 characters" in refused
        after = await call_ok(client, "get_room_artifacts", {"worker_id": wa})
        assert len(after["artifacts"]) == 2  # nothing half-written


async def test_events_page_after_the_last_id_and_filter(
    governed_chat: tuple[Client, str, str, dict[str, Any]],
) -> None:
    client, wa, wb, _ = governed_chat
    with trio.fail_after(30):
        await approved_task(client, wa, wb)
        everything = await call_ok(client, "get_room_events", {"worker_id": wa, "limit": 100})
        assert everything["has_more"] is False
        ids = [e["id"] for e in everything["events"]]
        first = await call_ok(client, "get_room_events", {"worker_id": wa, "limit": 2})
        assert ([e["id"] for e in first["events"]], first["has_more"]) == (ids[:2], True)
        rest = await call_ok(
            client, "get_room_events", {"worker_id": wa, "after": ids[1], "limit": 100}
        )
        assert [e["id"] for e in rest["events"]] == ids[2:]
        intents = await call_ok(
            client, "get_room_events", {"worker_id": wa, "event_type": "board_intent"}
        )
        assert {e["action"] for e in intents["events"]} == {"registered", "approved"}
        refused = await call_error(client, "get_room_events", {"worker_id": wa, "since": "soon"})
        assert "since must be an ISO timestamp" in refused
