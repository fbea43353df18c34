"""Pinning is bound to the pod that holds the claim: attacks over the real NRI socket.

The attacker is a pod without a claim (or with another claim) that copies a claim's marker env
(``NUMADRA_CLAIM_UID``, ``NUMADRA_CPUS``, ...) into its own container spec. The fake runtime
plays containerd (see ``harness/fake_nri_runtime.py``); it sends what containerd sends, in particular the
pod sandbox's Kubernetes UID and namespace with every container. A refusal is a non-OK ttrpc
status on CreateContainer: containerd then fails the CRI call and the kubelet reports
CreateContainerError.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from driver._proto.nri import api_pb2 as nri
from driver.errors import ClaimError, JournalError
from driver.pinning.failures import PinFailure
from driver.pinning.nri import NriPlugin
from driver.pinning.planner import CpuPlanner
from driver.pinning.types import ClaimBinding, ClaimPinning, CpuAssignment, CpuMode, CpuRequest, marker_env
from harness.fake_nri_runtime import (
    POD,
    FakeNriRuntime,
    FakePluginConnection,
    connect_plugin,
    container,
    pod,
)
from harness.synthetic import synthetic_inventory

pytestmark = pytest.mark.fault

#: the attacker's pod: same namespace, its own UID, no claim
EVIL = pod("pod-evil", "pod-uid-evil", name="evil")
#: a pod that holds claim-b (and not claim-a)
POD_B = pod("pod-b", "pod-uid-b", name="holder-b")

PIN_A = ClaimPinning(
    "claim-a", (CpuAssignment("main", CpuMode.EXCLUSIVE, frozenset({2, 3}), frozenset({0})),)
)
PIN_B = ClaimPinning(
    "claim-b", (CpuAssignment("main", CpuMode.EXCLUSIVE, frozenset({4, 5}), frozenset({0})),)
)
BINDINGS = {
    "claim-a": ClaimBinding("claim-a", "default", "cpus-a", frozenset({POD.uid}), PIN_A),
    "claim-b": ClaimBinding("claim-b", "default", "cpus-b", frozenset({POD_B.uid}), PIN_B),
}


def env_of(pinning: ClaimPinning) -> list[str]:
    """The marker env the claim's CDI spec gives its containers (what an attacker copies)."""
    return [
        "PATH=/usr/bin",
        *(f"{k}={v}" for k, v in marker_env(pinning.assignments[0], pinning.claim_uid).items()),
    ]


def cpuset(resp: nri.CreateContainerResponse) -> tuple[str, str]:
    """(cpus, mems) of a CreateContainer adjustment."""
    cpu = resp.adjust.linux.resources.cpu
    return cpu.cpus, cpu.mems


@pytest.fixture
def runtime() -> Iterator[FakeNriRuntime]:
    """The fake runtime on a short socket path."""
    d = Path(tempfile.mkdtemp(prefix="nri-", dir="/tmp"))
    rt = FakeNriRuntime(d / "nri.sock")
    yield rt
    rt.close()
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def start(runtime: FakeNriRuntime) -> Iterator[Callable[..., tuple[NriPlugin, FakePluginConnection]]]:
    """Start a plugin with given options against the runtime; closed after the test."""
    plugins: list[NriPlugin] = []

    def _start(**kwargs: object) -> tuple[NriPlugin, FakePluginConnection]:
        kwargs.setdefault("claim_lookup", BINDINGS.get)
        plugin = NriPlugin(socket_path=runtime.socket_path, **kwargs)  # type: ignore[arg-type]
        plugins.append(plugin)
        conn = connect_plugin(runtime, plugin.connect)
        conn.configure()
        return plugin, conn

    yield _start
    for plugin in plugins:
        plugin.close()


def test_forged_marker_from_another_pod_is_refused(
    start: Callable[..., tuple[NriPlugin, FakePluginConnection]],
) -> None:
    """A claimless pod copying claim-a's env gets an error naming claim and pod; the holder is pinned."""
    plugin, conn = start()
    conn.synchronize([], pods=[POD, EVIL])
    forged = conn.create_container_raw(container("c-evil", "miner", env_of(PIN_A), sandbox=EVIL.id), pod=EVIL)
    assert forged.status.code == 9  # FailedPrecondition: containerd fails CreateContainer
    message = forged.status.message
    assert "claim default/cpus-a (uid claim-a)" in message
    assert "pod default/evil (uid pod-uid-evil)" in message
    assert "not for this pod" in message
    assert "c-evil" not in plugin.handlers.containers()

    rightful = conn.create_container(container("c-app", "app", env_of(PIN_A)))
    assert cpuset(rightful) == ("2-3", "0")
    assert set(plugin.handlers.containers()) == {"c-app"}


def test_holder_of_one_claim_cannot_forge_another(
    start: Callable[..., tuple[NriPlugin, FakePluginConnection]],
) -> None:
    """A pod in claim-b's reservedFor naming claim-a (CPUs 2-3) is refused; its own claim pins."""
    _plugin, conn = start()
    stolen = conn.create_container_raw(container("c-b1", "app", env_of(PIN_A), sandbox=POD_B.id), pod=POD_B)
    assert stolen.status.code == 9
    assert "claim-a" in stolen.status.message and "pod-uid-b" in stolen.status.message
    own = conn.create_container(container("c-b2", "app", env_of(PIN_B), sandbox=POD_B.id), pod=POD_B)
    assert cpuset(own) == ("4-5", "0")


def test_same_uid_in_another_namespace_is_refused(
    start: Callable[..., tuple[NriPlugin, FakePluginConnection]],
) -> None:
    """The pod check covers the namespace too (a claim is only usable in its own namespace)."""
    _plugin, conn = start()
    elsewhere = pod("pod-x", POD.uid, namespace="other")
    resp = conn.create_container_raw(
        container("c-x", "app", env_of(PIN_A), sandbox=elsewhere.id), pod=elsewhere
    )
    assert resp.status.code == 9


def test_forged_marker_does_not_escape_the_shared_pool(
    start: Callable[..., tuple[NriPlugin, FakePluginConnection]],
) -> None:
    """With the node shared pool, the forged container is refused, not created off the pool.

    A claimless container gets the pool (CPUs 0-1,6-7 here: claim-a holds 2-3, claim-b 4-5); the
    same container with claim-a's env copied in gets no adjustment that would move it off it.
    """
    pool = frozenset({0, 1, 6, 7})
    plugin, conn = start(node_shared_pool=lambda: pool)
    conn.synchronize([], pods=[POD, EVIL])
    plain = conn.create_container(container("c-plain", "web", sandbox=EVIL.id), pod=EVIL)
    assert cpuset(plain) == ("0-1,6-7", "")
    forged = conn.create_container_raw(container("c-evil", "miner", env_of(PIN_A), sandbox=EVIL.id), pod=EVIL)
    assert forged.status.code == 9
    assert plugin.handlers.pool_users() == 1  # only c-plain runs on the pool
    assert cpuset(conn.create_container(container("c-app", "app", env_of(PIN_A)))) == ("2-3", "0")


def test_claimless_containers_never_get_claim_cpus_from_env_alone(
    start: Callable[..., tuple[NriPlugin, FakePluginConnection]],
) -> None:
    """Env that names no claim, or an unknown one, is refused; CPUs never come from the env."""
    _plugin, conn = start()
    for env in (["NUMADRA_CPUS=2-3", "NUMADRA_MEMS=0"], [*env_of(PIN_A)[:-2], "NUMADRA_CLAIM_UID=claim-zzz"]):
        resp = conn.create_container_raw(container("c-evil", "miner", env, sandbox=EVIL.id), pod=EVIL)
        assert resp.status.code == 9


def test_claim_without_cpus_binds_memory_nodes_to_its_pod_only(
    start: Callable[..., tuple[NriPlugin, FakePluginConnection]],
) -> None:
    """A GPU-only claim: its pod gets the GPU's node (and the pool); another pod gets just the pool."""
    gpu = ClaimBinding("claim-g", "default", "gpu", frozenset({POD.uid}), None, mems=frozenset({1}))
    pool = frozenset({0, 1})
    _plugin, conn = start(claim_lookup={"claim-g": gpu}.get, node_shared_pool=lambda: pool)
    env = ["NUMADRA_MEMS=1", "NUMADRA_CLAIM_UID=claim-g"]
    assert cpuset(conn.create_container(container("c-gpu", "train", env))) == ("0-1", "1")
    other = conn.create_container(container("c-other", "train", env, sandbox=EVIL.id), pod=EVIL)
    assert cpuset(other) == ("0-1", "")  # nothing to steal: handled as a container without a claim


def test_entry_without_recorded_pods_pins_no_pod_on_the_claim_uid_alone(
    start: Callable[..., tuple[NriPlugin, FakePluginConnection]],
) -> None:
    """An entry that records no pods (an older numadra's, or one rebuilt from files) binds nobody
    until its consumers are known: without a way to read them every marker of it is refused."""
    unknown = ClaimBinding("claim-a", "default", "cpus-a", None, PIN_A)
    plugin, conn = start(claim_lookup={"claim-a": unknown}.get)
    resp = conn.create_container_raw(container("c-app", "app", env_of(PIN_A)))
    assert resp.status.code == 9 and "whose consumers numadra has not learned" in resp.status.message
    assert "c-app" not in plugin.handlers.containers()


# -- in-place resize: UpdateContainer ----------------------------------------------------------


def test_resize_keeps_the_claims_cpuset_and_leaves_others_alone(
    start: Callable[..., tuple[NriPlugin, FakePluginConnection]],
) -> None:
    """The kubelet's UpdateContainerResources (pods/resize) is answered with the claim's cpuset."""
    _plugin, conn = start()
    app = container("c-app", "app", env_of(PIN_A))
    conn.create_container(app)
    resized = nri.LinuxResources(
        cpu=nri.LinuxCPU(
            cpus="0-7",
            mems="0",
            shares=nri.OptionalUInt64(value=2048),
            quota=nri.OptionalInt64(value=400000),
            period=nri.OptionalUInt64(value=100000),
        )
    )
    upd = conn.update_container(app, resized)
    assert [(u.container_id, u.linux.resources.cpu.cpus, u.linux.resources.cpu.mems) for u in upd.update] == [
        ("c-app", "2-3", "0")
    ]
    # a resize that leaves the cpuset alone (what a kubelet with cpuManagerPolicy none sends)
    quota_only = nri.LinuxResources(
        cpu=nri.LinuxCPU(quota=nri.OptionalInt64(value=200000), period=nri.OptionalUInt64(value=100000))
    )
    assert [u.linux.resources.cpu.cpus for u in conn.update_container(app, quota_only).update] == ["2-3"]

    web = container("c-web", "web", ["PATH=/usr/bin"])
    conn.create_container(web)
    assert not conn.update_container(web, resized).update  # not ours: never pinned by numadra
    evil = container("c-evil", "miner", env_of(PIN_A), sandbox=EVIL.id)
    assert not conn.update_container(evil, resized, pod=EVIL).update  # a forged marker pins nothing


def test_resize_of_a_pool_container_keeps_it_on_the_pool(
    start: Callable[..., tuple[NriPlugin, FakePluginConnection]],
) -> None:
    """With the shared pool, an update widening a claimless container is narrowed back to the pool."""
    pool = frozenset({0, 1, 6, 7})
    _plugin, conn = start(node_shared_pool=lambda: pool)
    web = container("c-web", "web")
    conn.create_container(web)
    upd = conn.update_container(web, nri.LinuxResources(cpu=nri.LinuxCPU(cpus="0-7")))
    assert [(u.container_id, u.linux.resources.cpu.cpus) for u in upd.update] == [("c-web", "0-1,6-7")]
    assert not conn.update_container(web, nri.LinuxResources(cpu=nri.LinuxCPU(cpus="0-1,6-7"))).update


# -- restart: Synchronize ----------------------------------------------------------------------


def test_restart_keeps_pins_and_does_not_adopt_forged_containers(
    start: Callable[..., tuple[NriPlugin, FakePluginConnection]],
) -> None:
    """After a numadra restart, Synchronize keeps every rightful pin and re-pins nothing wrongly.

    Running: claim-a's container (pinned), claim-b's (pinned), a claimless one on the pool, and a
    forged one that started while numadra was down and so runs on every CPU. Only the forged one
    gets an update: onto the pool, not onto claim-a's CPUs; it is not adopted as claim-a's.
    """
    pool = frozenset({0, 1, 6, 7})
    plugin, conn = start(node_shared_pool=lambda: pool)
    running = [
        container("c-app", "app", env_of(PIN_A), cpus="2-3", mems="0"),
        container("c-b", "app", env_of(PIN_B), cpus="4-5", mems="0", sandbox=POD_B.id),
        container("c-web", "web", cpus="0-1,6-7", sandbox=EVIL.id),
        container("c-evil", "miner", env_of(PIN_A), cpus="0-7", sandbox=EVIL.id),
    ]
    resp = conn.synchronize(running, pods=[POD, POD_B, EVIL])
    assert [
        (u.container_id, u.linux.resources.cpu.cpus, u.linux.resources.cpu.mems) for u in resp.update
    ] == [("c-evil", "0-1,6-7", "")]
    assert set(plugin.handlers.containers()) == {"c-app", "c-b"}
    assert plugin.handlers.pool_users() == 2  # c-web and c-evil run on the pool
    # the pins survive later events too: a resize of the rightful container keeps claim-a's CPUs
    upd = conn.update_container(running[0], nri.LinuxResources(cpu=nri.LinuxCPU(cpus="0-7")))
    assert [u.linux.resources.cpu.cpus for u in upd.update] == ["2-3"]


def test_restart_without_the_pool_leaves_forged_containers_unpinned(
    start: Callable[..., tuple[NriPlugin, FakePluginConnection]],
) -> None:
    """Without the pool nothing is updated for a forged container, and it is not tracked as pinned."""
    plugin, conn = start()
    running = [
        container("c-app", "app", env_of(PIN_A), cpus="0-7"),  # drifted: re-pinned to the claim
        container("c-evil", "miner", env_of(PIN_A), cpus="0-7", sandbox=EVIL.id),
    ]
    resp = conn.synchronize(running, pods=[POD, EVIL])
    assert [(u.container_id, u.linux.resources.cpu.cpus) for u in resp.update] == [("c-app", "2-3")]
    assert set(plugin.handlers.containers()) == {"c-app"}


# -- the empty-pool rule: planner and plugin together ------------------------------------------


def _pool_world(
    reserved: tuple[int, ...],
) -> tuple[
    CpuPlanner, dict[str, ClaimBinding], Callable[[str, int], ClaimPinning], Callable[[], frozenset[int]]
]:
    """A 4-CPU node: a planner watching the plugin's pool users, and claims recorded for POD."""
    inv = synthetic_inventory(nodes=1, cores_per_node=2)  # CPUs 0-3, cores (0,2) and (1,3)
    planner = CpuPlanner(lambda: inv, reserved, shared_pool=True)
    bindings: dict[str, ClaimBinding] = {}

    def prepare(uid: str, count: int) -> ClaimPinning:
        taken = frozenset().union(*(b.pinning.cpus for b in bindings.values() if b.pinning))
        pinning = planner.plan(uid, [CpuRequest("main", (0,), count)], taken)
        bindings[uid] = ClaimBinding(uid, "default", uid, frozenset({POD.uid}), pinning)
        return pinning

    def pool() -> frozenset[int]:
        return planner.node_shared_pool(
            frozenset().union(*(b.pinning.cpus for b in bindings.values() if b.pinning))
        )

    return planner, bindings, prepare, pool


def test_prepare_that_would_empty_the_pool_under_running_containers_fails(
    start: Callable[..., tuple[NriPlugin, FakePluginConnection]],
) -> None:
    """No reserved CPUs: the claim taking the pool's last CPUs fails while a claimless container runs."""
    planner, bindings, prepare, pool = _pool_world(())
    plugin, conn = start(claim_lookup=bindings.get, node_shared_pool=pool)
    planner.watch_pool(plugin.handlers.pool_users)
    with pytest.raises(ClaimError, match="while containers without a claim"):
        prepare("claim-all", 4)  # before Synchronize nobody knows what runs: refused
    web = container("c-web", "web", cpus="0-3", sandbox=EVIL.id)
    conn.synchronize([web], pods=[EVIL])
    first = prepare("claim-1", 2)
    created = conn.create_container(container("c-1", "app", env_of(first)))
    assert [(u.container_id, u.linux.resources.cpu.cpus) for u in created.update] == [("c-web", "1,3")]
    with pytest.raises(ClaimError) as err:
        prepare("claim-2", 2)
    assert "last CPUs of the node shared pool (1,3) while 1 container(s) without a claim" in err.value.reason
    assert "claim-2" not in bindings
    conn.remove_container(web, pod=EVIL)  # nothing runs on the pool any more
    prepare("claim-2", 2)
    refused = conn.create_container_raw(container("c-late", "web", sandbox=EVIL.id), pod=EVIL)
    assert refused.status.code == 9 and "node shared pool is empty" in refused.status.message


def test_reserved_cpus_stay_in_the_pool(start: Callable[..., tuple[NriPlugin, FakePluginConnection]]) -> None:
    """With --reserved-cpus 0 every other CPU can be claimed; claimless containers keep CPU 0."""
    planner, bindings, prepare, pool = _pool_world((0,))
    plugin, conn = start(claim_lookup=bindings.get, node_shared_pool=pool)
    planner.watch_pool(plugin.handlers.pool_users)
    web = container("c-web", "web", cpus="0-3", sandbox=EVIL.id)
    conn.synchronize([web], pods=[EVIL])
    claim = prepare("claim-1", 3)
    assert claim.cpus == frozenset({1, 2, 3})
    created = conn.create_container(container("c-1", "app", env_of(claim)))
    assert cpuset(created) == ("1-3", "0")
    assert [(u.container_id, u.linux.resources.cpu.cpus) for u in created.update] == [("c-web", "0")]
    assert cpuset(conn.create_container(container("c-2", "web", sandbox=EVIL.id), pod=EVIL)) == ("0", "")


def test_a_rolling_update_has_one_pinner_and_no_gap(
    start: Callable[..., tuple[NriPlugin, FakePluginConnection]], runtime: FakeNriRuntime
) -> None:
    """Two numadra processes on one runtime (maxSurge rollout). Both adjusting a container's
    cpuset made containerd refuse it ("both tried to set CPUSetCPUs"), so every claim pod created
    during the overlap failed. Now only the lock holder adjusts; the other answers empty; once the
    old one is gone the new one pins the very next container."""
    lock = runtime.socket_path.parent / "nri-pinner.lock"
    old, old_conn = start(leader_lock=lock)
    old_conn.synchronize([], pods=[POD])
    first = old_conn.create_container(container("c-1", "app", env_of(PIN_A)))
    assert cpuset(first) == ("2-3", "0") and old.is_pinner

    new, new_conn = start(leader_lock=lock, takeover_wait_s=0.05)
    assert new_conn.synchronize([], pods=[POD]) == nri.SynchronizeResponse()
    # containerd asks both plugins about each new container: exactly one adjusts it
    during = container("c-2", "app", env_of(PIN_A))
    answers = [old_conn.create_container(during), new_conn.create_container(during)]
    assert [cpuset(a) for a in answers] == [("2-3", "0"), ("", "")]
    assert not new.is_pinner and "c-2" in new.handlers.containers()  # bookkeeping kept
    # forged markers are refused by the follower too
    forged = new_conn.create_container_raw(container("c-evil", "x", env_of(PIN_A), sandbox=EVIL.id), pod=EVIL)
    assert forged.status.code == 9

    old.close()  # the old pod stops: lock released before the connection goes
    after = new_conn.create_container(container("c-3", "app", env_of(PIN_A)))
    assert cpuset(after) == ("2-3", "0") and new.is_pinner


def test_without_the_lock_both_processes_adjust(
    start: Callable[..., tuple[NriPlugin, FakePluginConnection]],
) -> None:
    """What containerd saw before: two plugins setting the same cpuset (it refuses the container)."""
    _, a = start()
    _, b = start()
    a.synchronize([], pods=[POD])
    b.synchronize([], pods=[POD])
    both = container("c-1", "app", env_of(PIN_A))
    assert [cpuset(c.create_container(both)) for c in (a, b)] == [("2-3", "0"), ("2-3", "0")]


def test_an_unreadable_record_refuses_the_marker_and_says_so(
    start: Callable[..., tuple[NriPlugin, FakePluginConnection]],
) -> None:
    """The claim lookup fails (the journal cannot be read): refused as lookup_failed, reported."""
    failures: list[PinFailure] = []

    def broken(uid: str) -> ClaimBinding | None:
        raise JournalError(f"journal /x/journal.log is corrupt (entry {uid!r})")

    _plugin, conn = start(claim_lookup=broken, on_failure=failures.append)
    resp = conn.create_container_raw(container("c-app", "app", env_of(PIN_A)))
    assert resp.status.code == 9 and "whose record cannot be read" in resp.status.message
    assert [(f.reason, f.action) for f in failures] == [("lookup_failed", "refused")]
