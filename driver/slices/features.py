"""Which feature gate guards each ResourceSlice field, and what a slice lost to a gate that is off; pure.

An apiserver with a DRA feature gate off, or of a minor that predates a field, does not refuse a
slice that carries the field: it drops the field and stores the rest (kube-apiserver's
``dropDisabledFields`` for ResourceSlices; an older apiserver drops fields it does not know). The
slice is then valid but means something else: without ``allowMultipleAllocations`` a ``cpu``
device is handed whole to one claim, without ``taints`` an unhealthy device looks healthy. The
publisher compares what it sent with what the apiserver answered (:func:`dropped_fields`) and
this module names the gate behind each lost field (:data:`FEATURES`, one table), so the operator
reads "DRAConsumableCapacity is off", not "some field went missing".

One gate drops a field and leaves the slice invalid: a list attribute (``ints``, ...) without
``DRAListTypeAttributes`` leaves the attribute with no value, and the apiserver answers 422
"must specify one of". :func:`refused_fields` reads that answer back into the same form.

:func:`adapt` is what the publisher sends once it knows a gate is off: the slice in the form the
apiserver keeps (so no write is lost again and again), and where that form would be wrong, less:
a device that must carry a NoSchedule or NoExecute taint is left out while taints cannot be
published, since untainted it would be allocated like a healthy one.

Field paths are written relative to ``spec`` in two forms: the pattern the table is keyed on
(``devices[].capacity[].requestPolicy``: ``[]`` stands for any list element or map key) and the
concrete path a log line shows (``spec.devices[cpu-numa0].capacity[cpus].requestPolicy``).
The table follows kube-apiserver 1.37's ResourceSlice strategy; docs/troubleshooting.md says
what to do about each gate.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from driver.untrusted.values import ascii_int

__all__ = [
    "CONSUMABLE_CAPACITY",
    "DEVICE_TAINTS",
    "FEATURES",
    "FEATURE_NAMES",
    "LIST_TYPE_ATTRIBUTES",
    "NODE_ALLOCATABLE",
    "UNKNOWN",
    "DroppedField",
    "Feature",
    "adapt",
    "dropped_fields",
    "feature",
    "feature_of",
    "refused_by_node",
    "refused_fields",
]

Obj = dict[str, Any]

CONSUMABLE_CAPACITY = "DRAConsumableCapacity"
DEVICE_TAINTS = "DRADeviceTaints"
LIST_TYPE_ATTRIBUTES = "DRAListTypeAttributes"
NODE_ALLOCATABLE = "DRANodeAllocatableResources"
#: the cause of a lost field that no gate of the table guards
UNKNOWN = "unknown"


@dataclass(frozen=True, slots=True)
class Feature:
    """One feature gate of the apiserver and the ResourceSlice fields it guards."""

    name: str
    #: field patterns relative to ``spec`` (module docstring)
    fields: tuple[str, ...]
    #: the first minor whose ``resource.k8s.io/v1`` serves the fields (with the gate on)
    since: str
    #: the gate's stage and default in Kubernetes 1.37
    stage: str
    #: what a lost field changes for numadra's devices, and what numadra does about it
    effect: str


FEATURES: tuple[Feature, ...] = (
    Feature(
        CONSUMABLE_CAPACITY,
        ("devices[].allowMultipleAllocations", "devices[].capacity[].requestPolicy"),
        "1.34",
        "beta, on by default since 1.36",
        "cpu and memory devices are no longer shareable: the scheduler hands such a device whole to "
        "one claim and ignores the claim's capacity requests; numadra refuses to prepare a cpu "
        "device allocated whole",
    ),
    Feature(
        DEVICE_TAINTS,
        ("devices[].taints",),
        "1.34",
        "GA, can still be turned off",
        "device taints are dropped: numadra leaves a device it would taint NoSchedule or NoExecute "
        "out of its slices until the device is healthy again, and nothing is evicted",
    ),
    Feature(
        NODE_ALLOCATABLE,
        ("devices[].nodeAllocatableResources",),
        "1.36",
        "alpha, off by default",
        "--node-allocatable has no effect: the scheduler does not count claimed CPUs and memory, "
        "nor the GPUs' and NICs' --aux-cpus, against the node's allocatable",
    ),
    Feature(
        LIST_TYPE_ATTRIBUTES,
        (
            "devices[].attributes[].ints",
            "devices[].attributes[].bools",
            "devices[].attributes[].strings",
            "devices[].attributes[].versions",
        ),
        "1.36",
        "alpha, off by default",
        "the apiserver refuses every slice with a list attribute (--numa-node-list): nothing is "
        "published until --numa-node-list is removed or the gate is on (apiserver and scheduler)",
    ),
    Feature(
        "DRAPartitionableDevices",
        (
            "sharedCounters",
            "perDeviceNodeSelection",
            "devices[].consumesCounters",
            "devices[].nodeName",
            "devices[].nodeSelector",
            "devices[].allNodes",
        ),
        "1.34",
        "beta, on by default since 1.36",
        "counter sets and per-device node selection are dropped (numadra publishes neither)",
    ),
    Feature(
        "DRADeviceCompatibilityGroups",
        ("devices[].consumesCounters[].compatibilityGroups",),
        "1.37",
        "alpha, off by default",
        "compatibility groups are dropped (numadra publishes none)",
    ),
    Feature(
        "DRADeviceBindingConditions",
        ("devices[].bindsToNode", "devices[].bindingConditions", "devices[].bindingFailureConditions"),
        "1.34",
        "beta, on by default since 1.36",
        "binding conditions are dropped (numadra publishes none)",
    ),
    Feature(
        "DRAPartitionableDevicesType",
        ("partitionTypeAttribute",),
        "1.37",
        "alpha, off by default",
        "the partition type attribute is dropped (numadra publishes none)",
    ),
    Feature(
        "DRAOptionalNodeOperations",
        ("skipNodeOperations",),
        "1.37",
        "alpha, off by default",
        "skipNodeOperations is dropped (numadra publishes none)",
    ),
)
#: every value the ``feature`` label of the metric can take (bounded)
FEATURE_NAMES: tuple[str, ...] = (*(f.name for f in FEATURES), UNKNOWN)

_BY_PATTERN: Mapping[tuple[str, ...], str] = {
    tuple(pattern.split(".")): f.name for f in FEATURES for pattern in f.fields
}
_BY_NAME: Mapping[str, Feature] = {f.name: f for f in FEATURES}
#: fields whose value is a map keyed by a name (attribute, capacity, resource, counter names)
_MAPS = frozenset({"attributes", "capacity", "nodeAllocatableResources", "counters"})
#: taints whose device must not be published untainted (``None`` is only informational)
_BLOCKING_EFFECTS = frozenset({"NoSchedule", "NoExecute"})


@dataclass(frozen=True, slots=True)
class DroppedField:
    """A field of a slice the apiserver did not keep as sent, and the gate that guards it."""

    path: str  # concrete, e.g. spec.devices[cpu-numa0].allowMultipleAllocations
    pattern: str  # as in the table, e.g. devices[].allowMultipleAllocations
    feature: str  # a gate of FEATURES, or UNKNOWN


def feature(name: str) -> Feature | None:
    """The table's entry of gate ``name`` (None for :data:`UNKNOWN` or a name not in the table)."""
    return _BY_NAME.get(name)


def feature_of(pattern: str) -> str:
    """The gate that guards the field ``pattern`` (or a field inside it); :data:`UNKNOWN` if none.

    The longest table pattern that is a prefix of ``pattern`` (segment by segment) wins, so
    ``devices[].consumesCounters[].compatibilityGroups`` is not counted as a counter field.
    """
    segments = tuple(pattern.split("."))
    for end in range(len(segments), 0, -1):
        prefix = segments[:end]
        # an element of a listed field (devices[].taints[]) is guarded as the field is
        name = _BY_PATTERN.get(prefix) or _BY_PATTERN.get((*prefix[:-1], prefix[-1].removesuffix("[]")))
        if name is not None:
            return name
    return UNKNOWN


@dataclass(frozen=True, slots=True)
class _At:
    """Where the diff is: the concrete path, the table pattern, and the field name (for maps)."""

    path: str
    pattern: str
    name: str = ""

    def key(self, key: str) -> _At:
        """A key below here: a map's keys are ``[key]`` (``[]`` in the pattern) and name no field."""
        if self.name in _MAPS:
            return _At(f"{self.path}[{key}]", f"{self.pattern}[]")
        return _At(f"{self.path}.{key}", f"{self.pattern}.{key}" if self.pattern else key, key)

    def item(self, label: str | int) -> _At:
        return _At(f"{self.path}[{label}]", f"{self.pattern}[]")

    def lost(self) -> DroppedField:
        return DroppedField(self.path, self.pattern, feature_of(self.pattern))


def _walk(sent: Any, kept: Any, at: _At, out: list[DroppedField]) -> None:
    """Append every field of ``sent`` that ``kept`` lacks or holds with another value."""
    if isinstance(sent, Mapping):
        _walk_map(sent, kept, at, out)
    elif isinstance(sent, list):
        _walk_list(sent, kept, at, out)
    elif sent != kept:
        out.append(at.lost())


def _walk_map(sent: Mapping[str, Any], kept: Any, at: _At, out: list[DroppedField]) -> None:
    if not isinstance(kept, Mapping):
        out.append(at.lost())
        return
    for key, value in sent.items():
        if key in kept:
            _walk(value, kept[key], at.key(str(key)), out)
        elif value is not None:
            out.append(at.key(str(key)).lost())


def _walk_list(sent: list[Any], kept: Any, at: _At, out: list[DroppedField]) -> None:
    if not isinstance(kept, list):
        out.append(at.lost())
    elif at.name == "devices":  # matched by name: a device the apiserver lost is itself a loss
        stored = {d.get("name"): d for d in kept if isinstance(d, Mapping)}
        for index, device in enumerate(sent):
            name = device.get("name") if isinstance(device, Mapping) else None
            where = at.item(name if isinstance(name, str) else index)
            if name in stored:
                _walk(device, stored[name], where, out)
            else:
                out.append(where.lost())
    elif len(sent) != len(kept) or not all(isinstance(item, Mapping) for item in sent):
        if sent != kept:
            out.append(at.lost())
    else:
        for index, (mine, theirs) in enumerate(zip(sent, kept, strict=True)):
            _walk(mine, theirs, at.item(index), out)


def dropped_fields(sent: Mapping[str, Any], stored: Mapping[str, Any]) -> tuple[DroppedField, ...]:
    """The fields of ``sent``'s spec that ``stored`` (the apiserver's answer) did not keep as sent.

    Fields the apiserver adds (a taint's ``timeAdded``) are not losses. The result is in the
    order of ``sent``; several fields may name one gate.
    """
    out: list[DroppedField] = []
    _walk(sent.get("spec") or {}, stored.get("spec") or {}, _At("spec", "", "spec"), out)
    return tuple(out)


#: kube-apiserver's answer to an attribute left with no value (a list dropped by its gate)
_EMPTY_ATTRIBUTE = re.compile(
    r"spec\.devices\[(?P<index>\d{1,9})\]\.attributes\[(?P<name>[^\]]+)\]: "
    r"(?:Invalid value: \"\"|Required value): must specify one of",
    re.ASCII,
)
_LIST_KINDS = ("ints", "bools", "strings", "versions")


def refused_fields(sent: Mapping[str, Any], message: str) -> tuple[DroppedField, ...]:
    """The list attributes a 422 ``message`` says were left without a value, for slice ``sent``.

    Only an attribute that ``sent`` carries as a list counts (then the gate is
    ``DRAListTypeAttributes``): any other 422 is not about a gate and gives ``()``.
    """
    devices = (sent.get("spec") or {}).get("devices") or []
    out: list[DroppedField] = []
    for match in _EMPTY_ATTRIBUTE.finditer(message):
        index, name = ascii_int(match["index"], what="422 device index", lo=0, hi=10**9), match["name"]
        if index >= len(devices) or not isinstance(devices[index], Mapping):
            continue
        device = devices[index]
        value = (device.get("attributes") or {}).get(name)
        if not isinstance(value, Mapping):
            continue
        for kind in _LIST_KINDS:
            if kind in value:
                pattern = f"devices[].attributes[].{kind}"
                out.append(
                    DroppedField(
                        f"spec.devices[{device.get('name')}].attributes[{name}].{kind}",
                        pattern,
                        feature_of(pattern),
                    )
                )
    return tuple(out)


#: the 403 of the apiserver's NodeDeclaredFeatures admission for a slice with node allocatable
#: resources whose Node does not declare the feature (its kubelet runs without the gate)
_NODE_LACKS = f"does not support {NODE_ALLOCATABLE} feature"


def refused_by_node(sent: Mapping[str, Any], status: int, message: str) -> tuple[DroppedField, ...]:
    """The ``nodeAllocatableResources`` of ``sent`` when a 403 ``message`` says its Node lacks them.

    kube-apiserver 1.37 admits such a slice only for a Node whose ``status.declaredFeatures``
    lists ``DRANodeAllocatableResources`` (the kubelet declares it when its gate is on); any other
    answer gives ``()``.
    """
    if status != 403 or _NODE_LACKS not in message:
        return ()
    pattern = "devices[].nodeAllocatableResources"
    return tuple(
        DroppedField(f"spec.devices[{d.get('name')}].nodeAllocatableResources", pattern, NODE_ALLOCATABLE)
        for d in (sent.get("spec") or {}).get("devices") or ()
        if isinstance(d, Mapping) and d.get("nodeAllocatableResources")
    )


def _strip(node: Any, segments: Sequence[str]) -> None:
    """Remove the field at ``segments`` (a table pattern, split) from ``node`` in place."""
    if not segments or node is None:
        return
    head, rest = segments[0], segments[1:]
    key, many = (head[:-2], True) if head.endswith("[]") else (head, False)
    if not isinstance(node, dict) or key not in node:
        return
    if not rest and not many:
        del node[key]
        return
    value = node[key]
    children: Iterable[Any] = (
        value.values() if isinstance(value, dict) else value if isinstance(value, list) else ()
    )
    for child in children if many else (value,):
        if rest:
            _strip(child, rest)


def _blocking(device: Mapping[str, Any]) -> bool:
    return any(t.get("effect") in _BLOCKING_EFFECTS for t in device.get("taints") or ())


def adapt(slices: Sequence[Mapping[str, Any]], missing: Collection[str]) -> list[Obj]:
    """``slices`` as they can be published correctly while the gates ``missing`` are off (new objects).

    Every field of a missing gate is left out, as the apiserver would drop it; without
    ``DRADeviceTaints`` a device with a NoSchedule or NoExecute taint is left out entirely. List
    attributes are not touched: their loss makes the slice invalid, a configuration error
    (:data:`FEATURES`). The pool keeps its slices, so ``resourceSliceCount`` stays true. Without
    a gate to adapt to, the slices come back as they are (in a new list): the common case costs
    no copy.
    """
    gates = [f for f in FEATURES if f.name in missing and f.name != LIST_TYPE_ATTRIBUTES]
    if not gates:
        return [dict(s) for s in slices]
    out = [copy.deepcopy(dict(s)) for s in slices]
    for obj in out:
        spec = obj.get("spec")
        if not isinstance(spec, dict):
            continue
        if DEVICE_TAINTS in missing and isinstance(spec.get("devices"), list):
            spec["devices"] = [d for d in spec["devices"] if not (isinstance(d, Mapping) and _blocking(d))]
        for gate in gates:
            for pattern in gate.fields:
                _strip(spec, pattern.split("."))
    return out
