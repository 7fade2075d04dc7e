"""Wake rules kept by the room: the routes, the timers on the room's clock, the task hook.

:class:`WakeBoard` answers the wake-rule routes of the letagents API:

* ``POST …/wake-rules`` ``{rule}``: a worker session adds a rule for itself;
  201 ``{rule, created: true}``, or 200 with the active rule it already has
  for the same thing;
* ``GET …/wake-rules?agent_key=``: ``{room_id, active, recent}`` (the active
  rules by next check, then the 50 that ended most recently, within 7 days);
* ``POST …/wake-rules/{id}/cancel``: an agent cancels its own rule, a room
  admin any rule; ``{rule}``.

**When a rule is looked at.** Every active rule has a ``next_check_at``: a
timer's time, the end of a repeating rule's quiet minute, else its expiry.
:meth:`WakeBoard.run` sleeps on trio's clock until the soonest of them (at
most a minute, so a wall clock that jumps is caught up), or until a rule is
added, cancelled or its task moves, and then looks at every rule that is due
(:meth:`WakeBoard.check_due`), and at every rule whose wake the store refused
(after a failed look it waits 5 s). Under ``MockClock`` with the room's
``TrioClock`` a timer fires at exactly its time. Rules live in the store, so
a room restarted on the same SQLite file picks them up where they were: a
timer missed while the room was down fires late within its 10-minute grace,
and expires after it.

**Task rules** fire from the task's own transition: the board calls
:meth:`WakeBoard.task_changed` right after it writes a status change. A rule
fires when the task's status differs from its baseline (and is one of ``to``,
when given); a task that ends (``done``, ``cancelled``) in a status the rule
does not wait for retires it with an ``ended`` notice.

**Waking** is one room message from ``letagents`` addressed to the agent
(``addressed_to: {agent_key, reason: "wake_rule"}``, ``source: wake_rule``),
posted in the same store transaction as the rule's new state, once per wake
(its dedupe id names the rule and the wake's number). The reference room hears
nothing from GitHub: GitHub rules are accepted, listed, cancelled and
expired, never fired.
"""

from __future__ import annotations

import functools
import logging
import secrets
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final, NoReturn, final

import attrs
import trio

from ..._util import Notifier
from .._board._tasks import ADMIN_TEXT
from .._storage._agent_rows import RULE_ACTIVE, WakeRuleRow
from .._storage._store_errors import StoreWriteError
from .._wire import Credentials, Refusal, Reply, refuse
from ._rules import (
    ACTIVE_PER_AGENT,
    MIN_LEAD_MS,
    REPEAT_DEBOUNCE_MS,
    WAKE_SOURCE,
    identity_key,
    notice,
    parse_rule,
    rule_json,
)

if TYPE_CHECKING:
    from .._auth._accounts import Accounts
    from .._clock import RoomClock
    from .._messaging._messages import MessageBoard
    from .._storage._rows import TaskRow
    from .._storage._store import RoomStore

__all__ = ["WakeBoard"]

logger = logging.getLogger("letagents_trio.room_server")

# The longest the loop sleeps without looking again (the API's MAX_IDLE_MS).
MAX_IDLE: Final = 60.0
# After a write the store refused, look again no sooner than this.
RETRY_AFTER_FAILURE: Final = 5.0
# How far back and how many ended rules a listing shows.
RECENT_WINDOW_MS: Final = 7 * 24 * 60 * 60 * 1000
RECENT_LIMIT: Final = 50
# A task in one of these is over: a rule not waiting for it ends.
_FINAL_STATUSES: Final = ("done", "cancelled")
_STATUS_WORDS: Final = {"in_review": "in review", "in_progress": "in progress"}

NOT_FOUND_TEXT: Final = "Wake rule not found in this room."
NOT_YOURS_TEXT: Final = "You can cancel only your own wake rules."
ENDED_TEXT: Final = "This wake rule already ended."


@final
@attrs.define(eq=False)
class WakeBoard:
    """Every room's wake rules, and the loop that fires them.

    Args:
        store: the room's rows.
        clock: the room's clock (epoch ms).
        accounts: who is calling.
        messages: where wakes are posted.
        min_lead_ms: the least time ahead a timer may be (30 s).
    """

    store: RoomStore
    clock: RoomClock
    accounts: Accounts
    messages: MessageBoard
    min_lead_ms: int = MIN_LEAD_MS
    _changes: int = attrs.field(default=0, init=False)
    # Rules a task's move should have woken but the store refused the wake: the loop
    # looks at them again with the due ones, as it would at their next check.
    _unwritten: set[str] = attrs.field(factory=set, init=False)
    _changed: Notifier = attrs.field(factory=Notifier, init=False)

    # --- routes ------------------------------------------------------------------------

    def add(self, room_id: str, creds: Credentials, body: Mapping[str, Any]) -> Reply:
        """``POST …/wake-rules``: a worker's new rule, or the active one it has for the same."""
        now = self.clock.now_ms()
        try:
            self.accounts.require_room(room_id)
            row = self.accounts.authenticate(room_id, creds)
            parsed = parse_rule(body.get("rule"), now, min_lead_ms=self.min_lead_ms)
            baseline = self._task_baseline(room_id, parsed.arguments, parsed.event)
        except Refusal as refusal:
            return refusal.reply
        key = identity_key(parsed.event, parsed.arguments)
        mine = [
            r
            for r in self.store.agents.in_room(WakeRuleRow, room_id)
            if r.agent_key == row.agent_key and r.status == RULE_ACTIVE
        ]
        for existing in mine:
            if existing.identity_key == key:
                return Reply(status=200, body={"rule": rule_json(existing), "created": False})
        if len(mine) >= ACTIVE_PER_AGENT:
            return Reply(
                status=409,
                body={
                    "error": f"You already have {ACTIVE_PER_AGENT} active wake rules in this"
                    " room. Cancel one you no longer need first."
                },
            )
        rule = WakeRuleRow(
            rule_id=f"wake_{secrets.token_hex(10)}",
            room_id=room_id,
            agent_key=row.agent_key,
            agent_name=row.display_name or row.actor_label,
            session_id=row.session_id,
            event=parsed.event,
            arguments=parsed.arguments,
            identity_key=key,
            note=parsed.note,
            repeat=parsed.repeat,
            baseline_status=baseline,
            next_check_at=parsed.at if parsed.at is not None else parsed.expires_at,
            expires_at=parsed.expires_at,
            created_at=now,
            updated_at=now,
        )
        self.store.agents.put(rule)
        self._rules_changed()
        return Reply(status=201, body={"rule": rule_json(rule), "created": True})

    def _task_baseline(self, room_id: str, arguments: Mapping[str, Any], event: str) -> str | None:
        """A task rule's baseline: its task's status now; refuse if there is nothing to wait for."""
        if event != "task.status_changed":
            return None
        task_id = str(arguments["task_id"])
        task = self.store.get_task(room_id, int(task_id.removeprefix("task_")))
        if task is None:
            refuse(404, f"{task_id} is not on this room's board.")
        if task.status in arguments.get("to", ()):
            words = _STATUS_WORDS.get(task.status, task.status)
            refuse(409, f"{task_id} is already {words}. There is nothing to wait for.")
        return task.status

    def listing(self, room_id: str, creds: Credentials, *, agent_key: str | None) -> Reply:
        """``GET …/wake-rules``: the active rules and the recently ended ones."""
        try:
            self.accounts.require_room(room_id)
            self.accounts.actor(room_id, creds, ADMIN_TEXT, reading=True)
        except Refusal as refusal:
            return refusal.reply
        since = self.clock.now_ms() - RECENT_WINDOW_MS
        rows = [
            r
            for r in self.store.agents.in_room(WakeRuleRow, room_id)
            if not agent_key or r.agent_key == agent_key.strip()
        ]
        active = sorted(
            (r for r in rows if r.status == RULE_ACTIVE), key=lambda r: (r.next_check_at, r.rule_id)
        )
        ended = sorted(
            (r for r in rows if r.status != RULE_ACTIVE and (r.ended_at or 0) > since),
            key=lambda r: (r.ended_at or 0, r.rule_id),
            reverse=True,
        )[:RECENT_LIMIT]
        body = {
            "room_id": room_id,
            "active": [rule_json(r) for r in active],
            "recent": [rule_json(r) for r in ended],
        }
        return Reply(status=200, body=body)

    def cancel(self, room_id: str, rule_id: str, creds: Credentials) -> Reply:
        """``POST …/wake-rules/{id}/cancel``: an agent its own rule, a room admin any."""
        now = self.clock.now_ms()
        try:
            self.accounts.require_room(room_id)
            actor = self.accounts.actor(room_id, creds, ADMIN_TEXT)
            rule = self.store.agents.get(WakeRuleRow, rule_id)
            if rule is None or rule.room_id != room_id:
                refuse(404, NOT_FOUND_TEXT)
            if not actor.person and rule.agent_key != actor.agent_key:
                refuse(403, NOT_YOURS_TEXT)
            if rule.status != RULE_ACTIVE:
                refuse(409, ENDED_TEXT)
        except Refusal as refusal:
            return refusal.reply
        kind, who = ("human", actor.account_id) if actor.person else ("agent", actor.agent_key)
        cancelled = attrs.evolve(
            rule,
            status="cancelled",
            cancelled_by={"kind": kind, "id": who or "", "label": actor.label},
            ended_at=now,
            updated_at=now,
        )
        self.store.agents.put(cancelled)
        self._rules_changed()
        return Reply(status=200, body={"rule": rule_json(cancelled)})

    # --- firing ------------------------------------------------------------------------

    def task_changed(self, task: TaskRow) -> None:
        """The board moved ``task`` to a new status: look at the rules waiting on it now."""
        now = self.clock.now_ms()
        for rule in self.store.agents.in_room(WakeRuleRow, task.room_id):
            waits = rule.event == "task.status_changed" and rule.status == RULE_ACTIVE
            if waits and rule.arguments.get("task_id") == task.task_id:
                try:
                    self._look(rule, now)
                except StoreWriteError:  # logged by the store; the loop tries again
                    self._unwritten.add(rule.rule_id)
        self._rules_changed()

    def check_due(self) -> None:
        """Look at every active rule whose next check is due.

        Raises:
            StoreWriteError: the store refused a write (the rule stays as it was).
        """
        now = self.clock.now_ms()
        retry, self._unwritten = self._unwritten, set()
        try:
            for rule in self.store.agents.with_status(WakeRuleRow, RULE_ACTIVE):
                if rule.next_check_at <= now or rule.rule_id in retry:
                    self._look(rule, now)
        except StoreWriteError:
            self._unwritten |= retry
            raise

    def next_due(self) -> int | None:
        """The soonest ``next_check_at`` of an active rule (epoch ms), if any."""
        due = [r.next_check_at for r in self.store.agents.with_status(WakeRuleRow, RULE_ACTIVE)]
        return min(due, default=None)

    def _look(self, rule: WakeRuleRow, now: int) -> None:
        """Decide what ``rule`` does now: fire, expire, end, or wait until its next check.

        Only a rule's state changes its ``updated_at`` (a wake, a cancel), as in the
        letagents API: a look that finds nothing to do moves its next check alone.
        """
        if rule.event == "timer":  # looked at only once due (check_due)
            self._wake(rule, now, "fired" if now < rule.expires_at else "expired")
            return
        if rule.event == "task.status_changed":
            # In its quiet minute, a repeat waits for the minute's end, where its last
            # wake set its next check; a minute that outlasts the rule does not hold it.
            last = rule.last_fired_at if rule.repeat else None
            if last is not None and now < last + REPEAT_DEBOUNCE_MS < rule.expires_at:
                return
            task_id = str(rule.arguments["task_id"])
            task = self.store.get_task(rule.room_id, int(task_id.removeprefix("task_")))
            status = None if task is None else task.status
            wanted = rule.arguments.get("to")
            if status is not None and status != rule.baseline_status:
                if not wanted or status in wanted:
                    facts = {
                        "task_id": task_id,
                        "status": status,
                        "previous_status": rule.baseline_status or "unknown",
                    }
                    self._wake(rule, now, "fired", facts=facts)
                    return
                if status in _FINAL_STATUSES:
                    self._wake(rule, now, "ended", ended=f"{task_id} is {status}")
                    return
        if now >= rule.expires_at:
            self._wake(rule, now, "expired")
        elif rule.next_check_at != rule.expires_at:
            self._put(attrs.evolve(rule, next_check_at=rule.expires_at))

    def _wake(
        self,
        rule: WakeRuleRow,
        now: int,
        outcome: str,
        *,
        facts: dict[str, str] | None = None,
        ended: str | None = None,
    ) -> None:
        """Post the wake addressed to the agent and record it, in one transaction."""
        text, display = notice(rule, outcome, facts=facts, ended=ended)
        keeps = outcome == "fired" and rule.repeat and now < rule.expires_at
        status = {"fired": "fired", "expired": "expired", "ended": "retired"}[outcome]
        with self.store.atomic():
            message = self.messages.post_notice(
                rule.room_id,
                text,
                dedupe_id=f"wake_rule:{rule.rule_id}:{rule.fire_count + 1}",
                source=WAKE_SOURCE,
                prompt_kind=None,
                addressed_to={"agent_key": rule.agent_key, "reason": WAKE_SOURCE},
                display_text=display,
            )
            self._put(
                attrs.evolve(
                    rule,
                    status=RULE_ACTIVE if keeps else status,
                    fire_count=rule.fire_count + 1,
                    last_fired_at=now,
                    wake_message_id=None if message is None else message.message_id,
                    baseline_status=(facts or {}).get("status", rule.baseline_status),
                    next_check_at=(
                        min(now + REPEAT_DEBOUNCE_MS, rule.expires_at)
                        if keeps
                        else rule.next_check_at
                    ),
                    ended_at=None if keeps else now,
                    ended_reason=ended,
                    updated_at=now,
                )
            )
        logger.info("wake rule %s %s", rule.rule_id, outcome)

    def _put(self, rule: WakeRuleRow) -> None:
        self.store.agents.put(rule)

    def _rules_changed(self) -> None:
        self._changes += 1
        self._changed.notify()

    async def run(
        self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> NoReturn:
        """Fire the rules as they come due, forever (see the module docstring).

        Cancellation:
            Runs until cancelled; a look at the rules is synchronous, so
            cancellation never leaves a wake half recorded.
        """
        task_status.started()
        while True:
            seen = self._changes
            delay = MAX_IDLE
            try:
                self.check_due()
            except StoreWriteError:  # logged by the store; rules stay as they were
                delay = RETRY_AFTER_FAILURE
            else:
                due = self.next_due()
                if due is not None:
                    delay = min(MAX_IDLE, max(0.0, (due - self.clock.now_ms()) / 1000))
            with trio.move_on_after(delay):
                await self._changed.wait_until(functools.partial(self._changed_since, seen))

    def _changed_since(self, seen: int) -> bool:
        return self._changes != seen
