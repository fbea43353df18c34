"""Host discovery: sysfs/procfs under a host root -> immutable :class:`Inventory`.

The names are loaded on first use: :mod:`driver.inventory.cpulist` (``--reserved-cpus``) is
imported on the plugin registration path, which must not pay for the inventory model.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

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


def __getattr__(name: str) -> Any:
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module("driver.inventory.model"), name)
