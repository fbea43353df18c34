"""One device of the inventory -> its published ``attributes`` map; pure.

The single source of the attributes: the slice builder puts them into the ResourceSlices, and the
claim layer writes the very same maps into the KEP-5304 metadata files, so what a container reads
is exactly what the scheduler matched its selectors against. An attribute depends only on the
device (and, for a NUMA node's ``cpu`` device, on the inventory's CPUs of that node), never on the
node name, driver name, pool generation or taints, so one device's map is computed on its own
and needs no slice. Host-derived strings are clipped to the API's string limit on a character
boundary and
out-of-range integers dropped, as the API demands (see :mod:`driver.slices.builder`).

Topology on every device that has a NUMA node: the standard ``resource.kubernetes.io/numaNode``
(left out when sysfs says -1) and the driver's ``socket`` (when proven), so ``matchAttribute:
numadra.dev/socket`` pairs devices of one socket whatever sub-NUMA clustering (SNC, NPS) splits
it into. ``numaNode`` is an int by default; with ``numa_node_list`` (``--numa-node-list``) it is
the KEP-6072 list (``ints``): the device's node first, then the same-socket nodes at the smallest
SLIT distance (:mod:`driver.inventory.numa`). The list needs the ``DRAListTypeAttributes`` gate
on the cluster's apiserver and scheduler; the driver cannot see it, so the operator chooses.

A NUMA node without CPUs is a ``memory`` device: ``memoryKind`` (``gpu``, ``cxl`` or ``unknown``,
always present so a selector never fails on a missing key) and, for a GPU's own memory,
``gpuMemoryNode``, which the GPU carries too: ``matchAttribute: numadra.dev/gpuMemoryNode`` pairs
a GPU with its own memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from driver.inventory.model import Gpu, Inventory, MemoryKind, Nic, NumaNode, PciTopology
from driver.slices.limits import (
    INT64_MAX,
    INT64_MIN,
    MAX_ATTRIBUTE_VALUES,
    MAX_ATTRIBUTES_AND_CAPACITIES,
    STANDARD_DOMAIN,
    clip_utf8,
)

__all__ = [
    "ATTR_GPU_MEMORY_NODE",
    "ATTR_NUMA_NODE",
    "ATTR_PCIE_ROOT",
    "ATTR_PCI_BUS_ID",
    "ATTR_SOCKET",
    "device_attributes",
    "inventory_attributes",
]

ATTR_NUMA_NODE = f"{STANDARD_DOMAIN}/numaNode"
ATTR_PCIE_ROOT = f"{STANDARD_DOMAIN}/pcieRoot"
ATTR_PCI_BUS_ID = f"{STANDARD_DOMAIN}/pciBusID"
#: the driver's own attributes that pair devices (unprefixed: the API files them under the driver)
ATTR_SOCKET = "socket"
ATTR_GPU_MEMORY_NODE = "gpuMemoryNode"

Attributes = dict[str, Any]

#: the longest numaNode list: with every other attribute and capacity slot a scalar, a device
#: still stays within the API's values per device
_MAX_NUMA_LIST = MAX_ATTRIBUTE_VALUES - MAX_ATTRIBUTES_AND_CAPACITIES + 1


def device_attributes(
    device: Gpu | Nic | NumaNode, inventory: Inventory, *, numa_node_list: bool = False
) -> Attributes:
    """The published attributes of ``device`` (a new dict, in the order the slices carry them).

    ``inventory`` is the one ``device`` belongs to: a NUMA node's ``smt`` comes from the
    inventory's CPUs on that node; GPUs and NICs do not look at it. ``numa_node_list`` publishes
    ``numaNode`` in its list form (see the module docstring).
    """
    if isinstance(device, Gpu):
        return _gpu_attributes(device, numa_node_list)
    if isinstance(device, Nic):
        return _nic_attributes(device, numa_node_list)
    if device.memory_only:
        return _memory_attributes(device, numa_node_list)
    return _cpu_attributes(device, inventory, numa_node_list)


def inventory_attributes(inventory: Inventory, *, numa_node_list: bool = False) -> dict[str, Attributes]:
    """device name -> :func:`device_attributes`, for every device the slices publish."""
    devices: list[Gpu | Nic | NumaNode] = [*inventory.gpus, *inventory.nics, *inventory.numa_nodes]
    return {d.name: device_attributes(d, inventory, numa_node_list=numa_node_list) for d in devices}


def _string(value: str) -> dict[str, Any]:
    return {"string": clip_utf8(value)}


def _set_int(attrs: Attributes, key: str, value: int | None) -> None:
    if value is not None and INT64_MIN <= value <= INT64_MAX:
        attrs[key] = {"int": value}


def _set_string(attrs: Attributes, key: str, value: str | None) -> None:
    if value:
        attrs[key] = _string(value)


def _set_numa_node(attrs: Attributes, node: int | None, near: Sequence[int], as_list: bool) -> None:
    """The standard ``numaNode``: omitted without a node (sysfs -1), else an int or the KEP list."""
    if node is None or not INT64_MIN <= node <= INT64_MAX:
        return
    if not as_list:
        attrs[ATTR_NUMA_NODE] = {"int": node}
        return
    values = [node, *(n for n in near if n != node)][: MAX_ATTRIBUTE_VALUES // 2]
    attrs[ATTR_NUMA_NODE] = {"ints": values}


def _pci_attributes(attrs: Attributes, pci: PciTopology, as_list: bool) -> None:
    _set_numa_node(attrs, pci.numa_node, pci.near_nodes, as_list)
    _set_int(attrs, ATTR_SOCKET, pci.socket)
    _set_string(attrs, ATTR_PCIE_ROOT, pci.pcie_root)
    attrs[ATTR_PCI_BUS_ID] = _string(pci.bus_id)


def _gpu_attributes(gpu: Gpu, as_list: bool) -> Attributes:
    attrs: Attributes = {
        "type": _string("gpu"),
        "vendor": _string(gpu.vendor),
        "pciVendorID": _string(f"{gpu.vendor_id:04x}"),
        "pciDeviceID": _string(f"{gpu.device_id:04x}"),
    }
    _set_string(attrs, "productName", gpu.product_name)
    _set_string(attrs, "driver", gpu.driver)  # the Intel classes select i915 or xe on it
    _set_int(attrs, "index", gpu.index)  # the vendor's own number (NVIDIA device minor), see Gpu
    _set_int(attrs, ATTR_GPU_MEMORY_NODE, gpu.memory_node)
    _pci_attributes(attrs, gpu.pci, as_list)
    return attrs


def _nic_attributes(nic: Nic, as_list: bool) -> Attributes:
    attrs: Attributes = {"type": _string("nic"), "interfaceName": _string(nic.interface_name)}
    _set_string(attrs, "macAddress", nic.mac_address)
    _set_string(attrs, "driver", nic.driver)
    _set_int(attrs, "speedMbps", nic.speed_mbps)
    attrs["sriovVF"] = {"bool": nic.sriov_vf}
    _set_string(attrs, "pfBusID", nic.pf_bus_id)
    attrs["rdma"] = {"bool": nic.rdma}
    _set_string(attrs, "rdmaDevice", nic.rdma_devices[0] if nic.rdma_devices else None)
    _pci_attributes(attrs, nic.pci, as_list)
    return attrs


def _cpu_attributes(node: NumaNode, inventory: Inventory, as_list: bool) -> Attributes:
    cpus = [c for c in inventory.cpus if c.numa_node == node.id]
    attrs: Attributes = {"type": _string("cpu")}
    _set_int(attrs, ATTR_SOCKET, node.socket)
    attrs["smt"] = {"bool": any(len(c.thread_siblings) > 1 for c in cpus)}
    _set_int(attrs, "cpuCount", len(node.cpus))
    _set_numa_node(attrs, node.id, node.numa_list, as_list)
    return attrs


def _memory_attributes(node: NumaNode, as_list: bool) -> Attributes:
    kind = node.memory_kind or MemoryKind.UNKNOWN
    attrs: Attributes = {"type": _string("memory"), "memoryKind": _string(kind.value)}
    _set_int(attrs, ATTR_SOCKET, node.socket)
    if node.gpu_bus_id is not None:
        _set_int(attrs, ATTR_GPU_MEMORY_NODE, node.id)
    _set_numa_node(attrs, node.id, node.numa_list, as_list)
    return attrs
