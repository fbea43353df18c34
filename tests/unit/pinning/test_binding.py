"""The binding rule both backends apply: pod in reservedFor, the record's CPUs, no CPUs no theft."""

from __future__ import annotations

import pytest

from driver.errors import PinningError, PinRefusedError
from driver.pinning.binding import bind, claim_binding
from driver.pinning.types import ClaimBinding, ClaimPinning, CpuAssignment, CpuMode, PreparedClaimView
from harness.synthetic import synthetic_inventory

MAIN = CpuAssignment("main", CpuMode.EXCLUSIVE, frozenset({2, 3}), frozenset({0}))
POOL = CpuAssignment("sidecar", CpuMode.SHARED, frozenset({4}), frozenset({0}))
CPUS = ClaimBinding("u1", "ml", "cpus", frozenset({"pod-a"}), ClaimPinning("u1", (MAIN, POOL)))
GPU = ClaimBinding("u2", "ml", "gpu", frozenset({"pod-a"}), None, mems=frozenset({1}))


def _bind(
    binding: ClaimBinding, request: str = "main", pod: str = "pod-a", ns: str = "ml"
) -> CpuAssignment | None:
    return bind(binding, request=request, pod_uid=pod, pod_namespace=ns, who="container x")


def test_the_holder_gets_the_records_assignment_per_request() -> None:
    """Each request of the claim maps to its own assignment from the record."""
    assert _bind(CPUS) == MAIN
    assert _bind(CPUS, "sidecar") == POOL


@pytest.mark.parametrize(
    ("pod", "ns", "message"),
    [
        pytest.param("pod-b", "ml", "reserved for pod uid pod-a, not for this pod", id="other-pod"),
        pytest.param("pod-a", "other", "not for this pod", id="other-namespace"),
        pytest.param("", "", "not for this pod", id="pod-unknown"),
    ],
)
def test_other_pods_are_refused_naming_the_claim(pod: str, ns: str, message: str) -> None:
    """A pod the claim is not reserved for gets an error naming claim and reservation."""
    with pytest.raises(PinningError, match=message) as err:
        _bind(CPUS, pod=pod, ns=ns)
    assert "claim ml/cpus (uid u1)" in str(err.value)


def test_reserved_for_no_pod_refuses_everyone() -> None:
    """A claim recorded with no pod binds nobody."""
    nobody = ClaimBinding("u1", "ml", "cpus", frozenset(), CPUS.pinning)
    with pytest.raises(PinningError, match="reserved for no pod"):
        _bind(nobody)


def test_unknown_request_is_refused() -> None:
    """A request the claim has no CPUs for is refused, naming what the claim has."""
    with pytest.raises(PinningError, match=r"no CPU assignment for request 'other'.*main, sidecar"):
        _bind(CPUS, "other")


def test_claim_without_cpus_gives_its_pod_the_nodes_and_others_nothing() -> None:
    """Memory nodes only: the holder gets them; another pod is handled as without a claim."""
    got = _bind(GPU, "")
    assert got is not None and (got.cpus, got.mems) == (frozenset(), frozenset({1}))
    assert _bind(GPU, "", pod="pod-b") is None


@pytest.mark.parametrize(
    ("pod", "ns"),
    [
        pytest.param("pod-z", "ml", id="same-namespace"),
        pytest.param("pod-z", "", id="namespace-unknown"),
        pytest.param("pod-a", "ml", id="even-a-pod-that-held-it"),
    ],
)
def test_unknown_consumers_bind_no_pod(pod: str, ns: str) -> None:
    """Consumers not known (a rebuilt entry, or one journaled before pods were recorded): no pod
    binds on the claim UID alone; the refusal says the consumers must be learned first."""
    unknown = ClaimBinding("u1", "ml", "cpus", None, CPUS.pinning)
    with pytest.raises(PinRefusedError, match="whose consumers numadra has not learned") as err:
        _bind(unknown, pod=pod, ns=ns)
    assert err.value.reason == "consumers_unknown"


def test_unknown_consumers_never_cover_another_namespace() -> None:
    """A pod of another namespace is refused as not reserved, whatever is known of the consumers."""
    unknown = ClaimBinding("u1", "ml", "cpus", None, CPUS.pinning)
    with pytest.raises(PinRefusedError, match="which is a claim of namespace ml, not for this pod") as err:
        _bind(unknown, pod="pod-z", ns="evil")
    assert err.value.reason == "not_reserved"


def test_refusals_carry_their_reason() -> None:
    """Each refusal names a reason of the fixed set the metric uses."""
    with pytest.raises(PinRefusedError) as other:
        _bind(CPUS, pod="pod-b")
    with pytest.raises(PinRefusedError) as request:
        _bind(CPUS, "other")
    assert (other.value.reason, request.value.reason) == ("not_reserved", "bad_marker")


def test_gpu_claim_with_unknown_consumers_gives_nothing_and_refuses_nothing() -> None:
    """Memory nodes only: a pod that cannot be checked runs as a container without a claim."""
    unknown = ClaimBinding("u2", "ml", "gpu", None, None, mems=frozenset({1}))
    assert _bind(unknown, "", pod="pod-z") is None


def test_binding_from_the_state_read_model() -> None:
    """claim_binding reads a PreparedClaimView: pods as recorded, mems from the devices' nodes."""
    inv = synthetic_inventory(nodes=2, cores_per_node=2)
    gpu_view = PreparedClaimView("u2", "ml", "gpu", frozenset({"pod-a"}), None, ("cpu-numa1",))
    got = claim_binding(gpu_view, inv)
    assert (got.pods, got.pinning, got.mems) == (frozenset({"pod-a"}), None, frozenset({1}))
    cpu_view = PreparedClaimView("u1", "ml", "cpus", None, CPUS.pinning, ("cpu-numa0",), adopted=True)
    got = claim_binding(cpu_view, inv)
    assert (got.pods, got.pinning, got.mems) == (None, CPUS.pinning, frozenset())
