"""Topology as the hardware has it, through the real scheduler: sub-NUMA clusters, GPU memory nodes.

On an SNC-2 node (harness/topologies.py ``snc2``) each socket's GPU sits on its first NUMA
node and its NIC on the second, so ``matchAttribute: resource.kubernetes.io/numaNode`` with the
int form refuses a pair that is in fact close. Two answers are checked:

* on the session cluster (no feature gates): ``matchAttribute: numadra.dev/socket`` pairs the
  GPU with the NIC of its socket, never with the other socket's;
* on a control plane of its own with ``DRAListTypeAttributes`` on (apiserver, scheduler,
  controller-manager) and ``numadra run --numa-node-list``: the KEP-6072 lists ([0, 1] for the
  GPU, [1, 0] for the NIC) intersect, so the standard attribute pairs them, and still refuses a
  NIC of the other socket ([3, 2]).

And on a Grace Hopper node (``grace_hopper``): the GPU's HBM is a ``memory`` device that
``matchAttribute: numadra.dev/gpuMemoryNode`` pairs with its GPU; a claim holding both has its
memory markers on the GPU's CPU node and the HBM node.
"""

from __future__ import annotations

import json
import shutil
import signal
import time
from collections.abc import Iterator
from typing import Any

import pytest

from harness.hosttree import TOPOLOGIES, Topology, write_host_tree
from harness.poll import wait_for
from tests.e2e.conftest import (
    DRIVER,
    NODE,
    RESOURCE,
    TOPOLOGY,
    Cluster,
    claim_pod,
    condition,
    start_cluster,
)

pytestmark = pytest.mark.e2e

NUMA = "resource.kubernetes.io/numaNode"
SOCKET = f"{DRIVER}/socket"
GPU_S0 = "0000:18:00.0"  # socket 0, NUMA node 0
NIC_S0 = "nic-0000-38-00-0"  # socket 0, NUMA node 1
NIC_S1_BUS = "0000:b8:00.0"  # socket 1, NUMA node 3
GH_GPU = "gpu-0009-01-00-0"
GH_HBM = "memory-numa1"
MEMORY_CLASS = "memory.numadra.dev"


def _restart_on(cluster: Cluster, topology: Topology) -> None:
    """Stop the driver, replace the node's host tree, start the driver and wait for its slices."""
    if cluster.driver is not None:
        cluster.driver.stop(signal.SIGTERM)
        cluster.driver = None
    shutil.rmtree(cluster.host)
    write_host_tree(cluster.host, topology)
    registrations = cluster.registrations()
    cluster.start_driver()
    wait_for(lambda: cluster.registrations() > registrations, 30, "the driver to register again")


def _published(cluster: Cluster) -> dict[str, dict[str, Any]]:
    """Published device name -> its attributes (as the apiserver stored them)."""
    return {d["name"]: d["attributes"] for s in cluster.slices() for d in s["spec"].get("devices", [])}


class SessionNode:
    """The session cluster's node, switched between host trees at most once per topology."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.current = TOPOLOGY

    def on(self, name: str, marker: str) -> Cluster:
        """The cluster with its node on topology ``name``, once ``marker`` is a published device."""
        if self.current != name:
            _restart_on(self.cluster, TOPOLOGIES[name])
            self.current = name
            wait_for(lambda: marker in self.cluster.published_devices(), 30, f"the {name} node's slices")
        return self.cluster


@pytest.fixture(scope="module")
def session_node(e2e_cluster: Cluster) -> Iterator[SessionNode]:
    """Switches the session node for this module's scenarios; back to the session topology after."""
    node = SessionNode(e2e_cluster)
    yield node
    if node.current != TOPOLOGY:
        _restart_on(e2e_cluster, TOPOLOGIES[TOPOLOGY])

        def restored() -> bool:
            devices = e2e_cluster.published_devices()
            return "nic-0000-17-00-1" in devices and not {"cpu-numa3", GH_HBM} & devices  # a dgx VF

        wait_for(restored, 30, "the session slices")


@pytest.fixture
def snc_node(session_node: SessionNode) -> Cluster:
    """The session cluster's node on the SNC-2 tree."""
    return session_node.on("snc2", "cpu-numa3")


@pytest.fixture(scope="module")
def list_cluster() -> Iterator[Cluster]:
    """A cluster of its own: DRAListTypeAttributes on, the driver publishing numaNode lists, SNC-2."""
    with start_cluster(
        topology=TOPOLOGIES["snc2"],
        feature_gates={"DRAListTypeAttributes": True},
        driver_args=("--numa-node-list",),
    ) as cluster:
        yield cluster


def _selector(attribute: str, value: str) -> dict[str, Any]:
    return {"cel": {"expression": f'device.attributes["resource.kubernetes.io"].{attribute} == "{value}"'}}


def _pair_claim(name: str, match: str, *, gpu_bus: str, nic_bus: str | None = None) -> dict[str, Any]:
    """A GPU (chosen by PCI address) and any NIC (or the one at ``nic_bus``) under ``matchAttribute``."""
    nic: dict[str, Any] = {"deviceClassName": "nic.numadra.dev"}
    if nic_bus is not None:
        nic["selectors"] = [_selector("pciBusID", nic_bus)]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": "gpu.numadra.dev",
                            "selectors": [_selector("pciBusID", gpu_bus)],
                        },
                    },
                    {"name": "nic", "exactly": nic},
                ],
                "constraints": [{"requests": ["gpu", "nic"], "matchAttribute": match}],
            }
        },
    }


def _start(
    cluster: Cluster, namespace: str, claim: dict[str, Any], requests: tuple[str, ...] = ("gpu", "nic")
) -> str:
    name = claim["metadata"]["name"]
    cluster.admin.create(f"{RESOURCE}/namespaces/{namespace}/resourceclaims", claim, fieldValidation="Strict")
    cluster.create_pod(namespace, claim_pod(name, requests, claim=name))
    return str(name)


def _allocated(cluster: Cluster, namespace: str, name: str) -> tuple[dict[str, str], dict[str, Any]]:
    """request -> device of a bound pod's claim, and the claim."""
    claim = cluster.claim(namespace, name)
    results = claim["status"]["allocation"]["devices"]["results"]
    assert all(r["driver"] == DRIVER and r["pool"] == NODE for r in results)
    return {r["request"]: r["device"] for r in results}, claim


def _unschedulable(cluster: Cluster, namespace: str, name: str) -> dict[str, Any]:
    """The pod's PodScheduled condition once the scheduler gave up on it; it is still unbound."""

    def gave_up() -> dict[str, Any] | None:
        cluster.check_running()
        cond = condition(cluster.pod(namespace, name), "PodScheduled")
        return cond if cond is not None and cond["status"] == "False" else None

    cond = wait_for(gave_up, 60, f"the scheduler to give up on {namespace}/{name}", interval=0.2)
    assert cond["reason"] == "Unschedulable", cond
    time.sleep(1.0)  # a later retry must not bind it either
    assert not cluster.pod(namespace, name)["spec"].get("nodeName")
    assert "allocation" not in cluster.claim(namespace, name).get("status", {})
    return cond


def _finish(cluster: Cluster, namespace: str, name: str, *, prepared: bool) -> None:
    """Delete the pod (unprepared by drakubelet when it was prepared) and its claim: devices free."""
    if prepared:
        cluster.delete_pod(namespace, name)
    else:
        cluster.admin.delete(f"/api/v1/namespaces/{namespace}/pods/{name}")
    cluster.admin.delete(f"{RESOURCE}/namespaces/{namespace}/resourceclaims/{name}")


# -- the session cluster: int numaNode, the socket attribute ----------------------------------------


def test_snc_int_numa_node_refuses_a_close_pair(snc_node: Cluster) -> None:
    """GPU on node 0, NICs on nodes 1 and 3: under the int numaNode no pair exists, though node 1 is close."""
    cluster = snc_node
    attrs = _published(cluster)
    assert attrs["gpu-0000-18-00-0"][NUMA] == {"int": 0} and attrs[NIC_S0][NUMA] == {"int": 1}
    ns = cluster.new_namespace("snc-int")
    name = _start(cluster, ns, _pair_claim("int-pair", NUMA, gpu_bus=GPU_S0))
    cond = _unschedulable(cluster, ns, name)
    print(f"PodScheduled: {cond['reason']}: {cond.get('message')}")
    _finish(cluster, ns, name, prepared=False)


def test_snc_socket_pairs_the_gpu_with_the_nic_of_its_socket(snc_node: Cluster) -> None:
    """matchAttribute numadra.dev/socket: the socket-0 GPU gets the socket-0 NIC (node 1), prepared."""
    cluster = snc_node
    attrs = _published(cluster)
    assert attrs["gpu-0000-18-00-0"]["socket"] == attrs[NIC_S0]["socket"] == {"int": 0}
    ns = cluster.new_namespace("snc-socket")
    name = _start(cluster, ns, _pair_claim("socket-pair", SOCKET, gpu_bus=GPU_S0))
    pod = cluster.wait_bound(ns, name)
    devices, claim = _allocated(cluster, ns, name)
    assert devices == {"gpu": "gpu-0000-18-00-0", "nic": NIC_S0}
    ids = cluster.prepared(pod)["app"]
    uid = claim["metadata"]["uid"]
    assert sorted(ids) == sorted(f"{DRIVER}/claim={uid}-{d}" for d in devices.values())
    _finish(cluster, ns, name, prepared=True)


def test_snc_socket_refuses_the_other_sockets_nic(snc_node: Cluster) -> None:
    """The socket-0 GPU with the NIC of socket 1 (named by address) under the socket constraint: no pair."""
    cluster = snc_node
    ns = cluster.new_namespace("snc-far")
    name = _start(cluster, ns, _pair_claim("far-pair", SOCKET, gpu_bus=GPU_S0, nic_bus=NIC_S1_BUS))
    _unschedulable(cluster, ns, name)
    _finish(cluster, ns, name, prepared=False)


# -- a control plane with DRAListTypeAttributes: the KEP-6072 list ------------------------------


def test_list_form_is_stored_by_the_apiserver(list_cluster: Cluster) -> None:
    """With the gate on the apiserver keeps the lists (off, it drops them and refuses the slice)."""
    attrs = _published(list_cluster)
    assert attrs["gpu-0000-18-00-0"][NUMA] == {"ints": [0, 1]}
    assert attrs[NIC_S0][NUMA] == {"ints": [1, 0]}
    assert attrs["nic-0000-b8-00-0"][NUMA] == {"ints": [3, 2]}
    assert attrs["cpu-numa2"][NUMA] == {"ints": [2, 3]}
    assert all(len(s["spec"]["devices"]) <= 64 for s in list_cluster.slices())


def test_list_numa_node_pairs_sub_numa_clusters_of_one_socket(list_cluster: Cluster) -> None:
    """The standard numaNode constraint pairs GPU [0, 1] with NIC [1, 0]; the metadata carries the list."""
    cluster = list_cluster
    ns = cluster.new_namespace("snc-list")
    name = _start(cluster, ns, _pair_claim("list-pair", NUMA, gpu_bus=GPU_S0))
    pod = cluster.wait_bound(ns, name)
    devices, claim = _allocated(cluster, ns, name)
    assert devices == {"gpu": "gpu-0000-18-00-0", "nic": NIC_S0}
    cluster.prepared(pod)
    uid = claim["metadata"]["uid"]
    meta = cluster.plugin_dir / "dra-device-metadata" / f"{uid}_nic.json"
    text = meta.read_text()
    assert '"ints":[1,0]' in text.replace(" ", ""), text
    _finish(cluster, ns, name, prepared=True)


def test_list_numa_node_still_refuses_the_other_socket(list_cluster: Cluster) -> None:
    """GPU [0, 1] and the socket-1 NIC [3, 2] do not intersect: unschedulable."""
    cluster = list_cluster
    ns = cluster.new_namespace("snc-list-far")
    name = _start(cluster, ns, _pair_claim("list-far", NUMA, gpu_bus=GPU_S0, nic_bus=NIC_S1_BUS))
    _unschedulable(cluster, ns, name)
    _finish(cluster, ns, name, prepared=False)


# -- Grace Hopper: the GPU's memory as a memory device ------------------------------------------


@pytest.fixture
def grace_hopper_node(session_node: SessionNode) -> Iterator[Cluster]:
    """The session node on the GH200 tree; deploy/ installs the DeviceClass of memory devices."""
    cluster = session_node.on("grace_hopper", GH_HBM)
    selector = f'device.driver == "{DRIVER}" && device.attributes["{DRIVER}"].type == "memory"'
    installed = cluster.admin.get(f"{RESOURCE}/deviceclasses/{MEMORY_CLASS}")
    assert [s["cel"]["expression"] for s in installed["spec"]["selectors"]] == [selector]
    yield cluster


def test_gpu_and_its_own_memory_are_paired_and_pinned_together(grace_hopper_node: Cluster) -> None:
    """gpu + 16Gi of memory under matchAttribute gpuMemoryNode: the HBM device; both nodes in the markers."""
    cluster = grace_hopper_node
    attrs = _published(cluster)
    assert attrs[GH_HBM]["memoryKind"] == {"string": "gpu"}
    assert attrs[GH_HBM]["gpuMemoryNode"] == attrs[GH_GPU]["gpuMemoryNode"] == {"int": 1}
    assert "cpu-numa1" not in attrs
    ns = cluster.new_namespace("gh")
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "gpu-hbm"},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpu", "exactly": {"deviceClassName": "gpu.numadra.dev"}},
                    {
                        "name": "hbm",
                        "exactly": {
                            "deviceClassName": MEMORY_CLASS,
                            "capacity": {"requests": {"memory": "16Gi"}},
                        },
                    },
                ],
                "constraints": [{"requests": ["gpu", "hbm"], "matchAttribute": f"{DRIVER}/gpuMemoryNode"}],
            }
        },
    }
    name = _start(cluster, ns, claim, ("gpu", "hbm"))
    pod = cluster.wait_bound(ns, name)
    devices, allocated = _allocated(cluster, ns, name)
    assert devices == {"gpu": GH_GPU, "hbm": GH_HBM}
    results = {r["request"]: r for r in allocated["status"]["allocation"]["devices"]["results"]}
    assert results["hbm"]["consumedCapacity"]["memory"] == "16Gi"
    cluster.prepared(pod)
    spec = json.loads(cluster.spec_file(allocated["metadata"]["uid"]).read_text())
    mems = {
        e.split("=", 1)[1]
        for d in spec["devices"]
        for e in d["containerEdits"]["env"]
        if e.startswith("NUMADRA_MEMS=")
    }
    assert mems == {"0-1"}
    _finish(cluster, ns, name, prepared=True)
