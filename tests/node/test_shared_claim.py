"""(h) One ResourceClaim shared by two pods: both run pinned; the last pod's end unprepares it.

The kubelet prepares a claim once, for its first pod, and never calls the driver for the next
pod that names it (``resourceClaimName``). Before numadra read a shared claim's ``reservedFor``
on the container's creation, the second pod never started: containerd refused its container
(CreateContainerError "... reserved for pod uid <first>, not for this pod"). A third pod that
copies the claim's markers is refused, with numadra's Warning Event on it. A claim made from a
ResourceClaimTemplate belongs to one pod and is not concerned (test_exclusive.py covers it).
"""

from __future__ import annotations

from typing import Any

import pytest

from driver.pinning.types import ENV_CLAIM_UID, ENV_CPU_MODE, ENV_CPUS, ENV_MEMS, ENV_REQUEST
from harness.controlplane import wait_for
from tests.node.conftest import RESOURCE, NodeCluster, busybox_pod, cpu_template

pytestmark = pytest.mark.node


def _shared_pod(name: str, claim: str) -> dict[str, Any]:
    """A busybox pod whose claim ``cpus`` is the existing ResourceClaim ``claim``."""
    pod = busybox_pod(name)
    pod["spec"]["resourceClaims"] = [{"name": "cpus", "resourceClaimName": claim}]
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "cpus"}]
    return pod


def test_two_pods_of_one_claim_run_pinned_and_the_last_one_unprepares_it(node: NodeCluster) -> None:
    ns = node.new_namespace("shared")
    claim_path = f"{RESOURCE}/namespaces/{ns}/resourceclaims"
    try:
        node.admin.create(
            claim_path,
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": "shared"},
                "spec": cpu_template("unused", cpus=1)["spec"]["spec"],
            },
            fieldValidation="Strict",
        )
        node.create_pod(ns, _shared_pod("first", "shared"))
        first = node.wait_running(ns, "first")
        claim = dict(node.admin.get(f"{claim_path}/shared"))
        uid = claim["metadata"]["uid"]
        pin = node.claim_pinning(uid)
        assert len(pin.cpus) == 1
        assert node.proc_status(node.container_id(first)) == pin

        node.create_pod(ns, _shared_pod("second", "shared"))  # the kubelet does not prepare again
        second = node.wait_running(ns, "second")
        assert node.proc_status(node.container_id(second)) == pin
        assert node.main_process_status(node.container_id(second)) == pin
        reserved = {c["uid"] for c in node.admin.get(f"{claim_path}/shared")["status"]["reservedFor"]}
        assert reserved == {first["metadata"]["uid"], second["metadata"]["uid"]}
        warnings = [e for e in node.events(ns, "second") if e.get("reason", "").startswith("Numadra")]
        assert warnings == []

        # a third pod of the namespace, not a consumer, copying the markers: refused, and the
        # refusal is on its pod as numadra's own Warning Event (RBAC: create events)
        env = node.claim_env(uid)
        forged = {
            k: env[k] for k in (ENV_CLAIM_UID, ENV_CPUS, ENV_MEMS, ENV_CPU_MODE, ENV_REQUEST) if k in env
        }
        node.create_pod(ns, busybox_pod("copycat", None, env=forged))

        def refused_event() -> dict[str, Any] | None:
            events = [e for e in node.events(ns, "copycat") if e.get("reason") == "NumadraPinningRefused"]
            return events[0] if events else None

        event = wait_for(refused_event, 60, "numadra's Warning Event on the copycat pod", interval=0.2)
        assert event["type"] == "Warning" and "not for this pod" in event["message"], event
        node.delete_pod(ns, "copycat")

        node.delete_pod(ns, "first")  # one consumer left: the claim stays prepared and pinned
        assert uid in node.journal_uids()
        assert node.spec_file(uid).exists()
        assert node.proc_status(node.container_id(second)) == pin

        node.delete_pod(ns, "second")  # the last one: the kubelet unprepares the claim
        wait_for(
            lambda: not node.claim_files(uid), 60, "the shared claim's CDI spec to be removed", interval=0.2
        )
        assert uid not in node.journal_uids()
    finally:
        node.delete_all_pods(ns)
        node.admin.delete(f"{claim_path}/shared")
