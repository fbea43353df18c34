"""The attributes of published devices, for the metadata files.

Computed by :func:`driver.slices.attributes.device_attributes`, the very function the slice
builder publishes them with, so the metadata a container reads is exactly what the scheduler saw.
The maps are cached per inventory object (the inventory provider hands out the same immutable
object until it changes), so the prepares between two rediscoveries share them: the metadata
writer caches its JSON text per (device, attributes object) identity.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from driver.inventory.model import Inventory
from driver.slices.attributes import inventory_attributes

__all__ = ["PublishedAttributes"]


class PublishedAttributes:
    """device name -> published attributes, for the latest inventory seen."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._inventory: Inventory | None = None
        self._attributes: Mapping[str, Mapping[str, Any]] = {}

    def get(self, inventory: Inventory) -> Mapping[str, Mapping[str, Any]]:
        """The attributes of every device of ``inventory``."""
        with self._lock:
            if inventory is not self._inventory:
                self._inventory, self._attributes = inventory, inventory_attributes(inventory)
            return self._attributes
