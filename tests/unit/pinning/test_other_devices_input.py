"""Other drivers' slices, pods and claims of any shape: placed where they say, never a crash.

Everything :mod:`driver.pinning.otherdevices` and :mod:`driver.slices.places` read is written by
someone else (a pod's owner, another driver), so the properties feed them JSON of every type in
every field and check that the answer is bounded and only ever names what a well-formed input
said. The sysfs lookup runs on a generated host tree.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from driver.pinning.otherdevices import (
    MAX_CLAIMS,
    DevicePlace,
    DevicePlaces,
    SysfsPciNodes,
    is_bus_id,
    pod_devices,
)
from driver.slices.places import device_places
from harness.hosttree import GpuSpec, Topology, write_host_tree

NUMA = "resource.kubernetes.io/numaNode"
BUS = "resource.kubernetes.io/pciBusID"
OWN, OTHER, NODE = "numadra.dev", "gpu.example.com", "node-a"

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


def _slice(devices: Any, *, driver: Any = OTHER, node: Any = NODE, pool: Any = NODE) -> dict[str, Any]:
    return {"spec": {"driver": driver, "nodeName": node, "pool": {"name": pool}, "devices": devices}}


def _no_pci(_bus: str) -> int | None:
    return None


def test_each_kind_of_numa_node_value_is_used_only_when_it_is_a_node_number() -> None:
    devices = [
        {"name": "ok", "attributes": {NUMA: {"int": 1}}},
        {"name": "neg", "attributes": {NUMA: {"int": -1}, BUS: {"string": "0000:AF:00.0"}}},
        {"name": "list", "attributes": {NUMA: {"int": [1]}}},
        {"name": "str", "attributes": {NUMA: {"string": "1"}}},
        {"name": "bool", "attributes": {NUMA: {"int": True}}},
        {"name": "bus-bad", "attributes": {BUS: {"string": "0000:af:00.0/../../x"}}},
        {"name": "none", "attributes": {}},
    ]
    got = device_places([_slice(devices)], node_name=NODE, own_driver=OWN).places
    assert got[(OTHER, NODE, "ok")] == DevicePlace(1)
    assert got[(OTHER, NODE, "neg")] == DevicePlace(
        None, "0000:af:00.0", f"{NUMA} -1 is not a NUMA node number"
    )
    assert got[(OTHER, NODE, "list")].node is None and "not an int" in got[(OTHER, NODE, "list")].problem
    assert got[(OTHER, NODE, "str")].node is None
    assert got[(OTHER, NODE, "bool")].node is None
    assert got[(OTHER, NODE, "bus-bad")] == DevicePlace()
    assert got[(OTHER, NODE, "none")] == DevicePlace()


def test_our_own_and_other_nodes_slices_are_not_places() -> None:
    slices = [
        _slice([{"name": "a", "attributes": {NUMA: {"int": 0}}}], driver=OWN),
        _slice([{"name": "b", "attributes": {NUMA: {"int": 0}}}], node="node-b"),
    ]
    assert not device_places(slices, node_name=NODE, own_driver=OWN)


def test_the_places_are_bounded() -> None:
    devices = [{"name": f"g{i}", "attributes": {NUMA: {"int": 0}}} for i in range(50)]
    got = device_places(
        [_slice(devices), _slice(devices, pool="p2")], node_name=NODE, own_driver=OWN, limit=60
    )
    assert len(got.places) == 60 and got.truncated


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(slices=st.lists(json_values | st.builds(_slice, json_values), max_size=4))
def test_slices_of_any_shape_never_crash_and_place_only_node_numbers(slices: list[Any]) -> None:
    got = device_places(slices, node_name=NODE, own_driver=OWN, limit=100)
    assert len(got.places) <= 100
    for (driver, pool, name), place in got.places.items():
        assert driver == OTHER and isinstance(pool, str) and isinstance(name, str)
        assert place.node is None or (isinstance(place.node, int) and 0 <= place.node < 1024)
        assert place.pci_bus_id == "" or is_bus_id(place.pci_bus_id)


def _pod(containers: Any, *, claims: Any = (), status: Any = None, uid: str = "pod-1") -> dict[str, Any]:
    return {
        "metadata": {"uid": uid},
        "spec": {"containers": containers, "resourceClaims": list(claims)},
        "status": status or {},
    }


def _claim(*results: Any, reserved: Any = None) -> dict[str, Any]:
    status = {"allocation": {"devices": {"results": list(results)}}}
    status["reservedFor"] = reserved if reserved is not None else [{"resource": "pods", "uid": "pod-1"}]
    return {"status": status}


PLACES = DevicePlaces({(OTHER, NODE, "g0"): DevicePlace(0), (OTHER, NODE, "g1"): DevicePlace(1)})


def test_a_subrequest_result_is_held_through_its_request() -> None:
    """``firstAvailable``: the result names ``gpu/big``; a container that asked for ``gpu`` holds it."""
    pod = _pod(
        [{"name": "app", "resources": {"claims": [{"name": "c", "request": "gpu"}]}}],
        claims=[{"name": "c", "resourceClaimName": "rc"}],
    )
    claims = {"rc": _claim({"request": "gpu/big", "driver": OTHER, "pool": NODE, "device": "g1"})}
    got = pod_devices(pod, claims, places=PLACES, pci_nodes=_no_pci, own_driver=OWN)
    assert got["app"].nodes == {1} and got["app"].devices == 1


def test_a_pod_group_reservation_counts_for_the_groups_pod() -> None:
    pod = _pod(
        [{"name": "app", "resources": {"claims": [{"name": "c"}]}}],
        claims=[{"name": "c", "resourceClaimName": "rc"}],
    )
    pod["spec"]["schedulingGroup"] = {"podGroupName": "train"}
    group = [{"apiGroup": "scheduling.k8s.io", "resource": "podgroups", "name": "train", "uid": "g"}]
    claims = {"rc": _claim({"request": "r", "driver": OTHER, "pool": NODE, "device": "g0"}, reserved=group)}
    assert pod_devices(pod, claims, places=PLACES, pci_nodes=_no_pci, own_driver=OWN)["app"].nodes == {0}


def test_numadras_own_results_are_not_other_devices() -> None:
    pod = _pod(
        [{"name": "app", "resources": {"claims": [{"name": "c"}]}}],
        claims=[{"name": "c", "resourceClaimName": "rc"}],
    )
    claims = {"rc": _claim({"request": "r", "driver": OWN, "pool": NODE, "device": "g0"})}
    got = pod_devices(pod, claims, places=PLACES, pci_nodes=_no_pci, own_driver=OWN)
    assert got["app"].devices == 0 and not got["app"].problems


def test_a_pod_naming_more_claims_than_the_api_allows_reads_a_bounded_number() -> None:
    refs = [{"name": f"c{i}"} for i in range(200)]
    pod = _pod(
        [{"name": "app", "resources": {"claims": refs}}],
        claims=[{"name": f"c{i}", "resourceClaimName": f"rc{i}"} for i in range(200)],
    )
    got = pod_devices(pod, {}, places=PLACES, pci_nodes=_no_pci, own_driver=OWN)
    assert len(got["app"].problems) <= MAX_CLAIMS + 1


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    containers=json_values,
    resource_claims=json_values,
    status=json_values,
    claim=json_values,
    results=st.lists(json_values, max_size=3),
)
def test_pods_and_claims_of_any_shape_never_crash(
    containers: Any, resource_claims: Any, status: Any, claim: Any, results: list[Any]
) -> None:
    pod = {
        "metadata": {"uid": "pod-1"},
        "spec": {"containers": containers, "resourceClaims": resource_claims},
    }
    pod["status"] = status
    claims: dict[str, Any] = {
        "rc": _claim(*results),
        "junk": claim if isinstance(claim, dict) else "not found",
    }
    got = pod_devices(pod, claims, places=PLACES, pci_nodes=_no_pci, own_driver=OWN)
    for held in got.values():
        assert held.nodes <= {0, 1}


def test_a_bus_id_is_resolved_through_sysfs_and_nothing_else(tmp_path: Path) -> None:
    root = write_host_tree(
        tmp_path / "host",
        Topology(
            name="two",
            sockets=2,
            cores_per_socket=2,
            gpus=(
                GpuSpec("0000:af:00.0", numa_node=1, driver=None),
                GpuSpec("0000:3b:00.0", numa_node=-1, driver=None),
                GpuSpec("0000:3c:00.0", numa_node="garbage", driver=None),
            ),
        ),
    )
    nodes = SysfsPciNodes(root)
    assert nodes("0000:af:00.0") == 1
    assert nodes("0000:3b:00.0") is None  # the kernel's "no node"
    assert nodes("0000:3c:00.0") is None
    assert nodes("0000:99:00.0") is None  # not on this host
    assert nodes("../../../../proc/self") is None  # never a path
    assert nodes("0000:AF:00.0") is None  # only the kernel's form (the slice reader lower-cases)
