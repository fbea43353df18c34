"""Backoff: the capped, jittered delays of the publisher's retries."""

from __future__ import annotations

from typing import cast

from driver.kube.backoff import Backoff
from driver.slices.publisher import SliceApi, SlicePublisher


def test_backoff_grows_caps_and_resets() -> None:
    """Delays double up to the cap, stay within the jitter band, and restart after reset."""
    backoff = Backoff(initial=1.0, factor=2.0, cap=5.0, jitter=0.1)
    delays = [backoff.next_delay() for _ in range(6)]
    for got, base in zip(delays, [1, 2, 4, 5, 5, 5], strict=True):
        assert base * 0.9 <= got <= min(5.0, base * 1.1)
    backoff.reset()
    assert backoff.failures == 0 and backoff.next_delay() <= 1.1


def test_watch_retries_back_off_like_the_sync_loop() -> None:
    """The watch loop's backoff has every setting of the publisher's (factor and jitter too)."""
    backoff = Backoff(initial=0.1, factor=3.0, cap=9.0, jitter=0.0)
    publisher = SlicePublisher(
        cast(SliceApi, None), node_name="n1", driver_name="numadra.dev", backoff=backoff
    )
    watch_backoff = publisher._watch_backoff
    assert [round(watch_backoff.next_delay(), 6) for _ in range(3)] == [0.1, 0.3, 0.9]
    assert backoff.failures == 0  # its own failure count
