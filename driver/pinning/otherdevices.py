"""Which NUMA nodes another DRA driver's devices in a pod sit on, per container, read on demand.

A pod that asks for ``gpu.nvidia.com`` GPUs (through a ResourceClaim, or through that driver's
extended resource, for which the scheduler makes a claim of its own) carries no numadra marker,
so the NRI plugin learns what it holds from the apiserver, once per pod:

* **the pod** (``GET pods/<name>``, its UID checked): which claims each container uses
  (``spec.containers[].resources.claims``, init containers too), which ResourceClaim each of
  the pod's claims is (``spec.resourceClaims[].resourceClaimName``, or
  ``status.resourceClaimStatuses`` for one made from a template), and the extended-resource claim
  (``status.extendedResourceClaimStatus``: its name, and which of its requests each container
  holds);
* **its claims** (``GET resourceclaims/<name>`` in the pod's namespace): the claim must be reserved
  for the pod (``status.reservedFor`` names it, or its PodGroup), and its
  ``status.allocation.devices.results`` say which devices (driver, pool, device) each request got;
* **each device's node**, without a read: the other driver's ResourceSlices of this node, which
  the foreign-slices watcher keeps (:class:`DevicePlaces`, built by
  :func:`driver.slices.places.device_places`): the standard ``resource.kubernetes.io/numaNode``,
  else the standard ``pciBusID`` resolved through this host's
  ``/sys/bus/pci/devices/<bdf>/numa_node`` (:class:`SysfsPciNodes`).

Everything read here was written by others (the pod by its owner, slices by another driver), so
each field is checked for its type and every list is bounded; what cannot be used is a
*problem* (a text naming the field), never an exception. The reads run only on the NRI plugin's
read pool, under one deadline for the pod and its claims (the shared-claim read's
:data:`~driver.pinning.consumers.READ_DEADLINE_S` in all; a failure is kept for
:data:`~driver.pinning.consumers.FAILURE_TTL_S`), and
the answer is kept per pod UID (a pod's claims and their allocations do not change while it
runs), so a pod costs one pod GET and one GET per claim, however many containers it has. A
failed read is kept a moment for the pod, so its other containers do not wait again; a read the
apiserver forbids (no ``get`` on pods: the opt-in ``rbac.readPods``) is said once and not tried
again for :data:`FORBIDDEN_RETRY_S`. Every failure leaves the container as it would be without
this check (fail open): these containers hold no numadra CPU, so nothing is exclusive to protect.
"""

from __future__ import annotations

import re
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from driver.errors import KubeError
from driver.inventory.cpulist import MAX_NODES
from driver.inventory.sysfs import read_int
from driver.kube.status import is_not_found
from driver.kube.types import ClaimGetter, PodGetter, allocation_results
from driver.log import get_logger
from driver.pinning.consumers import FAILURE_TTL_S, READ_DEADLINE_S
from driver.untrusted.values import object_or_empty

__all__ = [
    "FORBIDDEN_RETRY_S",
    "MAX_CLAIMS",
    "ContainerDevices",
    "DeviceKey",
    "DevicePlace",
    "DevicePlaces",
    "OtherDevices",
    "PodDevices",
    "SysfsPciNodes",
    "is_bus_id",
    "pod_devices",
]

#: seconds after a 403 before any pod is read again (the grant is an operator's change)
FORBIDDEN_RETRY_S = 60.0
#: pods whose answer is kept (least recently used dropped first)
MAX_PODS = 4096
#: ResourceClaims read for one pod at most (the API allows 32, plus the extended-resource claim)
MAX_CLAIMS = 33
#: containers (init containers included) and claim references of one container examined at most
MAX_CONTAINERS = 256
#: allocation results of one claim examined at most (the API allows 32 devices a claim)
MAX_RESULTS = 128
#: PCI bus IDs whose node is kept
MAX_BUS_IDS = 4096
#: a name the apiserver can hold (DNS subdomain length); anything longer is not read
_MAX_NAME = 253
_BUS_ID = re.compile(r"[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]", re.ASCII)

_log = get_logger("pinning.otherdevices")

#: (driver, pool, device): a device of an allocation result, and of a ResourceSlice
DeviceKey = tuple[str, str, str]


def is_bus_id(text: str) -> bool:
    """True for a PCI address in the kernel's form, ``0000:af:00.0`` (lower case, nothing else)."""
    return _BUS_ID.fullmatch(text) is not None


@dataclass(frozen=True, slots=True)
class DevicePlace:
    """What another driver's slice says of where one of its devices is."""

    #: the standard ``numaNode`` when it is a usable node number; None otherwise
    node: int | None = None
    #: the standard ``pciBusID`` when it is a PCI address; "" otherwise
    pci_bus_id: str = ""
    #: why ``numaNode`` was not used ("" when it was, or when the slice gave none)
    problem: str = ""


@dataclass(frozen=True, slots=True)
class DevicePlaces:
    """The other drivers' devices of this node and their places (bounded; see the module)."""

    places: Mapping[DeviceKey, DevicePlace] = field(default_factory=dict)
    #: more devices were published than are kept
    truncated: bool = False

    def __bool__(self) -> bool:
        return bool(self.places)


class SysfsPciNodes:
    """A PCI function's NUMA node from ``<host_root>/sys/bus/pci/devices/<bdf>/numa_node``.

    Answers are kept (a device does not move between nodes), at most :data:`MAX_BUS_IDS`.
    """

    def __init__(self, host_root: Path | str) -> None:
        self._devices = f"{host_root}/sys/bus/pci/devices"
        self._lock = threading.Lock()
        self._known: dict[str, int | None] = {}

    def __call__(self, bus_id: str) -> int | None:
        """The node of ``bus_id``; None when it is malformed, not on this host, or has none (-1)."""
        if not is_bus_id(bus_id):
            return None
        with self._lock:
            if bus_id in self._known:
                return self._known[bus_id]
        node = read_int(f"{self._devices}/{bus_id}/numa_node")
        found = node if node is not None and 0 <= node < MAX_NODES else None
        with self._lock:
            if len(self._known) < MAX_BUS_IDS:
                self._known[bus_id] = found
        return found


@dataclass(frozen=True, slots=True)
class ContainerDevices:
    """The other drivers' devices of one container: their nodes, and what could not be placed."""

    nodes: frozenset[int] = frozenset()
    #: other drivers' devices the container holds (placed or not)
    devices: int = 0
    #: why a device (or a claim) could not be placed, one text each
    problems: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class PodDevices:
    """The answer for one pod: by container name, or why it could not be read."""

    containers: Mapping[str, ContainerDevices] = field(default_factory=dict)
    #: why the pod or its claims could not be read ("" when they were)
    unread: str = ""
    #: the read was forbidden (RBAC): said once per node, not on every pod
    forbidden: bool = False


#: the node of a PCI bus ID on this host (None: not on it, or no node)
PciNodes = Callable[[str], "int | None"]


def _items(value: Any, limit: int) -> Iterator[Mapping[str, Any]]:
    """The objects of a list, the first ``limit`` entries at most (anything else: none)."""
    if isinstance(value, list):
        for item in value[:limit]:
            if isinstance(item, Mapping):
                yield item


def _name(value: Any) -> str:
    """A usable object name, or ""."""
    return value if isinstance(value, str) and 0 < len(value) <= _MAX_NAME else ""


@dataclass(slots=True)
class _PodClaims:
    """What the pod says: its ResourceClaims and which requests each container holds."""

    #: ResourceClaim names to read, in order
    claims: list[str] = field(default_factory=list)
    #: container -> (ResourceClaim name, request or None for all of the claim's)
    refs: dict[str, list[tuple[str, str | None]]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)

    def use(self, container: str, claim: str, request: str | None) -> None:
        if claim not in self.claims:
            if len(self.claims) >= MAX_CLAIMS:
                self.problems.append(f"more than {MAX_CLAIMS} claims: {claim} not read")
                return
            self.claims.append(claim)
        self.refs.setdefault(container, []).append((claim, request))


def _pod_claims(pod: Mapping[str, Any]) -> _PodClaims:
    """The claims a pod's containers use, from its spec and status (see the module docstring)."""
    spec, status = object_or_empty(pod.get("spec")), object_or_empty(pod.get("status"))
    out = _PodClaims()
    named: dict[str, str] = {}  # the pod's name for a claim -> the ResourceClaim's name
    for entry in _items(spec.get("resourceClaims"), MAX_CLAIMS):
        own, direct = _name(entry.get("name")), _name(entry.get("resourceClaimName"))
        if own and direct:
            named[own] = direct
    for entry in _items(status.get("resourceClaimStatuses"), MAX_CLAIMS):
        own, made = _name(entry.get("name")), _name(entry.get("resourceClaimName"))
        if own and made and own not in named:
            named[own] = made
    containers = [
        *_items(spec.get("initContainers"), MAX_CONTAINERS),
        *_items(spec.get("containers"), MAX_CONTAINERS),
    ]
    for ctr in containers[:MAX_CONTAINERS]:
        ctr_name = _name(ctr.get("name"))
        if not ctr_name:
            continue
        for ref in _items(object_or_empty(ctr.get("resources")).get("claims"), MAX_CLAIMS):
            own = _name(ref.get("name"))
            request = ref.get("request")
            claim = named.get(own, "")
            if not claim:
                if own:
                    out.problems.append(f"container {ctr_name}: pod claim {own!r} names no ResourceClaim")
                continue
            out.use(ctr_name, claim, request if isinstance(request, str) and request else None)
    extended = object_or_empty(status.get("extendedResourceClaimStatus"))
    special = _name(extended.get("resourceClaimName"))
    if special:
        for mapping in _items(extended.get("requestMappings"), MAX_CONTAINERS):
            ctr_name, request = _name(mapping.get("containerName")), mapping.get("requestName")
            if ctr_name and isinstance(request, str) and request:
                out.use(ctr_name, special, request)
    return out


def _reserved_for(claim: Mapping[str, Any], pod_uid: str, pod_group: str) -> bool:
    """Whether ``status.reservedFor`` names the pod, or the PodGroup the pod belongs to."""
    for entry in _items(object_or_empty(claim.get("status")).get("reservedFor"), 256):
        kind = (entry.get("apiGroup") or "", entry.get("resource"))
        if kind == ("", "pods") and entry.get("uid") == pod_uid:
            return True
        if kind == ("scheduling.k8s.io", "podgroups") and pod_group and entry.get("name") == pod_group:
            return True
    return False


def _results(claim: Mapping[str, Any], own_driver: str) -> list[tuple[str, DeviceKey]]:
    """(request, device) of each allocation result of another driver (malformed ones skipped)."""
    out: list[tuple[str, DeviceKey]] = []
    for entry in allocation_results(claim)[:MAX_RESULTS]:
        values = [entry.get(k) for k in ("request", "driver", "pool", "device")]
        if not all(isinstance(v, str) and 0 < len(v) <= _MAX_NAME for v in values):
            continue
        request, driver, pool, device = (str(v) for v in values)
        if driver != own_driver:
            out.append((request, (driver, pool, device)))
    return out


def _holds(request: str, wanted: str | None) -> bool:
    """Whether a result of ``request`` is held by a reference to ``wanted`` (None: every request;
    a result of a ``firstAvailable`` subrequest is named ``<request>/<subrequest>``)."""
    return wanted is None or request == wanted or request.startswith(f"{wanted}/")


def _place(key: DeviceKey, places: DevicePlaces, pci_nodes: PciNodes) -> tuple[int | None, str]:
    """The node of one device, or None and why not."""
    driver, pool, device = key
    named = f"device {driver}/{pool}/{device}"
    place = places.places.get(key)
    if place is None:
        return None, f"{named} is in no ResourceSlice of this node (another node's pool?)"
    if place.node is not None:
        return place.node, ""
    if not place.pci_bus_id:
        return None, f"{named}: {place.problem or 'no numaNode and no pciBusID'}"
    node = pci_nodes(place.pci_bus_id)
    if node is None:
        return None, f"{named}: pciBusID {place.pci_bus_id} is not a PCI device with a NUMA node on this host"
    return node, ""


def pod_devices(
    pod: Mapping[str, Any],
    claims: Mapping[str, Mapping[str, Any] | str],
    *,
    places: DevicePlaces,
    pci_nodes: PciNodes,
    own_driver: str,
) -> dict[str, ContainerDevices]:
    """Each container's other-driver devices and their nodes, from the pod and its claims as read.

    ``claims``: ResourceClaim name -> the object read, or a text saying why it could not be (a
    claim that does not exist, say). Pure but for ``pci_nodes``.
    """
    meta, spec = object_or_empty(pod.get("metadata")), object_or_empty(pod.get("spec"))
    pod_uid = meta.get("uid") if isinstance(meta.get("uid"), str) else ""
    group = _name(object_or_empty(spec.get("schedulingGroup")).get("podGroupName"))
    plan = _pod_claims(pod)
    out: dict[str, ContainerDevices] = {}
    for ctr, refs in plan.refs.items():
        nodes: set[int] = set()
        devices = 0
        problems = [p for p in plan.problems if p.startswith(f"container {ctr}:")]
        for claim_name, request in refs:
            claim = claims.get(claim_name)
            if claim is None or isinstance(claim, str):
                problems.append(f"claim {claim_name}: {claim or 'not read'}")
                continue
            if not _reserved_for(claim, str(pod_uid), group):
                problems.append(f"claim {claim_name} is not reserved for this pod")
                continue
            for got, key in _results(claim, own_driver):
                if not _holds(got, request):
                    continue
                devices += 1
                node, why = _place(key, places, pci_nodes)
                if node is None:
                    problems.append(why)
                else:
                    nodes.add(node)
        out[ctr] = ContainerDevices(frozenset(nodes), devices, tuple(problems))
    return out


@dataclass(slots=True)
class _Read:
    done: threading.Event = field(default_factory=threading.Event)


class OtherDevices:
    """The other drivers' devices of a pod's containers, read once per pod (module docstring).

    ``places``: the other drivers' devices of this node (the foreign-slices watcher's
    ``device_places``); ``pci_nodes``: a bus ID's node on this host (:class:`SysfsPciNodes`).
    Thread-safe; :meth:`read` never raises for what the apiserver or the objects do.
    """

    def __init__(
        self,
        pods: PodGetter,
        claims: ClaimGetter,
        *,
        places: Callable[[], DevicePlaces],
        pci_nodes: PciNodes,
        own_driver: str,
        deadline: float = READ_DEADLINE_S,
        failure_ttl_s: float = FAILURE_TTL_S,
        forbidden_retry_s: float = FORBIDDEN_RETRY_S,
        max_pods: int = MAX_PODS,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pods = pods
        self._claims = claims
        self._places = places
        self._pci_nodes = pci_nodes
        self._own = own_driver
        self._deadline = deadline
        self._failure_ttl = failure_ttl_s
        self._forbidden_retry = forbidden_retry_s
        self._max_pods = max_pods
        self._clock = clock
        self._lock = threading.Lock()
        self._known: OrderedDict[str, PodDevices] = OrderedDict()
        self._failed: dict[str, tuple[float, PodDevices]] = {}
        self._forbidden_until = -1e18
        self._forbidden_said = False
        self._reading: dict[str, _Read] = {}
        #: pods read from the apiserver, and the claim GETs those reads made (state and tests)
        self.pod_reads = 0
        self.claim_reads = 0

    def active(self) -> bool:
        """True when another driver publishes devices for this node: only then is a pod read."""
        return bool(self._places())

    def remembered(self, pod_uid: str) -> PodDevices | None:
        """The answer for the pod without a read: None when one is needed."""
        with self._lock:
            return self._remembered(pod_uid)

    def _remembered(self, pod_uid: str) -> PodDevices | None:
        known = self._known.get(pod_uid)
        if known is not None:
            self._known.move_to_end(pod_uid)
            return known
        now = self._clock()
        if now < self._forbidden_until:
            return PodDevices(unread="reading pods is forbidden (see the log)", forbidden=True)
        failed = self._failed.get(pod_uid)
        if failed is not None and now - failed[0] < self._failure_ttl:
            return failed[1]
        return None

    def read(self, namespace: str, name: str, pod_uid: str) -> PodDevices:
        """The answer for pod ``namespace/name`` of UID ``pod_uid``: remembered, or read now."""
        with self._lock:
            known = self._remembered(pod_uid)
            if known is not None:
                return known
            pending = self._reading.get(pod_uid)
            mine = pending is None
            if pending is None:
                pending = self._reading[pod_uid] = _Read()
        if not mine:  # another container of the pod is reading it: wait for that answer
            pending.done.wait(self._deadline)
            with self._lock:
                known = self._remembered(pod_uid)
            waited = f"the read of pod {namespace}/{name} started for another container has not finished"
            return known or PodDevices(unread=waited)
        try:
            got = self._read(namespace, name, pod_uid)
        except Exception as exc:  # a bug here must not refuse the container: fail open, say it
            _log.exception("reading a pod's devices failed", pod=f"{namespace}/{name}", pod_uid=pod_uid)
            got = PodDevices(unread=f"internal error: {exc}")
        finally:
            with self._lock:
                self._reading.pop(pod_uid, None)
            pending.done.set()
        self._keep(pod_uid, got)
        return got

    def _keep(self, pod_uid: str, got: PodDevices) -> None:
        with self._lock:
            if got.forbidden:
                self._forbidden_until = self._clock() + self._forbidden_retry
                said, self._forbidden_said = self._forbidden_said, True
            elif got.unread:
                self._failed[pod_uid] = (self._clock(), got)
                if len(self._failed) > self._max_pods:
                    now = self._clock()
                    self._failed = {k: v for k, v in self._failed.items() if now - v[0] < self._failure_ttl}
                return
            else:
                self._failed.pop(pod_uid, None)
                self._known[pod_uid] = got
                self._known.move_to_end(pod_uid)
                while len(self._known) > self._max_pods:
                    self._known.popitem(last=False)
                return
        if not said:
            _log.warning(
                "cannot read pods: containers holding other DRA drivers' devices are left "
                "unconfined; grant get on pods (Helm rbac.readPods=true, or the read-pods "
                "kustomize overlay) to run them on their devices' NUMA nodes",
                error=got.unread,
                retry_in_s=self._forbidden_retry,
            )

    def _read_claims(
        self, namespace: str, name: str, pod: Mapping[str, Any], started: float
    ) -> dict[str, Mapping[str, Any] | str] | str:
        """The pod's claims by name (a text for one that does not exist), read within what is
        left of the deadline; a text saying why when they could not all be read."""
        claims: dict[str, Mapping[str, Any] | str] = {}
        for claim_name in _pod_claims(pod).claims:
            left = self._deadline - (self._clock() - started)
            if left <= 0:
                return f"reading pod {namespace}/{name} and its claims took over {self._deadline:g} s"
            with self._lock:
                self.claim_reads += 1
            try:
                claims[claim_name] = self._claims.get_resource_claim(namespace, claim_name, deadline=left)
            except KubeError as exc:
                if not is_not_found(exc, "resourceclaims", claim_name):
                    return f"cannot read claim {namespace}/{claim_name}: {exc}"
                claims[claim_name] = "not found"
        return claims

    def _read(self, namespace: str, name: str, pod_uid: str) -> PodDevices:
        started = self._clock()
        with self._lock:
            self.pod_reads += 1
        try:
            pod = self._pods.get_pod(namespace, name, deadline=self._deadline)
        except KubeError as exc:
            if exc.status in (401, 403):
                return PodDevices(unread=f"cannot read pod {namespace}/{name}: {exc}", forbidden=True)
            if is_not_found(exc, "pods", name, group=""):
                return PodDevices(unread=f"pod {namespace}/{name} not found")
            return PodDevices(unread=f"cannot read pod {namespace}/{name}: {exc}")
        uid = object_or_empty(pod.get("metadata")).get("uid")
        if uid != pod_uid:
            return PodDevices(unread=f"the name {namespace}/{name} holds another pod (uid {str(uid)[:64]})")
        claims = self._read_claims(namespace, name, pod, started)
        if isinstance(claims, str):
            return PodDevices(unread=claims)
        found = pod_devices(
            pod, claims, places=self._places(), pci_nodes=self._pci_nodes, own_driver=self._own
        )
        _log.info(
            "read a pod's devices of other drivers",
            pod=f"{namespace}/{name}",
            pod_uid=pod_uid,
            claims=len(claims),
            containers={c: sorted(d.nodes) for c, d in found.items() if d.devices},
        )
        return PodDevices(found)
