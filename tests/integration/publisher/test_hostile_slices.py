"""An apiserver (or a proxy in front of it) whose answer holds one of our slices in a shape no
valid ResourceSlice has: a string where the spec belongs, a number where the devices are.

The publisher reads its own slices back on every LIST and every watch event. Before the fix, a
field of the wrong type raised ``AttributeError``/``TypeError`` out of the pure diff or the watch
handler, past the loops' ``except KubeError``: the supervisor restarted the loop with backoff, again
and again while the answer stayed, and the slice was never repaired. Here such a slice is planted
in the store (which also sends it on the watch): no loop may restart, and the publisher must write
its own content over it.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

import pytest

from driver.slices.plan import slice_content
from driver.slices.publisher import SlicePublisher
from driver.supervise import LOOPS
from harness.fakeapiserver import FakeApiServer
from harness.poll import wait_for

pytestmark = pytest.mark.fault

WAIT = 20.0
Obj = dict[str, Any]


def _set(path: tuple[str | int, ...], value: object) -> Callable[[Obj], None]:
    def plant(obj: Obj) -> None:
        node: Any = obj
        for key in path[:-1]:
            node = node[key]
        node[path[-1]] = value

    return plant


def _first_taint(value: object) -> Callable[[Obj], None]:
    def plant(obj: Obj) -> None:
        obj["spec"]["devices"][0]["taints"] = [value]

    return plant


#: each plant, and whether the store takes our repair: the apiserver keeps a slice's pool name
#: immutable, so a slice stored without one is refused our update (422) and the sync retries it.
#: (A spec that is no object matches no field selector, so neither LIST nor watch shows it: the
#: diff's own test, tests/unit/slices/test_plan.py, puts any JSON in every place of a slice.)
PLANTS = [
    pytest.param(_set(("spec", "devices"), 5), True, id="devices-is-number"),
    pytest.param(_set(("spec", "devices", 0), "gpu-0"), True, id="device-is-text"),
    pytest.param(_set(("spec", "devices", 0, "name"), ["gpu-0"]), True, id="device-name-is-list"),
    pytest.param(_set(("spec", "devices", 0, "taints"), {"key": "x"}), True, id="taints-is-object"),
    pytest.param(_first_taint("NoSchedule"), True, id="taint-is-text"),
    pytest.param(_first_taint({"key": ["a"], "effect": "NoSchedule"}), True, id="taint-key-is-list"),
    pytest.param(_set(("spec", "pool"), ["pool"]), False, id="pool-is-list"),
    pytest.param(_set(("metadata", "labels"), "owned"), True, id="labels-is-text"),
    pytest.param(_set(("metadata", "ownerReferences"), ["node"]), True, id="owner-is-text"),
]


def _restarts() -> dict[str, int]:
    return LOOPS.restarts()


@pytest.mark.parametrize(("plant", "repairable"), PLANTS)
def test_a_malformed_slice_of_ours_is_repaired_without_a_restart(
    api: FakeApiServer, fast_publisher: SlicePublisher, plant: Callable[[Obj], None], repairable: bool
) -> None:
    publisher = fast_publisher
    publisher.start()
    assert publisher.published.wait(WAIT), f"no slices published; last error: {publisher.stats.last_error}"
    (good,) = [s for s in api.objects("ResourceSlice") if s["spec"].get("devices")][:1]
    want = slice_content(good)
    before = _restarts()

    bad = copy.deepcopy(good)
    plant(bad)
    api.clear_requests()
    api.put_object(bad)  # stored as is, and sent to the publisher's watch as MODIFIED

    name = good["metadata"]["name"]
    if not repairable:  # ours was written over it (or created beside it), and the store refused
        wait_for(lambda: sum(publisher.stats.errors.values()) >= 2, WAIT, "the refused writes, retried")
        assert api.writes("resourceslices"), "the publisher tried to write its slice"
        assert _restarts() == before
        return

    def repaired() -> bool:
        now = api.get_object("ResourceSlice", name)
        return now is not None and isinstance(now.get("spec"), dict) and slice_content(now) == want

    wait_for(repaired, WAIT, "the publisher to write its own slice over the malformed one")
    after = _restarts()
    assert after == before, f"a loop was restarted by the malformed slice: {before} -> {after}"
    assert publisher.stats.foreign_deletions == 0
