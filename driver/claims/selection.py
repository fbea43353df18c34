"""From a ResourceClaim (JSON) to the devices numadra must prepare: checks, configs, CPU requests.

Pure apart from reading the inventory object: no files, no API calls. Every refusal raises a
:class:`~driver.errors.ClaimError` (or :class:`~driver.errors.ConfigDecodeError`) whose message names
the request and device at fault, because that message is what the user reads in the pod's events.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from driver.claims.config import (
    ConfigEntry,
    EffectiveConfig,
    decode_parameters,
    effective_config,
)
from driver.errors import ClaimError, ConfigDecodeError, UntrustedValueError
from driver.inventory.model import DeviceKind, Gpu, Inventory, InventoryDevice, Nic, NumaNode
from driver.kube.types import JsonObject
from driver.names import base_request_name, check_request_name, is_claim_uid
from driver.pinning.aux import AuxCpus
from driver.pinning.types import CpuMode, CpuRequest
from driver.plugin import ClaimRef
from driver.slices.features import CONSUMABLE_CAPACITY
from driver.untrusted.shape import AS_DICT, Field, ListOf, Record, Text
from driver.untrusted.values import is_object, object_or_empty

__all__ = [
    "MAX_CONFIGS",
    "MAX_RESULTS",
    "POD_CLAIM_NAME_ANNOTATION",
    "SHAREABLE_KINDS",
    "AllocatedDevice",
    "AuxDemand",
    "ClaimView",
    "aux_demand",
    "cpu_requests",
    "device_kind",
    "memory_nodes",
    "parse_cpu_quantity",
    "select_devices",
    "with_aux_cpus",
]

#: AllocationResultsMaxSize of resource.k8s.io/v1
MAX_RESULTS = 32
#: DeviceConfigMaxSize * 2 (class and claim configs) of resource.k8s.io/v1
MAX_CONFIGS = 64
#: the requests of a claim's spec, as far as the driver reads them (the API allows 32 requests of
#: up to 8 alternatives each, named by DNS labels): a wrong type is a claim error naming the field
_NAMED = Record(AS_DICT, {"name": Field("name", Text(max_len=253, min_len=1), required=True)})
_REQUESTS = ListOf(
    Record(
        AS_DICT,
        {
            "name": Field("name", Text(max_len=253, min_len=1), required=True),
            "firstAvailable": Field("first_available", ListOf(_NAMED, 8), nullable=True),
        },
    ),
    MAX_RESULTS,
)
POD_CLAIM_NAME_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
_CPU_QUANTITY = re.compile(r"([0-9]+)(m?)")
#: the kinds whose devices our slices publish with ``allowMultipleAllocations`` (a NUMA node's
#: CPUs and memory are consumable capacity); a GPU or NIC is handed to one claim whole
SHAREABLE_KINDS = frozenset({DeviceKind.CPU, DeviceKind.MEMORY})


@dataclass(frozen=True, slots=True)
class AllocatedDevice:
    """One allocation result of our driver on this node, resolved against the inventory."""

    request: str  # full reference, "<req>" or "<req>/<sub>"
    device_name: str
    pool: str
    share_id: str | None
    consumed: Mapping[str, str]
    kind: DeviceKind
    device: InventoryDevice
    config: EffectiveConfig
    #: ``adminAccess`` (monitoring): the scheduler gave it ignoring other claims, and it
    #: consumes nothing, so it neither waits for nor blocks other claims of the device
    admin_access: bool = False

    @property
    def base_request(self) -> str:
        """The request name containers reference."""
        return base_request_name(self.request)


@dataclass(frozen=True, slots=True)
class ClaimView:
    """What prepare acts on for one claim."""

    namespace: str
    name: str
    uid: str
    pod_claim_name: str  # "" unless the claim came from a template
    devices: tuple[AllocatedDevice, ...]


def device_kind(device: InventoryDevice) -> DeviceKind:
    """The published ``type`` of an inventory device."""
    if isinstance(device, Gpu):
        return DeviceKind.GPU
    if isinstance(device, Nic):
        return DeviceKind.NIC
    return device.kind  # cpu, or memory for a NUMA node without CPUs


def _known_requests(uid: str, claim: JsonObject, results: Sequence[Any]) -> set[str]:
    names: set[str] = set()
    raw = object_or_empty(object_or_empty(claim.get("spec")).get("devices")).get("requests")
    try:
        requests = _REQUESTS.check([] if raw is None else raw, "spec.devices.requests")
    except UntrustedValueError as exc:
        raise ClaimError(uid, str(exc)) from None
    for req in requests:
        names.add(req["name"])
        names.update(f"{req['name']}/{sub['name']}" for sub in req.get("first_available", ()))
    for res in results:
        if is_object(res) and isinstance(res.get("request"), str):
            names.add(res["request"])
            names.add(base_request_name(res["request"]))
    return names


def _decode_configs(uid: str, raw: Sequence[Any], driver_name: str, known: set[str]) -> list[ConfigEntry]:
    entries: list[ConfigEntry] = []
    for index, item in enumerate(raw):
        if not is_object(item):
            raise ConfigDecodeError(uid, f"config #{index}: not an object")
        opaque = object_or_empty(item.get("opaque"))
        if opaque.get("driver") != driver_name:
            continue  # another driver's configuration: not ours to judge
        source = item.get("source")
        if not isinstance(source, str):
            source = "FromClaim"
        requests = item.get("requests") or []
        if not isinstance(requests, list) or not all(isinstance(r, str) for r in requests):
            raise ConfigDecodeError(
                uid, f"config #{index} ({source}): requests must be a list of request names"
            )
        unknown = [r for r in requests if r not in known]
        if unknown:
            names = ", ".join(map(repr, unknown))
            raise ConfigDecodeError(uid, f"config #{index} ({source}): names unknown request(s) {names}")
        try:
            config = decode_parameters(opaque.get("parameters"))
        except ValueError as exc:
            raise ConfigDecodeError(uid, f"config #{index} ({source}): {exc}") from exc
        entries.append(ConfigEntry(requests=tuple(requests), config=config, source=str(source)))
    return entries


def _where(request: str, name: str) -> str:
    """How an error names one result: built only when there is an error to name it in."""
    return f"request {request!r}: device {name!r}"


def _resolve_result(
    uid: str,
    index: int,
    res: Mapping[str, Any],
    *,
    node_name: str,
    inventory: Inventory,
    entries: Sequence[ConfigEntry],
) -> AllocatedDevice:
    request, pool, name = res.get("request"), res.get("pool"), res.get("device")
    if not (isinstance(request, str) and isinstance(pool, str) and isinstance(name, str)):
        raise ClaimError(uid, f"allocation result #{index}: request, pool and device must be strings")
    problem = check_request_name(request)
    if problem:
        raise ClaimError(uid, f"allocation result #{index}: {problem}")
    if pool != node_name:
        raise ClaimError(
            uid, f"{_where(request, name)} is in pool {pool!r}, not this node's pool {node_name!r}"
        )
    found = inventory.find(name)
    if found is None:
        raise ClaimError(uid, f"{_where(request, name)} not found in this node's inventory")
    share = res.get("shareID")
    kind = device_kind(found)
    if share is not None:
        # The "one claim per whole device" rule (the journal's) keys on share_id None; a shareID on
        # a device we never published as shareable would let any number of claims hold it.
        if not isinstance(share, str) or not is_claim_uid(share):
            raise ClaimError(uid, f"{_where(request, name)}: shareID {share!r} is not a UID")
        if kind not in SHAREABLE_KINDS:
            raise ClaimError(
                uid,
                f"{_where(request, name)}: has shareID {share!r}, but this {kind.value} is not published "
                "as shareable",
            )
    consumed = res.get("consumedCapacity") or {}
    if not is_object(consumed) or not all(isinstance(v, str) for v in consumed.values()):
        raise ClaimError(uid, f"{_where(request, name)}: malformed consumedCapacity")
    admin = res.get("adminAccess", False)
    if admin is None:
        admin = False
    if not isinstance(admin, bool):
        raise ClaimError(uid, f"{_where(request, name)}: adminAccess must be a boolean, got {admin!r}")
    if kind is DeviceKind.CPU and share is None and not admin:
        # Only an allocator without consumable capacity hands a cpu device out whole: it dropped
        # the claim's CPU count too, and all of a NUMA node's CPUs for one claim is not the answer.
        raise ClaimError(
            uid,
            f"{_where(request, name)} was allocated whole (no shareID): the scheduler treated it as a "
            "device for one claim and dropped the claim's CPU count, because the "
            f"{CONSUMABLE_CAPACITY} feature gate is off on kube-apiserver or kube-scheduler; numadra "
            f"pins no CPUs it cannot count. Enable {CONSUMABLE_CAPACITY} (docs/troubleshooting.md)",
        )
    return AllocatedDevice(
        request=request,
        device_name=name,
        pool=pool,
        share_id=share,
        consumed=dict(consumed),
        kind=kind,
        device=found,
        config=effective_config(entries, request, kind),
        admin_access=admin,
    )


def select_devices(
    claim: JsonObject,
    ref: ClaimRef,
    *,
    driver_name: str,
    node_name: str,
    inventory: Inventory,
) -> ClaimView:
    """Check the claim and return our devices on this node with their effective configs.

    ``claim`` was checked by the kubelet layer (:func:`driver.kubelet.claims.check_claim`: same
    UID as ``ref``, ``status.allocation`` present); the checks here are about devices. Results of
    other drivers are skipped. Raises :class:`ClaimError` when a result of ours is in another pool
    or on a device this node does not have, a cpu device came whole (no consumable capacity on
    the cluster), or the allocation is malformed;
    :class:`ConfigDecodeError` for invalid configuration of ours.
    """
    uid = ref.uid
    meta = object_or_empty(claim.get("metadata"))
    # UID and status.allocation were checked by the kubelet layer before the claim got here
    allocation = object_or_empty(object_or_empty(claim.get("status")).get("allocation"))
    devs = object_or_empty(allocation.get("devices"))
    results = devs.get("results") or []
    configs = devs.get("config") or []
    if not isinstance(results, list) or not isinstance(configs, list):
        raise ClaimError(uid, "malformed status.allocation.devices (results/config must be lists)")
    if len(results) > MAX_RESULTS:
        raise ClaimError(uid, f"too many allocation results: {len(results)} (the API allows {MAX_RESULTS})")
    if len(configs) > MAX_CONFIGS:
        raise ClaimError(uid, f"too many allocation configs: {len(configs)} (the API allows {MAX_CONFIGS})")
    entries = _decode_configs(uid, configs, driver_name, _known_requests(uid, claim, results))

    devices: list[AllocatedDevice] = []
    seen: set[tuple[str, str | None]] = set()
    for index, res in enumerate(results):
        if not is_object(res):
            raise ClaimError(uid, f"allocation result #{index} is not an object")
        if res.get("driver") != driver_name:
            continue
        dev = _resolve_result(uid, index, res, node_name=node_name, inventory=inventory, entries=entries)
        if (dev.device_name, dev.share_id) in seen:
            raise ClaimError(uid, f"request {dev.request!r}: device {dev.device_name!r} allocated twice")
        seen.add((dev.device_name, dev.share_id))
        devices.append(dev)
    annotations = object_or_empty(meta.get("annotations"))
    pod_claim = annotations.get(POD_CLAIM_NAME_ANNOTATION)
    return ClaimView(
        namespace=ref.namespace,
        name=ref.name,
        uid=uid,
        pod_claim_name=pod_claim if isinstance(pod_claim, str) else "",
        devices=tuple(devices),
    )


def parse_cpu_quantity(value: str) -> int:
    """A whole number of CPUs from a Kubernetes quantity ("4", "4000m"); ValueError otherwise."""
    m = _CPU_QUANTITY.fullmatch(value.strip())
    if m is None:
        raise ValueError(f"not a whole CPU count: {value!r}")
    amount = int(m.group(1))
    if m.group(2):
        if amount % 1000:
            raise ValueError(f"not a whole CPU count: {value!r}")
        amount //= 1000
    return amount


def cpu_requests(view: ClaimView) -> list[CpuRequest]:
    """What the pinning planner is asked: one request per base request with cpu devices."""
    grouped: dict[str, list[AllocatedDevice]] = {}
    for dev in view.devices:
        if dev.kind is DeviceKind.CPU and not dev.admin_access:  # admin access takes no CPUs
            grouped.setdefault(dev.base_request, []).append(dev)
    out: list[CpuRequest] = []
    for base, devs in grouped.items():
        count = 0
        for dev in devs:
            raw = dev.consumed.get("cpus", "0")
            try:
                count += parse_cpu_quantity(raw)
            except ValueError as exc:
                raise ClaimError(
                    view.uid, f"request {dev.request!r}: device {dev.device_name!r}: consumed cpus {exc}"
                ) from exc
        nodes = sorted({dev.device.id for dev in devs if isinstance(dev.device, NumaNode)})
        mode = devs[0].config.mode if devs else CpuMode.EXCLUSIVE
        out.append(CpuRequest(request=base, numa_nodes=tuple(nodes), count=count, mode=mode))
    return out


def memory_nodes(view: ClaimView) -> frozenset[int]:
    """The NUMA nodes of the claim's ``memory`` devices (CPU-less nodes it asked for)."""
    return frozenset(
        dev.device.id
        for dev in view.devices
        if dev.kind is DeviceKind.MEMORY and isinstance(dev.device, NumaNode) and not dev.admin_access
    )


@dataclass(frozen=True, slots=True)
class AuxDemand:
    """The auxiliary CPUs a claim's GPUs and NICs bring (``--aux-cpus``), and where they go."""

    #: CPUs in all: the per-kind count summed over the claim's devices of that kind
    count: int
    #: the NUMA nodes to take them from: the devices' nodes that have CPUs (every node with CPUs
    #: for a device whose node the kernel does not report)
    numa_nodes: tuple[int, ...]
    #: the base requests holding GPUs or NICs, in result order: all of them get the CPUs
    requests: tuple[str, ...]
    #: "gpu-0, nic-1" for the error texts
    devices: str


def aux_demand(view: ClaimView, aux: AuxCpus, inventory: Inventory) -> AuxDemand | None:
    """What ``view``'s devices bring under ``aux``; None when they bring nothing.

    Admin access (monitoring) devices bring nothing, as they take nothing.
    """
    holders = [d for d in view.devices if d.kind in (DeviceKind.GPU, DeviceKind.NIC) and not d.admin_access]
    bringing = [d for d in holders if aux.of(d.kind) > 0]
    if not bringing:
        return None
    with_cpus = {n.id for n in inventory.numa_nodes if n.cpus}
    nodes: set[int] = set()
    for dev in bringing:
        pci = dev.device.pci if isinstance(dev.device, (Gpu, Nic)) else None
        if pci is not None and pci.numa_node in with_cpus:
            nodes.add(pci.numa_node)
        else:  # no node reported, or a node without CPUs: any node serves as well as another
            nodes |= with_cpus
    return AuxDemand(
        count=sum(aux.of(d.kind) for d in bringing),
        numa_nodes=tuple(sorted(nodes)),
        requests=tuple(dict.fromkeys(d.base_request for d in holders)),
        devices=", ".join(f"{d.device_name} ({aux.of(d.kind)})" for d in bringing),
    )


def with_aux_cpus(requests: list[CpuRequest], demand: AuxDemand | None) -> list[CpuRequest]:
    """``requests`` (:func:`cpu_requests`) with the auxiliary CPUs of ``demand`` added.

    * A claim that asks for numadra's CPUs too: the auxiliary ones add to its first CPU request
      (its containers get one cpuset, the claim's CPUs and the devices' together, where the claim's
      cpu devices are; with ``matchAttribute: numaNode`` that is the devices' node).
    * Otherwise every GPU and NIC request of the claim becomes a ``shared`` request on the
      devices' nodes: the planner takes the CPUs once (the claim's pod shared pool) and every
      such request gets the same set, so each container holding any of the claim's devices runs
      on them, exclusive against every other claim.
    """
    if demand is None:
        return requests
    if requests:
        first = requests[0]
        return [replace(first, count=first.count + demand.count), *requests[1:]]
    counts = dict.fromkeys(demand.requests, 0)
    counts[demand.requests[0]] = demand.count
    return [
        CpuRequest(request=base, numa_nodes=demand.numa_nodes, count=count, mode=CpuMode.SHARED)
        for base, count in counts.items()
    ]
