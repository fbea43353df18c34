"""KEP-5517 auxiliary CPUs in the slices: the cpu overhead on GPUs and NICs, and its validation."""

from __future__ import annotations

from typing import Any

import pytest

from driver.pinning.aux import AuxCpus
from driver.slices.builder import build_slices
from driver.slices.validation import validate_slices
from tests.unit.inventory.trees import inventory


def _devices(slices: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for s in slices for d in s["spec"]["devices"]}


def _by_type(slices: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [d for d in _devices(slices).values() if d["attributes"]["type"]["string"] == kind]


def test_gpus_and_nics_carry_a_per_pod_cpu_overhead() -> None:
    """Each GPU carries perPod = its count and each NIC its own; cpu devices keep their mapping."""
    slices = build_slices(
        inventory("dgx"), node_name="d", node_allocatable=True, aux_cpus=AuxCpus(gpu=2, nic=1)
    )
    gpus, nics = _by_type(slices, "gpu"), _by_type(slices, "nic")
    assert gpus and nics
    for gpu in gpus:
        assert gpu["nodeAllocatableResources"] == {"cpu": {"overhead": {"perPod": "2"}}}
    for nic in nics:
        assert nic["nodeAllocatableResources"] == {"cpu": {"overhead": {"perPod": "1"}}}
    cpu = _devices(slices)["cpu-numa0"]["nodeAllocatableResources"]["cpu"]
    assert cpu == {"mapping": {"capacityKey": "cpus", "capacityMultiplier": "1"}}
    assert validate_slices(slices) == []


@pytest.mark.parametrize(
    ("node_allocatable", "aux"),
    [
        pytest.param(False, AuxCpus(gpu=2, nic=1), id="without-node-allocatable"),
        pytest.param(True, AuxCpus(), id="no-aux"),
    ],
)
def test_no_overhead_unless_both_are_asked(node_allocatable: bool, aux: AuxCpus) -> None:
    """Without --node-allocatable (the gate may be off) or without counts, GPUs and NICs carry none."""
    slices = build_slices(inventory("dgx"), node_name="d", node_allocatable=node_allocatable, aux_cpus=aux)
    for device in _by_type(slices, "gpu") + _by_type(slices, "nic"):
        assert "nodeAllocatableResources" not in device


def test_a_kind_with_zero_carries_nothing() -> None:
    """gpu=3 alone: GPUs carry the overhead, NICs none."""
    slices = build_slices(inventory("dgx"), node_name="d", node_allocatable=True, aux_cpus=AuxCpus(gpu=3))
    assert all(
        g["nodeAllocatableResources"]["cpu"]["overhead"]["perPod"] == "3" for g in _by_type(slices, "gpu")
    )
    assert all("nodeAllocatableResources" not in n for n in _by_type(slices, "nic"))


def _with_entry(entry: dict[str, Any], resource: str = "cpu") -> list[str]:
    slices = build_slices(inventory("dgx"), node_name="d")
    gpu = _by_type(slices, "gpu")[0]
    gpu["nodeAllocatableResources"] = {resource: entry}
    return validate_slices(slices)


@pytest.mark.parametrize(
    ("entry", "resource", "says"),
    [
        pytest.param({}, "cpu", "neither mapping nor overhead", id="empty"),
        pytest.param({"overhead": {}}, "cpu", "neither perPod nor perContainer", id="empty-overhead"),
        pytest.param({"overhead": {"perPod": "-1"}}, "cpu", "not a non-negative quantity", id="negative"),
        pytest.param({"overhead": {"perContainer": "two"}}, "cpu", "not a non-negative quantity", id="junk"),
        pytest.param({"overhead": {"perPod": 2}}, "cpu", "not a non-negative quantity", id="a-number"),
        pytest.param(
            {"overhead": {"perPod": "1"}}, "nvidia.com/gpu", "not a node allocatable", id="extended"
        ),
    ],
)
def test_validation_refuses_what_the_apiserver_refuses(
    entry: dict[str, Any], resource: str, says: str
) -> None:
    """The apiserver's 1.37 checks of an overhead entry, each caught by the validator."""
    problems = _with_entry(entry, resource)
    assert len(problems) == 1
    assert says in problems[0]


@pytest.mark.parametrize(
    "entry",
    [
        pytest.param({"overhead": {"perPod": "0"}}, id="zero"),
        pytest.param({"overhead": {"perContainer": "500m"}}, id="per-container"),
        pytest.param({"overhead": {"perPod": "1", "perContainer": "1"}}, id="both"),
    ],
)
def test_validation_takes_what_the_apiserver_takes(entry: dict[str, Any]) -> None:
    """Non-negative perPod and/or perContainer are valid."""
    assert _with_entry(entry) == []
