"""Inventory -> complete ``resource.k8s.io/v1`` ResourceSlice objects (plain JSON dicts); pure.

Same inventory and arguments, same slices, byte for byte: the publisher can diff them against the
apiserver. Host-derived values that would break an API limit are sanitized here (strings clipped
to the API's string limit on a character boundary, out-of-range integers dropped) rather than
failing discovery.
Attributes of the driver's own domain carry no prefix (the API files them under the driver name);
standard ones carry ``resource.kubernetes.io/``. They come from
:func:`driver.slices.attributes.device_attributes`, which the metadata writer shares. The names and
limits are the contract in docs/design.md ("Devices and attributes").

Capacity request policies of the per-NUMA ``cpu`` device (consumable, shared by many claims):

* ``cpus``: default 1, min 1, step 1 — a claim that names no amount gets one exclusive CPU.
* ``memory``: default 0, min 0, step 1Mi — memory is bookkeeping that a claim asks for explicitly;
  the NUMA pinning (``cpuset.mems``) comes with the device whatever the amount.
* ``hugepages2Mi`` / ``hugepages1Gi``: default 0, min 0, step one page.

A policy is left out when the capacity is too small for it (the API wants min + step <= value), and
``cpus`` is left out of a node whose CPUs are all reserved, so such a node cannot satisfy CPU
requests. Hugepage capacities are always present (value "0" when none) so that CEL selectors on
them never fail with "no such key".

A NUMA node without CPUs (GPU memory, a CXL expander) is a ``memory`` device, named
``memory-numa<N>``, shareable like a cpu device, with the same ``memory`` and hugepage capacities
and no ``cpus``: a separate type, so that no ``cpu`` request (``allocationMode: All`` included)
can be handed it, and so its memory reaches a claim's ``cpuset.mems`` only when the claim asks
for that device.

With ``node_allocatable`` and ``aux_cpus`` (``--aux-cpus gpu=N,nic=M``), a GPU or NIC carries
``nodeAllocatableResources: {cpu: {overhead: {perPod: "N"}}}`` (KEP-5517, 1.37 shape): the
scheduler counts N CPUs of node allocatable for every pod referencing a claim that holds it, and
numadra gives the claim that many exclusive CPUs on the device's node
(:mod:`driver.pinning.aux`). ``perPod``, not ``perContainer``: numadra pins one set per claim,
which every container of the claim's pods shares.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

from driver import DEFAULT_DRIVER_NAME
from driver.errors import SliceError
from driver.inventory.model import DeviceKind, Gpu, Inventory, Nic, NumaNode
from driver.kube.quantity import format_quantity
from driver.names import is_dns_subdomain
from driver.pinning.aux import NO_AUX_CPUS, AuxCpus
from driver.slices.attributes import ATTR_NUMA_NODE, ATTR_PCI_BUS_ID, ATTR_PCIE_ROOT, device_attributes
from driver.slices.limits import (
    MAX_DEVICES_PER_SLICE,
    MAX_DEVICES_PER_SLICE_ADVANCED,
    MAX_DRIVER_NAME,
    MAX_TAINTS,
    sanitize_subdomain,
)

__all__ = [
    "API_VERSION",
    "ATTR_NUMA_NODE",
    "ATTR_PCIE_ROOT",
    "ATTR_PCI_BUS_ID",
    "KIND",
    "build_slices",
    "slice_name",
]

API_VERSION = "resource.k8s.io/v1"
KIND = "ResourceSlice"

_HUGEPAGE_CAPACITIES = ((2048, "hugepages2Mi", "hugepages-2Mi"), (1048576, "hugepages1Gi", "hugepages-1Gi"))
_MEMORY_STEP = 1024 * 1024

Device = dict[str, Any]
Taint = Mapping[str, Any]


def build_slices(
    inventory: Inventory,
    *,
    node_name: str,
    driver_name: str = DEFAULT_DRIVER_NAME,
    generation: int = 1,
    reserved_cpus: frozenset[int] = frozenset(),
    taints: Mapping[str, Sequence[Taint]] | None = None,
    node_allocatable: bool = False,
    numa_node_list: bool = False,
    kinds: Collection[DeviceKind] = frozenset(DeviceKind),
    aux_cpus: AuxCpus = NO_AUX_CPUS,
) -> list[dict[str, Any]]:
    """All ResourceSlices of this node's pool, split to respect the per-slice device limit.

    ``reserved_cpus`` are kept out of the ``cpus`` capacity (system and kubelet CPUs). ``taints``
    maps device names to taint dicts (``key``, ``value``, ``effect``); taints on unknown devices are
    ignored, since the device may have just vanished. ``node_allocatable`` adds the 1.37 alpha
    ``nodeAllocatableResources`` mapping on cpu and memory devices (KEP-5517). ``numa_node_list``
    publishes ``resource.kubernetes.io/numaNode`` as the KEP-6072 list (alpha
    ``DRAListTypeAttributes``); a slice with list attributes holds at most 64 devices. Only devices
    of ``kinds`` (``--devices``) are published; the publisher leaves out the devices another driver
    or a device plugin owns before it calls this (:func:`driver.slices.ownership.without`).
    ``aux_cpus`` (with ``node_allocatable`` only) adds the cpu overhead on GPUs and NICs.

    Raises :class:`SliceError` for a node or driver name the API can never accept, a generation
    below 1 or more than 16 taints on one device: those come from configuration, not the host.
    """
    _check_arguments(node_name, driver_name, generation)
    devices: list[Device] = []
    overhead = aux_cpus if node_allocatable else NO_AUX_CPUS
    for kind, dev in inventory.devices():
        if kind not in kinds:
            continue
        if isinstance(dev, Gpu):
            devices.append(_with_overhead(_gpu_device(dev, inventory, numa_node_list), overhead.of(kind)))
        elif isinstance(dev, Nic):
            devices.append(_with_overhead(_nic_device(dev, inventory, numa_node_list), overhead.of(kind)))
        else:
            devices.append(_numa_device(dev, inventory, reserved_cpus, node_allocatable, numa_node_list))
    advanced = _apply_taints(devices, taints or {}) or numa_node_list
    limit = MAX_DEVICES_PER_SLICE_ADVANCED if advanced else MAX_DEVICES_PER_SLICE
    chunks = [devices[i : i + limit] for i in range(0, len(devices), limit)] or [[]]
    return [
        {
            "apiVersion": API_VERSION,
            "kind": KIND,
            "metadata": {"name": slice_name(node_name, driver_name, index)},
            "spec": {
                "driver": driver_name,
                "nodeName": node_name,
                "pool": {"name": node_name, "generation": generation, "resourceSliceCount": len(chunks)},
                "devices": chunk,
            },
        }
        for index, chunk in enumerate(chunks)
    ]


def slice_name(node_name: str, driver_name: str, index: int) -> str:
    """Deterministic slice name ``<node>-<driver, dots as dashes>-<index>``, a valid DNS subdomain."""
    suffix = f"-{index}"
    base = sanitize_subdomain(f"{node_name}-{driver_name.replace('.', '-')}", 253 - len(suffix))
    return f"{base}{suffix}"


def _check_arguments(node_name: str, driver_name: str, generation: int) -> None:
    if not is_dns_subdomain(node_name):
        raise SliceError(f"node name {node_name!r} is not a DNS subdomain of at most 253 characters")
    if not is_dns_subdomain(driver_name, MAX_DRIVER_NAME):
        raise SliceError(f"driver name {driver_name!r} is not a DNS subdomain of at most 63 characters")
    if generation < 1:
        raise SliceError(f"pool generation must be >= 1, got {generation}")


def _gpu_device(gpu: Gpu, inventory: Inventory, numa_node_list: bool) -> Device:
    attrs = device_attributes(gpu, inventory, numa_node_list=numa_node_list)
    device: Device = {"name": gpu.name, "attributes": attrs}
    if gpu.memory_bytes:
        device["capacity"] = {"memory": {"value": format_quantity(gpu.memory_bytes)}}
    return device


def _nic_device(nic: Nic, inventory: Inventory, numa_node_list: bool) -> Device:
    return {"name": nic.name, "attributes": device_attributes(nic, inventory, numa_node_list=numa_node_list)}


def _with_overhead(device: Device, cpus: int) -> Device:
    """``device`` with its KEP-5517 cpu overhead of ``cpus`` per pod (none for 0)."""
    if cpus > 0:
        device["nodeAllocatableResources"] = {"cpu": {"overhead": {"perPod": str(cpus)}}}
    return device


def _numa_device(
    node: NumaNode,
    inventory: Inventory,
    reserved: frozenset[int],
    node_allocatable: bool,
    numa_node_list: bool,
) -> Device:
    """The ``cpu`` device of a node with CPUs, the ``memory`` device of one without."""
    attrs = device_attributes(node, inventory, numa_node_list=numa_node_list)
    capacity: dict[str, Any] = {}
    available = len([c for c in node.cpus if c not in reserved])
    if node.kind is DeviceKind.CPU and available > 0:
        capacity["cpus"] = _capacity(str(available), "1", "1", "1", available >= 2)
    capacity["memory"] = _capacity(
        format_quantity(node.memory_bytes),
        "0",
        "0",
        format_quantity(_MEMORY_STEP),
        node.memory_bytes >= _MEMORY_STEP,
    )
    for page_kib, key, _ in _HUGEPAGE_CAPACITIES:
        total = node.hugepages_bytes(page_kib)
        capacity[key] = _capacity(
            format_quantity(total), "0", "0", format_quantity(page_kib * 1024), total > 0
        )
    device: Device = {
        "name": node.name,
        "allowMultipleAllocations": True,
        "attributes": attrs,
        "capacity": capacity,
    }
    if node_allocatable:
        device["nodeAllocatableResources"] = _node_allocatable(capacity)
    return device


def _capacity(value: str, default: str, minimum: str, step: str, with_policy: bool) -> dict[str, Any]:
    """A consumable capacity; its policy only when the value is large enough (min + step <= value)."""
    if not with_policy:
        return {"value": value}
    return {
        "value": value,
        "requestPolicy": {"default": default, "validRange": {"min": minimum, "step": step}},
    }


def _node_allocatable(capacity: Mapping[str, Any]) -> dict[str, Any]:
    """KEP-5517 (1.37 shape): each node-allocatable resource is the consumed amount of a capacity."""
    names = [("cpu", "cpus"), ("memory", "memory")] + [(res, key) for _, key, res in _HUGEPAGE_CAPACITIES]
    return {
        resource: {"mapping": {"capacityKey": key, "capacityMultiplier": "1"}}
        for resource, key in names
        if key in capacity
    }


def _apply_taints(devices: list[Device], taints: Mapping[str, Sequence[Taint]]) -> bool:
    """Attach taints to their devices; True when any device got one (then at most 64 per slice)."""
    tainted = False
    for device in devices:
        device_taints = taints.get(device["name"])
        if not device_taints:
            continue
        if len(device_taints) > MAX_TAINTS:
            raise SliceError(f"device {device['name']}: {len(device_taints)} taints, at most {MAX_TAINTS}")
        device["taints"] = [dict(t) for t in device_taints]
        tainted = True
    return tainted
