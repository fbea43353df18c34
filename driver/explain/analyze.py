"""Why a claim can or cannot get this node's devices: the logic behind ``numadra explain``.

The steps mirror what the scheduler's allocator checks, per request and per device:

1. the device class's selectors (wrong type shows up here), then the request's own selectors;
2. taints the request does not tolerate (health taints are reported as "unhealthy");
3. exclusive devices already prepared for another claim on this node (from the journal);
4. requested capacity against the device's total and, for ``cpus``, against what prepared claims
   already hold;
5. then across requests: ``matchAttribute`` constraints (NUMA alignment) remove devices whose
   value no other request in the constraint can match.

It is an explanation, not an allocator: it evaluates each request against this node only, treats
selectors it cannot evaluate as "unknown" instead of guessing, and does not search combinations
(e.g. two requests competing for the same exclusive device are not detected).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from fractions import Fraction
from typing import Any

from driver.errors import ConfigError, UntrustedValueError
from driver.explain.cel import evaluate
from driver.explain.devices import DeviceView, Taint
from driver.explain.model import (
    AllocatedDevice,
    ClaimExplanation,
    DeviceCheck,
    PreparedDeviceView,
    PreparedPinning,
    PreparedView,
    Reason,
    ReasonKind,
    RequestExplanation,
    RequestStatus,
    Verdict,
)
from driver.kube.quantity import format_quantity, parse_quantity
from driver.kube.types import allocation_results
from driver.pinning.types import format_cpulist
from driver.state.entry import JournalEntry
from driver.untrusted.values import bounded_int

__all__ = ["DeviceClass", "Usage", "default_device_classes", "explain_claim", "usage_from_journal"]

_NUMA_ATTRIBUTE = "resource.kubernetes.io/numaNode"
#: device name -> {qualified attribute -> value} for the attributes constraints look at
_AttributeValues = Mapping[str, Mapping[str, Any]]
_BLOCKING_EFFECTS = ("NoSchedule", "NoExecute")

#: more devices than any request can ask for (the API allows far fewer per claim)
_MAX_COUNT = 1 << 16


@dataclass(frozen=True, slots=True)
class DeviceClass:
    """A DeviceClass as far as selection goes: its name and CEL selectors."""

    name: str
    selectors: tuple[str, ...]

    @classmethod
    def from_object(cls, obj: Mapping[str, Any]) -> DeviceClass:
        """From a ``resource.k8s.io/v1`` DeviceClass JSON object."""
        selectors = tuple(
            str(s["cel"]["expression"]) for s in (obj.get("spec") or {}).get("selectors") or () if "cel" in s
        )
        return cls(str(obj["metadata"]["name"]), selectors)


def default_device_classes(driver_name: str) -> dict[str, DeviceClass]:
    """The DeviceClasses deploy/ installs: ``gpu.<driver>``, ``nic.<driver>``, ``cpu.<driver>``,
    ``memory.<driver>`` and one per GPU vendor (``nvidia-gpu.<driver>``, ...; see ``VENDOR_GPU_CLASSES``)."""
    from driver.inventory.gpus import VENDOR_GPU_CLASSES

    attrs = f'device.attributes["{driver_name}"]'
    classes = {
        f"{t}.{driver_name}": DeviceClass(
            f"{t}.{driver_name}", (f'device.driver == "{driver_name}" && {attrs}.type == "{t}"',)
        )
        for t in ("gpu", "nic", "cpu", "memory")
    }
    for vc in VENDOR_GPU_CLASSES:
        expr = f'device.driver == "{driver_name}" && {attrs}.type == "gpu" && {attrs}.vendor == "{vc.vendor}"'
        if vc.kernel_driver:
            expr += f' && {attrs}.driver == "{vc.kernel_driver}"'
        classes[f"{vc.prefix}.{driver_name}"] = DeviceClass(f"{vc.prefix}.{driver_name}", (expr,))
    return classes


@dataclass(frozen=True, slots=True)
class Usage:
    """What prepared claims on this node already hold."""

    #: exclusive device name -> "namespace/name" of the claim holding it
    held_devices: Mapping[str, str]
    #: NUMA node -> CPUs pinned by prepared claims on it
    taken_cpus: Mapping[int, int]
    #: device name -> who owns it instead ("DRA driver gpu.nvidia.com"): the driver withholds it
    #: from its slices and refuses it to new claims (driver.slices.ownership)
    withheld: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def empty(cls) -> Usage:
        """Nothing prepared."""
        return cls({}, {})


def usage_from_journal(
    entries: Iterable[JournalEntry],
    devices: Sequence[DeviceView],
    *,
    exclude_uid: str = "",
    cpu_numa: Mapping[int, int] | None = None,
) -> Usage:
    """Usage from journal entries other than ``exclude_uid`` (the claim being explained).

    Taken CPUs are attributed to NUMA nodes through ``cpu_numa`` (CPU id -> node, from discovery)
    when given, else through each assignment's memory nodes when it has exactly one.
    """
    shared = {d.name for d in devices if d.allow_multiple_allocations}
    held: dict[str, str] = {}
    taken: dict[int, int] = {}
    for entry in entries:
        if entry.uid == exclude_uid:
            continue
        for dev in entry.devices:
            if dev.device_name not in shared and dev.device_name not in entry.admin_devices:
                held[dev.device_name] = f"{entry.namespace}/{entry.name}"
        counted: set[int] = set()  # a pod shared pool (aux CPUs too) is in each of its requests
        for a in entry.pinning.assignments if entry.pinning else ():
            for cpu in a.cpus - counted:
                counted.add(cpu)
                node = cpu_numa.get(cpu) if cpu_numa is not None else None
                if node is None and len(a.mems) == 1:
                    node = next(iter(a.mems))
                if node is not None:
                    taken[node] = taken.get(node, 0) + 1
    return Usage(held, taken)


# ----------------------------------------------------------------------------- request parsing
@dataclass(frozen=True, slots=True)
class _Request:
    name: str
    device_class: str
    selectors: tuple[str, ...]
    mode: str
    count: int
    tolerations: tuple[Mapping[str, Any], ...]
    capacity: Mapping[str, Fraction]
    admin_access: bool


def _parse_request(name: str, body: Mapping[str, Any]) -> _Request:
    selectors = tuple(str(s["cel"]["expression"]) for s in body.get("selectors") or () if "cel" in s)
    capacity: dict[str, Fraction] = {}
    for key, value in ((body.get("capacity") or {}).get("requests") or {}).items():
        try:
            capacity[str(key)] = parse_quantity(str(value))
        except ValueError as exc:
            raise ConfigError(f"request {name}: capacity {key}: {exc}") from exc
    mode = str(body.get("allocationMode") or "ExactCount")
    try:
        count = bounded_int(body.get("count") or 1, what=f"request {name}: count", lo=1, hi=_MAX_COUNT)
    except UntrustedValueError as exc:
        raise ConfigError(str(exc)) from exc
    return _Request(
        name=name,
        device_class=str(body.get("deviceClassName", "")),
        selectors=selectors,
        mode=mode,
        count=count if mode == "ExactCount" else 0,
        tolerations=tuple(body.get("tolerations") or ()),
        capacity=capacity,
        admin_access=bool(body.get("adminAccess", False)),
    )


# ----------------------------------------------------------------------------- per-device checks
def _tolerates(tolerations: Sequence[Mapping[str, Any]], taint: Taint) -> bool:
    for t in tolerations:
        effect = t.get("effect") or ""
        if effect and effect != taint.effect:
            continue
        key = t.get("key") or ""
        if (t.get("operator") or "Equal") == "Exists":
            if not key or key == taint.key:
                return True
        elif key == taint.key and (t.get("value") or "") == taint.value:
            return True
    return False


def _is_type_field(source: str) -> bool:
    """True for ``device.attributes["<domain>"].type`` (or ``["type"]``): the class's type check."""
    return source.endswith((".type", '["type"]'))


def _is_health_taint(taint: Taint) -> bool:
    """numadra.dev/unhealthy, and other drivers' health taints by the same naming habit."""
    return "health" in taint.key.lower()


class _Checker:
    def __init__(self, classes: Mapping[str, DeviceClass], usage: Usage) -> None:
        self.classes = classes
        self.usage = usage

    def selectors(self, device: DeviceView, exprs: Sequence[str], source: str) -> list[Reason]:
        reasons = []
        for expr in exprs:
            outcome = evaluate(expr, device.cel())
            if outcome.matches is True:
                continue
            if outcome.matches is None:
                reasons.append(Reason(ReasonKind.CANNOT_EVALUATE, f"{source}: {outcome.why}"))
            elif outcome.error:
                reasons.append(Reason(ReasonKind.CEL_ERROR, f"{source}: {outcome.why}"))
            elif source.startswith("class") and any(_is_type_field(c) for c in outcome.culprits):
                reasons.append(Reason(ReasonKind.WRONG_TYPE, f"{source}: {outcome.why}"))
            else:
                kind = ReasonKind.CLASS_SELECTOR if source.startswith("class") else ReasonKind.SELECTOR
                reasons.append(Reason(kind, f"{source}: {outcome.why}"))
        return reasons

    def check(self, request: _Request, cls: DeviceClass, device: DeviceView) -> DeviceCheck:
        reasons = self.selectors(device, cls.selectors, f"class {cls.name}")
        if not any(r.kind is ReasonKind.WRONG_TYPE for r in reasons):
            reasons += self.selectors(device, request.selectors, "request selector")
        if not any(r.kind in (ReasonKind.WRONG_TYPE, ReasonKind.CLASS_SELECTOR) for r in reasons):
            reasons += self._taints(request, device)
            reasons += self._withheld(device)
            reasons += self._usage(request, device)
            reasons += self._capacity(request, device)
        blocking = [r for r in reasons if r.kind is not ReasonKind.CANNOT_EVALUATE]
        verdict = Verdict.EXCLUDED if blocking else Verdict.UNKNOWN if reasons else Verdict.ELIGIBLE
        return DeviceCheck(device.name, device.type, verdict, tuple(reasons))

    def _taints(self, request: _Request, device: DeviceView) -> list[Reason]:
        out = []
        for taint in device.taints:
            if taint.effect not in _BLOCKING_EFFECTS or _tolerates(request.tolerations, taint):
                continue
            if _is_health_taint(taint):
                out.append(Reason(ReasonKind.UNHEALTHY, f"unhealthy: taint {taint} is not tolerated"))
            else:
                out.append(Reason(ReasonKind.TAINTED, f"taint {taint} is not tolerated by the request"))
        return out

    def _withheld(self, device: DeviceView) -> list[Reason]:
        owner = self.usage.withheld.get(device.name)
        if owner is None:
            return []
        return [
            Reason(
                ReasonKind.WITHHELD, f"withheld: {owner} owns it on this node, numadra does not publish it"
            )
        ]

    def _usage(self, request: _Request, device: DeviceView) -> list[Reason]:
        holder = self.usage.held_devices.get(device.name)
        if holder is None or request.admin_access or device.allow_multiple_allocations:
            return []
        return [Reason(ReasonKind.IN_USE, f"in use: prepared on this node for claim {holder}")]

    def _capacity(self, request: _Request, device: DeviceView) -> list[Reason]:
        out = []
        for key, wanted in request.capacity.items():
            total = device.capacity_of(key)
            if total is None:
                out.append(Reason(ReasonKind.CAPACITY, f"has no capacity {key!r}"))
                continue
            if wanted > total:
                out.append(
                    Reason(
                        ReasonKind.CAPACITY,
                        f"capacity {key}: asks {format_quantity(wanted)}, "
                        f"device has {format_quantity(total)}",
                    )
                )
                continue
            numa = device.attribute(_NUMA_ATTRIBUTE)
            if key.rpartition("/")[2] == "cpus" and device.type == "cpu" and isinstance(numa, int):
                taken = self.usage.taken_cpus.get(numa, 0)
                free = total - taken
                if wanted > free:
                    out.append(
                        Reason(
                            ReasonKind.CAPACITY,
                            f"capacity cpus exhausted: asks {format_quantity(wanted)}, "
                            f"{format_quantity(max(free, Fraction(0)))} of {format_quantity(total)} free "
                            f"({taken} held by prepared claims on NUMA node {numa})",
                        )
                    )
        return out


def _status(checks: Sequence[DeviceCheck], need: int) -> RequestStatus:
    eligible = sum(c.verdict is Verdict.ELIGIBLE for c in checks)
    unknown = sum(c.verdict is Verdict.UNKNOWN for c in checks)
    if eligible >= need:
        return RequestStatus.SATISFIABLE
    if eligible + unknown >= need:
        return RequestStatus.UNKNOWN
    return RequestStatus.UNSATISFIABLE


def _need(req: RequestExplanation) -> int:
    return max(req.count, 1)


def _explain_request(
    request: _Request, devices: Sequence[DeviceView], checker: _Checker
) -> RequestExplanation:
    cls = checker.classes.get(request.device_class)
    base = RequestExplanation(
        request.name, request.device_class, request.mode, request.count, RequestStatus.UNKNOWN
    )
    if cls is None:
        note = (
            f"device class {request.device_class!r} is not one of this driver's classes "
            "(another driver's, or pass its definition with --device-classes): not evaluated"
        )
        return replace(base, status=RequestStatus.NOT_EVALUATED, notes=(note,))
    checks = tuple(checker.check(request, cls, d) for d in devices)
    notes: tuple[str, ...] = ()
    if request.admin_access:
        notes = ("adminAccess: devices in use by other claims stay eligible",)
    if request.mode == "All":
        notes += ("allocationMode All: every matching device must be allocatable",)
    return replace(base, checks=checks, status=_status(checks, _need(base)), notes=notes)


# ----------------------------------------------------------------------------- constraints
def _chosen(req: RequestExplanation) -> RequestExplanation:
    """For a firstAvailable request, the subrequest the allocator would try to use."""
    if not req.subrequests:
        return req
    for sub in req.subrequests:
        if sub.status is RequestStatus.SATISFIABLE:
            return sub
    return req.subrequests[0]


@dataclass(frozen=True, slots=True)
class _Member:
    """One request (or the chosen subrequest) taking part in a matchAttribute constraint."""

    index: int  # position of the top-level request
    req: RequestExplanation
    counts: Mapping[Any, int]  # attribute value -> eligible devices with it
    values: Mapping[str, Any]  # eligible device -> its value (None: attribute missing)


def _members(
    requests: Sequence[RequestExplanation], names: Sequence[str], attribute: str, values: _AttributeValues
) -> list[_Member] | str:
    top = {r.name: i for i, r in enumerate(requests)}
    out: list[_Member] = []
    for name in names or list(top):
        parent = name.split("/", 1)[0]
        if parent not in top:
            continue
        req = requests[top[parent]]
        sub = _chosen(req) if "/" not in name else next((s for s in req.subrequests if s.name == name), req)
        if sub.status is RequestStatus.NOT_EVALUATED:
            continue
        counts: dict[Any, int] = {}
        per_device: dict[str, Any] = {}
        for check in sub.checks:
            if check.verdict is not Verdict.ELIGIBLE:
                continue
            value = values.get(check.device, {}).get(attribute)
            if isinstance(value, list):
                return f"matchAttribute {attribute}: list values are not evaluated"
            per_device[check.device] = value
            if value is not None:
                counts[value] = counts.get(value, 0) + 1
        out.append(_Member(top[parent], sub, counts, per_device))
    return out


def _constrain(
    member: _Member, others: Sequence[_Member], feasible: set[Any], attribute: str
) -> RequestExplanation:
    short = attribute.rpartition("/")[2]
    kind = ReasonKind.NUMA_MISMATCH if attribute == _NUMA_ATTRIBUTE else ReasonKind.CONSTRAINT
    checks = []
    for check in member.req.checks:
        value = member.values.get(check.device)
        if check.verdict is not Verdict.ELIGIBLE or (value is not None and value in feasible):
            checks.append(check)
            continue
        if value is None:
            message = f"matchAttribute {attribute}: device has no {short}"
        else:
            short_of = [
                f"request {o.req.name!r} has {o.counts.get(value, 0)} eligible with {short} {value} "
                f"(needs {_need(o.req)})"
                for o in others
                if o.counts.get(value, 0) < _need(o.req)
            ]
            message = f"matchAttribute {attribute}: {short} is {value}, but " + "; ".join(short_of)
        checks.append(
            replace(check, verdict=Verdict.EXCLUDED, reasons=(*check.reasons, Reason(kind, message)))
        )
    return replace(member.req, checks=tuple(checks), status=_status(checks, _need(member.req)))


def _apply_match_attribute(
    requests: list[RequestExplanation], names: Sequence[str], attribute: str, values: _AttributeValues
) -> tuple[list[RequestExplanation], str | None]:
    """Exclude devices whose value of ``attribute`` the other requests of the constraint cannot match."""
    members = _members(requests, names, attribute, values)
    if isinstance(members, str):
        return requests, members
    if len(members) < 2:
        return requests, None
    candidates: set[Any] = set().union(*(m.counts for m in members))
    feasible = {v for v in candidates if all(m.counts.get(v, 0) >= _need(m.req) for m in members)}
    new = list(requests)
    for member in members:
        updated = _constrain(member, [m for m in members if m is not member], feasible, attribute)
        parent = new[member.index]
        if parent.subrequests:
            subs = tuple(updated if s.name == updated.name else s for s in parent.subrequests)
            new[member.index] = replace(parent, subrequests=subs, status=_parent_status(subs))
        else:
            new[member.index] = updated
    if feasible:
        return new, None
    short = attribute.rpartition("/")[2]
    return new, f"matchAttribute {attribute}: no single {short} serves " + ", ".join(
        m.req.name for m in members
    )


def _parent_status(subs: Sequence[RequestExplanation]) -> RequestStatus:
    statuses = [s.status for s in subs]
    if RequestStatus.SATISFIABLE in statuses:
        return RequestStatus.SATISFIABLE
    if RequestStatus.UNKNOWN in statuses:
        return RequestStatus.UNKNOWN
    if all(s is RequestStatus.NOT_EVALUATED for s in statuses):
        return RequestStatus.NOT_EVALUATED
    return RequestStatus.UNSATISFIABLE


# ----------------------------------------------------------------------------- the claim
def _allocated(claim: Mapping[str, Any], driver_name: str) -> tuple[AllocatedDevice, ...]:
    results = allocation_results(claim)
    return tuple(
        AllocatedDevice(str(r.get("request", "")), str(r.get("pool", "")), str(r.get("device", "")))
        for r in results
        if r.get("driver") == driver_name
    )


def _prepared(entry: JournalEntry | None) -> PreparedView | None:
    if entry is None:
        return None
    devices = tuple(
        PreparedDeviceView(d.device_name, d.pool_name, d.request_names, d.cdi_device_ids)
        for d in entry.devices
    )
    pinning = tuple(
        PreparedPinning(a.request, a.mode.value, format_cpulist(a.cpus), format_cpulist(a.mems))
        for a in (entry.pinning.assignments if entry.pinning else ())
    )
    return PreparedView(devices, pinning)


def _mark_allocated(req: RequestExplanation, allocated: Sequence[AllocatedDevice]) -> RequestExplanation:
    names = {a.device for a in allocated if a.request == req.name or a.request.split("/", 1)[0] == req.name}
    if not names:
        return req
    checks = tuple(replace(c, allocated=True) if c.device in names else c for c in req.checks)
    subs = tuple(_mark_allocated(s, [a for a in allocated if a.request == s.name]) for s in req.subrequests)
    return replace(req, checks=checks, subrequests=subs)


def explain_claim(
    claim: Mapping[str, Any],
    devices: Sequence[DeviceView],
    *,
    driver_name: str,
    classes: Mapping[str, DeviceClass] | None = None,
    usage: Usage | None = None,
    journal_entry: JournalEntry | None = None,
) -> ClaimExplanation:
    """Explain ``claim`` (a ``resource.k8s.io/v1`` ResourceClaim JSON object) against ``devices``.

    ``classes`` defaults to :func:`default_device_classes`; ``usage`` to nothing prepared;
    ``journal_entry`` is the claim's own entry when it is prepared here.
    """
    meta = claim.get("metadata") or {}
    spec_devices = (claim.get("spec") or {}).get("devices") or {}
    if not isinstance(spec_devices, Mapping):
        raise ConfigError("claim: spec.devices is not an object")
    checker = _Checker(
        classes if classes is not None else default_device_classes(driver_name), usage or Usage.empty()
    )
    ours = [d for d in devices if d.driver == driver_name]
    values = {d.name: {a: d.attribute(a) for a in _constraint_attributes(spec_devices)} for d in ours}
    requests: list[RequestExplanation] = []
    for raw in spec_devices.get("requests") or ():
        name = str(raw.get("name", ""))
        if "exactly" in raw:
            requests.append(_explain_request(_parse_request(name, raw["exactly"]), ours, checker))
        elif "firstAvailable" in raw:
            subs = tuple(
                _explain_request(_parse_request(f"{name}/{s.get('name', '')}", s), ours, checker)
                for s in raw["firstAvailable"]
            )
            first = subs[0] if subs else None
            requests.append(
                RequestExplanation(
                    name,
                    first.device_class if first else "",
                    "FirstAvailable",
                    first.count if first else 0,
                    _parent_status(subs),
                    subrequests=subs,
                )
            )
        else:
            raise ConfigError(f"claim request {name!r}: neither 'exactly' nor 'firstAvailable'")
    notes: list[str] = []
    for constraint in spec_devices.get("constraints") or ():
        attribute = constraint.get("matchAttribute")
        if attribute:
            names = constraint.get("requests") or []
            requests, note = _apply_match_attribute(requests, names, str(attribute), values)
            if note:
                notes.append(note)
        elif constraint.get("distinctAttribute"):
            notes.append(f"distinctAttribute {constraint['distinctAttribute']}: not evaluated")
    allocated = _allocated(claim, driver_name)
    requests = [_mark_allocated(r, allocated) for r in requests]
    if not ours:
        notes.append(f"no devices of driver {driver_name} on this node")
    return ClaimExplanation(
        namespace=str(meta.get("namespace", "")),
        name=str(meta.get("name", "")),
        uid=str(meta.get("uid", "")),
        requests=tuple(requests),
        allocated=allocated,
        prepared=_prepared(journal_entry),
        notes=tuple(notes),
    )


def _constraint_attributes(spec_devices: Mapping[str, Any]) -> set[str]:
    return {
        str(c["matchAttribute"]) for c in spec_devices.get("constraints") or () if c.get("matchAttribute")
    }
