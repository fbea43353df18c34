"""(c) In-place resize (pods/resize) of a pinned pod keeps the claim's cpuset (seed 002)."""

from __future__ import annotations

import time
from typing import Any

import pytest

from tests.e2e.conftest import condition
from tests.e2e.controlplane import wait_for
from tests.node.conftest import NodeCluster, busybox_pod, figure

pytestmark = pytest.mark.node

BEFORE = {"requests": {"cpu": "100m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}}
AFTER = {"requests": {"cpu": "200m", "memory": "48Mi"}, "limits": {"memory": "96Mi"}}


def _cgroup_value(node: NodeCluster, cid: str, path: str) -> str:
    """A file of the container's own cgroup as the container sees it (cgroup v1 mounts its subtree)."""
    return node.exec(cid, "cat", path).strip()


def test_resize_keeps_the_claims_cpus_and_mems(node: NodeCluster) -> None:
    """The kubelet's UpdateContainerResources arrives as NRI UpdateContainer; once the kubelet reports
    the resize done (new memory limit really in the cgroup), the cpuset is still the claim's."""
    ns = node.new_namespace("resize")
    try:
        node.create_template(ns, "one-cpu", cpus=1)
        node.create_pod(ns, busybox_pod("p", "one-cpu", resources=BEFORE))
        pod = node.wait_running(ns, "p")
        cid = node.container_id(pod)
        pinning = node.claim_pinning(node.claim_of(pod)["metadata"]["uid"])
        assert node.proc_status(cid) == pinning
        assert _cgroup_value(node, cid, "/sys/fs/cgroup/memory/memory.limit_in_bytes") == str(64 << 20)

        t0 = time.monotonic()
        patch = {"spec": {"containers": [{"name": "c", "resources": AFTER}]}}
        node.admin.request(
            "PATCH",
            f"/api/v1/namespaces/{ns}/pods/p/resize",
            patch,
            content_type="application/strategic-merge-patch+json",
        )

        def done() -> dict[str, Any] | None:
            current = node.pod(ns, "p")
            if condition(current, "PodResizePending") or condition(current, "PodResizeInProgress"):
                return None
            (status,) = current["status"]["containerStatuses"]
            actual = status.get("resources") or {}
            return (
                current
                if actual.get("requests") == AFTER["requests"] and actual.get("limits") == AFTER["limits"]
                else None
            )

        resized = wait_for(done, 60, "the kubelet to report the resize done", interval=0.1)
        figure("in-place resize: patch to done (s)", round(time.monotonic() - t0, 2))
        assert node.container_id(resized) == cid, "resized in place, not restarted"
        assert _cgroup_value(node, cid, "/sys/fs/cgroup/memory/memory.limit_in_bytes") == str(96 << 20)
        assert node.proc_status(cid) == pinning
        assert node.main_process_status(cid) == pinning
    finally:
        node.delete_all_pods(ns)
