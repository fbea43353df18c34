"""KEP-5517 on the real 1.37.2 control plane: GPUs' auxiliary CPUs, counted by the scheduler, pinned.

With ``DRANodeAllocatableResources`` on (kube-apiserver, kube-scheduler, kube-controller-manager
and drakubelet; the Node declares the feature, as a kubelet with the gate does) and
``numadra run --node-allocatable --aux-cpus gpu=2``, with 3 CPUs of the Node's allocatable left:

* the apiserver keeps every GPU's ``nodeAllocatableResources: {cpu: {overhead: {perPod: "2"}}}``;
* **a GPU claim** (a pod's ResourceClaimTemplate, no CPUs asked): a pod requesting 2 CPUs stays
  Unschedulable, "Insufficient cpu" (2 + 2 > 3; without the overhead it would fit); one
  requesting 1 is bound (1 + 2 = 3), its ``status.nodeAllocatableResourceClaimStatuses`` holds
  the overhead, which stays counted against the Node while it is bound (a pod of 1 CPU without a
  GPU no longer fits), and numadra prepares its claim with 2 exclusive CPUs on its GPU's NUMA node;
* **a plain ``nvidia.com/gpu: 1`` pod** (the scheduler's extended-resource claim): the overhead is
  counted in the same way (2 + 2 does not fit), but the pod that fits is never bound: the
  scheduler's PreBind writes the pod's ``nodeAllocatableResourceClaimStatuses`` with the
  in-memory claim name ``<extended-resources>``, and the 1.37.2 apiserver refuses it ("no mapping
  found in pod reference": its validation knows the names in ``spec.resourceClaims`` and
  ``status.resourceClaimStatuses``, not ``status.extendedResourceClaimStatus``), a SchedulerError
  at every retry. Upstream fixed it after 1.37.2 (kubernetes/kubernetes#141556). This test
  pins that behaviour down, so it fails, and says so, on a control plane with the fix.

A control plane of its own (``start_cluster``); skipped with the tier when the binaries of
tests/e2e/build-bins.sh are missing.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from driver.inventory.discovery import discover
from harness.controlplane import feature_gates_flag, wait_for
from tests.e2e.conftest import RESOURCE, Cluster, condition, start_cluster

pytestmark = pytest.mark.e2e

GATES = {"DRANodeAllocatableResources": True}
AUX = 2
#: what the Node's allocatable says (tests/e2e/conftest.py ``_ready_node``)
ALLOCATABLE_CPUS = 224
LEFT = 3


@pytest.fixture(scope="module")
def aux_cluster() -> Iterator[Cluster]:
    with start_cluster(
        feature_gates=GATES,
        driver_args=("--node-allocatable", "--aux-cpus", f"gpu={AUX}"),
        drakubelet_args=tuple(feature_gates_flag(GATES)),
        # a kubelet with the gate on declares it; the apiserver refuses the slices for a Node that
        # does not (403 "node ... does not support DRANodeAllocatableResources feature")
        declared_features=tuple(GATES),
    ) as cluster:
        yield cluster


def _pod(name: str, cpu: str, *, gpu: str = "") -> dict[str, Any]:
    """A pod of one container asking ``cpu``, and a GPU: ``gpu`` "extended" (``nvidia.com/gpu: 1``)
    or "claim" (a template's claim); its image never runs."""
    container: dict[str, Any] = {
        "name": "app",
        "image": "localhost/never-runs:1",
        "resources": {"requests": {"cpu": cpu}},
    }
    spec: dict[str, Any] = {"restartPolicy": "Never", "containers": [container]}
    if gpu == "extended":
        container["resources"]["limits"] = {"nvidia.com/gpu": "1"}
    elif gpu == "claim":
        container["resources"]["claims"] = [{"name": "gpu"}]
        spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def _template() -> dict[str, Any]:
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.numadra.dev"}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu"},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


def _not_scheduled(cluster: Cluster, ns: str, name: str, reason: str) -> dict[str, Any]:
    """The pod's PodScheduled condition once it is False for ``reason``."""

    def found() -> dict[str, Any] | None:
        cluster.check_running()
        cond = condition(cluster.pod(ns, name), "PodScheduled")
        return cond if cond is not None and cond["status"] == "False" and cond["reason"] == reason else None

    cond = wait_for(found, 60, f"pod {name} to be left unscheduled ({reason})", interval=0.2)
    print(f"{name} PodScheduled: {cond['reason']}: {cond.get('message')}")
    return cond


def _remove(cluster: Cluster, ns: str, *names: str) -> None:
    """Delete pods that were never bound (nothing to unprepare) at once."""
    for name in names:
        cluster.admin.delete(f"/api/v1/namespaces/{ns}/pods/{name}")  # unbound: gone at once
    for name in names:
        path = f"/api/v1/namespaces/{ns}/pods/{name}"
        wait_for(lambda p=path: not cluster.admin.exists(p), 30, f"pod {name} to be removed", interval=0.2)


def test_the_scheduler_counts_the_gpus_aux_cpus_and_numadra_pins_them(
    aux_cluster: Cluster, record_property: Any
) -> None:
    """See the module docstring: the slices, the plain GPU pod's fate, the GPU claim's CPUs."""
    cluster = aux_cluster
    gpus = [
        d
        for s in cluster.slices()
        for d in s["spec"].get("devices", [])
        if d["attributes"]["type"]["string"] == "gpu"
    ]
    assert gpus
    for gpu in gpus:
        assert gpu.get("nodeAllocatableResources") == {"cpu": {"overhead": {"perPod": str(AUX)}}}, gpu
    gpu_node = {d["name"]: d["attributes"]["resource.kubernetes.io/numaNode"]["int"] for d in gpus}

    ns = cluster.new_namespace("aux")
    cluster.admin.create(f"{RESOURCE}/namespaces/{ns}/resourceclaimtemplates", _template())
    # fill the Node's allocatable CPUs but LEFT (plain requests, no claim)
    cluster.create_pod(ns, _pod("filler", str(ALLOCATABLE_CPUS - LEFT)))
    cluster.wait_bound(ns, "filler")

    # the plain GPU pod: counted, then refused at PreBind by 1.37.2's pod status validation
    cluster.create_pod(ns, _pod("ext-too-big", "2", gpu="extended"))
    cond = _not_scheduled(cluster, ns, "ext-too-big", "Unschedulable")
    assert "Insufficient cpu" in cond["message"], cond
    cluster.create_pod(ns, _pod("ext-fits", "1", gpu="extended"))
    cond = _not_scheduled(cluster, ns, "ext-fits", "SchedulerError")
    assert "nodeAllocatableResourceClaimStatuses" in cond["message"], cond
    assert "no mapping found in pod reference" in cond["message"], cond
    assert not cluster.pod(ns, "ext-fits")["spec"].get("nodeName")
    _remove(cluster, ns, "ext-too-big", "ext-fits")

    # a GPU claim: counted, bound, prepared with its aux CPUs
    t0 = time.monotonic()
    cluster.create_pod(ns, _pod("too-big", "2", gpu="claim"))
    cond = _not_scheduled(cluster, ns, "too-big", "Unschedulable")
    assert "Insufficient cpu" in cond["message"], cond
    cluster.create_pod(ns, _pod("fits", "1", gpu="claim"))
    pod = cluster.wait_bound(ns, "fits")
    statuses = pod["status"].get("nodeAllocatableResourceClaimStatuses") or []
    print(f"fits nodeAllocatableResourceClaimStatuses: {statuses}")
    overhead = [o for s in statuses for o in s.get("overhead") or []]
    assert {"name": "cpu", "perPod": str(AUX)} in overhead, statuses
    (claim_status,) = pod["status"]["resourceClaimStatuses"]
    claim = cluster.claim(ns, claim_status["resourceClaimName"])
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert cluster.prepared(pod)["app"]
    record_property("aux_schedule_to_prepared_s", round(time.monotonic() - t0, 2))
    cpus = cluster.claim_cpus(claim["metadata"]["uid"])
    node_of = {c.id: c.numa_node for c in discover(cluster.host).cpus}
    assert len(cpus) == AUX
    assert {node_of[c] for c in cpus} == {gpu_node[result["device"]]}, (cpus, result)

    # the bound pod's overhead stays counted against the Node: 221 + (1 + 2) + 1 > 224, while
    # 221 + 1 + 1 would fit without it
    assert not cluster.pod(ns, "too-big")["spec"].get("nodeName")
    cluster.create_pod(ns, _pod("one-more", "1"))
    cond = _not_scheduled(cluster, ns, "one-more", "Unschedulable")
    assert "Insufficient cpu" in cond["message"], cond
    _remove(cluster, ns, "too-big", "one-more")
    cluster.delete_pod(ns, "fits")
    assert claim["metadata"]["uid"] not in cluster.journal_uids()
