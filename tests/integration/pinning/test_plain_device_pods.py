"""Plain device pods: a container holding a GPU but no CPUs of a claim runs on its GPU's node.

Before, such a container (a GPU-only claim, or the claim the scheduler makes for
``nvidia.com/gpu: 1``) got its GPU's memory node and kept every CPU of the host. Real claims
driver and files (the GPU claim's CDI spec gives the container its marker env), the real NRI wire
protocol over a unix socket, the node shared set from the real journal; Events over real HTTP to
the fake apiserver. The node: 2 NUMA nodes x 8 CPUs (0-7, 8-15), 64 GiB each, GPU1 on node 1.
"""

from __future__ import annotations

import json
from typing import Any

from driver._proto.nri import api_pb2 as nri
from driver.kube.events import EventPoster
from driver.observability.pinreports import PinningReports
from driver.pinning.align import ALIGN_ANNOTATION, DeviceAligner
from driver.pinning.planner import CpuPlanner
from driver.pinning.types import format_cpulist
from harness.fake_nri_runtime import FakePluginConnection, container, pod
from tests.integration.claims._world import GPU0, GPU1, claim, cpu_result, result
from tests.integration.pinning._node import PinningNode, claim_env, cpuset, journal_entry, reserved

GPU_CLAIM = "5a6b7c8d-0d1b-4c3a-9e8f-0000000000e1"
CPU_CLAIM = "5a6b7c8d-0d1b-4c3a-9e8f-0000000000e2"
TRAINER = pod("sb-t", "0b6f3d52-1111-4c3a-9e8f-00000000000a", name="trainer", namespace="ml")
PINNED = pod("sb-p", "0b6f3d52-2222-4c3a-9e8f-00000000000b", name="pinned", namespace="ml")
GiB = 1 << 30


def _prepare(node: PinningNode, obj: dict[str, Any], holder: nri.PodSandbox) -> None:
    obj["status"]["reservedFor"] = reserved(holder.uid)
    ref = node.put_claim(obj)
    drv = node.driver or node.start_driver()
    assert drv.prepare_claims([ref])[ref.uid].ok
    assert node.index is not None
    node.index.invalidate()  # as numadra run does after every prepare


def _gpu_node(node: PinningNode, *, align: bool = True, **kwargs: Any) -> FakePluginConnection:
    """A GPU1 claim prepared for TRAINER and the plugin started (aligned unless told not to)."""
    _prepare(node, claim(GPU_CLAIM, "gpu", "ml", results=[result("gpu", GPU1)]), TRAINER)
    index, inventory = node.index, node.world.inventory
    assert index is not None
    planner = CpuPlanner(lambda: inventory)
    aligner = DeviceAligner(lambda: inventory, lambda: planner.node_shared_pool(index.claimed_cpus()))
    _plugin, conn = node.start_plugin(aligner=aligner if align else None, **kwargs)
    conn.synchronize([], pods=[TRAINER, PINNED])
    return conn


def _trainer(
    node: PinningNode, *, cpus: float = 0, memory: int = 0, sandbox: nri.PodSandbox = TRAINER
) -> nri.Container:
    """The trainer's container as the runtime sends it: the claim's env, its request and limit."""
    ctr = container("c-train", "train", claim_env(node.world, GPU_CLAIM), sandbox=sandbox.id)
    resources = ctr.linux.resources
    resources.cpu.shares.value = int(cpus * 1024) if cpus else 2  # the kubelet's minimum: no request
    if memory:
        resources.memory.limit.value = memory
    return ctr


def test_a_gpu_only_claims_container_runs_on_its_gpus_node(node: PinningNode) -> None:
    """cpuset.mems = the GPU's node, cpuset.cpus = that node's CPUs (no claim holds any)."""
    conn = _gpu_node(node)
    got = conn.create_container(_trainer(node, cpus=2, memory=8 * GiB), pod=TRAINER)
    assert cpuset(got) == ("8-15", "1")
    assert node.failures == []
    # it runs on shared CPUs: the planner must not hand their last one to a claim under it
    assert node.plugins[-1].handlers.pool_users() == 1


def test_an_exclusive_claim_on_that_node_shrinks_the_gpu_containers_cpus(node: PinningNode) -> None:
    """A claim prepared later takes 2 CPUs of node 1: its container's creation moves the GPU
    container off them (an update in the same response), and never onto them again."""
    conn = _gpu_node(node)
    assert cpuset(conn.create_container(_trainer(node), pod=TRAINER)) == ("8-15", "1")
    _prepare(node, claim(CPU_CLAIM, "cpus", "ml", results=[cpu_result("cpus", 2, node=1)]), PINNED)
    entry = journal_entry(node.world, CPU_CLAIM)
    assert entry is not None and entry.pinning is not None
    taken = entry.pinning.cpus
    assert len(taken) == 2 and taken <= set(range(8, 16))
    env = claim_env(node.world, CPU_CLAIM)
    got = conn.create_container(container("c-pin", "app", env, sandbox=PINNED.id), pod=PINNED)
    assert cpuset(got) == (format_cpulist(taken), "1")
    (update,) = got.update
    assert update.container_id == "c-train"
    moved = update.linux.resources.cpu
    assert (moved.cpus, moved.mems) == (format_cpulist(frozenset(range(8, 16)) - taken), "1")
    # a resize of the GPU container keeps it on the shrunk set
    resize = conn.update_container(
        _trainer(node), nri.LinuxResources(cpu=nri.LinuxCPU(cpus="0-15")), pod=TRAINER
    )
    (kept,) = resize.update
    assert kept.linux.resources.cpu.cpus == moved.cpus


def test_a_memory_limit_above_the_gpus_node_widens_to_the_next_node(node: PinningNode) -> None:
    """100 GiB does not fit node 1's 64 GiB: confining it there could OOM-kill a container that
    fits the machine. It runs on nodes 1 and 0, and the pod is told why."""
    conn = _gpu_node(node)
    got = conn.create_container(_trainer(node, memory=100 * GiB), pod=TRAINER)
    assert cpuset(got) == ("0-15", "0-1")
    (failure,) = node.failures
    assert (failure.reason, failure.action, failure.pod_name) == ("align_widened", "widened", "trainer")
    assert "widened to NUMA node(s) 0-1" in failure.message


def test_a_limit_above_the_machine_stays_unconfined_in_memory(node: PinningNode) -> None:
    """Nothing holds 200 GiB: memory nodes left to the kernel (every node), CPUs still never a claim's."""
    conn = _gpu_node(node)
    got = conn.create_container(_trainer(node, memory=200 * GiB), pod=TRAINER)
    assert cpuset(got) == ("0-15", "0-1")
    (failure,) = node.failures
    assert (failure.reason, failure.action) == ("align_unconfined", "unpinned")


def test_the_pods_annotation_turns_alignment_off(node: PinningNode) -> None:
    """``numadra.dev/align: off``: the memory node only, as before alignment (CPUs left alone)."""
    conn = _gpu_node(node)
    off = pod(TRAINER.id, TRAINER.uid, name="trainer", namespace="ml")
    off.annotations[ALIGN_ANNOTATION] = "off"
    assert cpuset(conn.create_container(_trainer(node), pod=off)) == ("", "1")
    assert node.failures == []


def test_the_node_flag_turns_alignment_off(node: PinningNode) -> None:
    """``--no-align-device-pods`` (no aligner): the memory node only."""
    conn = _gpu_node(node, align=False)
    assert cpuset(conn.create_container(_trainer(node), pod=TRAINER)) == ("", "1")


def test_a_garbage_annotation_is_reported_and_treated_as_on(node: PinningNode) -> None:
    """A value that is neither on nor off: a Warning Event on the pod says so, and the container
    is aligned (the default)."""
    poster = EventPoster(node.kube().create_event)
    node.closers.append(poster.close)
    reports = PinningReports(poster, node_name="node-a")
    node.closers.append(reports.close)
    conn = _gpu_node(node, on_failure=reports)
    odd = pod(TRAINER.id, TRAINER.uid, name="trainer", namespace="ml")
    odd.annotations[ALIGN_ANNOTATION] = "0ff"
    assert cpuset(conn.create_container(_trainer(node), pod=odd)) == ("8-15", "1")
    assert reports.flush()
    (event,) = node.api.objects("Event")
    assert (event["type"], event["reason"]) == ("Warning", "NumadraBadSetting")
    assert event["involvedObject"]["uid"] == TRAINER.uid
    assert "'0ff' is neither 'on' nor 'off'" in event["message"]
    assert event["message"].endswith("[bad_annotation]")


def test_a_restart_re_aligns_a_drifted_gpu_container(node: PinningNode) -> None:
    """Synchronize (the restart path) puts a running GPU container back on its node's CPUs."""
    conn = _gpu_node(node)
    running = _trainer(node)
    running.linux.resources.cpu.cpus = "0-15"
    running.linux.resources.cpu.mems = "1"
    resp = conn.synchronize([running], pods=[TRAINER])
    (update,) = resp.update
    assert (update.container_id, update.linux.resources.cpu.cpus) == ("c-train", "8-15")


EXTENDED = "5a6b7c8d-0d1b-4c3a-9e8f-0000000000e3"


def _cdi_env(node: PinningNode, uid: str, device: str) -> list[str]:
    """The env the claim's CDI device for ``device`` gives a container (the kubelet hands a
    container only the CDI devices of its own requests)."""
    spec = json.loads((node.world.cdi_dir / f"numadra.dev_claim_{uid}.json").read_text())
    (found,) = [d for d in spec["devices"] if d["name"].startswith(f"{uid}-{device}")]
    return list(found["containerEdits"]["env"])


def test_each_container_of_an_extended_resource_claim_gets_its_own_gpus_node(node: PinningNode) -> None:
    """The scheduler's claim for two containers asking ``nvidia.com/gpu: 1`` each: one request per
    container, GPU0 (node 0) and GPU1 (node 1). Each container runs on its own GPU's node, not on
    both (the claim's); one holding both requests gets both."""
    obj = claim(
        EXTENDED,
        "trainer-extended-resources-x7k2q",
        "ml",
        results=[result("container-0-request-0", GPU0), result("container-1-request-0", GPU1)],
        annotations={"resource.kubernetes.io/extended-resource-claim": "true"},
    )
    _prepare(node, obj, TRAINER)
    index, inventory = node.index, node.world.inventory
    assert index is not None
    planner = CpuPlanner(lambda: inventory)
    aligner = DeviceAligner(lambda: inventory, lambda: planner.node_shared_pool(index.claimed_cpus()))
    _plugin, conn = node.start_plugin(aligner=aligner)
    conn.synchronize([], pods=[TRAINER])
    first, second = _cdi_env(node, EXTENDED, GPU0), _cdi_env(node, EXTENDED, GPU1)
    got = [
        cpuset(conn.create_container(container(cid, cid, env, sandbox=TRAINER.id), pod=TRAINER))
        for cid, env in (("c-0", first), ("c-1", second), ("c-both", [*first, *second]))
    ]
    assert got == [("0-7", "0"), ("8-15", "1"), ("0-15", "0-1")]


def test_a_restart_with_every_cpu_claimed_still_synchronizes(node: PinningNode) -> None:
    """With the node shared pool on and no shared CPU left, a running GPU container cannot be
    aligned: Synchronize still answers (the container keeps running as it runs), and a new one
    is refused rather than started on every CPU."""
    _prepare(node, claim(GPU_CLAIM, "gpu", "ml", results=[result("gpu", GPU1)]), TRAINER)
    inventory = node.world.inventory
    _plugin, conn = node.start_plugin(
        aligner=DeviceAligner(lambda: inventory, frozenset), node_shared_pool=frozenset
    )
    running = _trainer(node)
    running.linux.resources.cpu.cpus = "8-15"
    running.linux.resources.cpu.mems = "1"
    assert list(conn.synchronize([running], pods=[TRAINER]).update) == []
    fresh = container("c-new", "train", claim_env(node.world, GPU_CLAIM), sandbox=TRAINER.id)
    refused = conn.create_container_raw(fresh, pod=TRAINER)
    assert refused.status.code == 9 and "node shared pool is empty" in refused.status.message
