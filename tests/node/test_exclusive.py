"""(b) Claims get disjoint CPUs; one that does not fit waits; deleting a pod unprepares its claim."""

from __future__ import annotations

import pytest

from harness.controlplane import wait_for
from tests.e2e.conftest import condition
from tests.node.conftest import NodeCluster, busybox_pod

pytestmark = pytest.mark.node


def test_disjoint_cpus_a_third_claim_waits_and_runs_once_one_is_deleted(node: NodeCluster) -> None:
    """Two 1-CPU claims on this 2-CPU host: disjoint, each container on its own CPU. A third stays
    Pending (unschedulable), and runs pinned on the freed CPU once the first pod is deleted, whose
    claim is unprepared: its CDI specs and journal entry are gone."""
    ns = node.new_namespace("excl")
    try:
        node.create_template(ns, "one-cpu", cpus=1)
        pods = {}
        for name in ("p1", "p2"):
            node.create_pod(ns, busybox_pod(name, "one-cpu"))
        for name in ("p1", "p2"):
            pods[name] = node.wait_running(ns, name)
        uid = {n: node.claim_of(p)["metadata"]["uid"] for n, p in pods.items()}
        pin = {n: node.claim_pinning(uid[n]) for n in pods}
        assert pin["p1"].cpus.isdisjoint(pin["p2"].cpus), pin
        for name, pod in pods.items():
            assert node.proc_status(node.container_id(pod)) == pin[name]

        node.create_pod(ns, busybox_pod("p3", "one-cpu"))

        def unschedulable() -> bool:
            cond = condition(node.pod(ns, "p3"), "PodScheduled")
            return cond is not None and cond["status"] == "False"

        wait_for(unschedulable, 60, "p3 to be found unschedulable", interval=0.2)
        assert node.pod(ns, "p3")["status"]["phase"] == "Pending"

        files = node.claim_files(uid["p1"])
        assert files and uid["p1"] in node.journal_uids()
        node.delete_pod(ns, "p1")
        wait_for(lambda: not node.claim_files(uid["p1"]), 30, "p1's CDI specs to be removed", interval=0.2)
        assert uid["p1"] not in node.journal_uids()
        assert uid["p2"] in node.journal_uids()

        p3 = node.wait_running(ns, "p3")
        pin3 = node.claim_pinning(node.claim_of(p3)["metadata"]["uid"])
        assert pin3.cpus == pin["p1"].cpus  # the only free CPU
        assert node.proc_status(node.container_id(p3)) == pin3
        assert node.proc_status(node.container_id(pods["p2"])) == pin["p2"]
    finally:
        node.delete_all_pods(ns)
