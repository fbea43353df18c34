"""A claim reserved for a PodGroup: the group's pods are pinned, nobody else, and never on trust.

With workload-aware scheduling a claim's ``status.reservedFor`` names a PodGroup
(``scheduling.k8s.io``/``podgroups``) instead of its pods. The kubelet prepares the claim once, for
the first pod of the group, so no pod of the group is listed anywhere numadra records. Before the
fix every container of the group was refused ("reserved for no pod, not for this pod"). Now a pod
that is not a recorded consumer is checked on the apiserver: its own ``spec.schedulingGroup``
(read in the claim's namespace, its UID checked) must name the group. Real files, real HTTP to
the fake apiserver, the real NRI wire protocol over a unix socket.
"""

from __future__ import annotations

from typing import Any

import pytest

from driver._proto.nri import api_pb2 as nri
from driver.claims.consumers import ApiPodGroupReader
from driver.errors import ConsumersUnknownError
from harness.fake_nri_runtime import container, pod
from harness.poll import wait_for
from tests.integration.claims._world import claim, cpu_result
from tests.integration.pinning._node import PinningNode, claim_env, cpuset, journal_entry

CLAIM = "6a7b8c9d-0d1b-4c3a-9e8f-0000000000d1"
GROUP = {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "train", "uid": "pg-0001"}
POD_A = pod("sb-a", "0b6f3d52-aaaa-4c3a-9e8f-0000000000a1", name="worker-0", namespace="ml")
POD_B = pod("sb-b", "0b6f3d52-bbbb-4c3a-9e8f-0000000000b1", name="worker-1", namespace="ml")
#: same namespace, no group
LONER = pod("sb-c", "0b6f3d52-cccc-4c3a-9e8f-0000000000c1", name="loner", namespace="ml")
#: same namespace, another group
RIVAL = pod("sb-d", "0b6f3d52-dddd-4c3a-9e8f-0000000000d1", name="rival-0", namespace="ml")
#: another namespace, a group of the same name
STRANGER = pod("sb-e", "0b6f3d52-eeee-4c3a-9e8f-0000000000e1", name="worker-0", namespace="web")


def _pod_object(sandbox: nri.PodSandbox, group: str = "") -> dict[str, Any]:
    """The pod as the apiserver has it; ``group``: its ``spec.schedulingGroup.podGroupName``."""
    spec: dict[str, Any] = {"containers": [{"name": "app", "image": "busybox"}]}
    if group:
        spec["schedulingGroup"] = {"podGroupName": group}
    meta = {"name": sandbox.name, "namespace": sandbox.namespace, "uid": sandbox.uid}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def _group_claim(node: PinningNode) -> list[str]:
    """A claim with 2 exclusive CPUs reserved for PodGroup ``train``, prepared for the group's
    first pod; the pods exist on the apiserver. Returns the env its CDI spec gives a container."""
    obj = claim(CLAIM, "gang", "ml", results=[cpu_result("cpus", 2)])
    obj["status"]["reservedFor"] = [GROUP]
    ref = node.put_claim(obj)
    for sandbox, group in ((POD_A, "train"), (POD_B, "train"), (LONER, ""), (RIVAL, "other")):
        node.api.put_object(_pod_object(sandbox, group))
    node.api.put_object(_pod_object(STRANGER, "train"))
    assert node.start_driver().prepare_claims([ref])[CLAIM].ok
    return claim_env(node.world, CLAIM)


def test_every_pod_of_the_group_runs_pinned_and_is_recorded(node: PinningNode) -> None:
    """Both pods of the group get the claim's CPUs; each costs one read of itself, then none."""
    env = _group_claim(node)
    entry = journal_entry(node.world, CLAIM)
    assert entry is not None and entry.reserved_pods == ()
    assert [(g.name, g.uid) for g in entry.reserved_groups] == [("train", "pg-0001")]
    _plugin, conn = node.start_plugin()
    first = conn.create_container_raw(container("c-a", "app", env, sandbox=POD_A.id), pod=POD_A)
    second = conn.create_container_raw(container("c-b", "app", env, sandbox=POD_B.id), pod=POD_B)
    assert first.status.code == 0, f"the group's first pod was refused: {first.status.message}"
    assert second.status.code == 0, f"the group's second pod was refused: {second.status.message}"
    got_a = nri.CreateContainerResponse.FromString(first.payload)
    got_b = nri.CreateContainerResponse.FromString(second.payload)
    assert cpuset(got_a) == cpuset(got_b) and cpuset(got_a)[0]
    assert node.check is not None and node.check.reads == 2  # one pod read each, no claim read
    pod_reads = [r for r in node.api.requests if "/pods/" in r.path]
    assert sorted(r.path for r in pod_reads) == [
        "/api/v1/namespaces/ml/pods/worker-0",
        "/api/v1/namespaces/ml/pods/worker-1",
    ]
    conn.create_container(container("c-b2", "sidecar", env, sandbox=POD_B.id), pod=POD_B)
    assert node.check.reads == 2  # a confirmed member needs no second read
    assert node.records is not None and node.records.flush()
    recorded = journal_entry(node.world, CLAIM)
    assert recorded is not None and set(recorded.reserved_pods or ()) == {POD_A.uid, POD_B.uid}
    assert recorded.reserved_groups == entry.reserved_groups


def test_pods_outside_the_group_are_refused(node: PinningNode) -> None:
    """A member is pinned; a pod of the namespace without a group, one naming another group and
    one of another namespace naming a group of the same name are refused, naming the group."""
    env = _group_claim(node)
    _plugin, conn = node.start_plugin()
    member = conn.create_container_raw(container("c-a", "app", env, sandbox=POD_A.id), pod=POD_A)
    assert member.status.code == 0, member.status.message
    for sandbox in (LONER, RIVAL, STRANGER):
        refused = conn.create_container_raw(
            container(f"c-{sandbox.id}", "app", env, sandbox=sandbox.id), pod=sandbox
        )
        assert refused.status.code == 9, sandbox.name
        assert (
            "not for this pod" in refused.status.message
            or "a claim of namespace ml" in refused.status.message
        )
    assert [(f.reason, f.action, f.pod_name) for f in node.failures] == [
        ("not_reserved", "refused", "loner"),
        ("not_reserved", "refused", "rival-0"),
        ("not_reserved", "refused", "worker-0"),
    ]
    assert "PodGroup train (uid pg-0001)" in node.failures[0].message
    # the stranger was never read: a pod of another namespace cannot hold the claim
    assert not [r for r in node.api.requests if "/namespaces/web/" in r.path]


def test_a_pod_whose_name_now_holds_another_pod_is_refused(node: PinningNode) -> None:
    """The runtime's pod UID must be the apiserver's: worker-0 of the group is pinned, but
    worker-1 recreated (a new UID) does not make the old sandbox's container a member."""
    env = _group_claim(node)
    node.api.put_object(
        {**_pod_object(POD_B, "train"), "metadata": {**_pod_object(POD_B)["metadata"], "uid": "new"}}
    )
    _plugin, conn = node.start_plugin()
    assert cpuset(conn.create_container(container("c-a", "app", env, sandbox=POD_A.id), pod=POD_A))[0]
    refused = conn.create_container_raw(container("c-b", "app", env, sandbox=POD_B.id), pod=POD_B)
    assert refused.status.code == 9 and "not for this pod" in refused.status.message


def test_an_unreachable_apiserver_refuses_a_member_until_it_answers(node: PinningNode) -> None:
    """Fail closed: the pod's group cannot be read, so its container is refused (the kubelet
    retries it) and the refusal says which read failed; once the apiserver answers, it runs pinned."""
    env = _group_claim(node)
    _plugin, conn = node.start_plugin()
    node.api.stop()
    refused = conn.create_container_raw(container("c-b", "app", env, sandbox=POD_B.id), pod=POD_B)
    assert refused.status.code == 9 and "cannot read pod ml/worker-1" in refused.status.message
    assert [(f.reason, f.action) for f in node.failures] == [("consumers_unknown", "refused")]
    node.api.start()

    def retried() -> bool:  # as the kubelet does; a failed read is remembered a moment
        again = conn.create_container_raw(container("c-b", "app", env, sandbox=POD_B.id), pod=POD_B)
        return again.status.code == 0 and bool(
            cpuset(nri.CreateContainerResponse.FromString(again.payload))[0]
        )

    assert wait_for(retried, 10.0, "pod worker-1 pinned once the apiserver answers")


def test_a_confirmed_member_is_pinned_by_a_restarted_driver_without_the_apiserver(node: PinningNode) -> None:
    """The member learned is kept in the journal entry, beside the group."""
    env = _group_claim(node)
    _plugin, conn = node.start_plugin()
    conn.create_container(container("c-b", "app", env, sandbox=POD_B.id), pod=POD_B)
    assert node.records is not None and node.records.flush()
    conn.close()
    node.api.stop()
    node.start_driver()
    _plugin, again = node.start_plugin()
    assert cpuset(again.create_container(container("c-b3", "app", env, sandbox=POD_B.id), pod=POD_B))[0]
    assert node.check is not None and node.check.reads == 0


def test_the_pod_reader_tells_members_gone_pods_and_outages_apart(node: PinningNode) -> None:
    """Over real HTTP: the pod's group; "" for no group, a NotFound Status naming the pod, or
    another UID under its name; ConsumersUnknownError when the apiserver cannot answer."""
    reader = ApiPodGroupReader(node.kube())
    node.api.put_object(_pod_object(POD_A, "train"))
    node.api.put_object(_pod_object(LONER))
    assert reader("ml", "worker-0", POD_A.uid) == "train"
    assert reader("ml", "loner", LONER.uid) == ""
    assert reader("ml", "worker-0", "another-uid") == ""
    assert reader("ml", "nobody", "u") == ""
    node.api.stop()
    with pytest.raises(ConsumersUnknownError, match="cannot read pod ml/worker-0"):
        reader("ml", "worker-0", POD_A.uid)
