"""Host discovery: sysfs/procfs under a host root -> immutable :class:`Inventory`.

The names are loaded on first use: :mod:`driver.inventory.cpulist` (``--reserved-cpus``) is
imported on the plugin registration path, which must not pay for the inventory model.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from driver.lazy import names_from

if TYPE_CHECKING:
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


__getattr__ = names_from(__name__, dict.fromkeys(__all__, "driver.inventory.model"))
