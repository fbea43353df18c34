"""A claim across drivers: another driver's GPU, numadra's NIC and CPUs, on one NUMA node.

``resource.kubernetes.io/numaNode`` is standard so that one ``matchAttribute`` constraint can keep
devices of several drivers together. Here a second DRA driver, ``gpu.example.com`` (a stand-in
for NVIDIA's: its ResourceSlice carries GPUs with the standard ``numaNode`` and ``pciBusID``, and
its kubelet plugin is tests/support/fakeplugin.py, registered with the same DRA kubelet), sits
beside numadra. The real scheduler allocates one claim from both drivers' slices; the DRA kubelet
prepares each driver's part through that driver's plugin; numadra pins the claim's CPUs on the
NUMA node of the other driver's GPU (deploy/examples/cross-driver-gpu-nic-cpu.yaml is the same
claim as a user writes it).
"""

from __future__ import annotations

import json
import sys
from typing import Any

import pytest

from harness.controlplane import Process, wait_for
from tests.e2e.conftest import DRIVER, NODE, REPO, RESOURCE, Cluster, claim_pod
from tests.e2e.test_claims import device_numa, node_cpus

pytestmark = pytest.mark.e2e

OTHER = "gpu.example.com"
NUMA = "resource.kubernetes.io/numaNode"
REQUESTS = ("gpu", "nic", "cpus")


def other_driver_slice() -> dict[str, Any]:
    """The other driver's pool on our node: one GPU on each of NUMA nodes 0 and 1."""
    devices = [
        {
            "name": f"gpu-{numa}",
            "attributes": {
                "resource.kubernetes.io/numaNode": {"int": numa},
                # not a PCI address of this host: nothing of numadra's is withheld for it
                "resource.kubernetes.io/pciBusID": {"string": f"0000:f{numa}:00.0"},
                "productName": {"string": "Stand-in GPU"},
            },
        }
        for numa in (0, 1)
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{NODE}-{OTHER.replace('.', '-')}"},
        "spec": {
            "driver": OTHER,
            "nodeName": NODE,
            "pool": {"name": NODE, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


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


def start_other_plugin(cluster: Cluster, claims: list[dict[str, str]]) -> Process:
    """The other driver's kubelet plugin, knowing ``claims`` (it has no apiserver access)."""
    claims_file = cluster.root / "other-driver-claims.json"
    claims_file.write_text(json.dumps(claims))
    plugin_dir = cluster.root / "plugins" / OTHER
    plugin_dir.mkdir(parents=True, exist_ok=True)
    proc = Process(
        "other-driver",
        [
            sys.executable, "-m", "tests.support.fakeplugin",
            "--driver-name", OTHER,
            "--node-name", NODE,
            "--registrar-dir", str(cluster.registrar_dir),
            "--plugin-dir", str(plugin_dir),
            "--claims", str(claims_file),
            "--no-health",
        ],
        cluster.root / "other-driver.out",
        cluster.root / "other-driver.log",
    )  # fmt: skip
    return proc.start(env={"PYTHONPATH": str(REPO)}, cwd=REPO)


def test_other_drivers_gpu_and_numadras_cpus_land_and_are_pinned_on_one_numa_node(cluster: Cluster) -> None:
    ns = cluster.new_namespace("cross")
    admin = cluster.admin
    admin.create(
        f"{RESOURCE}/deviceclasses",
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": OTHER},
            "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{OTHER}"'}}]},
        },
    )
    slice_path = f"{RESOURCE}/resourceslices"
    admin.create(slice_path, other_driver_slice())
    plugin: Process | None = None
    try:
        claim = admin.create(f"{RESOURCE}/namespaces/{ns}/resourceclaims", cross_driver_claim("cross", 1))
        uid = claim["metadata"]["uid"]
        plugin = start_other_plugin(cluster, [{"namespace": ns, "name": "cross", "uid": uid}])
        cluster.create_pod(ns, claim_pod("cross", REQUESTS, claim="cross", container="trainer"))
        cluster.wait_bound(ns, "cross")

        allocation = cluster.claim(ns, "cross")["status"]["allocation"]
        results = {r["request"]: r for r in allocation["devices"]["results"]}
        assert (results["gpu"]["driver"], results["gpu"]["device"]) == (OTHER, "gpu-1")
        assert results["nic"]["driver"] == results["cpus"]["driver"] == DRIVER
        numa_of = device_numa(cluster)  # numadra's devices
        assert {numa_of[results["nic"]["device"]], numa_of[results["cpus"]["device"]]} == {1}
        assert results["cpus"]["device"] == "cpu-numa1"

        # the DRA kubelet prepared both parts, each through its own driver's plugin
        ids = cluster.prepared(cluster.pod(ns, "cross"))["trainer"]
        assert any(i.startswith(f"{DRIVER}/claim=") for i in ids), ids
        assert any(uid in i and not i.startswith(f"{DRIVER}/") for i in ids), ids
        # numadra's CPUs for the claim are on the other driver's GPU's NUMA node
        cpus = cluster.claim_cpus(uid)
        assert len(cpus) == 4
        assert cpus <= node_cpus(cluster, 1), f"cpuset {sorted(cpus)} not on NUMA node 1"

        cluster.delete_pod(ns, "cross")
        assert cluster.claim_files(uid) == []
    finally:
        if plugin is not None:
            plugin.stop()
        admin.delete(f"{slice_path}/{other_driver_slice()['metadata']['name']}")
        admin.delete(f"{RESOURCE}/deviceclasses/{OTHER}")
        wait_for(
            lambda: not admin.items(slice_path, fieldSelector=f"spec.driver={OTHER}"),
            30,
            "the other driver's slice to go",
            interval=0.2,
        )
