"""The pure half of discovery: :class:`HostFacts` -> :class:`Inventory`, deterministic, no I/O.

Here live the decisions: which PCI functions are GPUs (rules in :mod:`driver.inventory.gpus`),
which netdev is a VF of which PF, which device nodes a container needs, what ``numa_node = -1`` or
a missing NUMA directory means, and the sane default for every fact the host did not provide.
"""

from __future__ import annotations

from driver.inventory.facts import CpuFacts, HostFacts, NetFacts, NodeFacts, PciFacts
from driver.inventory.gpus import CANDIDATE_CLASSES, PCI_VENDORS, classify_gpu, is_candidate
from driver.inventory.model import (
    Cpu,
    DeviceKind,
    Gpu,
    Inventory,
    Nic,
    NumaNode,
    PciTopology,
    SkippedDevice,
    pci_device_name,
)
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
    gpus, skipped = _gpus(facts, pci)
    return Inventory(
        gpus=gpus,
        nics=_nics(facts, pci),
        cpus=_cpus(facts, nodes),
        numa_nodes=nodes,
        host_facts=facts.host_facts,
        memory_total_bytes=facts.mem_total_kib * 1024 if facts.mem_total_kib else None,
        skipped=skipped,
    )


def _topology(bus_id: str, p: PciFacts | None) -> PciTopology:
    numa = None if p is None or p.numa_node is None or p.numa_node < 0 else p.numa_node
    return PciTopology(bus_id=bus_id, pcie_root=p.pcie_root if p else "", numa_node=numa)


def _gpus(facts: HostFacts, pci: dict[str, PciFacts]) -> tuple[tuple[Gpu, ...], tuple[SkippedDevice, ...]]:
    """The functions that are GPUs by :mod:`driver.inventory.gpus`, and the skipped ones with why."""
    nvidia = {n.bus_id: n for n in facts.nvidia}
    gpus: list[Gpu] = []
    skipped: list[SkippedDevice] = []
    for p in sorted(pci.values(), key=lambda p: p.bus_id):
        if not is_candidate(p):
            continue
        gpu, skip, odd = classify_gpu(p, _topology(p.bus_id, p), nvidia.get(p.bus_id), facts.dev_nodes)
        if gpu is not None:
            gpus.append(gpu)
        elif skip is not None:
            skipped.append(skip)
            log = _log.warning if odd else _log.debug
            log("display/accelerator function not published", device=skip.bus_id, reason=skip.reason)
    return tuple(gpus), tuple(skipped)


def _nics(facts: HostFacts, pci: dict[str, PciFacts]) -> tuple[Nic, ...]:
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
        out.append(_nic(n, pci.get(n.bus_id), tuple(sorted(rdma.get(n.bus_id, ()))), facts.dev_nodes))
    return tuple(out)


def _nic(n: NetFacts, p: PciFacts | None, rdma: tuple[str, ...], dev: frozenset[str]) -> Nic:
    is_vf = p is not None and p.physfn is not None
    nodes: list[str] = []
    if rdma and p is not None:
        nodes.extend(f"/dev/infiniband/{v}" for v in p.verbs if v.startswith("uverbs"))
        nodes.append("/dev/infiniband/rdma_cm")
    speed = n.speed_mbps
    return Nic(
        name=pci_device_name(DeviceKind.NIC, n.bus_id),
        pci=_topology(n.bus_id, p),
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
        return (
            NumaNode(
                id=0,
                cpus=tuple(sorted(online)),
                memory_bytes=(facts.mem_total_kib or 0) * 1024,
                hugepages=facts.hugepages,
                distances=(10,),
            ),
        )
    return tuple(_numa_node(n, online) for n in sorted(facts.nodes, key=lambda n: n.id))


def _numa_node(n: NodeFacts, online: frozenset[int]) -> NumaNode:
    cpus = n.cpus & online if online else n.cpus
    return NumaNode(
        id=n.id,
        cpus=tuple(sorted(cpus)),
        memory_bytes=(n.mem_total_kib or 0) * 1024,
        hugepages=n.hugepages,
        distances=n.distances,
    )


def _cpus(facts: HostFacts, nodes: tuple[NumaNode, ...]) -> tuple[Cpu, ...]:
    node_of = {cpu: node.id for node in nodes for cpu in node.cpus}
    fallback_node = nodes[0].id if nodes else 0
    package_first: dict[int, int] = {}
    for c in sorted(facts.cpus, key=lambda c: c.id):
        package_first.setdefault(_package(c), c.id)
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
