"""SlicePublisher against the fake apiserver: creates, zero-write republish, generations, write order,
wipe recovery, outage at start, conflicts and foreign edits."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from driver.errors import is_recoverable
from driver.inventory.model import Inventory
from driver.kube.backoff import RetryPolicy
from driver.kube.client import KubeClient
from driver.slices.builder import build_slices
from driver.slices.publisher import SlicePublisher
from harness.fakeapiserver import FakeApiServer, Fault
from tests.support.within import within

from .conftest import DRIVER, NODE
from .inventories import gpu_inventory

Slices = list[dict[str, Any]]


@pytest.fixture
def errors() -> list[BaseException]:
    return []


@pytest.fixture
def publisher(client: KubeClient, errors: list[BaseException]) -> Iterator[SlicePublisher]:
    pub = SlicePublisher(
        client,
        node_name=NODE,
        driver_name=DRIVER,
        on_error=errors.append,
        retry=RetryPolicy(floor=0.05, cap=0.3),
    )
    pub.start()
    yield pub
    pub.stop()


def _stored(api: FakeApiServer) -> Slices:
    return api.objects("ResourceSlice")


def _pools(slices: Slices) -> set[tuple[int, int]]:
    return {(s["spec"]["pool"]["generation"], s["spec"]["pool"]["resourceSliceCount"]) for s in slices}


def _publish(pub: SlicePublisher, inventory: Inventory) -> None:
    pub.republish(inventory)
    assert pub.wait_synced(10), "publisher did not converge"


def _writes(api: FakeApiServer) -> list[tuple[str, str]]:
    return [(r.method, r.path.rsplit("/", 1)[-1]) for r in api.writes("resourceslices")]


def test_first_publish_creates_slices_owned_by_the_node(
    api: FakeApiServer, publisher: SlicePublisher
) -> None:
    """300 devices become 3 slices, each owned by the Node (controller) and in one consistent pool."""
    _publish(publisher, gpu_inventory(300))
    slices = _stored(api)
    node_uid = api.get_object("Node", NODE)["metadata"]["uid"]  # type: ignore[index]
    assert len(slices) == 3
    assert [len(s["spec"]["devices"]) for s in slices] == [128, 128, 44]
    for s in slices:
        assert s["metadata"]["ownerReferences"] == [
            {"apiVersion": "v1", "kind": "Node", "name": NODE, "uid": node_uid, "controller": True}
        ]
        assert s["spec"]["nodeName"] == NODE and s["spec"]["driver"] == DRIVER
    assert _pools(slices) == {(1, 3)}
    assert [m for m, _ in _writes(api)] == ["POST"] * 3
    assert publisher.published.is_set()
    assert publisher.stats.writes == {"create": 3}


def test_identical_republish_makes_zero_writes(api: FakeApiServer, publisher: SlicePublisher) -> None:
    """Publishing the same inventory again reads but never writes."""
    inventory = gpu_inventory(200)
    _publish(publisher, inventory)
    api.clear_requests()
    _publish(publisher, inventory)
    _publish(publisher, gpu_inventory(200))  # equal but not identical objects
    assert api.writes() == []
    assert any(r.method == "GET" for r in api.requests)


def test_one_changed_slice_keeps_the_generation(api: FakeApiServer, publisher: SlicePublisher) -> None:
    """A device added at the end of a one-slice pool is one update, generation kept (atomic write)."""
    _publish(publisher, gpu_inventory(10))
    api.clear_requests()
    _publish(publisher, gpu_inventory(11))
    assert [m for m, _ in _writes(api)] == ["PUT"]
    assert _pools(_stored(api)) == {(1, 1)}
    assert len(_stored(api)[0]["spec"]["devices"]) == 11


def test_device_added_across_slices_bumps_generation_everywhere(
    api: FakeApiServer, publisher: SlicePublisher
) -> None:
    """A device that shifts two slices updates both, with generation + 1 on every slice."""
    _publish(publisher, gpu_inventory(200, first_bus=0x20))
    api.clear_requests()
    _publish(publisher, gpu_inventory(201, first_bus=0x1F))  # new device sorts first
    assert [m for m, _ in _writes(api)] == ["PUT", "PUT"]
    assert _pools(_stored(api)) == {(2, 2)}


def test_pool_shrink_deletes_obsolete_slice_first(api: FakeApiServer, publisher: SlicePublisher) -> None:
    """300 -> 100 devices: both obsolete slices are deleted before the remaining one is updated."""
    _publish(publisher, gpu_inventory(300))
    api.clear_requests()
    _publish(publisher, gpu_inventory(100))
    assert [m for m, _ in _writes(api)] == ["DELETE", "DELETE", "PUT"]
    assert _pools(_stored(api)) == {(2, 1)}
    assert len(_stored(api)) == 1


def test_pool_growth_updates_then_creates(api: FakeApiServer, publisher: SlicePublisher) -> None:
    """100 -> 200 devices: the existing slice is updated, then the new one created, one generation."""
    _publish(publisher, gpu_inventory(100))
    api.clear_requests()
    _publish(publisher, gpu_inventory(200))
    assert [m for m, _ in _writes(api)] == ["PUT", "POST"]
    assert _pools(_stored(api)) == {(2, 2)}


def test_wiped_slices_are_recreated_by_the_watch(api: FakeApiServer, publisher: SlicePublisher) -> None:
    """After the kubelet deletes every slice of the node, the watch sees the deletions and puts
    the same slices back, with no rescan to wait for (this publisher has none). How soon is a
    figure for bench/, not an assert: 60 s is only the hang guard (it took 5.0 s once on two
    cores at load 16, where the old 5 s bound turned red)."""
    _publish(publisher, gpu_inventory(200))
    before = [s["spec"]["devices"] for s in _stored(api)]
    start = time.monotonic()
    assert api.wipe_slices(NODE, DRIVER) == 2
    while len(_stored(api)) < 2 and time.monotonic() - start < 60:
        time.sleep(0.01)
    print(f"wipe->recreated: {(time.monotonic() - start) * 1000:.0f} ms")
    assert [s["spec"]["devices"] for s in _stored(api)] == before
    assert publisher.stats.foreign_deletions == 2


def test_foreign_edit_is_reverted(api: FakeApiServer, publisher: SlicePublisher) -> None:
    """Someone else's change to our slice is undone (the watch notices it)."""
    _publish(publisher, gpu_inventory(3))
    tampered = _stored(api)[0]
    tampered["spec"]["devices"] = tampered["spec"]["devices"][:1]
    api.put_object(tampered)
    deadline = time.monotonic() + 5
    while len(_stored(api)[0]["spec"]["devices"]) != 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    assert len(_stored(api)[0]["spec"]["devices"]) == 3


def test_apiserver_down_at_start_never_blocks_and_recovers(
    api: FakeApiServer, client: KubeClient, errors: list[BaseException]
) -> None:
    """With the apiserver unreachable, publish returns without waiting for it (while it is still
    down and nothing is published); the retries go on; slices appear once it is back."""
    api.stop()
    pub = SlicePublisher(
        client,
        node_name=NODE,
        driver_name=DRIVER,
        on_error=errors.append,
        retry=RetryPolicy(floor=0.05, cap=0.2),
    )
    pub.start()
    try:
        within(10, lambda: pub.republish(gpu_inventory(5)), "republish")
        assert not pub.published.is_set()
        deadline = time.monotonic() + 10
        while pub.stats.errors["unreachable"] < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert pub.stats.errors["unreachable"] >= 2, "expected several retries"
        assert not pub.published.is_set()
        assert errors and all(is_recoverable(e) for e in errors)
        api.start()
        assert pub.wait_synced(10)
        assert pub.published.is_set()
        assert len(_stored(api)) == 1
    finally:
        pub.stop()


def test_conflict_is_retried(
    api: FakeApiServer, publisher: SlicePublisher, errors: list[BaseException]
) -> None:
    """A 409 on update is reported as recoverable and the next attempt succeeds."""
    _publish(publisher, gpu_inventory(3))
    api.inject_fault(Fault(409, method="PUT"))
    _publish(publisher, gpu_inventory(4))
    assert len(_stored(api)[0]["spec"]["devices"]) == 4
    assert publisher.stats.errors["conflict"] == 1
    assert any(is_recoverable(e) and "409" in str(e) for e in errors)


def test_taint_time_added_is_kept(api: FakeApiServer, publisher: SlicePublisher) -> None:
    """A taint keeps the server's timeAdded across republishes, with no write when nothing changed."""
    inventory = gpu_inventory(3)
    device = inventory.gpus[0].name
    taint = {"key": "numadra.dev/unhealthy", "value": "NoCarrier", "effect": "NoSchedule"}
    publisher.republish(inventory)
    publisher.set_taints({device: [taint]})
    assert publisher.wait_synced(10)
    added = _stored(api)[0]["spec"]["devices"][0]["taints"][0]["timeAdded"]
    api.clear_requests()
    _publish(publisher, inventory)
    assert api.writes() == []
    publisher.set_taints({device: [taint], inventory.gpus[1].name: [taint]})
    assert publisher.wait_synced(10)
    assert _stored(api)[0]["spec"]["devices"][0]["taints"][0]["timeAdded"] == added


def test_publish_accepts_prebuilt_slices(api: FakeApiServer, publisher: SlicePublisher) -> None:
    """publish() takes complete slice dicts from any builder call (e.g. with reserved CPUs)."""
    slices = build_slices(gpu_inventory(2), node_name=NODE, driver_name=DRIVER)
    publisher.publish(slices)
    assert publisher.wait_synced(10)
    assert [s["metadata"]["name"] for s in _stored(api)] == [slices[0]["metadata"]["name"]]


@pytest.mark.parametrize(
    "compacted", [pytest.param(False, id="resume"), pytest.param(True, id="history-gone")]
)
def test_wipe_after_apiserver_restart_is_still_noticed(
    api: FakeApiServer, publisher: SlicePublisher, compacted: bool
) -> None:
    """The watch comes back after an apiserver restart (re-listing on 410) and still catches a wipe."""
    _publish(publisher, gpu_inventory(3))
    api.stop()
    if compacted:  # history moves on while we are away, then is compacted: our watch gets 410
        other = build_slices(gpu_inventory(1), node_name="node-b", driver_name=DRIVER)[0]
        api.put_object(other)
        api.compact()
    time.sleep(0.3)
    api.start()
    deadline = time.monotonic() + 5
    while (
        not any(r.query.startswith("watch=true") for r in api.requests[-5:]) and time.monotonic() < deadline
    ):
        time.sleep(0.02)
    time.sleep(0.2)
    api.wipe_slices(NODE)
    start = time.monotonic()
    while not [s for s in _stored(api) if s["spec"]["nodeName"] == NODE] and time.monotonic() - start < 5:
        time.sleep(0.02)
    assert [s for s in _stored(api) if s["spec"]["nodeName"] == NODE], "wipe not repaired within 5 s"
    if compacted:
        assert publisher.stats.errors["watch_gone"] >= 1


def test_an_apiserver_without_the_v1_api_is_named_as_such(
    api: FakeApiServer, publisher: SlicePublisher, errors: list[BaseException]
) -> None:
    """A 404 on the slice LIST (an apiserver older than 1.34, or resource.k8s.io/v1 turned off)
    says which API is missing and which version serves it, not a bare "not found"; it is retried."""
    api.inject_fault(Fault(404, method="GET", path_contains="/resourceslices", times=10**9))
    publisher.republish(gpu_inventory(2))
    deadline = time.monotonic() + 10
    while len(errors) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(errors) >= 2, "the LIST was not retried"
    text = str(errors[-1])
    assert "does not serve resource.k8s.io/v1 ResourceSlices" in text
    assert "Kubernetes 1.34 or newer" in text
    assert publisher.stats.errors["not_found"] >= 2
    assert not publisher.published.is_set()
