"""Builder output is accepted by the official kubernetes client (v37) models without losing a field."""

from __future__ import annotations

import json
from typing import Any

import pytest
from kubernetes.client import ApiClient, V1ResourceSlice

from driver.slices.builder import build_slices
from tests.unit.inventory.trees import inventory


@pytest.mark.parametrize("node_allocatable", [False, True], ids=["plain", "node-allocatable"])
@pytest.mark.parametrize("name", ["dgx", "workstation", "cloud_vm", "huge", "hostile"])
def test_round_trip_through_client_models(name: str, node_allocatable: bool) -> None:
    """Deserializing into V1ResourceSlice and serializing back gives the identical object."""
    client = ApiClient()
    taints: dict[str, Any] = {
        inventory(name).numa_nodes[0].name: [
            {"key": "numadra.dev/drain", "value": "x", "effect": "NoSchedule"}
        ]
    }
    slices = build_slices(
        inventory(name), node_name="rt-node", node_allocatable=node_allocatable, taints=taints
    )
    for s in slices:
        model = client.deserialize(json.dumps(s), "V1ResourceSlice", "application/json")
        assert isinstance(model, V1ResourceSlice)
        assert model.spec.pool.resource_slice_count == len(slices)
        assert client.sanitize_for_serialization(model) == s


def test_numa_node_is_an_int_in_the_model() -> None:
    """The standard numaNode attribute lands in the model's int field (not string)."""
    client = ApiClient()
    (s,) = build_slices(inventory("workstation"), node_name="ws")
    model = client.deserialize(json.dumps(s), "V1ResourceSlice", "application/json")
    attr = model.spec.devices[0].attributes["resource.kubernetes.io/numaNode"]
    assert (attr.int, attr.string) == (0, None)
