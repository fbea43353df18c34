"""(e) numadra restarted while pinned containers run, and a rolling update of its pod."""

from __future__ import annotations

import signal
import time

import pytest

from harness.controlplane import wait_for
from tests.node.conftest import HOST_POD, NAMESPACE, NodeCluster, busybox_pod, figure

pytestmark = pytest.mark.node


def test_restart_keeps_every_pin(node: NodeCluster) -> None:
    """SIGKILL the driver with two pinned containers running, start it again: NRI Synchronize sees
    both, re-pins nothing (nothing drifted), and both keep exactly their claim's CPUs."""
    ns = node.new_namespace("restart")
    try:
        node.create_template(ns, "one-cpu", cpus=1)
        for name in ("p1", "p2"):
            node.create_pod(ns, busybox_pod(name, "one-cpu"))
        pods = {name: node.wait_running(ns, name) for name in ("p1", "p2")}
        pins = {n: node.claim_pinning(node.claim_of(p)["metadata"]["uid"]) for n, p in pods.items()}

        node.stop_driver(signal.SIGKILL)
        t0 = time.monotonic()
        proc = node.start_driver(wait=False)
        (sync,) = wait_for(
            lambda: node.driver_events(proc, "synchronized") or None, 60, "the new driver's NRI Synchronize"
        )
        figure("driver restart: start to NRI Synchronize done (s)", round(time.monotonic() - t0, 2))
        node.wait_driver_ready(proc, node.metrics_port)
        assert sync["pinned"] >= 2
        assert sync["repinned"] == 0, sync
        for name, pod in pods.items():
            assert node.proc_status(node.container_id(pod)) == pins[name]
    finally:
        node.delete_all_pods(ns)


def test_rolling_update_never_fails_a_new_pod(node: NodeCluster) -> None:
    """A second instance (another pod, another POD_UID) starts next to the first; pods created while
    both run and right after the first stops all run pinned, and none gets a failure event."""
    ns = node.new_namespace("rolling")
    second = busybox_pod(f"{HOST_POD}-2")
    second["spec"].update(serviceAccountName="numadra", automountServiceAccountToken=False)
    second["metadata"]["labels"] = {"app.kubernetes.io/name": "numadra"}
    first = node.driver
    assert first is not None
    try:
        node.create_pod(NAMESPACE, second)
        uid2 = node.wait_running(NAMESPACE, second["metadata"]["name"])["metadata"]["uid"]
        node.create_template(ns, "one-cpu", cpus=1)
        node.driver = None  # keep the first one running: start_driver would not stop it anyway
        node.start_driver(pod_uid=uid2)
        node.create_pod(ns, busybox_pod("both", "one-cpu"))
        node.wait_running(ns, "both")
        first.stop(signal.SIGTERM)
        node.create_pod(ns, busybox_pod("after", "one-cpu"))
        for name in ("both", "after"):
            pod = node.wait_running(ns, name)
            pinning = node.claim_pinning(node.claim_of(pod)["metadata"]["uid"])
            assert node.proc_status(node.container_id(pod)) == pinning
            failures = [
                f"{e['reason']}: {e.get('message')}"
                for e in node.events(ns, name)
                if e.get("type") == "Warning"
            ]
            assert not failures, f"{name}: {failures}"
    finally:
        first.stop(signal.SIGTERM)
        node.delete_all_pods(ns)
        node.stop_driver()  # the second instance; the fixture starts the default one again
        node.admin.delete(f"/api/v1/namespaces/{NAMESPACE}/pods/{second['metadata']['name']}")
        wait_for(
            lambda: (
                not node.admin.exists(f"/api/v1/namespaces/{NAMESPACE}/pods/{second['metadata']['name']}")
            ),
            60,
            "the second driver pod to go",
        )
