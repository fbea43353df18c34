"""Fatal faults stick: AER fatal and critical Xid keep a device Unhealthy and tainted until a reset.

Before the fix a GPU whose AER fatal counter rose was untainted about 6 s later (three healthy
readings at the 2 s default interval) although nothing had reset it, and the scheduler handed it
to new pods. These tests poll the real reader on a host tree by hand (``poll_once``), so "20 s of
polls" takes milliseconds and nothing sleeps; the taints go through the real publisher to the
fake apiserver.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from driver.claims.status import ClaimStatusWriter
from driver.health.monitor import HealthMonitor
from driver.health.signals import SignalReader
from driver.health.taints import HealthTaints
from driver.inventory.discovery import discover
from driver.inventory.model import DeviceKind, Inventory, pci_device_name
from driver.kube.backoff import RetryPolicy
from driver.kube.client import KubeClient
from driver.plugin import HealthState, PreparedDevice
from driver.slices.publisher import SlicePublisher
from harness.fakeapiserver import FakeApiServer
from harness.hosttree import write_host_tree

from .conftest import DRIVER, NODE
from .fake_xid import FakeXidSource
from .hosts import GPU_BDF, NIC_BDF, bump_aer, health_topology, replug, set_carrier, unplug, write

GPU = pci_device_name(DeviceKind.GPU, GPU_BDF)
NIC = pci_device_name(DeviceKind.NIC, NIC_BDF)
INTERVAL_S = 2.0  # the default --health-interval the polls stand for
THRESHOLD = 3  # the default hysteresis: the bug untainted after 3 healthy readings (~6 s)


@dataclass
class Node:
    root: Path
    inventory: Inventory
    api: FakeApiServer
    publisher: SlicePublisher
    monitor: HealthMonitor
    xids: FakeXidSource

    def polls(self, seconds: float) -> None:
        for _ in range(int(seconds / INTERVAL_S)):
            self.monitor.poll_once()
        assert self.publisher.wait_synced(10)

    def state(self, device: str) -> tuple[HealthState, str]:
        h = {h.device_name: h for h in self.monitor.health_snapshot()}[device]
        return h.state, h.reason

    def taints(self, device: str) -> list[dict[str, Any]]:
        for s in self.api.objects("ResourceSlice"):
            for d in s["spec"]["devices"]:
                if d["name"] == device:
                    return list(d.get("taints") or [])
        raise AssertionError(f"{device} not published")


@pytest.fixture
def node(tmp_path: Path, api: FakeApiServer, client: KubeClient) -> Iterator[Node]:
    root = write_host_tree(tmp_path / "host", health_topology(1))
    inventory = discover(root, use_nvml=False)
    publisher = SlicePublisher(
        client, node_name=NODE, driver_name=DRIVER, retry=RetryPolicy(floor=0.05, cap=0.3)
    )
    publisher.start()
    publisher.republish(inventory)
    assert publisher.wait_synced(10)
    xids = FakeXidSource()
    reader = SignalReader(str(root), use_nvml=False, xid_source=xids)
    monitor = HealthMonitor(
        inventory, pool_name=NODE, interval=INTERVAL_S, healthy_threshold=THRESHOLD, reader=reader
    )
    monitor.add_listener(HealthTaints(publisher, "NoSchedule"))
    monitor.poll_once()
    yield Node(root, inventory, api, publisher, monitor, xids)
    publisher.stop()


def test_aer_fatal_stays_unhealthy_and_tainted_while_the_counter_stays_up(node: Node) -> None:
    """The counter rises once and stays: 20 s of polls later the GPU is still Unhealthy and tainted."""
    bump_aer(node.root, GPU_BDF, 1)
    node.polls(INTERVAL_S)
    assert node.state(GPU) == (HealthState.UNHEALTHY, "PciAerFatal")
    node.polls(20.0)  # far past the ~6 s after which the taint used to disappear
    assert node.state(GPU) == (HealthState.UNHEALTHY, "PciAerFatal")
    assert [t["value"] for t in node.taints(GPU)] == ["PciAerFatal"]


def test_aer_counter_below_the_trip_value_is_a_reset(node: Node) -> None:
    """3 -> 4 trips; staying at 4 does not heal; 0 (a new device instance) heals after the hysteresis."""
    bump_aer(node.root, GPU_BDF, 3)
    node.polls(INTERVAL_S)
    bump_aer(node.root, GPU_BDF, 4)
    node.polls(10.0)
    assert node.taints(GPU)
    bump_aer(node.root, GPU_BDF, 0)
    node.polls(INTERVAL_S * (THRESHOLD - 1))
    assert node.state(GPU)[0] == HealthState.UNHEALTHY  # hysteresis still applies after the reset
    node.polls(INTERVAL_S)
    assert node.state(GPU) == (HealthState.HEALTHY, "")
    assert node.taints(GPU) == []


def test_function_gone_and_back_is_a_reset(node: Node) -> None:
    """Remove/rescan after a fatal error: DeviceRemoved while gone, healthy once back (+ hysteresis)."""
    bump_aer(node.root, GPU_BDF, 1)
    node.polls(INTERVAL_S)
    target = unplug(node.root, GPU_BDF)
    node.polls(INTERVAL_S)
    assert node.state(GPU) == (HealthState.UNHEALTHY, "DeviceRemoved")
    replug(node.root, GPU_BDF, target)  # the counter file still says 1: the instance is new anyway
    node.polls(INTERVAL_S * THRESHOLD)
    assert node.state(GPU) == (HealthState.HEALTHY, "")
    assert node.taints(GPU) == []


def test_malformed_aer_file_is_no_signal_and_no_reset(node: Node) -> None:
    """Garbage in aer_dev_fatal neither trips a fault nor counts as a reset of one."""
    write(node.root, f"sys/bus/pci/devices/{NIC_BDF}/aer_dev_fatal", "TOTAL_ERR_FATAL lots\n\x00\xff")
    node.polls(INTERVAL_S * 2)
    assert node.state(NIC) == (HealthState.HEALTHY, "")
    bump_aer(node.root, GPU_BDF, 1)
    node.polls(INTERVAL_S)
    write(node.root, f"sys/bus/pci/devices/{GPU_BDF}/aer_dev_fatal", "TOTAL_ERR_FATAL -1")
    node.polls(10.0)
    assert node.state(GPU) == (HealthState.UNHEALTHY, "PciAerFatal")


def test_nic_without_carrier_stays_recoverable(node: Node) -> None:
    """Carrier loss is not a device fault: the link comes back and the NIC heals with the hysteresis."""
    set_carrier(node.root, up=False)
    node.polls(INTERVAL_S)
    assert node.state(NIC) == (HealthState.UNHEALTHY, "NoCarrier")
    set_carrier(node.root, up=True)
    node.polls(INTERVAL_S * THRESHOLD)
    assert node.state(NIC) == (HealthState.HEALTHY, "")
    assert node.taints(NIC) == []


@pytest.mark.parametrize("xid", [48, 79, 94, 95])
def test_critical_xid_is_sticky(node: Node, xid: int) -> None:
    """A critical Xid taints the GPU as GpuXid<N> and stays until a reset, like AER fatal."""
    node.xids.emit(GPU_BDF, xid)
    node.polls(INTERVAL_S)
    assert node.state(GPU) == (HealthState.UNHEALTHY, f"GpuXid{xid}")
    node.polls(20.0)
    assert [t["value"] for t in node.taints(GPU)] == [f"GpuXid{xid}"]
    assert GPU_BDF in node.xids.watched
    target = unplug(node.root, GPU_BDF)
    node.polls(INTERVAL_S)
    replug(node.root, GPU_BDF, target)
    node.polls(INTERVAL_S * THRESHOLD)
    assert node.state(GPU) == (HealthState.HEALTHY, "")


def test_failing_xid_source_is_no_signal(node: Node) -> None:
    """An NVML event error is logged and ignored: the GPU stays as healthy as its other signals say."""
    node.xids.fail = True
    node.polls(INTERVAL_S * 2)
    assert node.state(GPU) == (HealthState.HEALTHY, "")


def test_stream_taint_and_claim_status_tell_the_same_story(node: Node, client: KubeClient) -> None:
    """One fatal fault: the health snapshot (kubelet stream), the slice taint and the prepared
    claim's status.devices all say PciAerFatal, also long after; after the reset all say healthy."""
    claim = node.api.put_object(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "train", "namespace": "team", "generation": 1, "uid": "uid-train"},
            "spec": {},
            "status": {"allocation": {"devices": {"results": [
                {"request": "gpu", "driver": DRIVER, "pool": NODE, "device": GPU},
            ]}}},
        }
    )  # fmt: skip
    writer = ClaimStatusWriter(client, driver_name=DRIVER, inventory=node.inventory, ip_source=lambda _: [])
    node.monitor.add_listener(writer.set_health)
    writer.report_prepared(claim, [PreparedDevice(("gpu",), NODE, GPU, (f"{DRIVER}/claim=x-{GPU}",))])

    def claim_conditions() -> dict[str, tuple[str, str]]:
        stored = node.api.get_object("ResourceClaim", "train", "team")
        assert stored is not None
        (entry,) = stored["status"]["devices"]
        return {c["type"]: (c["status"], c["reason"]) for c in entry["conditions"]}

    assert claim_conditions() == {"Ready": ("True", "Prepared"), "Healthy": ("True", "Healthy")}
    bump_aer(node.root, GPU_BDF, 1)
    node.polls(20.0)
    assert node.state(GPU) == (HealthState.UNHEALTHY, "PciAerFatal")
    assert [t["value"] for t in node.taints(GPU)] == ["PciAerFatal"]
    assert claim_conditions() == {"Ready": ("True", "Prepared"), "Healthy": ("False", "PciAerFatal")}
    bump_aer(node.root, GPU_BDF, 0)
    node.polls(INTERVAL_S * THRESHOLD)
    assert node.state(GPU) == (HealthState.HEALTHY, "")
    assert node.taints(GPU) == []
    assert claim_conditions() == {"Ready": ("True", "Prepared"), "Healthy": ("True", "Healthy")}


def test_function_that_left_the_inventory_and_came_back_is_a_reset(node: Node) -> None:
    """Hot-unplug seen by a rescan (the device leaves the inventory, so it is never read as gone)
    and a replug seen by the next rescan: the returning function is a new instance."""
    node.xids.emit(GPU_BDF, 79)  # an Xid fault: its AER counter says nothing about a reset
    node.polls(INTERVAL_S)
    assert node.state(GPU) == (HealthState.UNHEALTHY, "GpuXid79")
    without = dataclasses.replace(node.inventory, gpus=())
    node.monitor.set_inventory(without)
    node.polls(INTERVAL_S)
    node.monitor.set_inventory(node.inventory)
    node.polls(INTERVAL_S * THRESHOLD)
    assert node.state(GPU) == (HealthState.HEALTHY, "")
