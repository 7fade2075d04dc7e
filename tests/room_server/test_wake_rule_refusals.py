"""Every refusal of a wake rule, whole, and the rule's bounds at their edge.

An agent corrects its request from the room's text, so each refusal is held
as the letagents API writes it (``shared/wake-rules.mjs``), the whole body,
and each bound passes at its edge and is refused one step past it: a timer
30 s to 7 days away, an expiry likewise, a note of 280 characters, a pull
request from #1. Pure calls of ``parse_rule``, as in
``test_wake_rule_arguments.py``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from letagents_trio.room_server._wake._rules import parse_rule
from letagents_trio.room_server._wire import Refusal, iso

from .helpers import EPOCH

WEEK_MS = 7 * 24 * 3_600_000
TASK = "task.status_changed"
CHECK = "github.check_completed"
REVIEW = "github.review_submitted"
CLOSED = "github.pr_closed"
NOTE_TEXT = "note must be plain text of at most 280 characters."


def refusal(rule: object, *, min_lead_ms: int = 30_000) -> Any:
    with pytest.raises(Refusal) as refused:
        parse_rule(rule, EPOCH, min_lead_ms=min_lead_ms)
    assert refused.value.reply.status == 400
    return refused.value.reply.body


def after(ms: object) -> dict[str, Any]:
    return {"event": "timer", "arguments": {"after_ms": ms}}


def expiring(at_ms: int) -> dict[str, Any]:
    return {"event": CLOSED, "arguments": {"pr": 1}, "expires_at": iso(at_ms)}


@pytest.mark.parametrize(
    ("rule", "text"),
    [
        (["timer"], "A wake rule must be an object."),
        ({"event": "timer", "arguments": [1]}, "arguments must be an object."),
        ({"event": "timer", "arguments": {}}, "timer needs exactly one of at or after_ms."),
        (
            {"event": "timer", "arguments": {"at": iso(EPOCH + 60_000), "after_ms": 60_000}},
            "timer needs exactly one of at or after_ms.",
        ),
        (
            {"event": "timer", "arguments": {"x": 1, "y": 2}},
            "timer does not accept x, y. Allowed: at, after_ms.",
        ),
        (
            {"event": TASK, "arguments": {"task_id": "task_1", "x": 1}},
            f"{TASK} does not accept x. Allowed: task_id, to.",
        ),
        (
            {"event": CHECK, "arguments": {"pr": 1, "x": 1}},
            f"{CHECK} does not accept x. Allowed: branch, pr, mine, conclusions.",
        ),
        (
            {"event": CLOSED, "arguments": {"pr": 1, "x": 1}},
            f"{CLOSED} does not accept x. Allowed: pr, mine, merged_only.",
        ),
        ({"event": REVIEW, "arguments": {}}, f"{REVIEW} needs exactly one of pr, mine."),
        (
            {"event": TASK, "arguments": {"task_id": "task_1", "to": []}},
            "to must be a nonempty list.",
        ),
        ({**after(60_000), "repeat": "yes"}, "repeat must be true or false."),
        (
            {**after(60_000), "expires_at": iso(EPOCH + 3_600_000)},
            "A timer expires when it fires; leave expires_at out.",
        ),
        ({**expiring(EPOCH + 3_600_000), "note": 5}, NOTE_TEXT),
        ({**expiring(EPOCH + 3_600_000), "note": "a\x07b"}, NOTE_TEXT),
        ({**expiring(EPOCH + 3_600_000), "note": "n" * 281}, NOTE_TEXT),
        (after(True), "at must be an ISO 8601 time."),
        (after("60000"), "at must be an ISO 8601 time."),
        (after(2**53), "at must be an ISO 8601 time."),
        (
            {"event": CLOSED, "arguments": {"pr": 0}},
            "pr must be a pull request number or its GitHub URL.",
        ),
        (
            {"event": CLOSED, "arguments": {"pr": 3, "mine": 0}},
            f"{CLOSED} needs exactly one of pr, mine.",
        ),
    ],
)
def test_each_refusal_is_the_apis_text_whole(rule: object, text: str) -> None:
    assert refusal(rule) == {"error": text}


@pytest.mark.parametrize(
    ("rule", "kept"),
    [
        (after(30_000), EPOCH + 30_000),  # the least lead
        (after(WEEK_MS), EPOCH + WEEK_MS),  # the longest wait
    ],
)
def test_a_timer_passes_at_its_edges(rule: dict[str, Any], kept: int) -> None:
    assert parse_rule(rule, EPOCH).at == kept


def test_a_timer_is_refused_one_millisecond_past_its_edges() -> None:
    assert refusal(after(29_999)) == {"error": "A timer must be at least 30 seconds away."}
    assert refusal(after(WEEK_MS + 1)) == {"error": "A timer can be at most 7 days away."}


def test_an_expiry_passes_at_its_edges_and_is_refused_past_them() -> None:
    assert parse_rule(expiring(EPOCH + 30_000), EPOCH).expires_at == EPOCH + 30_000
    assert parse_rule(expiring(EPOCH + WEEK_MS), EPOCH).expires_at == EPOCH + WEEK_MS
    soon = {"error": "expires_at must be at least 30 seconds away."}
    assert refusal(expiring(EPOCH + 29_999)) == soon
    assert refusal(expiring(EPOCH - 1)) == soon
    late = {"error": "expires_at can be at most 7 days away."}
    assert refusal(expiring(EPOCH + WEEK_MS + 1)) == late


def test_a_room_with_another_least_lead_names_it_in_whole_seconds() -> None:
    assert refusal(after(44_999), min_lead_ms=45_000) == {
        "error": "A timer must be at least 45 seconds away."
    }
    assert refusal(expiring(EPOCH + 44_999), min_lead_ms=45_000) == {
        "error": "expires_at must be at least 45 seconds away."
    }


def test_a_note_of_280_characters_is_kept_and_one_of_blanks_is_none() -> None:
    assert parse_rule({**expiring(EPOCH + 60_000), "note": "n" * 280}, EPOCH).note == "n" * 280
    assert parse_rule({**expiring(EPOCH + 60_000), "note": "  "}, EPOCH).note is None


@pytest.mark.parametrize(
    ("event", "arguments", "kept"),
    [
        (REVIEW, {"pr": 1}, {"pr": 1}),
        (REVIEW, {"pr": "#1"}, {"pr": 1}),
        (REVIEW, {"mine": True}, {"mine": True}),
    ],
)
def test_the_first_pull_request_and_the_agents_own_are_targets(
    event: str, arguments: dict[str, Any], kept: dict[str, Any]
) -> None:
    assert parse_rule({"event": event, "arguments": arguments}, EPOCH).arguments == kept


@pytest.fixture
def new_york() -> Iterator[None]:
    """The process's local zone set to New York (UTC-5 in January) for one test."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TZ", "America/New_York")
        time.tzset()
        try:
            yield
        finally:
            patch.undo()
            time.tzset()


@pytest.mark.usefixtures("new_york")
def test_a_time_without_a_zone_is_utc_whatever_the_machines_zone() -> None:
    an_hour = datetime.fromtimestamp(EPOCH / 1000, UTC) + timedelta(hours=1)
    rule = {"event": CLOSED, "arguments": {"pr": 1}}
    rule["expires_at"] = an_hour.strftime("%Y-%m-%dT%H:%M:%S")
    assert parse_rule(rule, EPOCH).expires_at == EPOCH + 3_600_000
