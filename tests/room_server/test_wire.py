"""_wire: refusals as control flow, token comparison, room ids, toISOString of row times."""

from __future__ import annotations

import random

import pytest

from letagents_trio.room_server._storage._rows import SessionRow
from letagents_trio.room_server._wire import (
    Refusal,
    hash_token,
    iso,
    refuse,
    token_matches,
    valid_room_id,
)


def test_iso_writes_whole_milliseconds_as_javascript_does() -> None:
    assert iso(None) is None
    assert iso(0) == "1970-01-01T00:00:00.000Z"
    assert iso(1_767_225_600_123) == "2026-01-01T00:00:00.123Z"
    # ms / 1000 * 1000 lands a hair below these in binary floating point.
    for ms in random.Random(9).sample(range(4_000_000_000_000), 20_000):
        assert str(iso(ms)).endswith(f".{ms % 1000:03d}Z"), ms


def test_a_refusal_carries_its_reply() -> None:
    with pytest.raises(Refusal) as caught:
        refuse(409, "taken", code="c", active_session_id=None)
    reply = caught.value.reply
    assert (reply.status, dict(reply.body)) == (
        409,
        {"error": "taken", "code": "c", "active_session_id": None},
    )


def test_only_the_sessions_own_token_matches() -> None:
    row = SessionRow(session_id="s", room_id="r", token_hash=hash_token("secret"))
    assert token_matches(row, "secret")
    assert not token_matches(row, "Secret")


@pytest.mark.parametrize(
    ("room_id", "valid"),
    [
        ("r", True),
        ("owner/repo", True),
        ("", False),
        (" r", False),
        ("r\n", False),
        ("x" * 257, False),
    ],
)
def test_room_ids_are_printable_unpadded_and_bounded(room_id: str, valid: bool) -> None:
    assert valid_room_id(room_id) is valid
