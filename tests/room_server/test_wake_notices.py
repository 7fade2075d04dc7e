"""The messages that wake an agent, word for word, and what each says it waited for.

A wake is a room message: ``text`` is what the woken agent reads (it names
the rule, what happened, the agent's own note, and what to do next) and
``display_text`` is the one line people see in the room. Both follow the
letagents API's ``formatWakeNotice`` and ``describeWakeRule``, so an agent
moving between a hosted room and ours reads the same words. One exact text
per kind of notice (fired, fired and still watching, ended, expired with and
without wakes), and one row per kind of rule for the phrase saying what the
agent waited for. Pure calls of ``notice``; ``test_wake_rules.py`` holds the
same messages as the room posts them.
"""

from __future__ import annotations

from typing import Any

import pytest

from letagents_trio.room_server._storage._agent_rows import WakeRuleRow
from letagents_trio.room_server._wake._rules import identity_key, notice

from .helpers import EPOCH

RULE_ID = "wake_0123456789abcdef0123"
HOUR_MS = 3_600_000


def rule_row(event: str, arguments: dict[str, Any], **fields: Any) -> WakeRuleRow:
    """A rule as the room keeps it: made at EPOCH by Ada, expiring a day later."""
    values: dict[str, Any] = {
        "rule_id": RULE_ID,
        "room_id": "room_shared",
        "agent_key": "owner/ada",
        "agent_name": "Ada",
        "event": event,
        "arguments": arguments,
        "identity_key": identity_key(event, arguments),
        "next_check_at": EPOCH + 24 * HOUR_MS,
        "expires_at": EPOCH + 24 * HOUR_MS,
        "created_at": EPOCH,
        "updated_at": EPOCH,
        **fields,
    }
    return WakeRuleRow(**values)


TASK = "task.status_changed"
TIMER_AT = "2027-01-15T09:30:00.000Z"
MOVED = {"task_id": "task_3", "status": "in_review", "previous_status": "in_progress"}


def test_a_timer_that_fires_tells_its_agent_the_rule_is_finished() -> None:
    rule = rule_row("timer", {"at": TIMER_AT})
    assert notice(rule, "fired") == (
        f"Your wake rule {RULE_ID} fired: Scheduled check-in.\n"
        "\n"
        "This rule is finished. Add another wake rule if you need to keep waiting.",
        "Ada woke up · Scheduled check-in",
    )


def test_a_task_rule_that_fires_names_the_move_and_gives_back_the_agents_note() -> None:
    rule = rule_row(TASK, {"task_id": "task_3"}, note="merge after review")
    assert notice(rule, "fired", facts=MOVED) == (
        f"Your wake rule {RULE_ID} fired: task_3 moved to review.\n"
        "Your note: merge after review\n"
        "\n"
        "- task_3: in_progress → in_review\n"
        "\n"
        "This rule is finished. Add another wake rule if you need to keep waiting.",
        "Ada woke up · task_3 moved to review",
    )


def test_a_repeating_rule_that_fires_says_until_when_it_keeps_watching() -> None:
    facts = {"task_id": "task_3", "status": "blocked", "previous_status": "in_progress"}
    rule = rule_row(TASK, {"task_id": "task_3"}, repeat=True)
    assert notice(rule, "fired", facts=facts) == (
        f"Your wake rule {RULE_ID} fired: task_3 moved to blocked.\n"
        "\n"
        "- task_3: in_progress → blocked\n"
        "\n"
        "This rule keeps watching until 2027-01-16T08:00:00.000Z. Cancel it with"
        " cancel_wake_rule when you no longer need it.",
        "Ada woke up · task_3 moved to blocked",
    )


def test_a_rule_whose_task_ended_says_why_and_what_it_waited_for() -> None:
    rule = rule_row(TASK, {"task_id": "task_3", "to": ["in_review"]}, note="then merge")
    assert notice(rule, "ended", ended="task_3 is done") == (
        f"Your wake rule {RULE_ID} ended because task_3 is done. You were waiting for task_3"
        " to move to review.\n"
        "Your note: then merge\n"
        "Decide whether to wait for something else (add a new wake rule) or move on, and tell"
        " the room if plans changed.",
        "Ada stopped waiting · task_3 is done",
    )


def test_a_rule_that_expired_without_firing_says_what_did_not_happen_in_time() -> None:
    rule = rule_row("github.pr_closed", {"pr": 12}, note="release after")
    assert notice(rule, "expired") == (
        f"Your wake rule {RULE_ID} expired without firing. You were waiting for #12 to close.\n"
        "Your note: release after\n"
        "Decide whether to keep waiting (add a new wake rule) or move on, and tell the room if"
        " plans changed.",
        "Ada stopped waiting · #12 to close didn't happen in time",
    )


@pytest.mark.parametrize(("fired", "times"), [(1, "1 time"), (2, "2 times")])
def test_a_repeating_rule_that_expired_counts_the_times_it_woke_its_agent(
    fired: int, times: str
) -> None:
    rule = rule_row(TASK, {"task_id": "task_3"}, repeat=True, fire_count=fired)
    assert notice(rule, "expired") == (
        f"Your repeating wake rule {RULE_ID} reached its expiry after waking you {times}."
        " You were waiting for task_3 to change status.\n"
        "Decide whether to keep waiting (add a new wake rule) or move on, and tell the room if"
        " plans changed.",
        "Ada stopped waiting · task_3 to change status",
    )


@pytest.mark.parametrize("name", ["", "   "])
def test_an_agent_without_a_name_is_shown_as_agent(name: str) -> None:
    rule = rule_row("timer", {"at": TIMER_AT}, agent_name=name)
    assert notice(rule, "fired")[1] == "Agent woke up · Scheduled check-in"


@pytest.mark.parametrize(
    ("event", "arguments", "waiting"),
    [
        ("timer", {"at": TIMER_AT}, "until 2027-01-15 09:30 UTC"),
        (TASK, {"task_id": "task_3"}, "for task_3 to change status"),
        (TASK, {"task_id": "task_3", "to": ["in_progress"]}, "for task_3 to move to in progress"),
        (
            TASK,
            {"task_id": "task_3", "to": ["in_review", "done"]},
            "for task_3 to move to review or done",
        ),
        (
            TASK,
            {"task_id": "task_3", "to": ["proposed", "in_progress", "merged"]},
            "for task_3 to move to proposed, in progress or merged",
        ),
        ("github.check_completed", {"pr": 7}, "for CI on #7"),
        ("github.check_completed", {"branch": "feature/x"}, "for CI on feature/x"),
        ("github.check_completed", {"mine": True}, "for CI on my branches"),
        (
            "github.check_completed",
            {"pr": 7, "conclusions": ["failure", "timed_out"]},
            "for a CI failure on #7",
        ),
        (
            "github.check_completed",
            {"pr": 7, "conclusions": ["success", "failure"]},
            "for CI on #7",
        ),
        ("github.review_submitted", {"pr": 9}, "for a review on #9"),
        ("github.review_submitted", {"mine": True}, "for a review on my pull requests"),
        ("github.review_submitted", {"pr": 9, "states": ["approved"]}, "for an approval on #9"),
        (
            "github.review_submitted",
            {"pr": 9, "states": ["changes_requested"]},
            "for requested changes on #9",
        ),
        (
            "github.review_submitted",
            {"pr": 9, "states": ["approved", "commented"]},
            "for a review on #9",
        ),
        ("github.pr_closed", {"pr": 12}, "for #12 to close"),
        ("github.pr_closed", {"mine": True, "merged_only": True}, "for my pull requests to merge"),
    ],
)
def test_each_kind_of_rule_says_what_its_agent_waited_for(
    event: str, arguments: dict[str, Any], waiting: str
) -> None:
    text, display = notice(rule_row(event, arguments), "expired")
    assert text.startswith(
        f"Your wake rule {RULE_ID} expired without firing. You were waiting {waiting}.\n"
    )
    assert display == f"Ada stopped waiting · {waiting.split(' ', 1)[1]} didn't happen in time"
