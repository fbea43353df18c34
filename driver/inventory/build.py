"""The pure half of discovery: :class:`HostFacts` -> :class:`Inventory`, deterministic, no I/O.

Here live the decisions: which PCI classes are GPUs, which netdev is a VF of which PF, which device
nodes a container needs, what ``numa_node = -1`` or a missing NUMA directory means, and the sane
default for every fact the host did not provide.
"""

from __future__ import annotations

from driver.inventory.facts import CpuFacts, HostFacts, NetFacts, NodeFacts, PciFacts
from driver.inventory.model import (
    Cpu,
    DeviceKind,
    Gpu,
    Inventory,
    Nic,
    NumaNode,
    PciTopology,
    pci_device_name,
)
from driver.log import get_logger

__all__ = ["GPU_PCI_CLASSES", "PCI_VENDORS", "build_inventory"]

_log = get_logger("inventory.build")

#: PCI class >> 8 of GPUs and accelerators: VGA, 3D controller, processing accelerator
GPU_PCI_CLASSES = frozenset({0x0300, 0x0302, 0x1200})
#: vendor attribute values; every other vendor is "generic"
PCI_VENDORS = {0x10DE: "nvidia", 0x1002: "amd", 0x8086: "intel"}
#: link speeds outside (0, this) are "unknown": -1 when down, 0xffffffff from some drivers
_MAX_SANE_SPEED_MBPS = 10_000_000
_NVIDIA_SHARED_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")


def build_inventory(facts: HostFacts) -> Inventory:
    """Interpret probed facts; same facts, same inventory (ordering by PCI address and id)."""
    pci = {p.bus_id: p for p in facts.pci}
    nodes = _numa_nodes(facts)
    return Inventory(
        gpus=_gpus(facts, pci),
        nics=_nics(facts, pci),
        cpus=_cpus(facts, nodes),
        numa_nodes=nodes,
        host_facts=facts.host_facts,
        memory_total_bytes=facts.mem_total_kib * 1024 if facts.mem_total_kib else None,
    )


def _topology(bus_id: str, p: PciFacts | None) -> PciTopology:
    numa = None if p is None or p.numa_node is None or p.numa_node < 0 else p.numa_node
    return PciTopology(bus_id=bus_id, pcie_root=p.pcie_root if p else "", numa_node=numa)


def _gpus(facts: HostFacts, pci: dict[str, PciFacts]) -> tuple[Gpu, ...]:
    nvidia = {n.bus_id: n for n in facts.nvidia}
    dev = facts.dev_nodes
    out: list[Gpu] = []
    candidates = [p for p in sorted(pci.values(), key=lambda p: p.bus_id) if _is_gpu(p)]
    for index, p in enumerate(candidates):
        vendor_id = p.vendor_id or 0
        vendor = PCI_VENDORS.get(vendor_id, "generic")
        nv = nvidia.get(p.bus_id)
        nodes: list[str] = []
        if nv is not None:
            if nv.minor is not None:
                nodes.append(f"/dev/nvidia{nv.minor}")
            nodes.extend(_NVIDIA_SHARED_NODES)
        nodes.extend(f"/dev/dri/{n}" for n in p.drm if n.startswith(("card", "renderD")))
        nodes.extend(f"/dev/accel/{n}" for n in p.accel if n.startswith("accel"))
        if vendor == "amd":
            nodes.append("/dev/kfd")
        out.append(
            Gpu(
                name=pci_device_name(DeviceKind.GPU, p.bus_id),
                pci=_topology(p.bus_id, p),
                vendor=vendor,
                vendor_id=vendor_id,
                device_id=p.device_id or 0,
                pci_class=p.pci_class or 0,
                index=index,
                driver=p.driver,
                product_name=(nv.model if nv is not None else None) or p.product_name,
                memory_bytes=p.vram_bytes if p.vram_bytes and p.vram_bytes > 0 else None,
                minor=nv.minor if nv is not None else None,
                device_nodes=tuple(n for n in nodes if n in dev),
            )
        )
    return tuple(out)


def _is_gpu(p: PciFacts) -> bool:
    return p.pci_class is not None and (p.pci_class >> 8) in GPU_PCI_CLASSES


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
