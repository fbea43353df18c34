"""The host-tree generator writes kernel-shaped trees: relative, resolvable links and real file names."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from harness.hosttree import TOPOLOGIES, Topology, write_host_tree
from tests.unit.inventory.trees import host_tree


def _link(path: Path) -> str:
    return str(path.readlink())


@pytest.mark.parametrize("name", sorted(TOPOLOGIES))
def test_links_are_relative_and_resolve_inside_root(name: str) -> None:
    """Every symlink is relative, names its target's last component and resolves to an existing path."""
    root = host_tree(name).resolve()
    links = 0
    for dirpath, dirnames, filenames in os.walk(root):
        for entry in dirnames + filenames:
            path = Path(dirpath) / entry
            if not path.is_symlink():
                continue
            links += 1
            target = str(path.readlink())
            assert not target.startswith("/"), path
            assert not target.endswith(".."), path
            resolved = path.resolve()
            assert resolved.exists(), path
            assert resolved.is_relative_to(root), path
    assert links > 0


def test_dgx_layout_matches_sysfs() -> None:
    """Class links point into devices/, netdev and RDMA devices hang off their PCI function."""
    root = host_tree("dgx")
    assert _link(root / "sys/class/net/enp23s0np0") == (
        "../../devices/pci0000:15/0000:15:01.0/0000:17:00.0/net/enp23s0np0"
    )
    assert _link(root / "sys/class/net/enp23s0np0/device") == "../../../0000:17:00.0"
    assert _link(root / "sys/bus/pci/devices/0000:17:00.1/physfn") == "../0000:17:00.0"
    assert _link(root / "sys/bus/pci/devices/0000:17:00.0/virtfn7") == "../0000:17:01.0"
    assert _link(root / "sys/bus/pci/devices/0000:18:00.0/driver") == "../../../../bus/pci/drivers/nvidia"
    assert (root / "sys/class/infiniband/mlx5_0/device").resolve().name == "0000:17:00.0"
    info = (root / "proc/driver/nvidia/gpus/0000:18:00.0/information").read_text()
    assert "Model: \t\t NVIDIA H100 80GB HBM3" in info and "Device Minor: \t 0" in info
    assert (root / "sys/devices/system/node/node1/meminfo").read_text().startswith("Node 1 MemTotal:")
    assert (root / "sys/devices/system/cpu/cpu5/node0").is_symlink()
    assert (root / "dev/infiniband/uverbs71").is_file()


def test_topology_figures() -> None:
    """The ready topologies have the documented sizes."""
    dgx = TOPOLOGIES["dgx"]
    # 8 GPUs and the ASPEED BMC display chip (a GpuSpec: a display-class PCI function)
    assert (dgx.cpu_count, dgx.node_count, len(dgx.gpus), len(dgx.nics)) == (224, 2, 9, 8)
    assert [g.vendor_id for g in dgx.gpus].count(0x1A03) == 1
    assert sum(len(n.vfs) for n in dgx.nics) == 64
    huge = TOPOLOGIES["huge"]
    assert len(huge.gpus) + len(huge.nics) + sum(len(n.vfs) for n in huge.nics) + huge.node_count > 300
    assert {str(g.numa_node) for g in TOPOLOGIES["cloud_vm"].gpus} == {"-1"}


def test_custom_topology(tmp_path: Path) -> None:
    """A small custom topology writes exactly its CPUs and nodes (the API other tests use)."""
    topo = Topology(name="tiny", sockets=1, cores_per_socket=2, threads_per_core=2, nodes_per_socket=2)
    root = write_host_tree(tmp_path / "tiny", topo)
    assert root == tmp_path / "tiny"
    assert (root / "sys/devices/system/cpu/online").read_text() == "0-3\n"
    assert (root / "sys/devices/system/node/node0/cpulist").read_text() == "0,2\n"
    assert (root / "sys/devices/system/node/node1/cpulist").read_text() == "1,3\n"
