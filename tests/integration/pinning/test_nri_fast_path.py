"""Fast calls never wait behind slow ones: the NRI plugin under a flood of reads.

A container whose pod is not among its claim's recorded consumers costs a read of the claim on
the apiserver; a container of a recorded consumer (or one without a claim) costs none. Before
the fix both ran on the same eight handler threads, so 64 containers of one tenant naming claims
they do not hold, with the apiserver answering claim GETs after 0.4 s, left the claim owner's
containers queued until the NRI time box (1 s) ran out: they were refused ("its pinning was not
decided within the NRI time box"), as was another tenant's pod that needed a read of its own.

Real pieces: the plugin over a real unix socket driven by the fake runtime (real NRI ttrpc), the
real apiserver client and consumer check against the fake apiserver over HTTP, which serves the
claims slowly (a latency, not an error). Proof by outcome and counts, not by timing: every
owner container carries its claim's CPUs, the slow tenant's reads in flight never passed its
bound, and its refusals name that bound.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from driver._proto.nri import api_pb2 as nri
from driver._proto.nri import ttrpc_pb2 as ttrpc
from driver.claims.consumers import ApiConsumerReader
from driver.kube.client import KubeClient
from driver.pinning.consumers import READ_DEADLINE_S, ClaimConsumers, ConsumerCheck, ConsumerReader
from driver.pinning.failures import PinFailure
from driver.pinning.nri import NriPlugin
from driver.pinning.nri.readslots import READS_PER_NAMESPACE
from driver.pinning.types import ClaimBinding, ClaimPinning, CpuAssignment, CpuMode
from harness.fake_nri_runtime import FakeNriRuntime, FakePluginConnection, connect_plugin, container, pod
from harness.fakeapiserver import FakeApiServer
from harness.poll import wait_for

#: the flooding tenant: FLOOD pods, each naming one of its namespace's claims that it does not hold
FLOOD = 64
TENANT_A = "tenant-a"
A_CLAIMS = 32
OWNER = pod("sb-owner", "0b6f3d52-0000-4c3a-9e8f-0000000000f0", name="owner", namespace="ml")
OWNED = "6a7b8c9d-0d1b-4c3a-9e8f-0000000000f1"
#: tenant B: a claim shared by two pods, prepared for the first; the second needs a read
TENANT_B = "team-b"
SHARED_B = "6a7b8c9d-0d1b-4c3a-9e8f-0000000000b1"
B_FIRST = pod("sb-b1", "0b6f3d52-0000-4c3a-9e8f-0000000000b1", name="b1", namespace=TENANT_B)
B_LATER = pod("sb-b2", "0b6f3d52-0000-4c3a-9e8f-0000000000b2", name="b2", namespace=TENANT_B)


def _pinning(uid: str, cpus: set[int]) -> ClaimPinning:
    return ClaimPinning(uid, (CpuAssignment("main", CpuMode.EXCLUSIVE, frozenset(cpus), frozenset({0})),))


def _a_claim(i: int) -> str:
    return f"6a7b8c9d-0d1b-4c3a-9e8f-0000000a{i:04x}"


def _a_holder(i: int) -> str:
    return f"0b6f3d52-0000-4c3a-9e8f-0000000a{i:04x}"


def _a_pod(i: int) -> nri.PodSandbox:
    return pod(f"sb-a{i}", f"0b6f3d52-1111-4c3a-9e8f-{i:012x}", name=f"a{i}", namespace=TENANT_A)


#: what the journal would record: the owner's claim, tenant A's claims (each held by one pod that
#: is not in the flood), tenant B's shared claim as prepared for its first pod only
BINDINGS: dict[str, ClaimBinding] = {
    OWNED: ClaimBinding(OWNED, "ml", "owned", frozenset({OWNER.uid}), _pinning(OWNED, {2, 3})),
    SHARED_B: ClaimBinding(
        SHARED_B, TENANT_B, "shared", frozenset({B_FIRST.uid}), _pinning(SHARED_B, {4, 5})
    ),
    **{
        _a_claim(i): ClaimBinding(
            _a_claim(i), TENANT_A, f"a-{i}", frozenset({_a_holder(i)}), _pinning(_a_claim(i), {6 + i})
        )
        for i in range(A_CLAIMS)
    },
}


def _env(binding: ClaimBinding) -> list[str]:
    assert binding.pinning is not None
    a = binding.pinning.assignments[0]
    cpus = ",".join(str(c) for c in sorted(a.cpus))
    return [
        "PATH=/bin",
        f"NUMADRA_CPUS={cpus}",
        "NUMADRA_MEMS=0",
        "NUMADRA_CPU_MODE=exclusive",
        f"NUMADRA_CLAIM_UID={binding.claim_uid}",
        "NUMADRA_REQUEST=main",
    ]


def _claim_object(binding: ClaimBinding, *pod_uids: str) -> dict[str, Any]:
    """The claim as the apiserver serves it: its UID and ``status.reservedFor``."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": binding.name, "namespace": binding.namespace, "uid": binding.claim_uid},
        "spec": {},
        "status": {
            "reservedFor": [{"resource": "pods", "name": f"pod-{u}", "uid": u} for u in pod_uids],
        },
    }


class PeakReads:
    """The real apiserver reader, with the most reads it had in flight at once, per namespace."""

    def __init__(self, reader: ConsumerReader) -> None:
        self._reader = reader
        self._lock = threading.Lock()
        self._now: Counter[str] = Counter()
        self.peak: Counter[str] = Counter()

    def __call__(self, namespace: str, name: str, claim_uid: str, /) -> ClaimConsumers:
        with self._lock:
            self._now[namespace] += 1
            self.peak[namespace] = max(self.peak[namespace], self._now[namespace])
        try:
            return self._reader(namespace, name, claim_uid)
        finally:
            with self._lock:
                self._now[namespace] -= 1


class Node:
    """The plugin, its consumer check and failure reports, over the fake runtime and apiserver."""

    def __init__(self, api: FakeApiServer, runtime: FakeNriRuntime) -> None:
        self.api = api
        for binding in BINDINGS.values():
            pods = sorted(binding.pods or ())
            if binding.claim_uid == SHARED_B:
                pods.append(B_LATER.uid)  # reserved for the second pod after the prepare
            api.put_object(_claim_object(binding, *pods))
        self.client = KubeClient(
            api.kubeconfig_path, timeout=2.0, connect_timeout=0.5, read_deadline=READ_DEADLINE_S
        )
        self.client.configure()
        self.reads = PeakReads(ApiConsumerReader(self.client))
        self.check = ConsumerCheck(self.reads)
        self.failures: list[PinFailure] = []
        self.plugin = NriPlugin(
            claim_lookup=BINDINGS.get,
            consumers=self.check,
            on_failure=self.failures.append,
            socket_path=runtime.socket_path,
        )
        self.conn: FakePluginConnection = connect_plugin(runtime, self.plugin.connect)
        self.conn.configure()
        self.callers = ThreadPoolExecutor(max_workers=FLOOD + 8, thread_name_prefix="test-runtime")

    def create(self, ctr: nri.Container, sandbox: nri.PodSandbox) -> Future[ttrpc.Response]:
        """Send one CreateContainer now; the answer comes in the future (as containerd waits)."""
        return self.callers.submit(self.conn.create_container_raw, ctr, sandbox)

    def flood(self) -> list[Future[ttrpc.Response]]:
        """Tenant A: FLOOD containers naming claims of their namespace that their pods do not hold."""
        sent = []
        for i in range(FLOOD):
            claim = BINDINGS[_a_claim(i % A_CLAIMS)]
            sent.append(self.create(container(f"c-a{i}", "app", _env(claim), sandbox=f"sb-a{i}"), _a_pod(i)))
        return sent

    def reasons(self, namespace: str) -> Counter[str]:
        """The reported reasons of the refusals of one namespace's containers."""
        return Counter(f.reason for f in self.failures if f.pod_namespace == namespace)

    def tenant_a_reads(self) -> int:
        return sum(1 for r in self.api.requests if r.method == "GET" and f"/namespaces/{TENANT_A}/" in r.path)

    def close(self) -> None:
        self.callers.shutdown(wait=True, cancel_futures=True)
        self.conn.close()
        self.plugin.close()
        self.client.close()


@pytest.fixture
def api() -> Iterator[FakeApiServer]:
    server = FakeApiServer()
    server.start()
    yield server
    server.close()


@pytest.fixture
def runtime() -> Iterator[FakeNriRuntime]:
    d = Path(tempfile.mkdtemp(prefix="nri-", dir="/tmp"))
    rt = FakeNriRuntime(d / "nri.sock")
    yield rt
    rt.close()
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def node(api: FakeApiServer, runtime: FakeNriRuntime) -> Iterator[Node]:
    n = Node(api, runtime)
    yield n
    n.close()


def _pinned(resp: ttrpc.Response) -> tuple[str, str]:
    assert resp.status.code == 0, f"refused: {resp.status.message}"
    cpu = nri.CreateContainerResponse.FromString(resp.payload).adjust.linux.resources.cpu
    return cpu.cpus, cpu.mems


@pytest.mark.parametrize("latency_s", [0.4, 3.0], ids=["gets-0.4s", "gets-3s"])
def test_a_claim_owner_is_pinned_while_another_tenant_floods_the_reads(node: Node, latency_s: float) -> None:
    """64 containers of tenant A need a read each, the apiserver is slow: the 4 containers of the
    owner's pod need none, and all 4 get their claim's CPUs, none is refused."""
    node.api.add_latency(latency_s, path_contains=f"/namespaces/{TENANT_A}/resourceclaims/")
    flood = node.flood()
    wait_for(lambda: node.tenant_a_reads() >= 4, 5.0, "tenant A's reads to reach the apiserver")
    owned = BINDINGS[OWNED]
    owners = [
        node.create(container(f"c-owner{i}", f"ctr{i}", _env(owned), sandbox=OWNER.id), OWNER)
        for i in range(4)
    ]
    got = [_pinned(f.result(10)) for f in owners]
    assert got == [("2-3", "0")] * 4
    answers = [f.result(10) for f in flood]
    assert all(a.status.code == 9 for a in answers), "no pod of tenant A holds the claim it names"
    assert not node.reasons("ml"), "the owner's containers were refused"
    # every container of tenant A was refused and reported, none pinned: those beyond the
    # namespace's bound at once, without a read; tenant A never had more reads in flight
    reasons = node.reasons(TENANT_A)
    assert sum(reasons.values()) == FLOOD
    assert set(reasons) <= {"reads_busy", "not_reserved", "consumers_unknown"}, reasons
    assert reasons["reads_busy"] > 0
    assert 0 < node.reads.peak[TENANT_A] <= READS_PER_NAMESPACE


def test_another_tenants_read_is_done_while_one_tenant_floods(node: Node) -> None:
    """Tenant A floods slow reads; tenant B's later pod of a shared claim needs a read too: it gets
    its read (not queued behind A's), is pinned to the claim's CPUs, and learned as a consumer."""
    node.api.add_latency(0.4, path_contains=f"/namespaces/{TENANT_A}/resourceclaims/")
    flood = node.flood()
    wait_for(lambda: node.tenant_a_reads() >= 4, 5.0, "tenant A's reads to reach the apiserver")
    later = node.create(container("c-b2", "app", _env(BINDINGS[SHARED_B]), sandbox=B_LATER.id), B_LATER)
    assert _pinned(later.result(10)) == ("4-5", "0")
    assert B_LATER.uid in node.check.learned(SHARED_B)
    for f in flood:
        f.result(10)
    assert not node.reasons(TENANT_B)
    # tenant A was held at its bound (refused beyond it), and B's read ran all the same
    assert node.reasons(TENANT_A)["reads_busy"] > 0
    assert node.reads.peak[TENANT_B] == 1
