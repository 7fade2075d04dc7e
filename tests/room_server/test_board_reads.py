"""Who reads a governed board, what it answers, and what a manager's end does to its approvals.

The board's reads (its settings, its intents) admit an owner token alone
(reading, not acting) and say so in their refusals; their refusals' texts for
a stranger; the intent list's answer whole; a read that finds an intent past
its time answering even when the storage refuses to record the expiry; the
notice of a new intent posted as the room's system message; and an approval
whose manager's session ended lapsing in a room that needs intents.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
import trio
import trio.testing

from letagents_trio._protocol import SESSION_REQUIRED_READ_TEXT
from letagents_trio.room_server._auth._accounts import OWNER_NOT_PERSON_TEXT
from letagents_trio.room_server._board._intents import PARTICIPANT_TEXT, SETTINGS_ADMIN_TEXT
from letagents_trio.workers._intent_payloads import create_intent_payload as create_payload

from .helpers import (
    OTHER_PERSON_TOKEN,
    ROOM,
    disconnect,
    owner_headers,
    person_headers,
    registered,
    registration,
    session_headers,
)
from .test_board_governance import decide, governed, intend
from .test_full_disk import read_only
from .test_governance_answers import close_intent, new_task

if TYPE_CHECKING:
    import httpx2

    from letagents_trio.room_server import Room
    from letagents_trio.room_server._storage._store import RoomStore

R = f"/rooms/{ROOM}"
DAY_S = 24 * 60 * 60


async def test_an_owner_token_alone_reads_the_board_but_never_changes_it(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a, _ = await governed(client)
    intent = await intend(client, a, "task_create", create_payload("t", None, None))
    r = await client.get(f"{R}/board-intents", headers=owner_headers())
    assert (r.status_code, r.json()) == (200, {"room_id": ROOM, "intents": [intent]})
    r = await client.get(f"{R}/board-settings", headers=owner_headers())
    assert (r.status_code, r.json()["pending_intent_count"]) == (200, 1)
    # Half a session's credentials on a read: the read's own text.
    half = {**owner_headers(), "X-LetAgents-Agent-Session-Id": a["session_id"]}
    for path in ("board-intents", "board-settings"):
        r = await client.get(f"{R}/{path}", headers=half)
        assert (r.status_code, r.json()) == (403, {"error": SESSION_REQUIRED_READ_TEXT})
    # Registering an intent acts: an owner token alone may not.
    body = {"action_type": "task_create", "payload": create_payload("u", None, None)}
    r = await client.post(f"{R}/board-intents", json=body, headers=owner_headers())
    assert (r.status_code, r.json()) == (403, {"error": OWNER_NOT_PERSON_TEXT})


async def test_a_stranger_is_refused_the_board_with_its_own_texts(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    await registered(client, registration(name="A"))
    stranger = person_headers(OTHER_PERSON_TOKEN)
    for path in ("board-intents", "board-settings"):
        r = await client.get(f"{R}/{path}", headers=stranger)
        assert (r.status_code, r.json()) == (403, {"error": PARTICIPANT_TEXT})
    r = await client.patch(f"{R}/board-settings", json={"manager_mode": "off"}, headers=stranger)
    assert (r.status_code, r.json()) == (403, {"error": SETTINGS_ADMIN_TEXT})
    r = await client.request("DELETE", f"{R}/board-managers/active", headers=stranger)
    assert (r.status_code, r.json()) == (403, {"error": SETTINGS_ADMIN_TEXT})


async def test_a_new_intents_notice_is_the_rooms_system_message(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a, b = await governed(client)
    body = {"action_type": "task_create", "payload": create_payload("t", None, None)}
    r = await client.post(f"{R}/board-intents", json=body, headers=session_headers(a))
    notice = r.json()["manager_notification"]
    assert (notice["delivered"], notice["target_manager_agent_session_id"]) == (
        True,
        b["session_id"],
    )
    r = await client.get(f"{R}/messages", headers=session_headers(b))
    shown = [m for m in r.json()["messages"] if m["id"] == notice["message_id"]]
    assert [(m["sender"], m["source"]) for m in shown] == [("letagents", "system")]


async def test_an_approval_lapses_when_its_managers_session_ends(
    autojump_clock: trio.testing.MockClock, client: httpx2.AsyncClient
) -> None:
    a, b = await governed(client)
    task_id = await new_task(client)
    close = await close_intent(client, a, task_id)
    assert (await decide(client, b, close["id"])).status_code == 200
    # B's session ends: its assignment is still marked active, but B manages no more.
    await disconnect(client, b)
    settings = (await client.get(f"{R}/board-settings", headers=person_headers())).json()
    assert settings["active_manager"] is None
    cancel = {"status": "cancelled", "board_intent_id": close["id"]}
    r = await client.patch(f"{R}/tasks/{task_id}", json=cancel, headers=session_headers(a))
    assert (r.status_code, r.json()["code"]) == (409, "board_intent_manager_changed")


@pytest.mark.parametrize("store", ["sqlite"], indirect=True)
async def test_a_read_shows_an_expired_intent_when_the_storage_refuses_to_record_it(
    autojump_clock: trio.testing.MockClock,
    room: Room,
    store: RoomStore,
    client: httpx2.AsyncClient,
) -> None:
    a, _ = await governed(client)
    intent = await intend(client, a, "task_create", create_payload("t", None, None))
    await trio.sleep(DAY_S + 1)
    read_only(store, on=True)
    try:
        r = await client.get(f"{R}/board-intents", headers=person_headers())
        assert r.status_code == 200, r.text
        assert [(i["id"], i["status"]) for i in r.json()["intents"]] == [(intent["id"], "expired")]
        r = await client.get(f"{R}/board-settings", headers=person_headers())
        assert (r.status_code, r.json()["pending_intent_count"]) == (200, 0)
    finally:
        read_only(store, on=False)
