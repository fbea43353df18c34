"""The ResourceSlice builder over every fixture: devices, attributes, capacities, splitting, limits."""

from __future__ import annotations

from typing import Any

import pytest

from driver.errors import SliceError
from driver.slices.builder import ATTR_NUMA_NODE, build_slices, slice_name
from driver.slices.validation import validate_slices
from tests.unit.inventory.trees import inventory

FIXTURES = ["dgx", "workstation", "cloud_vm", "huge", "hostile", "mixed"]
POLICY_1 = {"default": "1", "validRange": {"min": "1", "step": "1"}}


def _devices(slices: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {d["name"]: d for s in slices for d in s["spec"]["devices"]}


def _attrs(device: dict[str, Any]) -> dict[str, Any]:
    return {k: next(iter(v.values())) for k, v in device["attributes"].items()}


@pytest.mark.parametrize(
    ("name", "per_slice"),
    [
        pytest.param("dgx", [82], id="dgx"),
        pytest.param("workstation", [4], id="workstation"),
        pytest.param("cloud_vm", [3], id="cloud_vm"),
        pytest.param("huge", [128, 128, 76], id="huge"),
        pytest.param("hostile", [7], id="hostile"),
        pytest.param("mixed", [11], id="mixed"),
    ],
)
def test_slice_split_and_pool(name: str, per_slice: list[int]) -> None:
    """Devices are split at 128 per slice; every slice names the pool, generation and slice count."""
    slices = build_slices(inventory(name), node_name="node-a", generation=3)
    assert [len(s["spec"]["devices"]) for s in slices] == per_slice
    assert [s["metadata"]["name"] for s in slices] == [
        f"node-a-numadra-dev-{i}" for i in range(len(per_slice))
    ]
    for s in slices:
        assert s["apiVersion"] == "resource.k8s.io/v1" and s["kind"] == "ResourceSlice"
        assert s["spec"]["driver"] == "numadra.dev" and s["spec"]["nodeName"] == "node-a"
        assert s["spec"]["pool"] == {"name": "node-a", "generation": 3, "resourceSliceCount": len(per_slice)}
        assert "ownerReferences" not in s["metadata"]
    assert validate_slices(slices) == []


@pytest.mark.parametrize("name", FIXTURES)
def test_every_fixture_within_limits_with_all_options(name: str) -> None:
    """With reserved CPUs, node-allocatable mappings and taints every fixture still validates cleanly."""
    inv = inventory(name)
    taint = {"key": "numadra.dev/unhealthy", "value": "xid", "effect": "NoSchedule"}
    slices = build_slices(
        inv,
        node_name="n1",
        reserved_cpus=frozenset({0, 1}),
        node_allocatable=True,
        taints={inv.numa_nodes[0].name: [taint]},
    )
    assert validate_slices(slices) == []
    assert all(len(s["spec"]["devices"]) <= 64 for s in slices)
    count = sum(1 for _ in inv.devices())
    assert len(slices) == -(-count // 64)


def test_dgx_gpu_device_exact() -> None:
    """A DGX GPU publishes exactly the documented attributes, the standard ones with their domain."""
    gpu = _devices(build_slices(inventory("dgx"), node_name="dgx-1"))["gpu-0000-29-00-0"]
    assert gpu == {
        "name": "gpu-0000-29-00-0",
        "attributes": {
            "type": {"string": "gpu"},
            "vendor": {"string": "nvidia"},
            "pciVendorID": {"string": "10de"},
            "pciDeviceID": {"string": "2330"},
            "productName": {"string": "NVIDIA H100 80GB HBM3"},
            "driver": {"string": "nvidia"},
            "index": {"int": 1},
            "resource.kubernetes.io/numaNode": {"int": 0},
            "socket": {"int": 0},
            "resource.kubernetes.io/pcieRoot": {"string": "pci0000:26"},
            "resource.kubernetes.io/pciBusID": {"string": "0000:29:00.0"},
        },
    }


def test_dgx_nic_vf_and_pf_attributes() -> None:
    """VFs carry sriovVF and pfBusID, PFs do not; both report RDMA and the same pcieRoot as their GPU."""
    devices = _devices(build_slices(inventory("dgx"), node_name="dgx-1"))
    vf = _attrs(devices["nic-0000-a8-01-0"])
    assert vf == {
        "type": "nic",
        "interfaceName": "enp168s0v7",
        "macAddress": "02:00:00:05:07:01",
        "driver": "mlx5_core",
        "speedMbps": 400000,
        "sriovVF": True,
        "pfBusID": "0000:a8:00.0",
        "rdma": True,
        "rdmaDevice": "mlx5_55",
        "resource.kubernetes.io/numaNode": 1,
        "socket": 1,
        "resource.kubernetes.io/pcieRoot": "pci0000:a6",
        "resource.kubernetes.io/pciBusID": "0000:a8:01.0",
    }
    pf = _attrs(devices["nic-0000-a8-00-0"])
    assert pf["sriovVF"] is False and "pfBusID" not in pf
    assert pf["rdmaDevice"] == "mlx5_5"
    assert "capacity" not in devices["nic-0000-a8-00-0"]


def test_dgx_cpu_device_capacities() -> None:
    """cpu-numaN is multi-allocatable with cpus/memory/hugepages capacities and their request policies."""
    cpu = _devices(build_slices(inventory("dgx"), node_name="dgx-1"))["cpu-numa1"]
    assert cpu["allowMultipleAllocations"] is True
    assert _attrs(cpu) == {"type": "cpu", "socket": 1, "smt": True, "cpuCount": 112, ATTR_NUMA_NODE: 1}
    assert cpu["capacity"] == {
        "cpus": {"value": "112", "requestPolicy": POLICY_1},
        "memory": {
            "value": "1Ti",
            "requestPolicy": {"default": "0", "validRange": {"min": "0", "step": "1Mi"}},
        },
        "hugepages2Mi": {
            "value": "2Gi",
            "requestPolicy": {"default": "0", "validRange": {"min": "0", "step": "2Mi"}},
        },
        "hugepages1Gi": {
            "value": "16Gi",
            "requestPolicy": {"default": "0", "validRange": {"min": "0", "step": "1Gi"}},
        },
    }
    assert "nodeAllocatableResources" not in cpu


def test_reserved_cpus_reduce_cpus_capacity_only() -> None:
    """Reserved CPUs leave the cpus capacity but not cpuCount."""
    cpu = _devices(build_slices(inventory("dgx"), node_name="d", reserved_cpus=frozenset({0, 1, 112, 60})))[
        "cpu-numa0"
    ]
    assert cpu["capacity"]["cpus"]["value"] == "109"
    assert _attrs(cpu)["cpuCount"] == 112


def test_fully_reserved_node_has_no_cpus_capacity() -> None:
    """A node whose CPUs are all reserved publishes no cpus capacity (it cannot serve CPU requests)."""
    inv = inventory("cloud_vm")
    cpu = _devices(build_slices(inv, node_name="vm", reserved_cpus=frozenset(range(4))))["cpu-numa0"]
    assert "cpus" not in cpu["capacity"]
    assert set(cpu["capacity"]) == {"memory", "hugepages2Mi", "hugepages1Gi"}


def test_node_allocatable_mapping_shape() -> None:
    """nodeAllocatableResources maps cpu/memory/hugepages to the capacities, in the 1.37 shape."""
    cpu = _devices(build_slices(inventory("dgx"), node_name="d", node_allocatable=True))["cpu-numa0"]
    assert cpu["nodeAllocatableResources"] == {
        "cpu": {"mapping": {"capacityKey": "cpus", "capacityMultiplier": "1"}},
        "memory": {"mapping": {"capacityKey": "memory", "capacityMultiplier": "1"}},
        "hugepages-2Mi": {"mapping": {"capacityKey": "hugepages2Mi", "capacityMultiplier": "1"}},
        "hugepages-1Gi": {"mapping": {"capacityKey": "hugepages1Gi", "capacityMultiplier": "1"}},
    }


def test_cloud_vm_omits_numa_node_when_unknown() -> None:
    """numa_node -1 devices carry no numaNode attribute; the synthesized cpu device does."""
    devices = _devices(build_slices(inventory("cloud_vm"), node_name="vm"))
    assert ATTR_NUMA_NODE not in devices["gpu-0000-00-04-0"]["attributes"]
    assert ATTR_NUMA_NODE not in devices["nic-0000-00-03-0"]["attributes"]
    assert "speedMbps" not in devices["nic-0000-00-03-0"]["attributes"]
    assert _attrs(devices["cpu-numa0"])[ATTR_NUMA_NODE] == 0
    assert _attrs(devices["cpu-numa0"])["smt"] is False
    assert devices["cpu-numa0"]["capacity"]["hugepages2Mi"]["value"] == "1Gi"
    assert devices["cpu-numa0"]["capacity"]["hugepages1Gi"] == {"value": "0"}


def test_workstation_gpu_memory_capacity() -> None:
    """The AMD GPU's VRAM becomes a memory capacity; the Intel iGPU has none."""
    devices = _devices(build_slices(inventory("workstation"), node_name="ws"))
    assert devices["gpu-0000-03-00-0"]["capacity"] == {"memory": {"value": "24Gi"}}
    assert "capacity" not in devices["gpu-0000-00-02-0"]
    assert _attrs(devices["gpu-0000-03-00-0"])["vendor"] == "amd"


def test_hostile_values_are_sanitized() -> None:
    """Long product names are clipped to 64 bytes on a character boundary; odd names pass as values."""
    devices = _devices(build_slices(inventory("hostile"), node_name="h"))
    assert _attrs(devices["gpu-0000-0a-00-0"])["productName"] == "Ü" * 32
    assert _attrs(devices["gpu-0000-0c-00-0"])["productName"] == "X" * 64
    assert ATTR_NUMA_NODE not in devices["gpu-0000-0c-00-0"]["attributes"]
    eth = _attrs(devices["nic-0000-1a-00-0"])
    assert (eth["interfaceName"], eth["macAddress"]) == ("Eth.Uplink.0", "aa:bb:cc:dd:ee:ff")
    assert "speedMbps" not in eth
    assert "cpu-numa2" not in devices
    memory_only = devices["memory-numa2"]
    assert memory_only["allowMultipleAllocations"] is True
    # equally far from both sockets' nodes: no socket is proven
    assert _attrs(memory_only) == {"type": "memory", "memoryKind": "unknown", ATTR_NUMA_NODE: 2}
    assert "cpus" not in memory_only["capacity"]
    assert memory_only["capacity"]["hugepages1Gi"]["value"] == "2Gi"


def test_taints_attach_and_limit_slices_to_64() -> None:
    """A taint goes on its device; with any taint the huge pool splits into slices of at most 64."""
    inv = inventory("huge")
    taint = {"key": "numadra.dev/unhealthy", "effect": "NoExecute"}
    slices = build_slices(inv, node_name="big", taints={"gpu-0000-40-00-0": [taint], "gone-device": [taint]})
    assert [len(s["spec"]["devices"]) for s in slices] == [64, 64, 64, 64, 64, 12]
    assert _devices(slices)["gpu-0000-40-00-0"]["taints"] == [taint]
    assert {s["spec"]["pool"]["resourceSliceCount"] for s in slices} == {6}
    assert validate_slices(slices) == []


def test_more_than_16_taints_is_an_error() -> None:
    """17 taints on one device cannot be published."""
    taints = [{"key": f"k{i}", "effect": "NoSchedule"} for i in range(17)]
    with pytest.raises(SliceError, match="17 taints"):
        build_slices(inventory("cloud_vm"), node_name="vm", taints={"cpu-numa0": taints})


@pytest.mark.parametrize(
    ("node", "driver", "generation", "match"),
    [
        pytest.param("Bad_Node", "numadra.dev", 1, "node name", id="bad-node"),
        pytest.param("n", "x" * 64 + ".dev", 1, "driver name", id="long-driver"),
        pytest.param("n", "numadra.dev", 0, "generation", id="generation-0"),
    ],
)
def test_configuration_errors(node: str, driver: str, generation: int, match: str) -> None:
    """Names from configuration that the API can never accept raise SliceError, not garbage."""
    with pytest.raises(SliceError, match=match):
        build_slices(inventory("cloud_vm"), node_name=node, driver_name=driver, generation=generation)


@pytest.mark.parametrize(
    ("node", "driver", "expected"),
    [
        pytest.param("node-1", "numadra.dev", "node-1-numadra-dev-0", id="plain"),
        pytest.param(
            "a.b.example.com", "gpu.example.com", "a.b.example.com-gpu-example-com-0", id="dotted-node"
        ),
        pytest.param("n" * 253, "numadra.dev", "n" * 251 + "-0", id="longest-node"),
    ],
)
def test_slice_names(node: str, driver: str, expected: str) -> None:
    """Slice names are deterministic DNS subdomains of at most 253 characters."""
    assert slice_name(node, driver, 0) == expected


def test_empty_inventory_gives_one_empty_slice() -> None:
    """An inventory with nothing still publishes one (empty) slice so the pool exists."""
    from driver.inventory.model import Inventory

    slices = build_slices(Inventory(), node_name="empty")
    assert len(slices) == 1
    assert slices[0]["spec"]["devices"] == []
    assert validate_slices(slices) == []


def test_build_is_deterministic() -> None:
    """Same inventory, same slices (the publisher diffs on this)."""
    inv = inventory("dgx")
    assert build_slices(inv, node_name="d") == build_slices(inv, node_name="d")
