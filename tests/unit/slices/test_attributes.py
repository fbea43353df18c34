"""device_attributes is the one source of a device's attributes: slices and metadata agree."""

from __future__ import annotations

import json

import pytest

from driver.claims.attributes import PublishedAttributes
from driver.slices.attributes import device_attributes, inventory_attributes
from driver.slices.builder import build_slices
from tests.unit.inventory.trees import inventory

FIXTURES = ["dgx", "workstation", "cloud_vm", "huge", "hostile", "mixed"]


@pytest.mark.parametrize("name", FIXTURES)
def test_metadata_attributes_are_the_published_ones_byte_for_byte(name: str) -> None:
    """Every published device's attributes encode to the same JSON text as the metadata's map."""
    inv = inventory(name)
    published = {
        d["name"]: json.dumps(d["attributes"])
        for s in build_slices(inv, node_name="node-a", taints={}, node_allocatable=True)
        for d in s["spec"]["devices"]
    }
    for_metadata = {n: json.dumps(a) for n, a in PublishedAttributes().get(inv).items()}
    assert published and for_metadata == published


def test_one_device_needs_no_slice() -> None:
    """One device's attributes come from the device (and its NUMA node's CPUs), not from slices."""
    inv = inventory("dgx")
    gpu, nic, node = inv.gpus[0], inv.nics[0], inv.numa_nodes[0]
    assert device_attributes(gpu, inv)["type"] == {"string": "gpu"}
    assert device_attributes(nic, inv)["interfaceName"] == {"string": nic.interface_name}
    assert device_attributes(node, inv)["cpuCount"] == {"int": len(node.cpus)}
    assert inventory_attributes(inv)[gpu.name] == device_attributes(gpu, inv)


def test_cached_per_inventory_object() -> None:
    """The same inventory object gets the same maps (the metadata writer caches on identity)."""
    attrs = PublishedAttributes()
    inv = inventory("workstation")
    first = attrs.get(inv)
    assert attrs.get(inv) is first
    assert attrs.get(inventory("dgx")) is not first
