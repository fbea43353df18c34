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
from dataclasses import dataclass
from typing import TypeVar

from driver.errors import CpuExhaustedError
from driver.inventory.model import Cpu
from driver.pinning.types import format_cpulist

__all__ = ["allocate_cpus", "free_cpus"]

_GroupKey = tuple[int, int]  # (package id, L3 id)
_K = TypeVar("_K")


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


@dataclass(frozen=True, slots=True)
class _NodeCores:
    """The cores of one NUMA node and their totals when nothing is held, built once per topology.

    The starting point of the node's snapshots (:class:`_NodeState`): an allocation corrects only
    the cores whose CPUs changed hands, never walks every core of the node.
    """

    shapes: tuple[_CoreShape, ...]  # ordered by first CPU
    idle: tuple[_Core, ...]  # shape.idle of each shape, same order
    position: dict[int, int]  # CPU -> index of its core in ``shapes``
    cpus: frozenset[int]  # every CPU of the node
    free: dict[_GroupKey, int]  # CPUs per L3 group
    whole: dict[_GroupKey, int]  # CPUs of whole cores per L3 group
    whole_sizes: dict[int, int]  # size of a whole core -> how many


#: topology index per ``Inventory.cpus`` tuple (by identity; the tuple is kept alive with it), so
#: the grouping by core and node is done once per inventory instead of once per request
_SHAPES: dict[int, tuple[Sequence[Cpu], dict[int, _NodeCores]]] = {}
_SHAPES_MAX = 4


def _node_cores(shapes: list[_CoreShape]) -> _NodeCores:
    ordered = tuple(sorted(shapes, key=_first_member))
    free: dict[_GroupKey, int] = {}
    whole: dict[_GroupKey, int] = {}
    sizes: dict[int, int] = {}
    for shape in ordered:
        size = len(shape.members)
        free[shape.group] = free.get(shape.group, 0) + size
        if shape.whole:
            whole[shape.group] = whole.get(shape.group, 0) + size
            sizes[size] = sizes.get(size, 0) + 1
    return _NodeCores(
        shapes=ordered,
        idle=tuple(shape.idle for shape in ordered),
        position={cpu: i for i, shape in enumerate(ordered) for cpu in shape.members},
        cpus=frozenset(cpu for shape in ordered for cpu in shape.members),
        free=free,
        whole=whole,
        whole_sizes=sizes,
    )


def _core_shapes(cpus: Sequence[Cpu]) -> dict[int, _NodeCores]:
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
    nodes = {node: _node_cores(shapes) for node, shapes in by_node.items()}
    if isinstance(cpus, tuple):  # only immutable topologies are worth remembering
        if len(_SHAPES) >= _SHAPES_MAX:
            _SHAPES.clear()
        _SHAPES[id(cpus)] = (cpus, nodes)
    return nodes


def _first_member(shape: _CoreShape) -> int:
    return shape.members[0]


def _first_cpu(core: _Core) -> int:
    return core.cpus[0]


@dataclass(slots=True)
class _Free:
    """The free part of the requested nodes: cores by first free CPU, and totals per L3 group."""

    cores: list[_Core]
    free: dict[_GroupKey, int]  # free CPUs per group (groups with none left out)
    whole: dict[_GroupKey, int]  # CPUs of free whole cores per group
    whole_sizes: dict[int, int]  # size of a free whole core -> how many


@dataclass(frozen=True, slots=True)
class _NodeState:
    """The free part of one node for one set of blocked CPUs; a snapshot, never changed once made.

    The next allocation on the node starts from the last snapshot and corrects only the cores
    whose CPUs changed hands since (usually the few of the claim planned just before), so a
    prepare costs the same on an empty node and a full one.
    """

    node: _NodeCores
    blocked: frozenset[int]  # the blocked CPUs of this node
    changed: dict[int, _Core | None]  # index of a core holding a blocked CPU -> its free part
    free: dict[_GroupKey, int]
    whole: dict[_GroupKey, int]
    whole_sizes: dict[int, int]


#: the last snapshot per node (by identity; the snapshot keeps the node alive)
_LAST: dict[int, _NodeState] = {}
_LAST_MAX = 64


def _count(
    state: tuple[dict[_GroupKey, int], dict[_GroupKey, int], dict[int, int]], core: _Core, sign: int
) -> None:
    free, whole, sizes = state
    size = len(core.cpus)
    free[core.group] = free.get(core.group, 0) + sign * size
    if core.whole:
        whole[core.group] = whole.get(core.group, 0) + sign * size
        sizes[size] = sizes.get(size, 0) + sign


def _state_of(node: _NodeCores, blocked: set[int]) -> _NodeState:
    """The node's snapshot for ``blocked``, derived from the last one (or the idle node)."""
    here = frozenset(blocked & node.cpus)
    prev = _LAST.get(id(node))
    if prev is None or prev.node is not node:
        prev = _NodeState(node, frozenset(), {}, node.free, node.whole, node.whole_sizes)
    if prev.blocked == here:
        return prev
    changed = dict(prev.changed)
    totals = (dict(prev.free), dict(prev.whole), dict(prev.whole_sizes))
    for i in {node.position[cpu] for cpu in prev.blocked ^ here}:
        shape = node.shapes[i]
        old = changed.pop(i) if i in changed else shape.idle
        if old is not None:
            _count(totals, old, -1)
        if here.isdisjoint(shape.members):
            new: _Core | None = shape.idle
        elif here.issuperset(shape.members):
            new = changed[i] = None
        else:
            ids = tuple(cpu for cpu in shape.members if cpu not in here)
            new = changed[i] = _Core(group=shape.group, cpus=ids, whole=shape.siblings.issubset(ids))
        if new is not None:
            _count(totals, new, +1)
    state = _NodeState(node, here, changed, *totals)
    if len(_LAST) >= _LAST_MAX and id(node) not in _LAST:
        _LAST.clear()
    _LAST[id(node)] = state
    return state


def _free_on(node: _NodeCores, blocked: set[int]) -> _Free:
    """The free part of ``node``: its cores minus ``blocked``, by first free CPU, with totals."""
    state = _state_of(node, blocked)
    if not state.changed:
        cores = list(node.idle)
    else:
        cores = [core for i, core in enumerate(node.idle) if i not in state.changed]
        partial = [core for core in state.changed.values() if core is not None]
        if partial:
            cores.extend(partial)
            cores.sort(key=_first_cpu)
    return _Free(cores, dict(state.free), dict(state.whole), dict(state.whole_sizes))


def _add(totals: dict[_K, int], more: Mapping[_K, int]) -> None:
    for key, value in more.items():
        totals[key] = totals.get(key, 0) + value


def _free_cores(by_node: dict[int, _NodeCores], numa_nodes: Collection[int], blocked: set[int]) -> _Free:
    """The free part of every core on ``numa_nodes`` (see :class:`_Free`)."""
    parts = [_free_on(by_node[n], blocked) for n in sorted(set(numa_nodes)) if n in by_node]
    if len(parts) == 1:
        out = parts[0]
    else:
        out = _Free([], {}, {}, {})
        for part in parts:
            out.cores.extend(part.cores)
            _add(out.free, part.free)
            _add(out.whole, part.whole)
            _add(out.whole_sizes, part.whole_sizes)
        out.cores.sort(key=_first_cpu)
    out.free = {group: n for group, n in out.free.items() if n}
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


def _take_whole_cores(
    cores: Sequence[_Core], order: Sequence[_GroupKey], count: int
) -> tuple[list[int], set[_GroupKey]]:
    """Rule 1 and 2: whole cores by (group rank, first CPU) while they fit; the CPUs and groups used."""
    if len(order) == 1:  # one group: the cores are already in first-CPU order
        by_group: dict[_GroupKey, Sequence[_Core]] = {order[0]: cores}
    else:
        grouped: dict[_GroupKey, list[_Core]] = {}
        for core in cores:
            if core.whole:
                grouped.setdefault(core.group, []).append(core)
        by_group = dict(grouped)
    chosen: list[int] = []
    used_groups: set[_GroupKey] = set()
    remaining = count
    for group in order:
        for core in by_group.get(group, ()):
            if core.whole and len(core.cpus) <= remaining:
                chosen.extend(core.cpus)
                used_groups.add(core.group)
                remaining -= len(core.cpus)
                if remaining == 0:
                    return chosen, used_groups
    return chosen, used_groups


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
    state = _free_cores(_core_shapes(topology), numa_nodes, blocked)
    cores = state.cores
    free = sum(state.free.values())
    if free < count:
        nodes = ",".join(str(n) for n in sorted(numa_nodes)) or "<none>"
        free_ids = [cpu for core in cores for cpu in core.cpus]
        raise CpuExhaustedError(
            f"NUMA node {nodes}: wanted {count} exclusive CPUs, {free} free "
            f"(free: {format_cpulist(free_ids) or 'none'})"
        )
    widest = max((size for size, n in state.whole_sizes.items() if n > 0), default=1)
    order = _group_order(state.free, state.whole, widest, count)

    chosen, used_groups = _take_whole_cores(cores, order, count)
    remaining = count - len(chosen)

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
