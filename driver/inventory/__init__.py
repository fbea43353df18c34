"""Host discovery: sysfs/procfs under a host root -> immutable :class:`Inventory`."""

from __future__ import annotations

from driver.inventory.model import (
    Cpu,
    DeviceKind,
    Gpu,
    Inventory,
    InventoryDevice,
    Nic,
    NumaNode,
    PciTopology,
    SkippedDevice,
    cpu_device_name,
    pci_device_name,
)

__all__ = [
    "Cpu",
    "DeviceKind",
    "Gpu",
    "Inventory",
    "InventoryDevice",
    "Nic",
    "NumaNode",
    "PciTopology",
    "SkippedDevice",
    "cpu_device_name",
    "pci_device_name",
]
