"""A claim across drivers: another driver's GPU, numadra's NIC and CPUs, on one NUMA node.

``resource.kubernetes.io/numaNode`` is standard so that one ``matchAttribute`` constraint can keep
devices of several drivers together. Here a second DRA driver, ``gpu.example.com`` (a stand-in
for NVIDIA's, harness/standin_gpu_driver.py: a kubelet plugin registered with the same DRA kubelet
whose ResourceSlice carries GPUs with the standard ``numaNode`` and ``pciBusID``, preparing through
a CDI spec of its own), sits beside numadra. The real scheduler allocates one claim from both
drivers' slices; the DRA kubelet prepares each driver's part through that driver's plugin;
numadra pins the claim's CPUs on the NUMA node of the other driver's GPU
(deploy/examples/cross-driver-gpu-nic-cpu.yaml is the same claim as a user writes it).
"""

from __future__ import annotations

from typing import Any

import pytest

from harness.controlplane import Process, wait_for
from harness.standin_gpu_driver import STANDIN_DRIVER, command, device_class, device_name, logged_ready
from tests.e2e.conftest import DRIVER, NODE, REPO, RESOURCE, Cluster, claim_pod
from tests.e2e.test_claims import device_numa, node_cpus

pytestmark = pytest.mark.e2e

OTHER = STANDIN_DRIVER
NUMA = "resource.kubernetes.io/numaNode"
REQUESTS = ("gpu", "nic", "cpus")


#: the other driver's GPUs on NUMA nodes 0 and 1, at PCI addresses this host does not have: nothing
#: of numadra's is withheld for them
OTHER_GPUS = {0: "0000:f0:00.0", 1: "0000:f1:00.0"}


def cross_driver_claim(name: str, numa: int) -> dict[str, Any]:
    """The other driver's GPU on ``numa`` (a selector: the test knows where it must land), and
    numadra's NIC and 4 CPUs, all kept together by ``matchAttribute`` on the standard attribute."""
    on_numa = {"cel": {"expression": f'device.attributes["resource.kubernetes.io"].numaNode == {numa}'}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpu", "exactly": {"deviceClassName": OTHER, "selectors": [on_numa]}},
                    {"name": "nic", "exactly": {"deviceClassName": "nic.numadra.dev"}},
                    {
                        "name": "cpus",
                        "exactly": {
                            "deviceClassName": "cpu.numadra.dev",
                            "capacity": {"requests": {"cpus": "4"}},
                        },
                    },
                ],
                "constraints": [{"requests": list(REQUESTS), "matchAttribute": NUMA}],
            }
        },
    }


def start_other_plugin(cluster: Cluster) -> Process:
    """The other driver's kubelet plugin; returns once registered and its slice is stored."""
    proc = Process(
        "other-driver",
        command(
            node_name=NODE,
            kubeconfig=cluster.plane.root / "admin.kubeconfig",
            registrar_dir=cluster.registrar_dir,
            plugin_dir=cluster.root / "plugins" / OTHER,
            cdi_dir=cluster.root / "other-cdi",
            gpus=[f"{bus_id}={numa}" for numa, bus_id in OTHER_GPUS.items()],
        ),
        cluster.root / "other-driver.out",
        cluster.root / "other-driver.log",
    ).start(env={"PYTHONPATH": str(REPO)}, cwd=REPO)

    def ready() -> bool:
        proc.check_running()
        return logged_ready(proc.stderr_path)

    wait_for(ready, 60, "the other driver to register and publish", interval=0.2)
    return proc


def test_other_drivers_gpu_and_numadras_cpus_land_and_are_pinned_on_one_numa_node(cluster: Cluster) -> None:
    ns = cluster.new_namespace("cross")
    admin = cluster.admin
    admin.create(f"{RESOURCE}/deviceclasses", device_class(OTHER, extended_resource=None))
    slice_path = f"{RESOURCE}/resourceslices"
    plugin: Process | None = None
    try:
        plugin = start_other_plugin(cluster)
        claim = admin.create(f"{RESOURCE}/namespaces/{ns}/resourceclaims", cross_driver_claim("cross", 1))
        uid = claim["metadata"]["uid"]
        cluster.create_pod(ns, claim_pod("cross", REQUESTS, claim="cross", container="trainer"))
        cluster.wait_bound(ns, "cross")

        allocation = cluster.claim(ns, "cross")["status"]["allocation"]
        results = {r["request"]: r for r in allocation["devices"]["results"]}
        assert (results["gpu"]["driver"], results["gpu"]["device"]) == (OTHER, device_name(OTHER_GPUS[1]))
        assert results["nic"]["driver"] == results["cpus"]["driver"] == DRIVER
        numa_of = device_numa(cluster)  # numadra's devices
        assert {numa_of[results["nic"]["device"]], numa_of[results["cpus"]["device"]]} == {1}
        assert results["cpus"]["device"] == "cpu-numa1"

        # the DRA kubelet prepared both parts, each through its own driver's plugin
        ids = cluster.prepared(cluster.pod(ns, "cross"))["trainer"]
        assert any(i.startswith(f"{DRIVER}/claim=") for i in ids), ids
        assert any(uid in i and not i.startswith(f"{DRIVER}/") for i in ids), ids
        other_specs = cluster.root / "other-cdi"
        assert [p.name for p in other_specs.iterdir() if uid in p.name] == [f"example.com_gpu_{uid}.json"]
        # numadra's CPUs for the claim are on the other driver's GPU's NUMA node
        cpus = cluster.claim_cpus(uid)
        assert len(cpus) == 4
        assert cpus <= node_cpus(cluster, 1), f"cpuset {sorted(cpus)} not on NUMA node 1"

        cluster.delete_pod(ns, "cross")
        assert cluster.claim_files(uid) == []
        assert [p for p in other_specs.iterdir() if uid in p.name] == []
    finally:
        if plugin is not None:
            plugin.stop()  # it deletes its slice
        admin.delete(f"{RESOURCE}/deviceclasses/{OTHER}")
        wait_for(
            lambda: not admin.items(slice_path, fieldSelector=f"spec.driver={OTHER}"),
            30,
            "the other driver's slice to go",
            interval=0.2,
        )
