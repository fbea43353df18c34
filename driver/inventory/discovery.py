"""``discover(host_root)``: the one call the CLI and the driver make to get an :class:`Inventory`."""

from __future__ import annotations

import os

from driver.inventory.build import build_inventory
from driver.inventory.model import Inventory
from driver.inventory.nvml import enrich_with_nvml
from driver.inventory.probe import probe_host
from driver.inventory.sysfs import is_live_host

__all__ = ["discover"]


def discover(host_root: str | os.PathLike[str] = "/", *, use_nvml: bool = True) -> Inventory:
    """Probe ``host_root`` and interpret it; NVML enrichment only for the live host (root ``/``)."""
    inventory = build_inventory(probe_host(host_root))
    if use_nvml and is_live_host(host_root):
        inventory = enrich_with_nvml(inventory)
    return inventory
