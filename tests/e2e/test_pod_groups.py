"""A claim shared by a PodGroup, through a control plane with workload-aware scheduling on.

With ``GenericWorkload`` and ``DRAWorkloadResourceClaims`` (beta in Kubernetes 1.37, off by
default) and the ``scheduling.k8s.io/v1beta1`` API served, a PodGroup lists a claim in its
``spec.resourceClaims`` and its pods (``spec.schedulingGroup.podGroupName``) reference the same
claim: the scheduler reserves the claim for the group (a ``status.reservedFor`` entry
``scheduling.k8s.io``/``podgroups``), not for each pod. This checks the real API's shape against
what numadra parses: both pods are bound and prepared, and the driver's journal records the
group beside the claim's (empty) pods. The gates go to kube-apiserver, kube-scheduler,
kube-controller-manager and drakubelet (the kubelet side admits a pod through its group).

A control plane of its own (``start_cluster``); skipped with the rest of the tier when the
binaries of tests/e2e/build-bins.sh are missing.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from driver.state.journal import Journal
from harness.controlplane import feature_gates_flag, wait_for
from tests.e2e.conftest import RESOURCE, Cluster, start_cluster

pytestmark = pytest.mark.e2e

GATES = {"GenericWorkload": True, "DRAWorkloadResourceClaims": True}
PODGROUPS = "/apis/scheduling.k8s.io/v1beta1"
GROUP = "gang"
CLAIM = "gang-cpus"


@pytest.fixture(scope="module")
def workload_cluster() -> Iterator[Cluster]:
    with start_cluster(
        feature_gates=GATES,
        extra_args={"kube-apiserver": ["--runtime-config=scheduling.k8s.io/v1beta1=true"]},
        drakubelet_args=tuple(feature_gates_flag(GATES)),
    ) as cluster:
        yield cluster


def _claim() -> dict[str, Any]:
    request = {"deviceClassName": "cpu.numadra.dev", "count": 1, "capacity": {"requests": {"cpus": "2"}}}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": CLAIM},
        "spec": {"devices": {"requests": [{"name": "cpus", "exactly": request}]}},
    }


def _pod_group() -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": GROUP},
        "spec": {
            "schedulingPolicy": {"basic": {}},
            "resourceClaims": [{"name": "cpus", "resourceClaimName": CLAIM}],
        },
    }


def _member(name: str) -> dict[str, Any]:
    """A pod of the group that uses the group's claim (its entry matches the group's exactly)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "schedulingGroup": {"podGroupName": GROUP},
            "resourceClaims": [{"name": "cpus", "resourceClaimName": CLAIM}],
            "containers": [
                {
                    "name": "app",
                    "image": "localhost/never-runs:1",
                    "resources": {"claims": [{"name": "cpus", "request": "cpus"}]},
                }
            ],
        },
    }


def test_a_podgroups_claim_is_prepared_and_its_group_recorded(workload_cluster: Cluster) -> None:
    """Both pods of the group are bound and prepared; the claim is reserved for the group; the
    journal entry keeps the group (name and UID) beside its pods."""
    cluster = workload_cluster
    ns = cluster.new_namespace("gang")
    cluster.admin.create(f"{RESOURCE}/namespaces/{ns}/resourceclaims", _claim(), fieldValidation="Strict")
    group = cluster.admin.create(
        f"{PODGROUPS}/namespaces/{ns}/podgroups", _pod_group(), fieldValidation="Strict"
    )
    pods = [cluster.create_pod(ns, _member(f"worker-{i}")) for i in range(2)]
    for pod in pods:
        bound = cluster.wait_bound(ns, pod["metadata"]["name"])
        assert cluster.prepared(bound)["app"]
    claim = cluster.claim(ns, CLAIM)
    reserved = claim["status"].get("reservedFor") or []
    assert {
        "apiGroup": "scheduling.k8s.io",
        "resource": "podgroups",
        "name": GROUP,
        "uid": group["metadata"]["uid"],
    } in reserved, reserved

    def recorded() -> list[tuple[str, str]] | None:
        journal = Journal(cluster.journal, read_only=True)
        journal.load()
        entry = journal.get(claim["metadata"]["uid"])
        return None if entry is None else [(g.name, g.uid) for g in entry.reserved_groups] or None

    groups = wait_for(recorded, 30, "the claim's journal entry with its PodGroup", interval=0.2)
    assert groups == [(GROUP, group["metadata"]["uid"])]
