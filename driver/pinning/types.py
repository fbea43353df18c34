"""Shared vocabulary of CPU/memory pinning, used by ``claims/`` (decides) and backends (enforce).

The CDI spec of each request that got CPUs carries the marker environment variables below, so the
NRI plugin, the CDI hook and the workload itself all see the same assignment.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache
from json.encoder import encode_basestring_ascii
from typing import Any

from driver.inventory.cpulist import MAX_CPUS, MAX_NODES, format_cpulist, parse_cpulist
from driver.untrusted.values import bounded_int

__all__ = [
    "ENV_CLAIM_UID",
    "ENV_CPUS",
    "ENV_CPU_MODE",
    "ENV_HOLDS_PREFIX",
    "ENV_MEMS",
    "ENV_PREFIX",
    "ENV_REQUEST",
    "MAX_CPUS",
    "MAX_NODES",
    "ClaimBinding",
    "ClaimPinning",
    "CpuAssignment",
    "CpuMode",
    "CpuRequest",
    "PodGroupRef",
    "PreparedClaimView",
    "env_markers",
    "format_cpulist",
    "held_requests",
    "holds_env_name",
    "marker_env",
    "parse_cpulist",
]

#: the prefix of every marker variable (reserved: user config may not set such variables)
ENV_PREFIX = "NUMADRA_"
#: cpulist ("0-3,8") of the CPUs the container may run on
ENV_CPUS = "NUMADRA_CPUS"
#: nodelist ("0") of the NUMA nodes the container may allocate memory on
ENV_MEMS = "NUMADRA_MEMS"
#: "exclusive" or "shared"
ENV_CPU_MODE = "NUMADRA_CPU_MODE"
ENV_CLAIM_UID = "NUMADRA_CLAIM_UID"
ENV_REQUEST = "NUMADRA_REQUEST"
#: ``NUMADRA_HOLDS_<REQUEST>=1``: the container holds a device of that (base) request of a claim
#: without CPUs. One variable per request, so a container given several requests keeps them all
#: (``NUMADRA_REQUEST`` would hold only the last CDI device's)
ENV_HOLDS_PREFIX = "NUMADRA_HOLDS_"


@lru_cache(maxsize=256)
def _kernel_list(ids: frozenset[int]) -> str:
    """:func:`format_cpulist` of a set an assignment holds, remembered for the last few sets: a
    claim's sets are spelled twice at its prepare (its marker variables, its "prepared" line)."""
    return format_cpulist(ids)


class CpuMode(StrEnum):
    """Exclusive slice (container alone on its CPUs) or the claim's pod shared pool."""

    EXCLUSIVE = "exclusive"
    SHARED = "shared"


@dataclass(frozen=True, slots=True)
class CpuAssignment:
    """CPUs and memory nodes given to one request of a claim.

    It has two spellings, each written in one place. The record (:meth:`json_text`; :meth:`to_json`
    parses it, :meth:`from_json` reads it back) is what the journal stores: sets as sorted integer
    lists, exact and stable, part of a checksummed line. The log fields (:meth:`log_fields`) are
    for people and the kernel: sets in the kernel's list format ("0-3,8"), as log lines,
    ``numadra state`` and the marker variables (:func:`marker_env`) give them.
    """

    request: str  # base request name
    mode: CpuMode
    cpus: frozenset[int]
    mems: frozenset[int]

    def json_text(self) -> str:
        """The record: compact JSON with sorted keys, ``cpus`` and ``mems`` as sorted integer
        lists. Written directly, as the journal encodes every prepared claim's record on each call."""
        return (
            f'{{"cpus":[{",".join(map(str, sorted(self.cpus)))}],'
            f'"mems":[{",".join(map(str, sorted(self.mems)))}],'
            f'"mode":{encode_basestring_ascii(self.mode.value)},"request":{encode_basestring_ascii(self.request)}}}'
        )

    def to_json(self) -> dict[str, Any]:
        """The record as a JSON object: :meth:`json_text` parsed, so the two cannot differ."""
        body: dict[str, Any] = json.loads(self.json_text())
        return body

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> CpuAssignment:
        """Parse a record read back from a file; raises KeyError, TypeError or ValueError (naming
        the field) on a malformed one: a CPU or node outside the kernel's limits included."""
        request = obj["request"]
        if not isinstance(request, str):
            raise TypeError(f"expected a string, got {type(request).__name__}")
        return cls(
            request=request,
            mode=CpuMode(obj["mode"]),
            cpus=frozenset(bounded_int(c, what="cpu", lo=0, hi=MAX_CPUS - 1) for c in obj["cpus"]),
            mems=frozenset(bounded_int(m, what="memory node", lo=0, hi=MAX_NODES - 1) for m in obj["mems"]),
        )

    def log_fields(self) -> dict[str, str]:
        """The assignment for a structured log line: CPU and node sets in the kernel's list format."""
        return {
            "request": self.request,
            "mode": self.mode.value,
            "cpus": _kernel_list(self.cpus),
            "mems": _kernel_list(self.mems),
        }


@dataclass(frozen=True, slots=True)
class CpuRequest:
    """What one request of a claim asks of the planner: ``count`` CPUs on its cpu devices' nodes.

    ``numa_nodes`` are the NUMA nodes of the ``cpu-numa<N>`` devices allocated to the request and
    ``count`` the ``cpus`` capacity they consumed (summed over those devices).
    """

    request: str  # base request name
    numa_nodes: tuple[int, ...]
    count: int
    mode: CpuMode = CpuMode.EXCLUSIVE


@dataclass(frozen=True, slots=True)
class ClaimPinning:
    """All pinning decisions for one claim; the journal stores it, so it survives restarts."""

    claim_uid: str
    assignments: tuple[CpuAssignment, ...]

    @property
    def cpus(self) -> frozenset[int]:
        """Every CPU this claim holds (exclusive slices and its shared pool)."""
        out: set[int] = set()
        for a in self.assignments:
            out |= a.cpus
        return frozenset(out)


@dataclass(frozen=True, slots=True, order=True)
class PodGroupRef:
    """A PodGroup a claim is reserved for: an entry of its ``status.reservedFor`` with ``apiGroup``
    ``scheduling.k8s.io`` and ``resource`` ``podgroups`` (workload-aware scheduling).

    The group lives in the claim's namespace (a consumer reference names an object of the claim's
    namespace), so the claim's namespace is the group's. Its pods are the claim's consumers; a
    pod names its group in ``spec.schedulingGroup.podGroupName`` (by name, in its namespace).
    """

    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class PreparedClaimView:
    """What the pinning backends read about one prepared claim: the state layer's read model.

    ``driver.state.index`` makes one from each journal entry, so pinning depends on this small
    shape and not on the journal's record (the journal stores pinning's types, not the reverse).
    """

    claim_uid: str
    namespace: str
    name: str
    #: UIDs of the pods recorded as the claim's consumers; None: not known (an entry rebuilt from
    #: the files on disk after the journal lost it, or one journaled before pods were recorded)
    pods: frozenset[str] | None
    pinning: ClaimPinning | None
    #: the names of the claim's devices in this driver's pool (their NUMA nodes give the memory
    #: nodes of a claim without CPUs)
    device_names: tuple[str, ...] = ()
    #: (base request, device name) for each device: which request holds which device
    request_devices: tuple[tuple[str, str], ...] = ()
    #: True for an entry rebuilt from the files on disk rather than prepared for the kubelet
    adopted: bool = False
    #: PodGroups recorded as the claim's consumers: their pods are its consumers too
    pod_groups: tuple[PodGroupRef, ...] = ()


@dataclass(frozen=True, slots=True)
class ClaimBinding:
    """What the driver recorded for a prepared claim: which pods may be pinned for it, and to what.

    A container's marker env only *names* a claim (and request); any pod can set those variables
    in its own spec. So the enforcing side pins a container only when its pod is one of ``pods``
    (the claim's ``status.reservedFor``, recorded at prepare and whenever the driver read it since)
    and takes the CPUs and memory nodes from here, never from the env values.
    """

    claim_uid: str
    namespace: str
    name: str
    #: UIDs of the pods the claim is known to be reserved for; None: not known yet (a rebuilt
    #: entry, or one journaled before numadra recorded pods): no pod binds until they are read
    pods: frozenset[str] | None
    pinning: ClaimPinning | None
    #: memory nodes of a claim without CPU assignments (the NUMA nodes of its GPUs and NICs)
    mems: frozenset[int] = frozenset()
    #: the same per base request: a container holding only some requests has only their devices
    request_mems: Mapping[str, frozenset[int]] = field(default_factory=dict)

    def mems_of(self, requests: Iterable[str]) -> frozenset[int]:
        """The memory nodes of the devices of ``requests`` (the claim's when none is known)."""
        nodes = frozenset().union(*(self.request_mems.get(r, frozenset()) for r in requests))
        return nodes or self.mems

    #: PodGroups the claim is known to be reserved for: a pod of one is a consumer once the
    #: apiserver confirms its membership (``driver.pinning.consumers``); the record alone never
    #: binds a pod to a group, as a container's pod says nothing trustworthy about its group
    pod_groups: tuple[PodGroupRef, ...] = ()

    @property
    def group_names(self) -> frozenset[str]:
        """The names of :attr:`pod_groups` (what a pod's ``spec.schedulingGroup`` names)."""
        return frozenset(g.name for g in self.pod_groups)

    def assignment(self, request: str) -> CpuAssignment | None:
        """The assignment of one (base) request, None when the claim has none for it."""
        for a in self.pinning.assignments if self.pinning is not None else ():
            if a.request == request:
                return a
        return None

    def in_namespace(self, pod_namespace: str) -> bool:
        """False when the pod is in another namespace than the claim (claims are namespaced, and
        a pod can only use claims of its own namespace); unknown on either side is not proof."""
        return not pod_namespace or not self.namespace or pod_namespace == self.namespace

    def reserved_for(self, pod_uid: str, pod_namespace: str) -> bool:
        """True when the pod is a recorded consumer of the claim (and in its namespace)."""
        return (
            self.pods is not None
            and bool(pod_uid)
            and pod_uid in self.pods
            and self.in_namespace(pod_namespace)
        )


def marker_env(assignment: CpuAssignment, claim_uid: str) -> dict[str, str]:
    """The CDI env edit for one request: the same variables every backend and the workload read.

    The values are the assignment's :meth:`~CpuAssignment.log_fields`, the spelling people and
    the kernel read, so a log line and a container's env never disagree on a set.
    """
    fields = assignment.log_fields()
    return {
        ENV_CPUS: fields["cpus"],
        ENV_MEMS: fields["mems"],
        ENV_CPU_MODE: fields["mode"],
        ENV_CLAIM_UID: claim_uid,
        ENV_REQUEST: fields["request"],
    }


def holds_env_name(request: str) -> str:
    """``NUMADRA_HOLDS_<REQUEST>`` for a base request name (a DNS label: ``-`` becomes ``_``)."""
    return ENV_HOLDS_PREFIX + request.upper().replace("-", "_")


def held_requests(markers: Mapping[str, str]) -> frozenset[str]:
    """The base requests a container's ``NUMADRA_HOLDS_*`` variables name (see :func:`env_markers`)."""
    return frozenset(
        key[len(ENV_HOLDS_PREFIX) :].lower().replace("_", "-")
        for key in markers
        if key.startswith(ENV_HOLDS_PREFIX) and len(key) > len(ENV_HOLDS_PREFIX)
    )


def env_markers(env: Iterable[str]) -> dict[str, str]:
    """The marker variables (``NUMADRA_*``) of a container env of ``"KEY=value"`` strings, by name.

    The NRI plugin reads the env the runtime reports, the CDI hook the bundle's ``config.json``;
    one reader keeps them agreeing on what a marker is (a later duplicate wins, as in execve).
    """
    out: dict[str, str] = {}
    for item in env:
        key, sep, value = item.partition("=")
        if sep and key.startswith(ENV_PREFIX):
            out[key] = value
    return out
