"""One device of the inventory -> its published ``attributes`` map; pure.

The single source of the attributes: the slice builder puts them into the ResourceSlices, and the
claim layer writes the very same maps into the KEP-5304 metadata files, so what a container reads
is exactly what the scheduler matched its selectors against. An attribute depends only on the
device (and, for a NUMA node's ``cpu`` device, on the inventory's CPUs of that node), never on the
node name, driver name, pool generation or taints, so one device's map costs a few microseconds
and needs no slice. Host-derived strings are clipped to 64 bytes on a character boundary and
out-of-range integers dropped, as the API demands (see :mod:`driver.slices.builder`).
"""

from __future__ import annotations

from typing import Any

from driver.inventory.model import Gpu, Inventory, Nic, NumaNode
from driver.slices.limits import INT64_MAX, INT64_MIN, STANDARD_DOMAIN, clip_utf8

__all__ = [
    "ATTR_NUMA_NODE",
    "ATTR_PCIE_ROOT",
    "ATTR_PCI_BUS_ID",
    "device_attributes",
    "inventory_attributes",
]

ATTR_NUMA_NODE = f"{STANDARD_DOMAIN}/numaNode"
ATTR_PCIE_ROOT = f"{STANDARD_DOMAIN}/pcieRoot"
ATTR_PCI_BUS_ID = f"{STANDARD_DOMAIN}/pciBusID"

Attributes = dict[str, Any]


def device_attributes(device: Gpu | Nic | NumaNode, inventory: Inventory) -> Attributes:
    """The published attributes of ``device`` (a new dict, in the order the slices carry them).

    ``inventory`` is the one ``device`` belongs to: a NUMA node's ``socket`` and ``smt`` come from
    the inventory's CPUs on that node; GPUs and NICs do not look at it.
    """
    if isinstance(device, Gpu):
        return _gpu_attributes(device)
    if isinstance(device, Nic):
        return _nic_attributes(device)
    return _cpu_attributes(device, inventory)


def inventory_attributes(inventory: Inventory) -> dict[str, Attributes]:
    """device name -> :func:`device_attributes`, for every device the slices publish."""
    devices: list[Gpu | Nic | NumaNode] = [*inventory.gpus, *inventory.nics, *inventory.numa_nodes]
    return {d.name: device_attributes(d, inventory) for d in devices}


def _string(value: str) -> dict[str, Any]:
    return {"string": clip_utf8(value)}


def _set_int(attrs: Attributes, key: str, value: int | None) -> None:
    if value is not None and INT64_MIN <= value <= INT64_MAX:
        attrs[key] = {"int": value}


def _set_string(attrs: Attributes, key: str, value: str | None) -> None:
    if value:
        attrs[key] = _string(value)


def _pci_attributes(attrs: Attributes, bus_id: str, pcie_root: str, numa_node: int | None) -> None:
    _set_int(attrs, ATTR_NUMA_NODE, numa_node)  # omitted when sysfs says -1
    _set_string(attrs, ATTR_PCIE_ROOT, pcie_root)
    attrs[ATTR_PCI_BUS_ID] = _string(bus_id)


def _gpu_attributes(gpu: Gpu) -> Attributes:
    attrs: Attributes = {
        "type": _string("gpu"),
        "vendor": _string(gpu.vendor),
        "pciVendorID": _string(f"{gpu.vendor_id:04x}"),
        "pciDeviceID": _string(f"{gpu.device_id:04x}"),
    }
    _set_string(attrs, "productName", gpu.product_name)
    _set_string(attrs, "driver", gpu.driver)  # the Intel classes select i915 or xe on it
    _set_int(attrs, "index", gpu.index)  # the vendor's own number (NVIDIA device minor), see Gpu
    _pci_attributes(attrs, gpu.pci.bus_id, gpu.pci.pcie_root, gpu.pci.numa_node)
    return attrs


def _nic_attributes(nic: Nic) -> Attributes:
    attrs: Attributes = {"type": _string("nic"), "interfaceName": _string(nic.interface_name)}
    _set_string(attrs, "macAddress", nic.mac_address)
    _set_string(attrs, "driver", nic.driver)
    _set_int(attrs, "speedMbps", nic.speed_mbps)
    attrs["sriovVF"] = {"bool": nic.sriov_vf}
    _set_string(attrs, "pfBusID", nic.pf_bus_id)
    attrs["rdma"] = {"bool": nic.rdma}
    _set_string(attrs, "rdmaDevice", nic.rdma_devices[0] if nic.rdma_devices else None)
    _pci_attributes(attrs, nic.pci.bus_id, nic.pci.pcie_root, nic.pci.numa_node)
    return attrs


def _cpu_attributes(node: NumaNode, inventory: Inventory) -> Attributes:
    cpus = [c for c in inventory.cpus if c.numa_node == node.id]
    attrs: Attributes = {"type": _string("cpu")}
    if cpus:
        _set_int(attrs, "socket", min(c.package_id for c in cpus))
    attrs["smt"] = {"bool": any(len(c.thread_siblings) > 1 for c in cpus)}
    _set_int(attrs, "cpuCount", len(node.cpus))
    _set_int(attrs, ATTR_NUMA_NODE, node.id)
    return attrs
