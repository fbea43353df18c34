"""RetryPolicy and Backoff: the delays of every loop that talks to the apiserver."""

from __future__ import annotations

import random

import pytest

from driver.errors import KubeError
from driver.kube.backoff import RetryPolicy


def test_delays_grow_from_the_floor_to_the_cap_within_the_jitter() -> None:
    """floor * factor**n, capped, plus at most ``jitter`` of it; never under the floor."""
    backoff = RetryPolicy(floor=1.0, factor=2.0, cap=5.0, jitter=0.1).backoff(random.Random(1))
    delays = [backoff.failed() for _ in range(6)]
    for got, base in zip(delays, [1, 2, 4, 5, 5, 5], strict=True):
        assert base <= got <= min(5.0, base * 1.1)
    assert backoff.failures == 6


def test_a_success_starts_again_from_the_floor() -> None:
    backoff = RetryPolicy(floor=0.5, cap=8.0, jitter=0.0).backoff()
    for _ in range(4):
        backoff.failed()
    backoff.succeeded()
    assert backoff.failures == 0 and backoff.failed() == 0.5


def test_each_backoff_of_one_policy_counts_its_own_failures() -> None:
    """The publisher's sync and watch loops share the policy, not their failure counts."""
    policy = RetryPolicy(floor=0.1, factor=3.0, cap=9.0, jitter=0.0)
    sync, watch = policy.backoff(), policy.backoff()
    assert [round(watch.failed(), 6) for _ in range(3)] == [0.1, 0.3, 0.9]
    assert sync.failures == 0 and sync.failed() == 0.1


@pytest.mark.parametrize(
    ("status", "retry_after", "delay"),
    [
        pytest.param(429, 3.0, 3.0, id="429-longer-is-honoured"),
        pytest.param(503, 3.0, 3.0, id="503-longer-is-honoured"),
        pytest.param(429, 60.0, 10.0, id="429-bounded-by-the-cap"),
        pytest.param(429, 0.0, 0.5, id="429-shorter-keeps-the-floor"),
        pytest.param(500, 3.0, 0.5, id="500-retry-after-ignored"),
    ],
)
def test_retry_after_is_honoured_up_to_the_cap(status: int, retry_after: float, delay: float) -> None:
    """A throttled answer's Retry-After lengthens the wait, never beyond the cap nor below the floor."""
    backoff = RetryPolicy(floor=0.5, cap=10.0, jitter=0.0).backoff()
    err = KubeError("throttled", status=status, transient=True, retry_after=retry_after)
    assert backoff.failed(err) == delay


@pytest.mark.parametrize(
    ("opened_for", "timeout", "error", "healthy"),
    [
        pytest.param(12.0, 300, None, True, id="ran-long-ended-cleanly"),
        pytest.param(2.0, 2, None, True, id="ran-its-whole-timeout"),
        pytest.param(0.01, 300, None, False, id="ended-at-once"),
        pytest.param(5.0, 300, None, False, id="ended-early"),
        pytest.param(400.0, 300, KubeError("gone", status=410), False, id="long-but-410"),
    ],
)
def test_a_watch_counts_as_a_success_only_when_it_ran_its_course(
    opened_for: float, timeout: int, error: KubeError | None, healthy: bool
) -> None:
    """A clean end after ``healthy_after`` s (or the whole timeout asked for) renews at once and
    resets; anything shorter, or an error, is one more failure."""
    backoff = RetryPolicy(floor=0.5, jitter=0.0, healthy_after=10.0).backoff()
    backoff.failed()
    delay = backoff.watch_ended(opened_for, timeout, error)
    if healthy:
        assert (delay, backoff.failures) == (0.0, 0)
    else:
        assert (delay, backoff.failures) == (1.0, 2)


def test_wait_passes_without_a_failure_and_stop_ends_it() -> None:
    """The gate is open after a success; stop() ends a wait (and every later one) with False."""
    backoff = RetryPolicy(floor=30.0, cap=30.0).backoff()
    assert backoff.wait_turn()
    backoff.failed()
    backoff.stop()
    assert not backoff.wait_turn()


@pytest.mark.parametrize(
    "fields",
    [{"floor": 0.0}, {"floor": 5.0, "cap": 1.0}, {"factor": 0.5}, {"jitter": -0.1}],
    ids=["zero-floor", "floor-over-cap", "shrinking", "negative-jitter"],
)
def test_a_policy_that_could_storm_or_stall_is_refused(fields: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="retry"):
        RetryPolicy(**fields)
