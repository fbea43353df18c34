"""Probing odd host roots, and the pure facts -> inventory interpretation."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import pytest

from driver.errors import InventoryError
from driver.inventory.build import build_inventory
from driver.inventory.discovery import discover
from driver.inventory.facts import CpuFacts, HostFacts, NetFacts, NodeFacts, NvidiaFacts, PciFacts, RdmaFacts
from driver.inventory.nvml import enrich_with_nvml, normalize_nvml_bus_id
from driver.inventory.probe import probe_host
from driver.inventory.sysfs import is_live_host
from tests.unit.inventory.trees import inventory


def test_missing_host_root_is_inventory_error(tmp_path: Path) -> None:
    """A host root that does not exist fails with its path in the message."""
    missing = tmp_path / "nope"
    with pytest.raises(InventoryError, match=str(missing)):
        probe_host(missing)


def test_host_root_without_sys_is_inventory_error(tmp_path: Path) -> None:
    """A directory without sys/ is not a host root."""
    with pytest.raises(InventoryError, match="no sysfs"):
        probe_host(tmp_path)


def test_empty_sysfs_gives_sane_empty_inventory(tmp_path: Path) -> None:
    """An empty sys/ yields no devices and one synthesized NUMA node, never a crash."""
    (tmp_path / "sys").mkdir()
    inv = discover(tmp_path)
    assert (inv.gpus, inv.nics, inv.cpus) == ((), (), ())
    assert [(n.id, n.cpus, n.memory_bytes) for n in inv.numa_nodes] == [(0, (), 0)]


def test_cpu_dirs_without_online_file(tmp_path: Path) -> None:
    """Without devices/system/cpu/online the cpuN directories give the CPU list."""
    for cpu in (0, 1, 2):
        (tmp_path / f"sys/devices/system/cpu/cpu{cpu}").mkdir(parents=True)
    (tmp_path / "sys/devices/system/cpu/cpufreq").mkdir()
    inv = discover(tmp_path)
    assert [c.id for c in inv.cpus] == [0, 1, 2]
    assert inv.numa_nodes[0].cpus == (0, 1, 2)


def _pci(bus_id: str, pci_class: int, driver: str | None = None, **kw: object) -> PciFacts:
    return PciFacts(bus_id, "pci0000:00", 0, pci_class, 0x10DE, 0x1234, driver, **kw)  # type: ignore[arg-type]


def test_build_classifies_pci_functions() -> None:
    """Only display (0x0300/0x0302/0x0380) and accelerator (0x1200) classes are looked at; bridges
    and storage never are, even when bound to the NVIDIA driver."""
    nv = [NvidiaFacts(f"0000:0{k}:00.0", k, None) for k in range(1, 7)]
    facts = HostFacts(
        pci=(
            _pci("0000:01:00.0", 0x060400, driver="nvidia"),
            _pci("0000:02:00.0", 0x030000, driver="nvidia"),
            _pci("0000:03:00.0", 0x030200, driver="nvidia"),
            _pci("0000:04:00.0", 0x120000, driver="nvidia"),
            _pci("0000:05:00.0", 0x038000, driver="nvidia"),
            _pci("0000:06:00.0", 0x010802, driver="nvidia"),
        ),
        nvidia=tuple(nv),
        dev_nodes=frozenset(f"/dev/nvidia{k}" for k in range(1, 7)),
    )
    inv = build_inventory(facts)
    assert [(g.pci.bus_id, g.index) for g in inv.gpus] == [
        ("0000:02:00.0", 2),
        ("0000:03:00.0", 3),
        ("0000:04:00.0", 4),
        ("0000:05:00.0", 5),
    ]
    assert inv.skipped == ()


def test_build_nic_from_facts() -> None:
    """VF linkage, RDMA, speed sanity and the first-interface-wins rule, from plain facts."""
    facts = HostFacts(
        pci=(
            _pci("0000:3b:00.0", 0x020000, sriov_total_vfs=4, verbs=("uverbs1",)),
            _pci("0000:3b:00.2", 0x020000, physfn="0000:3b:00.0"),
        ),
        net=(
            NetFacts("zz9", "0000:3b:00.0", "AA:00:00:00:00:01", 25000, "up", 1, "mlx5_core"),
            NetFacts("ens1f0", "0000:3b:00.0", "aa:00:00:00:00:01", 25000, "up", 1, "mlx5_core"),
            NetFacts("ens1f0v0", "0000:3b:00.2", None, -1, None, None),
        ),
        rdma=(RdmaFacts("mlx5_1", "0000:3b:00.0"),),
        dev_nodes=frozenset({"/dev/infiniband/uverbs1"}),
    )
    pf, vf = build_inventory(facts).nics
    assert (pf.interface_name, pf.sriov_total_vfs, pf.rdma_devices) == ("ens1f0", 4, ("mlx5_1",))
    assert pf.device_nodes == ("/dev/infiniband/uverbs1",)  # rdma_cm is absent from dev/
    assert (vf.sriov_vf, vf.pf_bus_id, vf.sriov_total_vfs, vf.speed_mbps) == (True, "0000:3b:00.0", 0, None)
    assert (vf.mac_address, vf.operstate, vf.carrier, vf.rdma) == ("", "unknown", None, False)


def test_build_nvidia_nodes_only_when_present() -> None:
    """Device nodes are listed only when they exist under dev/ (the CDI spec must name real files)."""
    facts = HostFacts(
        pci=(_pci("0000:18:00.0", 0x030200, driver="nvidia"),),
        nvidia=(NvidiaFacts("0000:18:00.0", 2, "NVIDIA A100"),),
        dev_nodes=frozenset({"/dev/nvidia2", "/dev/nvidiactl"}),
    )
    (gpu,) = build_inventory(facts).gpus
    assert (gpu.minor, gpu.product_name, gpu.device_nodes) == (
        2,
        "NVIDIA A100",
        ("/dev/nvidia2", "/dev/nvidiactl"),
    )


def test_build_cpus_defaults_and_numa() -> None:
    """Missing topology facts get defaults; CPUs map to the node whose cpulist holds them."""
    facts = HostFacts(
        online_cpus=frozenset({0, 1, 2}),
        isolated_cpus=frozenset({2}),
        cpus=(
            CpuFacts(0, 0, 0, 0, frozenset({0, 1}), 5),
            CpuFacts(1, 0, 0, None, frozenset({0, 1}), 5),
            CpuFacts(2, None, -1, -1, None, None),
        ),
        nodes=(NodeFacts(0, frozenset({0, 1}), 1024), NodeFacts(1, frozenset({2, 9}), None)),
    )
    inv = build_inventory(facts)
    c2 = inv.cpus[2]
    assert (c2.core_id, c2.package_id, c2.die_id, c2.thread_siblings, c2.isolated) == (2, 0, 0, (2,), True)
    assert c2.l3_id == 0  # no L3: the lowest CPU of its package
    assert [c.numa_node for c in inv.cpus] == [0, 0, 1]
    assert [(n.id, n.cpus, n.memory_bytes) for n in inv.numa_nodes] == [
        (0, (0, 1), 1024 * 1024),
        (1, (2,), 0),
    ]


def test_build_keeps_host_memtotal_beside_the_nodes() -> None:
    """/proc/meminfo MemTotal is kept as the host total even when the nodes report less."""
    facts = HostFacts(nodes=(NodeFacts(0, frozenset(), 1024),), mem_total_kib=4096)
    inv = build_inventory(facts)
    assert (inv.numa_nodes[0].memory_bytes, inv.memory_total_bytes) == (1024 * 1024, 4096 * 1024)
    assert build_inventory(HostFacts()).memory_total_bytes is None


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        pytest.param("00000000:3B:00.0", "0000:3b:00.0", id="str"),
        pytest.param(b"00000001:AF:00.1", "0001:af:00.1", id="bytes"),
    ],
)
def test_normalize_nvml_bus_id(raw: str | bytes, expected: str) -> None:
    """NVML's 8-digit upper-case domain becomes sysfs' 4-digit lower-case form."""
    assert normalize_nvml_bus_id(raw) == expected


@pytest.mark.skipif(importlib.util.find_spec("pynvml") is not None, reason="pynvml is installed here")
def test_nvml_absent_leaves_inventory_unchanged() -> None:
    """Without pynvml, enrichment returns the inventory as it was."""
    inv = inventory("dgx")
    assert enrich_with_nvml(inv) is inv


@pytest.mark.parametrize(
    ("make_root", "live"),
    [
        pytest.param(lambda tmp: "/", True, id="root"),
        pytest.param(lambda tmp: "/.", True, id="root-dot"),
        pytest.param(lambda tmp: Path("/"), True, id="root-path"),
        pytest.param(lambda tmp: tmp, False, id="fixture-tree"),
        pytest.param(lambda tmp: (tmp / "host").symlink_to("/") or tmp / "host", True, id="link-to-root"),
    ],
)
def test_is_live_host(make_root: Any, live: bool, tmp_path: Path) -> None:
    """Only this machine's own root counts as the live host, however it is spelled."""
    assert is_live_host(make_root(tmp_path)) is live
