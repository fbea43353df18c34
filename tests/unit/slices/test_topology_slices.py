"""Slices of the NUMA shapes: memory devices, socket on every device, numaNode as int or KEP list."""

from __future__ import annotations

import json
from typing import Any

import pytest

from driver.claims.attributes import PublishedAttributes
from driver.slices.builder import build_slices
from driver.slices.validation import validate_slices
from tests.unit.inventory.trees import inventory

NUMA = "resource.kubernetes.io/numaNode"
TOPOLOGIES = ["grace_hopper", "snc2", "cxl", "dgx", "hostile", "huge"]


def _devices(name: str, **kwargs: Any) -> dict[str, dict[str, Any]]:
    slices = build_slices(inventory(name), node_name="node-a", **kwargs)
    assert validate_slices(slices) == []
    return {d["name"]: d for s in slices for d in s["spec"]["devices"]}


def _values(device: dict[str, Any]) -> dict[str, Any]:
    return {k: next(iter(v.values())) for k, v in device["attributes"].items()}


@pytest.mark.parametrize("name", TOPOLOGIES)
@pytest.mark.parametrize("numa_node_list", [False, True], ids=["int", "list"])
def test_slices_are_valid_and_the_metadata_agrees(name: str, numa_node_list: bool) -> None:
    """Valid for the API in both forms; the metadata's attributes are the slices' byte for byte."""
    published = {
        n: json.dumps(d["attributes"])
        for n, d in _devices(name, numa_node_list=numa_node_list, node_allocatable=True).items()
    }
    metadata = PublishedAttributes(numa_node_list=numa_node_list).get(inventory(name))
    assert {n: json.dumps(a) for n, a in metadata.items()} == published


def test_grace_hopper_memory_device() -> None:
    """The HBM node is a shareable memory device paired with its GPU by gpuMemoryNode; no cpus."""
    devices = _devices("grace_hopper", node_allocatable=True)
    hbm = devices["memory-numa1"]
    assert _values(hbm) == {"type": "memory", "memoryKind": "gpu", "socket": 0, "gpuMemoryNode": 1, NUMA: 1}
    assert hbm["allowMultipleAllocations"] is True
    assert hbm["capacity"]["memory"] == {
        "value": "96Gi",
        "requestPolicy": {"default": "0", "validRange": {"min": "0", "step": "1Mi"}},
    }
    assert set(hbm["capacity"]) == {"memory", "hugepages2Mi", "hugepages1Gi"}
    assert hbm["nodeAllocatableResources"] == {
        "memory": {"mapping": {"capacityKey": "memory", "capacityMultiplier": "1"}},
        "hugepages-2Mi": {"mapping": {"capacityKey": "hugepages2Mi", "capacityMultiplier": "1"}},
        "hugepages-1Gi": {"mapping": {"capacityKey": "hugepages1Gi", "capacityMultiplier": "1"}},
    }
    gpu = _values(devices["gpu-0009-01-00-0"])
    assert (gpu["gpuMemoryNode"], gpu[NUMA], gpu["socket"]) == (1, 0, 0)
    assert sorted(devices) == ["cpu-numa0", "gpu-0009-01-00-0", "memory-numa1", "nic-0000-01-00-0"]


def test_a_node_without_cpus_is_never_a_cpu_device() -> None:
    """A cpu request (allocationMode All included) can never be handed a node without CPUs."""
    for name in TOPOLOGIES:
        devices = _devices(name)
        for node in inventory(name).numa_nodes:
            attrs = _values(devices[node.name])
            assert (attrs["type"] == "cpu") == bool(node.cpus), (name, node.name)
            assert ("cpus" in devices[node.name]["capacity"]) == bool(node.cpus), (name, node.name)


def test_snc2_int_form_splits_a_socket_the_list_form_and_socket_join_it() -> None:
    """GPU on node 0, NIC on node 1: ints differ, lists intersect, sockets are equal."""
    plain = _devices("snc2")
    gpu, nic = _values(plain["gpu-0000-18-00-0"]), _values(plain["nic-0000-38-00-0"])
    assert (gpu[NUMA], nic[NUMA]) == (0, 1)
    assert gpu["socket"] == nic["socket"] == 0
    listed = _devices("snc2", numa_node_list=True)
    assert listed["gpu-0000-18-00-0"]["attributes"][NUMA] == {"ints": [0, 1]}
    assert listed["nic-0000-38-00-0"]["attributes"][NUMA] == {"ints": [1, 0]}
    assert listed["nic-0000-b8-00-0"]["attributes"][NUMA] == {"ints": [3, 2]}  # the other socket's NIC
    assert listed["cpu-numa2"]["attributes"][NUMA] == {"ints": [2, 3]}


def test_cxl_memory_device() -> None:
    """The expander is memory of kind cxl on socket 0; as a list it meets node 0's devices."""
    devices = _devices("cxl", numa_node_list=True)
    assert _values(devices["memory-numa2"]) == {
        "type": "memory",
        "memoryKind": "cxl",
        "socket": 0,
        NUMA: [2, 0],
    }
    assert _values(devices["nic-0000-17-00-0"])[NUMA] == [0, 2]
    assert _values(devices["cpu-numa1"])[NUMA] == [1]


def test_list_form_limits_a_slice_to_64_devices() -> None:
    """List attributes count as an advanced feature: the huge pool (332 devices) goes 64 per slice."""
    slices = build_slices(inventory("huge"), node_name="h", numa_node_list=True)
    assert validate_slices(slices) == []
    assert [len(s["spec"]["devices"]) for s in slices] == [64] * 5 + [12]
    assert [s["spec"]["pool"]["resourceSliceCount"] for s in slices] == [6] * 6


def test_unknown_numa_node_is_omitted_in_both_forms() -> None:
    """numa_node -1: no numaNode attribute, as an int or as a list, and no socket."""
    for numa_node_list in (False, True):
        attrs = _devices("cloud_vm", numa_node_list=numa_node_list)["gpu-0000-00-04-0"]["attributes"]
        assert NUMA not in attrs and "socket" not in attrs


@pytest.mark.parametrize("name", ["grace_hopper", "snc2", "cxl"])
def test_list_form_round_trips_through_the_client_models(name: str) -> None:
    """The 1.37 client's V1DeviceAttribute takes the list as ``ints`` and gives back the same object."""
    from kubernetes.client import ApiClient, V1ResourceSlice

    client = ApiClient()
    for s in build_slices(inventory(name), node_name="rt-node", numa_node_list=True, node_allocatable=True):
        model = client.deserialize(json.dumps(s), "V1ResourceSlice", "application/json")
        assert isinstance(model, V1ResourceSlice)
        assert client.sanitize_for_serialization(model) == s  # type: ignore[no-untyped-call]
        for device in model.spec.devices or ():
            attr = (device.attributes or {}).get(NUMA)
            assert attr is None or (attr.int is None and attr.ints and attr.ints[0] >= 0)
