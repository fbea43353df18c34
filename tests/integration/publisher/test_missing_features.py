"""The publisher on an apiserver with DRA feature gates off: each gate named once, slices still published.

The fake apiserver answers through ``GateOffApi`` (tests/support/gatedapi.py), which drops fields
and refuses list attributes as kube-apiserver 1.37.2 does with the gates off. Checked per cause:
one warning naming the gate, one Warning Event on the Node, the counts behind
``numadra_api_fields_dropped``, the record ``numadra state`` reads; then no rewrite loop, and the
slices in the form that is correct without the gate (no tainted device without taints).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from driver.kube.backoff import RetryPolicy
from driver.kube.client import KubeClient
from driver.kube.events import CreateEvent, EventPoster
from driver.slices.builder import build_slices
from driver.slices.features import CONSUMABLE_CAPACITY, DEVICE_TAINTS, LIST_TYPE_ATTRIBUTES
from driver.slices.missingfeatures import EVENT_REASON, MISSING_FEATURES_FILE, MissingFeatures, load_record
from driver.slices.publisher import SlicePublisher
from harness.fakeapiserver import FakeApiServer
from tests.support.gatedapi import GateOffApi
from tests.unit.inventory.trees import inventory

from .conftest import DRIVER, NODE

GPU = "gpu-0000-29-00-0"
UNHEALTHY = [{"key": "numadra.dev/unhealthy", "value": "PciAerFatal", "effect": "NoSchedule"}]


class Harness:
    """A publisher (with its MissingFeatures) of the dgx node on an apiserver with gates off."""

    def __init__(
        self,
        api: FakeApiServer,
        client: KubeClient,
        plugin_dir: Path,
        gates_off: set[str],
        create_event: CreateEvent | None = None,
    ) -> None:
        self.api = api
        self.plugin_dir = plugin_dir
        self.gated = GateOffApi(client, gates_off)
        self.poster = EventPoster(create_event or client.create_event)
        self.features = MissingFeatures(
            node_name=NODE,
            driver_name=DRIVER,
            events=self.poster,
            record_path=plugin_dir / MISSING_FEATURES_FILE,
        )
        self.errors: list[BaseException] = []
        self.publisher = SlicePublisher(
            self.gated,
            node_name=NODE,
            driver_name=DRIVER,
            on_error=self.errors.append,
            retry=RetryPolicy(floor=0.05, cap=0.2),
            features=self.features,
            build=self._build,
        )

    def _build(self, inv: Any, taints: Any) -> list[dict[str, Any]]:
        return build_slices(inv, node_name=NODE, driver_name=DRIVER, taints=taints, numa_node_list=self.lists)

    lists = False

    def events(self) -> list[dict[str, Any]]:
        """The Node Events written (the poster's queue flushed first: it posts off the publisher)."""
        assert self.poster.flush(10), "the Event poster did not drain"
        return [e for e in self.api.objects("Event") if e["reason"] == EVENT_REASON]

    def stored_devices(self) -> dict[str, dict[str, Any]]:
        return {d["name"]: d for s in self.api.objects("ResourceSlice") for d in s["spec"].get("devices", [])}

    def publish(self) -> None:
        self.publisher.republish(inventory("dgx"))
        assert self.publisher.wait_synced(15), "publisher did not converge"


@pytest.fixture
def start(api: FakeApiServer, client: KubeClient, tmp_path: Path) -> Iterator[Any]:
    made: list[Harness] = []

    def make(gates_off: set[str], create_event: CreateEvent | None = None) -> Harness:
        harness = Harness(api, client, tmp_path, gates_off, create_event)
        harness.publisher.start()
        made.append(harness)
        return harness

    yield make
    for harness in made:
        harness.publisher.stop()
        harness.poster.close()


def test_consumable_capacity_off_is_named_once_and_published_as_kept(start: Any, api: FakeApiServer) -> None:
    with capture_logs() as logs:
        h = start({CONSUMABLE_CAPACITY})
        h.publish()
        cpu = h.stored_devices()["cpu-numa0"]
        assert "allowMultipleAllocations" not in cpu and "requestPolicy" not in cpu["capacity"]["cpus"]
        api.clear_requests()
        h.publisher.republish(inventory("dgx"))  # the same inventory again: nothing to write
        assert h.publisher.wait_synced(10)
    assert api.writes("resourceslices") == []  # no rewrite loop
    warnings = [e for e in logs if e["event"] == "apiserver dropped fields"]
    assert [w["feature"] for w in warnings] == [CONSUMABLE_CAPACITY]
    assert warnings[0]["fields"] == [
        "devices[].allowMultipleAllocations",
        "devices[].capacity[].requestPolicy",
    ]
    (event,) = h.events()
    node = api.get_object("Node", NODE)
    assert node is not None
    assert event["metadata"]["namespace"] == "default" and event["type"] == "Warning"
    assert event["involvedObject"] == {
        "apiVersion": "v1",
        "kind": "Node",
        "name": NODE,
        "uid": node["metadata"]["uid"],
    }
    assert "feature gate DRAConsumableCapacity is off" in event["message"]
    assert h.features.dropped_counts()[CONSUMABLE_CAPACITY] == 2
    assert sum(h.features.dropped_counts().values()) == 2
    record = load_record(h.plugin_dir)
    assert [(f.name, f.refused) for f in record.features] == [(CONSUMABLE_CAPACITY, False)]
    assert h.publisher.published.is_set() and h.errors == []


class SlowEvents:
    """``create_event`` of an apiserver that takes Events only once :attr:`release` is set."""

    def __init__(self, client: KubeClient) -> None:
        self.client = client
        self.held = threading.Event()
        self.release = threading.Event()

    def __call__(self, namespace: str, event: Mapping[str, Any]) -> None:
        self.held.set()
        assert self.release.wait(60)
        self.client.create_event(namespace, event)


def test_the_publisher_never_waits_for_the_node_event(
    start: Any, api: FakeApiServer, client: KubeClient
) -> None:
    """A slow apiserver holds the Node Event's post, not the publisher's thread: the slices
    converge while the Event is still on its way, and it is written once the apiserver answers."""
    slow = SlowEvents(client)
    try:
        h = start({CONSUMABLE_CAPACITY}, create_event=slow)
        h.publish()  # converges although the Event's post is held
        assert slow.held.wait(10), "the Node Event was never posted"
        assert api.objects("Event") == []
        assert h.features.missing() == {CONSUMABLE_CAPACITY}
    finally:
        slow.release.set()
    (event,) = h.events()
    assert "feature gate DRAConsumableCapacity is off" in event["message"]


def test_device_taints_off_withholds_the_unhealthy_device_until_it_heals(start: Any) -> None:
    h = start({DEVICE_TAINTS})
    h.publish()
    other = next(name for name in sorted(h.stored_devices()) if name.startswith("gpu-") and name != GPU)
    assert GPU in h.stored_devices()
    h.publisher.set_taints({GPU: UNHEALTHY})
    assert h.publisher.wait_synced(10)
    devices = h.stored_devices()
    assert GPU not in devices, "an unhealthy GPU published without its taint looks healthy"
    assert other in devices and "cpu-numa0" in devices
    assert h.features.missing() == {DEVICE_TAINTS}
    assert [e["message"].split(":")[0] for e in h.events()] == [
        f"the apiserver dropped devices[].taints from ResourceSlice {_slice_of(h, other)} (node {NODE})"
    ]
    h.publisher.set_taints({})
    assert h.publisher.wait_synced(10)
    assert GPU in h.stored_devices() and "taints" not in h.stored_devices()[GPU]
    assert len(h.events()) == 1


def _slice_of(h: Harness, device: str) -> str:
    for s in h.api.objects("ResourceSlice"):
        if any(d["name"] == device for d in s["spec"].get("devices", [])):
            return str(s["metadata"]["name"])
    raise AssertionError(f"{device} not published")


def test_a_refused_list_attribute_names_the_list_gate_once_over_the_retries(start: Any) -> None:
    with capture_logs() as logs:
        h = start({LIST_TYPE_ATTRIBUTES})
        h.lists = True
        h.publisher.republish(inventory("dgx"))
        assert not h.publisher.wait_synced(1.5)
    assert h.gated.refusals >= 2, "the publisher should keep retrying"
    assert not h.publisher.published.is_set()
    warnings = [e for e in logs if e["event"] == "apiserver refused a slice: feature gate off"]
    assert [w["feature"] for w in warnings] == [LIST_TYPE_ATTRIBUTES]
    (event,) = h.events()
    assert "remove --numa-node-list" in event["message"]
    (cause,) = load_record(h.plugin_dir).features
    assert (cause.name, cause.refused, cause.fields) == (
        LIST_TYPE_ATTRIBUTES,
        True,
        ("devices[].attributes[].ints",),
    )


def test_nothing_missing_writes_an_empty_record_and_no_event(start: Any) -> None:
    h = start(set())
    h.publish()
    assert h.events() == [] and h.features.missing() == frozenset()
    assert load_record(h.plugin_dir).features == ()


def test_a_record_path_taken_by_a_directory_or_a_link_never_stops_the_publisher(
    start: Any, tmp_path: Path
) -> None:
    """The record is written by rename: a link there is replaced, never written through; a
    directory there makes the write fail, logged, and the gate is still named and published."""
    outside = tmp_path / "outside.json"
    outside.write_text("keep")
    (tmp_path / MISSING_FEATURES_FILE).symlink_to(outside)
    h = start({CONSUMABLE_CAPACITY})
    h.publish()
    h.publisher.stop()  # one publisher per pool: the next one is a restarted driver
    assert outside.read_text() == "keep"
    assert [f.name for f in load_record(h.plugin_dir).features] == [CONSUMABLE_CAPACITY]

    record = tmp_path / MISSING_FEATURES_FILE
    record.unlink()
    record.mkdir()
    with capture_logs() as logs:
        again = start({CONSUMABLE_CAPACITY, DEVICE_TAINTS})
        again.publisher.set_taints({GPU: UNHEALTHY})
        again.publish()
    assert any(e["event"] == "cannot record missing api features" for e in logs)
    assert again.features.missing() == {CONSUMABLE_CAPACITY, DEVICE_TAINTS}
    assert GPU not in again.stored_devices() and again.publisher.published.is_set()
