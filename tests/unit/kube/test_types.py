"""Reading claim JSON: allocation results from well-formed, unallocated and malformed claims."""

from __future__ import annotations

from typing import Any

import pytest

from driver.explain.analyze import explain_claim
from driver.kube.types import allocation_results

RESULT = {"request": "gpu", "driver": "numadra.dev", "pool": "n1", "device": "gpu-0000-3b-00-0"}


@pytest.mark.parametrize(
    ("claim", "expected"),
    [
        pytest.param(
            {"status": {"allocation": {"devices": {"results": [RESULT]}}}}, [RESULT], id="allocated"
        ),
        pytest.param({}, [], id="no-status"),
        pytest.param({"status": {"allocation": None}}, [], id="null-allocation"),
        pytest.param({"status": {"allocation": {"devices": None}}}, [], id="null-devices"),
        pytest.param({"status": {"allocation": {"devices": {"results": "x"}}}}, [], id="results-not-a-list"),
        pytest.param(
            {"status": {"allocation": {"devices": {"results": [RESULT, "junk", None]}}}},
            [RESULT],
            id="junk-entries",
        ),
        pytest.param({"status": ["not", "an", "object"]}, [], id="status-not-an-object"),
    ],
)
def test_allocation_results(claim: dict[str, Any], expected: list[dict[str, Any]]) -> None:
    """Results are read when present; every missing, null or malformed level reads as none."""
    assert allocation_results(claim) == expected


def test_explain_reads_a_claim_with_null_allocation_devices() -> None:
    """explain does not crash on a claim file whose status.allocation.devices is null."""
    claim = {
        "metadata": {"name": "c", "namespace": "ns", "uid": "u1"},
        "spec": {"devices": {"requests": []}},
        "status": {"allocation": {"devices": None}},
    }
    assert explain_claim(claim, [], driver_name="numadra.dev").allocated == ()
