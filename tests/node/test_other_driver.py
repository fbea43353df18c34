"""numadra beside a second DRA driver for GPUs, both plugins of the same real kubelet.

The second driver is harness/standin_gpu_driver.py (``gpu.example.com``): a kubelet plugin that
registers with the kubelet's plugin watcher, publishes a ResourceSlice for this node with the
standard ``resource.kubernetes.io/pciBusID`` and ``numaNode`` of GPUs of numadra's host tree,
prepares through a CDI spec of its own, and has a DeviceClass with ``extendedResourceName:
example.com/gpu``. No GPU exists here, so numadra runs on a generated host tree (as in
test_gpu_userspace.py), with stand-in character devices for its NVIDIA GPUs on the host.

**The tree over this host's CPUs.** The tree has two NUMA nodes, node 0 with CPU 0 and node 1 with
CPU 1: the host's two real CPUs, so the cpusets numadra gives are real. The kernel here has one
memory node only, and a container pinned to the memory of node 1 could not start, so every GPU is
on node 0. "Within its GPU's node" is then ``Cpus_allowed_list`` = 0, where a container nobody
placed runs on 0-1; and a claim's CPUs under ``matchAttribute numaNode`` must come from
``cpu-numa0`` of the two CPU devices.

Placing a pod of another driver's devices reads the pod and its claims, which needs ``get`` on
pods: the scenarios run with deploy/'s ``read-pods`` component applied to numadra's ClusterRole.

Scenarios: (i) a GPU the other driver publishes leaves numadra's slice and comes back, without a
restart, when the other driver stops and its slice goes; (ii) one claim with the other driver's
GPU and numadra's CPU under ``matchAttribute`` runs pinned on the GPU's node; (iii) a plain
``nvidia.com/gpu: 1`` pod (numadra's class) and a plain ``example.com/gpu: 1`` pod (the other
driver's class) each run on their GPU's node.
"""

from __future__ import annotations

import contextlib
import os
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.controlplane import Process, wait_for
from harness.hostspec import GpuSpec, Topology
from harness.hosttree import write_host_tree
from harness.nvidia import make_char_devices
from harness.standin_gpu_driver import (
    STANDIN_DRIVER,
    STANDIN_ENV,
    STANDIN_EXTENDED_RESOURCE,
    command,
    device_class,
    device_name,
    logged_ready,
)
from tests.node.conftest import DEFAULT_DRIVER_FLAGS, DRIVER, NODE, RESOURCE, NodeCluster, busybox_pod

pytestmark = pytest.mark.node

REPO = Path(__file__).resolve().parents[2]
NUMA = "resource.kubernetes.io/numaNode"
BUS_ID = "resource.kubernetes.io/pciBusID"
#: numadra's own GPU, and the GPU the other driver publishes too (numadra withholds it then)
OURS, THEIRS = "0000:17:00.0", "0000:18:00.0"
MINORS = (252, 253)  # not test_gpu_userspace.py's
TOPOLOGY = Topology(
    name="beside",
    sockets=1,
    cores_per_socket=2,
    nodes_per_socket=2,
    gpus=tuple(
        GpuSpec(
            bus_id=bus_id,
            numa_node=0,
            nvidia_minor=minor,
            nvidia_uuid=f"GPU-5c5c5c5c-0000-4000-8000-000000000{minor}",
            product_name="NVIDIA L4",
        )
        for bus_id, minor in zip((OURS, THEIRS), MINORS, strict=True)
    ),
    remove=("dev/nvidiactl", "dev/nvidia-uvm", "dev/nvidia-uvm-tools"),
)
HOST_NODES = tuple(f"/dev/nvidia{m}" for m in MINORS)
GPU_NODE = 0
#: the CPUs of the GPUs' node in the tree: the host's CPU 0
NODE_CPUS = frozenset(TOPOLOGY.node_cpus(GPU_NODE))
SLICES = f"{RESOURCE}/resourceslices"
CLUSTER_ROLE = "numadra-kubeletplugin"
READ_PODS = REPO / "deploy/kustomize/components/read-pods/kustomization.yaml"


@dataclass
class Beside:
    node: NodeCluster
    tree: Path
    standins: int = 0

    def driver_flags(self) -> tuple[str, ...]:
        return ("--host-root", str(self.tree))

    def start_standin(self) -> Process:
        """The other driver's plugin, publishing THEIRS; returns once registered and published."""
        node = self.node
        self.standins += 1
        n = self.standins
        argv = command(
            node_name=NODE,
            kubeconfig=node.plane.root / "admin.kubeconfig",
            registrar_dir=node.kubelet.registry_dir,
            plugin_dir=node.kubelet.plugins_dir / STANDIN_DRIVER,
            cdi_dir=node.cdi_dir,
            gpus=[THEIRS],
            host_root=self.tree,
        )
        proc = Process(f"standin-{n}", argv, node.root / f"standin-{n}.out", node.root / f"standin-{n}.log")
        proc.start(env={"PYTHONPATH": str(REPO)}, cwd=REPO)

        def ready() -> bool:
            proc.check_running()
            return logged_ready(proc.stderr_path)

        wait_for(ready, 60, "the stand-in driver to register and publish", interval=0.2)
        return proc


def read_pods_rules() -> list[dict[str, Any]]:
    """The rules deploy/'s ``read-pods`` component adds to numadra's ClusterRole."""
    component = yaml.safe_load(READ_PODS.read_text())
    (patch,) = component["patches"]
    assert patch["target"] == {"kind": "ClusterRole", "name": CLUSTER_ROLE}
    ops = yaml.safe_load(patch["patch"])
    assert all(op["op"] == "add" and op["path"] == "/rules/-" for op in ops), ops
    return [op["value"] for op in ops]


@pytest.fixture(scope="module")
def beside(node_session: NodeCluster) -> Iterator[Beside]:
    """numadra on the tree, the host's stand-in GPU nodes, the other driver's DeviceClass."""
    node = node_session
    if node.torn_down:
        pytest.skip("the node was torn down by the host-clean check")
    tree = write_host_tree(node.root / f"beside-{uuid.uuid4().hex[:6]}", TOPOLOGY)
    for path in HOST_NODES:
        assert not os.path.lexists(path), f"{path} exists on this host: not a stand-in to replace"
    made = Beside(node, tree)
    role_path = f"/apis/rbac.authorization.k8s.io/v1/clusterroles/{CLUSTER_ROLE}"
    rules = node.admin.get(role_path)["rules"]
    try:
        make_char_devices(Path("/"), HOST_NODES)
        node.admin.create(f"{RESOURCE}/deviceclasses", device_class(), fieldValidation="Strict")
        node.admin.patch(role_path, {"rules": rules + read_pods_rules()})
        node.stop_driver()
        node.start_driver(made.driver_flags())
        yield made
    finally:
        node.stop_driver()
        for path in HOST_NODES:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)  # noqa: PTH108
        node.admin.delete(f"{RESOURCE}/deviceclasses/{STANDIN_DRIVER}")
        node.admin.patch(role_path, {"rules": rules})
        node.start_driver(DEFAULT_DRIVER_FLAGS)


@pytest.fixture
def on_tree(beside: Beside) -> Beside:
    """The module's node, with numadra still on the tree (a scenario before may have restarted it)."""
    node = beside.node
    if node.driver is None or node.driver_flags != beside.driver_flags():
        node.stop_driver()
        node.start_driver(beside.driver_flags())
    node.check_running()
    return beside


@pytest.fixture
def standin(on_tree: Beside) -> Iterator[Process]:
    """The other driver running, and numadra's slice without its GPU."""
    proc = on_tree.start_standin()
    try:
        wait_for(lambda: numadra_gpus(on_tree.node) == {OURS}, 30, "numadra to withhold THEIRS", interval=0.2)
        yield proc
    finally:
        proc.stop()
        wait_for(lambda: not other_slices(on_tree.node), 30, "the stand-in's slice to go", interval=0.2)


def numadra_gpus(node: NodeCluster) -> set[str]:
    """The bus IDs of the GPUs in numadra's slices for this node."""
    slices = node.admin.items(SLICES, fieldSelector=f"spec.driver={DRIVER},spec.nodeName={NODE}")
    return {
        str(d["attributes"][BUS_ID]["string"])
        for s in slices
        for d in s["spec"].get("devices") or []
        if BUS_ID in d.get("attributes", {}) and d["name"].startswith("gpu-")
    }


def other_slices(node: NodeCluster) -> list[dict[str, Any]]:
    return node.admin.items(SLICES, fieldSelector=f"spec.driver={STANDIN_DRIVER}")


def metrics(node: NodeCluster) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{node.metrics_port}/metrics", timeout=5) as answer:
        return str(answer.read().decode())


def withheld_by_standin(node: NodeCluster) -> float:
    """``numadra_devices_withheld`` of the stand-in driver (0 when it has no series)."""
    for line in metrics(node).splitlines():
        if line.startswith("numadra_devices_withheld{") and f'owner="{STANDIN_DRIVER}"' in line:
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def withheld_events(node: NodeCluster) -> list[dict[str, Any]]:
    """numadra's DevicesWithheld Events on the Node that name the stand-in driver."""
    events = node.admin.items(
        "/api/v1/events", fieldSelector="involvedObject.kind=Node,reason=DevicesWithheld"
    )
    return [e for e in events if STANDIN_DRIVER in e.get("message", "") and e["type"] == "Warning"]


def container_env(node: NodeCluster, cid: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in node.exec(cid, "env").splitlines() if "=" in line)


def extended_claim(node: NodeCluster, pod: dict[str, Any]) -> dict[str, Any]:
    """The claim the scheduler made for the pod's extended resource."""
    name = pod["status"]["extendedResourceClaimStatus"]["resourceClaimName"]
    ns = pod["metadata"]["namespace"]
    return dict(node.admin.get(f"{RESOURCE}/namespaces/{ns}/resourceclaims/{name}"))


def test_a_gpu_the_other_driver_publishes_is_withheld_and_comes_back_when_it_stops(on_tree: Beside) -> None:
    """(i) numadra's slice loses THEIRS while the other driver's slice names its bus ID, says so
    in ``numadra_devices_withheld``, and has it again once that driver stopped and its slice is
    gone, from the same numadra process."""
    node = on_tree.node
    driver = node.driver
    assert driver is not None and driver.proc is not None
    pid = driver.proc.pid
    wait_for(lambda: numadra_gpus(node) == {OURS, THEIRS}, 30, "numadra to publish both GPUs", interval=0.2)
    proc = on_tree.start_standin()
    try:
        (theirs,) = other_slices(node)
        (device,) = theirs["spec"]["devices"]
        assert device["attributes"][BUS_ID] == {"string": THEIRS}
        assert device["attributes"][NUMA] == {"int": GPU_NODE}  # read from the tree's sysfs
        wait_for(lambda: numadra_gpus(node) == {OURS}, 30, "numadra to withhold THEIRS", interval=0.2)
        # said where an operator looks: the metric (refreshed each housekeeping round), a Node Event
        wait_for(
            lambda: withheld_by_standin(node) == 1, 30, "numadra_devices_withheld to say 1", interval=0.5
        )
        wait_for(lambda: withheld_events(node), 30, "a DevicesWithheld Node Event", interval=0.2)
    finally:
        proc.stop()
    assert proc.proc is not None and proc.proc.returncode == 0, proc.log_tail()
    assert not other_slices(node)  # the stand-in deletes its slice when it stops
    wait_for(
        lambda: numadra_gpus(node) == {OURS, THEIRS}, 30, "numadra to publish THEIRS again", interval=0.2
    )
    wait_for(lambda: withheld_by_standin(node) == 0, 30, "the withheld metric to drop it", interval=0.5)
    assert node.driver is driver and driver.proc is not None and driver.proc.pid == pid
    driver.check_running()


def test_a_claim_across_both_drivers_runs_pinned_on_the_gpus_node(on_tree: Beside, standin: Process) -> None:
    """(ii) The other driver's GPU and numadra's CPU in one claim under ``matchAttribute``: the
    scheduler takes numadra's ``cpu-numa0``, each driver prepares its part (the other driver's CDI
    env is in the container), and the container runs on the GPU's node's CPU and memory."""
    node = on_tree.node
    ns = node.new_namespace("cross")
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "cross"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "gpu", "exactly": {"deviceClassName": STANDIN_DRIVER}},
                        {
                            "name": "cpus",
                            "exactly": {
                                "deviceClassName": "cpu.numadra.dev",
                                "capacity": {"requests": {"cpus": "1"}},
                            },
                        },
                    ],
                    "constraints": [{"requests": ["gpu", "cpus"], "matchAttribute": NUMA}],
                }
            }
        },
    }
    try:
        node.admin.create(
            f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates", template, fieldValidation="Strict"
        )
        pod = busybox_pod("cross")
        pod["spec"]["resourceClaims"] = [{"name": "cross", "resourceClaimTemplateName": "cross"}]
        pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "cross"}]
        node.create_pod(ns, pod)
        pod = node.wait_running(ns, "cross")
        claim = node.claim_of(pod, "cross")
        results = {r["request"]: r for r in claim["status"]["allocation"]["devices"]["results"]}
        assert (results["gpu"]["driver"], results["gpu"]["device"]) == (STANDIN_DRIVER, device_name(THEIRS))
        assert (results["cpus"]["driver"], results["cpus"]["device"]) == (DRIVER, f"cpu-numa{GPU_NODE}")
        uid = claim["metadata"]["uid"]
        pinning = node.claim_pinning(uid)
        assert pinning.cpus == NODE_CPUS and pinning.mems == {GPU_NODE}

        cid = node.container_id(pod)
        assert container_env(node, cid)[STANDIN_ENV] == THEIRS  # the other driver's CDI spec
        assert node.proc_status(cid) == pinning
        assert node.main_process_status(cid) == pinning
        node.delete_all_pods(ns)
        wait_for(
            lambda: not [p for p in node.cdi_dir.iterdir() if uid in p.name],
            30,
            "both drivers to unprepare the claim",
            interval=0.2,
        )
    finally:
        node.delete_all_pods(ns)


def plain_gpu_pod(name: str, resource: str) -> dict[str, Any]:
    return busybox_pod(name, resources={"limits": {resource: "1"}})


def test_a_plain_nvidia_gpu_pod_runs_on_its_gpus_node(on_tree: Beside) -> None:
    """(iii) ``nvidia.com/gpu: 1`` on numadra's class: the scheduler's claim gets one of numadra's
    GPUs, and the container (no CPU request) runs on that GPU's node's shared CPUs and memory."""
    node = on_tree.node
    ns = node.new_namespace("plain")
    try:
        node.create_pod(ns, plain_gpu_pod("plain", "nvidia.com/gpu"))
        pod = node.wait_running(ns, "plain")
        (result,) = extended_claim(node, pod)["status"]["allocation"]["devices"]["results"]
        assert result["driver"] == DRIVER and result["device"] in {device_name(OURS), device_name(THEIRS)}
        status = node.proc_status(node.container_id(pod))
        assert (status.cpus, status.mems) == (NODE_CPUS, {GPU_NODE})
    finally:
        node.delete_all_pods(ns)


def test_a_plain_pod_on_the_other_drivers_gpu_runs_on_its_gpus_node(
    on_tree: Beside, standin: Process
) -> None:
    """(iii) ``example.com/gpu: 1`` on the other driver's class: that driver prepares the
    scheduler's claim (its CDI env is in the container), and numadra places the container on the
    GPU's node, read from the other driver's slice."""
    node = on_tree.node
    ns = node.new_namespace("theirs")
    try:
        node.create_pod(ns, plain_gpu_pod("theirs", STANDIN_EXTENDED_RESOURCE))
        pod = node.wait_running(ns, "theirs")
        (result,) = extended_claim(node, pod)["status"]["allocation"]["devices"]["results"]
        assert (result["driver"], result["device"]) == (STANDIN_DRIVER, device_name(THEIRS))
        cid = node.container_id(pod)
        assert container_env(node, cid)[STANDIN_ENV] == THEIRS
        status = node.proc_status(cid)
        assert (status.cpus, status.mems) == (NODE_CPUS, {GPU_NODE})
    finally:
        node.delete_all_pods(ns)
