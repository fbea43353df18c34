"""Claims through the real scheduler and resourceclaim controller, prepared by kubelet's DRA manager."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from driver.claims.metadata import CONTAINER_DIR, METADATA_DIR
from driver.pinning.types import parse_cpulist
from harness.controlplane import wait_for
from tests.e2e.conftest import DRIVER, NODE, RESOURCE, Cluster, claim_pod, condition

pytestmark = pytest.mark.e2e

NUMA = "resource.kubernetes.io/numaNode"
REQUESTS = ("gpu", "nic", "cpus")


def numa_template(name: str, gpus: int = 1, cpus: int = 8, numa: int | None = None) -> dict[str, Any]:
    """gpu + nic + a cpus share, all on one NUMA node (deploy/examples/numa-aligned-gpu-nic-cpu.yaml).

    ``numa`` pins every request to that NUMA node with a CEL selector.
    """
    template: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {"name": "gpu", "exactly": {"deviceClassName": "gpu.numadra.dev", "count": gpus}},
                        {"name": "nic", "exactly": {"deviceClassName": "nic.numadra.dev", "count": 1}},
                        {
                            "name": "cpus",
                            "exactly": {
                                "deviceClassName": "cpu.numadra.dev",
                                "count": 1,
                                "capacity": {"requests": {"cpus": str(cpus)}},
                            },
                        },
                    ],
                    "constraints": [{"requests": list(REQUESTS), "matchAttribute": NUMA}],
                }
            }
        },
    }
    if numa is not None:
        selector = {"cel": {"expression": f'device.attributes["resource.kubernetes.io"].numaNode == {numa}'}}
        for request in template["spec"]["spec"]["devices"]["requests"]:
            request["exactly"]["selectors"] = [selector]
    return template


def numa_pod(name: str, template: str) -> dict[str, Any]:
    """A pod whose one container uses all three requests of a claim made from ``template``."""
    return claim_pod(name, REQUESTS, template=template, container="trainer")


def start_numa_pod(cluster: Cluster, namespace: str, name: str, **template: Any) -> dict[str, Any]:
    cluster.admin.create(
        f"{RESOURCE}/namespaces/{namespace}/resourceclaimtemplates",
        numa_template(name, **template),
        fieldValidation="Strict",
    )
    return cluster.create_pod(namespace, numa_pod(name, name))


def generated_claim(cluster: Cluster, pod: dict[str, Any]) -> dict[str, Any]:
    """The claim the resourceclaim controller made for the pod's one template claim."""
    ns = pod["metadata"]["namespace"]
    statuses = pod["status"].get("resourceClaimStatuses") or []
    assert len(statuses) == 1, statuses
    return cluster.claim(ns, statuses[0]["resourceClaimName"])


def device_numa(cluster: Cluster) -> dict[str, int]:
    """Published device name -> its NUMA node attribute."""
    return {
        d["name"]: d["attributes"][NUMA]["int"]
        for s in cluster.slices()
        for d in s["spec"]["devices"]
        if NUMA in d["attributes"]
    }


def node_cpus(cluster: Cluster, numa: int) -> frozenset[int]:
    """The CPUs of one NUMA node of the generated host tree."""
    cpulist = cluster.host / "sys" / "devices" / "system" / "node" / f"node{numa}" / "cpulist"
    return parse_cpulist(cpulist.read_text().strip())


def metadata_stream(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_numa_aligned_claim_is_scheduled_prepared_and_freed(cluster: Cluster, record_property: Any) -> None:
    """gpu+nic+8 cpus under matchAttribute numaNode: one NUMA node, exact CDI/metadata/cpuset; all freed."""
    t0 = time.monotonic()
    ns = cluster.new_namespace("numa")
    pod = start_numa_pod(cluster, ns, "trainer")
    pod = cluster.wait_bound(ns, "trainer")
    record_property("schedule_s", round(time.monotonic() - t0, 2))

    claim = generated_claim(cluster, pod)
    uid = claim["metadata"]["uid"]
    allocation = claim["status"]["allocation"]
    results = {r["request"]: r for r in allocation["devices"]["results"]}
    assert set(results) == set(REQUESTS)
    assert all(r["driver"] == DRIVER and r["pool"] == NODE for r in results.values())
    assert allocation["nodeSelector"]["nodeSelectorTerms"][0]["matchFields"][0]["values"] == [NODE]
    assert results["cpus"]["consumedCapacity"]["cpus"] == "8"
    assert {"resource": "pods", "name": "trainer", "uid": pod["metadata"]["uid"]} in claim["status"][
        "reservedFor"
    ]
    numa_of = device_numa(cluster)
    numa_nodes = {numa_of[r["device"]] for r in results.values()}
    assert len(numa_nodes) == 1, f"devices on NUMA nodes {numa_nodes}: {results}"
    (numa,) = numa_nodes
    assert results["cpus"]["device"] == f"cpu-numa{numa}"

    # drakubelet (kubelet's DRA manager) prepared it; the container gets our CDI IDs
    ids = cluster.prepared(pod)["trainer"]
    record_property("schedule_to_prepared_s", round(time.monotonic() - t0, 2))
    claim_kind = f"{DRIVER}/claim"
    for request in ("gpu", "nic"):
        assert f"{claim_kind}={uid}-{results[request]['device']}" in ids, (request, ids)
    cpu_id = f"{claim_kind}={uid}-{results['cpus']['device']}-{results['cpus']['shareID']}"
    assert cpu_id in ids
    assert len(ids) == len(set(ids)) == 3  # the metadata mounts ride on these, no IDs of their own

    # the CDI spec files and what they contain
    spec = json.loads(cluster.spec_file(uid).read_text())
    assert spec["kind"] == claim_kind
    assert {f"{claim_kind}={d['name']}" for d in spec["devices"]} == {
        i for i in ids if i.startswith(claim_kind)
    }
    cpus = cluster.claim_cpus(uid)
    assert len(cpus) == 8
    assert cpus <= node_cpus(cluster, numa), f"cpuset {sorted(cpus)} not on NUMA node {numa}"
    assert len(cluster.claim_files(uid)) == 1  # one spec per claim

    # KEP-5304 metadata: a host file per request, mounted at the well-known path by the first
    # device of its request in the claim's spec
    meta_dir = cluster.plugin_dir / METADATA_DIR
    mounts = {m["hostPath"]: m for d in spec["devices"] for m in d["containerEdits"].get("mounts", ())}
    assert sorted(mounts) == sorted(str(meta_dir / f"{uid}_{r}.json") for r in REQUESTS)
    for request in REQUESTS:
        host_file = meta_dir / f"{uid}_{request}.json"
        stream = metadata_stream(host_file)
        assert stream[0]["apiVersion"] == "metadata.resource.k8s.io/v1beta1"
        assert results[request]["device"] in json.dumps(stream[0])
        assert mounts[str(host_file)]["containerPath"] == (
            f"{CONTAINER_DIR}/resourceclaimtemplates/devices/{request}/{DRIVER}-metadata.json"
        )
    assert uid in cluster.journal_uids()

    # the driver reported its devices in the claim status (resourceclaims/status RBAC from deploy/)
    def reported() -> set[str] | None:
        status = cluster.claim(ns, claim["metadata"]["name"]).get("status", {})
        devices = {
            d["device"] for d in status.get("devices", []) if d["driver"] == DRIVER and d["pool"] == NODE
        }
        return devices if {results["gpu"]["device"], results["nic"]["device"]} <= devices else None

    wait_for(reported, 15, "status.devices written by the driver", interval=0.2)
    # issue 7: a Ready condition per device and, for the NIC, its network data from the slice
    status_devices = {
        d["device"]: d
        for d in cluster.claim(ns, claim["metadata"]["name"])["status"]["devices"]
        if d["driver"] == DRIVER
    }
    for request in ("gpu", "nic"):
        conditions = status_devices[results[request]["device"]]["conditions"]
        # issue 12: and the device's health, from the same model as the health stream and taints
        assert [(c["type"], c["status"]) for c in conditions] == [("Ready", "True"), ("Healthy", "True")]
    nic_attrs = next(
        dev["attributes"]
        for obj in cluster.slices()
        for dev in obj["spec"]["devices"]
        if dev["name"] == results["nic"]["device"]
    )
    network = status_devices[results["nic"]["device"]]["networkData"]
    assert network["interfaceName"] == nic_attrs["interfaceName"]["string"]
    assert network["hardwareAddress"] == nic_attrs["macAddress"]["string"]

    # deleting the pod: kubelet unprepares, everything of the claim is gone
    t1 = time.monotonic()
    cluster.delete_pod(ns, "trainer")
    assert cluster.claim_files(uid) == []
    assert not list(meta_dir.glob(f"{uid}_*"))
    assert uid not in cluster.journal_uids()
    record_property("delete_to_freed_s", round(time.monotonic() - t1, 2))


def test_claim_that_fits_no_single_numa_node_stays_unschedulable(cluster: Cluster) -> None:
    """5 GPUs on one NUMA node of a 4+4 dgx: PodScheduled False/Unschedulable, no allocation, no prepare."""
    ns = cluster.new_namespace("toobig")
    # enough GPUs are free on the node as a whole: only the one-NUMA-node constraint can fail
    gpus = {d for d in device_numa(cluster) if d.startswith("gpu-")}
    held = {
        r["device"]
        for c in cluster.admin.items(f"{RESOURCE}/resourceclaims")
        for r in (c.get("status", {}).get("allocation") or {}).get("devices", {}).get("results", [])
    }
    assert len(gpus - held) >= 5, (gpus, held)
    pod = start_numa_pod(cluster, ns, "greedy", gpus=5)

    def unschedulable() -> dict[str, Any] | None:
        cluster.check_running()
        current = cluster.pod(ns, "greedy")
        cond = condition(current, "PodScheduled")
        return cond if cond is not None and cond["status"] == "False" else None

    cond = wait_for(unschedulable, 60, "the scheduler to give up on the pod", interval=0.2)
    print(f"PodScheduled: {cond['reason']}: {cond.get('message')}")
    assert cond["reason"] == "Unschedulable", cond
    time.sleep(1.0)  # a later retry must not bind it either
    current = cluster.pod(ns, "greedy")
    assert not current["spec"].get("nodeName")
    for status in current["status"].get("resourceClaimStatuses") or []:
        claim = cluster.claim(ns, status["resourceClaimName"])
        assert "allocation" not in claim.get("status", {})
    assert not [e for e in cluster.events() if e.get("uid") == pod["metadata"]["uid"]]
    cluster.admin.delete(f"/api/v1/namespaces/{ns}/pods/greedy")
