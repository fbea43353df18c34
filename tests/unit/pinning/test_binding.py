"""The binding rule both backends apply: pod in reservedFor, the record's CPUs, no CPUs no theft."""

from __future__ import annotations

import pytest

from driver.errors import PinningError
from driver.pinning.binding import bind
from driver.pinning.types import ClaimBinding, ClaimPinning, CpuAssignment, CpuMode

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


def test_unrecorded_pods_bind_by_claim_uid() -> None:
    """An entry of an older numadra (pods None) binds any pod, with the record's CPUs."""
    legacy = ClaimBinding("u1", "ml", "cpus", None, CPUS.pinning)
    assert _bind(legacy, pod="pod-z", ns="") == MAIN
