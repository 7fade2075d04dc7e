"""What the wake-rule tools send for the agent: every field it gives, as the worker it is.

``add_wake_rule`` passes the note, ``repeat`` and ``expires_at`` it is given to
the room (which keeps them and shows them back); ``list_wake_rules`` narrows to
one agent by ``agent_key``; each acts as the worker or agent session it names,
and adding or cancelling, as every write, needs one (refused before anything
is sent). Over the SDK's in-memory client against a
FakeRoom; no rule fires here, so the room's loop does not run.
"""

from __future__ import annotations

from contextlib import asynccontextmanager
from typing import TYPE_CHECKING, Any

import trio
from mcp import Client

from letagents_trio.mcp_server import create_server
from letagents_trio.room_server._wire import iso
from letagents_trio.workers._wire import WORKER_SESSION_REQUIRED_TEXT

from .helpers import ROOM, call_error, call_ok, config_for, register

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path

    from letagents_trio.testing import FakeRoom


@asynccontextmanager
async def alder_and_birch(
    fake_room: FakeRoom, tmp_path: Path
) -> AsyncIterator[tuple[Client, str, str]]:
    """A server's SDK client with two workers registered; their worker ids."""
    server = create_server(config_for(fake_room, tmp_path), transport=fake_room.transport)
    async with Client(server, mode="legacy") as client:
        alder = await register(client, "ka", "Alder")
        birch = await register(client, "kb", "Birch")
        yield client, alder["worker_id"], birch["worker_id"]


def session_of(fake_room: FakeRoom, rule: dict[str, Any]) -> str:
    """The agent session id of the worker that made ``rule``."""
    (row,) = [
        r for r in fake_room.room.store.room_sessions(ROOM) if r.agent_key == rule["agent_key"]
    ]
    return row.session_id


def closed(worker: str, pr: int, **extra: Any) -> dict[str, Any]:
    return {"worker_id": worker, "event": "github.pr_closed", "arguments": {"pr": pr}, **extra}


async def test_add_wake_rule_sends_the_note_repeat_and_expiry_it_is_given(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    with trio.fail_after(30):
        async with alder_and_birch(fake_room, tmp_path) as (client, alder, _):
            expires = iso(fake_room.room.clock.now_ms() + 2 * 3_600_000)
            asked = closed(alder, 12, note="release after", repeat=True, expires_at=expires)
            rule = (await call_ok(client, "add_wake_rule", asked))["rule"]
            assert (rule["note"], rule["repeat"], rule["expires_at"]) == (
                "release after",
                True,
                expires,
            )
            plain = (await call_ok(client, "add_wake_rule", closed(alder, 13)))["rule"]
            assert (plain["note"], plain["repeat"]) == (None, False)
            named = {"room_id": ROOM, "agent_session_id": session_of(fake_room, rule)}
            by_session = {**closed(alder, 14), **named}
            del by_session["worker_id"]
            as_session = (await call_ok(client, "add_wake_rule", by_session))["rule"]
            assert as_session["agent_key"] == rule["agent_key"]
            owners = {"room_id": ROOM, "event": "github.pr_closed", "arguments": {"pr": 15}}
            assert await call_error(client, "add_wake_rule", owners) == WORKER_SESSION_REQUIRED_TEXT


async def test_list_wake_rules_narrows_to_one_agent_by_its_key(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    with trio.fail_after(30):
        async with alder_and_birch(fake_room, tmp_path) as (client, alder, birch):
            of_alder = (await call_ok(client, "add_wake_rule", closed(alder, 1)))["rule"]
            of_birch = (await call_ok(client, "add_wake_rule", closed(birch, 2)))["rule"]
            only = {"worker_id": alder, "agent_key": of_birch["agent_key"]}
            narrowed = await call_ok(client, "list_wake_rules", only)
            assert [r["id"] for r in narrowed["active"]] == [of_birch["id"]]
            everyone = await call_ok(client, "list_wake_rules", {"worker_id": alder})
            assert {r["id"] for r in everyone["active"]} == {of_alder["id"], of_birch["id"]}


async def test_cancel_wake_rule_cancels_as_the_session_it_names_and_needs_one(
    fake_room: FakeRoom, tmp_path: Path
) -> None:
    with trio.fail_after(30):
        async with alder_and_birch(fake_room, tmp_path) as (client, alder, _):
            rule = (await call_ok(client, "add_wake_rule", closed(alder, 1)))["rule"]
            unsent = await call_error(
                client, "cancel_wake_rule", {"room_id": ROOM, "rule_id": rule["id"]}
            )
            assert unsent == WORKER_SESSION_REQUIRED_TEXT
            cancel = {"room_id": ROOM, "agent_session_id": session_of(fake_room, rule)}
            cancel["rule_id"] = rule["id"]
            cancelled = (await call_ok(client, "cancel_wake_rule", cancel))["rule"]
            assert (cancelled["id"], cancelled["status"]) == (rule["id"], "cancelled")
            assert cancelled["cancelled_by"]["id"] == rule["agent_key"]
