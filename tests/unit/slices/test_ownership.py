"""driver.slices.ownership: which of our devices another DRA driver or a device plugin owns."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driver.inventory.model import DeviceKind, Gpu, Inventory, Nic, PciTopology, pci_device_name
from driver.slices.ownership import MAX_FOREIGN_DEVICES, Owner, Reason, find_owners

NODE = "node-a"
OURS = "numadra.dev"
NVIDIA = "gpu.nvidia.com"
PCI = "resource.kubernetes.io/pciBusID"


def _gpu(bus: str, vendor: str = "nvidia", driver: str = "nvidia", uuid: str | None = None) -> Gpu:
    return Gpu(
        name=pci_device_name(DeviceKind.GPU, bus),
        pci=PciTopology(bus_id=bus, pcie_root="pci0000:00", numa_node=0),
        vendor=vendor,
        vendor_id=0x10DE,
        device_id=0x2330,
        pci_class=0x030200,
        index=0,
        driver=driver,
        uuid=uuid,
    )


def _nic(bus: str) -> Nic:
    return Nic(
        name=pci_device_name(DeviceKind.NIC, bus),
        pci=PciTopology(bus_id=bus, pcie_root="pci0000:00", numa_node=0),
        interface_name="eth0",
        mac_address="02:00:00:00:00:01",
        driver="mlx5_core",
        speed_mbps=None,
        sriov_vf=False,
        pf_bus_id=None,
        sriov_total_vfs=0,
    )


INVENTORY = Inventory(
    gpus=(
        _gpu("0000:3b:00.0", uuid="GPU-aaaa"),
        _gpu("0000:5e:00.0", uuid="GPU-bbbb"),
        _gpu("0000:86:00.0", vendor="amd", driver="amdgpu"),
        _gpu("0000:af:00.0", vendor="intel", driver="i915"),
        _gpu("0000:d8:00.0", vendor="intel", driver="xe"),
    ),
    nics=(_nic("0000:17:00.0"),),
)
G0, G1, AMD, I915, XE = (g.name for g in INVENTORY.gpus)
NIC = INVENTORY.nics[0].name


def _slice(driver: str, *devices: dict[str, Any], node: str = NODE) -> dict[str, Any]:
    return {"spec": {"driver": driver, "nodeName": node, "pool": {"name": node}, "devices": list(devices)}}


def _device(name: str, **attrs: Any) -> dict[str, Any]:
    return {"name": name, "attributes": {k.replace("__", "/"): v for k, v in attrs.items()}}


def _pci(bus: str, **more: Any) -> dict[str, Any]:
    return {"name": "d", "attributes": {PCI: {"string": bus}, **more}}


def _node(**capacity: Any) -> dict[str, Any]:
    return {"metadata": {"name": NODE}, "status": {"capacity": capacity}}


def _owners(slices: list[Any], node: dict[str, Any] | None = None, **kw: Any) -> dict[str, Owner]:
    return dict(find_owners(INVENTORY, slices, node, driver_name=OURS, node_name=NODE, **kw).withheld)


def test_same_pci_bus_id_in_another_drivers_slice_withholds_that_device_only() -> None:
    """NVIDIA's driver publishing 0000:3b:00.0 owns our gpu-0000-3b-00-0, nothing else."""
    got = _owners([_slice(NVIDIA, _pci("0000:3b:00.0"))])
    assert got == {G0: Owner(Reason.DRA_DRIVER, NVIDIA)}


def test_upper_case_bus_id_dranet_address_and_nic() -> None:
    """Bus ids compare case-blind; dranet's pciAddress (bare or qualified) owns a NIC too."""
    assert _owners([_slice(NVIDIA, _pci("0000:3B:00.0"))]) == {G0: Owner(Reason.DRA_DRIVER, NVIDIA)}
    for key in ("pciAddress", "dra.net/pciAddress"):
        dranet = _slice("dra.net", {"name": "eth0", "attributes": {key: {"string": "0000:17:00.0"}}})
        assert _owners([dranet]) == {NIC: Owner(Reason.DRA_DRIVER, "dra.net")}


@pytest.mark.parametrize("key", ["uuid", f"{NVIDIA}/uuid"])
def test_same_gpu_uuid_withholds(key: str) -> None:
    """A GPU UUID we know, published by another driver (without a bus id), owns that GPU."""
    got = _owners([_slice(NVIDIA, {"name": "gpu-1", "attributes": {key: {"string": "gpu-bbbb"}}})])
    assert got == {G1: Owner(Reason.DRA_DRIVER, NVIDIA)}


def test_our_own_slices_and_other_nodes_slices_own_nothing() -> None:
    """Our driver's slice, and a slice of another node (a wrong list answer), withhold nothing."""
    assert _owners([_slice(OURS, _pci("0000:3b:00.0"))]) == {}
    assert _owners([_slice(NVIDIA, _pci("0000:3b:00.0"), node="node-b")]) == {}


def test_bus_id_not_on_this_host_and_junk_numa_node_withhold_nothing() -> None:
    """A pciBusID we do not have matches nothing; numaNode of any shape is never looked at."""
    junk = [{"int": -1}, {"ints": [0, 1]}, {"string": "x"}, None, [1], {"int": 2**70}]
    devices = [_pci("0000:99:00.0", **{"resource.kubernetes.io/numaNode": j}) for j in junk]
    assert _owners([_slice(NVIDIA, *devices)]) == {}
    ours = _pci("0000:3b:00.0", **{"resource.kubernetes.io/numaNode": {"ints": [-5]}})
    assert _owners([_slice(NVIDIA, ours)]) == {G0: Owner(Reason.DRA_DRIVER, NVIDIA)}


def test_two_foreign_drivers_on_one_device_the_answer_is_order_free() -> None:
    """Two other drivers publishing one GPU: the same owner whichever slice comes first."""
    a, b = _slice("b.example.com", _pci("0000:3b:00.0")), _slice("a.example.com", _pci("0000:3b:00.0"))
    assert _owners([a, b]) == _owners([b, a]) == {G0: Owner(Reason.DRA_DRIVER, "a.example.com")}


@pytest.mark.parametrize(
    ("capacity", "withheld"),
    [
        pytest.param({"nvidia.com/gpu": "2"}, {G0, G1}, id="nvidia"),
        pytest.param({"amd.com/gpu": "1"}, {AMD}, id="amd"),
        pytest.param({"gpu.intel.com/i915": "1"}, {I915}, id="intel-i915-only"),
        pytest.param({"gpu.intel.com/xe": "1k"}, {XE}, id="intel-xe-quantity"),
        pytest.param({"nvidia.com/gpu": "0", "amd.com/gpu": "0"}, set(), id="zero-owns-nothing"),
        pytest.param({"cpu": "64", "example.com/gpu": "4"}, set(), id="other-resources"),
    ],
)
def test_device_plugin_capacity(capacity: dict[str, str], withheld: set[str]) -> None:
    """A vendor resource in the Node's capacity above 0 owns that vendor's GPUs; 0 owns none."""
    got = _owners([], _node(**capacity))
    assert set(got) == withheld
    assert all(o.reason is Reason.DEVICE_PLUGIN for o in got.values())


@pytest.mark.parametrize("raw", ["lots", "", "1e999999999", "-1", ["1"], True, {"a": 1}, "9" * 100])
def test_garbage_capacity_owns_nothing_and_is_reported(raw: Any) -> None:
    """A capacity that is no (short, non-negative) quantity owns nothing and is named as a problem."""
    result = find_owners(INVENTORY, [], _node(**{"nvidia.com/gpu": raw}), driver_name=OURS, node_name=NODE)
    assert result.withheld == {}
    (problem,) = result.problems
    assert "nvidia.com/gpu" in problem


def test_no_node_yet_owns_nothing() -> None:
    """Before the Node is read (None) only slices count."""
    assert find_owners(INVENTORY, [], None, driver_name=OURS, node_name=NODE).problems == ()


def test_work_is_bounded_by_the_limit() -> None:
    """Past ``limit`` foreign devices nothing more is read, and the result says so."""
    many = _slice(NVIDIA, *[_pci("0000:99:00.0") for _ in range(50)], _pci("0000:3b:00.0"))
    result = find_owners(INVENTORY, [many], None, driver_name=OURS, node_name=NODE, limit=50)
    assert (result.examined, result.truncated, dict(result.withheld)) == (50, True, {})
    full = find_owners(INVENTORY, [many], None, driver_name=OURS, node_name=NODE, limit=51)
    assert (full.truncated, set(full.withheld)) == (False, {G0})


def test_thousands_of_devices_default_limit() -> None:
    """20,000 foreign devices: MAX_FOREIGN_DEVICES are examined, the rest left, no error."""
    slices = [_slice(NVIDIA, *[_pci(f"0000:{i % 256:02x}:01.0") for i in range(1000)]) for _ in range(20)]
    result = find_owners(INVENTORY, slices, None, driver_name=OURS, node_name=NODE)
    assert result.examined == MAX_FOREIGN_DEVICES
    assert result.truncated


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
_attr_values = st.one_of(
    _json,
    st.fixed_dictionaries(
        {"string": st.sampled_from(["0000:99:00.0", "0000:3b:00.1", "GPU-zzzz", "", "x" * 80])}
    ),
)
_junk_device = st.one_of(
    _json,
    st.fixed_dictionaries(
        {
            "name": _json,
            "attributes": st.dictionaries(
                st.sampled_from([PCI, "uuid", "pciAddress", "numaNode"]), _attr_values
            ),
        }
    ),
)
_junk_slice = st.one_of(
    _json,
    st.fixed_dictionaries(
        {
            "spec": st.fixed_dictionaries(
                {
                    "driver": st.one_of(st.just(NVIDIA), _json),
                    "nodeName": st.one_of(st.just(NODE), _json),
                    "devices": st.one_of(st.lists(_junk_device, max_size=5), _json),
                }
            )
        }
    ),
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(slices=st.lists(_junk_slice, max_size=5), node=st.one_of(st.none(), _json))
def test_junk_never_raises_and_never_withholds(slices: list[Any], node: Any) -> None:
    """Slices and Nodes of any shape: no exception, and none of our devices is withheld, since no
    junk value names one of our bus ids or UUIDs nor is a vendor resource capacity."""
    result = find_owners(INVENTORY, slices, node, driver_name=OURS, node_name=NODE)
    assert result.withheld == {}
