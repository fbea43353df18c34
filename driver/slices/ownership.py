"""Which of our devices another party owns on this node, so that our slices leave them out; pure.

Two kinds of owner, read from what other parties wrote to the apiserver:

* another DRA driver whose ResourceSlice for this node (``spec.nodeName``) publishes the same
  device: the same standard ``resource.kubernetes.io/pciBusID``, dranet's ``pciAddress``, or, for
  a GPU whose UUID numadra knows, the same ``uuid`` attribute (NVIDIA's driver publishes one);
* a device plugin that advertises a vendor's resource in the Node's ``status.capacity``
  (``nvidia.com/gpu``, ``amd.com/gpu``, ``gpu.intel.com/i915``, ``gpu.intel.com/xe``: the names
  of :data:`~driver.inventory.gpus.VENDOR_GPU_CLASSES`) with a capacity above 0: every GPU of that
  vendor (and kernel driver, for Intel) then belongs to the plugin, which cannot say which ones it
  serves. A capacity of 0 owns nothing, and neither does one that is not a quantity (reported in
  :attr:`Ownership.problems`, so the caller logs it).

The rule when both publish a device is that the other party wins: numadra yields whenever it sees
the other's claim, whoever came first, so two drivers starting together settle on one owner and
never both keep the device. ``numaNode`` and every other attribute are ignored, so junk there can
never withhold a device wrongly; a ``pciBusID`` this host does not have matches nothing.

Everything here is read from objects others write, so each value is checked for its shape and
the work is bounded: at most ``limit`` foreign devices (:data:`MAX_FOREIGN_DEVICES`) are looked
at; past it :attr:`Ownership.truncated` is set and the rest is not read.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from driver.inventory.gpus import VENDOR_GPU_CLASSES
from driver.inventory.model import Gpu, Inventory, Nic
from driver.kube.quantity import parse_quantity
from driver.slices.attributes import ATTR_PCI_BUS_ID
from driver.untrusted.values import object_or_empty

__all__ = [
    "MAX_FOREIGN_DEVICES",
    "Owner",
    "Ownership",
    "Reason",
    "find_owners",
    "without",
]

#: the foreign devices examined per refresh, at most (a node with more is not a node)
MAX_FOREIGN_DEVICES = 10_000
#: dranet's PCI address attribute (it publishes no pciBusID)
_PCI_ADDRESS = "pciAddress"
_UUID = "uuid"
_MAX_TEXT = 64  # the API's string attribute limit: a longer value is not one
#: a device count as a quantity, short and with a small exponent: "1e999999999" would take the
#: exact parser minutes, and no node has more devices than fit in 18 digits
_SHORT_QUANTITY = re.compile(
    r"[+-]?\d{1,18}(?:\.\d{0,9})?(?:[eE][+-]?\d{1,2}|Ki|Mi|Gi|Ti|Pi|Ei|[numkMGTPE])?", re.ASCII
)


class Reason(StrEnum):
    """Why a device is withheld: the ``reason`` label of ``numadra_devices_withheld``."""

    DRA_DRIVER = "dra-driver"
    DEVICE_PLUGIN = "device-plugin"


@dataclass(frozen=True, slots=True, order=True)
class Owner:
    """Who owns a device: a DRA driver's name, or a device plugin's resource name."""

    reason: Reason
    owner: str

    def describe(self) -> str:
        """As a refusal or a log names it: ``DRA driver gpu.nvidia.com``, ``device plugin nvidia.com/gpu``."""
        what = "DRA driver" if self.reason is Reason.DRA_DRIVER else "device plugin"
        return f"{what} {self.owner}"


@dataclass(frozen=True, slots=True)
class Ownership:
    """The result: device name -> owner, and what the caller should say about the input."""

    withheld: Mapping[str, Owner] = field(default_factory=dict)
    #: foreign devices looked at
    examined: int = 0
    #: the ``limit`` was reached: devices past it were not examined
    truncated: bool = False
    #: input that owns nothing because it is malformed (a capacity that is no quantity)
    problems: tuple[str, ...] = ()

    def causes(self) -> dict[Owner, int]:
        """Each owner -> how many of our devices it holds."""
        counts: dict[Owner, int] = {}
        for owner in self.withheld.values():
            counts[owner] = counts.get(owner, 0) + 1
        return counts


def find_owners(
    inventory: Inventory,
    foreign_slices: Iterable[Any],
    node: Mapping[str, Any] | None,
    *,
    driver_name: str,
    node_name: str,
    limit: int = MAX_FOREIGN_DEVICES,
) -> Ownership:
    """Our devices (of ``inventory``) that another driver's slice or a device plugin owns.

    ``foreign_slices``: the ResourceSlices listed for this node (ours among them are skipped, as
    are slices of another node); ``node``: the Node object, or None when not read yet.
    """
    pci: list[Gpu | Nic] = [*inventory.gpus, *inventory.nics]
    by_bus = {d.pci.bus_id: d.name for d in pci}
    by_uuid = {g.uuid.lower(): g.name for g in inventory.gpus if g.uuid}
    withheld: dict[str, Owner] = {}
    examined, truncated = 0, False
    for obj in foreign_slices:
        spec = object_or_empty(object_or_empty(obj).get("spec"))
        driver = spec.get("driver")
        if not isinstance(driver, str) or not driver or driver == driver_name:
            continue
        if spec.get("nodeName") != node_name:
            continue
        devices = spec.get("devices")
        if not isinstance(devices, list):
            continue
        for device in devices:
            if examined >= limit:
                truncated = True
                break
            examined += 1
            ours = _match(object_or_empty(object_or_empty(device).get("attributes")), driver, by_bus, by_uuid)
            if ours is not None:
                _claim(withheld, ours, Owner(Reason.DRA_DRIVER, driver))
        if truncated:
            break
    problems = _device_plugins(inventory, node, withheld)
    return Ownership(withheld, examined, truncated, problems)


def without(inventory: Inventory, names: Collection[str]) -> Inventory:
    """``inventory`` less the GPUs and NICs named (the withheld ones); the same object when none is."""
    pci: list[Gpu | Nic] = [*inventory.gpus, *inventory.nics]
    if not any(d.name in names for d in pci):
        return inventory
    return replace(
        inventory,
        gpus=tuple(g for g in inventory.gpus if g.name not in names),
        nics=tuple(n for n in inventory.nics if n.name not in names),
    )


def _claim(withheld: dict[str, Owner], device: str, owner: Owner) -> None:
    """Record ``owner``; of several, the smallest wins, so the answer does not hang on list order."""
    known = withheld.get(device)
    if known is None or owner < known:
        withheld[device] = owner


def _string(attrs: Mapping[str, Any], *keys: str) -> str | None:
    """The first of ``keys`` holding a string attribute (``{"string": ...}``), lower-cased."""
    for key in keys:
        value = object_or_empty(attrs.get(key)).get("string")
        if isinstance(value, str) and 0 < len(value) <= _MAX_TEXT:
            return value.strip().lower()
    return None


def _match(
    attrs: Mapping[str, Any], driver: str, by_bus: Mapping[str, str], by_uuid: Mapping[str, str]
) -> str | None:
    """Our device that a foreign device's attributes name, or None."""
    bus = _string(attrs, ATTR_PCI_BUS_ID, _PCI_ADDRESS, f"{driver}/{_PCI_ADDRESS}")
    if bus is not None and bus in by_bus:
        return by_bus[bus]
    uuid = _string(attrs, _UUID, f"{driver}/{_UUID}")
    if uuid is not None and uuid in by_uuid:
        return by_uuid[uuid]
    return None


def _device_plugins(
    inventory: Inventory, node: Mapping[str, Any] | None, withheld: dict[str, Owner]
) -> tuple[str, ...]:
    """Withhold the GPUs of every vendor resource the Node's capacity advertises; the problems."""
    capacity = object_or_empty(object_or_empty(object_or_empty(node).get("status")).get("capacity"))
    problems: list[str] = []
    for cls in VENDOR_GPU_CLASSES:
        raw = capacity.get(cls.extended_resource)
        if raw is None:
            continue
        where = f"Node status.capacity[{cls.extended_resource}]"
        try:
            if isinstance(raw, bool) or not isinstance(raw, str | int):
                raise ValueError(f"not a quantity: {type(raw).__name__}")
            if isinstance(raw, str) and not _SHORT_QUANTITY.fullmatch(raw.strip()):
                raise ValueError(f"not a short quantity: {raw[:_MAX_TEXT]!r}")
            value = parse_quantity(raw)
        except ValueError:
            problems.append(f"{where} {str(raw)[:_MAX_TEXT]!r} is not a quantity: owns nothing")
            continue
        if value < 0:
            problems.append(f"{where} {raw!r} is negative: owns nothing")
        if value <= 0:  # a plugin with no devices here (or one gone) owns nothing
            continue
        owner = Owner(Reason.DEVICE_PLUGIN, cls.extended_resource)
        for gpu in inventory.gpus:
            if _plugin_serves(gpu, cls.vendor, cls.kernel_driver):
                _claim(withheld, gpu.name, owner)
    return tuple(problems)


def _plugin_serves(gpu: Gpu, vendor: str, kernel_driver: str) -> bool:
    return gpu.vendor == vendor and (not kernel_driver or gpu.driver == kernel_driver)
