"""cpuset.mems: a CPU-less node (GPU memory, CXL) enters only when the claim asks for its memory device,
and a node without memory never enters (the kernel refuses such a cpuset.mems)."""

from __future__ import annotations

import dataclasses
import tempfile
from pathlib import Path

from driver.inventory.discovery import discover
from driver.inventory.model import Inventory
from driver.pinning.planner import CpuPlanner, mems_for_devices
from driver.pinning.types import CpuMode, CpuRequest
from harness.hosttree import TOPOLOGIES, Topology, write_host_tree
from tests.unit.inventory.trees import inventory

GPU = "gpu-0009-01-00-0"
HBM = "memory-numa1"


def _inventory(topo: Topology) -> Inventory:
    root = write_host_tree(Path(tempfile.mkdtemp(prefix="numadra-mems-")) / topo.name, topo)
    return discover(root, use_nvml=False)


def test_a_gpu_claim_gets_its_cpu_node_not_its_hbm() -> None:
    """Grace Hopper: the GPU's memory follows its PCI node 0, never the HBM node 1 on its own."""
    inv = inventory("grace_hopper")
    assert mems_for_devices(inv, [GPU]) == frozenset({0})
    assert mems_for_devices(inv, [GPU, "nic-0000-01-00-0"]) == frozenset({0})


def test_a_claim_that_asks_for_the_hbm_gets_it() -> None:
    """A claim with the memory device of node 1 may allocate there (and on its GPU's node)."""
    inv = inventory("grace_hopper")
    assert mems_for_devices(inv, [HBM]) == frozenset({1})
    assert mems_for_devices(inv, [GPU, HBM]) == frozenset({0, 1})


def test_a_pci_device_on_a_cpu_less_node_adds_no_memory_node() -> None:
    """A GPU whose PCI numa_node is the HBM node (a generic initiator): the claim did not ask for it."""
    gh = TOPOLOGIES["grace_hopper"]
    inv = _inventory(dataclasses.replace(gh, gpus=(dataclasses.replace(gh.gpus[0], numa_node=1),)))
    assert mems_for_devices(inv, [GPU]) == frozenset()


def test_cpu_assignments_get_the_asked_memory_nodes_and_no_other() -> None:
    """CPUs on node 0 pin mems to 0; with the claim's HBM device, to 0 and 1 (exclusive and shared)."""
    inv = inventory("grace_hopper")
    planner = CpuPlanner(lambda: inv)
    requests = [CpuRequest("main", (0,), 2), CpuRequest("side", (0,), 1, CpuMode.SHARED)]
    plain = planner.plan("uid-a", requests, taken=())
    assert [a.mems for a in plain.assignments] == [frozenset({0})] * 2
    asked = planner.plan("uid-b", requests, taken=plain.cpus, memory_nodes=frozenset({1}))
    assert [a.mems for a in asked.assignments] == [frozenset({0, 1})] * 2


def test_a_node_without_memory_is_never_in_mems() -> None:
    """SNC-2 node 1 reports MemTotal 0: its CPUs are pinned, its mems left alone (not "1")."""
    snc = TOPOLOGIES["snc2"]
    meminfo = "sys/devices/system/node/node1/meminfo"
    inv = _inventory(dataclasses.replace(snc, extra_files=((meminfo, "Node 1 MemTotal:       0 kB"),)))
    (assignment,) = CpuPlanner(lambda: inv).plan("uid-c", [CpuRequest("main", (1,), 2)], taken=()).assignments
    assert len(assignment.cpus) == 2
    assert assignment.mems == frozenset()
    assert mems_for_devices(inv, ["cpu-numa1", "gpu-0000-18-00-0"]) == frozenset({0})
    assert mems_for_devices(inv, ["nic-0000-38-00-0"]) == frozenset()  # the NIC sits on node 1
