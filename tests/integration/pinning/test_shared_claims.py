"""A claim shared by several pods: every consumer is pinned, nobody else, and it is remembered.

The kubelet prepares a claim once, for the first pod that needs it, and never calls the driver for
the next pods of a shared claim (a ``resourceClaimName`` used by several pods). Before the fix
the NRI plugin knew only the pods recorded at prepare, so the second pod's container was refused
("reserved for pod uid A, not for this pod") and never started; a GPU-only shared claim started
there but without its ``cpuset.mems``. Real files, real HTTP to the fake apiserver, the real NRI
wire protocol over a unix socket.
"""

from __future__ import annotations

from typing import Any

from driver._proto.nri import api_pb2 as nri
from harness.fake_nri_runtime import container, pod
from tests.integration.claims._world import GPU1, claim, cpu_result, result
from tests.integration.pinning._node import (
    PinningNode,
    claim_env,
    cpuset,
    journal_entry,
    reserved,
)

SHARED = "6a7b8c9d-0d1b-4c3a-9e8f-0000000000c1"
GPU_SHARED = "6a7b8c9d-0d1b-4c3a-9e8f-0000000000c2"
POD_A = pod("sb-a", "0b6f3d52-aaaa-4c3a-9e8f-00000000000a", name="a", namespace="ml")
POD_B = pod("sb-b", "0b6f3d52-bbbb-4c3a-9e8f-00000000000b", name="b", namespace="ml")
POD_C = pod("sb-c", "0b6f3d52-cccc-4c3a-9e8f-00000000000c", name="c", namespace="ml")


def _shared_cpu_claim(node: PinningNode) -> dict[str, Any]:
    """One claim with 2 exclusive CPUs, prepared by the kubelet for its first pod only."""
    obj = claim(SHARED, "shared", "ml", results=[cpu_result("cpus", 2)])
    obj["status"]["reservedFor"] = reserved(POD_A.uid)
    ref = node.put_claim(obj)
    drv = node.start_driver()
    assert drv.prepare_claims([ref])[SHARED].ok
    obj["status"]["reservedFor"] = reserved(POD_A.uid, POD_B.uid)  # the second pod, later
    node.api.put_object(obj)
    return obj


def test_the_second_pod_of_a_shared_claim_runs_pinned(node: PinningNode) -> None:
    """Case 6: pod B, reserved after the prepare, is pinned to the claim's CPUs like pod A."""
    _shared_cpu_claim(node)
    _plugin, conn = node.start_plugin()
    env = claim_env(node.world, SHARED)
    first = conn.create_container(container("c-a", "app", env, sandbox=POD_A.id), pod=POD_A)
    second = conn.create_container_raw(container("c-b", "app", env, sandbox=POD_B.id), pod=POD_B)
    assert second.status.code == 0, f"the second pod was refused: {second.status.message}"
    entry = journal_entry(node.world, SHARED)
    assert entry is not None and entry.pinning is not None
    got = nri.CreateContainerResponse.FromString(second.payload)
    assert cpuset(got) == cpuset(first) != ("", "")
    # the other containers of pod B need no read; a pod the claim is not reserved for is refused
    conn.create_container(container("c-b2", "sidecar", env, sandbox=POD_B.id), pod=POD_B)
    assert node.check is not None and node.check.reads == 1
    forged = conn.create_container_raw(container("c-c", "app", env, sandbox=POD_C.id), pod=POD_C)
    assert forged.status.code == 9 and "not for this pod" in forged.status.message
    assert [(f.reason, f.action, f.pod_name) for f in node.failures] == [("not_reserved", "refused", "c")]


def test_a_learned_consumer_is_kept_in_the_journal_across_a_restart(node: PinningNode) -> None:
    """Pod B is recorded with the claim; a restarted driver pins it with the apiserver gone."""
    _shared_cpu_claim(node)
    _plugin, conn = node.start_plugin()
    env = claim_env(node.world, SHARED)
    conn.create_container(container("c-b", "app", env, sandbox=POD_B.id), pod=POD_B)
    assert node.records is not None and node.records.flush()
    entry = journal_entry(node.world, SHARED)
    assert entry is not None and entry.reserved_pods == (POD_A.uid, POD_B.uid)
    conn.close()

    node.api.stop()
    node.start_driver()  # a restart: the index is read from the journal again
    _plugin, again = node.start_plugin()
    assert cpuset(again.create_container(container("c-b3", "app", env, sandbox=POD_B.id), pod=POD_B))[0]
    assert node.check is not None and node.check.reads == 0


def test_an_unreachable_apiserver_refuses_an_unrecorded_pod_and_says_so(node: PinningNode) -> None:
    """Fail closed: the consumers cannot be read, so pod B's container of the CPU claim is refused
    (the kubelet retries it), and the refusal reaches the failure sink; pod A is not affected."""
    _shared_cpu_claim(node)
    _plugin, conn = node.start_plugin()
    node.api.stop()
    env = claim_env(node.world, SHARED)
    refused = conn.create_container_raw(container("c-b", "app", env, sandbox=POD_B.id), pod=POD_B)
    assert refused.status.code == 9 and "could not be read" in refused.status.message
    assert [(f.reason, f.action) for f in node.failures] == [("consumers_unknown", "refused")]
    assert cpuset(conn.create_container(container("c-a", "app", env, sandbox=POD_A.id), pod=POD_A))[0]


def test_every_consumer_of_a_shared_gpu_claim_gets_its_memory_nodes(node: PinningNode) -> None:
    """A GPU-only claim shared by two pods: both get cpuset.mems of the GPU's NUMA node (and the
    pool); a pod that is not a consumer runs as one without a claim (nothing to steal)."""
    obj = claim(GPU_SHARED, "gpu", "ml", results=[result("gpu", GPU1)])
    obj["status"]["reservedFor"] = reserved(POD_A.uid)
    ref = node.put_claim(obj)
    assert node.start_driver().prepare_claims([ref])[GPU_SHARED].ok
    obj["status"]["reservedFor"] = reserved(POD_A.uid, POD_B.uid)
    node.api.put_object(obj)
    _plugin, conn = node.start_plugin(node_shared_pool=lambda: frozenset({0, 1}))
    env = claim_env(node.world, GPU_SHARED)
    for holder in (POD_A, POD_B):
        got = conn.create_container(
            container(f"c-{holder.name}", "train", env, sandbox=holder.id), pod=holder
        )
        assert cpuset(got) == ("0-1", "1"), holder.name
    other = conn.create_container(container("c-c", "train", env, sandbox=POD_C.id), pod=POD_C)
    assert cpuset(other) == ("0-1", "")


def test_nothing_unprepares_a_shared_claim_when_one_of_its_pods_goes(node: PinningNode) -> None:
    """Containers of the first pod stop and are removed: the claim stays prepared for the second."""
    _shared_cpu_claim(node)
    _plugin, conn = node.start_plugin()
    env = claim_env(node.world, SHARED)
    a = container("c-a", "app", env, sandbox=POD_A.id)
    conn.create_container(a, pod=POD_A)
    conn.remove_container(a, pod=POD_A)
    assert journal_entry(node.world, SHARED) is not None
    assert (node.world.cdi_dir / f"numadra.dev_claim_{SHARED}.json").exists()
    assert cpuset(conn.create_container(container("c-b", "app", env, sandbox=POD_B.id), pod=POD_B))[0]
