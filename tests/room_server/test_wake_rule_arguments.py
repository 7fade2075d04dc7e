"""A wake rule's arguments for GitHub events and its expiry, checked as the letagents API does.

The reference room hears nothing from GitHub, but it keeps, lists and
expires these rules, so what it accepts and how it writes it down (a pull
request's number from ``#12`` or its URL, a branch without ``refs/heads/``,
lists in their canonical order) and what it refuses (each with the API's
text, whole) is what an agent sees. Pure calls of ``parse_rule``, as the
bad-rule table of ``test_wake_rules.py``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from letagents_trio.room_server._wake._rules import parse_rule
from letagents_trio.room_server._wire import Refusal

from .helpers import EPOCH

CHECK = "github.check_completed"
REVIEW = "github.review_submitted"
CLOSED = "github.pr_closed"
PULL = "https://github.com/owner/repo/pull"


@pytest.mark.parametrize(
    ("event", "arguments", "kept"),
    [
        (CHECK, {"branch": " refs/heads/feature/x "}, {"branch": "feature/x"}),
        (CHECK, {"branch": "b" * 255}, {"branch": "b" * 255}),
        (
            CHECK,
            {"pr": 7, "conclusions": ["failure", "success"]},
            {"pr": 7, "conclusions": ["success", "failure"]},
        ),
        (CHECK, {"mine": True}, {"mine": True}),
        (
            REVIEW,
            {"pr": f"{PULL}/42/files", "states": ["commented", "approved"]},
            {"pr": 42, "states": ["approved", "commented"]},
        ),
        (REVIEW, {"pr": 2**31 - 1}, {"pr": 2**31 - 1}),
        (REVIEW, {"pr": " 2147483647 "}, {"pr": 2**31 - 1}),
        (CLOSED, {"pr": "#12", "merged_only": True}, {"pr": 12, "merged_only": True}),
        (CLOSED, {"mine": True, "merged_only": False}, {"mine": True}),
    ],
)
def test_a_github_rule_keeps_its_arguments_in_canonical_form(
    event: str, arguments: dict[str, Any], kept: dict[str, Any]
) -> None:
    parsed = parse_rule({"event": event, "arguments": arguments}, EPOCH)
    assert (parsed.event, parsed.arguments, parsed.at) == (event, kept, None)


ONE_TARGET = f"{CLOSED} needs exactly one of pr, mine."
PR_TEXT = "pr must be a pull request number or its GitHub URL."
BRANCH_TEXT = "branch must be a Git branch name."


@pytest.mark.parametrize(
    ("event", "arguments", "text"),
    [
        (CLOSED, {"pr": 1, "mine": True}, ONE_TARGET),
        (CLOSED, {"mine": False}, ONE_TARGET),
        (CLOSED, {"pr": 3, "mine": False}, "mine must be true when set."),
        (CLOSED, {"pr": 3, "merged_only": "yes"}, "merged_only must be true or false."),
        (CHECK, {"branch": "x", "pr": 1}, f"{CHECK} needs exactly one of branch, pr, mine."),
        (
            REVIEW,
            {"pr": 1, "branch": "x"},
            f"{REVIEW} does not accept branch. Allowed: pr, mine, states.",
        ),
        (REVIEW, {"pr": 2**31}, PR_TEXT),
        (REVIEW, {"pr": "2147483648"}, PR_TEXT),
        (REVIEW, {"pr": "#0"}, PR_TEXT),
        (REVIEW, {"pr": True}, PR_TEXT),
        (REVIEW, {"pr": "https://gitlab.com/o/r/pull/3"}, PR_TEXT),
        (REVIEW, {"pr": 1.5}, PR_TEXT),
        (REVIEW, {"pr": 1, "states": []}, "states must be a nonempty list."),
        (REVIEW, {"pr": 1, "states": "approved"}, "states must be a nonempty list."),
        (
            REVIEW,
            {"pr": 1, "states": ["approved", "merged"]},
            "states accepts approved, changes_requested, commented.",
        ),
        (
            CHECK,
            {"pr": 1, "conclusions": ["green"]},
            "conclusions accepts success, failure, neutral, cancelled, skipped, timed_out,"
            " action_required, stale.",
        ),
        (CHECK, {"branch": "b" * 256}, BRANCH_TEXT),
        (CHECK, {"branch": "refs/heads/"}, BRANCH_TEXT),
        (CHECK, {"branch": 5}, BRANCH_TEXT),
        (CHECK, {"branch": "a..b"}, BRANCH_TEXT),
        (CHECK, {"branch": "a b"}, BRANCH_TEXT),
        (CHECK, {"branch": "/a"}, BRANCH_TEXT),
        (CHECK, {"branch": "a/"}, BRANCH_TEXT),
        (CHECK, {"branch": "a@{1}"}, BRANCH_TEXT),
    ],
)
def test_a_github_rules_bad_arguments_are_refused_whole(
    event: str, arguments: dict[str, Any], text: str
) -> None:
    with pytest.raises(Refusal) as refused:
        parse_rule({"event": event, "arguments": arguments}, EPOCH)
    assert (refused.value.reply.status, refused.value.reply.body) == (400, {"error": text})


NOW = datetime.fromtimestamp(EPOCH / 1000, UTC)


@pytest.mark.parametrize(
    ("expires_at", "in_ms"),
    [
        ((NOW + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%SZ"), 3_600_000),
        ((NOW + timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S"), 3_600_000),  # no zone: UTC
        ((NOW + timedelta(hours=3)).strftime("%Y-%m-%dT%H:%M:%S+02:00"), 3_600_000),
        ((NOW + timedelta(seconds=30)).strftime(" %Y-%m-%dT%H:%M:%SZ "), 30_000),
    ],
)
def test_expires_at_is_an_iso_time_read_as_utc_without_a_zone(expires_at: str, in_ms: int) -> None:
    rule = {"event": CLOSED, "arguments": {"mine": True}, "expires_at": expires_at}
    assert parse_rule(rule, EPOCH).expires_at == EPOCH + in_ms


@pytest.mark.parametrize("expires_at", ["", "  ", 5, "tomorrow"])
def test_an_expiry_that_is_no_iso_time_is_refused(expires_at: object) -> None:
    rule = {"event": CLOSED, "arguments": {"mine": True}, "expires_at": expires_at}
    with pytest.raises(Refusal) as refused:
        parse_rule(rule, EPOCH)
    assert refused.value.reply.body == {"error": "expires_at must be an ISO 8601 time."}
