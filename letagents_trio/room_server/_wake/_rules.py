"""Wake rules as pure decisions: what a rule may ask for, when it is due, what wakes say.

A wake rule is ``{event, arguments}`` plus ``note``, ``repeat`` and
``expires_at``, the letagents API's shape (its ``shared/wake-rules.mjs``):

* ``timer`` ``{at}`` or ``{after_ms}``: at least the room's minimum lead
  (30 s) and at most 7 days away; it fires once, and a timer that could not
  fire on time still fires within 10 minutes (its expiry);
* ``task.status_changed`` ``{task_id, to?}``: fires when the task leaves the
  status it had when the rule was made (or moves to one of ``to``);
* ``github.check_completed``, ``github.review_submitted``,
  ``github.pr_closed``: validated, listed and expired like the others; the
  reference room hears nothing from GitHub, so they never fire here.

A rule expires 24 h after it is made unless ``expires_at`` says otherwise
(at most 7 days); a repeating rule wakes at most once a minute. Two requests
for the same thing (:func:`identity_key`) are one rule.

:func:`parse_rule` checks a request (refusing with the API's texts),
:func:`notice` words the message that wakes the agent, and
:func:`rule_json` renders a row as the API does.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any, Final, NoReturn, final

import attrs

from .._board._tasks import TASK_STATUSES
from .._messaging._ids import message_id
from .._wire import iso, refuse

if TYPE_CHECKING:
    from .._storage._agent_rows import WakeRuleRow

__all__ = [
    "ACTIVE_PER_AGENT",
    "DEFAULT_TTL_MS",
    "EVENTS",
    "MAX_TTL_MS",
    "MIN_LEAD_MS",
    "REPEAT_DEBOUNCE_MS",
    "TIMER_GRACE_MS",
    "WAKE_SOURCE",
    "ParsedRule",
    "identity_key",
    "notice",
    "parse_rule",
    "rule_json",
]

EVENTS: Final = (
    "timer",
    "task.status_changed",
    "github.check_completed",
    "github.review_submitted",
    "github.pr_closed",
)
# The letagents API's WAKE_RULE_LIMITS.
ACTIVE_PER_AGENT: Final = 20
DEFAULT_TTL_MS: Final = 24 * 60 * 60 * 1000
MAX_TTL_MS: Final = 7 * 24 * 60 * 60 * 1000
MIN_LEAD_MS: Final = 30 * 1000
NOTE_MAX: Final = 280
BRANCH_MAX: Final = 255
REPEAT_DEBOUNCE_MS: Final = 60 * 1000
TIMER_GRACE_MS: Final = 10 * 60 * 1000
# The source of the room message that wakes an agent.
WAKE_SOURCE: Final = "wake_rule"

CHECK_CONCLUSIONS: Final = (
    "success",
    "failure",
    "neutral",
    "cancelled",
    "skipped",
    "timed_out",
    "action_required",
    "stale",
)
REVIEW_STATES: Final = ("approved", "changes_requested", "commented")
# The conclusions that make a check rule wait for "a CI failure" when it names only these.
_FAILED_CONCLUSIONS: Final = frozenset(
    ("failure", "cancelled", "timed_out", "action_required", "stale")
)
# A review rule waiting for one state names it; any other waits for "a review".
_REVIEW_WORDS: Final = {("approved",): "an approval", ("changes_requested",): "requested changes"}
# How a notice names a task status: the two with an underscore as words, the rest as written.
_STATUS_LABELS: Final = {"in_progress": "in progress", "in_review": "review"}
_TASK_ID: Final = re.compile(r"task_[1-9]\d{0,9}")
_PR_URL: Final = re.compile(
    r"#?(\d{1,10})|https://github\.com/[^/\s]+/[^/\s]+/pull/(\d{1,10})(?:[/?#].*)?"
)
_BAD_BRANCH: Final = re.compile(r"[\s~^:?*\[\\\x00-\x1f\x7f]|\.\.|@\{|/$|^/")
_CONTROL: Final = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


@final
@attrs.frozen(kw_only=True)
class ParsedRule:
    """A checked request: the canonical rule, with its times in epoch ms."""

    event: str
    arguments: dict[str, Any]
    repeat: bool
    expires_at: int
    note: str | None
    at: int | None = None


def _bad(text: str) -> NoReturn:
    refuse(400, text)


def _iso_ms(value: object) -> int | None:
    """Epoch ms of an ISO 8601 time (no zone: UTC), or None."""
    if not isinstance(value, str) or not value.strip():
        return None
    try:
        moment = datetime.fromisoformat(value.strip())  # reads a "Z" since Python 3.11
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return round(moment.timestamp() * 1000)


def _object(value: object, name: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        _bad(f"{name} must be an object.")
    return dict(value)


def _allow_only(args: Mapping[str, Any], keys: Sequence[str], name: str) -> None:
    unknown = [key for key in args if key not in keys]
    if unknown:
        _bad(f"{name} does not accept {', '.join(unknown)}. Allowed: {', '.join(keys)}.")


def _subset(value: object, allowed: Sequence[str], name: str) -> list[str] | None:
    if value is None:
        return None
    if not isinstance(value, list) or not value:
        _bad(f"{name} must be a nonempty list.")
    assert isinstance(value, list)
    if any(item not in allowed for item in value):
        _bad(f"{name} accepts {', '.join(allowed)}.")
    return [item for item in allowed if item in value]  # canonical order


def _pr(value: object) -> int | None:
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and 0 < value <= 2**31 - 1:
        return value
    if isinstance(value, str):
        match = _PR_URL.fullmatch(value.strip())
        number = int(match.group(1) or match.group(2)) if match else 0
        if 0 < number <= 2**31 - 1:
            return number
    _bad("pr must be a pull request number or its GitHub URL.")


def _branch(value: object) -> str | None:
    if value is None:
        return None
    branch = value.strip().removeprefix("refs/heads/") if isinstance(value, str) else ""
    if not branch or len(branch) > BRANCH_MAX or _BAD_BRANCH.search(branch):
        _bad("branch must be a Git branch name.")
    return branch


def _one_target(args: Mapping[str, Any], event: str, targets: Sequence[str]) -> None:
    # Absent, null and false name no target; 0 does (then refused), though 0 == False.
    present = [key for key in targets if args.get(key) is not None and args[key] is not False]
    if len(present) != 1:
        _bad(f"{event} needs exactly one of {', '.join(targets)}.")
    if "mine" in args and args["mine"] is not True:
        _bad("mine must be true when set.")


def _github(event: str, args: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    extra: tuple[str, object]
    if event == "github.check_completed":
        _allow_only(args, ("branch", "pr", "mine", "conclusions"), event)
        _one_target(args, event, ("branch", "pr", "mine"))
        if args.get("branch") is not None:
            out["branch"] = _branch(args["branch"])
        extra = ("conclusions", _subset(args.get("conclusions"), CHECK_CONCLUSIONS, "conclusions"))
    elif event == "github.review_submitted":
        _allow_only(args, ("pr", "mine", "states"), event)
        _one_target(args, event, ("pr", "mine"))
        extra = ("states", _subset(args.get("states"), REVIEW_STATES, "states"))
    else:
        _allow_only(args, ("pr", "mine", "merged_only"), event)
        _one_target(args, event, ("pr", "mine"))
        merged_only = args.get("merged_only")
        if merged_only is not None and not isinstance(merged_only, bool):
            _bad("merged_only must be true or false.")
        extra = ("merged_only", True if merged_only else None)
    if args.get("pr") is not None:
        out["pr"] = _pr(args["pr"])
    if args.get("mine"):
        out["mine"] = True
    if extra[1] is not None:
        out[extra[0]] = extra[1]
    return out


def _arguments(
    event: str, raw: object, now: int, min_lead_ms: int
) -> tuple[dict[str, Any], int | None]:
    args = _object(raw, "arguments")
    if event == "timer":
        _allow_only(args, ("at", "after_ms"), event)
        if ("at" in args) == ("after_ms" in args):
            _bad("timer needs exactly one of at or after_ms.")
        if "at" in args:
            at = _iso_ms(args["at"])
        else:
            after = args["after_ms"]
            ok = isinstance(after, int | float) and not isinstance(after, bool)
            at = round(now + after) if ok and abs(after) < 2**53 else None
        if at is None:
            _bad("at must be an ISO 8601 time.")
        assert at is not None
        if at < now + min_lead_ms:
            _bad(f"A timer must be at least {min_lead_ms // 1000} seconds away.")
        if at > now + MAX_TTL_MS:
            _bad("A timer can be at most 7 days away.")
        return {"at": iso(at)}, at
    if event == "task.status_changed":
        _allow_only(args, ("task_id", "to"), event)
        to = _subset(args.get("to"), TASK_STATUSES, "to")
        task_id = args.get("task_id")
        if not isinstance(task_id, str) or not _TASK_ID.fullmatch(task_id.strip()):
            _bad("task_id must be a task id such as task_41.")
        assert isinstance(task_id, str)
        return {"task_id": task_id.strip(), **({"to": to} if to else {})}, None
    return _github(event, args), None


def parse_rule(body: object, now: int, *, min_lead_ms: int = MIN_LEAD_MS) -> ParsedRule:
    """Check what an agent asked for; the canonical rule, or refuse 400 with the API's text.

    Args:
        body: the request's ``rule``.
        now: the room's time (epoch ms).
        min_lead_ms: the least time ahead a timer (or an ``expires_at``) may be.
    """
    rule = _object(body, "A wake rule")
    event = rule.get("event")
    if event not in EVENTS:
        _bad(f"event must be one of {', '.join(EVENTS)}.")
    assert isinstance(event, str)
    arguments, at = _arguments(event, rule.get("arguments"), now, min_lead_ms)
    repeat = rule.get("repeat")
    if repeat is not None and not isinstance(repeat, bool):
        _bad("repeat must be true or false.")
    if repeat is True and event == "timer":
        _bad("A timer fires once; add another timer to wake again.")
    expires_raw = rule.get("expires_at")
    if at is not None:
        if expires_raw is not None:
            _bad("A timer expires when it fires; leave expires_at out.")
        expires = at + TIMER_GRACE_MS
    elif expires_raw is not None:
        found = _iso_ms(expires_raw)
        if found is None:
            _bad("expires_at must be an ISO 8601 time.")
        assert found is not None
        if found < now + min_lead_ms:
            _bad(f"expires_at must be at least {min_lead_ms // 1000} seconds away.")
        if found > now + MAX_TTL_MS:
            _bad("expires_at can be at most 7 days away.")
        expires = found
    else:
        expires = now + DEFAULT_TTL_MS
    note = rule.get("note")
    if note is not None and not isinstance(note, str):
        _bad(f"note must be plain text of at most {NOTE_MAX} characters.")
    note = note.strip() if isinstance(note, str) else None
    if note and (len(note) > NOTE_MAX or _CONTROL.search(note)):
        _bad(f"note must be plain text of at most {NOTE_MAX} characters.")
    return ParsedRule(
        event=event,
        arguments=arguments,
        repeat=bool(repeat),
        expires_at=expires,
        note=note or None,
        at=at,
    )


def identity_key(event: str, arguments: Mapping[str, Any]) -> str:
    """Two requests for the same thing are one rule (a timer's time is part of it)."""
    return f"{event}:{json.dumps(arguments, sort_keys=True, separators=(',', ':'))}"


def _status_label(status: str) -> str:
    return _STATUS_LABELS.get(status, status)


def _waiting(rule: WakeRuleRow) -> str:
    args = rule.arguments
    if rule.event == "timer":
        return f"until {str(args.get('at', ''))[:16].replace('T', ' ')} UTC"
    if rule.event == "task.status_changed":
        to = [_status_label(s) for s in args.get("to", ())]
        if not to:
            return f"for {args.get('task_id')} to change status"
        choices = to[0] if len(to) == 1 else f"{', '.join(to[:-1])} or {to[-1]}"
        return f"for {args.get('task_id')} to move to {choices}"
    pr = f"#{args['pr']}" if args.get("pr") else None
    if rule.event == "github.check_completed":
        conclusions = args.get("conclusions") or ()
        failures = bool(conclusions) and all(c in _FAILED_CONCLUSIONS for c in conclusions)
        what = "a CI failure" if failures else "CI"
        return f"for {what} on {args.get('branch') or pr or 'my branches'}"
    if rule.event == "github.review_submitted":
        what = _REVIEW_WORDS.get(tuple(args.get("states") or ()), "a review")
        return f"for {what} on {pr or 'my pull requests'}"
    return f"for {pr or 'my pull requests'} to {'merge' if args.get('merged_only') else 'close'}"


def notice(
    rule: WakeRuleRow,
    outcome: str,
    *,
    facts: Mapping[str, str] | None = None,
    ended: str | None = None,
) -> tuple[str, str]:
    """The wake message's ``text`` (what the agent reads) and ``display_text`` (the room's line).

    Args:
        rule: the rule, before this wake is counted.
        outcome: ``fired``, ``expired`` or ``ended``.
        facts: for a task rule that fired, ``task_id``, ``status`` and ``previous_status``.
        ended: why the rule ended early (its task is done or cancelled).
    """
    name = rule.agent_name.strip() or "Agent"
    waiting = _waiting(rule)
    note = [f"Your note: {rule.note}"] if rule.note else []
    if outcome == "ended":
        text = [
            f"Your wake rule {rule.rule_id} ended because {ended}. You were waiting {waiting}.",
            *note,
            "Decide whether to wait for something else (add a new wake rule) or move on,"
            " and tell the room if plans changed.",
        ]
        return "\n".join(text), f"{name} stopped waiting · {ended}"
    if outcome == "expired":
        fired = rule.fire_count
        first = (
            f"Your repeating wake rule {rule.rule_id} reached its expiry after waking you"
            f" {fired} time{'' if fired == 1 else 's'}. You were waiting {waiting}."
            if fired
            else f"Your wake rule {rule.rule_id} expired without firing."
            f" You were waiting {waiting}."
        )
        text = [
            first,
            *note,
            "Decide whether to keep waiting (add a new wake rule) or move on,"
            " and tell the room if plans changed.",
        ]
        object_ = waiting.split(" ", 1)[1]
        shown = object_ if fired else f"{object_} didn't happen in time"
        return "\n".join(text), f"{name} stopped waiting · {shown}"
    if rule.event == "timer":
        occurrence, details = "Scheduled check-in", []
    else:  # a task's move: the board's facts name it whole
        assert facts is not None, "a task rule fires with the board's facts"
        task_id, status = facts["task_id"], facts["status"]
        occurrence = f"{task_id} moved to {_status_label(status)}"
        details = ["", f"- {task_id}: {facts['previous_status']} → {status}"]
    more = (
        f"This rule keeps watching until {iso(rule.expires_at)}. Cancel it with cancel_wake_rule"
        " when you no longer need it."
        if rule.repeat and ended is None
        else "This rule is finished. Add another wake rule if you need to keep waiting."
    )
    text = [f"Your wake rule {rule.rule_id} fired: {occurrence}.", *note, *details, "", more]
    return "\n".join(text), f"{name} woke up · {occurrence}"


def rule_json(rule: WakeRuleRow) -> dict[str, Any]:
    """A rule as the API renders it (``toWakeRule``)."""
    return {
        "id": rule.rule_id,
        "room_id": rule.room_id,
        "agent_key": rule.agent_key,
        "agent_name": rule.agent_name,
        "event": rule.event,
        "arguments": rule.arguments,
        "repeat": rule.repeat,
        "expires_at": iso(rule.expires_at),
        "note": rule.note,
        "status": rule.status,
        "created_at": iso(rule.created_at),
        "updated_at": iso(rule.updated_at),
        "fire_count": rule.fire_count,
        "last_fired_at": iso(rule.last_fired_at),
        "wake_message_id": (
            None if rule.wake_message_id is None else message_id(rule.wake_message_id)
        ),
        "cancelled_by": rule.cancelled_by,
        "ended_reason": rule.ended_reason,
    }
