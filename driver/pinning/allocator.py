"""Pick exclusive CPUs for one request: a pure, deterministic function of topology and ledger.

The rule, in order of priority (the kubelet's "NUMA packed" idea, restated for one request):

1. **Whole cores first.** As many CPUs as possible come as complete cores (every SMT sibling
   free and handed out together), so that no other claim shares an L1/L2 with this one.
2. **Packed by L3 group.** Whole cores are taken from one L3 group when one can hold them. Among
   the groups that can, the one with the *fewest* free CPUs wins (best fit): big free groups stay
   whole for big requests later, so the node fragments less. A group that can also supply the
   leftover single threads is preferred. When no group is big enough, the groups with the most
   free whole cores are used first, so the request spans as few L3 groups as possible.
3. **Single threads only when needed** (an odd remainder, or no whole cores left): threads of
   cores that are already broken come first (a whole core is split only when no broken core is
   left, which keeps whole cores for later requests); within that, threads in the L3 groups this
   request already uses come before the others.

Ties are broken by (package, L3 id) and then by CPU id, so the same inputs always give the same
answer. Reserved and taken CPUs are never returned; when too few CPUs are free the function
raises :class:`~driver.errors.CpuExhaustedError` saying which node(s), how many were wanted and how
many were free.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass

from driver.errors import CpuExhaustedError
from driver.inventory.model import Cpu
from driver.pinning.types import format_cpulist

__all__ = ["allocate_cpus", "free_cpus"]

_GroupKey = tuple[int, int]  # (package id, L3 id)


@dataclass(frozen=True, slots=True)
class _Core:
    """The free part of one physical core (its CPUs that are neither taken nor reserved)."""

    group: _GroupKey
    cpus: tuple[int, ...]  # free CPUs of the core, sorted
    whole: bool  # every SMT sibling of the core is free


def free_cpus(
    cpus: Iterable[Cpu],
    numa_nodes: Collection[int],
    taken: Collection[int] = (),
    reserved: Collection[int] = (),
) -> list[Cpu]:
    """The CPUs on ``numa_nodes`` that are neither taken nor reserved, in id order."""
    blocked = set(taken) | set(reserved)
    return sorted((c for c in cpus if c.numa_node in numa_nodes and c.id not in blocked), key=lambda c: c.id)


@dataclass(frozen=True, slots=True)
class _CoreShape:
    """One physical core as the topology has it: its online CPUs, siblings and place."""

    group: _GroupKey
    numa_node: int
    members: tuple[int, ...]  # online CPUs of the core, sorted
    siblings: frozenset[int]  # every SMT sibling the kernel lists (offline ones too)
    whole: bool  # every sibling is online (a core with an offline sibling is never whole)
    #: the core when none of its CPUs is held, built once: most cores of a node are in that state
    idle: _Core


#: the cores of each NUMA node, ordered by first CPU
_ByNode = dict[int, tuple[_CoreShape, ...]]

#: topology index per ``Inventory.cpus`` tuple (by identity; the tuple is kept alive with it), so
#: the grouping by core and node is done once per inventory instead of once per request
_SHAPES: dict[int, tuple[Sequence[Cpu], _ByNode]] = {}
_SHAPES_MAX = 4


def _core_shapes(cpus: Sequence[Cpu]) -> _ByNode:
    """The node's cores (the thread-sibling set identifies a core) per NUMA node, cached per topology."""
    hit = _SHAPES.get(id(cpus))
    if hit is not None and hit[0] is cpus:
        return hit[1]
    by_core: dict[tuple[int, ...], list[Cpu]] = defaultdict(list)
    for cpu in cpus:
        by_core[cpu.thread_siblings or (cpu.id,)].append(cpu)
    by_node: dict[int, list[_CoreShape]] = defaultdict(list)
    for siblings, members in by_core.items():
        ids = tuple(sorted(c.id for c in members))
        group = (members[0].package_id, members[0].l3_id)
        whole = frozenset(siblings).issubset(ids)
        by_node[members[0].numa_node].append(
            _CoreShape(
                group=group,
                numa_node=members[0].numa_node,
                members=ids,
                siblings=frozenset(siblings),
                whole=whole,
                idle=_Core(group=group, cpus=ids, whole=whole),
            )
        )
    shapes = {node: tuple(sorted(cores, key=_first_member)) for node, cores in by_node.items()}
    if isinstance(cpus, tuple):  # only immutable topologies are worth remembering
        if len(_SHAPES) >= _SHAPES_MAX:
            _SHAPES.clear()
        _SHAPES[id(cpus)] = (cpus, shapes)
    return shapes


def _first_member(shape: _CoreShape) -> int:
    return shape.members[0]


def _first_cpu(core: _Core) -> int:
    return core.cpus[0]


def _cores(by_node: _ByNode, numa_nodes: Collection[int], blocked: AbstractSet[int]) -> list[_Core]:
    """The free part of every core on ``numa_nodes``, ordered by its first free CPU."""
    nodes = set(numa_nodes)
    if len(nodes) == 1:
        shapes: Sequence[_CoreShape] = by_node.get(next(iter(nodes)), ())
    else:
        shapes = sorted((s for n in nodes for s in by_node.get(n, ())), key=_first_member)
    out = []
    moved = False  # a core whose first CPU is held now sorts by a later CPU
    for shape in shapes:
        if blocked.isdisjoint(shape.members):  # the common case: nothing of this core is held
            out.append(shape.idle)
            continue
        ids = tuple(i for i in shape.members if i not in blocked)
        if ids:
            out.append(_Core(group=shape.group, cpus=ids, whole=shape.siblings.issubset(ids)))
            moved = moved or ids[0] != shape.members[0]
    if moved:
        out.sort(key=_first_cpu)
    return out


def _group_order(
    free: Mapping[_GroupKey, int], whole: Mapping[_GroupKey, int], widest: int, count: int
) -> list[_GroupKey]:
    """L3 groups in the order whole cores are taken from them (rule 2 of the module docstring).

    ``free``/``whole``: free CPUs and CPUs of free whole cores per group; ``widest``: the most
    CPUs a free whole core has.
    """
    whole_need = count - count % widest

    def rank(group: _GroupKey) -> tuple[int, int, _GroupKey]:
        held_whole = whole.get(group, 0)
        if held_whole >= whole_need and free[group] >= count:
            return (0, free[group], group)  # holds the whole request: best fit
        if held_whole >= whole_need:
            return (1, free[group], group)  # holds the whole cores: best fit
        return (2, -held_whole, group)  # too small: biggest first, span few groups

    if len(free) == 1:
        return list(free)
    return sorted(free, key=rank)


def allocate_cpus(
    cpus: Iterable[Cpu],
    numa_nodes: Collection[int],
    count: int,
    taken: Collection[int] = (),
    reserved: Collection[int] = (),
) -> frozenset[int]:
    """Choose ``count`` exclusive CPUs on ``numa_nodes`` (see the module docstring for the rule).

    ``cpus`` is the node's topology (``Inventory.cpus``); ``taken`` the CPUs other claims hold;
    ``reserved`` the CPUs kept for the system. Pure: nothing is recorded, the caller keeps the
    ledger, so releasing CPUs is simply leaving them out of ``taken`` next time.
    """
    if count < 0:
        raise ValueError(f"cannot allocate a negative number of CPUs ({count})")
    if count == 0:
        return frozenset()
    topology = cpus if isinstance(cpus, tuple) else tuple(cpus)
    blocked = set(taken) | set(reserved)
    cores = _cores(_core_shapes(topology), numa_nodes, blocked)
    # per L3 group: free CPUs, CPUs of free whole cores, and those whole cores in CPU order
    free_in: dict[_GroupKey, int] = {}
    whole_in: dict[_GroupKey, int] = {}
    whole_cores: dict[_GroupKey, list[_Core]] = {}
    widest = 1
    for core in cores:
        size = len(core.cpus)
        free_in[core.group] = free_in.get(core.group, 0) + size
        if core.whole:
            whole_in[core.group] = whole_in.get(core.group, 0) + size
            whole_cores.setdefault(core.group, []).append(core)
            widest = max(widest, size)
    free = sum(free_in.values())
    if free < count:
        nodes = ",".join(str(n) for n in sorted(numa_nodes)) or "<none>"
        free_ids = [cpu for core in cores for cpu in core.cpus]
        raise CpuExhaustedError(
            f"NUMA node {nodes}: wanted {count} exclusive CPUs, {free} free "
            f"(free: {format_cpulist(free_ids) or 'none'})"
        )
    order = _group_order(free_in, whole_in, widest, count)

    chosen: list[int] = []
    used_groups: set[_GroupKey] = set()
    remaining = count
    for group in order:  # whole cores by (group rank, first CPU)
        for core in whole_cores.get(group, ()):
            if len(core.cpus) <= remaining:
                chosen.extend(core.cpus)
                used_groups.add(core.group)
                remaining -= len(core.cpus)
                if remaining == 0:
                    break
        if remaining == 0:
            break

    if remaining:
        rank = {group: i for i, group in enumerate(order)}
        taken_now = set(chosen)
        threads = [
            (1 if core.whole else 0, 0 if core.group in used_groups else 1, rank[core.group], cpu)
            for core in cores
            for cpu in core.cpus
            if cpu not in taken_now
        ]
        threads.sort()
        chosen.extend(cpu for *_, cpu in threads[:remaining])
    return frozenset(chosen)
