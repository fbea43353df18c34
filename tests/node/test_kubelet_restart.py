"""(f) The kubelet restarted while pinned pods run."""

from __future__ import annotations

import pytest

from tests.node.conftest import NodeCluster, busybox_pod

pytestmark = pytest.mark.node


def test_kubelet_restart_keeps_pins_and_prepares_later_pods(node: NodeCluster) -> None:
    """Pods keep running in the same containers on the same CPUs across a kubelet restart; the
    driver is found again by the kubelet's plugin watcher and a pod created afterwards is prepared
    and pinned on the other CPU."""
    ns = node.new_namespace("kubelet")
    try:
        node.create_template(ns, "one-cpu", cpus=1)
        node.create_pod(ns, busybox_pod("before", "one-cpu"))
        pod = node.wait_running(ns, "before")
        cid = node.container_id(pod)
        pinning = node.claim_pinning(node.claim_of(pod)["metadata"]["uid"])

        node.kubelet.stop()
        node.kubelet.start()
        node.kubelet.wait_healthy()
        assert node.proc_status(cid) == pinning

        node.create_pod(ns, busybox_pod("after", "one-cpu"))
        after = node.wait_running(ns, "after")
        pin_after = node.claim_pinning(node.claim_of(after)["metadata"]["uid"])
        assert pin_after.cpus.isdisjoint(pinning.cpus)
        assert node.proc_status(node.container_id(after)) == pin_after
        before = node.wait_running(ns, "before")
        assert node.container_id(before) == cid, "the kubelet restarted the container"
        assert node.proc_status(cid) == pinning
    finally:
        node.delete_all_pods(ns)
