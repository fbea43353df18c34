"""The field -> feature gate table, the diff of sent vs stored slices, a 422 read back, and ``adapt``.

The apiserver's side is played by ``tests/support/gatedapi.py``: kube-apiserver 1.37.2's
``dropDisabledFields`` for ResourceSlices, written out by hand (not from the table under test),
one function per gate. The 422 text is the one kube-apiserver 1.37.2 answered for a
``numaNode`` list with ``DRAListTypeAttributes`` off.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from driver.slices.builder import build_slices
from driver.slices.features import (
    CONSUMABLE_CAPACITY,
    DEVICE_TAINTS,
    FEATURE_NAMES,
    FEATURES,
    LIST_TYPE_ATTRIBUTES,
    UNKNOWN,
    adapt,
    dropped_fields,
    feature_of,
    refused_fields,
)
from driver.slices.validation import validate_slices
from tests.support.gatedapi import DROPS, LIST_GATE, apiserver_keeps
from tests.unit.inventory.trees import inventory

Obj = dict[str, Any]
NODE = "dgx-1"
GPU = "gpu-0000-29-00-0"
REFUSED_LIST = (
    'create resourceslices/s: HTTP 422: ResourceSlice.resource.k8s.io "s" is invalid: '
    'spec.devices[0].attributes[resource.kubernetes.io/numaNode]: Invalid value: "": must specify '
    "one of: `int`, `bool`, `string`, `version`, `ints`, `bools`, `strings`, `versions`"
)


def _apiserver_keeps(obj: Obj, gate_off: str) -> Obj:
    """What kube-apiserver stores of ``obj`` with ``gate_off`` off: fields dropped, timeAdded set."""
    stored = apiserver_keeps(obj, {gate_off})
    for device in stored["spec"].get("devices") or []:
        for taint in device.get("taints") or []:
            taint.setdefault("timeAdded", "2026-12-03T10:00:00Z")
    stored["metadata"].update(uid="u-1", resourceVersion="7")
    return stored


def _rich_slice() -> Obj:
    """The dgx node's slice of cpu devices with every field numadra can publish, plus partitionable
    and binding fields numadra does not publish (another driver's slice could carry them)."""
    taints = {
        "cpu-numa1": [{"key": "numadra.dev/unhealthy", "value": "NumaNodeGone", "effect": "NoSchedule"}]
    }
    slices = build_slices(inventory("dgx"), node_name=NODE, taints=taints, node_allocatable=True)
    obj = next(s for s in slices if any(d["name"] == "cpu-numa0" for d in s["spec"]["devices"]))
    first = obj["spec"]["devices"][0]
    first.update(
        consumesCounters=[{"counterSet": "gpu-mem", "counters": {"memory": {"value": "1Gi"}}}],
        bindsToNode=True,
        bindingConditions=["Attached"],
        bindingFailureConditions=["Failed"],
    )
    obj["spec"]["sharedCounters"] = [{"name": "gpu-mem", "counters": {"memory": {"value": "80Gi"}}}]
    return obj


# -- the table -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("pattern", "gate"), [(p, f.name) for f in FEATURES for p in f.fields])
def test_every_field_of_the_table_names_its_gate(pattern: str, gate: str) -> None:
    assert feature_of(pattern) == gate


@pytest.mark.parametrize(
    ("pattern", "gate"),
    [
        pytest.param("devices[].capacity[].requestPolicy.validRange", CONSUMABLE_CAPACITY, id="inside"),
        pytest.param("devices[].taints[].effect", DEVICE_TAINTS, id="taint-field"),
        pytest.param(
            "devices[].consumesCounters[].compatibilityGroups", "DRADeviceCompatibilityGroups", id="longest"
        ),
        pytest.param("devices[].consumesCounters[].counters", "DRAPartitionableDevices", id="counters"),
        pytest.param("devices[].attributes[].int", UNKNOWN, id="scalar-attribute"),
        pytest.param("devices[].capacity[].value", UNKNOWN, id="capacity-value"),
        pytest.param("metadata", UNKNOWN, id="metadata"),
    ],
)
def test_a_path_is_named_by_the_longest_table_prefix(pattern: str, gate: str) -> None:
    assert feature_of(pattern) == gate


def test_the_metric_labels_are_the_gates_and_unknown() -> None:
    assert FEATURE_NAMES[-1] == UNKNOWN
    assert len(set(FEATURE_NAMES)) == len(FEATURE_NAMES) == len(FEATURES) + 1
    assert all(name.startswith("DRA") for name in FEATURE_NAMES[:-1])


# -- sent vs stored --------------------------------------------------------------------------------


@pytest.mark.parametrize("gate", sorted(set(DROPS) - {LIST_GATE}))
def test_each_gate_off_is_named_by_what_the_apiserver_dropped(gate: str) -> None:
    sent = _rich_slice()
    dropped = dropped_fields(sent, _apiserver_keeps(sent, gate))
    assert dropped, gate
    assert {d.feature for d in dropped} == {gate}, dropped


def test_consumable_capacity_off_names_both_fields_on_every_numa_device() -> None:
    sent = _rich_slice()
    dropped = dropped_fields(sent, _apiserver_keeps(sent, CONSUMABLE_CAPACITY))
    assert {d.pattern for d in dropped} == {
        "devices[].allowMultipleAllocations",
        "devices[].capacity[].requestPolicy",
    }
    assert "spec.devices[cpu-numa0].capacity[cpus].requestPolicy" in {d.path for d in dropped}
    assert "spec.devices[cpu-numa0].allowMultipleAllocations" in {d.path for d in dropped}


def test_what_the_apiserver_adds_is_no_loss() -> None:
    """timeAdded on taints, uid and resourceVersion: nothing was dropped."""
    sent = _rich_slice()
    stored = copy.deepcopy(sent)
    for device in stored["spec"]["devices"]:
        for taint in device.get("taints") or []:
            taint["timeAdded"] = "2026-12-03T10:00:00Z"
    stored["metadata"].update(uid="u", resourceVersion="1")
    assert dropped_fields(sent, stored) == ()


def test_a_changed_value_or_a_lost_device_is_unknown() -> None:
    sent = _rich_slice()
    stored = copy.deepcopy(sent)
    index = {d["name"]: k for k, d in enumerate(sent["spec"]["devices"])}
    stored["spec"]["devices"][index["cpu-numa0"]]["capacity"]["memory"]["value"] = "1"
    del stored["spec"]["devices"][index["cpu-numa1"]]
    dropped = dropped_fields(sent, stored)
    assert [(d.path, d.feature) for d in dropped] == [
        ("spec.devices[cpu-numa0].capacity[memory].value", UNKNOWN),
        ("spec.devices[cpu-numa1]", UNKNOWN),
    ]


# -- a 422 read back ---------------------------------------------------------------------------------


def _list_slice() -> Obj:
    return build_slices(inventory("dgx"), node_name=NODE, numa_node_list=True)[0]


def test_the_apiservers_422_for_a_list_attribute_names_the_list_gate() -> None:
    sent = _list_slice()
    first = sent["spec"]["devices"][0]["name"]
    (field,) = refused_fields(sent, REFUSED_LIST)
    assert field.feature == LIST_TYPE_ATTRIBUTES
    assert field.path == f"spec.devices[{first}].attributes[resource.kubernetes.io/numaNode].ints"


@pytest.mark.parametrize(
    "message",
    [
        pytest.param("spec.devices: Too many: 129: must have at most 128 items", id="other-422"),
        pytest.param(REFUSED_LIST.replace("devices[0]", "devices[999]"), id="no-such-device"),
    ],
)
def test_a_422_no_gate_explains_names_none(message: str) -> None:
    assert refused_fields(_list_slice(), message) == ()


def test_an_empty_scalar_attribute_is_not_blamed_on_the_list_gate() -> None:
    """The int form was sent: whatever emptied it, DRAListTypeAttributes did not."""
    assert refused_fields(_rich_slice(), REFUSED_LIST) == ()


# -- adapt --------------------------------------------------------------------------------------------


def test_adapt_without_missing_gates_sends_the_slices_as_built() -> None:
    slices = build_slices(inventory("dgx"), node_name=NODE)
    assert adapt(slices, frozenset()) == slices


def test_adapt_sends_what_the_apiserver_keeps_without_consumable_capacity() -> None:
    """Then the apiserver keeps the write in full: no field is lost again and again."""
    sent = _rich_slice()
    before = copy.deepcopy(sent)
    (adapted,) = adapt([sent], {CONSUMABLE_CAPACITY})
    assert sent == before  # the input is not changed
    assert dropped_fields(adapted, _apiserver_keeps(adapted, CONSUMABLE_CAPACITY)) == ()
    cpu = next(d for d in adapted["spec"]["devices"] if d["name"] == "cpu-numa0")
    assert "allowMultipleAllocations" not in cpu
    assert cpu["capacity"]["cpus"] == {"value": cpu["capacity"]["cpus"]["value"]}
    assert validate_slices(adapt(build_slices(inventory("dgx"), node_name=NODE), {CONSUMABLE_CAPACITY})) == []


def test_adapt_withholds_a_device_that_needs_its_taint_without_device_taints() -> None:
    """NoSchedule and NoExecute devices are left out; a None taint (information) is only dropped."""
    taints = {
        GPU: [{"key": "numadra.dev/unhealthy", "value": "PciAerFatal", "effect": "NoSchedule"}],
        "cpu-numa0": [{"key": "numadra.dev/unhealthy", "value": "X", "effect": "NoExecute"}],
        "cpu-numa1": [{"key": "numadra.dev/note", "value": "degraded", "effect": "None"}],
    }
    slices = build_slices(inventory("dgx"), node_name=NODE, taints=taints)
    adapted = adapt(slices, {DEVICE_TAINTS})
    names = {d["name"] for s in adapted for d in s["spec"]["devices"]}
    built = {d["name"] for s in slices for d in s["spec"]["devices"]}
    assert built - names == {GPU, "cpu-numa0"}
    assert "cpu-numa1" in names
    assert not any("taints" in d for s in adapted for d in s["spec"]["devices"])
    assert [s["spec"]["pool"] for s in adapted] == [s["spec"]["pool"] for s in slices]
    assert validate_slices(adapted) == []


def test_adapt_leaves_list_attributes_alone() -> None:
    """Without the list gate the slice is refused whatever is sent: that is the operator's to fix."""
    slices = [_list_slice()]
    assert adapt(slices, {LIST_TYPE_ATTRIBUTES}) == slices
