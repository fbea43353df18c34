"""A plain GPU pod on a real multi-NUMA kernel: each container runs on its own GPU's node.

The pod's two containers ask for ``nvidia.com/gpu: 1`` each and for no CPUs of numadra; the
scheduler's extended-resource claim gave container 0 a GPU on node 0 and container 1 one on node
1 (stand-in PCI entries in a host tree whose CPU and NUMA part is the guest kernel's own). In the
guest, numadra prepared the claim and its NRI plugin answered the runtime's CreateContainer; the
adjustment went into a real cgroup v2, where the container's process allocated 64 MiB
(tests/vm/plain_gpu.py). These tests check the guest's record against the VM's topology.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.vm.conftest import BOOT_TIMEOUT_TCG, BUILD_TIMEOUT, VmRun
from tests.vm.machine import TOPOLOGY, Node
from tests.vm.plain_gpu import CONTAINERS, GPUS, StandInGpu

MIB = 1 << 20

pytestmark = [pytest.mark.vm, pytest.mark.timeout(BUILD_TIMEOUT + BOOT_TIMEOUT_TCG + 60)]


def _facts(vm: VmRun) -> dict[str, Any]:
    errors = vm.result.get("errors", {})
    assert "plain gpu pod" not in errors, errors["plain gpu pod"]
    facts = vm.result["plain_gpu"]
    assert isinstance(facts, dict), facts
    return facts


def _node(gpu: StandInGpu) -> Node:
    (node,) = [n for n in TOPOLOGY.nodes if n.id == gpu.numa_node]
    return node


def test_the_host_tree_has_the_kernels_nodes_and_the_stand_in_gpus(vm: VmRun) -> None:
    """numadra's discovery of the pod's node: the VM's CPUs per node (the kernel's, not the tree
    generator's one CPU) and each stand-in GPU on its node."""
    inventory = _facts(vm)["inventory"]
    assert inventory["nodes"] == {str(n.id): list(n.cpus) for n in TOPOLOGY.nodes}
    assert inventory["gpus"] == {g.device_name: g.numa_node for g in GPUS}


def test_the_kubelet_and_numadra_read_the_apiserver_stand_in(vm: VmRun) -> None:
    """The pod and its claim came over HTTP from the stand-in on the guest's loopback: the kubelet's
    reads (pod, claim) and the prepare's read of the claim. The pod's reservation was recorded at
    prepare, so the NRI path needed no read of its own."""
    facts = _facts(vm)
    claim = "GET /apis/resource.k8s.io/v1/namespaces/ml/resourceclaims/trainer-extended-resources-vm7qz"
    assert facts["apiserver_requests"] == ["GET /api/v1/namespaces/ml/pods/trainer", claim, claim]
    # each container got the CDI device of its own request only
    for name, gpu in CONTAINERS.items():
        (cdi_id,) = facts["cdi_ids"][name]
        assert cdi_id.endswith(f"-{gpu.device_name}"), cdi_id


@pytest.mark.parametrize("name", list(CONTAINERS), ids=lambda n: f"{n}-node{CONTAINERS[n].numa_node}")
def test_each_gpu_container_runs_on_its_gpus_node(vm: VmRun, name: str) -> None:
    """The NRI plugin's adjustment is the GPU's node: its CPUs (the container holds no CPUs of a
    claim, so the node's shared ones) and its memory. Applied to a cgroup as runc does, the
    container's process runs there and its 64 MiB land there, none elsewhere."""
    facts = _facts(vm)
    assert facts["failures"] == []  # aligned, neither widened nor unconfined
    ctr = facts["containers"][name]
    node = _node(CONTAINERS[name])
    cpulist = f"{node.cpus[0]}-{node.cpus[-1]}"
    # outside its cgroup the process could run and allocate anywhere: the pin is the cgroup's
    assert ctr["outside"] == {
        "Cpus_allowed_list": f"0-{TOPOLOGY.cpus - 1}",
        "Mems_allowed_list": f"0-{len(TOPOLOGY.nodes) - 1}",
    }
    assert ctr["adjustment"] == {"cpus": cpulist, "mems": str(node.id)}
    assert ctr["cgroup"] == {"cpuset.cpus": cpulist, "cpuset.mems": str(node.id)}
    assert ctr["cpus_allowed_list"] == cpulist
    assert ctr["mems_allowed_list"] == str(node.id)
    pages = (64 * MIB) // (ctr["page_kb"] * 1024)
    assert ctr["probe_pages"] == {str(node.id): ctr["probe_pages"][str(node.id)]}, ctr["probe_line"]
    assert ctr["probe_pages"][str(node.id)] >= pages, ctr["probe_line"]
    assert set(ctr["anon_pages"]) == {str(node.id)}, ctr["anon_lines"]
