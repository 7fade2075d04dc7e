"""The room-work tools over the SDK's in-memory client, against a FakeRoom (issue 27).

Threads, the board, task leases, status, memory and requests for people, the
newest-first reads and the tail a cursorless wait starts from; writes need a
worker session; bad input gets the room's status and a text naming its cause,
never a validator's report, and changes nothing. Timing runs on
``autojump_clock`` (in-memory transport only).
"""

from __future__ import annotations

import json
from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import pytest
import trio
import trio.testing
from mcp import Client

from letagents_trio._protocol import MAX_MESSAGE_CHARS
from letagents_trio.mcp_server import create_server
from letagents_trio.mcp_server._profiles import SUPERVISED_CREDENTIAL_TEXT
from letagents_trio.mcp_server._server import ROOM_MESSAGES_NAME
from letagents_trio.room_server import Credentials
from letagents_trio.workers._wire import WORKER_KIND_REQUIRED_TEXT, WORKER_SESSION_REQUIRED_TEXT

from .helpers import (
    HTTPS_URL,
    ROOM,
    call_error,
    call_ok,
    config_for,
    register,
    supervised_config,
    text_of,
)
from .test_tools import REQUIRED, WRITE_TOOLS

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from letagents_trio.testing import FakeRoom

BEARER = "lasb_a-supervisors-worker-bearer"
# Words of the validator's own report, which no tool result may show.
VALIDATOR_WORDS = ("pydantic", "validation error", "input_value", "input_type", "Arguments\n")


@asynccontextmanager
async def alder_and_birch(
    fake_room: FakeRoom, tmp_path: Path
) -> AsyncIterator[tuple[Client, dict[str, Any], dict[str, Any]]]:
    """A server's SDK client with two workers registered, Alder and Birch: their answers."""
    server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
    async with Client(server, mode="legacy") as client:
        yield client, await register(client, "ka", "Alder"), await register(client, "kb", "Birch")


def accept(fake_room: FakeRoom, task_id: str) -> None:
    """The room's admin, as a person, accepts a task."""
    admin = Credentials(owner_token=fake_room.person_token)
    answer = fake_room.room.work.tasks.patch(ROOM, task_id, admin, {"status": "accepted"})
    assert answer.status == 200, answer.body


async def test_one_workers_loop(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    """Threads, the board, a claim through to review, status, memory, a request, a release."""
    with trio.fail_after(60):
        async with alder_and_birch(fake_room, tmp_path) as (client, alder, birch):
            a, b = alder["worker_id"], birch["worker_id"]
            # A posts; B answers in its thread; A's wait sees the reply with its root.
            posted = await call_ok(client, "send_message", {"worker_id": a, "text": "plan?"})
            root = posted["message"]["id"]
            reply = await call_ok(
                client,
                "send_thread_message",
                {"worker_id": b, "text": "on it", "thread_parent_id": root},
            )
            assert reply["message"]["thread_parent_id"] == root
            waited = await call_ok(
                client, "wait_for_messages", {"worker_id": a, "after_message_id": root}
            )
            (seen,) = waited["messages"]
            assert (seen["text"], seen["thread_parent_id"]) == ("on it", root)
            assert seen["thread"]["root_message_id"] == root
            assert seen["reply_to"]["id"] == root
            # A reply to the reply, by thread_parent_id, still goes to the root.
            deeper = await call_ok(
                client,
                "send_message",
                {"worker_id": a, "text": "thanks", "thread_parent_id": seen["id"]},
            )
            assert deeper["message"]["reply_to"]["id"] == root
            # A adds a task; the admin accepts it; B finds and claims it.
            added = await call_ok(client, "add_task", {"worker_id": a, "title": "Fix the build"})
            task_id = added["task"]["id"]
            assert added["task"]["status"] == "proposed"
            accept(fake_room, task_id)
            board = await call_ok(client, "get_board", {"worker_id": b})
            assert [(t["id"], t["status"]) for t in board["tasks"]] == [(task_id, "accepted")]
            claimed = await call_ok(client, "claim_task", {"worker_id": b, "task_id": task_id})
            assert claimed["task"]["status"] == "assigned"
            (lease,) = claimed["task"]["active_leases"]
            status = await call_ok(client, "post_status", {"worker_id": b, "status": "fixing"})
            assert status["status_posted"] == "fixing"
            assert status["sender"] == "Birch"
            moved = await call_ok(
                client,
                "update_task",
                {"worker_id": b, "task_id": task_id, "status": "in_progress"},
            )
            assert moved["task"]["status"] == "in_progress"
            pr = "https://example.test/pull/1"
            done = await call_ok(
                client, "complete_task", {"worker_id": b, "task_id": task_id, "pr_url": pr}
            )
            assert (done["task"]["status"], done["task"]["pr_url"]) == ("in_review", pr)
            seen_by_a = await call_ok(client, "get_board", {"worker_id": a})
            assert [(t["status"], t["pr_url"]) for t in seen_by_a["tasks"]] == [("in_review", pr)]
            # B remembers a fact and A reads it; B asks for input and A sees the request.
            fact = {"client_id": "fact-build", "category": "decision", "title": "CI", "body": "uv"}
            await call_ok(client, "remember_room_fact", {"worker_id": b, **fact})
            memory = await call_ok(client, "get_room_memory", {"worker_id": a})
            assert [r["title"] for r in memory["records"]] == ["CI"]
            ask = {
                "client_id": "ask-merge1",
                "category": "approval",
                "title": "Merge?",
                "body": "!",
            }
            await call_ok(client, "request_human_input", {"worker_id": b, **ask})
            requests = await call_ok(client, "get_human_requests", {"worker_id": a})
            assert [r["title"] for r in requests["records"]] == ["Merge?"]
            assert [t["id"] for t in requests["tasks"]] == [task_id]  # in review: waiting
            # B releases the lease it holds; the task is back on the board.
            released = await call_ok(
                client, "release_task_lease", {"worker_id": b, "task_id": task_id}
            )
            assert released["released_lease"]["id"] == lease["id"]
            assert released["released_lease"]["status"] == "released"
            assert released["task"]["status"] == "accepted"
    paths = {(r.method, r.path) for r in fake_room.requests}
    tasks = f"/rooms/{ROOM}/tasks"
    assert {
        ("GET", f"/rooms/{ROOM}/messages"),
        ("GET", f"/rooms/{ROOM}/messages/poll"),
        ("POST", tasks),
        ("GET", tasks),
        ("GET", f"{tasks}/{task_id}"),
        ("PATCH", f"{tasks}/{task_id}"),
        ("POST", f"{tasks}/{task_id}/lease-action"),
        ("GET", f"/rooms/{ROOM}/memory"),
        ("POST", f"/rooms/{ROOM}/memory"),
        ("GET", f"/rooms/{ROOM}/attention"),
        ("POST", f"/rooms/{ROOM}/attention"),
    } <= paths


async def test_a_handoff_passes_the_lease_to_the_worker_the_agent_key_names(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    """handoff_task_lease takes ``target_agent_key`` and sends it as the route's
    ``target_actor_key`` (Node's ``src/mcp/server/tools/tasks/lease-tools.ts``; the route,
    ``src/api/routes/rooms/tasks/lease-action.ts``, reads no other name): the task is
    assigned to that worker with a fresh work lease, and the holder's is released."""
    with trio.fail_after(60):
        async with alder_and_birch(fake_room, tmp_path) as (client, alder, registered):
            a, birch = alder["worker_id"], registered["agent_session"]
            added = await call_ok(client, "add_task", {"worker_id": a, "title": "Fix the build"})
            task_id = added["task"]["id"]
            accept(fake_room, task_id)
            claimed = await call_ok(client, "claim_task", {"worker_id": a, "task_id": task_id})
            (lease,) = claimed["task"]["active_leases"]
            args = {
                "worker_id": a,
                "task_id": task_id,
                "target_agent_key": birch["agent_key"],
                "lease_id": lease["id"],
                "reason": "Birch knows the build",
            }
            handed = await call_ok(client, "handoff_task_lease", args)
    assert (handed["action"], handed["task"]["status"]) == ("handoff", "assigned")
    assert handed["task"]["assignee_agent_key"] == birch["agent_key"]
    assert (handed["released_lease"]["id"], handed["released_lease"]["status"]) == (
        lease["id"],
        "released",  # the holder's own handoff: released, not revoked
    )
    new = handed["new_lease"]
    assert (new["agent_key"], new["agent_session_id"]) == (
        birch["agent_key"],
        birch["session_id"],
    )
    (sent,) = [
        r.body
        for r in fake_room.requests
        if (r.method, r.path) == ("POST", f"/rooms/{ROOM}/tasks/{task_id}/lease-action")
    ]
    assert sent == {
        "action": "handoff",
        "lease_id": lease["id"],
        "reason": "Birch knows the build",
        "target_actor_key": birch["agent_key"],
    }


async def test_read_messages_answers_the_newest_and_a_cursorless_wait_starts_there(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    """read_messages: the newest 100 unless limit says otherwise (0: all); a wait without a
    cursor answers that tail at once, and the next wait after it blocks."""
    server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
    with trio.fail_after(600):
        async with Client(server, mode="legacy") as client:
            worker = (await register(client))["worker_id"]
            for i in range(250):
                await call_ok(client, "send_message", {"worker_id": worker, "text": f"m{i}"})
            start = trio.current_time()
            newest = await call_ok(client, "read_messages", {"worker_id": worker})
            texts = [m["text"] for m in newest["messages"]]
            assert texts == [f"m{i}" for i in range(150, 250)]
            assert newest["truncated"] is True
            two = await call_ok(client, "read_messages", {"worker_id": worker, "limit": 2})
            assert [m["text"] for m in two["messages"]] == ["m248", "m249"]
            everything = await call_ok(client, "read_messages", {"worker_id": worker, "limit": 0})
            assert len(everything["messages"]) == 250
            assert everything["truncated"] is False
            tail = await call_ok(client, "wait_for_messages", {"worker_id": worker})
            assert [m["text"] for m in tail["messages"]] == texts
            assert trio.current_time() == start  # nothing waited on
            cursor = tail["last_observed_message_id"]
            args = {"worker_id": worker, "after_message_id": cursor, "timeout": 5_000}
            empty = await call_ok(client, "wait_for_messages", args)
            assert empty["messages"] == []
            assert trio.current_time() == start + 5


async def test_writes_need_a_worker_session_and_send_nothing_without_one(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    """Every write tool, called as the owner alone or as a controller, fails with the Node
    client's text before any request."""
    server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
    with trio.fail_after(60):
        async with Client(server, mode="legacy") as client:
            await register(client)  # the room exists
            controller = await call_ok(
                client,
                "register_agent_session",
                {"room_id": ROOM, "session_kind": "controller", "display_name": "Ctl"},
            )
            before = len(fake_room.requests)
            for tool in WRITE_TOOLS:
                args = {"room_id": ROOM, **REQUIRED[tool]}
                assert await call_error(client, tool, args) == WORKER_SESSION_REQUIRED_TEXT, tool
                args = {"agent_session_id": controller["agent_session_id"], **REQUIRED[tool]}
                assert await call_error(client, tool, args) == WORKER_KIND_REQUIRED_TEXT, tool
            assert len(fake_room.requests) == before


async def test_bad_input_names_its_cause_and_changes_nothing(
    autojump_clock: trio.testing.MockClock, fake_room: FakeRoom, tmp_path: Path
) -> None:
    """Unknown task, a refused move, a lease not yours, empty or oversized text, a status not
    in the list: the room's status and its text, or the argument and what it must be."""
    with trio.fail_after(60):
        async with alder_and_birch(fake_room, tmp_path) as (client, alder, birch):
            a, b = alder["worker_id"], birch["worker_id"]
            task_id = (await call_ok(client, "add_task", {"worker_id": a, "title": "t"}))["task"][
                "id"
            ]

            async def error(tool: str, **args: Any) -> str:
                text = await call_error(client, tool, args)
                assert not any(word in text for word in VALIDATOR_WORDS), text
                return text

            # Claim only accepted tasks: the tool reads the task and says why.
            assert await error("claim_task", worker_id=b, task_id=task_id) == (
                f"{task_id} is proposed, not accepted: only accepted tasks can be claimed (a room"
                " admin accepts proposed ones). Check get_board for accepted tasks."
            )
            assert await error("claim_task", worker_id=b, task_id="task_99") == (
                'API error 404: {"error":"Task not found"}'
            )
            refused = await error("update_task", worker_id=a, task_id=task_id, status="done")
            assert refused.startswith("API error 403: ")
            accept(fake_room, task_id)
            await call_ok(client, "claim_task", {"worker_id": a, "task_id": task_id})
            snapshot = json.dumps(
                fake_room.room.work.tasks.get(
                    ROOM, task_id, Credentials(owner_token=fake_room.owner_token)
                ).body
            )
            assert await error("update_task", worker_id=a, task_id=task_id, status="merged") == (
                'API error 403: {"error":"Only the room\'s admins, signed in as people (a'
                " person's bearer without agent session credentials), can accept, cancel,"
                ' merge or close tasks."}'
            )
            assert await error("update_task", worker_id=a, task_id=task_id, status="proposed") == (
                'API error 400: {"error":"Invalid transition: assigned → proposed.'
                ' Allowed: in_progress, in_review, cancelled"}'
            )
            not_yours = await error("release_task_lease", worker_id=b, task_id=task_id)
            assert not_yours.startswith("API error 403: ")
            assert "holder" in not_yours
            bogus = await error("update_task", worker_id=a, task_id=task_id, status="bogus")
            assert bogus.startswith("update_task: status: Input should be ")
            assert "'in_review'" in bogus
            assert (
                json.dumps(
                    fake_room.room.work.tasks.get(
                        ROOM, task_id, Credentials(owner_token=fake_room.owner_token)
                    ).body
                )
                == snapshot
            )
            messages = len(fake_room.room.store.messages_after(ROOM, 0, 1000))
            assert await error("send_message", worker_id=a, text="  ") == (
                'API error 400: {"error":"text is required"}'
            )
            assert await error("send_message", worker_id=a, text="x" * 70_000) == (
                f"send_message: text: String should have at most {MAX_MESSAGE_CHARS} characters."
                " Correct the arguments and call send_message again."
            )
            assert await error("send_message", worker_id=a, text="x", reply_to="999") == (
                'API error 400: {"error":"reply_to must reference an existing message in this'
                ' room"}'
            )
            assert await error("read_messages", worker_id=a, limit=-1) == (
                "read_messages: limit: Input should be greater than or equal to 0. Correct the"
                " arguments and call read_messages again."
            )
            assert await error("add_task", worker_id=a) == (
                "add_task: title: Field required. Correct the arguments and call add_task again."
            )
            assert len(fake_room.room.store.messages_after(ROOM, 0, 1000)) == messages
            fact = {"client_id": "short", "category": "term", "title": "t", "body": "b"}
            assert await error("remember_room_fact", worker_id=a, **fact) == (
                'API error 400: {"error":"Use a stable client ID of 8–80 letters, numbers,'
                ' underscores or hyphens."}'
            )
            assert fake_room.room.store.room_knowledge(ROOM, "memory") == []


async def test_the_room_messages_resource_reads_as_read_messages(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    """letagents://rooms/{room_id}/messages: the newest messages, as the one worker held in
    the room; with none or several held, as the owner (this room then refuses the read).

    Real clock: the SDK reads a resource's content on a worker thread."""
    server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
    with trio.fail_after(60):
        async with Client(server, mode="legacy") as client:
            templates = (await client.list_resource_templates()).resource_templates
            assert [(t.name, t.uri_template) for t in templates] == [
                (ROOM_MESSAGES_NAME, "letagents://rooms/{room_id}/messages")
            ]
            worker = (await register(client))["worker_id"]
            await call_ok(client, "send_message", {"worker_id": worker, "text": "hello"})
            read = await client.read_resource(f"letagents://rooms/{ROOM}/messages")
            (content,) = read.contents
            payload = json.loads(getattr(content, "text"))  # noqa: B009 - TextResourceContents
            assert [m["text"] for m in payload["messages"]] == ["hello"]
            assert payload["room_id"] == ROOM
            await register(client, "k2", "Second")  # two held: no one to read as
            with pytest.raises(Exception, match="required to read this room's messages"):
                await client.read_resource(f"letagents://rooms/{ROOM}/messages")


async def test_every_tool_result_is_free_of_validator_reports(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    """A wrong type anywhere is one sentence naming the field, whatever the tool."""
    server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
    with trio.fail_after(30):
        async with Client(server, mode="legacy") as client:
            for tool in (*WRITE_TOOLS, "get_board", "read_messages", "wait_for_messages"):
                result = await client.call_tool(tool, {"room_id": 5})
                assert result.is_error
                text = text_of(result)
                assert text.startswith(f"{tool}: "), text
                assert "room_id: Input should be a valid string" in text
                assert not any(word in text for word in VALIDATOR_WORDS), text


async def test_a_worker_bearer_is_the_whole_credential_of_the_room_work_tools(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    """With LETAGENTS_AGENT_SESSION_BEARER every room-work call carries the bearer
    alone (Node's runtime/api.ts and agent-sessions.ts), as the marker session; in a
    supervised profile without one, nothing is sent (no supervisor bridge)."""
    # The reference room mints no bearers: these rules answer as a room that took it.
    task = {"id": "task_1", "room_id": ROOM, "title": "t", "status": "accepted"}
    rooms = f"/rooms/{ROOM}"
    fake_room.on("GET", f"{rooms}/tasks").respond(200, {"tasks": [task], "has_more": False})
    fake_room.on("GET", f"{rooms}/tasks/task_1").respond(200, task)
    fake_room.on("PATCH", f"{rooms}/tasks/task_1").respond(200, {**task, "status": "assigned"})
    fake_room.on("POST", f"{rooms}/memory").respond(201, {"record": {"id": "mem_1"}})
    fake_room.on("POST", f"{rooms}/messages").respond(201, {"id": "1", "text": "[status] x"})
    config = config_for(fake_room, tmp_path, token=None, worker_bearer=BEARER, api_url=HTTPS_URL)
    fact = {"client_id": "fact-0001", "category": "term", "title": "t", "body": "b"}
    with trio.fail_after(10):
        async with Client(create_server(config, transport=fake_room.transport)) as client:
            await call_ok(client, "get_board", {"room_id": ROOM})
            claimed = await call_ok(client, "claim_task", {"room_id": ROOM, "task_id": "task_1"})
            assert claimed["task"]["status"] == "assigned"
            await call_ok(client, "remember_room_fact", {"room_id": ROOM, **fact})
            await call_ok(client, "post_status", {"room_id": ROOM, "status": "x"})
    seen = [
        (r.method, r.path, r.bearer, r.session_id, r.has_session_token) for r in fake_room.requests
    ]
    assert seen == [
        ("GET", f"{rooms}/tasks", BEARER, None, False),
        ("GET", f"{rooms}/tasks/task_1", BEARER, None, False),
        ("PATCH", f"{rooms}/tasks/task_1", BEARER, None, False),
        ("POST", f"{rooms}/memory", BEARER, None, False),
        ("POST", f"{rooms}/messages", BEARER, None, False),
    ]
    assert all("agent_session_token" not in (r.body or {}) for r in fake_room.requests)

    fake_room.requests.clear()
    supervised = supervised_config(fake_room, tmp_path, "supervised_mcp_polling")
    with trio.fail_after(10):
        async with Client(create_server(supervised, transport=fake_room.transport)) as client:
            for tool, arguments in (
                ("get_board", {}),
                ("claim_task", {"task_id": "task_1"}),
                ("remember_room_fact", fact),
                ("send_thread_message", {"text": "x", "thread_parent_id": "1"}),
            ):
                error = await call_error(client, tool, {"room_id": ROOM, **arguments})
                assert error == SUPERVISED_CREDENTIAL_TEXT, tool
    assert fake_room.requests == []
