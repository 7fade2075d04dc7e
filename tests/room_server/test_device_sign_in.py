"""Device sign-in on the reference room: start, a person's approval on the page, poll.

The page is driven as a person's browser drives it: GET the address the
program was given, read the form out of the HTML (its action, method and
fields), fill in the fields a person types, and submit it urlencoded.
Times are exact: the room runs on ``TrioClock(EPOCH)`` under the autojump clock.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import trio
import trio.lowlevel

from letagents_trio.room_server import Room, RoomConfig, RoomStore, TrioClock
from letagents_trio.room_server._auth import _device as device_rules
from letagents_trio.room_server._auth._device import (
    DEVICE_CODE_TTL,
    DEVICE_POLL_INTERVAL,
    normalize_user_code,
)

from ..device_page import approve_as_person
from .helpers import EPOCH, OTHER_PERSON_TOKEN, OWNER_TOKEN, PERSON_TOKEN, owner_headers

if TYPE_CHECKING:
    import httpx2
    import pytest


async def start(http: httpx2.AsyncClient) -> dict[str, Any]:
    answer = await http.post("/auth/device/start")
    assert answer.status_code == 201
    body: dict[str, Any] = answer.json()
    return body


async def test_start_answers_the_api_fields(
    client: httpx2.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    body = await start(client)
    assert set(body) == {"request_id", "user_code", "verification_uri", "expires_in", "interval"}
    assert len(body["request_id"]) == 32
    assert int(body["request_id"], 16) >= 0
    assert normalize_user_code(body["user_code"]) == body["user_code"]
    assert len(body["user_code"]) == 9
    assert body["verification_uri"] == "http://room.test/device"
    assert (body["expires_in"], body["interval"]) == (DEVICE_CODE_TTL, DEVICE_POLL_INTERVAL)


async def test_pending_until_a_person_approves_then_authorized_once(
    client: httpx2.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    body = await start(client)
    poll = f"/auth/device/poll/{body['request_id']}"
    pending = await client.get(poll)
    assert pending.status_code == 200
    assert pending.json() == {"status": "pending", "interval": 5, "expires_in": 900}

    page = await approve_as_person(
        client, body["verification_uri"], body["user_code"].lower().replace("-", ""), PERSON_TOKEN
    )
    assert page.status_code == 200
    assert "Device approved" in page.text
    assert PERSON_TOKEN not in page.text

    await trio.sleep(DEVICE_POLL_INTERVAL)
    authorized = await client.get(poll)
    assert authorized.status_code == 200
    answer = authorized.json()
    assert answer["status"] == "authorized"
    assert answer["account"]["login"] == "owner"
    token = answer["letagents_token"]
    assert len(token) == 64
    # The minted token is an owner token of the approving person's account.
    me = await client.get("/agents/me", headers=owner_headers(token))
    assert me.status_code == 200
    assert me.json()["account"]["login"] == "owner"
    # Handed out once: the request is gone.
    await trio.sleep(DEVICE_POLL_INTERVAL)
    again = await client.get(poll)
    assert again.status_code == 404
    assert again.json() == {"error": "Unknown or expired device authorization request"}


async def test_polling_within_the_interval_is_429(
    client: httpx2.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    body = await start(client)
    poll = f"/auth/device/poll/{body['request_id']}"
    assert (await client.get(poll)).status_code == 200
    await trio.sleep(DEVICE_POLL_INTERVAL - 0.001)
    quick = await client.get(poll)
    assert quick.status_code == 429
    assert quick.json() == {"error": "Polling too quickly", "interval": 5}
    await trio.sleep(0.001)
    assert (await client.get(poll)).status_code == 200


async def test_an_expired_request_is_unknown_and_its_code_cannot_be_approved(
    client: httpx2.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    body = await start(client)
    await trio.sleep(DEVICE_CODE_TTL)
    page = await approve_as_person(
        client, body["verification_uri"], body["user_code"], PERSON_TOKEN
    )
    assert page.status_code == 404
    assert "Unknown code" in page.text
    gone = await client.get(f"/auth/device/poll/{body['request_id']}")
    assert gone.status_code == 404


async def test_a_denied_request_answers_403_denied(
    client: httpx2.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    body = await start(client)
    page = await approve_as_person(
        client, body["verification_uri"], body["user_code"], OTHER_PERSON_TOKEN, choice="deny"
    )
    assert page.status_code == 200
    assert "Device denied" in page.text
    denied = await client.get(f"/auth/device/poll/{body['request_id']}")
    assert (denied.status_code, denied.json()) == (403, {"status": "denied"})


async def test_only_a_person_token_approves(
    client: httpx2.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    body = await start(client)
    for token in (OWNER_TOKEN, "nobody's token"):
        page = await approve_as_person(client, body["verification_uri"], body["user_code"], token)
        assert page.status_code == 401
        assert token not in page.text
    pending = await client.get(f"/auth/device/poll/{body['request_id']}")
    assert pending.json()["status"] == "pending"


async def test_a_decided_code_cannot_be_decided_again(
    client: httpx2.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    body = await start(client)
    first = await approve_as_person(
        client, body["verification_uri"], body["user_code"], PERSON_TOKEN
    )
    assert first.status_code == 200
    second = await approve_as_person(
        client, body["verification_uri"], body["user_code"], OTHER_PERSON_TOKEN, choice="deny"
    )
    assert second.status_code == 409
    await trio.lowlevel.checkpoint()
    answer = (await client.get(f"/auth/device/poll/{body['request_id']}")).json()
    assert answer["account"]["login"] == "owner"


async def test_the_page_escapes_what_it_echoes_and_refuses_an_empty_form(
    client: httpx2.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    page = await client.get("/device", params={"user_code": '"><script>x</script>'})
    assert "<script>x" not in page.text
    assert "&lt;script&gt;" in page.text
    assert page.headers["x-frame-options"] == "DENY"
    empty = await client.post("/device", data={"user_code": "", "decision": "approve"})
    assert empty.status_code == 400


async def test_a_minted_token_outlives_a_restart(
    store: RoomStore, client: httpx2.AsyncClient, autojump_clock: trio.testing.MockClock
) -> None:
    body = await start(client)
    await approve_as_person(client, body["verification_uri"], body["user_code"], PERSON_TOKEN)
    token = (await client.get(f"/auth/device/poll/{body['request_id']}")).json()["letagents_token"]
    again = Room(store=store, clock=TrioClock(EPOCH), config=RoomConfig())
    me = again.me(token)
    assert me.status == 200
    assert me.body["account"]["login"] == "owner"
    assert again.me("not-" + token).status == 401


async def test_pending_requests_are_bounded(
    client: httpx2.AsyncClient,
    autojump_clock: trio.testing.MockClock,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(device_rules, "MAX_PENDING", 2)
    await start(client)
    await start(client)
    full = await client.post("/auth/device/start")
    assert full.status_code == 503
    assert full.json() == {"error": "Too many device sign-ins are pending. Try again later."}
    await trio.sleep(DEVICE_CODE_TTL)  # expired ones make room
    assert (await client.post("/auth/device/start")).status_code == 201
