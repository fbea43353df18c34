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
    """device name -> published attributes, for the latest inventory seen.

    ``numa_node_list`` must be the slices' choice (``--numa-node-list``), so that the metadata
    carries ``numaNode`` in the same form as the slices.
    """

    def __init__(self, *, numa_node_list: bool = False) -> None:
        self._numa_node_list = numa_node_list
        self._lock = threading.Lock()
        self._inventory: Inventory | None = None
        self._attributes: Mapping[str, Mapping[str, Any]] = {}

    def get(self, inventory: Inventory) -> Mapping[str, Mapping[str, Any]]:
        """The attributes of every device of ``inventory``."""
        with self._lock:
            if inventory is not self._inventory:
                attributes = inventory_attributes(inventory, numa_node_list=self._numa_node_list)
                self._inventory, self._attributes = inventory, attributes
            return self._attributes
