"""The attributes of published devices, for the metadata files.

Taken from the slice builder's own output, so the metadata a container reads is exactly what the
scheduler saw. Building slices costs far more than a prepare may spend, so the result is cached
per inventory object (the inventory provider hands out the same immutable object until it changes).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

from driver.errors import SliceError
from driver.inventory.model import Inventory
from driver.log import get_logger

__all__ = ["PublishedAttributes"]

_log = get_logger("claims.attributes")


class PublishedAttributes:
    """device name -> published attributes, for the latest inventory seen."""

    def __init__(self, *, node_name: str, driver_name: str) -> None:
        self._node_name = node_name
        self._driver_name = driver_name
        self._lock = threading.Lock()
        self._inventory: Inventory | None = None
        self._attributes: Mapping[str, Mapping[str, Any]] = {}

    def get(self, inventory: Inventory) -> Mapping[str, Mapping[str, Any]]:
        """The attributes of every device of ``inventory`` (empty if slices cannot be built)."""
        with self._lock:
            if inventory is self._inventory:
                return self._attributes
            from driver.slices.builder import build_slices

            out: dict[str, Mapping[str, Any]] = {}
            try:
                slices = build_slices(inventory, node_name=self._node_name, driver_name=self._driver_name)
            except SliceError as exc:
                _log.warning("cannot build device attributes for metadata", error=str(exc))
                slices = []
            for item in slices:
                for device in item["spec"]["devices"]:
                    out[device["name"]] = device.get("attributes", {})
            self._inventory, self._attributes = inventory, out
            return out
