"""Discovery over every generated host tree: exact devices, topology and the sane defaults."""

from __future__ import annotations

import pytest

from driver.inventory.model import NumaNode
from harness.topologies import HOSTILE_PRODUCT_NAME
from tests.unit.inventory.trees import inventory

DGX_ROOTS = [0x15, 0x26, 0x37, 0x48, 0x95, 0xA6, 0xB7, 0xC8]
GiB = 1024**3


def test_dgx_gpus() -> None:
    """The DGX tree yields 8 NVIDIA GPUs, 4 per NUMA node, with minors, roots and device nodes."""
    gpus = inventory("dgx").gpus
    assert [g.name for g in gpus] == [f"gpu-0000-{r + 3:02x}-00-0" for r in DGX_ROOTS]
    assert [g.pci.numa_node for g in gpus] == [0, 0, 0, 0, 1, 1, 1, 1]
    assert [g.pci.pcie_root for g in gpus] == [f"pci0000:{r:02x}" for r in DGX_ROOTS]
    assert [g.minor for g in gpus] == list(range(8))
    assert [g.index for g in gpus] == list(range(8))
    assert {(g.vendor, g.vendor_id, g.device_id, g.pci_class) for g in gpus} == {
        ("nvidia", 0x10DE, 0x2330, 0x030200)
    }
    assert {g.product_name for g in gpus} == {"NVIDIA H100 80GB HBM3"}
    assert gpus[3].device_nodes == (
        "/dev/nvidia3",
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
    )
    assert gpus[0].driver == "nvidia"
    assert gpus[0].memory_bytes is None  # no NVML on a fixture tree


def test_dgx_bmc_chip_is_skipped_and_counts_in_no_index() -> None:
    """The ASPEED BMC (class 0x0300, first in PCI order) is listed as skipped; minors stay the indexes."""
    inv = inventory("dgx")
    (bmc,) = inv.skipped
    assert (bmc.bus_id, bmc.vendor_id, bmc.pci_class, bmc.driver) == ("0000:03:00.0", 0x1A03, 0x030000, "ast")
    assert "ASPEED" in bmc.reason
    assert inv.find("gpu-0000-03-00-0") is None
    assert [g.index for g in inv.gpus] == [g.minor for g in inv.gpus] == list(range(8))


def test_dgx_nics_and_sriov() -> None:
    """8 mlx5 PFs with RDMA and 8 VFs each: 72 NIC devices, VFs linked to their PF, split 36/36 by node."""
    nics = inventory("dgx").nics
    assert len(nics) == 72
    pfs = [n for n in nics if not n.sriov_vf]
    vfs = [n for n in nics if n.sriov_vf]
    assert [p.pci.bus_id for p in pfs] == [f"0000:{r + 2:02x}:00.0" for r in DGX_ROOTS]
    assert [p.interface_name for p in pfs][:2] == ["enp23s0np0", "enp40s0np0"]
    assert {p.sriov_total_vfs for p in pfs} == {16}
    assert [p.rdma_devices for p in pfs] == [(f"mlx5_{k}",) for k in range(8)]
    assert pfs[2].device_nodes == ("/dev/infiniband/uverbs2", "/dev/infiniband/rdma_cm")
    assert len(vfs) == 64
    assert {v.sriov_total_vfs for v in vfs} == {0}
    first_pf_vfs = [v for v in vfs if v.pf_bus_id == "0000:17:00.0"]
    assert [v.pci.bus_id for v in first_pf_vfs] == [f"0000:17:00.{f}" for f in range(1, 8)] + ["0000:17:01.0"]
    assert first_pf_vfs[0].rdma_devices == ("mlx5_8",)
    assert first_pf_vfs[0].interface_name == "enp23s0v0"
    assert {n.driver for n in nics} == {"mlx5_core"}
    assert {n.speed_mbps for n in nics} == {400000}
    assert [n.pci.numa_node for n in nics].count(0) == 36
    assert [n.pci.numa_node for n in nics].count(1) == 36
    assert all(n.operstate == "up" and n.carrier is True for n in nics)


def test_dgx_cpus_and_numa() -> None:
    """224 CPUs in 2 nodes, SMT siblings 112 apart, one L3 per node, memory and hugepages per node."""
    inv = inventory("dgx")
    assert len(inv.cpus) == 224
    assert inv.numa_nodes == (
        NumaNode(
            0,
            tuple(range(56)) + tuple(range(112, 168)),
            1024 * GiB,
            ((2048, 1024), (1048576, 16)),
            (10, 21),
            socket=0,
            near_nodes=(0,),  # node 1 is the nearest, but on the other socket
        ),
        NumaNode(
            1,
            tuple(range(56, 112)) + tuple(range(168, 224)),
            1024 * GiB,
            ((2048, 1024), (1048576, 16)),
            (21, 10),
            socket=1,
            near_nodes=(1,),
        ),
    )
    cpu = inv.cpu(170)
    assert cpu is not None
    assert (cpu.core_id, cpu.package_id, cpu.die_id, cpu.numa_node, cpu.l3_id) == (2, 1, 0, 1, 1)
    assert cpu.thread_siblings == (58, 170)
    assert not any(c.isolated for c in inv.cpus)
    assert inv.numa_nodes[0].hugepages_bytes(1048576) == 16 * GiB
    assert dict(inv.host_facts)["product"] == "DGX H100"


def test_workstation_amd_and_intel_gpus() -> None:
    """Intel iGPU (renderD129: index 1) and AMD dGPU (renderD128: index 0) with DRM nodes, /dev/kfd, VRAM."""
    inv = inventory("workstation")
    intel, amd = inv.gpus
    assert (intel.name, intel.vendor, intel.index, intel.driver) == ("gpu-0000-00-02-0", "intel", 1, "i915")
    assert intel.device_nodes == ("/dev/dri/card1", "/dev/dri/renderD129")
    assert intel.product_name is None and intel.memory_bytes is None
    assert (amd.name, amd.vendor, amd.index, amd.driver) == ("gpu-0000-03-00-0", "amd", 0, "amdgpu")
    assert amd.device_nodes == ("/dev/dri/card0", "/dev/dri/renderD128", "/dev/kfd")
    assert amd.memory_bytes == 24 * GiB
    assert amd.product_name == "Radeon RX 7900 XTX"
    assert amd.pci.pcie_root == "pci0000:00"
    assert [g.pci.numa_node for g in inv.gpus] == [0, 0]
    assert [n.id for n in inv.numa_nodes] == [0]
    assert len(inv.cpus) == 16 and inv.numa_nodes[0].memory_bytes == 64 * GiB


def test_workstation_nic_skips_virtual_interfaces() -> None:
    """Only eno1 has a PCI device link; lo, virbr0 and the other virtual interfaces are skipped."""
    (nic,) = inventory("workstation").nics
    assert (nic.name, nic.interface_name, nic.driver, nic.speed_mbps) == (
        "nic-0000-05-00-0",
        "eno1",
        "igc",
        2500,
    )
    assert (nic.sriov_vf, nic.sriov_total_vfs, nic.rdma, nic.device_nodes) == (False, 0, False, ())
    assert nic.pci.pcie_root == "pci0000:00"


def test_cloud_vm_unknown_numa_and_synthesized_node() -> None:
    """numa_node -1 becomes None; without node directories node 0 is built from /proc/meminfo."""
    inv = inventory("cloud_vm")
    (gpu,) = inv.gpus
    (nic,) = inv.nics
    assert gpu.pci.numa_node is None and nic.pci.numa_node is None
    assert (gpu.name, gpu.product_name, gpu.minor) == ("gpu-0000-00-04-0", "Tesla T4", 0)
    assert gpu.device_nodes[0] == "/dev/nvidia0"
    assert (nic.name, nic.interface_name, nic.driver) == ("nic-0000-00-03-0", "eth0", "virtio_net")
    assert nic.speed_mbps is None  # the virtio NIC reports -1
    assert inv.numa_nodes == (
        NumaNode(0, (0, 1, 2, 3), 16 * GiB, ((2048, 512), (1048576, 0)), (10,), socket=0, near_nodes=(0,)),
    )
    assert {c.numa_node for c in inv.cpus} == {0}
    assert all(c.thread_siblings == (c.id,) for c in inv.cpus)


def test_huge_counts_and_pci_domains() -> None:
    """The huge tree: 8 GPUs, 20 PFs + 300 VFs, 256 CPUs in 4 nodes, devices in PCI domain 0001."""
    inv = inventory("huge")
    assert (len(inv.gpus), len(inv.nics), len(inv.cpus), len(inv.numa_nodes)) == (8, 320, 256, 4)
    assert inv.gpus[-1].name == "gpu-0001-47-00-0"
    assert inv.gpus[-1].pci.pcie_root == "pci0001:47"
    assert sum(1 for n in inv.nics if n.sriov_vf) == 300
    assert len({d.name for _, d in inv.devices()}) == 332


def test_hostile_cpus() -> None:
    """Offline CPU 7 absent, 2-3 isolated, bad core_id/missing die_id defaulted, L3 from shared_cpu_list."""
    inv = inventory("hostile")
    assert [c.id for c in inv.cpus] == [0, 1, 2, 3, 4, 5, 6]
    assert [c.id for c in inv.cpus if c.isolated] == [2, 3]
    cpu0, cpu1 = inv.cpus[0], inv.cpus[1]
    assert cpu0.core_id == 0 and inv.cpus[4].core_id == 0  # garbage core_id: lowest sibling, for both
    assert cpu1.die_id == 0
    assert {c.l3_id for c in inv.cpus if c.numa_node == 0} == {0}
    assert {c.l3_id for c in inv.cpus if c.numa_node == 1} == {2}
    assert [(n.id, n.cpus) for n in inv.numa_nodes] == [(0, (0, 1, 4, 5)), (1, (2, 3, 6)), (2, ())]
    assert inv.numa_nodes[2].memory_bytes == 32 * GiB


def test_hostile_devices() -> None:
    """Odd GPUs and NICs are kept with sane values, half-described ones skipped; USB and duplicate
    netdevs are not separate NICs."""
    inv = inventory("hostile")
    big, accel = inv.gpus
    assert big.product_name == HOSTILE_PRODUCT_NAME  # clipping happens when publishing
    assert (big.minor, big.index) == (3, 3)
    assert (accel.vendor, accel.pci_class, accel.pci.numa_node, accel.index) == ("amd", 0x120000, None, 5)
    assert accel.device_nodes == ("/dev/dri/card5", "/dev/dri/renderD133", "/dev/kfd")
    l4, tenstorrent = inv.skipped
    assert (l4.bus_id, l4.reason) == ("0000:0b:00.0", "NVIDIA information file has no readable Device Minor")
    assert (tenstorrent.bus_id, tenstorrent.vendor_id) == ("0000:0d:00.0", 0x1E52)
    assert "no compute rule" in tenstorrent.reason
    assert [n.interface_name for n in inv.nics] == ["Eth.Uplink.0", "MGMT.vlan.7"]
    eth, mgmt = inv.nics
    assert eth.mac_address == "aa:bb:cc:dd:ee:ff"
    assert (eth.speed_mbps, eth.operstate, eth.carrier, eth.pci.numa_node) == (None, "dormant", None, 1)
    assert (mgmt.speed_mbps, mgmt.pci.numa_node) == (None, None)


@pytest.mark.parametrize("name", ["dgx", "workstation", "cloud_vm", "huge", "hostile"])
def test_device_names_unique_and_stable(name: str) -> None:
    """Device names are unique DNS labels and a second discovery gives an equal inventory."""
    from driver.inventory.discovery import discover
    from tests.unit.inventory.trees import host_tree

    inv = inventory(name)
    names = [d.name for _, d in inv.devices()]
    assert len(names) == len(set(names))
    assert discover(host_tree(name), use_nvml=False) == inv
