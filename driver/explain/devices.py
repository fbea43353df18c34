"""This node's devices as ``explain`` sees them: read from ResourceSlice JSON, whatever produced it.

The input is what ``numadra discover -o json`` prints (a ``List`` of ResourceSlices), a single
ResourceSlice, or a bare list of them; or, for the live host, the slices built from discovery. Only
what selection depends on is kept: attributes and capacity grouped by domain as CEL sees them
(names without a domain belong to the driver's domain), taints and multi-allocation.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any

from driver.errors import ConfigError, UntrustedValueError
from driver.explain.cel import CelDevice
from driver.kube.quantity import parse_quantity
from driver.untrusted.files import MAX_USER_FILE_BYTES, read_file_text
from driver.untrusted.shape import AS_DICT, Boolean, Field, Integer, ListOf, MapOf, Record, Text, Unchecked
from driver.untrusted.yamldoc import load_yaml

if TYPE_CHECKING:
    from driver.inventory.model import Inventory

__all__ = [
    "DeviceView",
    "Taint",
    "devices_from_host",
    "devices_from_inventory",
    "devices_from_slices",
    "load_slices_file",
]


@dataclass(frozen=True, slots=True)
class Taint:
    """A device taint, as the scheduler matches it against request tolerations."""

    key: str
    value: str = ""
    effect: str = "NoSchedule"

    def __str__(self) -> str:
        return f"{self.key}={self.value}:{self.effect}" if self.value else f"{self.key}:{self.effect}"


@dataclass(frozen=True, slots=True)
class DeviceView:
    """One published device: its identity and what selectors and constraints look at."""

    driver: str
    pool: str
    name: str
    attributes: Mapping[str, Mapping[str, Any]]
    capacity: Mapping[str, Mapping[str, Fraction]]
    allow_multiple_allocations: bool = False
    taints: tuple[Taint, ...] = field(default=())

    @property
    def type(self) -> str:
        """The driver's ``type`` attribute (gpu, nic, cpu), or "" when absent."""
        value = self.attributes.get(self.driver, {}).get("type", "")
        return value if isinstance(value, str) else ""

    def attribute(self, qualified: str) -> Any:
        """Value of a fully qualified attribute (``resource.kubernetes.io/numaNode``), or None."""
        domain, ident = _split(qualified, self.driver)
        return self.attributes.get(domain, {}).get(ident)

    def capacity_of(self, name: str) -> Fraction | None:
        """Total of a capacity (``cpus`` or ``numadra.dev/cpus``), or None when the device has none."""
        domain, ident = _split(name, self.driver)
        return self.capacity.get(domain, {}).get(ident)

    def cel(self) -> CelDevice:
        """The ``device`` variable of a CEL selector."""
        return CelDevice(self.driver, self.attributes, self.capacity, self.allow_multiple_allocations)


def _split(key: str, driver: str) -> tuple[str, str]:
    """(domain, name) of an attribute or capacity name; no domain means the driver's own."""
    domain, _, ident = key.rpartition("/")
    return domain or driver, ident


def _attribute_value(raw: Mapping[str, Any]) -> Any:
    for kind in ("int", "bool", "string", "version", "ints", "bools", "strings", "versions"):
        if kind in raw:
            value = raw[kind]
            return list(value) if isinstance(value, list) else value
    return None


def _device(driver: str, pool: str, raw: Mapping[str, Any]) -> DeviceView:
    attributes: dict[str, dict[str, Any]] = {}
    for key, value in (raw.get("attributes") or {}).items():
        domain, ident = _split(key, driver)
        attributes.setdefault(domain, {})[ident] = _attribute_value(value)
    capacity: dict[str, dict[str, Fraction]] = {}
    for key, value in (raw.get("capacity") or {}).items():
        domain, ident = _split(key, driver)
        try:
            capacity.setdefault(domain, {})[ident] = parse_quantity(str(value.get("value", "0")))
        except ValueError as exc:
            raise ConfigError(f"device {raw.get('name')}: capacity {key}: {exc}") from exc
    taints = tuple(
        Taint(str(t.get("key", "")), str(t.get("value") or ""), str(t.get("effect", "NoSchedule")))
        for t in raw.get("taints") or ()
    )
    return DeviceView(
        driver=driver,
        pool=pool,
        name=str(raw["name"]),
        attributes=attributes,
        capacity=capacity,
        allow_multiple_allocations=bool(raw.get("allowMultipleAllocations", False)),
        taints=taints,
    )


_NAME = Text(max_len=253)
_ATTRIBUTE = Record(
    AS_DICT,
    {
        "int": Field("int", Integer(-(2**63), 2**63 - 1)),
        "bool": Field("bool", Boolean()),
        "string": Field("string", Text()),
        "version": Field("version", Text()),
    },
)
_DEVICE = Record(
    AS_DICT,
    {
        "name": Field("name", _NAME, required=True),
        "attributes": Field("attributes", MapOf(_ATTRIBUTE, 256), nullable=True),
        "capacity": Field(
            "capacity", MapOf(Record(AS_DICT, {"value": Field("value", Unchecked())}), 256), nullable=True
        ),
        "taints": Field(
            "taints",
            ListOf(
                Record(
                    AS_DICT,
                    {
                        "key": Field("key", Text()),
                        "value": Field("value", Text(), nullable=True),
                        "effect": Field("effect", Text()),
                    },
                ),
                256,
            ),
            nullable=True,
        ),
        "allowMultipleAllocations": Field("allow_multiple", Boolean(), nullable=True),
    },
)
#: what is read of a ResourceSlice, by type: a file of the wrong shape is a ConfigError naming
#: the field, not a traceback
_SLICE = Record(
    AS_DICT,
    {
        "spec": Field(
            "spec",
            Record(
                AS_DICT,
                {
                    "driver": Field("driver", _NAME),
                    "nodeName": Field("node_name", _NAME, nullable=True),
                    "pool": Field("pool", Record(AS_DICT, {"name": Field("name", Text())})),
                    "devices": Field("devices", ListOf(_DEVICE, 1 << 16), nullable=True),
                },
            ),
            nullable=True,
        ),
    },
)


def devices_from_slices(
    doc: Any, driver_name: str | None = None, node_name: str | None = None
) -> list[DeviceView]:
    """Devices of a ``List``, one ResourceSlice or a list of them.

    Only ``driver_name``'s slices when given. ``node_name`` picks one node's slices; without it,
    slices of several nodes (``kubectl get resourceslices`` of a cluster) are a ConfigError, since
    device names repeat across nodes.
    """
    if isinstance(doc, Mapping) and doc.get("kind") == "List":
        slices: Sequence[Any] = doc.get("items") or []
    elif isinstance(doc, Mapping):
        slices = [doc]
    elif isinstance(doc, list):
        slices = doc
    else:
        raise ConfigError("slices: expected a ResourceSlice, a List of them or a JSON array")
    out: list[DeviceView] = []
    nodes: set[str] = set()
    if not isinstance(slices, list):
        raise ConfigError("slices: the List's items must be a list")
    for index, obj in enumerate(slices):
        if not isinstance(obj, Mapping) or obj.get("kind") != "ResourceSlice":
            raise ConfigError("slices: every item must be a ResourceSlice")
        try:
            _SLICE.check(obj, f"items[{index}]")
        except UntrustedValueError as exc:
            raise ConfigError(f"slices: {exc}") from None
        spec = obj.get("spec") or {}
        driver = str(spec.get("driver", ""))
        node = str(spec.get("nodeName", ""))
        if (driver_name is not None and driver != driver_name) or (node_name and node != node_name):
            continue
        nodes.add(node)
        pool = str((spec.get("pool") or {}).get("name", ""))
        out.extend(_device(driver, pool, raw) for raw in spec.get("devices") or ())
    if len(nodes) > 1:
        raise ConfigError(f"slices of several nodes ({', '.join(sorted(nodes))}): pick one with --node-name")
    return out


def load_slices_file(
    path: Path, driver_name: str | None = None, node_name: str | None = None
) -> list[DeviceView]:
    """Read ``numadra discover -o json`` output (or YAML, e.g. ``kubectl get resourceslices -o yaml``)."""
    try:
        text = read_file_text(path, max_bytes=MAX_USER_FILE_BYTES, follow_symlinks=True)  # the user's path
    except OSError as exc:
        raise ConfigError(f"slices file {path}: {exc.strerror}") from exc
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:
        try:
            doc = load_yaml(text, what=f"slices file {path}", max_nodes=MAX_USER_FILE_BYTES)
        except UntrustedValueError as exc:
            raise ConfigError(f"{exc} (and not JSON either)") from exc
    return devices_from_slices(doc, driver_name, node_name)


def devices_from_inventory(inventory: Inventory, node_name: str, driver_name: str) -> list[DeviceView]:
    """The devices of the slices this node would publish for ``inventory``."""
    from driver.slices.builder import build_slices

    return devices_from_slices(build_slices(inventory, node_name=node_name, driver_name=driver_name))


def devices_from_host(host_root: str, node_name: str, driver_name: str) -> list[DeviceView]:
    """Discover the host under ``host_root`` and build the slices this node would publish."""
    from driver.inventory.discovery import discover

    return devices_from_inventory(discover(host_root, use_nvml=False), node_name, driver_name)
