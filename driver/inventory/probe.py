"""The thin filesystem walk: a host root (``sys/``, ``proc/``, ``dev/`` under it) -> :class:`HostFacts`.

Only reading happens here; every decision lives in :mod:`driver.inventory.build`. Paths are read
under the host root, so a DaemonSet with the host mounted at ``/host`` and a test with a generated
tree take the same code path. Device-node paths are recorded as *host* paths (``/dev/nvidia0``)
because CDI specs name host paths.
"""

from __future__ import annotations

import os
import re
from dataclasses import replace

from driver.errors import InventoryError
from driver.inventory.facts import (
    CpuFacts,
    DaxFacts,
    HostFacts,
    NetFacts,
    NodeFacts,
    NodeMasks,
    NvidiaFacts,
    PciFacts,
    RdmaFacts,
)
from driver.inventory.sysfs import (
    link_name,
    link_target,
    list_dir,
    parse_count,
    read_cpulist,
    read_int,
    read_text,
)

__all__ = ["probe_host"]

# ruff: noqa: PTH112, PTH118 - string paths on purpose (speed), see driver/inventory/sysfs.py

_BDF = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$")
_PCIE_ROOT = re.compile(r"^pci[0-9a-f]{4}:[0-9a-f]{2}$")
_NUMBERED = re.compile(r"^(?:node|cpu)([0-9]{1,9})$")
_HUGEPAGES_DIR = re.compile(r"^hugepages-([0-9]{1,12})kB$")
_VIRTIO = re.compile(r"^virtio\d+$", re.ASCII)
_NVIDIA_UUID = re.compile(
    r"^GPU-[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.IGNORECASE
)
#: PCI base classes whose extra files (SR-IOV, RDMA verbs, DRM nodes) matter to us
_NETWORK_BASE = 0x02
_GPU_CLASSES = frozenset({0x0300, 0x0302, 0x0380, 0x1200})  # CANDIDATE_CLASSES of gpus.py


def probe_host(host_root: str | os.PathLike[str] = "/") -> HostFacts:
    """Read every fact discovery needs from ``host_root``; missing files become None, never errors.

    Raises :class:`InventoryError` only when the host root itself is unusable (not a readable
    directory, or without ``sys/``), because then every other answer would be a silent lie.
    """
    root = os.fspath(host_root).rstrip("/") or "/"
    if not os.path.isdir(root) or not os.access(root, os.R_OK | os.X_OK):
        raise InventoryError(f"host root {root}: not a readable directory")
    sys_dir = os.path.join(root, "sys")
    if not os.path.isdir(sys_dir):
        raise InventoryError(f"host root {root}: no sysfs at {sys_dir}")
    proc_dir = os.path.join(root, "proc")
    cpu_dir = f"{sys_dir}/devices/system/cpu"
    online = read_cpulist(f"{cpu_dir}/online")
    if online is None:
        online = frozenset(_numbered(cpu_dir, "cpu"))
    net = _probe_net(sys_dir)
    rdma = _probe_rdma(sys_dir)
    rdma_functions = frozenset(r.bus_id for r in rdma)
    referenced = frozenset(n.bus_id for n in net) | rdma_functions
    node_dir = f"{sys_dir}/devices/system/node"
    nodes = _probe_nodes(node_dir)
    return HostFacts(
        pci=_probe_pci(sys_dir, referenced, rdma_functions),
        net=net,
        rdma=rdma,
        nvidia=_probe_nvidia(proc_dir),
        online_cpus=online,
        isolated_cpus=read_cpulist(f"{cpu_dir}/isolated") or frozenset(),
        cpus=_probe_cpus(cpu_dir, online),
        nodes=nodes,
        node_masks=_node_masks(node_dir),
        cpu_nodes=_cpu_node_links(cpu_dir, online, nodes),
        dax=_probe_dax(sys_dir),
        mem_total_kib=_meminfo_total(f"{proc_dir}/meminfo"),
        hugepages=_hugepages(f"{sys_dir}/kernel/mm/hugepages"),
        dev_nodes=_probe_dev(os.path.join(root, "dev")),
        host_facts=_host_facts(root),
    )


def _numbered(directory: str, prefix: str) -> list[int]:
    """Ids of ``<prefix>N`` entries (``node0``, ``cpu12``) in a directory."""
    out: list[int] = []
    for name in list_dir(directory):
        m = _NUMBERED.match(name)
        if m is not None and name.startswith(prefix):
            out.append(int(m.group(1)))
    return sorted(out)


def _pcie_root(link: str | None) -> str:
    """The ``pciDDDD:BB`` root-complex component of a sysfs device link target, or ""."""
    if link is None:
        return ""
    for part in link.split("/"):
        if _PCIE_ROOT.match(part):
            return part
    return ""


def _probe_pci(
    sys_dir: str, referenced: frozenset[str], rdma_functions: frozenset[str]
) -> tuple[PciFacts, ...]:
    """Every PCI function; full details only for GPUs, network functions and those a netdev or RDMA
    device points at (bridges, USB and storage controllers get just their class)."""
    bus = f"{sys_dir}/bus/pci/devices"
    out: list[PciFacts] = []
    for name in list_dir(bus):
        bus_id = name.lower()
        if not _BDF.match(bus_id):
            continue
        dev = f"{bus}/{name}"
        pci_class = read_int(f"{dev}/class", 16)
        base_sub = None if pci_class is None else pci_class >> 8
        network = base_sub is not None and base_sub >> 8 == _NETWORK_BASE
        gpu = base_sub in _GPU_CLASSES
        if not (network or gpu or bus_id in referenced):
            out.append(PciFacts(bus_id, "", None, pci_class, None, None, None))
            continue
        facts = PciFacts(
            bus_id=bus_id,
            pcie_root=_pcie_root(link_target(dev)),
            numa_node=read_int(f"{dev}/numa_node"),
            pci_class=pci_class,
            # NICs are described by their netdev; only GPUs publish vendor and device ids
            vendor_id=read_int(f"{dev}/vendor", 16) if gpu else None,
            device_id=read_int(f"{dev}/device", 16) if gpu else None,
            driver=link_name(f"{dev}/driver"),
        )
        if gpu:
            facts = _with_gpu_files(facts, dev)
        else:
            facts = _with_network_files(facts, dev, rdma=bus_id in rdma_functions)
        out.append(facts)
    return tuple(out)


def _with_network_files(facts: PciFacts, dev: str, *, rdma: bool) -> PciFacts:
    physfn = link_name(f"{dev}/physfn")
    return replace(
        facts,
        physfn=physfn.lower() if physfn else None,
        sriov_total_vfs=None if physfn else read_int(f"{dev}/sriov_totalvfs"),
        verbs=tuple(list_dir(f"{dev}/infiniband_verbs")) if rdma else (),
    )


def _with_gpu_files(facts: PciFacts, dev: str) -> PciFacts:
    return replace(
        facts,
        drm=tuple(list_dir(f"{dev}/drm")),
        accel=tuple(list_dir(f"{dev}/accel")),
        vram_bytes=read_int(f"{dev}/mem_info_vram_total"),
        product_name=read_text(f"{dev}/product_name") or None,
    )


def _owning_pci_function(iface_dir: str) -> tuple[str | None, bool]:
    """(PCI bus id owning a netdev, whether via a virtio child); (None, False) when not on PCI.

    The owner is the netdev's ``device`` itself, or the PCI parent of a virtio device. Deeper
    ancestors (a USB NIC under a PCI host controller) do not count: naming such a NIC after the
    controller would be wrong and would collide with the controller.
    """
    device = link_name(f"{iface_dir}/device")
    if device is None:
        return None, False
    device = device.lower()
    if _BDF.match(device):
        return device, False
    if _VIRTIO.match(device):
        parts = (link_target(iface_dir) or "").lower().split("/")
        if device in parts:
            parent = parts[parts.index(device) - 1]
            if _BDF.match(parent):
                return parent, True
    return None, False


def _probe_net(sys_dir: str) -> tuple[NetFacts, ...]:
    net = f"{sys_dir}/class/net"
    out: list[NetFacts] = []
    for iface in list_dir(net):
        d = f"{net}/{iface}"
        bus_id, virtio = _owning_pci_function(d)
        if bus_id is None:
            continue  # virtual (lo, bridges, veth) or not on PCI
        out.append(
            NetFacts(
                interface=iface,
                bus_id=bus_id,
                mac_address=read_text(f"{d}/address"),
                speed_mbps=read_int(f"{d}/speed"),
                operstate=read_text(f"{d}/operstate"),
                carrier=read_int(f"{d}/carrier"),
                # a PCI NIC's netdev driver is its PCI driver; a virtio child has its own
                driver=link_name(f"{d}/device/driver") if virtio else None,
            )
        )
    return tuple(out)


def _probe_rdma(sys_dir: str) -> tuple[RdmaFacts, ...]:
    ib = f"{sys_dir}/class/infiniband"
    out: list[RdmaFacts] = []
    for name in list_dir(ib):
        bus_id = (link_name(f"{ib}/{name}/device") or "").lower()
        if _BDF.match(bus_id):
            out.append(RdmaFacts(name=name, bus_id=bus_id))
    return tuple(out)


def _probe_nvidia(proc_dir: str) -> tuple[NvidiaFacts, ...]:
    gpus = f"{proc_dir}/driver/nvidia/gpus"
    out: list[NvidiaFacts] = []
    for name in list_dir(gpus):
        text = read_text(f"{gpus}/{name}/information")
        if text is None or not _BDF.match(name.lower()):
            continue
        fields = _fields(text)
        minor_text = fields.get("device minor", "")
        uuid = fields.get("gpu uuid", "")
        numa = _fields(read_text(f"{gpus}/{name}/numa_status") or "")
        node_text = numa.get("node", "")
        out.append(
            NvidiaFacts(
                bus_id=name.lower(),
                minor=parse_count(minor_text),
                model=fields.get("model") or None,
                uuid=uuid if _NVIDIA_UUID.match(uuid) else None,
                memory_node=parse_count(node_text),
                memory_status=numa.get("status") or None,
            )
        )
    return tuple(out)


def _fields(text: str) -> dict[str, str]:
    """``Key: value`` lines (the NVIDIA proc files) -> lower-case key -> stripped value."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            fields[key.strip().lower()] = value.strip()
    return fields


def _probe_cpus(cpu_dir: str, online: frozenset[int]) -> tuple[CpuFacts, ...]:
    """Topology of every online CPU, reading each fact once per core and each L3 once per cache.

    SMT siblings share core, die and package by definition, and every CPU in an L3's
    ``shared_cpu_list`` shares its id, so those files are read for the first CPU only: this cuts
    the reads on a 224-CPU host by about three quarters.
    """
    core_of: dict[int, tuple[int | None, int | None, int | None, frozenset[int] | None]] = {}
    l3_of: dict[int, int | None] = {}
    out: list[CpuFacts] = []
    for cpu in sorted(online):
        base = f"{cpu_dir}/cpu{cpu}"
        if cpu not in core_of:
            topo = f"{base}/topology"
            siblings = read_cpulist(f"{topo}/thread_siblings_list")
            facts = (
                read_int(f"{topo}/core_id"),
                read_int(f"{topo}/physical_package_id"),
                read_int(f"{topo}/die_id"),
                siblings,
            )
            for sibling in (siblings or frozenset()) | {cpu}:
                core_of.setdefault(sibling, facts)
        if cpu not in l3_of:
            l3_id, shared = _l3(f"{base}/cache")
            for member in shared | {cpu}:
                l3_of.setdefault(member, l3_id)
        core_id, package_id, die_id, siblings = core_of[cpu]
        out.append(CpuFacts(cpu, core_id, package_id, die_id, siblings, l3_of[cpu]))
    return tuple(out)


def _l3(cache_dir: str) -> tuple[int | None, frozenset[int]]:
    """(id, sharing CPUs) of a CPU's L3: ``id``, else the lowest sharing CPU; (None, {}) without L3."""
    candidates = ["index3"] + [n for n in list_dir(cache_dir) if n.startswith("index") and n != "index3"]
    for index in candidates:
        entry = f"{cache_dir}/{index}"
        if read_int(f"{entry}/level") != 3:
            continue
        shared = read_cpulist(f"{entry}/shared_cpu_list") or frozenset()
        cache_id = read_int(f"{entry}/id")
        if cache_id is None and shared:
            cache_id = min(shared)
        return cache_id, shared
    return None, frozenset()


def _probe_nodes(node_dir: str) -> tuple[NodeFacts, ...]:
    out: list[NodeFacts] = []
    for node in _numbered(node_dir, "node"):
        d = f"{node_dir}/node{node}"
        out.append(
            NodeFacts(
                id=node,
                cpus=read_cpulist(f"{d}/cpulist"),
                mem_total_kib=_meminfo_total(f"{d}/meminfo"),
                hugepages=_hugepages(f"{d}/hugepages"),
                distance=read_text(f"{d}/distance"),
            )
        )
    return tuple(out)


def _node_masks(node_dir: str) -> NodeMasks:
    return NodeMasks(
        online=read_cpulist(f"{node_dir}/online"),
        possible=read_cpulist(f"{node_dir}/possible"),
        has_cpu=read_cpulist(f"{node_dir}/has_cpu"),
        has_memory=read_cpulist(f"{node_dir}/has_memory"),
        has_normal_memory=read_cpulist(f"{node_dir}/has_normal_memory"),
    )


def _cpu_node_links(
    cpu_dir: str, online: frozenset[int], nodes: tuple[NodeFacts, ...]
) -> tuple[tuple[int, int], ...]:
    """(cpu, node) from the ``cpuN/nodeM`` links of the online CPUs no node's cpulist names.

    The kernel's own per-CPU answer, read only where the node files leave a CPU without a node
    (a node directory without ``cpulist``): on a sane host this reads nothing.
    """
    if not nodes:
        return ()
    covered: set[int] = set()
    for n in nodes:
        covered |= n.cpus or frozenset()
    out: list[tuple[int, int]] = []
    for cpu in sorted(online - covered):
        linked = _numbered(f"{cpu_dir}/cpu{cpu}", "node")
        if len(linked) == 1:
            out.append((cpu, linked[0]))
    return tuple(out)


def _probe_dax(sys_dir: str) -> tuple[DaxFacts, ...]:
    """Every device-DAX instance with the node it onlines into (CXL expanders, soft-reserved memory)."""
    bus = f"{sys_dir}/bus/dax/devices"
    out: list[DaxFacts] = []
    for name in list_dir(bus):
        d = f"{bus}/{name}"
        out.append(DaxFacts(name=name, target_node=read_int(f"{d}/target_node"), path=link_target(d) or ""))
    return tuple(out)


def _meminfo_total(path: str) -> int | None:
    """MemTotal in KiB from /proc/meminfo ("MemTotal: N kB") or a node meminfo ("Node 0 MemTotal: N kB")."""
    text = read_text(path)
    if text is None:
        return None
    for line in text.splitlines():
        key, sep, rest = line.partition(":")
        if sep and key.split()[-1:] == ["MemTotal"]:
            value = rest.split()
            return parse_count(value[0]) if value else None
    return None


def _hugepages(directory: str) -> tuple[tuple[int, int], ...]:
    """(page size KiB, nr_hugepages) for each ``hugepages-<size>kB`` directory."""
    out: list[tuple[int, int]] = []
    for name in list_dir(directory):
        m = _HUGEPAGES_DIR.match(name)
        if m is None:
            continue
        count = read_int(f"{directory}/{name}/nr_hugepages")
        out.append((int(m.group(1)), count if count is not None and count > 0 else 0))
    return tuple(sorted(out))


def _probe_dev(dev_dir: str) -> frozenset[str]:
    """Host paths of the device nodes numadra may hand to containers."""
    out: set[str] = set()
    for name in list_dir(dev_dir):
        if name.startswith("nvidia") or name == "kfd":
            out.add(f"/dev/{name}")
    for sub in ("dri", "infiniband", "accel"):
        out.update(f"/dev/{sub}/{name}" for name in list_dir(f"{dev_dir}/{sub}"))
    return frozenset(out)


def _host_facts(root: str) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    kernel = read_text(os.path.join(root, "proc/sys/kernel/osrelease"))
    if kernel:
        out.append(("kernel", kernel))
    product = read_text(os.path.join(root, "sys/devices/virtual/dmi/id/product_name"))
    if product:
        out.append(("product", product))
    return tuple(out)
