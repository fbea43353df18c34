"""Where other DRA drivers' devices on this node are, from their ResourceSlices; pure.

The NRI plugin runs a container holding another driver's GPU or NIC on that device's NUMA node
(:mod:`driver.pinning.otherdevices`); the node comes from the slices the foreign-slices watcher
already keeps (:mod:`driver.slices.foreign`), never from a read of its own:

* the standard ``resource.kubernetes.io/numaNode`` when it is an ``int`` attribute in
  ``[0, MAX_NODES)``; a missing, negative, list, string or boolean value is not used (the reason
  is kept, for the container's report);
* else the standard ``resource.kubernetes.io/pciBusID`` when it is a ``string`` attribute in the
  kernel's form (``0000:af:00.0``, lower-cased), which the plugin resolves through this host's
  sysfs; a malformed one is not used.

Written by another driver, so every value is checked for its shape, and the work is bounded: at
most ``limit`` devices are kept (:attr:`DevicePlaces.truncated` says more were published).
Slices of numadra itself, or of another node, are skipped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from driver.inventory.cpulist import MAX_NODES
from driver.pinning.otherdevices import DeviceKey, DevicePlace, DevicePlaces, is_bus_id
from driver.slices.attributes import ATTR_NUMA_NODE, ATTR_PCI_BUS_ID
from driver.slices.ownership import MAX_FOREIGN_DEVICES
from driver.untrusted.values import object_or_empty

__all__ = ["device_places"]

_MAX_NAME = 253


def _numa_node(attributes: Mapping[str, Any]) -> tuple[int | None, str]:
    """The usable ``numaNode`` of a device's attributes, or None and why not ("" when absent)."""
    if ATTR_NUMA_NODE not in attributes:
        return None, ""
    value = object_or_empty(attributes.get(ATTR_NUMA_NODE)).get("int")
    if isinstance(value, bool) or not isinstance(value, int):
        return None, f"{ATTR_NUMA_NODE} is not an int attribute"
    if not 0 <= value < MAX_NODES:
        return None, f"{ATTR_NUMA_NODE} {value} is not a NUMA node number"
    return value, ""


def _bus_id(attributes: Mapping[str, Any]) -> str:
    """The ``pciBusID`` of a device's attributes in the kernel's form, or ""."""
    value = object_or_empty(attributes.get(ATTR_PCI_BUS_ID)).get("string")
    if not isinstance(value, str) or len(value) > 16:
        return ""
    value = value.lower()
    return value if is_bus_id(value) else ""


def device_places(
    slices: Iterable[Any], *, node_name: str, own_driver: str, limit: int = MAX_FOREIGN_DEVICES
) -> DevicePlaces:
    """The other drivers' devices published for ``node_name`` and what their slices say of
    their place (module docstring)."""
    places: dict[DeviceKey, DevicePlace] = {}
    truncated = False
    for obj in slices:
        spec = object_or_empty(object_or_empty(obj).get("spec"))
        driver, pool = spec.get("driver"), object_or_empty(spec.get("pool")).get("name")
        if not isinstance(driver, str) or not driver or driver == own_driver or len(driver) > _MAX_NAME:
            continue
        if spec.get("nodeName") != node_name or not isinstance(pool, str) or not pool:
            continue
        devices = spec.get("devices")
        for device in devices if isinstance(devices, list) else ():
            name = object_or_empty(device).get("name")
            if not isinstance(name, str) or not name or len(name) > _MAX_NAME:
                continue
            if len(places) >= limit:
                truncated = True
                break
            attributes = object_or_empty(object_or_empty(device).get("attributes"))
            node, problem = _numa_node(attributes)
            bus_id = _bus_id(attributes) if node is None else ""
            places[(driver, pool, name)] = DevicePlace(node, bus_id, problem)
        if truncated:
            break
    return DevicePlaces(places, truncated)
