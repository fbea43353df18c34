"""SignalReader on a generated host tree: every real signal flips the reading it should."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from driver.health.signals import SignalReader
from driver.inventory.discovery import discover
from driver.inventory.model import Inventory, InventoryDevice, NumaNode
from driver.plugin import HealthState
from harness.hosttree import write_host_tree

from .hosts import GPU_BDF, NIC_BDF, NIC_IF, RDMA, bump_aer, health_topology, set_carrier, unplug, write


@pytest.fixture
def host(tmp_path: Path) -> tuple[Path, Inventory]:
    root = write_host_tree(tmp_path / "host", health_topology())
    return root, discover(root, use_nvml=False)


def _device(inventory: Inventory, bus_id: str) -> InventoryDevice:
    return next(d for _, d in inventory.devices() if not isinstance(d, NumaNode) and d.pci.bus_id == bus_id)


def test_fixture_host_reads_healthy(host: tuple[Path, Inventory]) -> None:
    """Every device of an untouched fixture host reads Healthy."""
    root, inventory = host
    reader = SignalReader(str(root), use_nvml=False)
    assert {reader.read(d).state for _, d in inventory.devices()} == {HealthState.HEALTHY}


BAD, UNKNOWN = HealthState.UNHEALTHY, HealthState.UNKNOWN


def _carrier_down(r: Path) -> None:
    set_carrier(r, up=False)


@pytest.mark.parametrize(
    ("bus_id", "flip", "state", "reason"),
    [
        pytest.param(NIC_BDF, _carrier_down, BAD, "NoCarrier", id="carrier"),
        pytest.param(
            NIC_BDF,
            lambda r: write(r, f"sys/class/net/{NIC_IF}/operstate", "lowerlayerdown"),
            BAD,
            "LinkDown",
            id="operstate",
        ),
        pytest.param(
            NIC_BDF,
            lambda r: write(r, f"sys/class/infiniband/{RDMA}/ports/1/state", "1: DOWN"),
            BAD,
            "RdmaPortDown",
            id="rdma-port",
        ),
        pytest.param(
            NIC_BDF,
            lambda r: write(r, f"sys/class/net/{NIC_IF}/flags", "0x1002"),
            UNKNOWN,
            "AdminDown",
            id="admin-down",
        ),
        pytest.param(NIC_BDF, lambda r: bump_aer(r, NIC_BDF, 1), BAD, "PciAerFatal", id="nic-aer"),
        pytest.param(GPU_BDF, lambda r: bump_aer(r, GPU_BDF, 2), BAD, "PciAerFatal", id="gpu-aer"),
        pytest.param(GPU_BDF, lambda r: unplug(r, GPU_BDF), BAD, "DeviceRemoved", id="gpu-gone"),
        pytest.param(NIC_BDF, lambda r: unplug(r, NIC_BDF), BAD, "DeviceRemoved", id="nic-gone"),
    ],
)
def test_signal_flips_reading(
    host: tuple[Path, Inventory], bus_id: str, flip: Callable[[Path], object], state: HealthState, reason: str
) -> None:
    """A flipped sysfs signal changes the device's reading to the expected state and reason."""
    root, inventory = host
    reader = SignalReader(str(root), use_nvml=False)
    device = _device(inventory, bus_id)
    assert reader.read(device).state == HealthState.HEALTHY  # also records the AER baseline
    flip(root)
    reading = reader.read(device)
    assert (reading.state, reading.reason) == (state, reason)


def test_aer_counts_only_increases(host: tuple[Path, Inventory]) -> None:
    """A non-zero AER total at start is history, not a fault; only a later increase is."""
    root, inventory = host
    bump_aer(root, GPU_BDF, 5)
    reader = SignalReader(str(root), use_nvml=False)
    gpu = _device(inventory, GPU_BDF)
    assert reader.read(gpu).state == HealthState.HEALTHY
    assert reader.read(gpu).state == HealthState.HEALTHY
    bump_aer(root, GPU_BDF, 6)
    assert reader.read(gpu).reason == "PciAerFatal"
    # no further increase, but nothing reset the device: the fatal fault sticks
    assert (reader.read(gpu).state, reader.read(gpu).sticky) == (HealthState.UNHEALTHY, True)


def test_vanished_numa_node_is_unhealthy(host: tuple[Path, Inventory]) -> None:
    """A cpu device whose NUMA node directory vanished reads Unhealthy."""
    root, inventory = host
    node = inventory.numa_nodes[0]
    reader = SignalReader(str(root), use_nvml=False)
    (root / "sys/devices/system/node/node0").rename(root / "sys/devices/system/node/gone0")
    assert reader.read(node).reason == "NumaNodeGone"
