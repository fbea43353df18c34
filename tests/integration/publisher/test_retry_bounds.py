"""The publisher against an apiserver that ends every watch at once, each hostile way: its requests
stay under the bound its retry policy implies.

A broken proxy or apiserver that answers each watch with an empty 200, a 410, an ERROR event
carrying a 410, or a stream cut in the middle of an event turned the publisher into a loop with
no delay (thousands of requests a second). Here the fake apiserver answers that way for a few
seconds and the requests are counted at the server. The bound is the one the policy implies
whatever the machine's speed: at most one backoff step per ``FLOOR`` seconds (the shortest delay
the policy ever waits), and each step sends ``per_step`` requests (a WATCH, or after a 410 a LIST
and a WATCH). A slow machine sends fewer requests, never more: nothing here is a timing
assertion.
"""

from __future__ import annotations

import random
import time
from urllib.parse import parse_qs

import pytest

from driver.kube.backoff import RetryPolicy
from driver.kube.client import KubeClient
from driver.slices.builder import build_slices
from driver.slices.publisher import SlicePublisher
from harness.fakeapiserver import FakeApiServer, Fault

from .conftest import DRIVER, NODE
from .inventories import gpu_inventory

pytestmark = pytest.mark.fault

FLOOR = 0.25
SECONDS = 3.0
ALWAYS = 10**9


def _slice_requests(api: FakeApiServer) -> tuple[int, int]:
    """(WATCH requests, LIST requests) of slices the fake has seen."""
    watches = lists = 0
    for r in api.requests:
        if r.method == "GET" and r.path.endswith("/resourceslices"):
            if parse_qs(r.query).get("watch") == ["true"]:
                watches += 1
            else:
                lists += 1
    return watches, lists


def _run_publisher(client: KubeClient, policy: RetryPolicy) -> SlicePublisher:
    """A publisher that publishes, runs ``SECONDS`` against the fake's faults, and stops."""
    pub = SlicePublisher(client, node_name=NODE, driver_name=DRIVER, retry=policy, rng=random.Random(3))
    pub.publish(build_slices(gpu_inventory(2), node_name=NODE, driver_name=DRIVER))
    pub.start()
    try:
        time.sleep(SECONDS)
    finally:
        pub.stop()
    return pub


def _bound(per_step: int, floor: float = FLOOR) -> int:
    """Requests the policy allows in ``SECONDS``: a first attempt, then one step per ``floor``."""
    return per_step * (2 + int(SECONDS / floor))


WATCH_ENDS = [
    pytest.param(Fault(200, watch="empty"), 1, id="empty-200"),
    pytest.param(Fault(410), 2, id="http-410"),
    pytest.param(Fault(200, watch="gone-event"), 2, id="error-event-410"),
    pytest.param(Fault(200, watch="cut"), 1, id="cut-mid-stream"),
    pytest.param(Fault(500), 1, id="http-500"),
]


@pytest.mark.parametrize(("fault", "per_step"), WATCH_ENDS)
def test_a_watch_that_ends_at_once_is_retried_at_the_policys_pace(
    api: FakeApiServer, client: KubeClient, fault: Fault, per_step: int
) -> None:
    fault.times, fault.query_contains = ALWAYS, "watch=true"
    api.inject_fault(fault)
    pub = _run_publisher(client, RetryPolicy(floor=FLOOR, cap=1.0))
    watches, lists = _slice_requests(api)
    assert watches >= 2, "the watch was not retried at all"
    assert watches + lists <= _bound(per_step), f"{watches} WATCH + {lists} LIST in {SECONDS} s"
    assert pub.published.is_set()  # the first sync went through: only the watch is broken


def test_a_watch_throttled_with_retry_after_waits_that_long(api: FakeApiServer, client: KubeClient) -> None:
    """429 + Retry-After: 2 s: the watch is retried every 2 s at most, not at the policy's floor."""
    api.inject_fault(Fault(429, times=ALWAYS, query_contains="watch=true", retry_after=2))
    _run_publisher(client, RetryPolicy(floor=0.05, cap=5.0))
    watches, _ = _slice_requests(api)
    assert 1 <= watches <= _bound(1, floor=2.0), f"{watches} WATCH in {SECONDS} s"


def test_an_apiserver_failing_every_call_is_retried_at_the_policys_pace(
    api: FakeApiServer, client: KubeClient
) -> None:
    """500 on every slice request: the sync loop backs off (no watch without a LIST)."""
    api.inject_fault(Fault(500, times=ALWAYS, path_contains="/resourceslices"))
    pub = _run_publisher(client, RetryPolicy(floor=FLOOR, cap=1.0))
    watches, lists = _slice_requests(api)
    assert watches == 0 and 2 <= lists <= _bound(1), f"{lists} LIST in {SECONDS} s"
    assert not pub.published.is_set() and pub.stats.errors["server"] == lists
