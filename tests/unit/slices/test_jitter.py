"""The publisher's periodic traffic is spread out: watch timeouts, fallback re-LISTs, start delay."""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Iterator
from typing import Any, cast

import pytest

from driver.slices.publisher import SliceApi, SlicePublisher
from driver.slices.watchedloops import jittered, watch_timeout_seconds


def test_watch_timeouts_fill_min_to_twice_min() -> None:
    """As client-go's reflector: every draw in [min, 2*min), and spread over the whole range."""
    rng = random.Random(7)
    draws = [watch_timeout_seconds(300, rng) for _ in range(2000)]
    assert all(300 <= d < 600 for d in draws)
    assert min(draws) < 310 and max(draws) > 590  # not a narrow band around one value
    assert len(set(draws)) > 250  # 2,000 draws over 300 values: nearly all of them appear


def test_two_nodes_started_together_drift_apart() -> None:
    """Two nodes whose watches open in the same second renew at different times after one round."""
    a, b = random.Random(1), random.Random(2)
    ends_a = [sum(watch_timeout_seconds(300, a) for _ in range(k)) for k in range(1, 6)]
    ends_b = [sum(watch_timeout_seconds(300, b) for _ in range(k)) for k in range(1, 6)]
    assert all(x != y for x, y in zip(ends_a, ends_b, strict=True))


def test_watch_timeout_of_one_second_and_bad_minimum() -> None:
    assert watch_timeout_seconds(1, random.Random(0)) == 1
    with pytest.raises(ValueError, match="at least 1 s"):
        watch_timeout_seconds(0, random.Random(0))


def test_jittered_stretches_by_at_most_the_factor() -> None:
    rng = random.Random(3)
    draws = [jittered(600.0, 0.5, rng) for _ in range(1000)]
    assert all(600.0 <= d < 900.0 for d in draws)
    assert max(draws) - min(draws) > 250.0


class _Watch:
    """A watch that stays open, with no events, until it is closed."""

    def __init__(self) -> None:
        self._closed = threading.Event()

    def __iter__(self) -> Iterator[tuple[str, dict[str, Any]]]:
        self._closed.wait()
        return iter(())

    def close(self) -> None:
        self._closed.set()


class _TimedApi:
    """An apiserver holding no slices that notes when each call came (monotonic seconds)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, float]] = []

    def get_node(self, name: str) -> dict[str, Any]:
        self.calls.append(("get_node", time.monotonic()))
        return {"metadata": {"name": name, "uid": "node-uid"}}

    def list_resource_slices(
        self, *, field_selector: str = "", label_selector: str = ""
    ) -> tuple[list[Any], str]:
        self.calls.append(("list", time.monotonic()))
        return [], "1"

    def watch_resource_slices(self, **_: Any) -> _Watch:
        self.calls.append(("watch", time.monotonic()))
        return _Watch()


def test_start_jitter_delays_the_first_sync_by_a_seeded_draw() -> None:
    """start() defers the first apiserver call by uniform [0, start_jitter) from the injected RNG;
    a wish to publish made at once does not cut the delay short."""
    api = _TimedApi()
    publisher = SlicePublisher(
        cast(SliceApi, api),
        node_name="n1",
        driver_name="numadra.dev",
        start_jitter=1.0,
        rng=random.Random(5),
    )
    expected = random.Random(5).uniform(0.0, 1.0)
    before = time.monotonic()
    publisher.start()
    try:
        publisher.publish([])
        assert publisher.wait_synced(timeout=10.0)
        assert [name for name, _ in api.calls[:2]] == ["get_node", "list"]
        assert api.calls[0][1] >= before + expected  # not one call before the drawn delay
    finally:
        publisher.stop(timeout=1.0)
