"""The pure diff of a pool's slices: desired vs stored -> the writes that make them match.

Rules (the resource.k8s.io/v1 pool semantics: a consumer trusts a pool only when it sees
``resourceSliceCount`` slices of its highest ``pool.generation``):

* Nothing changed means an empty plan, so a republish of the same inventory costs one LIST and
  zero writes. Slices are matched by their deterministic names; taint ``timeAdded`` and
  server-set metadata are ignored and carried over.
* ``pool.generation`` starts at the highest stored one and goes up by one when slices are added or
  removed or more than one slice changes; then every slice of the pool carries the new generation
  and the same ``resourceSliceCount``. One changed slice keeps the generation (one write is atomic
  for consumers), as the Go resourceslice controller does.
* The plan lists its writes in the order they must go out: delete obsolete -> update -> create,
  so a consumer never sees more slices than ``resourceSliceCount`` promises at the new generation.

Pure (no I/O, no clock), so :mod:`driver.slices.publisher` only runs what this module decides.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from driver.errors import UntrustedValueError
from driver.untrusted.values import bounded_int, is_object, object_or_empty

__all__ = ["SlicePlan", "plan_sync", "slice_content", "stored_resource_version"]

Obj = dict[str, Any]


@dataclass(frozen=True, slots=True)
class SlicePlan:
    """The writes that make the stored slices match the desired ones, in execution order."""

    deletes: tuple[Obj, ...] = ()  # stored objects (uid + resourceVersion used as preconditions)
    updates: tuple[Obj, ...] = ()  # full objects carrying the stored resourceVersion
    creates: tuple[Obj, ...] = ()
    generation: int = 0

    @property
    def empty(self) -> bool:
        """True when the API already matches: no write at all."""
        return not (self.deletes or self.updates or self.creates)


def slice_content(obj: Mapping[str, Any], *, with_generation: bool = True) -> str:
    """What we own of a slice, canonically: spec (minus taint timeAdded), owners, labels.

    Runs for every desired and stored slice on every sync, so it copies only what it changes
    (a deep copy of a full slice cost more than the JSON encoding itself). Total over any JSON: a
    stored slice is the apiserver's answer, and a part of the wrong type (a string where the spec
    belongs) is kept as it came, so the content differs from ours and the slice is rewritten,
    instead of an ``AttributeError`` stopping the sync.
    """
    spec: Any = obj.get("spec")
    if spec is None:
        spec = {}
    if is_object(spec):
        spec = dict(spec)
        devices = spec.get("devices")
        if isinstance(devices, list):
            spec["devices"] = [_without_time_added(device) for device in devices]
        elif not devices:
            spec["devices"] = []
        if not with_generation:
            pool = spec.get("pool")
            if pool is None or is_object(pool):
                spec["pool"] = {**(pool or {}), "generation": 0}
    meta = object_or_empty(obj.get("metadata"))
    refs: Any = meta.get("ownerReferences") or []
    if isinstance(refs, list):
        keys = ("apiVersion", "kind", "name", "uid", "controller")
        refs = [{k: ref.get(k) for k in keys} if is_object(ref) else ref for ref in refs]
    return json.dumps([spec, refs, meta.get("labels") or {}], sort_keys=True)


def _without_time_added(device: object) -> object:
    """The device as compared: its taints without ``timeAdded`` (the apiserver sets it); a device
    or taint of the wrong type as it came."""
    if not is_object(device):
        return device
    taints = device.get("taints")
    if not taints or not isinstance(taints, list):
        return device
    return {
        **device,
        "taints": [{k: v for k, v in t.items() if k != "timeAdded"} if is_object(t) else t for t in taints],
    }


def _generation(obj: Mapping[str, Any], default: int = 0) -> int:
    """``spec.pool.generation``; ``default`` when it is absent, and 0 when it is no integer (a
    stored slice is the apiserver's answer: whatever it holds must not stop the sync)."""
    found = object_or_empty(object_or_empty(obj.get("spec")).get("pool")).get("generation", default)
    try:
        return bounded_int(found, what="spec.pool.generation", lo=0, hi=(1 << 63) - 1)
    except UntrustedValueError:
        return 0


def _taints(obj: Mapping[str, Any]) -> Iterator[tuple[tuple[str, str, str, str], dict[str, Any]]]:
    """(device name, key, value, effect) and the taint dict, for every taint of a slice; a device,
    taint or name of the wrong type (a stored slice is the apiserver's answer) is passed over."""
    devices = object_or_empty(obj.get("spec")).get("devices")
    for device in devices if isinstance(devices, list) else ():
        taints = device.get("taints") if is_object(device) else None
        for taint in taints if isinstance(taints, list) else ():
            if not isinstance(taint, dict):
                continue
            identity = (device.get("name", ""), taint.get("key", ""), taint.get("value", ""))
            key = (*identity, taint.get("effect", ""))
            if all(isinstance(part, str) for part in key):
                yield key, taint


def _carry_time_added(desired: Obj, stored: Mapping[str, Any]) -> None:
    """Keep each taint's ``timeAdded`` (NoExecute tolerations count from it) across updates."""
    known = {key: taint["timeAdded"] for key, taint in _taints(stored) if taint.get("timeAdded")}
    for key, taint in _taints(desired):
        if key in known and not taint.get("timeAdded"):
            taint["timeAdded"] = known[key]


def _writable_copy(obj: Mapping[str, Any]) -> Obj:
    """A copy of a desired slice that the plan may write to without touching the caller's.

    The plan writes the metadata (owner, resourceVersion), the pool (count, generation) and the
    taints of a device (``timeAdded``), so exactly those are copied; the rest (attributes,
    capacities: almost every byte of a slice) is shared. A deep copy of every slice on every
    sync cost more than the sync's diff and grew with the node's devices.
    """
    want = dict(obj)
    want["metadata"] = dict(want.get("metadata") or {})
    spec = want["spec"] = dict(want["spec"])
    spec["pool"] = dict(spec.get("pool") or {})
    devices = spec.get("devices")
    if devices is not None:
        spec["devices"] = [
            {**d, "taints": [dict(t) for t in d["taints"]]} if d.get("taints") else d for d in devices
        ]
    return want


def _stored_name(obj: object) -> str:
    """The name of a stored slice; "" for one with none (or of the wrong type), which no write of
    ours can address: the diff passes it over."""
    name = object_or_empty(object_or_empty(obj).get("metadata")).get("name")
    return name if isinstance(name, str) else ""


def stored_resource_version(obj: Mapping[str, Any]) -> str:
    """``metadata.resourceVersion`` of a stored slice; "" when it has none (the write then carries
    no precondition the apiserver could match, and the apiserver answers it with a conflict)."""
    version = object_or_empty(obj.get("metadata")).get("resourceVersion")
    return version if isinstance(version, str) else ""


def plan_sync(
    desired: Sequence[Mapping[str, Any]],
    stored: Sequence[Mapping[str, Any]],
    *,
    owner: Mapping[str, Any] | None = None,
    accepted: Mapping[str, tuple[str, str]] | None = None,
) -> SlicePlan:
    """Pure diff of desired vs stored slices (see the module docstring for the rules).

    ``owner`` is added as the only owner reference. ``accepted`` maps a slice name to (content we
    sent, content the apiserver kept), both without the generation, when the two differed (fields
    dropped for disabled features): that pair counts as "unchanged", so it is not rewritten in a loop.
    """
    accepted = accepted or {}
    by_name = {name: s for s in stored if (name := _stored_name(s))}
    wanted: list[Obj] = []
    for obj in desired:
        want = _writable_copy(obj)
        meta = want["metadata"]
        if owner is not None:
            meta["ownerReferences"] = [dict(owner)]
        want["spec"]["pool"]["resourceSliceCount"] = len(desired)
        wanted.append(want)
    names = {str(w["metadata"]["name"]) for w in wanted}
    obsolete = [s for name, s in sorted(by_name.items()) if name not in names]
    stored_gens = [_generation(s) for s in by_name.values()]
    wanted_gens = [_generation(w, default=1) for w in wanted]
    base = max([1, *stored_gens, *wanted_gens])

    def same_content(name: str, want: Obj, have: Mapping[str, Any]) -> bool:
        mine, theirs = slice_content(want, with_generation=False), slice_content(have, with_generation=False)
        return mine == theirs or accepted.get(name) == (mine, theirs)

    creates = [w for w in wanted if w["metadata"]["name"] not in by_name]
    changed = {
        name
        for w in wanted
        if (name := str(w["metadata"]["name"])) in by_name and not same_content(name, w, by_name[name])
    }
    generation = base + 1 if stored and (creates or obsolete or len(changed) > 1) else base
    updates: list[Obj] = []
    for want in wanted:
        want["spec"]["pool"]["generation"] = generation
        name = str(want["metadata"]["name"])
        have = by_name.get(name)
        if have is None or (name not in changed and _generation(have) == generation):
            continue
        _carry_time_added(want, have)
        want["metadata"]["resourceVersion"] = stored_resource_version(have)
        updates.append(want)
    return SlicePlan(
        tuple(copy.deepcopy(dict(o)) for o in obsolete), tuple(updates), tuple(creates), generation
    )
