"""DeviceClass extendedResourceName: ``nvidia.com/gpu`` served by our GPUs through the scheduler's claim."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.e2e.conftest import DRIVER, NODE, Cluster

pytestmark = pytest.mark.e2e


def test_extended_resource_gives_each_container_only_its_own_gpu(
    cluster: Cluster, record_property: Any
) -> None:
    """Two containers x nvidia.com/gpu: 1: one special claim with 2 of our GPUs, one GPU per container."""
    t0 = time.monotonic()
    ns = cluster.new_namespace("ext")
    containers = ["a", "b"]
    pod = cluster.create_pod(
        ns,
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "cuda"},
            "spec": {
                "restartPolicy": "Never",
                "containers": [
                    {
                        "name": c,
                        "image": "localhost/never-runs:1",
                        "resources": {"limits": {"nvidia.com/gpu": "1"}},
                    }
                    for c in containers
                ],
            },
        },
    )
    pod = cluster.wait_bound(ns, "cuda")
    status = pod["status"]["extendedResourceClaimStatus"]
    mappings = {m["containerName"]: m for m in status["requestMappings"]}
    assert set(mappings) == set(containers)
    assert all(m["resourceName"] == "nvidia.com/gpu" for m in mappings.values())

    claim = cluster.claim(ns, status["resourceClaimName"])
    assert claim["metadata"]["annotations"]["resource.kubernetes.io/extended-resource-claim"] == "true"
    assert claim["metadata"]["ownerReferences"][0]["uid"] == pod["metadata"]["uid"]
    uid = claim["metadata"]["uid"]
    results = {r["request"]: r for r in claim["status"]["allocation"]["devices"]["results"]}
    gpu_of = {c: results[mappings[c]["requestName"]]["device"] for c in containers}
    assert all(r["driver"] == DRIVER and r["pool"] == NODE for r in results.values())
    assert all(d.startswith("gpu-") for d in gpu_of.values())
    assert len(set(gpu_of.values())) == 2, gpu_of

    ids = cluster.prepared(pod)
    record_property("extended_schedule_to_prepared_s", round(time.monotonic() - t0, 2))
    for container in containers:
        own_gpu = f"{DRIVER}/claim={uid}-{gpu_of[container]}"
        own_metadata = f"{DRIVER}/metadata={uid}_{mappings[container]['requestName']}"
        assert own_gpu in ids[container], (container, ids)
        # nothing of the other container's request: only its own GPU and that request's metadata
        assert set(ids[container]) <= {own_gpu, own_metadata}, (container, ids)
    assert uid in cluster.journal_uids()

    cluster.delete_pod(ns, "cuda")
    assert cluster.claim_files(uid) == []
    assert uid not in cluster.journal_uids()
