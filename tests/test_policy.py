"""HoldPolicy: the Node client's defaults, the delay tables, validation and jitter.

The delay is a pure function, so nothing here needs a clock.
"""

from __future__ import annotations

import math
import random
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from letagents_trio import HoldPolicy, Outcome

# --- defaults --------------------------------------------------------------------------


def test_defaults_are_exactly_the_node_clients() -> None:
    policy = HoldPolicy()
    assert policy.dropped_delays == (1.0, 2.0, 5.0)
    assert policy.refused_delays == (5.0, 15.0, 60.0)
    assert policy.unsupported_delays == (10.0, 60.0, 300.0)
    assert policy.answer_timeout == 10.0
    assert policy.silence_timeout == 45.0
    assert policy.exit_deadline == 1.5
    assert policy.jitter == 0.0


def test_the_policy_is_timing_and_limits_only() -> None:
    """Transport knobs are each connector's own (issue: HoldPolicy held 16 fields)."""
    assert [field.name for field in attrs.fields(HoldPolicy)] == [
        "dropped_delays",
        "refused_delays",
        "unsupported_delays",
        "answer_timeout",
        "silence_timeout",
        "exit_deadline",
        "jitter",
        "rng",
        "exit_concurrency",
        "open_concurrency",
    ]


@pytest.mark.parametrize(
    ("outcome", "expected"),
    [
        (Outcome.DROPPED, [1, 2, 5, 5, 5]),
        (Outcome.REFUSED, [5, 15, 60, 60, 60]),
        (Outcome.UNSUPPORTED, [10, 60, 300, 300, 300]),
    ],
)
def test_default_tables_with_the_last_value_repeating(
    outcome: Outcome, expected: list[float]
) -> None:
    policy = HoldPolicy()
    assert [policy.delay(outcome, n) for n in range(5)] == expected
    assert policy.delay(outcome, 10_000) == expected[-1]


def test_custom_tables_are_per_outcome_and_converted_to_float_tuples() -> None:
    policy = HoldPolicy(dropped_delays=[0, 3], refused_delays=(7,), unsupported_delays=(1, 2, 4, 8))
    assert policy.dropped_delays == (0.0, 3.0)
    assert all(type(d) is float for d in policy.dropped_delays)
    assert [policy.delay(Outcome.DROPPED, n) for n in range(3)] == [0, 3, 3]
    assert [policy.delay(Outcome.REFUSED, n) for n in range(3)] == [7, 7, 7]
    assert [policy.delay(Outcome.UNSUPPORTED, n) for n in range(5)] == [1, 2, 4, 8, 8]


def test_delays_for_names_each_table() -> None:
    policy = HoldPolicy()
    assert policy.delays_for(Outcome.DROPPED) == (1.0, 2.0, 5.0)
    assert policy.delays_for(Outcome.REFUSED) == (5.0, 15.0, 60.0)
    assert policy.delays_for(Outcome.UNSUPPORTED) == (10.0, 60.0, 300.0)


def test_ended_is_never_retried() -> None:
    policy = HoldPolicy()
    with pytest.raises(ValueError, match="ended"):
        policy.delay(Outcome.ENDED, 0)
    with pytest.raises(ValueError, match=r"^an ended session is never retried$"):
        policy.delays_for(Outcome.ENDED)


def test_negative_count_raises() -> None:
    with pytest.raises(ValueError, match="count"):
        HoldPolicy().delay(Outcome.DROPPED, -1)


# --- validation ------------------------------------------------------------------------

_TABLES = ("dropped_delays", "refused_delays", "unsupported_delays")
_TIMEOUTS = ("answer_timeout", "silence_timeout", "exit_deadline")


@pytest.mark.parametrize("field", _TABLES)
@pytest.mark.parametrize("value", [(), (1.0, -1.0), (math.nan,), (1.0, math.inf), (-math.inf,)])
def test_bad_delay_tables_are_refused_naming_the_field(
    field: str, value: tuple[float, ...]
) -> None:
    kwargs: dict[str, Any] = {field: value}
    with pytest.raises(ValueError, match=rf"HoldPolicy\.{field}"):
        HoldPolicy(**kwargs)


@pytest.mark.parametrize("field", _TIMEOUTS)
@pytest.mark.parametrize("value", [0, -1, -0.0, math.nan, math.inf])
def test_non_positive_or_non_finite_timeouts_are_refused_naming_the_field(
    field: str, value: float
) -> None:
    kwargs: dict[str, Any] = {field: value}
    with pytest.raises(ValueError, match=rf"HoldPolicy\.{field}"):
        HoldPolicy(**kwargs)


@pytest.mark.parametrize("value", [-0.01, 1.01, math.nan, math.inf, -math.inf])
def test_jitter_outside_zero_to_one_is_refused(value: float) -> None:
    with pytest.raises(ValueError, match=r"HoldPolicy\.jitter"):
        HoldPolicy(jitter=value)


def concurrency(field: str, value: Any) -> dict[str, Any]:
    """Keyword arguments setting one of the two concurrency fields."""
    return {field: value}


@pytest.mark.parametrize("field", ["exit_concurrency", "open_concurrency"])
@pytest.mark.parametrize("value", [0, -1, 1.0, 2.5, True, "4"])
def test_a_concurrency_below_one_or_not_an_int_is_refused(field: str, value: Any) -> None:
    message = rf"^HoldPolicy\.{field} must be None or an int >= 1, got {value!r}$"
    with pytest.raises(ValueError, match=message):
        HoldPolicy(**concurrency(field, value))


@pytest.mark.parametrize("field", ["exit_concurrency", "open_concurrency"])
def test_a_concurrency_of_one_or_none_is_accepted(field: str) -> None:
    assert getattr(HoldPolicy(**concurrency(field, 1)), field) == 1
    assert getattr(HoldPolicy(**concurrency(field, 64)), field) == 64
    assert getattr(HoldPolicy(**concurrency(field, None)), field) is None


def test_every_goodbye_at_once_but_at_most_1024_attempts_waiting_for_the_room() -> None:
    assert HoldPolicy().exit_concurrency is None
    assert HoldPolicy().open_concurrency == 1024


def test_boundary_values_are_accepted() -> None:
    policy = HoldPolicy(
        dropped_delays=(0,),
        answer_timeout=0.001,
        jitter=1,
    )
    assert policy.delay(Outcome.DROPPED, 0) == 0
    assert HoldPolicy(jitter=0).jitter == 0


def test_is_frozen() -> None:
    policy = HoldPolicy()
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        policy.answer_timeout = 1.0  # type: ignore[misc]


def test_repr_hides_the_rng_and_equality_ignores_it() -> None:
    policy = HoldPolicy(rng=random.Random(7))
    assert "rng" not in repr(policy)
    assert "Random" not in repr(policy)
    assert "answer_timeout=10.0" in repr(policy)
    assert policy == HoldPolicy(rng=random.Random(8))


# --- jitter ----------------------------------------------------------------------------


def test_jitter_zero_waits_exactly_and_never_draws() -> None:
    class Exploding(random.Random):
        def random(self) -> float:
            raise AssertionError("jitter 0 must not draw")

    policy = HoldPolicy(rng=Exploding())
    assert [policy.delay(Outcome.REFUSED, n) for n in range(4)] == [5, 15, 60, 60]


def test_jitter_draws_a_deterministic_sequence_from_the_injected_rng() -> None:
    policy = HoldPolicy(jitter=0.5, rng=random.Random(1234))
    drawn = [policy.delay(Outcome.DROPPED, n) for n in range(6)]
    twin = random.Random(1234)
    expected = [twin.uniform(d * 0.5, d) for d in (1, 2, 5, 5, 5, 5)]
    assert drawn == expected
    for value, base in zip(drawn, (1, 2, 5, 5, 5, 5), strict=True):
        assert base * 0.5 <= value <= base
    # Draws really vary: the policy does not reseed per call.
    assert len(set(drawn[2:])) == 4
    # Same seed, same sequence.
    again = HoldPolicy(jitter=0.5, rng=random.Random(1234))
    assert [again.delay(Outcome.DROPPED, n) for n in range(6)] == drawn


def test_a_zero_delay_stays_zero_under_jitter() -> None:
    policy = HoldPolicy(dropped_delays=(0, 1), jitter=1, rng=random.Random(0))
    assert policy.delay(Outcome.DROPPED, 0) == 0


class _FixedRandom(random.Random):
    """A random source whose ``random()`` always returns one chosen value."""

    def __init__(self, value: float) -> None:
        super().__init__(0)
        self.value = value

    def random(self) -> float:
        return self.value


@given(
    delay=st.floats(min_value=0, max_value=1e9, allow_nan=False),
    jitter=st.floats(min_value=0, max_value=1),
    draw=st.one_of(
        st.floats(min_value=0, max_value=1, exclude_max=True),
        st.just(1 - 2**-53),
        st.just(0.0),
    ),
)
def test_jitter_stays_in_the_window_and_never_waits_longer(
    delay: float, jitter: float, draw: float
) -> None:
    policy = HoldPolicy(dropped_delays=(delay,), jitter=jitter, rng=_FixedRandom(draw))
    value = policy.delay(Outcome.DROPPED, 0)
    assert value <= delay
    assert value >= delay * (1 - jitter) - 1e-9 * delay
