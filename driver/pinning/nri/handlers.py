"""What the NRI plugin answers, as plain functions of NRI messages and the plugin's bookkeeping.

No sockets here: :class:`PinningHandlers` turns each NRI request into its response, so the
decisions can be tested without a runtime, and the transport (``plugin.py``) stays dumb.

* A container's marker env (``NUMADRA_CLAIM_UID``, ``NUMADRA_REQUEST``, ...; CDI edits are
  applied before NRI sees it) only *names* a claim: any pod can put those variables in its own
  spec. So a container is pinned only when its **pod** (NRI sends the sandbox's Kubernetes UID
  and namespace) is one the claim is reserved for (``status.reservedFor``, kept in the journal,
  :class:`~driver.pinning.types.ClaimBinding`), and the CPUs and memory nodes applied are the
  journal's, never the env's. The kubelet prepares a shared claim once, for its first pod, so a
  pod the record does not list is looked up on the apiserver once
  (:class:`~driver.pinning.consumers.ConsumerCheck`): a later pod of a shared claim is pinned
  (and recorded), and so is a pod of a PodGroup the claim is reserved for, once the apiserver's
  copy of the pod names that group (its ``spec.schedulingGroup``, read in the claim's namespace);
  a pod the claim is not reserved for is refused: the CreateContainer call fails,
  so the runtime reports CreateContainerError. When the claim's consumers cannot be learned (the
  apiserver does not answer in time), a CPU claim's container is refused too (fail closed; the
  kubelet retries it). (A claim without CPUs, GPUs and NICs only, grants nothing to steal: a
  container of a pod that is not a consumer is handled as one without a claim.)
* Never silently: every refusal, and every claim container created without its pinning, is
  handed to the failure sink (:mod:`driver.pinning.failures`: a metric and an Event on the pod).
* Ours get ``linux.resources.cpu.cpus`` / ``.mems``; a claim without CPUs gets its memory nodes
  and, with the shared pool on, the pool's CPUs. Other containers get an empty adjustment,
  unless a **node shared pool** is configured (opt-in): then they are confined to it (online
  CPUs minus claimed; ``--reserved-cpus`` always stay in it), which is what makes claim CPUs
  exclusive against pods without a claim. When the pool shrinks because a new claim took CPUs,
  the next CreateContainer of a claim container carries updates that move the others off; an
  empty pool refuses non-claim containers (an empty cpuset would mean "all CPUs"), and
  :meth:`PinningHandlers.pool_users` tells the planner whether containers run on the pool, so a
  prepare never empties it under them.
* **Plain device pods** (``driver.pinning.align``): a container whose claim holds GPUs or NICs
  but no CPUs (also a claim the scheduler made for an extended resource such as
  ``nvidia.com/gpu``) runs on the shared CPUs of its devices' NUMA node(s) and their memory,
  widened to the nearest nodes when they cannot hold its CPU request or memory limit (the
  container's resources in the request), unconfined when no nodes can; a widened or unconfined
  container is reported. The pod's ``numadra.dev/align: "off"`` annotation, or ``aligner`` None
  (``--no-align-device-pods``), keeps the memory nodes only (with the node shared pool on, the
  whole pool). When the shared set changes, the next claim container's CreateContainer carries
  updates for the aligned containers, as for the pool's.
* Fail closed: a malformed marker, a marker that names no claim or an unknown one, or a claim
  without records to check against (no lookup) is an error, so the runtime refuses the
  container instead of running it on CPUs it was not given.
* ``UpdateContainer`` (the kubelet's in-place resize) is answered with the claim's cpuset, not
  the update's; containers numadra did not pin are left alone.
* ``Synchronize`` rebuilds the bookkeeping from the containers the runtime reports, with the
  same pod check (a container whose marker does not bind is handled as one without a claim, not
  adopted), and returns updates for those whose cpuset drifted from their claim or from the
  node shared pool (the restart-recovery path).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from functools import partial

from google.protobuf.message import Message

from driver._proto.nri import api_pb2 as nri
from driver.errors import ConsumersUnknownError, DriverError, PinningError, PinRefusedError
from driver.log import get_logger
from driver.pinning.align import (
    Alignment,
    AlignOutcome,
    ContainerNeed,
    DeviceAligner,
    NodeMap,
    align_devices,
    align_wanted,
)
from driver.pinning.binding import bind, describe_binding
from driver.pinning.consumers import ConsumerCheck
from driver.pinning.failures import (
    ACTION_DEFAULTED,
    ACTION_REFUSED,
    ACTION_UNCHECKED,
    ACTION_UNPINNED,
    ACTION_WIDENED,
    REASON_ALIGN_UNCONFINED,
    REASON_ALIGN_WIDENED,
    REASON_BAD_ANNOTATION,
    REASON_BAD_MARKER,
    REASON_CONSUMERS_UNKNOWN,
    REASON_DEVICES_UNPLACED,
    REASON_DEVICES_UNREAD,
    REASON_LOOKUP_FAILED,
    REASON_POOL_EMPTY,
    REASON_UNKNOWN_CLAIM,
    PinFailure,
    PinFailureSink,
)
from driver.pinning.otherdevices import OtherDevices
from driver.pinning.types import (
    ENV_CLAIM_UID,
    ENV_CPU_MODE,
    ENV_CPUS,
    ENV_MEMS,
    ENV_REQUEST,
    MAX_NODES,
    ClaimBinding,
    CpuAssignment,
    CpuMode,
    env_markers,
    format_cpulist,
    held_requests,
    parse_cpulist,
)

__all__ = [
    "EVENTS",
    "ClaimLookup",
    "Confirm",
    "Marker",
    "NeedsRead",
    "PinningHandlers",
    "SharedPool",
    "TrackedContainer",
    "container_need",
    "marker_from_env",
]

#: CreateContainer, UpdateContainer, StopContainer, RemoveContainer
EVENTS = (
    (1 << (nri.CREATE_CONTAINER - 1))
    | (1 << (nri.UPDATE_CONTAINER - 1))
    | (1 << (nri.STOP_CONTAINER - 1))
    | (1 << (nri.REMOVE_CONTAINER - 1))
)

#: claim UID -> what the driver recorded for it (None when it has not prepared it)
ClaimLookup = Callable[[str], ClaimBinding | None]
#: the CPUs containers without a claim may use now (online - claimed; reserved CPUs stay in)
SharedPool = Callable[[], frozenset[int]]
#: the binding with the consumers known for a pod that is not among the recorded ones
#: (:meth:`ConsumerCheck.confirm`, or its read-free counterpart :func:`_remembered_only`), given
#: the pod's UID and name (the name is what a PodGroup membership read asks the apiserver for)
Confirm = Callable[[ClaimBinding, str, str], ClaimBinding]

_log = get_logger("pinning.nri")


class NeedsRead(Exception):  # noqa: N818  control flow, not an error
    """The read-free path met a container whose answer needs a read: of its claim's consumers,
    or of its pod (the devices of other drivers it holds).

    Raised only by the ``*_read_free`` handlers, before they change any bookkeeping; the plugin
    then hands the request to its bounded reads (:mod:`driver.pinning.nri.plugin`). ``fallback``,
    when set, is the answer to give when the read cannot run (the reads are busy, the time box
    ran out), given why: a container that must never be refused for a read (one without a numadra
    marker) gets what it would get without it.
    """

    def __init__(self, what: str, fallback: Callable[[str], Message] | None = None) -> None:
        super().__init__(f"{what} must be read from the apiserver")
        self.fallback = fallback


def _remembered_only(check: ConsumerCheck) -> Confirm:
    """The read-free path's :data:`Confirm`: what ``check`` remembers, else :class:`NeedsRead`."""

    def confirm(binding: ClaimBinding, pod_uid: str, _pod_name: str) -> ClaimBinding:
        known = check.remembered(binding, pod_uid)
        if known is None:
            raise NeedsRead(f"the consumers of {describe_binding(binding)}")
        return known

    return confirm


@dataclass(frozen=True, slots=True)
class Marker:
    """The pinning a container carries in its env."""

    cpus: frozenset[int]
    mems: frozenset[int]
    claim_uid: str = ""
    request: str = ""
    mode: CpuMode = CpuMode.EXCLUSIVE
    #: the base requests whose devices the container holds (``NUMADRA_HOLDS_*``; claims without CPUs)
    holds: frozenset[str] = frozenset()
    #: after the check: the journal's nodes of those devices (empty: the claim's, ``mems``)
    device_mems: frozenset[int] = frozenset()


@dataclass(frozen=True, slots=True)
class TrackedContainer:
    """Bookkeeping of one pinned container."""

    container_id: str
    name: str
    marker: Marker
    stopped: bool = False


def marker_from_env(env: Iterable[str]) -> Marker | None:
    """The marker in a container env ("KEY=value" strings), None when it has none."""
    values = env_markers(env)
    if ENV_CPUS not in values and ENV_MEMS not in values:
        return None
    try:
        cpus = parse_cpulist(values.get(ENV_CPUS, ""), what=ENV_CPUS)  # bounded before any range grows
        mems = parse_cpulist(values.get(ENV_MEMS, ""), limit=MAX_NODES, what=ENV_MEMS)
    except ValueError as exc:
        raise PinningError(f"malformed pinning marker {ENV_CPUS}/{ENV_MEMS}: {exc}") from exc
    try:
        mode = CpuMode(values.get(ENV_CPU_MODE, CpuMode.EXCLUSIVE.value))
    except ValueError as exc:
        raise PinningError(f"malformed pinning marker {ENV_CPU_MODE}={values[ENV_CPU_MODE]!r}") from exc
    if not cpus and not mems:
        raise PinningError(f"empty pinning marker {ENV_CPUS}/{ENV_MEMS}: an empty cpuset would not pin")
    return Marker(
        cpus, mems, values.get(ENV_CLAIM_UID, ""), values.get(ENV_REQUEST, ""), mode, held_requests(values)
    )


@dataclass(frozen=True, slots=True)
class _AlignedContainer:
    """A device container on its devices' node(s): what it needs and where it runs now."""

    device_nodes: frozenset[int]
    need: ContainerNeed
    placed: Alignment
    #: the generation of the node (inventory and shared set) it was placed on
    generation: int


def container_need(resources: nri.LinuxResources) -> ContainerNeed:
    """A container's CPU request (whole CPUs) and memory limit, from its Linux resources.

    The request comes from ``cpu.shares``: the kubelet writes ``milliCPU * 1024 / 1000`` (2 for a
    container without a request, which asks for no CPU here).
    """
    shares = resources.cpu.shares.value if resources.cpu.HasField("shares") else 0
    cpus = math.ceil(shares / 1024) if shares > 2 else 0
    limit = resources.memory.limit.value if resources.memory.HasField("limit") else 0
    return ContainerNeed(cpus=cpus, memory=max(0, limit))


def _resources(marker: Marker) -> nri.LinuxResources:
    cpu = nri.LinuxCPU(cpus=format_cpulist(marker.cpus), mems=format_cpulist(marker.mems))
    return nri.LinuxResources(cpu=cpu)


def _update(container_id: str, marker: Marker) -> nri.ContainerUpdate:
    return nri.ContainerUpdate(
        container_id=container_id, linux=nri.LinuxContainerUpdate(resources=_resources(marker))
    )


_UNREAD = "the pod could not be read for other DRA drivers' devices"
#: the marker of a container aligned without a claim of numadra's (its cpuset is the placement's)
_SHARED = Marker(cpus=frozenset(), mems=frozenset(), mode=CpuMode.SHARED)


def _pool_marker(pool: frozenset[int]) -> Marker:
    """The node shared pool expressed as a marker (CPUs only: memory stays unrestricted)."""
    return Marker(cpus=pool, mems=frozenset(), mode=CpuMode.SHARED)


def _describe(pod: nri.PodSandbox, ctr: nri.Container) -> str:
    """Who asked ("container app of pod ns/name (uid U)"), for error texts and logs."""
    return (
        f"container {ctr.name or ctr.id} of pod {pod.namespace or '?'}/{pod.name or '?'} "
        f"(uid {pod.uid or 'unknown'})"
    )


class PinningHandlers:
    """NRI request -> response for CPU/memory pinning (see the module docstring).

    ``consumers`` learns a claim's pods from the apiserver when a container's pod is not a
    recorded consumer (without it only recorded pods bind); ``on_failure`` hears of every claim
    container refused or not pinned (without it they are only logged); ``aligner`` places the
    containers of claims without CPUs on their devices' node(s) (None: memory nodes only).

    Two ways in for the calls that may need such a read: :meth:`create_container` and
    :meth:`update_container` read when they must; :meth:`create_container_read_free` and
    :meth:`update_container_read_free` never do (they answer from the records and what the check
    remembers, or raise :class:`NeedsRead`), so the plugin can answer most containers on threads
    that never wait for the apiserver.
    """

    def __init__(
        self,
        claim_lookup: ClaimLookup | None = None,
        node_shared_pool: SharedPool | None = None,
        *,
        consumers: ConsumerCheck | None = None,
        on_failure: PinFailureSink | None = None,
        aligner: DeviceAligner | None = None,
        other_devices: OtherDevices | None = None,
    ) -> None:
        self._lookup = claim_lookup
        self._pool = node_shared_pool
        self._aligner = aligner
        #: reads which other DRA drivers' devices a pod holds (None: containers without numadra's
        #: marker are never aligned)
        self._other_devices = other_devices if aligner is not None else None
        #: how a pod that is not a recorded consumer is checked: with a read, or without (None: no
        #: check at all, only recorded pods bind)
        self._reads: Confirm | None = None if consumers is None else consumers.confirm
        self._read_free: Confirm | None = None if consumers is None else _remembered_only(consumers)
        self._on_failure = on_failure
        self._lock = threading.Lock()
        self._containers: dict[str, TrackedContainer] = {}
        self._others: dict[str, frozenset[int]] = {}  # running containers on the node pool
        self._aligned: dict[str, _AlignedContainer] = {}  # running device containers, aligned
        #: the node the aligned containers were last placed on, and its generation (bumped when
        #: the inventory or the shared set changes: only then are they placed again)
        self._node_seen: tuple[NodeMap, frozenset[int]] | None = None
        self._generation = 0
        #: the generation every aligned container was last checked against (-1: some may be older)
        self._checked_generation = -1
        #: placements made in this generation, by (device nodes, need): containers of one kind
        #: share them (a ReplicaSet's pods, the containers of one pod)
        self._placements: dict[tuple[frozenset[int], ContainerNeed], Alignment] = {}
        self._expected: dict[str, Marker] = {}
        self._pending_sync: list[nri.Container] = []
        self._pending_pods: dict[str, nri.PodSandbox] = {}
        self._synced = False

    # -- bookkeeping visible to the driver ------------------------------------------------------

    def containers(self) -> dict[str, TrackedContainer]:
        """A snapshot of the pinned containers, by container id."""
        with self._lock:
            return dict(self._containers)

    def pool_users(self) -> int | None:
        """How many running containers use the node shared pool; None before the first Synchronize.

        The planner asks this before a prepare takes the pool's last CPU: those containers would
        stay on that CPU. None means "not known yet" (the runtime has not told us which
        containers run), which the planner must treat as "some do".
        """
        with self._lock:
            return len(self._others.keys() | self._aligned.keys()) if self._synced else None

    def expect(self, container_id: str, assignment: CpuAssignment) -> None:
        """Pin ``container_id`` to ``assignment`` even without a marker (explicit backend apply)."""
        marker = Marker(assignment.cpus, assignment.mems, request=assignment.request, mode=assignment.mode)
        with self._lock:
            self._expected[container_id] = marker

    def forget(self, container_id: str) -> None:
        """Drop an explicit assignment and the container's bookkeeping."""
        with self._lock:
            self._expected.pop(container_id, None)
            self._containers.pop(container_id, None)
            self._aligned.pop(container_id, None)

    # -- NRI requests ---------------------------------------------------------------------------

    def configure(self, req: nri.ConfigureRequest) -> nri.ConfigureResponse:
        """Subscribe to the container events pinning needs."""
        _log.info(
            "configured by runtime",
            runtime=req.runtime_name,
            runtime_version=req.runtime_version,
            nri_version=req.NRI_version,
            request_timeout_ms=req.request_timeout,
        )
        return nri.ConfigureResponse(events=EVENTS)

    def synchronize(self, req: nri.SynchronizeRequest) -> nri.SynchronizeResponse:
        """Rebuild the bookkeeping from every container; re-pin drifted ones (paged by ``more``).

        The same binding rule as at creation: a container whose marker does not bind to its pod
        is not adopted; it is handled as a container without a claim (with the shared pool on,
        it is moved onto the pool).
        """
        with self._lock:
            self._pending_sync.extend(req.containers)
            self._pending_pods.update((p.id, p) for p in req.pods)
            if req.more:
                return nri.SynchronizeResponse(more=True)
            containers, self._pending_sync = self._pending_sync, []
            pods, self._pending_pods = self._pending_pods, {}
        rebuilt: dict[str, TrackedContainer] = {}
        others: dict[str, frozenset[int]] = {}
        aligned: dict[str, _AlignedContainer] = {}
        updates: list[nri.ContainerUpdate] = []
        pool = self._pool() if self._pool is not None else frozenset()
        for ctr in containers:
            pod = pods.get(ctr.pod_sandbox_id) or nri.PodSandbox(id=ctr.pod_sandbox_id)
            stopped = ctr.state == nri.CONTAINER_STOPPED
            try:
                marker = self._resolve(pod, ctr, self._reads)
            except PinningError as exc:
                if isinstance(exc, PinRefusedError) and exc.reason == REASON_CONSUMERS_UNKNOWN:
                    # not proof either way: leave it as it runs until its pod can be checked
                    self.report(pod, ctr, REASON_CONSUMERS_UNKNOWN, ACTION_UNCHECKED, str(exc))
                    continue
                _log.error(
                    "running container not adopted: its pinning marker does not bind; "
                    "handled as a container without a claim",
                    container=ctr.id,
                    pod_uid=pod.uid,
                    error=str(exc),
                )
                marker = None
            if marker is not None:
                rebuilt[ctr.id] = TrackedContainer(ctr.id, ctr.name, marker, stopped=stopped)
            if stopped:
                continue
            try:
                placed = (
                    self._alignment(pod, ctr, marker, report=False)
                    if marker is not None
                    else self._other_alignment(pod, ctr, self._remembered_other_nodes(pod, ctr))
                )
            except PinRefusedError:  # an empty pool: it keeps running as it runs, on the pool's terms
                placed = None
            if placed is not None:
                aligned[ctr.id] = placed
                want: Marker | None = self._aligned_marker(marker or _SHARED, placed.placed)
            else:
                if self._pool is not None and (marker is None or not marker.cpus):
                    others[ctr.id] = pool  # it runs on the pool (counted even while the pool is empty)
                want = self._wanted(marker, pool)
            if want is None:
                continue
            current = ctr.linux.resources.cpu
            if (want.cpus and current.cpus != format_cpulist(want.cpus)) or (
                want.mems and current.mems != format_cpulist(want.mems)
            ):
                updates.append(_update(ctr.id, want))
        with self._lock:
            self._containers = rebuilt
            self._others = others
            self._aligned = aligned
            self._checked_generation = -1
            self._synced = True
        _log.info(
            "synchronized",
            pinned=len(rebuilt),
            shared=len(others),
            aligned=len(aligned),
            repinned=len(updates),
            seen=len(containers),
        )
        return nri.SynchronizeResponse(update=updates)

    def create_container(self, req: nri.CreateContainerRequest) -> nri.CreateContainerResponse:
        """Pin a container of a pod that holds the claim its marker names; others: the pool if on.

        A refusal (:class:`~driver.errors.PinningError`) is reported to the failure sink, then
        raised: the runtime fails the container. May read the claim's consumers (see the class).
        """
        return self._create_container(req, self._reads, reading=True)

    def create_container_read_free(self, req: nri.CreateContainerRequest) -> nri.CreateContainerResponse:
        """:meth:`create_container` without a read: :class:`NeedsRead` when the answer needs one."""
        return self._create_container(req, self._read_free, reading=False)

    def _create_container(
        self, req: nri.CreateContainerRequest, confirm: Confirm | None, *, reading: bool
    ) -> nri.CreateContainerResponse:
        pod, ctr = req.pod, req.container
        try:
            return self._create(pod, ctr, confirm, reading=reading)
        except PinningError as exc:
            reason = exc.reason if isinstance(exc, PinRefusedError) else REASON_BAD_MARKER
            self.report(pod, ctr, reason, ACTION_REFUSED, str(exc))
            raise

    def _create(
        self, pod: nri.PodSandbox, ctr: nri.Container, confirm: Confirm | None, *, reading: bool
    ) -> nri.CreateContainerResponse:
        marker = self._resolve(pod, ctr, confirm)
        if marker is None:
            nodes = self._other_nodes(pod, ctr, reading=reading)
            placed = self._other_alignment(pod, ctr, nodes, report=True)
            if placed is None:
                return self._create_other(pod, ctr)
            with self._lock:
                self._aligned[ctr.id] = placed
                self._others.pop(ctr.id, None)
                if placed.generation != self._generation:
                    self._checked_generation = -1
            want = self._aligned_marker(_SHARED, placed.placed)
            _log.info(
                "container of other drivers' devices aligned",
                container=ctr.id,
                pod_uid=pod.uid,
                cpus=format_cpulist(want.cpus),
                mems=format_cpulist(want.mems),
                outcome=placed.placed.outcome.value,
            )
            adjust = nri.ContainerAdjustment(linux=nri.LinuxContainerAdjustment(resources=_resources(want)))
            return nri.CreateContainerResponse(adjust=adjust)
        want = marker
        placed = self._alignment(pod, ctr, marker, report=True)
        if placed is not None:  # a claim without CPUs: on its devices' node(s)
            want = self._aligned_marker(marker, placed.placed)
            with self._lock:
                self._aligned[ctr.id] = placed
                if placed.generation != self._generation:  # placed just before a change
                    self._checked_generation = -1
        elif not marker.cpus and self._pool is not None:  # a claim without CPUs runs on the pool
            pool = self._pool()
            if not pool:
                raise PinRefusedError(
                    f"node shared pool is empty (every CPU is claimed): refusing to start "
                    f"{_describe(pod, ctr)}, whose claim holds no CPUs; it would run on every CPU",
                    reason=REASON_POOL_EMPTY,
                )
            want = replace(marker, cpus=pool)
            with self._lock:
                self._others[ctr.id] = pool
        with self._lock:
            self._containers[ctr.id] = TrackedContainer(ctr.id, ctr.name, marker)
        _log.info(
            "container pinned",
            claim_uid=marker.claim_uid,
            request=marker.request,
            container=ctr.id,
            pod_uid=pod.uid,
            cpus=format_cpulist(want.cpus),
            mems=format_cpulist(want.mems),
        )
        adjust = nri.ContainerAdjustment(linux=nri.LinuxContainerAdjustment(resources=_resources(want)))
        return nri.CreateContainerResponse(adjust=adjust, update=self._shrink_others() + self._realign())

    def _create_other(self, pod: nri.PodSandbox, ctr: nri.Container) -> nri.CreateContainerResponse:
        """A container without a claim: nothing, or the node shared pool (never an empty one)."""
        if self._pool is None:
            return nri.CreateContainerResponse()
        pool = self._pool()
        if not pool:
            raise PinRefusedError(
                f"node shared pool is empty (every CPU is claimed): refusing to start "
                f"{_describe(pod, ctr)} without a claim, it would run on every CPU",
                reason=REASON_POOL_EMPTY,
            )
        with self._lock:
            self._others[ctr.id] = pool
        adjust = nri.ContainerAdjustment(
            linux=nri.LinuxContainerAdjustment(resources=_resources(_pool_marker(pool)))
        )
        return nri.CreateContainerResponse(adjust=adjust)

    def _shrink_others(self) -> list[nri.ContainerUpdate]:
        """Updates moving containers without a claim onto the current pool (it may have shrunk)."""
        if self._pool is None:
            return []
        pool = self._pool()
        if not pool:
            _log.error("node shared pool is empty; containers without a claim keep their CPUs")
            return []
        with self._lock:
            stale = sorted(cid for cid, cpus in self._others.items() if cpus != pool)
            for cid in stale:
                self._others[cid] = pool
        return [_update(cid, _pool_marker(pool)) for cid in stale]

    def update_container(self, req: nri.UpdateContainerRequest) -> nri.UpdateContainerResponse:
        """Keep our pinning when the kubelet (in-place resize) or another plugin updates resources.

        The answer carries the claim's cpuset (or the pool's), not the update's; a container
        numadra neither pinned nor confined to the pool is left alone. May read the claim's
        consumers (see the class).
        """
        return self._update_container(req, self._reads)

    def update_container_read_free(self, req: nri.UpdateContainerRequest) -> nri.UpdateContainerResponse:
        """:meth:`update_container` without a read: :class:`NeedsRead` when the answer needs one."""
        return self._update_container(req, self._read_free)

    def _update_container(
        self, req: nri.UpdateContainerRequest, confirm: Confirm | None
    ) -> nri.UpdateContainerResponse:
        ctr = req.container
        with self._lock:
            tracked = self._containers.get(ctr.id)
            on_pool = ctr.id in self._others
            aligned = self._aligned.get(ctr.id)
        marker: Marker | None
        if tracked is not None:
            marker = tracked.marker
        else:
            try:
                marker = self._resolve(req.pod, ctr, confirm)
            except PinningError as exc:
                _log.warning(
                    "update of a container whose marker does not bind; not pinned",
                    container=ctr.id,
                    error=str(exc),
                )
                marker = None
        if marker is None and not on_pool and aligned is None:
            return nri.UpdateContainerResponse()
        pool = self._pool() if self._pool is not None else frozenset()
        if aligned is not None:
            want: Marker | None = self._aligned_marker(marker or _SHARED, aligned.placed)
        else:
            want = self._wanted(marker, pool)
        if want is None:
            return nri.UpdateContainerResponse()
        cpu = req.linux_resources.cpu
        if (not want.cpus or cpu.cpus == format_cpulist(want.cpus)) and (
            not want.mems or cpu.mems == format_cpulist(want.mems)
        ):
            return nri.UpdateContainerResponse()
        return nri.UpdateContainerResponse(update=[_update(ctr.id, want)])

    def stop_container(self, req: nri.StopContainerRequest) -> nri.StopContainerResponse:
        """Bookkeeping only: CPUs stay with the claim until unprepare, so restarts find them."""
        with self._lock:
            tracked = self._containers.get(req.container.id)
            if tracked is not None:
                self._containers[tracked.container_id] = TrackedContainer(
                    tracked.container_id, tracked.name, tracked.marker, stopped=True
                )
            self._others.pop(req.container.id, None)  # no longer runs on the pool
            self._aligned.pop(req.container.id, None)
        return nri.StopContainerResponse()

    def remove_container(self, req: nri.RemoveContainerRequest) -> nri.RemoveContainerResponse:
        """Forget a removed container."""
        with self._lock:
            self._containers.pop(req.container.id, None)
            self._expected.pop(req.container.id, None)
            self._others.pop(req.container.id, None)
            self._aligned.pop(req.container.id, None)
        return nri.RemoveContainerResponse()

    # -- plain device pods ----------------------------------------------------------------------

    def _alignment(
        self, pod: nri.PodSandbox, ctr: nri.Container, marker: Marker, *, report: bool
    ) -> _AlignedContainer | None:
        """Where a container of a claim without CPUs runs (None: alignment does not apply to it).

        ``report``: hand a widened or unconfined placement and a bad annotation to the failure
        sink (at creation; a Synchronize after a restart does not report them again).
        """
        if self._aligner is None or marker.cpus or not marker.mems:
            return None
        who = _describe(pod, ctr)
        wanted, problem = align_wanted(pod.annotations)
        if problem and report:
            self.report(pod, ctr, REASON_BAD_ANNOTATION, ACTION_DEFAULTED, f"{who}: {problem}")
        if not wanted:
            return None
        need = container_need(ctr.linux.resources)
        device_nodes = marker.device_mems or marker.mems
        placed, generation = self._place(self._observe(self._aligner), device_nodes, need)
        if not placed.cpus and self._pool is not None:
            raise PinRefusedError(
                f"node shared pool is empty (every CPU is claimed): refusing to start "
                f"{who}, whose claim holds no CPUs; it would run on every CPU",
                reason=REASON_POOL_EMPTY,
            )
        if report:
            self._report_placement(pod, ctr, placed)
        return _AlignedContainer(device_nodes, need, placed, generation)

    # -- containers of other DRA drivers' devices -----------------------------------------------

    def _other_nodes(self, pod: nri.PodSandbox, ctr: nri.Container, *, reading: bool) -> frozenset[int]:
        """The NUMA nodes of the other drivers' devices ``ctr`` holds (empty: none, or not
        known; never an exception but :class:`NeedsRead` on the read-free path).

        Asked only for a container without numadra's marker, and only while another driver
        publishes devices for this node; a pod read once (:class:`OtherDevices`). What cannot be
        known leaves the container as it would be without this (fail open), reported.
        """
        other = self._other_devices
        if other is None or not (pod.uid and pod.namespace and pod.name):
            return frozenset()
        who = _describe(pod, ctr)
        try:
            if not other.active() or not align_wanted(pod.annotations)[0]:
                return frozenset()
            found = other.remembered(pod.uid)
            if found is None:
                if not reading:
                    raise NeedsRead(
                        f"the devices of other drivers in pod {pod.namespace}/{pod.name}",
                        partial(self._unread_fallback, pod, ctr),
                    )
                found = other.read(pod.namespace, pod.name, pod.uid)
        except NeedsRead:
            raise
        except Exception as exc:  # never refuse a container for this: leave it as it would be
            _log.exception("placing a container of other drivers' devices failed", container=ctr.id)
            self.report(pod, ctr, REASON_DEVICES_UNREAD, ACTION_UNPINNED, f"{who}: {exc}", event=False)
            return frozenset()
        if found.unread:
            message = f"{who}: {_UNREAD} ({found.unread}); left unconfined"
            self.report(pod, ctr, REASON_DEVICES_UNREAD, ACTION_UNPINNED, message, event=False)
            return frozenset()
        held = found.containers.get(ctr.name)
        if held is None or not (held.devices or held.problems):
            return frozenset()
        problem = align_wanted(pod.annotations)[1]
        if problem:
            self.report(pod, ctr, REASON_BAD_ANNOTATION, ACTION_DEFAULTED, f"{who}: {problem}")
        if held.problems and not held.nodes:
            problems = "; ".join(held.problems[:4])
            message = f"{who}: no NUMA node is known for its other DRA drivers' devices ({problems})"
            message += "; left unconfined"
            self.report(pod, ctr, REASON_DEVICES_UNPLACED, ACTION_UNPINNED, message)
        elif held.problems:
            _log.warning(
                "some of a container's other-driver devices have no known NUMA node; placed by the others",
                container=ctr.id,
                pod_uid=pod.uid,
                problems=list(held.problems[:8]),
            )
        return held.nodes

    def _remembered_other_nodes(self, pod: nri.PodSandbox, ctr: nri.Container) -> frozenset[int]:
        """:meth:`_other_nodes` from what was read before only (Synchronize reads no pod)."""
        other = self._other_devices
        if other is None or not pod.uid or not align_wanted(pod.annotations)[0]:
            return frozenset()
        found = other.remembered(pod.uid)
        held = found.containers.get(ctr.name) if found is not None else None
        return held.nodes if held is not None else frozenset()

    def _other_alignment(
        self, pod: nri.PodSandbox, ctr: nri.Container, nodes: frozenset[int], *, report: bool = False
    ) -> _AlignedContainer | None:
        """Where a container of other drivers' devices on ``nodes`` runs (None: as any other)."""
        if self._aligner is None or not nodes:
            return None
        need = container_need(ctr.linux.resources)
        placed, generation = self._place(self._observe(self._aligner), nodes, need)
        if not placed.cpus:
            return None  # no shared CPU at all: handled as any container (the pool's rules)
        if report:
            self._report_placement(pod, ctr, placed)
        return _AlignedContainer(nodes, need, placed, generation)

    def _unread_fallback(self, pod: nri.PodSandbox, ctr: nri.Container, why: str) -> Message:
        """The answer when the pod's read cannot run (reads busy, time box): as without it."""
        self.report(
            pod,
            ctr,
            REASON_DEVICES_UNREAD,
            ACTION_UNPINNED,
            f"{_describe(pod, ctr)}: {_UNREAD} ({why}); left unconfined",
            event=False,
        )
        return self._create_other(pod, ctr)

    def _report_placement(self, pod: nri.PodSandbox, ctr: nri.Container, placed: Alignment) -> None:
        who = _describe(pod, ctr)
        if placed.outcome is AlignOutcome.WIDENED:
            self.report(pod, ctr, REASON_ALIGN_WIDENED, ACTION_WIDENED, f"{who}: {placed.why}")
        elif placed.outcome is AlignOutcome.UNCONFINED:
            self.report(pod, ctr, REASON_ALIGN_UNCONFINED, ACTION_UNPINNED, f"{who}: {placed.why}")

    def _observe(self, aligner: DeviceAligner) -> tuple[NodeMap, frozenset[int], int]:
        """The node now, and its generation (a new one when it differs from the last seen)."""
        nodes, shared = aligner.snapshot()
        with self._lock:
            seen = self._node_seen
            if seen is None or seen[0] is not nodes or seen[1] != shared:
                self._node_seen = (nodes, shared)
                self._generation += 1
                self._placements = {}
            return nodes, shared, self._generation

    def _place(
        self,
        observed: tuple[NodeMap, frozenset[int], int],
        device_nodes: frozenset[int],
        need: ContainerNeed,
    ) -> tuple[Alignment, int]:
        """Where a container with devices on ``device_nodes`` runs on the ``observed`` node (see
        :meth:`_observe`), and that node's generation."""
        nodes, shared, generation = observed
        key = (device_nodes, need)
        with self._lock:
            placed = self._placements.get(key) if generation == self._generation else None
        if placed is None:
            placed = align_devices(nodes, device_nodes, shared, need)
            with self._lock:
                if generation == self._generation:
                    self._placements[key] = placed
        return placed, generation

    @staticmethod
    def _aligned_marker(marker: Marker, placed: Alignment) -> Marker:
        return replace(marker, cpus=placed.cpus, mems=placed.mems)

    def _realign(self) -> list[nri.ContainerUpdate]:
        """Updates for the aligned device containers whose node's shared CPUs changed.

        Asked at every claim container's creation, as :meth:`_shrink_others` is: a claim prepared
        since took CPUs (or one unprepared gave them back).
        """
        if self._aligner is None:
            return []
        observed = self._observe(self._aligner)
        generation = observed[2]
        with self._lock:
            if self._checked_generation == generation:
                return []  # nothing changed since every container was last checked
            self._checked_generation = generation
            stale = sorted(
                ((cid, c) for cid, c in self._aligned.items() if c.generation != generation),
                key=lambda item: item[0],
            )
        updates: list[nri.ContainerUpdate] = []
        for cid, was in stale:
            placed, _ = self._place(observed, was.device_nodes, was.need)
            moved = (placed.cpus, placed.mems) != (was.placed.cpus, was.placed.mems)
            if moved and not placed.cpus:
                _log.error(
                    "no shared CPU left for an aligned device container; it keeps its CPUs", container=cid
                )
                continue
            with self._lock:
                if cid not in self._aligned:
                    continue  # stopped or removed meanwhile
                self._aligned[cid] = replace(was, placed=placed, generation=generation)
            if not moved:
                continue
            _log.info(
                "aligned device container moved",
                container=cid,
                cpus=format_cpulist(placed.cpus),
                mems=format_cpulist(placed.mems),
                outcome=placed.outcome.value,
            )
            updates.append(_update(cid, Marker(placed.cpus, placed.mems, mode=CpuMode.SHARED)))
        return updates

    # -- helpers --------------------------------------------------------------------------------

    @staticmethod
    def _wanted(marker: Marker | None, pool: frozenset[int]) -> Marker | None:
        """The cpuset a running container should have: its claim's, the pool's, or None (any)."""
        if marker is None:
            return _pool_marker(pool) if pool else None
        if not marker.cpus and pool:
            return replace(marker, cpus=pool)
        if not marker.cpus and not marker.mems:
            return None
        return marker

    def _resolve(self, pod: nri.PodSandbox, ctr: nri.Container, confirm: Confirm | None) -> Marker | None:
        """What to pin ``ctr`` to (the journal's values), None for a container without a claim.

        Raises :class:`PinningError` for a marker that must be refused (see the module docstring).
        """
        with self._lock:
            expected = self._expected.get(ctr.id)
        if expected is not None:
            return expected
        claimed = marker_from_env(ctr.env)
        if claimed is None:
            return None
        return self._bind(pod, ctr, claimed, confirm)

    def _bind(
        self, pod: nri.PodSandbox, ctr: nri.Container, claimed: Marker, confirm: Confirm | None
    ) -> Marker | None:
        """Check a marker against the claim's record (and consumers, through ``confirm``) and return
        the record's values."""
        who = _describe(pod, ctr)
        if self._lookup is None:
            raise PinRefusedError(
                f"{who} carries a pinning marker, but this plugin has no claim records to check it "
                "against: refusing it",
                reason=REASON_UNKNOWN_CLAIM,
            )
        if not claimed.claim_uid:
            raise PinRefusedError(
                f"{who} carries a pinning marker that names no claim ({ENV_CLAIM_UID})",
                reason=REASON_UNKNOWN_CLAIM,
            )
        try:
            binding = self._lookup(claimed.claim_uid)
        except (DriverError, OSError) as exc:  # the record is unreadable: nothing to check against
            raise PinRefusedError(
                f"{who} carries a pinning marker for claim {claimed.claim_uid}, whose record cannot "
                f"be read ({exc}): refusing it",
                reason=REASON_LOOKUP_FAILED,
            ) from exc
        if binding is None:
            raise PinRefusedError(
                f"{who} carries a pinning marker for claim {claimed.claim_uid} that this driver has "
                "not prepared",
                reason=REASON_UNKNOWN_CLAIM,
            )
        if (
            confirm is not None
            and pod.uid
            and not binding.reserved_for(pod.uid, pod.namespace)
            and binding.in_namespace(pod.namespace)
        ):
            try:
                binding = confirm(binding, pod.uid, pod.name)
            except ConsumersUnknownError as exc:
                message = (
                    f"{who} carries the pinning marker of {describe_binding(binding)}; its pod is "
                    f"not among the claim's recorded consumers and they could not be read ({exc})"
                )
                if binding.pinning is None:  # memory nodes only: start it, without them, and say so
                    self.report(pod, ctr, REASON_CONSUMERS_UNKNOWN, ACTION_UNPINNED, message)
                    return None
                raise PinRefusedError(
                    f"{message}: refusing it (fail closed; the kubelet retries the container)",
                    reason=REASON_CONSUMERS_UNKNOWN,
                ) from exc
        assignment = bind(
            binding, request=claimed.request, pod_uid=pod.uid, pod_namespace=pod.namespace, who=who
        )
        if assignment is None:
            if binding.pinning is None and not binding.reserved_for(pod.uid, pod.namespace):
                _log.warning(
                    "marker of a claim without CPUs from a pod that is not its consumer; "
                    "handled as a container without a claim",
                    claim_uid=binding.claim_uid,
                    container=ctr.id,
                    pod_uid=pod.uid,
                )
            return None
        if assignment.cpus and (
            claimed.cpus != assignment.cpus or (claimed.mems and claimed.mems != assignment.mems)
        ):
            _log.warning(
                "marker env differs from the journal; applying the journal's CPUs and nodes",
                claim_uid=binding.claim_uid,
                container=ctr.id,
                env_cpus=format_cpulist(claimed.cpus),
                cpus=format_cpulist(assignment.cpus),
            )
        mode = assignment.mode if assignment.cpus else claimed.mode
        devices = frozenset() if assignment.cpus else binding.mems_of(claimed.holds)
        return Marker(
            assignment.cpus,
            assignment.mems,
            binding.claim_uid,
            assignment.request,
            mode,
            claimed.holds,
            devices,
        )

    def report(
        self,
        pod: nri.PodSandbox,
        ctr: nri.Container,
        reason: str,
        action: str,
        message: str,
        *,
        event: bool = True,
    ) -> None:
        """Hand a claim container not pinned as its claim says to the failure sink (and log it).

        ``event`` False: counted and logged (at info), no Event on the pod (a cause of the node,
        such as a read it may not make, that would otherwise put an Event on every pod).
        Best effort and non-blocking: a failing sink is logged, never raised into the runtime's call.
        """
        claim_uid = env_markers(ctr.env).get(ENV_CLAIM_UID, "")[:128]
        (_log.error if event else _log.info)(
            "container not pinned",
            reason=reason,
            action=action,
            container=ctr.id,
            pod=f"{pod.namespace}/{pod.name}",
            pod_uid=pod.uid,
            claim_uid=claim_uid,
            error=message,
        )
        if self._on_failure is None:
            return
        try:
            self._on_failure(
                PinFailure(
                    reason=reason,
                    action=action,
                    pod_namespace=pod.namespace,
                    pod_name=pod.name,
                    pod_uid=pod.uid,
                    container=ctr.name or ctr.id,
                    claim_uid=claim_uid,
                    message=message,
                    event=event,
                )
            )
        except Exception as exc:
            _log.warning("pinning failure report failed", error=str(exc))
