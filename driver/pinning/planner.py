"""Turn a claim's CPU requests into a :class:`ClaimPinning`: exclusive slices and a pod shared pool.

The model (seed: Kubernetes pod-level resource managers, KEP-5526, expressed with DRA):

* every ``exclusive`` request gets its own CPUs, chosen by :func:`allocate_cpus` on the NUMA
  node(s) of its ``cpu-numa<N>`` device(s); the containers referencing it run there alone;
* all ``shared`` requests of the claim together form the claim's **pod shared pool**: their CPU
  counts are summed, allocated once, and the same CPU set is given to every shared request, so
  sidecars share those CPUs with each other but with nobody outside the claim;
* a claim that has a shared request but whose pool would hold zero CPUs is rejected ("empty
  shared pool restriction"): an empty cpuset means "no change" to runtimes, so those containers
  would silently run on every CPU of the host;
* memory nodes (``cpuset.mems``) of an assignment are the NUMA nodes of the request's cpu devices
  that have memory, plus the CPU-less nodes whose ``memory`` devices the claim was allocated. A
  node without memory is never written (the kernel refuses it), and a CPU-less node (GPU memory,
  a CXL expander) enters only when the claim asked for its memory device: confining a container
  to such memory is never a side effect of where a GPU or a CPU sits;
* the **node shared pool** (containers without a claim, with ``--nri-shared-pool``) is the online
  CPUs minus every claimed CPU. ``--reserved-cpus`` are never handed to a claim and always stay
  in it, as the kubelet's CPU manager keeps its reserved CPUs shared, so with reserved CPUs the
  pool cannot be emptied. Without them, a claim that would take the pool's last CPU while
  containers run on the pool is refused: they would stay on that CPU (the runtime cannot be
  told "no CPUs"), and the claim's exclusivity would silently break.

The claims layer serializes prepares and passes the CPUs other journaled claims hold as
``taken``; the planner still takes a lock so that two callers can never be handed the same CPUs.
The planner does not log: the claims layer puts the pinning into its one "prepared" line per claim.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable, Sequence

from driver.errors import ClaimError, CpuExhaustedError, PinningError
from driver.inventory.model import Inventory, InventoryDevice, NumaNode
from driver.pinning.allocator import allocate_cpus
from driver.pinning.types import ClaimPinning, CpuAssignment, CpuMode, CpuRequest, format_cpulist

__all__ = ["CpuPlanner", "PoolUsers", "device_numa_node", "mems_for_devices"]

#: how many containers run on the node shared pool now; None while that is not known yet
PoolUsers = Callable[[], int | None]


def device_numa_node(device: InventoryDevice) -> int | None:
    """The NUMA node whose memory a claim of ``device`` may be confined to (None: none).

    A cpu or memory device: its own node, when that node has memory. A GPU or NIC: its PCI
    function's node when that node has CPUs and memory of its own (``PciTopology.local_memory``);
    not when firmware reports no node, nor a node without CPUs (a generic initiator, another
    device's memory), which the claim never asked for.
    """
    if isinstance(device, NumaNode):
        return device.id if device.memory_bytes > 0 else None
    return device.pci.numa_node if device.pci.local_memory else None


def mems_for_devices(inventory: Inventory, device_names: Iterable[str]) -> frozenset[int]:
    """Memory nodes of the named devices (:func:`device_numa_node`): for claims without CPUs.

    Names this inventory does not know contribute nothing; an empty result means "leave mems
    alone".
    """
    devices = (inventory.find(name) for name in device_names)
    nodes = (device_numa_node(dev) for dev in devices if dev is not None)
    return frozenset(n for n in nodes if n is not None)


class CpuPlanner:
    """Decides which CPUs and memory nodes each request of a claim gets (see module docstring)."""

    def __init__(
        self,
        inventory_provider: Callable[[], Inventory],
        reserved_cpus: Collection[int] = (),
        *,
        shared_pool: bool = False,
    ) -> None:
        """``shared_pool``: the node shared pool is enforced (``--nri-shared-pool``), so a claim
        must not empty it while containers run on it (see :meth:`watch_pool`)."""
        self._inventory = inventory_provider
        self._reserved = frozenset(reserved_cpus)
        self._shared_pool = shared_pool
        self._pool_users: PoolUsers | None = None
        self._lock = threading.Lock()
        #: the last inventory seen (by identity), its NUMA node ids (nodes and the nodes its CPUs
        #: name) and those with memory to confine a container to: computed once per inventory
        self._known_nodes: tuple[Inventory | None, frozenset[int], frozenset[int]] = (
            None,
            frozenset(),
            frozenset(),
        )

    @property
    def reserved_cpus(self) -> frozenset[int]:
        """CPUs kept for the system (``--reserved-cpus``); never handed out."""
        return self._reserved

    def watch_pool(self, users: PoolUsers) -> None:
        """Where to learn how many containers run on the node shared pool (the NRI plugin's view).

        Until this is called, or while it answers None, containers are assumed to run there: on
        a node there always are some, and guessing "none" would let a claim empty the pool.
        """
        self._pool_users = users

    def node_shared_pool(self, claimed: Collection[int]) -> frozenset[int]:
        """CPUs for containers without a claim: online minus ``claimed`` (reserved CPUs stay in)."""
        online = {c.id for c in self._inventory().cpus}
        return frozenset(online - set(claimed))

    def plan(
        self,
        claim_uid: str,
        requests: Sequence[CpuRequest],
        taken: Collection[int],
        *,
        memory_nodes: Collection[int] = (),
    ) -> ClaimPinning:
        """Choose CPUs for every request of one claim; ``taken`` = CPUs held by other claims.

        ``memory_nodes`` are the nodes of the claim's ``memory`` devices: every assignment may
        allocate there too (see the module docstring). Raises :class:`ClaimError` for an invalid
        request set (empty shared pool, no node, duplicate names), :class:`CpuExhaustedError`
        when a node has too few free CPUs.
        """
        self._validate(claim_uid, requests)
        with self._lock:
            inventory = self._inventory()
            known_nodes, with_memory = self._nodes_of(inventory)
            asked = with_memory.intersection(memory_nodes)
            for req in requests:
                if not known_nodes.issuperset(req.numa_nodes):
                    missing = sorted(set(req.numa_nodes) - known_nodes)
                    raise PinningError(
                        f"claim {claim_uid} request {req.request}: NUMA node(s) "
                        f"{format_cpulist(missing)} do not exist on this host"
                    )
            held = set(taken)
            by_request: dict[str, CpuAssignment] = {}
            for req in requests:
                if req.mode is CpuMode.EXCLUSIVE:
                    cpus = self._take(
                        claim_uid,
                        req.request,
                        inventory=inventory,
                        nodes=req.numa_nodes,
                        count=req.count,
                        held=held,
                    )
                    by_request[req.request] = CpuAssignment(
                        request=req.request,
                        mode=req.mode,
                        cpus=cpus,
                        mems=with_memory.intersection(req.numa_nodes) | asked,
                    )
            shared = [r for r in requests if r.mode is CpuMode.SHARED]
            if shared:
                nodes = tuple(sorted({n for r in shared for n in r.numa_nodes}))
                names = ",".join(r.request for r in shared)
                pool = self._take(
                    claim_uid,
                    names,
                    inventory=inventory,
                    nodes=nodes,
                    count=sum(r.count for r in shared),
                    held=held,
                )
                mems = with_memory.intersection(nodes) | asked
                for req in shared:
                    by_request[req.request] = CpuAssignment(
                        request=req.request, mode=req.mode, cpus=pool, mems=mems
                    )
            if self._shared_pool:
                self._keep_pool(claim_uid, inventory, held, taken)
        return ClaimPinning(claim_uid=claim_uid, assignments=tuple(by_request[r.request] for r in requests))

    def _keep_pool(
        self, claim_uid: str, inventory: Inventory, held: set[int], taken: Collection[int]
    ) -> None:
        """Refuse a claim that would leave the node shared pool empty while containers use it."""
        online = {c.id for c in inventory.cpus}
        if online - held:  # reserved CPUs are never in ``held``: with them this always passes
            return
        users = self._pool_users() if self._pool_users is not None else None
        if users == 0:
            return  # nothing runs on the pool; a container created later is refused at creation
        running = "containers" if users is None else f"{users} container(s)"
        mine = format_cpulist(sorted(online - set(taken)))
        raise ClaimError(
            claim_uid,
            f"would take the last CPUs of the node shared pool ({mine}) while {running} without a "
            "claim run on it: they would stay on those CPUs and the claim's CPUs would not be "
            "exclusive. Keep CPUs for the pool with --reserved-cpus (reserved CPUs are never "
            "claimed and always shared), or free CPUs by deleting another claim",
        )

    def _nodes_of(self, inventory: Inventory) -> tuple[frozenset[int], frozenset[int]]:
        """Every NUMA node id of ``inventory`` (nodes and the nodes its CPUs name), and the nodes
        that have memory to confine a container to (:func:`device_numa_node`); call under the lock."""
        seen, nodes, with_memory = self._known_nodes
        if seen is not inventory:
            nodes = frozenset({n.id for n in inventory.numa_nodes} | {c.numa_node for c in inventory.cpus})
            with_memory = frozenset(n.id for n in inventory.numa_nodes if device_numa_node(n) is not None)
            self._known_nodes = (inventory, nodes, with_memory)
        return nodes, with_memory

    @staticmethod
    def _validate(claim_uid: str, requests: Sequence[CpuRequest]) -> None:
        """Reject request sets that cannot be pinned safely, before touching the ledger."""
        names = [r.request for r in requests]
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise ClaimError(claim_uid, f"duplicate cpu request name(s): {', '.join(dupes)}")
        for req in requests:
            if not req.numa_nodes:
                raise ClaimError(claim_uid, f"cpu request {req.request} has no NUMA node (no cpu device)")
            if req.count < 0:
                raise ClaimError(claim_uid, f"cpu request {req.request} asks for {req.count} CPUs")
            if req.mode is CpuMode.EXCLUSIVE and req.count == 0:
                raise ClaimError(
                    claim_uid,
                    f"exclusive cpu request {req.request} got 0 CPUs: an empty cpuset would let its "
                    "containers run on every CPU",
                )
        shared = [r for r in requests if r.mode is CpuMode.SHARED]
        if shared and sum(r.count for r in shared) == 0:
            raise ClaimError(
                claim_uid,
                "empty shared pool restriction: request(s) "
                f"{', '.join(r.request for r in shared)} use the pod shared pool but it would hold 0 CPUs; "
                "give a shared request a 'cpus' capacity of at least 1",
            )

    def _take(
        self,
        claim_uid: str,
        what: str,
        *,
        inventory: Inventory,
        nodes: Collection[int],
        count: int,
        held: set[int],
    ) -> frozenset[int]:
        """Allocate ``count`` CPUs and add them to ``held``; errors name the claim and request."""
        try:
            cpus = allocate_cpus(inventory.cpus, set(nodes), count, frozenset(held), self._reserved)
        except CpuExhaustedError as exc:
            raise CpuExhaustedError(f"claim {claim_uid} request {what}: {exc}") from exc
        held |= cpus
        return cpus
