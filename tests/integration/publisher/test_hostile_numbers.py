"""An apiserver (or a proxy in front of it) that answers with a number no parser expects.

``Retry-After: ²`` is one non-ASCII digit: ``str.isdigit()`` says yes and ``float()`` says no.
Before the fix, that answer to the Node GET or the slice LIST raised ``ValueError`` out of the
client, past the publisher's ``except KubeError``, and ended the publisher's thread; to the watch,
it ended the watch thread. The process stayed up and ready with no slices (or with slices that no
one re-created after a wipe). Here the fake apiserver answers so a few times, then behaves: the
slices must be published, both threads must be alive, and a wipe must be repaired through the
watch.
"""

from __future__ import annotations

import dataclasses
import threading

import pytest

from driver.slices.publisher import SlicePublisher
from harness.fakeapiserver import FakeApiServer, Fault
from harness.poll import wait_for

from .conftest import DRIVER, NODE

pytestmark = pytest.mark.fault

#: one non-ASCII digit: a digit to ``isdigit``, no number to ``int`` or ``float``
HOSTILE = "²"
WAIT = 20.0

FAULTS = [
    pytest.param(
        Fault(429, method="GET", path_contains="/nodes/", times=2, retry_after=HOSTILE), id="node-get-429"
    ),
    pytest.param(
        Fault(429, method="GET", path_contains="/resourceslices", times=2, retry_after=HOSTILE), id="list-429"
    ),
    pytest.param(
        Fault(500, method="GET", query_contains="watch=true", times=2, retry_after=HOSTILE), id="watch-500"
    ),
]


def _alive(name: str) -> bool:
    return any(t.name == name and t.is_alive() for t in threading.enumerate())


def _watches(api: FakeApiServer) -> int:
    return sum(1 for r in api.requests if r.path.endswith("/resourceslices") and "watch=true" in r.query)


@pytest.mark.parametrize("fault", FAULTS)
def test_a_non_ascii_retry_after_kills_no_thread(
    api: FakeApiServer, fast_publisher: SlicePublisher, fault: Fault
) -> None:
    api.inject_fault(dataclasses.replace(fault))  # the fake counts down its own copy
    publisher = fast_publisher
    publisher.start()
    assert publisher.published.wait(WAIT), f"no slices published; last error: {publisher.stats.last_error}"
    assert len(api.objects("ResourceSlice")) > 0
    # the watch got past the hostile answers: it is open again (a third WATCH) or was never refused
    wait_for(lambda: _watches(api) >= (3 if fault.query_contains else 1), WAIT, "the watch to be open")
    assert _alive("slice-publisher") and _alive("slice-watch")

    # the watch works: the kubelet's wipe is noticed and the slices come back without a re-LIST timer
    wiped = api.wipe_slices(NODE, DRIVER)
    assert wiped > 0
    wait_for(lambda: len(api.objects("ResourceSlice")) == wiped, WAIT, "the wiped slices to come back")
    assert publisher.stats.foreign_deletions >= 1
