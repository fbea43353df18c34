"""Devices another party owns, against the fake apiserver: another DRA driver's slice of this node
or a device plugin's capacity on the Node withholds our device, without a restart in either
direction; said once per cause (log, Node Event, metric, record); prepare refuses a withheld
device for a new claim and keeps a claim prepared before."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import generate_latest
from structlog.testing import capture_logs

from driver.kube.backoff import RetryPolicy
from driver.kube.client import KubeClient
from driver.kube.events import EventPoster
from driver.observability import Metrics
from driver.slices.builder import build_slices
from driver.slices.foreign import ForeignOwners
from driver.slices.ownership import Owner, Ownership, Reason
from driver.slices.publisher import SlicePublisher
from driver.slices.withheld import EVENT_REASON, WithheldReport, load_withheld
from harness.fakeapiserver import FakeApiServer, Fault
from tests.integration.claims._world import GPU0, GPU1, NIC0, World, claim, make_inventory, result

from .conftest import DRIVER, NODE

NVIDIA = "gpu.nvidia.com"
GPU0_BUS, GPU1_BUS = "0000:3b:00.0", "0000:af:00.0"
INVENTORY = make_inventory()


def _foreign_slice(name: str, driver: str, *buses: str, node: str = NODE) -> dict[str, Any]:
    devices = [
        {"name": f"gpu-{i}", "attributes": {"resource.kubernetes.io/pciBusID": {"string": bus}}}
        for i, bus in enumerate(buses)
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


class Heard:
    """A listener of ForeignOwners: every ownership it was told, and a wait for a condition on it."""

    def __init__(self) -> None:
        self.told: list[Ownership] = []
        self._cond = threading.Condition()

    def __call__(self, ownership: Ownership) -> None:
        with self._cond:
            self.told.append(ownership)
            self._cond.notify_all()

    def wait(self, check: Callable[[dict[str, Owner]], bool], timeout: float = 10.0) -> None:
        with self._cond:
            ok = self._cond.wait_for(lambda: bool(self.told) and check(dict(self.told[-1].withheld)), timeout)
        assert ok, f"ownership never matched; last told: {self.told[-1:] if self.told else None}"


class Rig:
    """The parts ``numadra run`` wires for this (driver.app), over one fake apiserver."""

    def __init__(self, client: KubeClient, plugin_dir: Path) -> None:
        self.events = EventPoster(client.create_event)
        self.publisher = SlicePublisher(
            client,
            node_name=NODE,
            driver_name=DRIVER,
            retry=RetryPolicy(floor=0.05, cap=0.3),
            await_owners=True,
        )
        self.owners = ForeignOwners(
            client,
            inventory=lambda: INVENTORY,
            node_name=NODE,
            driver_name=DRIVER,
            retry=RetryPolicy(floor=0.05, cap=0.3),
            node_interval=0.1,
        )
        self.report = WithheldReport(
            node_name=NODE, component=DRIVER, events=self.events, record_path=plugin_dir / "withheld.json"
        )
        self.heard = Heard()
        self.owners.add_listener(lambda found: self.publisher.set_withheld(found.withheld.keys()))
        self.owners.add_listener(self.report.update)
        self.owners.add_listener(self.heard)
        self.publisher.republish(INVENTORY)

    def start(self) -> None:
        self.owners.start()
        self.publisher.start()

    def stop(self) -> None:
        self.publisher.stop()
        self.owners.stop()
        self.events.close()

    def synced(self) -> None:
        assert self.publisher.wait_synced(10), "publisher did not converge"


@pytest.fixture
def rig(client: KubeClient, tmp_path: Path) -> Iterator[Rig]:
    made = Rig(client, tmp_path)
    yield made
    made.stop()


def _ours(api: FakeApiServer) -> set[str]:
    return {
        d["name"]
        for s in api.objects("ResourceSlice")
        if s["spec"]["driver"] == DRIVER
        for d in s["spec"]["devices"]
    }


def _withheld_events(rig: Rig, api: FakeApiServer) -> list[dict[str, Any]]:
    assert rig.events.flush(10), "the Event poster did not drain"
    return [e for e in api.objects("Event") if e["reason"] == EVENT_REASON]


def _set_capacity(api: FakeApiServer, **capacity: str) -> None:
    node = api.get_object("Node", NODE)
    assert node is not None
    node["status"] = {"capacity": dict(capacity)}
    api.put_object(node)


def test_a_gpu_another_driver_already_publishes_is_never_published(api: FakeApiServer, rig: Rig) -> None:
    """Both drivers at start: NVIDIA's slice is there first; our first write already leaves GPU0 out
    (the publisher waits for the owners), and no write of ours ever carried it."""
    api.put_object(_foreign_slice("nv-0", NVIDIA, GPU0_BUS))
    rig.start()
    rig.heard.wait(lambda w: w == {GPU0: Owner(Reason.DRA_DRIVER, NVIDIA)})
    rig.synced()
    everything = {d["name"] for s in build_slices(INVENTORY, node_name=NODE) for d in s["spec"]["devices"]}
    assert _ours(api) == everything - {GPU0}
    assert rig.publisher.stats.writes["update"] == 0  # created without GPU0, never rewritten


def test_withheld_when_another_slice_appears_and_back_when_it_goes(api: FakeApiServer, rig: Rig) -> None:
    """No restart either way: the other driver's slice appears (GPU1 withdrawn from ours) and is
    deleted (GPU1 published again)."""
    rig.start()
    rig.heard.wait(lambda w: w == {})
    rig.synced()
    assert GPU1 in _ours(api)
    api.put_object(_foreign_slice("nv-0", NVIDIA, GPU1_BUS, "0000:99:00.0"))  # one bus not on this host
    rig.heard.wait(lambda w: w == {GPU1: Owner(Reason.DRA_DRIVER, NVIDIA)})
    rig.synced()
    assert GPU1 not in _ours(api)
    assert {GPU0, NIC0} <= _ours(api)
    api.wipe_slices(NODE, driver=NVIDIA)
    rig.heard.wait(lambda w: w == {})
    rig.synced()
    assert GPU1 in _ours(api)


def test_device_plugin_capacity_withholds_and_zero_gives_back(api: FakeApiServer, rig: Rig) -> None:
    """nvidia.com/gpu: 2 on the Node withholds both NVIDIA GPUs; a capacity of 0 gives them back."""
    rig.start()
    rig.heard.wait(lambda w: w == {})
    _set_capacity(api, **{"nvidia.com/gpu": "2", "cpu": "16"})
    plugin = Owner(Reason.DEVICE_PLUGIN, "nvidia.com/gpu")
    rig.heard.wait(lambda w: w == {GPU0: plugin, GPU1: plugin})
    rig.synced()
    assert not {GPU0, GPU1} & _ours(api)
    _set_capacity(api, **{"nvidia.com/gpu": "0"})
    rig.heard.wait(lambda w: w == {})
    rig.synced()
    assert {GPU0, GPU1} <= _ours(api)


def test_garbage_capacity_owns_nothing_and_is_logged_once(api: FakeApiServer, rig: Rig) -> None:
    """A capacity that is no quantity withholds nothing, is logged once however often the Node is
    read, and the node poller goes on."""
    _set_capacity(api, **{"nvidia.com/gpu": "many"})
    with capture_logs() as logs:
        rig.start()
        rig.heard.wait(lambda w: w == {})
        rig.owners.read_node_once()
        rig.owners.read_node_once()
        assert rig.owners.ownership().problems
    said = [e for e in logs if e.get("problem", "").startswith("Node status.capacity[nvidia.com/gpu]")]
    assert len(said) == 1, logs
    rig.synced()
    assert {GPU0, GPU1} <= _ours(api)


def test_event_record_and_metric_once_per_cause(api: FakeApiServer, rig: Rig, tmp_path: Path) -> None:
    """Two slices of one other driver, appearing one after the other: one Event for that owner;
    the metric counts both devices; the record names the owner for ``numadra state``. When the
    cause goes the metric reads 0 and the record is empty."""
    rig.start()
    rig.heard.wait(lambda w: w == {})
    api.put_object(_foreign_slice("nv-0", NVIDIA, GPU0_BUS))
    rig.heard.wait(lambda w: set(w) == {GPU0})
    api.put_object(_foreign_slice("nv-1", NVIDIA, GPU1_BUS))
    rig.heard.wait(lambda w: set(w) == {GPU0, GPU1})
    (event,) = _withheld_events(rig, api)
    assert event["involvedObject"]["kind"] == "Node"
    assert NVIDIA in event["message"]
    assert GPU0 in event["message"]
    metrics = Metrics(DRIVER, NODE)
    metrics.set_withheld(rig.report.metric_counts())
    text = generate_latest(metrics.registry).decode()
    assert f'numadra_devices_withheld{{owner="{NVIDIA}",reason="dra-driver"}} 2.0' in text
    assert {(d.device, d.owner) for d in load_withheld(tmp_path)} == {(GPU0, NVIDIA), (GPU1, NVIDIA)}
    api.wipe_slices(NODE, driver=NVIDIA)
    rig.heard.wait(lambda w: w == {})
    metrics.set_withheld(rig.report.metric_counts())
    assert (
        f'numadra_devices_withheld{{owner="{NVIDIA}",reason="dra-driver"}} 0.0'
        in generate_latest(metrics.registry).decode()
    )
    assert load_withheld(tmp_path) == []
    assert len(_withheld_events(rig, api)) == 1


def test_prepare_refuses_a_withheld_device_and_keeps_a_prepared_claim(
    api: FakeApiServer, rig: Rig, tmp_path: Path
) -> None:
    """Race (b): GPU0 prepared for claim A from our slice; then NVIDIA's driver publishes GPU0 and
    GPU1. Our slice drops both, A's repeated prepare still answers its devices (nothing prepared
    is lost), and a new claim B allocated GPU1 (from our slice before it was withdrawn) is refused
    with an error naming the owner; claim C of the same batch (a NIC) is unharmed."""
    world = World(tmp_path / "node")
    served = world.driver(withheld=rig.owners.withheld)
    a = world.getter.add(claim("a" * 8 + "-0000-4000-8000-" + "0" * 12, results=[result("gpu", GPU0)]))
    rig.start()
    rig.heard.wait(lambda w: w == {})
    first = served.prepare_claims([a])[a.uid]
    assert not first.error and first.devices
    api.put_object(_foreign_slice("nv-0", NVIDIA, GPU0_BUS, GPU1_BUS))
    rig.heard.wait(lambda w: set(w) == {GPU0, GPU1})
    rig.synced()
    assert not {GPU0, GPU1} & _ours(api)
    b = world.getter.add(claim("b" * 8 + "-0000-4000-8000-" + "0" * 12, results=[result("gpu", GPU1)]))
    c = world.getter.add(claim("c" * 8 + "-0000-4000-8000-" + "0" * 12, results=[result("nic", NIC0)]))
    answers = served.prepare_claims([a, b, c])
    assert answers[a.uid] == first
    assert answers[b.uid].error
    assert f"DRA driver {NVIDIA}" in answers[b.uid].error
    assert GPU1 in answers[b.uid].error
    assert not answers[c.uid].error
    assert served.unprepare_claims([a])[a.uid] == ""
    served.close()


def test_before_the_first_list_nothing_is_published(
    api: FakeApiServer, client: KubeClient, tmp_path: Path
) -> None:
    """A publisher waiting for the owners writes nothing until it hears them once."""
    pub = SlicePublisher(client, node_name=NODE, driver_name=DRIVER, await_owners=True)
    pub.republish(INVENTORY)
    pub.start()
    try:
        assert not pub.wait_synced(0.5)  # a hang guard: it has nothing to sync yet
        assert api.writes("resourceslices") == []
        pub.set_withheld(())
        assert pub.wait_synced(10)
        assert _ours(api)
    finally:
        pub.stop()


def _owners(client: KubeClient) -> tuple[ForeignOwners, Heard]:
    owners = ForeignOwners(
        client,
        inventory=lambda: INVENTORY,
        node_name=NODE,
        driver_name=DRIVER,
        retry=RetryPolicy(floor=0.05, cap=0.3),
        node_interval=0.1,
        refused_interval=0.2,
    )
    heard = Heard()
    owners.add_listener(heard)
    return owners, heard


def test_a_forbidden_list_counts_as_no_other_driver(api: FakeApiServer, client: KubeClient) -> None:
    """RBAC without list on resourceslices: the owners are known (empty) at once, so the node keeps
    its slices; the watcher looks again later and then sees the other driver."""
    api.inject_fault(Fault(403, method="GET", path_contains="resourceslices", times=1))
    owners, heard = _owners(client)
    owners.start()
    try:
        heard.wait(lambda w: w == {})
        assert owners.known.is_set()
        api.put_object(_foreign_slice("nv-0", NVIDIA, GPU0_BUS))
        heard.wait(lambda w: set(w) == {GPU0})
    finally:
        owners.stop()


def test_failing_lists_and_a_broken_watch_are_retried(api: FakeApiServer, client: KubeClient) -> None:
    """Three 500s, then a watch the server ends with a 410 ERROR event: the watcher still learns
    of a slice created after all that (a fresh LIST and watch), and was not known before the
    first LIST answered."""
    api.inject_fault(Fault(500, method="GET", path_contains="resourceslices", query_contains="", times=3))
    api.inject_fault(
        Fault(200, method="GET", path_contains="resourceslices", query_contains="watch", watch="gone-event")
    )
    owners, heard = _owners(client)
    owners.start()
    try:
        heard.wait(lambda w: w == {})
        api.put_object(_foreign_slice("nv-0", NVIDIA, GPU1_BUS))
        heard.wait(lambda w: set(w) == {GPU1})
        api.wipe_slices(NODE, driver=NVIDIA)
        heard.wait(lambda w: w == {})
    finally:
        owners.stop()
    reads = [r for r in api.requests if r.method == "GET" and "resourceslices" in r.path]
    lists = [r for r in reads if "watch" not in r.query]
    assert len(lists) >= 5  # three 500s, the LIST before the 410 watch, the LIST after it
    assert len(reads) - len(lists) >= 2  # the broken watch and the one that saw the slice


def test_thousands_of_foreign_devices_are_bounded_work(api: FakeApiServer, client: KubeClient) -> None:
    """30 slices of 128 devices (3,840) with a bound of 1,000: no crash, 1,000 examined, the bound
    said once, and only our device the first slice names is withheld (none wrongly)."""
    first = [GPU0_BUS] + [f"0001:{j:02x}:00.0" for j in range(127)]
    api.put_object(_foreign_slice("big-00", "big.example.com", *first))
    for i in range(1, 30):
        api.put_object(
            _foreign_slice(
                f"big-{i:02d}", "big.example.com", *[f"0002:{i:02x}:{j % 32:02x}.{j % 8}" for j in range(128)]
            )
        )
    owners = ForeignOwners(
        client, inventory=lambda: INVENTORY, node_name=NODE, driver_name=DRIVER, limit=1000
    )
    with capture_logs() as logs:
        owners.list_once()
        owners.list_once()
    result = owners.ownership()
    assert (result.examined, result.truncated) == (1000, True)
    assert dict(result.withheld) == {GPU0: Owner(Reason.DRA_DRIVER, "big.example.com")}
    assert len([e for e in logs if "not examined" in e["event"]]) == 1
