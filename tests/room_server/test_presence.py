"""The room's presence rules (PROTOCOL.md §7.2, §7.4, §8.5 items 2-4 and 10).

All times are milliseconds. ``NOW`` is an arbitrary room time; each case places
its evidence relative to it. The registrant reports host ``host_a`` unless a
test says otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from letagents_trio.room_server._sessions._presence import (
    AGENT_DELIVERY_LINGERS_MS,
    AGENT_PROCESS_EXITED,
    AGENT_PROCESS_GONE_AFTER_MS,
    AGENT_PROCESS_GONE_ON_SAME_HOST_AFTER_MS,
    AGENT_WITHOUT_EVIDENCE_GONE_AFTER_MS,
    NAME_WAIT_MARGIN_MS,
    Holder,
    Registrant,
    SessionEvidence,
    evidence_of,
    exited,
    gone,
    gone_soon_at,
    is_releasable,
    name_comes_free_at,
    name_wait_ms,
)
from letagents_trio.room_server._storage._store import SessionRow

NOW = 1_700_000_000_000
SECOND = 1_000
MINUTE = 60 * SECOND
HOUR = 60 * MINUTE
DURABLE_ID = "worker_" + "ab" * 16


def closed(
    ago: float, *, host: str | None = "host_a", heard_before: float = 30 * SECOND
) -> SessionEvidence:
    """A session whose process connection closed ``ago`` ms before NOW."""
    disconnected = NOW - ago
    return SessionEvidence(
        process_seen_at=disconnected,
        process_connection_id="conn-1",
        process_disconnected_at=disconnected,
        process_host_id=host,
        agent_heard_at=disconnected - heard_before,
        last_seen_at=disconnected - heard_before,
        agent_instance_id="instance-1",
    )


def announced_exit(ago: float, *, host: str | None = "host_a") -> SessionEvidence:
    """A session whose process announced its exit ``ago`` ms before NOW."""
    return attrs.evolve(closed(ago, host=host), process_connection_id=AGENT_PROCESS_EXITED)


def without_evidence(quiet: float, *, instance: str, host: str | None) -> SessionEvidence:
    """A session that never opened a process connection (an older client)."""
    return SessionEvidence(
        process_host_id=host,
        agent_heard_at=NOW - quiet,
        last_seen_at=NOW - quiet,
        agent_instance_id=instance,
    )


def test_constants_are_upstreams_milliseconds() -> None:
    assert AGENT_PROCESS_GONE_ON_SAME_HOST_AFTER_MS == 15_000
    assert AGENT_PROCESS_GONE_AFTER_MS == 600_000
    assert AGENT_WITHOUT_EVIDENCE_GONE_AFTER_MS == 3_600_000
    assert AGENT_DELIVERY_LINGERS_MS == 12_000
    assert NAME_WAIT_MARGIN_MS == 500
    assert AGENT_PROCESS_EXITED == "exited"


# --- §8.5 item 10: exact thresholds ------------------------------------------------


def test_exited_same_host_at_exactly_15_000_ms_after_the_close() -> None:
    s = closed(15_000)
    assert exited(s, now=NOW, observer_host_id="host_a")
    assert gone(s, now=NOW, observer_host_id="host_a")


def test_not_exited_same_host_14_999_ms_after_the_close() -> None:
    s = closed(14_999)
    assert not exited(s, now=NOW, observer_host_id="host_a")
    assert not gone(s, now=NOW, observer_host_id="host_a")


def test_legacy_session_without_evidence_gone_at_exactly_60_min() -> None:
    s = without_evidence(HOUR, instance="instance-1", host=None)
    assert gone(s, now=NOW, observer_host_id="host_a")


def test_legacy_session_without_evidence_not_gone_1_ms_before_60_min() -> None:
    s = without_evidence(HOUR - 1, instance="instance-1", host=None)
    assert not gone(s, now=NOW, observer_host_id="host_a")


@pytest.mark.parametrize("host", [None, ""])
def test_durable_session_without_host_id_is_never_gone(host: str | None) -> None:
    for quiet in (HOUR, 10 * HOUR, 1000 * HOUR):
        s = without_evidence(quiet, instance=DURABLE_ID, host=host)
        assert not gone(s, now=NOW, observer_host_id="host_a")
        assert not gone(s, now=NOW, observer_host_id=host)


def test_durable_session_with_host_id_gone_at_60_min() -> None:
    s = without_evidence(HOUR, instance=DURABLE_ID, host="host_c")
    assert gone(s, now=NOW, observer_host_id="host_a")
    assert not gone(attrs.evolve(s, agent_heard_at=NOW - HOUR + 1), now=NOW, observer_host_id="x")


def test_ended_durable_session_gone_at_10_min() -> None:
    s = attrs.evolve(without_evidence(10 * MINUTE, instance=DURABLE_ID, host=None), ended_at=NOW)
    assert gone(s, now=NOW, observer_host_id="host_a")
    s = attrs.evolve(s, agent_heard_at=NOW - 10 * MINUTE + 1, last_seen_at=NOW - 10 * MINUTE + 1)
    assert not gone(s, now=NOW, observer_host_id="host_a")


def test_gone_soon_at_same_host_is_close_plus_15_000() -> None:
    s = closed(3 * SECOND)
    close = NOW - 3 * SECOND
    assert gone_soon_at(s, now=NOW, observer_host_id="host_a") == close + 15_000


def test_gone_soon_at_from_another_host_is_none() -> None:
    s = closed(3 * SECOND)
    assert gone_soon_at(s, now=NOW, observer_host_id="host_b") is None


def test_gone_soon_at_announced_exit_with_delivery_is_close_plus_12_000() -> None:
    s = attrs.evolve(announced_exit(3 * SECOND), delivery_connected=True)
    close = NOW - 3 * SECOND
    assert gone_soon_at(s, now=NOW, observer_host_id="host_b") == close + 12_000
    assert gone_soon_at(s, now=NOW, observer_host_id="host_a") == close + 12_000


# --- §8.5 items 2-4: holders as evidence ---------------------------------------------


def test_connected_but_quiet_10_h_is_not_gone() -> None:
    # The connection is open: the room refreshed process_seen_at 10 s ago.
    s = SessionEvidence(
        process_seen_at=NOW - 10 * SECOND,
        process_connection_id="conn-1",
        process_host_id="host_a",
        agent_heard_at=NOW - 10 * HOUR,
        last_seen_at=NOW - 10 * HOUR,
        agent_instance_id="instance-1",
    )
    assert not exited(s, now=NOW, observer_host_id="host_a")
    assert not gone(s, now=NOW, observer_host_id="host_a")


def test_open_connection_whose_refreshes_stopped_is_gone_after_10_min() -> None:
    s = SessionEvidence(
        process_seen_at=NOW - 10 * MINUTE,
        process_connection_id="conn-1",
        agent_heard_at=NOW - 10 * HOUR,
        agent_instance_id="instance-1",
    )
    assert gone(s, now=NOW, observer_host_id="host_a")
    assert not gone(s, now=NOW - 1, observer_host_id="host_a")


def test_old_client_quiet_9_min_is_not_gone() -> None:
    s = without_evidence(9 * MINUTE, instance="instance-1", host=None)
    assert not gone(s, now=NOW, observer_host_id="host_a")


def test_closed_120_s_ago_asked_from_another_host_is_not_gone() -> None:
    s = closed(120 * SECOND)
    assert not exited(s, now=NOW, observer_host_id="host_b")
    assert not gone(s, now=NOW, observer_host_id="host_b")


@pytest.mark.parametrize("make", [closed, announced_exit])
def test_heard_1_s_after_a_close_or_exit_is_not_gone(
    make: Callable[[float], SessionEvidence],
) -> None:
    base = make(MINUTE)
    assert base.process_disconnected_at is not None
    s = attrs.evolve(base, agent_heard_at=base.process_disconnected_at + SECOND)
    for host in ("host_a", "host_b"):
        assert not exited(s, now=NOW, observer_host_id=host)
        assert not gone(s, now=NOW, observer_host_id=host)
        assert gone_soon_at(s, now=NOW, observer_host_id=host) is None


def test_touched_after_the_close_without_agent_heard_at_is_not_gone() -> None:
    # A row without agent_heard_at falls back to last_seen_at for "heard".
    base = closed(MINUTE)
    assert base.process_disconnected_at is not None
    s = attrs.evolve(base, agent_heard_at=None, last_seen_at=base.process_disconnected_at + 1)
    assert not exited(s, now=NOW, observer_host_id="host_a")
    assert not gone(s, now=NOW, observer_host_id="host_a")


def test_bookkeeping_touch_after_the_close_does_not_count_as_heard() -> None:
    # The room moved last_seen_at to now; the agent itself was last heard before the close.
    s = attrs.evolve(closed(20 * SECOND), last_seen_at=NOW)
    assert exited(s, now=NOW, observer_host_id="host_a")
    assert gone(s, now=NOW, observer_host_id="host_a")
    exit_ = attrs.evolve(announced_exit(SECOND, host="host_a"), last_seen_at=NOW)
    assert gone(exit_, now=NOW, observer_host_id="host_b")


@pytest.mark.parametrize(
    "s",
    [closed(HOUR), announced_exit(HOUR), without_evidence(10 * HOUR, instance="i", host="h")],
)
def test_holding_a_delivery_connection_is_never_gone(s: SessionEvidence) -> None:
    s = attrs.evolve(s, delivery_connected=True)
    assert not exited(s, now=NOW, observer_host_id="host_a")
    assert not gone(s, now=NOW, observer_host_id="host_a")


def test_unseen_9_min_asked_from_another_host_is_not_gone() -> None:
    assert not gone(closed(9 * MINUTE, heard_before=0), now=NOW, observer_host_id="host_b")


def test_unseen_11_min_asked_from_another_host_is_gone() -> None:
    assert gone(closed(11 * MINUTE, heard_before=0), now=NOW, observer_host_id="host_b")


def test_unseen_exactly_10_min_asked_from_another_host_is_gone() -> None:
    s = closed(10 * MINUTE, heard_before=0)
    assert gone(s, now=NOW, observer_host_id="host_b")
    assert not gone(s, now=NOW - 1, observer_host_id="host_b")


def test_exit_announced_1_s_ago_asked_from_another_host_is_gone_at_once() -> None:
    s = announced_exit(SECOND, host="host_a")
    assert exited(s, now=NOW, observer_host_id="host_b")
    assert gone(s, now=NOW, observer_host_id="host_b")
    assert gone(s, now=NOW, observer_host_id=None)


# --- the remaining clauses of exited / gone / gone_soon_at -----------------------------


def test_exited_needs_a_process_connection_that_was_seen_and_closed() -> None:
    never_seen = attrs.evolve(closed(HOUR), process_seen_at=None)
    still_open = attrs.evolve(closed(HOUR), process_disconnected_at=None)
    for s in (never_seen, still_open):
        assert not exited(s, now=NOW, observer_host_id="host_a")
        assert not exited(
            attrs.evolve(s, process_connection_id=AGENT_PROCESS_EXITED),
            now=NOW,
            observer_host_id="host_a",
        )


def test_exited_same_host_needs_a_non_empty_matching_host_id() -> None:
    assert not exited(closed(HOUR, host=""), now=NOW, observer_host_id="")
    assert not exited(closed(HOUR, host=None), now=NOW, observer_host_id=None)
    assert not exited(closed(HOUR, host="host_a"), now=NOW, observer_host_id=None)


def test_connection_let_go_after_the_session_ended_is_not_an_exit() -> None:
    ended_first = attrs.evolve(announced_exit(MINUTE), ended_at=NOW - MINUTE - 1)
    assert not exited(ended_first, now=NOW, observer_host_id="host_a")
    # Ended at the close or after it: the process really went away.
    ended_with_close = attrs.evolve(announced_exit(MINUTE), ended_at=NOW - MINUTE)
    assert exited(ended_with_close, now=NOW, observer_host_id="host_b")


def test_ended_session_with_a_late_close_is_gone_by_silence_only() -> None:
    s = attrs.evolve(closed(MINUTE), ended_at=NOW - 2 * MINUTE)
    assert not gone(s, now=NOW, observer_host_id="host_a")
    assert gone(s, now=NOW - MINUTE + 10 * MINUTE, observer_host_id="host_a")


def test_heard_at_the_close_itself_still_allows_exit() -> None:
    base = closed(HOUR)
    s = attrs.evolve(base, agent_heard_at=base.process_disconnected_at)
    assert exited(s, now=NOW, observer_host_id="host_a")


def test_silence_counts_from_the_latest_signal() -> None:
    # Closed 11 min ago, but the room saw the row (last_seen_at) 9 min ago and the
    # agent was heard before the close: gone from another host only 10 min after that.
    s = attrs.evolve(closed(11 * MINUTE), last_seen_at=NOW - 9 * MINUTE)
    assert not gone(s, now=NOW, observer_host_id="host_b")
    assert gone(s, now=NOW + MINUTE, observer_host_id="host_b")


def test_non_durable_or_unknown_instance_without_host_can_recover() -> None:
    for instance in ("instance-1", "worker_short", None):
        s = without_evidence(HOUR, instance="x", host=None)
        s = attrs.evolve(s, agent_instance_id=instance)
        assert gone(s, now=NOW, observer_host_id="host_a")


def test_session_never_heard_counts_silence_from_zero() -> None:
    s = SessionEvidence(agent_instance_id="instance-1")
    assert gone(s, now=HOUR, observer_host_id=None)
    assert not gone(s, now=HOUR - 1, observer_host_id=None)


def test_gone_soon_at_is_none_more_than_15_s_ahead() -> None:
    # Same host, still connected delivery on an ordinary close: max(close+15 s, close+12 s).
    s = closed(0)
    assert gone_soon_at(s, now=NOW, observer_host_id="host_a") == NOW + 15_000
    # An exit announced in the future (clock skew) 15 001 ms ahead is too far to wait.
    assert gone_soon_at(announced_exit(-15_001), now=NOW, observer_host_id="host_b") is None
    assert gone_soon_at(announced_exit(-15_000), now=NOW, observer_host_id="host_b") == (
        NOW + 15_000
    )


def test_gone_soon_at_may_lie_in_the_past() -> None:
    s = closed(HOUR)
    assert gone_soon_at(s, now=NOW, observer_host_id="host_a") == NOW - HOUR + 15_000


def test_gone_soon_at_announced_exit_without_delivery_is_the_close() -> None:
    s = announced_exit(3 * SECOND)
    assert gone_soon_at(s, now=NOW, observer_host_id="host_b") == NOW - 3 * SECOND


def test_gone_soon_at_same_host_with_delivery_keeps_the_later_15_s() -> None:
    s = attrs.evolve(closed(3 * SECOND), delivery_connected=True)
    assert gone_soon_at(s, now=NOW, observer_host_id="host_a") == NOW - 3 * SECOND + 15_000


def test_gone_soon_at_needs_a_seen_and_closed_connection() -> None:
    assert (
        gone_soon_at(
            attrs.evolve(closed(SECOND), process_seen_at=None), now=NOW, observer_host_id="host_a"
        )
        is None
    )
    assert (
        gone_soon_at(
            attrs.evolve(closed(SECOND), process_disconnected_at=None),
            now=NOW,
            observer_host_id="host_a",
        )
        is None
    )


evidence_times = st.one_of(st.none(), st.integers(min_value=0, max_value=2 * HOUR))


@given(
    st.builds(
        SessionEvidence,
        process_seen_at=evidence_times,
        process_connection_id=st.sampled_from([None, "conn-1", AGENT_PROCESS_EXITED]),
        process_disconnected_at=evidence_times,
        process_host_id=st.sampled_from([None, "", "host_a", "host_b"]),
        agent_heard_at=evidence_times,
        last_seen_at=evidence_times,
        ended_at=evidence_times,
        delivery_connected=st.booleans(),
        agent_instance_id=st.sampled_from([None, "instance-1", DURABLE_ID]),
    ),
    st.integers(min_value=0, max_value=3 * HOUR),
    st.sampled_from([None, "", "host_a", "host_b"]),
)
def test_exited_implies_gone_and_delivery_rules_both_out(
    s: SessionEvidence, now: int, observer: str | None
) -> None:
    if exited(s, now=now, observer_host_id=observer):
        assert gone(s, now=now, observer_host_id=observer)
    if s.delivery_connected:
        assert not gone(s, now=now, observer_host_id=observer)
    at = gone_soon_at(s, now=now, observer_host_id=observer)
    if at is not None:
        assert at - now <= AGENT_PROCESS_GONE_ON_SAME_HOST_AFTER_MS


# --- holders: releasable, name_comes_free_at, the wait ---------------------------------

REGISTRANT = Registrant(
    owner_id="acct-1", agent_key="acct-1/claude-code", instance_id="instance-new",
    process_host_id="host_a",
)  # fmt: skip


def holder(
    evidence: SessionEvidence,
    *,
    name: str = "FieldMeadow",
    owner_id: str | None = "acct-1",
    supervised: bool = False,
    agent_key: str = "acct-1/claude-code",
) -> Holder:
    return Holder(
        evidence=evidence, name=name, owner_id=owner_id, supervised=supervised, agent_key=agent_key
    )


def test_holder_instance_id_is_its_evidences() -> None:
    assert holder(closed(SECOND)).instance_id == "instance-1"


def test_releasable_needs_same_owner_unsupervised_not_own_and_gone() -> None:
    gone_holder = holder(closed(20 * SECOND))
    assert is_releasable(gone_holder, registrant=REGISTRANT, now=NOW)
    assert not is_releasable(
        attrs.evolve(gone_holder, owner_id="acct-2"), registrant=REGISTRANT, now=NOW
    )
    assert not is_releasable(
        attrs.evolve(gone_holder, owner_id=None),
        registrant=attrs.evolve(REGISTRANT, owner_id=None),
        now=NOW,
    )
    assert not is_releasable(
        attrs.evolve(gone_holder, supervised=True), registrant=REGISTRANT, now=NOW
    )
    own = attrs.evolve(REGISTRANT, instance_id="instance-1")
    assert not is_releasable(gone_holder, registrant=own, now=NOW)
    other_key_same_instance = attrs.evolve(own, agent_key="acct-1/codex")
    assert is_releasable(gone_holder, registrant=other_key_same_instance, now=NOW)
    assert not is_releasable(holder(closed(10 * SECOND)), registrant=REGISTRANT, now=NOW)


def test_releasable_is_judged_from_the_registrants_host() -> None:
    h = holder(closed(20 * SECOND))
    from_b = attrs.evolve(REGISTRANT, process_host_id="host_b")
    assert not is_releasable(h, registrant=from_b, now=NOW)


def test_name_comes_free_when_the_same_host_holder_closed_3_s_ago() -> None:
    h = holder(closed(3 * SECOND))
    at = name_comes_free_at("Field Meadow", [h], registrant=REGISTRANT, now=NOW)
    assert at == NOW - 3 * SECOND + 15_000
    assert name_wait_ms(at, now=NOW) == 12_000 + 500


def test_name_comes_free_ignores_holders_of_other_names() -> None:
    other = holder(closed(3 * SECOND), name="FieldMeadow 1")
    assert name_comes_free_at("FieldMeadow", [other], registrant=REGISTRANT, now=NOW) is None


def test_name_comes_free_is_none_with_no_holders() -> None:
    assert name_comes_free_at("FieldMeadow", [], registrant=REGISTRANT, now=NOW) is None


def test_name_comes_free_skips_the_registrants_own_pair() -> None:
    own = holder(closed(3 * SECOND), agent_key=REGISTRANT.agent_key)
    own = attrs.evolve(
        own, evidence=attrs.evolve(own.evidence, agent_instance_id=REGISTRANT.instance_id)
    )
    other = holder(closed(5 * SECOND))
    assert name_comes_free_at("FieldMeadow", [own], registrant=REGISTRANT, now=NOW) is None
    assert name_comes_free_at("FieldMeadow", [own, other], registrant=REGISTRANT, now=NOW) == (
        NOW - 5 * SECOND + 15_000
    )


@pytest.mark.parametrize(
    ("owner_id", "supervised"), [("acct-2", False), (None, False), ("acct-1", True)]
)
def test_name_never_comes_free_from_another_owner_or_a_supervised_holder(
    owner_id: str | None, supervised: bool
) -> None:
    soon = holder(closed(3 * SECOND))
    # Even an already gone holder of another owner blocks the wait.
    blocker = holder(closed(HOUR), owner_id=owner_id, supervised=supervised)
    assert gone(blocker.evidence, now=NOW, observer_host_id="host_a")
    free_at = name_comes_free_at("FieldMeadow", [soon, blocker], registrant=REGISTRANT, now=NOW)
    assert free_at is None


def test_name_comes_free_skips_gone_holders() -> None:
    soon = holder(closed(3 * SECOND))
    already = holder(closed(HOUR))
    assert name_comes_free_at("FieldMeadow", [already, soon], registrant=REGISTRANT, now=NOW) == (
        NOW - 3 * SECOND + 15_000
    )
    # Only gone holders: nothing to wait for.
    assert name_comes_free_at("FieldMeadow", [already], registrant=REGISTRANT, now=NOW) is None


def test_name_does_not_come_free_while_any_holder_is_not_gone_soon() -> None:
    soon = holder(closed(3 * SECOND))
    present = holder(attrs.evolve(closed(3 * SECOND), agent_heard_at=NOW))
    assert name_comes_free_at("FieldMeadow", [soon, present], registrant=REGISTRANT, now=NOW) is (
        None
    )
    from_b = attrs.evolve(REGISTRANT, process_host_id="host_b")
    assert name_comes_free_at("FieldMeadow", [soon], registrant=from_b, now=NOW) is None


def test_name_comes_free_at_the_latest_holder() -> None:
    a = holder(closed(3 * SECOND))
    b = holder(attrs.evolve(announced_exit(SECOND), delivery_connected=True))
    assert name_comes_free_at("FieldMeadow", [a, b], registrant=REGISTRANT, now=NOW) == (
        NOW - 3 * SECOND + 15_000
    )
    c = holder(closed(1 * SECOND))
    assert name_comes_free_at("FieldMeadow", [a, b, c], registrant=REGISTRANT, now=NOW) == (
        NOW - SECOND + 15_000
    )


def test_name_wait_is_at_least_the_margin() -> None:
    assert name_wait_ms(NOW - 5 * SECOND, now=NOW) == 500
    assert name_wait_ms(NOW, now=NOW) == 500
    assert name_wait_ms(NOW + 15_000, now=NOW) == 15_500


def test_a_rows_evidence_is_its_presence_columns() -> None:
    columns: dict[str, Any] = {
        "process_seen_at": NOW - 5 * SECOND,
        "process_connection_id": "conn-1",
        "process_disconnected_at": NOW - 4 * SECOND,
        "process_host_id": "host_a",
        "agent_heard_at": NOW - 3 * SECOND,
        "last_seen_at": NOW - 2 * SECOND,
        "ended_at": NOW - SECOND,
        "agent_instance_id": DURABLE_ID,
    }
    row = SessionRow(
        session_id="s1", room_id="room", token_hash="h", agent_key="owner/w", **columns
    )
    assert evidence_of(row, delivery_connected=True) == SessionEvidence(
        delivery_connected=True, **columns
    )
