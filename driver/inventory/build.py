"""The pure half of discovery: :class:`HostFacts` -> :class:`Inventory`, deterministic, no I/O.

Here live the decisions: which PCI functions are GPUs (rules in :mod:`driver.inventory.gpus`),
which netdev is a VF of which PF, which device nodes a container needs, what ``numa_node = -1`` or
a missing NUMA directory means, and the sane default for every fact the host did not provide.

NUMA nodes: a node with CPUs is kept with its CPUs and memory; a node without CPUs is kept when it
has memory (GPU memory, a CXL expander: a ``memory`` device) and dropped when it has neither (the
empty placeholder nodes of Grace Hopper). Sockets and the KEP-6072 node lists come from
:mod:`driver.inventory.numa`; what the host's files leave unproven is logged as a warning and
left out, never guessed.
"""

from __future__ import annotations

import dataclasses

from driver.inventory.facts import CpuFacts, HostFacts, NetFacts, NodeFacts, NodeMasks, PciFacts
from driver.inventory.gpus import CANDIDATE_CLASSES, PCI_VENDORS, classify_gpu, is_candidate
from driver.inventory.model import (
    Cpu,
    DeviceKind,
    Gpu,
    Inventory,
    MemoryKind,
    Nic,
    NumaNode,
    PciTopology,
    SkippedDevice,
    pci_device_name,
)
from driver.inventory.numa import NodeShape, place_nodes
from driver.log import get_logger

__all__ = ["GPU_PCI_CLASSES", "PCI_VENDORS", "build_inventory"]

#: kept for importers: the rules live in driver/inventory/gpus.py
GPU_PCI_CLASSES = CANDIDATE_CLASSES

_log = get_logger("inventory.build")

#: link speeds outside (0, this) are "unknown": -1 when down, 0xffffffff from some drivers
_MAX_SANE_SPEED_MBPS = 10_000_000


def build_inventory(facts: HostFacts) -> Inventory:
    """Interpret probed facts; same facts, same inventory (ordering by PCI address and id)."""
    pci = {p.bus_id: p for p in facts.pci}
    nodes = _numa_nodes(facts)
    by_id = {n.id: n for n in nodes}
    gpus, skipped = _gpus(facts, pci, by_id)
    gpus, nodes = _gpu_memory(facts, gpus, nodes)
    return Inventory(
        gpus=gpus,
        nics=_nics(facts, pci, by_id),
        cpus=_cpus(facts, nodes),
        numa_nodes=nodes,
        host_facts=facts.host_facts,
        memory_total_bytes=facts.mem_total_kib * 1024 if facts.mem_total_kib else None,
        skipped=skipped,
    )


def _topology(bus_id: str, p: PciFacts | None, nodes: dict[int, NumaNode]) -> PciTopology:
    """Where a PCI function sits; its node's socket and list, and whether memory may follow it."""
    numa = None if p is None or p.numa_node is None or p.numa_node < 0 else p.numa_node
    root = p.pcie_root if p else ""
    if numa is None:
        return PciTopology(bus_id=bus_id, pcie_root=root, numa_node=None, local_memory=False)
    node = nodes.get(numa)
    if node is None:
        _log.warning("PCI function on a NUMA node discovery does not know", device=bus_id, numa_node=numa)
        return PciTopology(bus_id, root, numa, near_nodes=(numa,), local_memory=False)
    local = not node.memory_only and node.memory_bytes > 0
    if node.memory_only:
        _log.info(
            "PCI function on a NUMA node without CPUs: its claims get no memory pinning from it",
            device=bus_id,
            numa_node=numa,
        )
    return PciTopology(bus_id, root, numa, socket=node.socket, near_nodes=node.numa_list, local_memory=local)


def _gpus(
    facts: HostFacts, pci: dict[str, PciFacts], nodes: dict[int, NumaNode]
) -> tuple[tuple[Gpu, ...], tuple[SkippedDevice, ...]]:
    """The functions that are GPUs by :mod:`driver.inventory.gpus`, and the skipped ones with why."""
    nvidia = {n.bus_id: n for n in facts.nvidia}
    gpus: list[Gpu] = []
    skipped: list[SkippedDevice] = []
    for p in sorted(pci.values(), key=lambda p: p.bus_id):
        if not is_candidate(p):
            continue
        topology = _topology(p.bus_id, p, nodes)
        gpu, skip, odd = classify_gpu(p, topology, nvidia.get(p.bus_id), facts.dev_nodes)
        if gpu is not None:
            gpus.append(gpu)
        elif skip is not None:
            skipped.append(skip)
            log = _log.warning if odd else _log.debug
            log("display/accelerator function not published", device=skip.bus_id, reason=skip.reason)
    return tuple(gpus), tuple(skipped)


def _gpu_memory(
    facts: HostFacts, gpus: tuple[Gpu, ...], nodes: tuple[NumaNode, ...]
) -> tuple[tuple[Gpu, ...], tuple[NumaNode, ...]]:
    """Pair each GPU with the CPU-less node that is its memory, where the NVIDIA driver says so.

    The proof is the driver's ``numa_status`` of that GPU naming the node. A node named by two
    GPUs, or a named node that has CPUs, pairs with nobody (and is logged): a guess here would
    let a claim pin its memory to another GPU's memory.
    """
    published = {g.pci.bus_id for g in gpus}
    by_id = {n.id: n for n in nodes}
    claims: dict[int, list[str]] = {}
    for info in facts.nvidia:
        if info.memory_node is None or info.bus_id not in published:
            continue
        if info.memory_status not in (None, "online"):
            _log.info(
                "GPU memory node not online",
                device=info.bus_id,
                numa_node=info.memory_node,
                status=info.memory_status,
            )
            continue
        claims.setdefault(info.memory_node, []).append(info.bus_id)
    owner: dict[int, str] = {}
    for node_id, buses in sorted(claims.items()):
        node = by_id.get(node_id)
        if len(buses) > 1:
            _log.warning("several GPUs name one memory node: paired with none", numa_node=node_id, gpus=buses)
        elif node is None:
            _log.warning(
                "GPU names a memory node discovery does not know", device=buses[0], numa_node=node_id
            )
        elif not node.memory_only:
            _log.warning(
                "GPU names a NUMA node with CPUs as its memory: ignored", device=buses[0], numa_node=node_id
            )
        else:
            owner[node_id] = buses[0]
    gpu_node = {bus: node for node, bus in owner.items()}
    gpus = tuple(
        dataclasses.replace(g, memory_node=gpu_node[g.pci.bus_id]) if g.pci.bus_id in gpu_node else g
        for g in gpus
    )
    nodes = tuple(
        dataclasses.replace(node, memory_kind=MemoryKind.GPU, gpu_bus_id=owner[node.id])
        if node.id in owner
        else node
        for node in nodes
    )
    for node in nodes:
        if node.memory_kind is MemoryKind.UNKNOWN:
            _log.info(
                "memory-only NUMA node of unknown kind (no GPU or CXL region names it)", numa_node=node.id
            )
    return gpus, nodes


def _nics(facts: HostFacts, pci: dict[str, PciFacts], nodes: dict[int, NumaNode]) -> tuple[Nic, ...]:
    rdma: dict[str, list[str]] = {}
    for r in facts.rdma:
        rdma.setdefault(r.bus_id, []).append(r.name)
    seen: set[str] = set()
    out: list[Nic] = []
    for n in sorted(facts.net, key=lambda n: (n.bus_id, n.interface)):
        if n.bus_id in seen:  # one device per PCI function: the first interface name wins
            _log.debug("extra netdev of a PCI function ignored", device=n.bus_id, interface=n.interface)
            continue
        seen.add(n.bus_id)
        topology = _topology(n.bus_id, pci.get(n.bus_id), nodes)
        out.append(
            _nic(n, pci.get(n.bus_id), topology, tuple(sorted(rdma.get(n.bus_id, ()))), facts.dev_nodes)
        )
    return tuple(out)


def _nic(
    n: NetFacts, p: PciFacts | None, topology: PciTopology, rdma: tuple[str, ...], dev: frozenset[str]
) -> Nic:
    is_vf = p is not None and p.physfn is not None
    nodes: list[str] = []
    if rdma and p is not None:
        nodes.extend(f"/dev/infiniband/{v}" for v in p.verbs if v.startswith("uverbs"))
        nodes.append("/dev/infiniband/rdma_cm")
    speed = n.speed_mbps
    return Nic(
        name=pci_device_name(DeviceKind.NIC, n.bus_id),
        pci=topology,
        interface_name=n.interface,
        mac_address=(n.mac_address or "").lower(),
        driver=n.driver or (p.driver if p is not None else None),
        speed_mbps=speed if speed is not None and 0 < speed < _MAX_SANE_SPEED_MBPS else None,
        sriov_vf=is_vf,
        pf_bus_id=p.physfn if p is not None else None,
        sriov_total_vfs=0 if is_vf or p is None else max(p.sriov_total_vfs or 0, 0),
        rdma_devices=rdma,
        device_nodes=tuple(x for x in nodes if x in dev),
        operstate=n.operstate or "unknown",
        carrier=None if n.carrier is None else n.carrier == 1,
    )


def _numa_nodes(facts: HostFacts) -> tuple[NumaNode, ...]:
    """NUMA nodes from sysfs, or a synthesized node 0 holding everything when the kernel has none."""
    online = facts.online_cpus
    if not facts.nodes:
        packages = _packages(facts, online)
        return (
            NumaNode(
                id=0,
                cpus=tuple(sorted(online)),
                memory_bytes=(facts.mem_total_kib or 0) * 1024,
                hugepages=facts.hugepages,
                distances=(10,),
                socket=next(iter(packages)) if len(packages) == 1 else None,
                near_nodes=(0,),
            ),
        )
    masks = facts.node_masks
    linked: dict[int, set[int]] = {}
    for cpu, node_id in facts.cpu_nodes:
        linked.setdefault(node_id, set()).add(cpu)
    kept: list[NumaNode] = []
    for n in sorted(facts.nodes, key=lambda n: n.id):
        cpus = set(n.cpus or ()) | linked.get(n.id, set())
        if online:
            cpus &= online
        memory = (n.mem_total_kib or 0) * 1024
        _check_masks(n, bool(cpus), masks)
        if not cpus and masks.has_cpu is not None and n.id in masks.has_cpu:
            # it has CPUs, but which is unknown: neither a cpu device nor a memory-only node
            _log.warning("NUMA node with CPUs none of which can be found: not published", numa_node=n.id)
            continue
        if not cpus and not memory:
            _log.debug("NUMA node without CPUs or memory: nothing to publish", numa_node=n.id)
            continue
        kind = _memory_kind(n.id, facts) if not cpus else None
        kept.append(NumaNode(n.id, tuple(sorted(cpus)), memory, n.hugepages, memory_kind=kind))
    rows = {n.id: n.distance for n in facts.nodes}
    shapes = [
        NodeShape(node.id, bool(node.cpus), _packages(facts, frozenset(node.cpus)), rows.get(node.id))
        for node in kept
    ]
    columns = masks.online if masks.online is not None else frozenset(n.id for n in facts.nodes)
    placements, problems = place_nodes(shapes, sorted(columns))
    for problem in problems:
        _log.warning(problem.message, **problem.fields)
    return tuple(
        dataclasses.replace(
            node,
            distances=placements[node.id].distances,
            socket=placements[node.id].socket,
            near_nodes=placements[node.id].near,
        )
        for node in kept
    )


def _packages(facts: HostFacts, cpus: frozenset[int]) -> frozenset[int]:
    """The package ids the given CPUs report (unreadable or negative ones left out)."""
    return frozenset(
        c.package_id for c in facts.cpus if c.id in cpus and c.package_id is not None and c.package_id >= 0
    )


def _check_masks(n: NodeFacts, has_cpus: bool, masks: NodeMasks) -> None:
    """Warn where a node's own files and the kernel's node masks disagree."""
    if n.cpus is None:
        _log.warning(
            "NUMA node without a readable cpulist",
            numa_node=n.id,
            cpus_from="cpuN/nodeM links" if has_cpus else "none",
        )
    if masks.has_cpu is not None and (n.id in masks.has_cpu) != has_cpus:
        _log.warning(
            "NUMA node's CPUs disagree with the has_cpu mask",
            numa_node=n.id,
            has_cpu_lists_it=n.id in masks.has_cpu,
            cpus_found=has_cpus,
        )
    if masks.has_memory is not None and n.id in masks.has_memory and n.mem_total_kib is None:
        _log.warning("NUMA node has memory (has_memory) but its meminfo is unreadable", numa_node=n.id)


def _memory_kind(node_id: int, facts: HostFacts) -> MemoryKind:
    """``cxl`` when a device-DAX range of a CXL region onlines into the node, else ``unknown``.

    (``gpu`` is decided with the GPUs, see :func:`_gpu_memory`.) A CXL region's DAX device sits
    under a CXL root decoder: ``.../ACPI0017:00/root0/decoder0.0/region0/dax_region0/dax0.0``.
    """
    for dax in facts.dax:
        if dax.target_node != node_id:
            continue
        parts = dax.path.split("/")
        if any(p.startswith("decoder") for p in parts) and any(p.startswith("region") for p in parts):
            return MemoryKind.CXL
    return MemoryKind.UNKNOWN


def _cpus(facts: HostFacts, nodes: tuple[NumaNode, ...]) -> tuple[Cpu, ...]:
    node_of = {cpu: node.id for node in nodes for cpu in node.cpus}
    fallback_node = next((n.id for n in nodes if n.cpus), nodes[0].id if nodes else 0)
    package_first: dict[int, int] = {}
    for c in sorted(facts.cpus, key=lambda c: c.id):
        package_first.setdefault(_package(c), c.id)
    homeless = sorted(c.id for c in facts.cpus if c.id not in node_of)
    if homeless and facts.nodes:
        _log.warning(
            "CPUs in no NUMA node's cpulist: counted on the first node",
            cpus=homeless,
            numa_node=fallback_node,
        )
    return tuple(
        _cpu(c, node_of.get(c.id, fallback_node), package_first, facts.isolated_cpus)
        for c in sorted(facts.cpus, key=lambda c: c.id)
    )


def _cpu(c: CpuFacts, node: int, package_first: dict[int, int], isolated: frozenset[int]) -> Cpu:
    package = _package(c)
    siblings = set(c.thread_siblings or ()) | {c.id}
    return Cpu(
        id=c.id,
        # an unreadable core_id falls back to the lowest sibling, so SMT siblings still agree
        core_id=c.core_id if c.core_id is not None and c.core_id >= 0 else min(siblings),
        package_id=package,
        die_id=c.die_id if c.die_id is not None and c.die_id >= 0 else 0,
        numa_node=node,
        # without an L3 the whole package is one cache group, named after its lowest CPU
        l3_id=c.l3_id if c.l3_id is not None else package_first.get(package, c.id),
        thread_siblings=tuple(sorted(siblings)),
        isolated=c.id in isolated,
    )


def _package(c: CpuFacts) -> int:
    return c.package_id if c.package_id is not None and c.package_id >= 0 else 0
