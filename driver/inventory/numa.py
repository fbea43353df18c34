"""Where NUMA nodes sit, as far as sysfs proves it: sockets, the SLIT, the KEP-6072 node lists; pure.

Three facts decide how devices on different nodes may be paired:

* a node's **socket**: the package of its CPUs. A node without CPUs (GPU memory on Grace Hopper
  and Grace Blackwell, a CXL memory expander) has no package of its own; it is given the socket of
  the CPU nodes nearest to it in the SLIT when those all sit on one socket, and none otherwise;
* the **SLIT** (``nodeN/distance``): one row per node, one column per *online* node in id order
  (not per node id: ids can be sparse, ``0,8,250-255`` on POWER9 with GPU memory). A distance is
  used only when both rows agree on it, so an asymmetric pair, a row of the wrong length, a row
  whose own distance is not its smallest, or a missing row never pairs two nodes by mistake;
  ``255`` means unreachable;
* the **list form** of ``resource.kubernetes.io/numaNode`` (KEP-6072): the node itself first,
  then, in id order, the nodes at the smallest distance from it that sit on its socket. So two
  sub-NUMA clusters of one socket (SNC, NPS) list each other, and ``matchAttribute`` (set
  intersection for lists) pairs a GPU on one with a NIC on the other.

This is stricter than the Go helper of ``k8s.io/dynamic-resource-allocation/deviceattribute`` in
two ways, both on purpose: it maps columns to online node ids (the helper takes column ``i`` as
node ``i``, which differs on hosts with sparse ids), and a node whose socket is unknown lists only
itself and is listed by no other node (the helper keeps such nodes, to over-approximate).
Everything that could not be proven comes back as a :class:`Problem` for the caller to log.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from driver.inventory.sysfs import parse_count

__all__ = ["UNREACHABLE", "NodeShape", "Placement", "Problem", "place_nodes"]

#: the SLIT value of "no path" (ACPI); never a neighbour
UNREACHABLE = 255


@dataclass(frozen=True, slots=True)
class NodeShape:
    """What placement needs of one NUMA node that discovery keeps."""

    id: int
    has_cpus: bool
    #: the package ids its CPUs report (empty when none is readable)
    packages: frozenset[int]
    distance: str | None  # the raw ``distance`` file, None when unreadable


@dataclass(frozen=True, slots=True)
class Placement:
    """Where one node sits."""

    socket: int | None
    #: the KEP-6072 list: this node first, then its same-socket nodes at the smallest distance
    near: tuple[int, ...]
    #: the SLIT row as the kernel printed it, () when it was unusable
    distances: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Problem:
    """Something the host's files say that cannot be right, or that leaves a fact unproven."""

    message: str
    fields: Mapping[str, Any] = field(default_factory=dict)


def place_nodes(
    nodes: Sequence[NodeShape], online: Sequence[int]
) -> tuple[dict[int, Placement], list[Problem]]:
    """Socket, SLIT row and node list of every node in ``nodes``; ``online`` orders the columns.

    ``online`` is the kernel's ``node/online`` list (or the node directories when it is
    unreadable). Nodes outside ``nodes`` (dropped by discovery: no CPUs and no memory) still give
    the rows their columns but are never listed.
    """
    problems: list[Problem] = []
    columns = sorted(set(online))
    rows = {n.id: _row(n, columns, problems) for n in nodes}
    pairs = _proven_pairs(rows, problems)
    sockets = _sockets(nodes, pairs, problems)
    kept = {n.id for n in nodes}
    placements: dict[int, Placement] = {}
    for n in nodes:
        row = rows[n.id]
        printed = tuple(row[c] for c in columns) if row is not None else ()
        placements[n.id] = Placement(sockets.get(n.id), _near(n.id, kept, pairs, sockets), printed)
    return placements, problems


def _row(node: NodeShape, columns: Sequence[int], problems: list[Problem]) -> dict[int, int] | None:
    """node id -> distance from one ``distance`` file, or None (with a problem) when unusable."""
    if node.distance is None:
        if len(columns) > 1:
            problems.append(Problem("NUMA node has no readable distance row", {"numa_node": node.id}))
        return None
    text = node.distance.split()
    distances = [parse_count(t) for t in text]
    if None in distances:
        problems.append(
            Problem(
                "NUMA distance row is not a list of numbers",
                {"numa_node": node.id, "row": node.distance[:80]},
            )
        )
        return None
    if len(text) != len(columns):
        problems.append(
            Problem(
                "NUMA distance row does not have one entry per online node",
                {"numa_node": node.id, "entries": len(text), "online_nodes": len(columns)},
            )
        )
        return None
    if node.id not in columns:
        problems.append(Problem("NUMA node is not in the online node list", {"numa_node": node.id}))
        return None
    row = dict(zip(columns, (d for d in distances if d is not None), strict=True))
    own = row[node.id]
    closer = sorted(c for c, d in row.items() if c != node.id and d <= own)
    if closer:
        problems.append(
            Problem(
                "NUMA node is not nearest to itself in its distance row",
                {"numa_node": node.id, "own_distance": own, "as_close": closer},
            )
        )
        return None
    return row


def _proven_pairs(
    rows: Mapping[int, dict[int, int] | None], problems: list[Problem]
) -> dict[tuple[int, int], int]:
    """(a, b) -> distance for every pair of kept nodes whose two rows agree (both orders stored)."""
    pairs: dict[tuple[int, int], int] = {}
    ids = sorted(rows)
    for i, a in enumerate(ids):
        row_a = rows[a]
        for b in ids[i + 1 :]:
            row_b = rows[b]
            if row_a is None or row_b is None:
                continue
            ab, ba = row_a.get(b), row_b.get(a)
            if ab is None or ba is None:
                continue
            if ab != ba:
                problems.append(
                    Problem(
                        "asymmetric NUMA distances: the pair is treated as unrelated",
                        {"numa_node": a, "other_node": b, "distance": ab, "distance_back": ba},
                    )
                )
                continue
            if ab == UNREACHABLE:
                continue
            pairs[(a, b)] = pairs[(b, a)] = ab
    return pairs


def _sockets(
    nodes: Sequence[NodeShape], pairs: Mapping[tuple[int, int], int], problems: list[Problem]
) -> dict[int, int]:
    """node -> socket for every node whose socket is proven (see the module docstring)."""
    sockets: dict[int, int] = {}
    for n in nodes:
        if not n.has_cpus:
            continue
        if len(n.packages) == 1:
            sockets[n.id] = next(iter(n.packages))
        elif n.packages:
            problems.append(
                Problem(
                    "the CPUs of a NUMA node report several sockets: socket unknown",
                    {"numa_node": n.id, "sockets": sorted(n.packages)},
                )
            )
    cpu_nodes = [n.id for n in nodes if n.has_cpus]
    for n in nodes:
        if n.has_cpus:
            continue
        near = _nearest(n.id, cpu_nodes, pairs)
        found = {sockets.get(c) for c in near}
        if len(found) == 1 and None not in found:
            sockets[n.id] = next(s for s in found if s is not None)
            continue
        fields: dict[str, Any] = {"numa_node": n.id}
        if near:
            fields["nearest_cpu_nodes"] = near
        problems.append(Problem("memory-only NUMA node: no single socket is nearest, socket unknown", fields))
    return sockets


def _nearest(node: int, candidates: Iterable[int], pairs: Mapping[tuple[int, int], int]) -> list[int]:
    """The candidates at the smallest proven distance from ``node`` (sorted; [] without any)."""
    known = {c: pairs[(node, c)] for c in candidates if c != node and (node, c) in pairs}
    if not known:
        return []
    least = min(known.values())
    return sorted(c for c, d in known.items() if d == least)


def _near(
    node: int, kept: set[int], pairs: Mapping[tuple[int, int], int], sockets: Mapping[int, int]
) -> tuple[int, ...]:
    socket = sockets.get(node)
    if socket is None:
        return (node,)
    same = [c for c in _nearest(node, kept, pairs) if sockets.get(c) == socket]
    return (node, *same)
