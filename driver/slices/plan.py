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
from driver.untrusted.values import bounded_int

__all__ = ["SlicePlan", "plan_sync", "slice_content"]

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
    (a deep copy of a full slice cost more than the JSON encoding itself).
    """
    spec = dict(obj.get("spec") or {})
    spec["devices"] = [_without_time_added(device) for device in spec.get("devices") or []]
    if not with_generation:
        spec["pool"] = {**(spec.get("pool") or {}), "generation": 0}
    meta = obj.get("metadata") or {}
    owners = [
        {k: ref.get(k) for k in ("apiVersion", "kind", "name", "uid", "controller")}
        for ref in meta.get("ownerReferences") or []
    ]
    return json.dumps([spec, owners, meta.get("labels") or {}], sort_keys=True)


def _without_time_added(device: Mapping[str, Any]) -> Mapping[str, Any]:
    """The device as compared: its taints without ``timeAdded`` (the apiserver sets it)."""
    taints = device.get("taints")
    if not taints:
        return device
    return {**device, "taints": [{k: v for k, v in t.items() if k != "timeAdded"} for t in taints]}


def _generation(obj: Mapping[str, Any], default: int = 0) -> int:
    """``spec.pool.generation``; ``default`` when it is absent, and 0 when it is no integer (a
    stored slice is the apiserver's answer: whatever it holds must not stop the sync)."""
    found = ((obj.get("spec") or {}).get("pool") or {}).get("generation", default)
    try:
        return bounded_int(found, what="spec.pool.generation", lo=0, hi=(1 << 63) - 1)
    except UntrustedValueError:
        return 0


def _taints(obj: Mapping[str, Any]) -> Iterator[tuple[tuple[str, str, str, str], dict[str, Any]]]:
    """(device name, key, value, effect) and the taint dict, for every taint of a slice."""
    for device in (obj.get("spec") or {}).get("devices") or []:
        for taint in device.get("taints") or []:
            identity = (device.get("name", ""), taint.get("key", ""), taint.get("value", ""))
            yield (*identity, taint.get("effect", "")), taint


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
    by_name = {str(s["metadata"]["name"]): s for s in stored}
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
    stored_gens = [_generation(s) for s in stored]
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
        want["metadata"]["resourceVersion"] = have["metadata"]["resourceVersion"]
        updates.append(want)
    return SlicePlan(
        tuple(copy.deepcopy(dict(o)) for o in obsolete), tuple(updates), tuple(creates), generation
    )
