"""Pure checks of ResourceSlice dicts against the resource.k8s.io/v1 limits: a list of problems.

The builder is meant never to produce a problem; this validator is the independent second opinion
that tests run over its output (the publisher does not: the apiserver is the judge at run time), in
the spirit of the Go helper's ``validatePool``. It checks what the apiserver would reject, not style.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from driver.kube.quantity import QUANTITY
from driver.names import is_c_identifier, is_dns_label, is_dns_subdomain
from driver.slices.limits import (
    INT64_MAX,
    INT64_MIN,
    MAX_ATTRIBUTE_VALUES,
    MAX_ATTRIBUTES_AND_CAPACITIES,
    MAX_DEVICES_PER_SLICE,
    MAX_DEVICES_PER_SLICE_ADVANCED,
    MAX_DOMAIN_LENGTH,
    MAX_DRIVER_NAME,
    MAX_ID_LENGTH,
    MAX_POOL_NAME,
    MAX_STRING_BYTES,
    MAX_TAINTS,
)

__all__ = ["validate_slices"]

_VALUE_KINDS = ("int", "bool", "string", "version", "ints", "bools", "strings", "versions")
_LIST_KINDS = frozenset({"ints", "bools", "strings", "versions"})


def validate_slices(slices: Iterable[Mapping[str, Any]]) -> list[str]:
    """Every API-limit violation in ``slices`` (one pool or several), as readable sentences."""
    problems: list[str] = []
    pools: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    names: set[str] = set()
    for s in slices:
        name = str((s.get("metadata") or {}).get("name", ""))
        where = f"slice {name or '<unnamed>'}"
        if not is_dns_subdomain(name):
            problems.append(f"{where}: metadata.name is not a DNS subdomain of at most 253 characters")
        if name in names:
            problems.append(f"{where}: duplicate slice name")
        names.add(name)
        if s.get("apiVersion") != "resource.k8s.io/v1" or s.get("kind") != "ResourceSlice":
            problems.append(f"{where}: apiVersion/kind must be resource.k8s.io/v1 ResourceSlice")
        spec = s.get("spec") or {}
        problems.extend(_check_spec(where, spec))
        pool = spec.get("pool") or {}
        pools.setdefault((str(spec.get("driver")), str(pool.get("name"))), []).append(s)
    for (driver, pool_name), members in sorted(pools.items()):
        problems.extend(_check_pool(driver, pool_name, members))
    return problems


def _check_spec(where: str, spec: Mapping[str, Any]) -> list[str]:
    problems: list[str] = []
    driver = str(spec.get("driver", ""))
    if not is_dns_subdomain(driver, MAX_DRIVER_NAME):
        problems.append(f"{where}: spec.driver {driver!r} is not a DNS subdomain of at most 63 characters")
    node = spec.get("nodeName")
    if not isinstance(node, str) or not is_dns_subdomain(node):
        problems.append(f"{where}: spec.nodeName must be a valid node name")
    pool = spec.get("pool") or {}
    pool_name = str(pool.get("name", ""))
    if (
        not pool_name
        or len(pool_name) > MAX_POOL_NAME
        or not all(is_dns_subdomain(p) for p in pool_name.split("/"))
    ):
        problems.append(f"{where}: pool name {pool_name!r} is invalid")
    generation = pool.get("generation")
    if not isinstance(generation, int) or generation < 0:
        problems.append(f"{where}: pool.generation must be a non-negative integer")
    count = pool.get("resourceSliceCount")
    if not isinstance(count, int) or count < 1:
        problems.append(f"{where}: pool.resourceSliceCount must be > 0")
    devices = spec.get("devices") or []
    advanced = any(_uses_advanced_features(d) for d in devices)
    limit = MAX_DEVICES_PER_SLICE_ADVANCED if advanced else MAX_DEVICES_PER_SLICE
    if len(devices) > limit:
        problems.append(f"{where}: {len(devices)} devices, at most {limit}")
    for device in devices:
        problems.extend(_check_device(where, device))
    return problems


def _uses_advanced_features(device: Mapping[str, Any]) -> bool:
    attrs = device.get("attributes") or {}
    has_list = any(kind in _LIST_KINDS for value in attrs.values() for kind in value)
    return bool(device.get("taints")) or bool(device.get("consumesCounters")) or has_list


def _check_device(where: str, device: Mapping[str, Any]) -> list[str]:
    name = str(device.get("name", ""))
    at = f"{where}: device {name or '<unnamed>'}"
    problems: list[str] = []
    if not is_dns_label(name):
        problems.append(f"{at}: name is not a DNS label of at most 63 characters")
    attrs: Mapping[str, Any] = device.get("attributes") or {}
    capacity: Mapping[str, Any] = device.get("capacity") or {}
    if len(attrs) + len(capacity) > MAX_ATTRIBUTES_AND_CAPACITIES:
        problems.append(f"{at}: {len(attrs) + len(capacity)} attributes+capacities, at most 32")
    values = 0
    for key, value in attrs.items():
        problems.extend(f"{at}: attribute {key!r} {p}" for p in _check_qualified_name(key))
        problems.extend(f"{at}: attribute {key!r} {p}" for p in _check_attribute_value(value))
        values += sum(len(v) if isinstance(v, list) else 1 for v in value.values())
    if values > MAX_ATTRIBUTE_VALUES:
        problems.append(f"{at}: {values} attribute values, at most {MAX_ATTRIBUTE_VALUES}")
    for key, cap in capacity.items():
        problems.extend(f"{at}: capacity {key!r} {p}" for p in _check_qualified_name(key))
        problems.extend(f"{at}: capacity {key!r} {p}" for p in _check_capacity(cap))
    for resource, entry in (device.get("nodeAllocatableResources") or {}).items():
        problems.extend(
            f"{at}: nodeAllocatableResources[{resource}] {p}"
            for p in _check_node_allocatable(resource, entry, capacity)
        )
    taints = device.get("taints") or []
    if len(taints) > MAX_TAINTS:
        problems.append(f"{at}: {len(taints)} taints, at most {MAX_TAINTS}")
    for taint in taints:
        if not taint.get("key") or taint.get("effect") not in ("None", "NoSchedule", "NoExecute"):
            problems.append(f"{at}: taint {taint!r} needs a key and an effect None|NoSchedule|NoExecute")
    return problems


def _check_node_allocatable(
    resource: str, entry: Mapping[str, Any], capacity: Mapping[str, Any]
) -> list[str]:
    """The apiserver's checks of one ``nodeAllocatableResources`` entry (KEP-5517, 1.37)."""
    problems: list[str] = []
    if resource not in ("cpu", "memory") and not resource.startswith("hugepages-"):
        problems.append("is not a node allocatable resource (cpu, memory, hugepages-<size>)")
    mapping, overhead = entry.get("mapping"), entry.get("overhead")
    if mapping is None and overhead is None:
        problems.append("has neither mapping nor overhead")
    cap_key = (mapping or {}).get("capacityKey")
    if cap_key is not None and cap_key not in capacity:
        problems.append(f"names unknown capacity {cap_key!r}")
    if overhead is not None:
        amounts = {k: overhead.get(k) for k in ("perPod", "perContainer") if overhead.get(k) is not None}
        if not amounts:
            problems.append("overhead has neither perPod nor perContainer")
        for key, amount in amounts.items():
            if not isinstance(amount, str) or not QUANTITY.fullmatch(amount) or amount.startswith("-"):
                problems.append(f"overhead.{key} {amount!r} is not a non-negative quantity")
    return problems


def _check_qualified_name(key: str) -> list[str]:
    domain, sep, ident = key.rpartition("/")
    problems: list[str] = []
    if sep and (not domain or not is_dns_subdomain(domain, MAX_DOMAIN_LENGTH)):
        problems.append("has an invalid domain (DNS subdomain of at most 63 characters)")
    if not is_c_identifier(ident, MAX_ID_LENGTH):
        problems.append("is not a C identifier of at most 32 characters after the domain")
    return problems


def _check_attribute_value(value: Mapping[str, Any]) -> list[str]:
    kinds = [k for k in _VALUE_KINDS if value.get(k) is not None]
    if len(kinds) != 1 or len(value) != 1:
        return [f"must have exactly one value field, has {sorted(value)}"]
    kind = kinds[0]
    items = value[kind] if kind in _LIST_KINDS else [value[kind]]
    if kind in _LIST_KINDS and not items:
        return ["is an empty list"]
    return [problem for item in items if (problem := _check_item(kind, item))][:1]


def _check_item(kind: str, item: Any) -> str | None:
    """Why one scalar (or list element) of an attribute is invalid, or None."""
    if kind.startswith("int"):
        ok = isinstance(item, int) and not isinstance(item, bool) and INT64_MIN <= item <= INT64_MAX
        return None if ok else f"value {item!r} is not a 64-bit integer"
    if kind.startswith("bool"):
        return None if isinstance(item, bool) else f"value {item!r} is not a bool"
    if not isinstance(item, str):
        return f"value {item!r} is not a string"
    if len(item.encode("utf-8")) > MAX_STRING_BYTES:
        return f"value is longer than {MAX_STRING_BYTES} bytes"
    return None


def _check_capacity(cap: Mapping[str, Any]) -> list[str]:
    quantities = [cap.get("value")]
    policy = cap.get("requestPolicy") or {}
    quantities.append(policy.get("default"))
    rng = policy.get("validRange") or {}
    quantities.extend([rng.get("min"), rng.get("max"), rng.get("step")])
    quantities.extend(policy.get("validValues") or [])
    problems = [
        f"has an invalid quantity {q!r}"
        for q in quantities
        if q is not None and (not isinstance(q, str) or not QUANTITY.fullmatch(q))
    ]
    if cap.get("value") is None:
        problems.append("has no value")
    return problems


def _check_pool(driver: str, pool: str, members: list[Mapping[str, Any]]) -> list[str]:
    problems: list[str] = []
    at = f"pool {driver}/{pool}"
    pools = [(m.get("spec") or {}).get("pool") or {} for m in members]
    generations = {p.get("generation") for p in pools}
    counts = {p.get("resourceSliceCount") for p in pools}
    if len(generations) != 1:
        problems.append(f"{at}: slices disagree on pool.generation: {sorted(map(str, generations))}")
    if len(counts) != 1:
        problems.append(f"{at}: slices disagree on resourceSliceCount: {sorted(map(str, counts))}")
    elif counts != {len(members)}:
        problems.append(f"{at}: resourceSliceCount {next(iter(counts))} but {len(members)} slices")
    seen: set[str] = set()
    for m in members:
        for device in (m.get("spec") or {}).get("devices") or []:
            name = str(device.get("name"))
            if name in seen:
                problems.append(f"{at}: device name {name} used twice")
            seen.add(name)
    return problems
