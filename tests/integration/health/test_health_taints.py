"""Health model -> kubelet health source and slice taints, end to end against the fake apiserver.

Flip a fixture device (carrier down, AER fatal increment, removal) and watch: the health source
reports it, the taint lands in the published slice within 5 s, it goes away after recovery plus
hysteresis, the pool re-splits at 64 devices per slice, and nothing is written while nothing
changes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from driver.health.monitor import HealthMonitor
from driver.health.signals import SignalReader
from driver.health.taints import TAINT_KEY, HealthTaints
from driver.inventory.discovery import discover
from driver.inventory.model import DeviceKind, Inventory, pci_device_name
from driver.kube.backoff import RetryPolicy
from driver.kube.client import KubeClient
from driver.plugin import HealthSource, HealthState
from driver.slices.publisher import SlicePublisher
from harness.fakeapiserver import FakeApiServer
from harness.hosttree import write_host_tree

from .conftest import DRIVER, NODE
from .hosts import GPU_BDF, NIC_BDF, bump_aer, health_topology, replug, set_carrier, unplug

INTERVAL = 0.1


@dataclass
class Stack:
    root: Path
    inventory: Inventory
    api: FakeApiServer
    publisher: SlicePublisher
    monitor: HealthMonitor
    taints: HealthTaints


def _stack(tmp_path: Path, api: FakeApiServer, client: KubeClient, *, gpus: int, threshold: int) -> Stack:
    root = write_host_tree(tmp_path / "host", health_topology(gpus))
    inventory = discover(root, use_nvml=False)
    publisher = SlicePublisher(
        client, node_name=NODE, driver_name=DRIVER, retry=RetryPolicy(floor=0.05, cap=0.3)
    )
    publisher.start()
    publisher.republish(inventory)
    assert publisher.wait_synced(10)
    monitor = HealthMonitor(
        inventory,
        pool_name=NODE,
        interval=INTERVAL,
        healthy_threshold=threshold,
        reader=SignalReader(str(root), use_nvml=False),
    )
    taints = HealthTaints(publisher, "NoSchedule")
    monitor.add_listener(taints)
    monitor.start()
    return Stack(root, inventory, api, publisher, monitor, taints)


@pytest.fixture
def make_stack(tmp_path: Path, api: FakeApiServer, client: KubeClient) -> Iterator[Callable[..., Stack]]:
    stacks: list[Stack] = []

    def make(gpus: int = 1, threshold: int = 3) -> Stack:
        stacks.append(_stack(tmp_path, api, client, gpus=gpus, threshold=threshold))
        return stacks[-1]

    yield make
    for stack in stacks:
        stack.monitor.stop()
        stack.publisher.stop()


def _taints_of(api: FakeApiServer, device: str) -> list[dict[str, Any]]:
    for s in api.objects("ResourceSlice"):
        for d in s["spec"]["devices"]:
            if d["name"] == device:
                return list(d.get("taints") or [])
    raise AssertionError(f"device {device} not published")


def _wait(predicate: Callable[[], bool], timeout: float) -> float:
    start = time.monotonic()
    while not predicate():
        if time.monotonic() - start > timeout:
            raise AssertionError("condition not reached in time")
        time.sleep(0.01)
    return time.monotonic() - start


def _carrier_down(root: Path) -> None:
    set_carrier(root, up=False)


NIC = pci_device_name(DeviceKind.NIC, NIC_BDF)
GPU = pci_device_name(DeviceKind.GPU, GPU_BDF)


@pytest.mark.parametrize(
    ("device", "reason", "flip", "restore"),
    [
        pytest.param(
            NIC, "NoCarrier", _carrier_down, lambda r, _: set_carrier(r, up=True), id="carrier-down"
        ),
        pytest.param(
            GPU,
            "DeviceRemoved",
            lambda r: unplug(r, GPU_BDF),
            lambda r, t: replug(r, GPU_BDF, t),
            id="device-removed",
        ),
        # fatal: heals only on evidence of a reset, here the counter of a new device instance
        pytest.param(
            NIC,
            "PciAerFatal",
            lambda r: bump_aer(r, NIC_BDF, 1),
            lambda r, _: bump_aer(r, NIC_BDF, 0),
            id="aer-fatal-then-new-instance",
        ),
    ],
)
def test_flip_reports_taints_and_heals(
    make_stack: Callable[..., Stack],
    device: str,
    reason: str,
    flip: Callable[[Path], Any],
    restore: Callable[[Path, Any], None] | None,
) -> None:
    """A bad signal reaches the health source and a slice taint within 5 s; recovery removes both."""
    stack = make_stack(threshold=5)
    source: HealthSource = stack.monitor
    assert {h.state for h in source.health_snapshot()} == {HealthState.HEALTHY}
    assert _taints_of(stack.api, device) == []

    flipped = time.monotonic()
    token = flip(stack.root)
    assert source.wait_for_change(5.0)
    report = {h.device_name: h for h in source.health_snapshot()}
    assert (report[device].state, report[device].reason) == (HealthState.UNHEALTHY, reason)
    _wait(lambda: bool(_taints_of(stack.api, device)), 5.0)
    elapsed = time.monotonic() - flipped
    print(f"{reason}: taint published {elapsed * 1000:.0f} ms after the flip")
    assert elapsed < 5.0
    (taint,) = _taints_of(stack.api, device)
    assert (taint["key"], taint["value"], taint["effect"]) == (TAINT_KEY, reason, "NoSchedule")
    assert taint["timeAdded"]

    if restore is not None:
        restore(stack.root, token)
    _wait(lambda: not _taints_of(stack.api, device), 10.0)
    assert {h.state for h in source.health_snapshot()} == {HealthState.HEALTHY}
    assert stack.taints.transitions == {"added": 1, "removed": 1}
    assert stack.monitor.transitions[HealthState.UNHEALTHY.value] == 1


def test_no_writes_while_nothing_changes(make_stack: Callable[..., Stack]) -> None:
    """Many polls of an unchanged host cause no apiserver write at all."""
    stack = make_stack()
    stack.api.clear_requests()
    time.sleep(INTERVAL * 10)
    assert stack.api.writes() == []
    assert stack.monitor.devices_by_state == {"Healthy": 3}


def test_flapping_link_keeps_the_taint(make_stack: Callable[..., Stack]) -> None:
    """A link that comes back for fewer than N readings does not untaint the device."""
    stack = make_stack(threshold=1000)  # recovery needs ~100 s: never within this test
    set_carrier(stack.root, up=False)
    _wait(lambda: bool(_taints_of(stack.api, NIC)), 5.0)
    set_carrier(stack.root, up=True)
    time.sleep(INTERVAL * 5)
    assert _taints_of(stack.api, NIC)
    assert stack.taints.transitions == {"added": 1}


def test_taint_resplits_a_100_device_pool(make_stack: Callable[..., Stack]) -> None:
    """100 devices fit one slice; one tainted device makes it two slices of <= 64, and back."""
    stack = make_stack(gpus=98, threshold=3)  # 98 GPUs + 1 NIC + 1 cpu device = 100
    assert [len(s["spec"]["devices"]) for s in stack.api.objects("ResourceSlice")] == [100]
    gpu = pci_device_name(DeviceKind.GPU, "0000:50:00.0")
    target = unplug(stack.root, "0000:50:00.0")
    _wait(lambda: len(stack.api.objects("ResourceSlice")) == 2, 5.0)
    stack.publisher.wait_synced(5.0)
    slices = stack.api.objects("ResourceSlice")
    assert [len(s["spec"]["devices"]) for s in slices] == [64, 36]
    assert {(s["spec"]["pool"]["generation"], s["spec"]["pool"]["resourceSliceCount"]) for s in slices} == {
        (2, 2)
    }
    assert _taints_of(stack.api, gpu)[0]["value"] == "DeviceRemoved"
    replug(stack.root, "0000:50:00.0", target)
    _wait(lambda: [len(s["spec"]["devices"]) for s in stack.api.objects("ResourceSlice")] == [100], 10.0)
    assert _taints_of(stack.api, gpu) == []
    assert stack.api.objects("ResourceSlice")[0]["spec"]["pool"] == {
        "name": NODE,
        "generation": 3,
        "resourceSliceCount": 1,
    }


def test_kubelet_stream_and_taints_agree(make_stack: Callable[..., Stack]) -> None:
    """The kubelet health stream and the published taints name the same unhealthy devices."""
    from driver.kubelet.health import HealthFanout

    stack = make_stack()
    fanout = HealthFanout(
        stack.monitor, on_error=lambda exc, msg: None, driver_name=DRIVER, resend_interval=0.5
    )
    fanout.start()
    cancelled = threading.Event()
    stream = fanout.stream(cancelled)
    try:
        assert {h.state for h in next(stream)} == {HealthState.HEALTHY}
        set_carrier(stack.root, up=False)
        deadline = time.monotonic() + 5
        sent = next(stream)
        while not any(h.state == HealthState.UNHEALTHY for h in sent) and time.monotonic() < deadline:
            sent = next(stream)
        _wait(lambda: bool(_taints_of(stack.api, NIC)), 5.0)
        streamed = {h.device_name: h.reason for h in sent if h.state == HealthState.UNHEALTHY}
        tainted = {
            d["name"]: d["taints"][0]["value"]
            for s in stack.api.objects("ResourceSlice")
            for d in s["spec"]["devices"]
            if d.get("taints")
        }
        assert streamed == tainted == {NIC: "NoCarrier"}
    finally:
        cancelled.set()
        fanout.stop()
