"""(c) In-place resize (pods/resize) of a pinned pod keeps the claim's cpuset (seed 002)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from harness.controlplane import wait_for
from tests.e2e.conftest import condition
from tests.node.conftest import NodeCluster, busybox_pod, figure
from tests.node.test_shared_pool import online_cpus

pytestmark = pytest.mark.node

BEFORE = {"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}}
AFTER = {"requests": {"cpu": "200m", "memory": "48Mi"}, "limits": {"memory": "96Mi"}}


def _cgroup_value(node: NodeCluster, cid: str, path: str) -> str:
    """A file of the container's own cgroup as the container sees it (cgroup v1 mounts its subtree)."""
    return node.exec(cid, "cat", path).strip()


def _resize(node: NodeCluster, ns: str, name: str) -> dict[str, Any]:
    """PATCH pods/resize to AFTER; the pod once the kubelet reports the resize done."""
    patch = {"spec": {"containers": [{"name": "c", "resources": AFTER}]}}
    node.admin.request(
        "PATCH",
        f"/api/v1/namespaces/{ns}/pods/{name}/resize",
        patch,
        content_type="application/strategic-merge-patch+json",
    )

    def done() -> dict[str, Any] | None:
        current = node.pod(ns, name)
        if condition(current, "PodResizePending") or condition(current, "PodResizeInProgress"):
            return None
        (status,) = current["status"]["containerStatuses"]
        actual = status.get("resources") or {}
        ok = actual.get("requests") == AFTER["requests"] and actual.get("limits") == AFTER["limits"]
        return current if ok else None

    return wait_for(done, 60, f"the kubelet to report the resize of {name} done", interval=0.1)


def test_resize_keeps_the_claims_cpus_and_mems(node: NodeCluster) -> None:
    """The kubelet's UpdateContainerResources arrives as NRI UpdateContainer; once the kubelet reports
    the resize done (new memory limit really in the cgroup), the cpuset is still the claim's. A pod
    without a claim resized the same way is left alone (numadra pins nothing it does not own)."""
    ns = node.new_namespace("resize")
    try:
        node.create_template(ns, "one-cpu", cpus=1)
        node.create_pod(ns, busybox_pod("p", "one-cpu", resources=BEFORE))
        node.create_pod(ns, busybox_pod("free", None, resources=BEFORE))
        pod = node.wait_running(ns, "p")
        free = node.wait_running(ns, "free")
        cid, free_cid = node.container_id(pod), node.container_id(free)
        pinning = node.claim_pinning(node.claim_of(pod)["metadata"]["uid"])
        assert node.proc_status(cid) == pinning
        free_before = node.proc_status(free_cid)
        assert free_before.cpus == online_cpus()
        assert _cgroup_value(node, cid, "/sys/fs/cgroup/memory/memory.limit_in_bytes") == str(64 << 20)

        t0 = time.monotonic()
        resized = _resize(node, ns, "p")
        figure("in-place resize: patch to done (s)", round(time.monotonic() - t0, 2))
        assert node.container_id(resized) == cid, "resized in place, not restarted"
        assert _cgroup_value(node, cid, "/sys/fs/cgroup/memory/memory.limit_in_bytes") == str(96 << 20)
        assert node.proc_status(cid) == pinning
        assert node.main_process_status(cid) == pinning

        _resize(node, ns, "free")
        assert _cgroup_value(node, free_cid, "/sys/fs/cgroup/memory/memory.limit_in_bytes") == str(96 << 20)
        assert node.proc_status(free_cid) == free_before
    finally:
        node.delete_all_pods(ns)
