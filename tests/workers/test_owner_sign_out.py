"""The owner token is read afresh for every request (issue 12 item 1, PROTOCOL §2, §5.7).

The Node client reads the owner token before each request (``LETAGENTS_TOKEN``,
else the state file's ``auth``) and forgets its account on a sign-out. Here the
room client is given the state store's :meth:`LocalStateStore.owner_token` as
its source: a 401 on an owner call clears ``auth``, and the very next request
carries no bearer; a sign-in written by another process is used at once.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import pytest

from letagents_trio import ApiError
from letagents_trio.workers import LocalStateStore, WorkerError
from letagents_trio.workers._chat_storage import ChatStorage
from letagents_trio.workers._wire import EMBEDDER_WORDING as WORDING
from letagents_trio.workers._wire import sign_in_text

from .helpers import (
    LOCAL_ROOM,
    OWNER_TOKEN,
    ROOM,
    open_proc,
    read_json,
    seed_state,
    write_text,
)

if TYPE_CHECKING:
    from pathlib import Path

    from trio.testing import MockClock

    from letagents_trio.testing import FakeRoom

REFUSED = {"error": "Authentication required."}


def log(fake_room: FakeRoom, since: int = 0) -> list[tuple[str, str, str | None]]:
    """(method, path, bearer) of each request, process streams left out (they run on)."""
    return [
        (r.method, r.path, r.bearer)
        for r in fake_room.requests[since:]
        if not r.path.endswith("/process")
    ]


def exit_of(session_id: str) -> str:
    return f"/rooms/{ROOM}/agent-sessions/{session_id}/process/exit"


async def test_a_401_on_an_owner_call_signs_out_at_the_next_request(
    autojump_clock: MockClock, fake_room: FakeRoom, state_path: Path
) -> None:
    store = await seed_state(state_path)
    async with open_proc(fake_room.transport, state_path, owner_token=store.owner_token) as p:
        first = await p.handles.register(room_id=ROOM, registration_key="a")
        assert p.handles.statistics().account_cached
        fake_room.on("POST", "/agents").respond(401, REFUSED)
        mark = len(fake_room.requests)
        with pytest.raises(ApiError) as refused:
            await p.handles.register(room_id=ROOM, registration_key="b")
        assert refused.value.status == 401
        assert store.auth() is None
        assert not p.client.has_owner_token
        with pytest.raises(WorkerError) as caught:
            await p.handles.register(room_id=ROOM, registration_key="c")
        assert str(caught.value) == sign_in_text(state_path, WORDING)
        assert not p.handles.statistics().account_cached
        assert await p.client.call("GET", "/health") == {"ok": True}
    assert log(fake_room, mark) == [
        ("POST", "/agents", OWNER_TOKEN),  # answered 401: the sign-out
        ("GET", "/health", None),  # the next request carries no bearer
        ("POST", f"{exit_of(first.session.session_id)}", None),  # the goodbye, too
    ]


async def test_a_sign_in_written_by_another_process_is_used_at_once(
    autojump_clock: MockClock, fake_room: FakeRoom, state_path: Path
) -> None:
    source = LocalStateStore(state_path).owner_token  # as the MCP server builds it
    async with open_proc(fake_room.transport, state_path, owner_token=source) as p:
        with pytest.raises(WorkerError) as caught:
            await p.handles.register(room_id=ROOM, registration_key="a")
        assert str(caught.value) == sign_in_text(state_path, WORDING)
        assert fake_room.requests == []
        await seed_state(state_path)  # "another process" signs in
        registered = await p.handles.register(room_id=ROOM, registration_key="a")
    assert registered.session.ended_at is None
    assert log(fake_room) == [
        ("GET", "/agents/me", OWNER_TOKEN),
        ("POST", "/agents", OWNER_TOKEN),
        ("POST", f"/rooms/{ROOM}/agent-sessions", OWNER_TOKEN),
        ("POST", exit_of(registered.session.session_id), OWNER_TOKEN),
    ]


async def test_a_refused_environment_token_never_erases_the_stored_sign_in(
    autojump_clock: MockClock, fake_room: FakeRoom, state_path: Path
) -> None:
    """Issue 28 row 9: better than Node here. Node's ``apiCall`` (``runtime/api.ts``)
    clears the stored ``auth`` on any owner 401, so a wrong ``LETAGENTS_TOKEN``
    signs every chat on the machine out. Ours clears it only when the refused
    token is the stored one."""
    store = await seed_state(state_path)
    async with open_proc(fake_room.transport, state_path, owner_token="a-wrong-env-token") as p:
        with pytest.raises(WorkerError):
            await p.handles.register(room_id=ROOM, registration_key="a")
    assert log(fake_room) == [("GET", "/agents/me", "a-wrong-env-token")]  # answered 401
    stored = store.auth()
    assert stored is not None
    assert stored.token == OWNER_TOKEN


async def test_the_stored_accounts_login_is_used_without_asking_the_room(
    autojump_clock: MockClock, fake_room: FakeRoom, state_path: Path, tmp_path: Path
) -> None:
    """Issue 28 row 2. Node (``identity/directory.ts``, ``getAuthenticatedAccountProfile``)
    takes the login from the state file's ``auth.account.login`` when
    ``LETAGENTS_TOKEN`` is unset and never calls ``GET /agents/me``; a local room
    then sees no HTTP at all. We called it always, and a failing ``/agents/me``
    refused every registration ("Could not verify…"), local rooms included."""
    store = LocalStateStore(state_path)
    await store.save_auth(OWNER_TOKEN, account={"id": "acct", "login": "Owner"})
    fake_room.on("GET", "/agents/me").respond(503, {"error": "down"})
    settings = tmp_path / "chat-storage.json"
    write_text(settings, json.dumps({"mode": "cloud", "roomOverrides": {LOCAL_ROOM: "local"}}))
    async with open_proc(
        fake_room.transport,
        state_path,
        owner_token=store.owner_token,
        chat_storage=ChatStorage(settings),
    ) as p:
        local = await p.handles.register(room_id=LOCAL_ROOM, registration_key="l")
        assert fake_room.requests == []
        hosted = await p.handles.register(room_id=ROOM, registration_key="h")
    assert local.session.session_id.startswith("local_")
    assert str(local.session.extra["agent_key"]).startswith("Owner/worker-")
    assert [(m, path) for m, path, _ in log(fake_room)] == [
        ("POST", "/agents"),
        ("POST", f"/rooms/{ROOM}/agent-sessions"),
        ("POST", exit_of(hosted.session.session_id)),
    ]
    scopes = {w["scope"] for w in read_json(state_path)["mcp_workers"].values()}
    assert scopes == {"http://room.test\nowner"}


async def test_a_token_other_than_the_stored_sign_ins_still_asks_the_room(
    autojump_clock: MockClock, fake_room: FakeRoom, state_path: Path
) -> None:
    """Node (``identity/directory.ts``): with ``LETAGENTS_TOKEN`` set, the account is
    the room's answer to ``GET /agents/me``; a stored account is another token's."""
    store = LocalStateStore(state_path)
    await store.save_auth("some-other-token", account={"login": "someone-else"})
    async with open_proc(fake_room.transport, state_path, owner_token=OWNER_TOKEN) as p:
        await p.handles.register(room_id=ROOM, registration_key="a")
    assert log(fake_room)[0] == ("GET", "/agents/me", OWNER_TOKEN)
    (worker,) = read_json(state_path)["mcp_workers"].values()
    assert worker["scope"] == "http://room.test\nowner"
