"""(g) A pod without a claim that copies another claim's pinning env into its own spec.

CDI env and pod-spec env look the same to an NRI plugin: env is not proof that a container holds a
claim. Pinning must be tied to the pod the claim is reserved for, so the forger is refused
(CreateContainerError) and never runs on the victim's CPUs.
"""

from __future__ import annotations

import pytest

from driver.pinning.types import ENV_CLAIM_UID, ENV_CPU_MODE, ENV_CPUS, ENV_MEMS, ENV_REQUEST
from harness.controlplane import wait_for
from tests.node.conftest import NodeCluster, busybox_pod

pytestmark = [pytest.mark.node, pytest.mark.fault]


def test_forged_marker_gets_create_container_error(node: NodeCluster) -> None:
    ns = node.new_namespace("forge")
    try:
        node.create_template(ns, "one-cpu", cpus=1)
        node.create_pod(ns, busybox_pod("victim", "one-cpu"))
        victim = node.wait_running(ns, "victim")
        claim_uid = node.claim_of(victim)["metadata"]["uid"]
        env = node.claim_env(claim_uid)
        forged = {
            k: env[k] for k in (ENV_CLAIM_UID, ENV_CPUS, ENV_MEMS, ENV_CPU_MODE, ENV_REQUEST) if k in env
        }
        assert forged[ENV_CLAIM_UID] == claim_uid
        node.create_pod(ns, busybox_pod("forger", None, env=forged))

        def waiting_reason() -> str | None:
            statuses = node.pod(ns, "forger").get("status", {}).get("containerStatuses") or []
            for status in statuses:
                if "running" in status.get("state", {}):
                    return "running"
                reason = status.get("state", {}).get("waiting", {}).get("reason")
                if reason and reason != "ContainerCreating":
                    return str(reason)
            return None

        reason = wait_for(waiting_reason, 60, "the forger's container state", interval=0.2)
        assert reason == "CreateContainerError", f"{reason}:\n{node.describe(ns, 'forger')}"
        # never placed on the victim's CPUs: no container of the forger exists in the runtime
        labels = (f"io.kubernetes.pod.namespace={ns}", "io.kubernetes.pod.name=forger")
        listing = node.containerd.crictl("ps", "-a", "-q", "--label", labels[0], "--label", labels[1])
        assert listing.stdout.split() == []
        assert node.proc_status(node.container_id(victim)) == node.claim_pinning(claim_uid)
    finally:
        node.delete_all_pods(ns)
