"""(d) The node shared pool (``--nri-shared-pool``, seed 000) and its empty-pool rule.

Containers without a claim are confined to the pool: online CPUs minus the CPUs claims hold. The
empty-pool rule: CPUs in ``--reserved-cpus`` are never exclusive and always in the pool (as the
kubelet's CPU manager treats reserved CPUs), so the pool cannot be emptied; with no reserved CPUs,
a prepare that would empty the pool while containers without a claim run fails with a per-claim
error, and those containers keep running where they were.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from driver.pinning.types import parse_cpulist
from harness.controlplane import wait_for
from tests.node.conftest import NodeCluster, ProcStatus, busybox_pod

pytestmark = pytest.mark.node


def online_cpus() -> frozenset[int]:
    return parse_cpulist(Path("/sys/devices/system/cpu/online").read_text().strip())


def _cpus(node: NodeCluster, ns: str, name: str) -> frozenset[int]:
    return node.proc_status(node.container_id(node.pod(ns, name))).cpus


def test_claimless_containers_move_off_claimed_cpus(node: NodeCluster) -> None:
    """A claimless container running before a claim moves off the claim's CPU when the claim's
    container starts; one started afterwards starts on the pool."""
    node.stop_driver()
    node.start_driver(("--nri-shared-pool",))
    ns = node.new_namespace("pool")
    try:
        node.create_pod(ns, busybox_pod("free", None))
        node.wait_running(ns, "free")
        assert _cpus(node, ns, "free") == online_cpus()

        node.create_template(ns, "one-cpu", cpus=1)
        node.create_pod(ns, busybox_pod("claimed", "one-cpu"))
        pod = node.wait_running(ns, "claimed")
        pinning = node.claim_pinning(node.claim_of(pod)["metadata"]["uid"])
        assert node.proc_status(node.container_id(pod)) == pinning
        pool = online_cpus() - pinning.cpus
        wait_for(lambda: _cpus(node, ns, "free") == pool, 15, "the claimless container to move to the pool")

        node.create_pod(ns, busybox_pod("later", None))
        node.wait_running(ns, "later")
        assert _cpus(node, ns, "later") == pool
    finally:
        node.delete_all_pods(ns)


def test_reserved_cpus_stay_in_the_pool(node: NodeCluster) -> None:
    """With CPU 0 reserved, a claim takes the only other CPU; claimless containers run on CPU 0
    (the pool is never empty), before and after the claim."""
    node.stop_driver()
    node.start_driver(("--nri-shared-pool", "--reserved-cpus", "0"))
    ns = node.new_namespace("reserved")
    try:
        node.create_pod(ns, busybox_pod("free", None))
        node.wait_running(ns, "free")
        node.create_template(ns, "one-cpu", cpus=1)
        node.create_pod(ns, busybox_pod("claimed", "one-cpu"))
        pod = node.wait_running(ns, "claimed")
        pinning = node.claim_pinning(node.claim_of(pod)["metadata"]["uid"])
        assert 0 not in pinning.cpus, "a reserved CPU was handed to a claim"
        assert node.proc_status(node.container_id(pod)) == pinning
        expected = online_cpus() - pinning.cpus
        assert 0 in expected
        wait_for(
            lambda: _cpus(node, ns, "free") == expected, 15, "the claimless container on the reserved CPUs"
        )
        node.create_pod(ns, busybox_pod("later", None))
        node.wait_running(ns, "later")
        assert _cpus(node, ns, "later") == expected
    finally:
        node.delete_all_pods(ns)


def test_prepare_that_would_empty_the_pool_fails_per_claim(node: NodeCluster) -> None:
    """No reserved CPUs, a claimless container running: a claim for every CPU is refused at prepare
    with an error naming the pool, the pod does not run, and the claimless container keeps its CPUs."""
    node.stop_driver()
    node.start_driver(("--nri-shared-pool",))
    ns = node.new_namespace("empty")
    try:
        node.create_pod(ns, busybox_pod("free", None))
        node.wait_running(ns, "free")
        before = _cpus(node, ns, "free")
        assert before == online_cpus()

        node.create_template(ns, "all-cpus", cpus=len(online_cpus()))
        node.create_pod(ns, busybox_pod("greedy", "all-cpus"))

        def refused() -> str | None:
            for event in node.events(ns, "greedy"):
                message = str(event.get("message", ""))
                if event.get("reason") == "FailedPrepareDynamicResources" and "pool" in message.lower():
                    return message
            return None

        message = wait_for(refused, 60, "the prepare of the greedy claim to be refused", interval=0.2)
        claim = node.claim_of(node.pod(ns, "greedy"))
        claim_uid = claim["metadata"]["uid"]
        named = (claim_uid, claim["metadata"]["name"])
        assert any(n in message for n in named), f"the error should name the claim: {message}"
        assert node.pod(ns, "greedy")["status"]["phase"] == "Pending"
        assert claim_uid not in node.journal_uids()
        assert _cpus(node, ns, "free") == before
    finally:
        node.delete_all_pods(ns)


__all__ = ["ProcStatus"]
