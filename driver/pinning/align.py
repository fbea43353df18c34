"""Where a container that holds devices but no CPUs of a claim runs: its devices' NUMA node(s).

A pod that asks for ``nvidia.com/gpu: 1`` (an extended resource the scheduler turns into a claim)
or for a GPU or NIC claim without CPUs cannot say "and my CPUs near it". Its container gets its
devices' memory nodes from the claim; :func:`align_devices` adds the CPUs:

* **the shared CPUs of those nodes**: the node's online CPUs that are in the node shared set
  (online minus every CPU a claim holds; ``--reserved-cpus`` stay in, as the node shared pool
  keeps them), minus the kernel's isolated CPUs (``isolcpus=``: the scheduler does not balance
  threads over them, so a container given several would run on one). Never a CPU a claim holds.
  Devices on several nodes: their union.
* **widening**: when those nodes cannot hold the container (fewer shared CPUs than its CPU request,
  or less memory than its memory limit), the nearest nodes with CPUs are added one by one, by SLIT
  distance from the device nodes (ties: the lower id), until they can. When no set of nodes can,
  the container stays **unconfined**: every node with CPUs and memory (the memory of a CPU-less
  node, a GPU's HBM or a CXL expander, is never a side effect), and all shared CPUs of the node
  (still never a claim's), or its CPUs left alone when there are none.
* **the memory rule**: a memory limit must be at most the chosen nodes' ``MemTotal``. The total,
  not the free memory: free memory is a moment's figure (page cache counts as used) and would make
  the same container land differently from one start to the next. A limit above the device nodes'
  total is the case that would certainly OOM-kill a container that fits the machine, and it is
  never confined there. A container without a memory limit keeps its devices' memory nodes, as a
  claim's container always did.

Pure: the inventory, the shared set and the container's needs in, an :class:`Alignment` out.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from driver.inventory.cpulist import format_cpulist
from driver.inventory.model import Inventory, NumaNode

__all__ = [
    "ALIGN_ANNOTATION",
    "AlignOutcome",
    "Alignment",
    "ContainerNeed",
    "DeviceAligner",
    "NodeMap",
    "align_devices",
    "align_wanted",
    "nearest_first",
]

#: the pod annotation that turns alignment off for the pod's own containers ("off"; "on" = default)
ALIGN_ANNOTATION = "numadra.dev/align"
#: the SLIT's "unreachable"; a distance the inventory does not know sorts as this
_FAR = 255


class AlignOutcome(StrEnum):
    """How the container was placed."""

    #: on its devices' node(s)
    ALIGNED = "aligned"
    #: on its devices' node(s) and the nearest others
    WIDENED = "widened"
    #: no set of nodes holds it: every node's memory, the node's shared CPUs (or CPUs left alone)
    UNCONFINED = "unconfined"


@dataclass(frozen=True, slots=True)
class ContainerNeed:
    """What a container asks of the node: its CPU request in whole CPUs and its memory limit.

    0 means "none given" for either.
    """

    cpus: int = 0
    memory: int = 0


@dataclass(frozen=True, slots=True)
class Alignment:
    """The cpuset of one device container; empty ``cpus`` / ``mems`` mean "leave it alone"."""

    cpus: frozenset[int]
    mems: frozenset[int]
    #: the nodes chosen, the device nodes first (empty when unconfined)
    nodes: tuple[int, ...]
    outcome: AlignOutcome
    #: why it was widened or left unconfined ("" when aligned), for the Event and the log
    why: str = ""


def align_wanted(annotations: Mapping[str, str]) -> tuple[bool, str]:
    """Whether a pod's containers are aligned, and a problem text for a value that is not a choice.

    ``off`` turns alignment off; ``on`` or no annotation leaves it on; anything else is reported
    and treated as the default (on).
    """
    raw = annotations.get(ALIGN_ANNOTATION)
    if raw is None or raw == "on":
        return True, ""
    if raw == "off":
        return False, ""
    shown = raw[:64]
    return True, (
        f"annotation {ALIGN_ANNOTATION}={shown!r} is neither 'on' nor 'off': treated as 'on' "
        "(the containers run on the CPUs and memory of their devices' NUMA nodes)"
    )


def _distance(inventory: Inventory, a: NumaNode, b: int) -> int:
    """SLIT distance from ``a`` to node ``b``: the row has a column per online node in id order."""
    columns = sorted(n.id for n in inventory.numa_nodes)
    if len(a.distances) != len(columns) or b not in columns:
        return _FAR
    return a.distances[columns.index(b)]


def nearest_first(inventory: Inventory, start: Collection[int]) -> list[int]:
    """The nodes with CPUs outside ``start``, nearest first (least distance from any of ``start``)."""
    origins = [n for n in inventory.numa_nodes if n.id in start]

    def key(node: NumaNode) -> tuple[int, int]:
        near = min((_distance(inventory, o, node.id) for o in origins), default=_FAR)
        return near, node.id

    others = [n for n in inventory.numa_nodes if n.cpus and n.id not in start]
    return [n.id for n in sorted(others, key=key)]


@dataclass(frozen=True, slots=True)
class NodeMap:
    """What placement asks of one inventory at every call, worked out once per inventory."""

    inventory: Inventory
    #: node -> its online CPUs that are not isolated (nodes with CPUs only)
    cpus: Mapping[int, frozenset[int]]
    #: node -> MemTotal in bytes
    memory: Mapping[int, int]

    @classmethod
    def of(cls, inventory: Inventory) -> NodeMap:
        """The map of ``inventory``."""
        isolated = {c.id for c in inventory.cpus if c.isolated}
        cpus = {n.id: frozenset(n.cpus) - isolated for n in inventory.numa_nodes if n.cpus}
        return cls(inventory, cpus, {n.id: n.memory_bytes for n in inventory.numa_nodes})

    def usable(self, nodes: Iterable[int], shared: frozenset[int]) -> frozenset[int]:
        """The shared CPUs of ``nodes``."""
        out: frozenset[int] = frozenset()
        for node_id in nodes:
            out |= self.cpus.get(node_id, frozenset()) & shared
        return out

    def mems(self, nodes: Iterable[int]) -> frozenset[int]:
        """The nodes with memory to confine to (a node without memory is refused by the kernel)."""
        return frozenset(n for n in nodes if self.memory.get(n, 0) > 0)

    def shortfall(self, nodes: Collection[int], shared: frozenset[int], need: ContainerNeed) -> str:
        """Why ``nodes`` cannot hold the container ("" when they can)."""
        cpus = self.usable(nodes, shared)
        named = f"NUMA node(s) {format_cpulist(sorted(nodes))}"
        if not cpus:
            return f"{named} have no CPU that no claim holds"
        if len(cpus) < need.cpus:
            return f"{named} have {len(cpus)} shared CPU(s), the container requests {need.cpus}"
        memory = sum(self.memory.get(n, 0) for n in nodes)
        if need.memory and memory < need.memory:
            return f"{named} have {memory} bytes of memory, the container's limit is {need.memory}"
        return ""


def align_devices(
    inventory: Inventory | NodeMap,
    device_nodes: Collection[int],
    shared: frozenset[int],
    need: ContainerNeed,
) -> Alignment:
    """The cpuset of a container holding devices on ``device_nodes`` (see the module docstring).

    ``shared``: the node shared set now (online CPUs minus every claim's). ``inventory`` may be
    given as its :class:`NodeMap`, which a caller placing many containers keeps.
    """
    nodes = inventory if isinstance(inventory, NodeMap) else NodeMap.of(inventory)
    start = sorted(n for n in device_nodes if n in nodes.cpus)
    if not start:
        return _unconfined(nodes, shared, f"NUMA node(s) {format_cpulist(sorted(device_nodes))} have no CPUs")
    first_why = nodes.shortfall(start, shared, need)
    if not first_why:
        return Alignment(nodes.usable(start, shared), nodes.mems(start), tuple(start), AlignOutcome.ALIGNED)
    chosen = list(start)
    for node_id in nearest_first(nodes.inventory, start):
        chosen.append(node_id)
        if not nodes.shortfall(chosen, shared, need):
            return Alignment(
                nodes.usable(chosen, shared),
                nodes.mems(chosen),
                tuple(chosen),
                AlignOutcome.WIDENED,
                f"{first_why}: widened to NUMA node(s) {format_cpulist(chosen)}",
            )
    return _unconfined(nodes, shared, f"{first_why}, and no set of NUMA nodes can hold it")


def _unconfined(nodes: NodeMap, shared: frozenset[int], why: str) -> Alignment:
    every = sorted(nodes.cpus)
    return Alignment(
        nodes.usable(every, shared), nodes.mems(every), (), AlignOutcome.UNCONFINED, f"{why}: left unconfined"
    )


class DeviceAligner:
    """:func:`align_devices` over the node as it is now: the current inventory and shared set.

    ``shared`` answers the node shared set (``CpuPlanner.node_shared_pool`` of the CPUs the
    journaled claims hold), asked at every placement, so a claim prepared since the last one
    shrinks it. :meth:`snapshot` tells the NRI handlers whether anything changed since they last
    placed their containers, so they recompute them only when it did.
    """

    def __init__(self, inventory: Callable[[], Inventory], shared: Callable[[], frozenset[int]]) -> None:
        self._inventory = inventory
        self._shared = shared
        self._lock = threading.Lock()
        self._map: NodeMap | None = None

    def snapshot(self) -> tuple[NodeMap, frozenset[int]]:
        """The node map of the current inventory and the shared set now."""
        inventory = self._inventory()
        with self._lock:
            if self._map is None or self._map.inventory is not inventory:
                self._map = NodeMap.of(inventory)
            nodes = self._map
        return nodes, self._shared()

    def place(self, device_nodes: Collection[int], need: ContainerNeed) -> Alignment:
        """Where a container holding devices on ``device_nodes`` runs now."""
        nodes, shared = self.snapshot()
        return align_devices(nodes, device_nodes, shared, need)
