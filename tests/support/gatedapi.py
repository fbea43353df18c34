"""GateOffApi: a slice API that answers as kube-apiserver 1.37.2 does with DRA feature gates off.

A fake, named as such, in front of a real client of the fake apiserver. kube-apiserver drops the
fields of a gate that is off before it stores a ResourceSlice (``dropDisabledFields`` in
``pkg/registry/resource/resourceslice/strategy.go``): :data:`DROPS` writes that out by hand, one
function per gate, independent of numadra's own table, so a test compares the two. A list
attribute without ``DRAListTypeAttributes`` is dropped too, which leaves the attribute without a
value: the apiserver then refuses the slice with the 422 text below (both seen on a real 1.37.2
apiserver; tests/e2e/test_feature_gates.py runs the real one).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Collection, Mapping
from typing import Any

from driver.errors import KubeError
from driver.kube.client import KubeClient, SliceWatch

__all__ = ["DROPS", "LIST_GATE", "GateOffApi", "apiserver_keeps"]

Obj = dict[str, Any]
LIST_GATE = "DRAListTypeAttributes"
_LIST_KINDS = ("ints", "bools", "strings", "versions")


def _devices(spec: Obj) -> list[Obj]:
    return list(spec.get("devices") or [])


def _drop_consumable(spec: Obj) -> None:
    for device in _devices(spec):
        device.pop("allowMultipleAllocations", None)
        for capacity in (device.get("capacity") or {}).values():
            capacity.pop("requestPolicy", None)


def _drop_taints(spec: Obj) -> None:
    for device in _devices(spec):
        device.pop("taints", None)


def _drop_node_allocatable(spec: Obj) -> None:
    for device in _devices(spec):
        device.pop("nodeAllocatableResources", None)


def _drop_partitionable(spec: Obj) -> None:
    spec.pop("sharedCounters", None)
    spec.pop("perDeviceNodeSelection", None)
    for device in _devices(spec):
        for key in ("consumesCounters", "nodeName", "nodeSelector", "allNodes"):
            device.pop(key, None)


def _drop_binding(spec: Obj) -> None:
    for device in _devices(spec):
        for key in ("bindingConditions", "bindingFailureConditions", "bindsToNode"):
            device.pop(key, None)


def _drop_lists(spec: Obj) -> None:
    for device in _devices(spec):
        for value in (device.get("attributes") or {}).values():
            for kind in _LIST_KINDS:
                value.pop(kind, None)


#: gate -> what kube-apiserver 1.37.2 removes from a slice's spec when it is off
DROPS: Mapping[str, Callable[[Obj], None]] = {
    "DRAConsumableCapacity": _drop_consumable,
    "DRADeviceTaints": _drop_taints,
    "DRANodeAllocatableResources": _drop_node_allocatable,
    "DRAPartitionableDevices": _drop_partitionable,
    "DRADeviceBindingConditions": _drop_binding,
    LIST_GATE: _drop_lists,
}


def _empty_attributes(spec: Obj) -> list[str]:
    return [
        f'spec.devices[{index}].attributes[{name}]: Invalid value: "": must specify one of: '
        "`int`, `bool`, `string`, `version`, `ints`, `bools`, `strings`, `versions`"
        for index, device in enumerate(_devices(spec))
        for name, value in (device.get("attributes") or {}).items()
        if not value
    ]


def apiserver_keeps(obj: Mapping[str, Any], gates_off: Collection[str]) -> Obj:
    """``obj`` as the apiserver stores it with ``gates_off`` off (before validation)."""
    kept = copy.deepcopy(dict(obj))
    for gate in gates_off:
        DROPS[gate](kept["spec"])
    return kept


class GateOffApi:
    """The slice calls of ``client``, with the answers of an apiserver whose ``gates_off`` are off."""

    def __init__(self, client: KubeClient, gates_off: Collection[str]) -> None:
        unknown = set(gates_off) - set(DROPS)
        if unknown:
            raise ValueError(f"no emulation of {sorted(unknown)}")
        self.client = client
        self.gates_off = frozenset(gates_off)
        self.refusals = 0

    def _gate(self, verb: str, obj: Mapping[str, Any]) -> Obj:
        kept = apiserver_keeps(obj, self.gates_off)
        errors = _empty_attributes(kept["spec"])
        if errors:
            self.refusals += 1
            name = str(kept["metadata"]["name"])
            message = f'ResourceSlice.resource.k8s.io "{name}" is invalid: ' + ", ".join(errors)
            raise KubeError(
                f"{verb} resourceslices/{name}: HTTP 422: {message}",
                verb=verb,
                resource="resourceslices",
                name=name,
                status=422,
            )
        return kept

    def get_node(self, name: str) -> Obj:
        return self.client.get_node(name)

    def list_resource_slices(
        self, *, field_selector: str = "", label_selector: str = ""
    ) -> tuple[list[Obj], str]:
        return self.client.list_resource_slices(field_selector=field_selector, label_selector=label_selector)

    def create_resource_slice(self, obj: Mapping[str, Any]) -> Obj:
        return self.client.create_resource_slice(self._gate("create", obj))

    def update_resource_slice(self, obj: Mapping[str, Any]) -> Obj:
        return self.client.update_resource_slice(self._gate("update", obj))

    def delete_resource_slice(self, name: str, *, uid: str = "", resource_version: str = "") -> None:
        self.client.delete_resource_slice(name, uid=uid, resource_version=resource_version)

    def watch_resource_slices(
        self, *, field_selector: str = "", resource_version: str = "", timeout_seconds: int = 300
    ) -> SliceWatch:
        return self.client.watch_resource_slices(
            field_selector=field_selector, resource_version=resource_version, timeout_seconds=timeout_seconds
        )
