"""Synthetic CPU topologies described in one line, for allocator/planner tests and the bench.

Numbering follows Linux on x86: with ``smt`` threads per core, CPU ``c + t * total_cores`` is
thread ``t`` of core ``c``, so siblings are far apart in id order (the case packing must handle).
"""

from __future__ import annotations

from driver.inventory.model import Cpu, Inventory, NumaNode


def synthetic_cpus(
    nodes: int, cores_per_node: int, smt: int = 2, cores_per_l3: int | None = None
) -> tuple[Cpu, ...]:
    """CPUs of ``nodes`` NUMA nodes (one package each) with ``cores_per_node`` cores of ``smt`` threads."""
    per_l3 = cores_per_l3 or cores_per_node
    total_cores = nodes * cores_per_node
    out: list[Cpu] = []
    for core in range(total_cores):
        node = core // cores_per_node
        l3 = core // per_l3
        siblings = tuple(core + t * total_cores for t in range(smt))
        out.extend(
            Cpu(
                id=cpu,
                core_id=core % cores_per_node,
                package_id=node,
                die_id=0,
                numa_node=node,
                l3_id=l3,
                thread_siblings=siblings,
            )
            for cpu in siblings
        )
    return tuple(sorted(out, key=lambda c: c.id))


def synthetic_inventory(
    nodes: int, cores_per_node: int, smt: int = 2, cores_per_l3: int | None = None
) -> Inventory:
    """An Inventory with only CPUs and NUMA nodes (16 GiB each)."""
    cpus = synthetic_cpus(nodes, cores_per_node, smt, cores_per_l3)
    numa = tuple(
        NumaNode(id=n, cpus=tuple(c.id for c in cpus if c.numa_node == n), memory_bytes=16 << 30)
        for n in range(nodes)
    )
    return Inventory(cpus=cpus, numa_nodes=numa)
