"""Discovery on the NUMA shapes of real hardware (Grace Hopper, SNC-2, CXL) and on odd node files."""

from __future__ import annotations

import dataclasses
import tempfile
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from driver.inventory.discovery import discover
from driver.inventory.model import DeviceKind, Inventory, MemoryKind, NumaNode
from harness.hosttree import TOPOLOGIES, Topology, write_host_tree
from tests.unit.inventory.trees import inventory

GiB = 1024**3
NODE = "sys/devices/system/node"


def _discover(topo: Topology) -> tuple[Inventory, list[MutableMapping[str, Any]]]:
    """Discovery on a fresh tree of ``topo``, with its warnings."""
    root = write_host_tree(Path(tempfile.mkdtemp(prefix="numadra-topo-")) / topo.name, topo)
    with capture_logs() as logs:
        inv = discover(root, use_nvml=False)
    return inv, [e for e in logs if e["log_level"] == "warning"]


def _node(inv: Inventory, node_id: int) -> NumaNode:
    node = inv.numa_node(node_id)
    assert node is not None
    return node


# -- Grace Hopper --------------------------------------------------------------------------------


def test_grace_hopper_gpu_memory_is_a_memory_device_of_that_gpu() -> None:
    """GH200: node 0 has the CPUs; node 1 (HBM, no CPUs) is the GPU's memory; empty nodes 2-8 vanish."""
    inv = inventory("grace_hopper")
    assert [(n.name, n.kind) for n in inv.numa_nodes] == [
        ("cpu-numa0", DeviceKind.CPU),
        ("memory-numa1", DeviceKind.MEMORY),
    ]
    hbm = _node(inv, 1)
    assert (hbm.cpus, hbm.memory_bytes, hbm.memory_kind, hbm.gpu_bus_id) == (
        (),
        96 * GiB,
        MemoryKind.GPU,
        "0009:01:00.0",
    )
    (gpu,) = inv.gpus
    assert gpu.memory_node == 1
    # the GPU's PCI function is on the CPU node; memory may follow it there, never to the HBM
    assert (gpu.pci.numa_node, gpu.pci.local_memory, gpu.pci.socket) == (0, True, 0)
    assert (hbm.socket, hbm.near_nodes, _node(inv, 0).near_nodes) == (0, (1, 0), (0, 1))
    assert {c.numa_node for c in inv.cpus} == {0}
    assert inv.find("memory-numa1") is hbm and inv.find("cpu-numa1") is None


def test_grace_hopper_discovers_without_warnings() -> None:
    """A faithful GH200 tree is nothing odd: empty placeholder nodes are normal there."""
    _, warnings = _discover(TOPOLOGIES["grace_hopper"])
    assert warnings == []


def test_two_gpus_naming_one_memory_node_pair_with_none() -> None:
    """Which GPU owns node 1 is not proven when two GPUs name it: no pairing, and a warning."""
    gh = TOPOLOGIES["grace_hopper"]
    second = dataclasses.replace(gh.gpus[0], bus_id="0019:01:00.0", nvidia_minor=1)
    inv, warnings = _discover(dataclasses.replace(gh, gpus=(*gh.gpus, second)))
    assert [g.memory_node for g in inv.gpus] == [None, None]
    hbm = _node(inv, 1)
    assert (hbm.memory_kind, hbm.gpu_bus_id) == (MemoryKind.UNKNOWN, None)
    assert [(w["event"], w["gpus"]) for w in warnings] == [
        ("several GPUs name one memory node: paired with none", ["0009:01:00.0", "0019:01:00.0"])
    ]


def test_a_gpu_naming_a_cpu_node_as_its_memory_is_ignored() -> None:
    """numa_status naming node 0 (the Grace CPUs) is wrong: ignored with a warning."""
    gh = TOPOLOGIES["grace_hopper"]
    gpu = dataclasses.replace(gh.gpus[0], memory_node=0)
    inv, warnings = _discover(dataclasses.replace(gh, gpus=(gpu,)))
    assert inv.gpus[0].memory_node is None
    assert _node(inv, 1).memory_kind is MemoryKind.UNKNOWN
    assert [w["event"] for w in warnings] == ["GPU names a NUMA node with CPUs as its memory: ignored"]


def test_a_pci_device_on_a_cpu_less_node_gets_no_local_memory() -> None:
    """A GPU whose PCI numa_node is the HBM node: the attribute says 1, but no memory follows it there."""
    gh = TOPOLOGIES["grace_hopper"]
    gpu = dataclasses.replace(gh.gpus[0], numa_node=1)
    inv, _ = _discover(dataclasses.replace(gh, gpus=(gpu,)))
    assert (inv.gpus[0].pci.numa_node, inv.gpus[0].pci.local_memory) == (1, False)


# -- SNC-2 ------------------------------------------------------------------------------------


def test_snc2_nodes_keep_their_ids_and_their_socket() -> None:
    """Four nodes, two per socket; GPU and NIC of socket 0 on different nodes but one socket and list."""
    inv = inventory("snc2")
    assert [(n.id, n.socket, n.near_nodes, n.distances) for n in inv.numa_nodes] == [
        (0, 0, (0, 1), (10, 12, 21, 21)),
        (1, 0, (1, 0), (12, 10, 21, 21)),
        (2, 1, (2, 3), (21, 21, 10, 12)),
        (3, 1, (3, 2), (21, 21, 12, 10)),
    ]
    assert [(g.pci.numa_node, g.pci.socket, g.pci.near_nodes) for g in inv.gpus] == [
        (0, 0, (0, 1)),
        (2, 1, (2, 3)),
    ]
    assert [(n.pci.numa_node, n.pci.socket, n.pci.near_nodes) for n in inv.nics] == [
        (1, 0, (1, 0)),
        (3, 1, (3, 2)),
    ]
    assert all(len(n.cpus) == 16 for n in inv.numa_nodes)


def test_a_node_without_cpulist_finds_its_cpus_by_their_links() -> None:
    """node1/cpulist unreadable: its CPUs come from the cpuN/node1 links, with a warning."""
    snc = TOPOLOGIES["snc2"]
    inv, warnings = _discover(dataclasses.replace(snc, remove=(f"{NODE}/node1/cpulist",)))
    assert _node(inv, 1).cpus == snc.node_cpus(1)
    assert {c.numa_node for c in inv.cpus if c.id in snc.node_cpus(1)} == {1}
    assert [(w["event"], w["cpus_from"]) for w in warnings] == [
        ("NUMA node without a readable cpulist", "cpuN/nodeM links")
    ]


def test_a_node_with_cpus_that_cannot_be_found_is_not_published() -> None:
    """has_cpu names node 3 but neither its cpulist nor any link says which CPUs: node 3 is left out."""
    snc = TOPOLOGIES["snc2"]
    links = tuple(f"sys/devices/system/cpu/cpu{c}/node3" for c in snc.node_cpus(3))
    inv, warnings = _discover(dataclasses.replace(snc, remove=(f"{NODE}/node3/cpulist", *links)))
    assert [n.id for n in inv.numa_nodes] == [0, 1, 2]
    assert inv.find("memory-numa3") is None and inv.find("cpu-numa3") is None
    events = [w["event"] for w in warnings]
    assert "NUMA node with CPUs none of which can be found: not published" in events
    assert "CPUs in no NUMA node's cpulist: counted on the first node" in events


def test_an_asymmetric_slit_unpairs_the_sub_numa_clusters() -> None:
    """node1's row says 14 to node 0, node0's says 12: the pair is unproven, each lists only itself."""
    snc = TOPOLOGIES["snc2"]
    inv, warnings = _discover(
        dataclasses.replace(snc, extra_files=((f"{NODE}/node1/distance", "14 10 21 21"),))
    )
    assert (_node(inv, 0).near_nodes, _node(inv, 1).near_nodes) == ((0,), (1,))
    assert _node(inv, 2).near_nodes == (2, 3)
    assert [w["event"] for w in warnings] == ["asymmetric NUMA distances: the pair is treated as unrelated"]


def test_a_missing_distance_row_unpairs_its_node() -> None:
    """node2's distance file is gone: node 2 lists itself only, node 3 no longer lists it."""
    snc = TOPOLOGIES["snc2"]
    inv, warnings = _discover(dataclasses.replace(snc, remove=(f"{NODE}/node2/distance",)))
    assert (_node(inv, 2).near_nodes, _node(inv, 3).near_nodes, _node(inv, 2).socket) == ((2,), (3,), 1)
    assert [(w["event"], w["numa_node"]) for w in warnings] == [("NUMA node has no readable distance row", 2)]


@pytest.mark.parametrize(
    "token",
    [pytest.param("1" + "0" * 5000, id="5001-digit"), pytest.param("1²", id="superscript-two")],
)
def test_a_number_python_cannot_convert_in_a_node_file_is_a_warning(token: str) -> None:
    """A distance or MemTotal token that ``isdigit`` accepts but ``int`` refuses: kept out, never raised.

    Both pass ``str.isdigit``; ``int`` raises ValueError on each (more than 4300 digits; a
    superscript digit), which escaped discovery and stopped ``numadra run`` at every start.
    """
    snc = TOPOLOGIES["snc2"]
    planted = (
        (f"{NODE}/node1/distance", f"12 {token} 21 21"),
        (f"{NODE}/node2/meminfo", f"Node 2 MemTotal:       {token} kB\n"),
    )
    inv, warnings = _discover(dataclasses.replace(snc, extra_files=planted))
    assert _node(inv, 1).near_nodes == (1,)
    assert _node(inv, 2).memory_bytes == 0
    assert ("NUMA distance row is not a list of numbers", 1) in [
        (w["event"], w.get("numa_node")) for w in warnings
    ]


# -- CXL ------------------------------------------------------------------------------------------


def test_cxl_expander_is_a_memory_device_on_the_socket_it_hangs_off() -> None:
    """Node 2 (no CPUs, 256 GiB from a CXL region's DAX device) is cxl memory of socket 0."""
    inv, warnings = _discover(TOPOLOGIES["cxl"])
    assert warnings == []
    cxl = _node(inv, 2)
    assert (cxl.name, cxl.memory_kind, cxl.memory_bytes, cxl.socket) == (
        "memory-numa2",
        MemoryKind.CXL,
        256 * GiB,
        0,
    )
    assert (cxl.near_nodes, _node(inv, 0).near_nodes, _node(inv, 1).near_nodes) == ((2, 0), (0, 2), (1,))


def test_memory_only_node_without_proof_of_kind_is_unknown() -> None:
    """Without the DAX device nothing says the node is CXL: kind unknown, still published."""
    cxl = TOPOLOGIES["cxl"]
    inv, warnings = _discover(dataclasses.replace(cxl, remove=("sys/bus/dax/devices/dax0.0",)))
    assert _node(inv, 2).memory_kind is MemoryKind.UNKNOWN
    assert warnings == []


@pytest.mark.parametrize("name", ["grace_hopper", "snc2", "cxl"])
def test_discovery_is_stable(name: str) -> None:
    """A second discovery of the same tree is equal (no order or set iteration leaks in)."""
    from tests.unit.inventory.trees import host_tree

    assert discover(host_tree(name), use_nvml=False) == inventory(name)
