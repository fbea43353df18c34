"""Entries rebuilt after a journal loss bind to the claim's real consumers; phantoms are released.

Each test plays the accident on real files (the journal deleted while the claim's CDI spec and
metadata stay on disk) and then the attacker or the apiserver's answer. Before the fix a rebuilt
entry knew no pods and so bound by claim UID alone: a pod in another namespace that copied the
victim's marker env was pinned onto the victim's exclusive CPUs; and a CDI spec under a UID that
never existed was adopted and held its GPU forever.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from driver.claims.adopted import AdoptedClaims
from driver.claims.consumers import ApiConsumerReader
from driver.errors import ConsumersUnknownError
from driver.kube.client import KubeClient
from driver.kubelet.serialize import SerializeLock
from driver.pinning.consumers import ClaimConsumers
from driver.pinning.types import format_cpulist
from harness.fake_nri_runtime import container, pod
from harness.fake_tls_api import write_kubeconfig
from tests.integration.claims._world import GPU0, claim, cpu_result, result
from tests.integration.pinning._node import (
    PinningNode,
    claim_env,
    cpuset,
    journal_entry,
    reserved,
)
from tests.support.oneshot import OneShotServer

pytestmark = pytest.mark.fault

VICTIM = "5f2c8a9e-0d1b-4c3a-9e8f-0000000000a1"
OTHER = "5f2c8a9e-0d1b-4c3a-9e8f-0000000000a2"
POD_A = "0b6f3d52-aaaa-4c3a-9e8f-000000000001"
#: the victim's pod, and attackers: same UID in another namespace, another pod of the namespace
HOLDER = pod("sb-a", POD_A, name="train", namespace="ml")
ELSEWHERE = pod("sb-x", "0b6f3d52-eeee-4c3a-9e8f-00000000000e", name="miner", namespace="evil")
NEIGHBOUR = pod("sb-n", "0b6f3d52-nnnn-4c3a-9e8f-00000000000f", name="miner", namespace="ml")


class Clock:
    """A clock the test moves: the grace period passes without waiting for it."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _victim(node: PinningNode) -> None:
    """The victim's claim (GPU0 + 2 exclusive CPUs) prepared for POD_A, then the journal lost."""
    obj = claim(VICTIM, "train", "ml", results=[result("gpu", GPU0), cpu_result("cpu", 2)])
    obj["status"]["reservedFor"] = reserved(POD_A)
    ref = node.put_claim(obj)
    drv = node.world.driver()
    assert drv.prepare_claims([ref])[VICTIM].ok
    drv.close()
    (node.world.plugin_dir / "state" / "journal.log").unlink()
    node.start_driver()  # restarted: rebuilds the claim from its files
    rebuilt = journal_entry(node.world, VICTIM)
    assert rebuilt is not None and rebuilt.adopted and rebuilt.reserved_pods is None


def test_a_pod_of_another_namespace_copying_the_marker_is_refused(node: PinningNode) -> None:
    """Case 5, the attacker: before the fix the forger was pinned to the victim's CPUs."""
    _victim(node)
    _plugin, conn = node.start_plugin(consumers=False)  # no apiserver help needed to refuse this
    env = claim_env(node.world, VICTIM)
    forged = conn.create_container_raw(container("c-x", "miner", env, sandbox=ELSEWHERE.id), pod=ELSEWHERE)
    assert forged.status.code == 9, "the forger was pinned onto the rebuilt claim's CPUs"
    assert (
        "claim ml/train" in forged.status.message
        and "namespace ml, not for this pod" in forged.status.message
    )
    assert [(f.reason, f.action, f.pod_namespace) for f in node.failures] == [
        ("not_reserved", "refused", "evil")
    ]


def test_a_rebuilt_claim_binds_exactly_the_pods_of_its_reservation(node: PinningNode) -> None:
    """With the apiserver: the holder is pinned (and recorded), a neighbour copying the env is not.

    Without a reader nobody is pinned for the rebuilt claim: its consumers are unknown (fail closed).
    """
    _victim(node)
    _plugin, blind = node.start_plugin(consumers=False)
    env = claim_env(node.world, VICTIM)
    refused = blind.create_container_raw(container("c-0", "train", env, sandbox=HOLDER.id), pod=HOLDER)
    assert refused.status.code == 9 and "whose consumers numadra has not learned" in refused.status.message
    blind.close()

    _plugin, conn = node.start_plugin()
    forged = conn.create_container_raw(container("c-n", "miner", env, sandbox=NEIGHBOUR.id), pod=NEIGHBOUR)
    assert forged.status.code == 9 and f"reserved for pod uid {POD_A}" in forged.status.message
    own = conn.create_container(container("c-a", "train", env, sandbox=HOLDER.id), pod=HOLDER)
    entry = journal_entry(node.world, VICTIM)
    assert entry is not None and entry.pinning is not None
    assert cpuset(own) == (format_cpulist(entry.pinning.cpus), "0")
    assert node.records is not None and node.records.flush()
    recorded = journal_entry(node.world, VICTIM)
    assert recorded is not None and recorded.reserved_pods == (POD_A,) and recorded.adopted
    assert node.check is not None and node.check.reads == 1  # the neighbour's read listed POD_A too


def _sweeper(
    node: PinningNode, clock: Clock, grace_s: float = 300.0, kube: KubeClient | None = None
) -> AdoptedClaims:
    assert node.driver is not None and node.index is not None
    lock = SerializeLock(node.world.plugin_dir / "serialize.lock")
    lock.open()
    node.closers.append(lock.close)
    return AdoptedClaims(
        node.driver.inner,
        ApiConsumerReader(kube or node.kube(read_deadline=2.0)),
        hold=lock.hold,
        on_change=node.index.invalidate,
        grace_s=grace_s,
        clock=clock,
    )


def _phantom(node: PinningNode) -> None:
    """Files of a claim that never existed on this cluster: written by a prepare, then the
    journal lost, and the claim never on the apiserver (a restored backup, a planted spec)."""
    obj = claim(VICTIM, "ghost", "ml", results=[result("gpu", GPU0), cpu_result("cpu", 2)])
    ref = node.world.getter.add(obj)  # the kubelet layer's read only: the apiserver never had it
    drv = node.world.driver()
    assert drv.prepare_claims([ref])[VICTIM].ok
    drv.close()
    (node.world.plugin_dir / "state" / "journal.log").unlink()
    node.start_driver()


def _gpu_claim_prepares(node: PinningNode) -> bool:
    other = node.world.getter.add(claim(OTHER, "next", "ml", results=[result("gpu", GPU0)]))
    assert node.driver is not None
    return node.driver.prepare_claims([other])[OTHER].ok


def test_a_phantom_spec_is_released_once_confirmed_gone_for_the_grace_period(node: PinningNode) -> None:
    """Case 5, the accident: a 404 for the claim, the grace period, then files and GPU are free."""
    _phantom(node)
    clock = Clock()
    sweeper = _sweeper(node, clock)
    sweeper.check()
    assert journal_entry(node.world, VICTIM) is not None  # confirmed gone once: not yet
    assert not _gpu_claim_prepares(node)
    clock.now += 299
    sweeper.check()
    assert journal_entry(node.world, VICTIM) is not None
    clock.now += 2
    sweeper.check()
    assert journal_entry(node.world, VICTIM) is None
    assert not (node.world.cdi_dir / f"numadra.dev_claim_{VICTIM}.json").exists()
    assert not list((node.world.plugin_dir / "dra-device-metadata").glob(f"{VICTIM}_*"))
    assert sweeper.releases == {"not_found": 1, "replaced": 0}
    assert _gpu_claim_prepares(node)  # the GPU it held is free again


def test_a_name_now_holding_another_claim_releases_the_phantom(node: PinningNode) -> None:
    """Another UID under the recorded name is as final as a 404."""
    _phantom(node)
    node.api.put_object(claim("5f2c8a9e-0d1b-4c3a-9e8f-0000000000ff", "ghost", "ml"))
    clock = Clock()
    sweeper = _sweeper(node, clock, grace_s=10)
    sweeper.check()
    clock.now += 11
    sweeper.check()
    assert journal_entry(node.world, VICTIM) is None
    assert sweeper.releases["replaced"] == 1


def test_an_outage_never_releases_an_adopted_claim(node: PinningNode) -> None:
    """Unreachable apiserver, however long: nothing is decided, the claim stays held."""
    _phantom(node)
    node.api.stop()
    clock = Clock()
    sweeper = _sweeper(node, clock, grace_s=10)
    for _ in range(3):
        sweeper.check()
        clock.now += 100
    assert journal_entry(node.world, VICTIM) is not None
    assert sweeper.releases == {"not_found": 0, "replaced": 0}


def test_a_claim_that_exists_gets_its_pods_recorded_and_is_kept(node: PinningNode) -> None:
    """A rebuilt entry of a live claim: its reservation is recorded, nothing is released."""
    _victim(node)
    clock = Clock()
    sweeper = _sweeper(node, clock, grace_s=10)
    sweeper.check()
    clock.now += 100
    sweeper.check()
    entry = journal_entry(node.world, VICTIM)
    assert entry is not None and entry.reserved_pods == (POD_A,) and entry.adopted


def test_an_entry_without_a_name_is_held_and_never_read(node: PinningNode) -> None:
    """Rebuilt from the spec alone (the metadata file gone too): it cannot be checked, so kept."""
    _phantom(node)
    for meta in (node.world.plugin_dir / "dra-device-metadata").glob(f"{VICTIM}_*"):
        meta.unlink()
    (node.world.plugin_dir / "state" / "journal.log").unlink()
    node.start_driver()
    entry = journal_entry(node.world, VICTIM)
    assert entry is not None and entry.name == ""
    clock = Clock()
    sweeper = _sweeper(node, clock, grace_s=1)
    node.api.clear_requests()
    sweeper.check()
    clock.now += 10
    sweeper.check()
    assert journal_entry(node.world, VICTIM) is not None
    assert not [r for r in node.api.requests if "resourceclaims" in r.path]


def test_the_reader_tells_gone_from_unknown(node: PinningNode) -> None:
    """404 naming the claim: gone; another UID: gone; unreachable: ConsumersUnknownError; a
    PodGroup in reservedFor is one of its groups."""
    reader = ApiConsumerReader(node.kube())
    assert reader("ml", "nope", VICTIM).gone == "not_found"
    node.api.put_object(claim(OTHER, "taken", "ml"))
    assert reader("ml", "taken", VICTIM).gone == "replaced"
    obj = claim(VICTIM, "live", "ml")
    obj["status"]["reservedFor"] = [
        *reserved(POD_A),
        {"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "g", "uid": "g1"},
    ]
    node.api.put_object(obj)
    assert reader("ml", "live", VICTIM) == ClaimConsumers(pods=frozenset({POD_A}), groups=frozenset({"g"}))
    node.api.stop()
    with pytest.raises(ConsumersUnknownError, match="cannot read claim ml/live"):
        reader("ml", "live", VICTIM)


def _answer_404(content_type: str, body: bytes) -> bytes:
    head = f"HTTP/1.1 404 Not Found\r\nContent-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
    return head.encode() + b"Connection: close\r\n\r\n" + body


#: 404s that are not the apiserver's word about the claim, each quoting the text that once decided
NOT_THE_APISERVER = [
    pytest.param(
        _answer_404(
            "text/html",
            b'<html><body><h1>404</h1><p>resourceclaims "ghost" not found</p></body></html>',
        ),
        id="html-page",
    ),
    pytest.param(_answer_404("text/plain", b'resourceclaims.resource.k8s.io "ghost" not found'), id="text"),
    pytest.param(
        _answer_404(
            "application/json",
            b'{"kind":"Status","apiVersion":"v1","reason":"NotFound","code":404,'
            b'"message":"resourceclaims.resource.k8s.io \\"ghost\\" not found",'
            b'"details":{"name":"other","group":"resource.k8s.io","kind":"resourceclaims"}}',
        ),
        id="status-for-another-claim",
    ),
]


@pytest.mark.parametrize("wire", NOT_THE_APISERVER)
def test_a_404_that_is_not_the_apiservers_status_never_releases_a_claim(
    node: PinningNode, wire: bytes, tmp_path: Path
) -> None:
    """The attacker (a proxy, a gateway, a misrouted request) answers 404 with a page quoting
    ``resourceclaims "ghost" not found``: before the fix that text released the adopted claim
    and its GPU. Only a NotFound Status naming this claim may; this decides nothing, the claim
    stays held and is checked again."""
    _phantom(node)
    stand_in = OneShotServer(wire)
    path = write_kubeconfig(tmp_path / "stand-in", stand_in.url, cluster={}, user={"token": "t"})
    kube = KubeClient(path, timeout=2.0, connect_timeout=0.5, read_deadline=2.0)
    clock = Clock()
    sweeper = _sweeper(node, clock, grace_s=10, kube=kube)
    try:
        for _ in range(3):
            sweeper.check()
            clock.now += 100
    finally:
        kube.close()
        stand_in.close()
    assert len(stand_in.requests) >= 2  # asked, and asked again later
    assert journal_entry(node.world, VICTIM) is not None
    assert (node.world.cdi_dir / f"numadra.dev_claim_{VICTIM}.json").exists()
    assert sweeper.releases == {"not_found": 0, "replaced": 0}
    assert not _gpu_claim_prepares(node)  # the GPU stays with the held claim
