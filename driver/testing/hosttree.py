"""Fake host trees (``sys/``, ``proc/``, ``dev/``) generated from compact topology descriptions.

Tests of discovery, slices, claims and the e2e suite run on these instead of hand-copied sysfs
snapshots. The layout follows the kernel's: real file names, device directories under
``sys/devices/pciDDDD:BB/...`` and *relative* symlinks from ``sys/bus``/``sys/class`` into them,
``physfn``/``virtfn*`` links between SR-IOV functions, ``drm/``, ``infiniband/`` and
``infiniband_verbs/`` children, NUMA node and CPU topology/cache directories, meminfo, hugepages,
``proc/driver/nvidia/gpus/<bdf>/information``. Device nodes under ``dev/`` are plain files.

Public API (stable; other tests depend on it): the spec dataclasses, :func:`write_host_tree`
and :data:`TOPOLOGIES` (``dgx``, ``workstation``, ``cloud_vm``, ``huge``, ``hostile``).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from driver.pinning.types import format_cpulist

__all__ = ["TOPOLOGIES", "GpuSpec", "NicSpec", "NodeSpec", "Topology", "VfSpec", "write_host_tree"]

GiB_KIB = 1024 * 1024


@dataclass(frozen=True)
class GpuSpec:
    """One GPU/accelerator PCI function."""

    bus_id: str
    vendor_id: int = 0x10DE
    device_id: int = 0x2330
    pci_class: int = 0x030200
    driver: str | None = "nvidia"
    numa_node: int | str = 0  # written verbatim: -1 or garbage allowed
    #: bridges between the root complex and the device, e.g. ("0000:17:01.0",)
    bridges: tuple[str, ...] = ()
    product_name: str | None = None  # NVIDIA: "Model:" of the proc file; others: sysfs product_name
    nvidia_minor: int | None = None  # with a value, a proc information file and /dev/nvidiaN appear
    nvidia_proc: bool | None = None  # force the proc file on/off (default: when vendor is NVIDIA)
    drm: tuple[str, ...] = ()  # ("card0", "renderD128")
    accel: tuple[str, ...] = ()  # ("accel0",)
    vram_bytes: int | None = None  # amdgpu mem_info_vram_total


@dataclass(frozen=True)
class VfSpec:
    """One SR-IOV virtual function with its netdev."""

    bus_id: str
    interface: str
    mac: str
    rdma: str | None = None
    uverbs: int | None = None


@dataclass(frozen=True)
class NicSpec:
    """One NIC PCI function (physical), optionally with VFs and an RDMA device."""

    bus_id: str
    interface: str
    mac: str
    driver: str = "mlx5_core"
    vendor_id: int = 0x15B3
    device_id: int = 0x1021
    vf_device_id: int = 0x101E
    pci_class: int = 0x020000
    numa_node: int | str = 0
    bridges: tuple[str, ...] = ()
    speed: int | str | None = 100000  # None: the file is absent
    operstate: str = "up"
    carrier: int | None = 1  # None: the file is absent (reading fails on a down link)
    sriov_total_vfs: int = 0
    vfs: tuple[VfSpec, ...] = ()
    rdma: str | None = None
    uverbs: int | None = None
    virtio: str | None = None  # "virtio2": the netdev hangs off a virtio child (cloud VMs)
    net_driver: str | None = None  # driver of the virtio child (virtio_net)
    extra_interfaces: tuple[str, ...] = ()  # more netdevs on the same function


@dataclass(frozen=True)
class NodeSpec:
    """A NUMA node with no CPUs (memory only, e.g. CXL or HBM)."""

    id: int
    memory_kib: int
    hugepages: tuple[tuple[int, int], ...] = ()


@dataclass(frozen=True)
class Topology:
    """A compact host description; CPUs are numbered like Linux on x86 (first threads, then siblings).

    CPU ``t * sockets * cores + s * cores + c`` is thread ``t`` of core ``c`` in socket ``s``; a
    socket is split into ``nodes_per_socket`` NUMA nodes by core ranges.
    """

    name: str
    sockets: int = 1
    cores_per_socket: int = 4
    threads_per_core: int = 1
    nodes_per_socket: int = 1
    memory_per_node_kib: int = 16 * GiB_KIB
    #: (page size KiB, count) per node, e.g. ((2048, 1024), (1048576, 8))
    hugepages_per_node: tuple[tuple[int, int], ...] = ((2048, 0), (1048576, 0))
    numa_dirs: bool = True  # False: no sys/devices/system/node (node 0 is synthesized)
    offline_cpus: frozenset[int] = frozenset()
    isolated: str = ""
    l3_ids: bool = True  # False: cache index3 has no "id" file (some ARM); shared_cpu_list remains
    gpus: tuple[GpuSpec, ...] = ()
    nics: tuple[NicSpec, ...] = ()
    memory_only_nodes: tuple[NodeSpec, ...] = ()
    virtual_interfaces: tuple[str, ...] = ("lo",)
    #: (path under the root, content) written last, to plant odd values
    extra_files: tuple[tuple[str, str], ...] = ()
    #: (link path under the root, target path under the root) made relative, written last
    extra_links: tuple[tuple[str, str], ...] = ()
    #: paths under the root removed last
    remove: tuple[str, ...] = ()
    kernel: str = "6.8.0-numadra-fake"
    product: str = "numadra fake host"

    @property
    def cpu_count(self) -> int:
        """All CPUs (online or not)."""
        return self.sockets * self.cores_per_socket * self.threads_per_core

    @property
    def node_count(self) -> int:
        """NUMA nodes with CPUs."""
        return self.sockets * self.nodes_per_socket

    def cpu_place(self, cpu: int) -> tuple[int, int, int, int]:
        """(socket, core, thread, node) of a CPU id."""
        per_thread = self.sockets * self.cores_per_socket
        thread, rest = divmod(cpu, per_thread)
        socket, core = divmod(rest, self.cores_per_socket)
        cores_per_node = max(self.cores_per_socket // self.nodes_per_socket, 1)
        node = socket * self.nodes_per_socket + min(core // cores_per_node, self.nodes_per_socket - 1)
        return socket, core, thread, node

    def node_cpus(self, node: int) -> tuple[int, ...]:
        """Online CPUs of a NUMA node."""
        return tuple(
            c for c in range(self.cpu_count) if self.cpu_place(c)[3] == node and c not in self.offline_cpus
        )

    def online_cpus(self) -> tuple[int, ...]:
        """All online CPUs."""
        return tuple(c for c in range(self.cpu_count) if c not in self.offline_cpus)


class _Writer:
    """Writes files and relative symlinks under one root."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self._made: set[str] = set()

    def _mkdir(self, path: str) -> None:
        if path not in self._made:
            os.makedirs(path, exist_ok=True)  # noqa: PTH103 - thousands of files: os is cheaper
            self._made.add(path)

    def file(self, rel: str, content: str = "") -> None:
        path = f"{self.root}/{rel}"
        self._mkdir(path.rpartition("/")[0])
        with open(path, "w", encoding="utf-8") as fh:  # noqa: PTH123
            fh.write(content if content.endswith("\n") or not content else content + "\n")

    def dir(self, rel: str) -> None:
        self._mkdir(f"{self.root}/{rel}")

    def link(self, rel: str, target_rel: str) -> None:
        """A relative symlink at ``rel`` to ``target_rel`` (both under the root), shaped like the kernel's.

        The kernel always names the target's last component (``device -> ../../../0000:17:00.0``,
        never ``../..``), so the path goes to the target's parent first, then down by name.
        """
        path = self.root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        target_path = self.root / target_rel
        target = f"{os.path.relpath(target_path.parent, path.parent)}/{target_path.name}"
        if path.is_symlink() or path.exists():
            path.unlink()
        path.symlink_to(target)


def write_host_tree(root: Path, topo: Topology) -> Path:
    """Generate the host tree of ``topo`` under ``root`` (created if needed); returns ``root``."""
    root.mkdir(parents=True, exist_ok=True)
    w = _Writer(root)
    _write_cpus(w, topo)
    _write_memory(w, topo)
    for gpu in topo.gpus:
        _write_gpu(w, gpu)
    if any(g.vendor_id == 0x10DE and g.nvidia_minor is not None for g in topo.gpus):
        for name in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools"):
            w.file(f"dev/{name}")
    if any(g.vendor_id == 0x1002 for g in topo.gpus):
        w.file("dev/kfd")
    for nic in topo.nics:
        _write_nic(w, nic)
    if any(n.rdma or any(v.rdma for v in n.vfs) for n in topo.nics):
        w.file("dev/infiniband/rdma_cm")
    for iface in topo.virtual_interfaces:
        base = f"sys/devices/virtual/net/{iface}"
        w.file(f"{base}/address", "00:00:00:00:00:00")
        w.file(f"{base}/operstate", "unknown")
        w.link(f"sys/class/net/{iface}", base)
    w.file("proc/sys/kernel/osrelease", topo.kernel)
    w.file("sys/devices/virtual/dmi/id/product_name", topo.product)
    for rel, content in topo.extra_files:
        w.file(rel, content)
    for rel, target in topo.extra_links:
        w.link(rel, target)
    for rel in topo.remove:
        path = root / rel
        if path.is_symlink() or path.is_file():
            path.unlink()
    return root


def _write_cpus(w: _Writer, topo: Topology) -> None:
    base = "sys/devices/system/cpu"
    all_cpus = list(range(topo.cpu_count))
    online = topo.online_cpus()
    w.file(f"{base}/possible", format_cpulist(all_cpus))
    w.file(f"{base}/present", format_cpulist(all_cpus))
    w.file(f"{base}/online", format_cpulist(online))
    w.file(f"{base}/offline", format_cpulist(sorted(topo.offline_cpus)))
    w.file(f"{base}/isolated", topo.isolated)
    w.file(f"{base}/smt/control", "on" if topo.threads_per_core > 1 else "notsupported")
    places = {c: topo.cpu_place(c) for c in all_cpus}
    groups: dict[tuple[int, ...], list[int]] = {}
    for c, (socket, core, _, node) in places.items():
        groups.setdefault((0, socket, core), []).append(c)
        groups.setdefault((1, socket), []).append(c)
        groups.setdefault((2, node), []).append(c)
    for cpu in all_cpus:
        d = f"{base}/cpu{cpu}"
        if cpu != 0:
            w.file(f"{d}/online", "0" if cpu in topo.offline_cpus else "1")
        if cpu in topo.offline_cpus:
            continue  # the kernel removes topology/ and cache/ of offline CPUs
        socket, core, _, node = places[cpu]
        siblings = groups[(0, socket, core)]
        package = groups[(1, socket)]
        node_cpus = groups[(2, node)]
        w.file(f"{d}/topology/core_id", str(core))
        w.file(f"{d}/topology/physical_package_id", str(socket))
        w.file(f"{d}/topology/die_id", "0")
        w.file(f"{d}/topology/thread_siblings_list", format_cpulist(siblings))
        w.file(f"{d}/topology/core_cpus_list", format_cpulist(siblings))
        w.file(f"{d}/topology/core_siblings_list", format_cpulist(package))
        w.file(f"{d}/topology/package_cpus_list", format_cpulist(package))
        w.file(f"{d}/cache/index0/level", "1")
        w.file(f"{d}/cache/index0/type", "Data")
        w.file(f"{d}/cache/index0/shared_cpu_list", format_cpulist(siblings))
        w.file(f"{d}/cache/index3/level", "3")
        w.file(f"{d}/cache/index3/type", "Unified")
        w.file(f"{d}/cache/index3/shared_cpu_list", format_cpulist(node_cpus))
        w.file(f"{d}/cache/index3/size", "53760K")
        if topo.l3_ids:
            w.file(f"{d}/cache/index3/id", str(node))
        if topo.numa_dirs:
            w.link(f"{d}/node{node}", f"sys/devices/system/node/node{node}")


def _write_memory(w: _Writer, topo: Topology) -> None:
    nodes = [(n, topo.memory_per_node_kib, topo.hugepages_per_node) for n in range(topo.node_count)]
    nodes += [(m.id, m.memory_kib, m.hugepages) for m in topo.memory_only_nodes]
    total_kib = sum(mem for _, mem, _ in nodes)
    w.file("proc/meminfo", f"MemTotal:       {total_kib} kB\nMemFree:        {total_kib // 2} kB\n")
    totals: dict[int, int] = {}
    for _, _, pages in nodes:
        for size, count in pages:
            totals[size] = totals.get(size, 0) + count
    for size, count in sorted(totals.items()):
        w.file(f"sys/kernel/mm/hugepages/hugepages-{size}kB/nr_hugepages", str(count))
    if not topo.numa_dirs:
        return
    base = "sys/devices/system/node"
    ids = sorted(n for n, _, _ in nodes)
    w.file(f"{base}/online", format_cpulist(ids))
    w.file(f"{base}/possible", format_cpulist(ids))
    w.file(f"{base}/has_cpu", format_cpulist(list(range(topo.node_count))))
    for node, mem, pages in nodes:
        d = f"{base}/node{node}"
        w.file(f"{d}/cpulist", format_cpulist(list(topo.node_cpus(node))))
        w.file(
            f"{d}/meminfo",
            f"Node {node} MemTotal:       {mem} kB\nNode {node} MemFree:        {mem // 2} kB\n",
        )
        w.file(f"{d}/distance", " ".join("10" if other == node else "21" for other in ids))
        for size, count in pages:
            w.file(f"{d}/hugepages/hugepages-{size}kB/nr_hugepages", str(count))
            w.file(f"{d}/hugepages/hugepages-{size}kB/free_hugepages", str(count))


def _pci_dir(bus_id: str, bridges: tuple[str, ...]) -> str:
    first = (bridges or (bus_id,))[0]
    root = f"pci{first[:7]}"  # "pci0000:17" from "0000:17:..."
    return "/".join(["sys/devices", root, *bridges, bus_id])


def _write_pci(
    w: _Writer,
    bus_id: str,
    *,
    bridges: tuple[str, ...],
    pci_class: int,
    vendor: int,
    device: int,
    numa: int | str,
    driver: str | None,
) -> str:
    """The common files of a PCI function (and its bridges); returns the device dir."""
    for i, bridge in enumerate(bridges):
        bdir = _pci_dir(bridge, bridges[:i])
        w.file(f"{bdir}/class", "0x060400")
        w.file(f"{bdir}/vendor", f"0x{vendor:04x}")
        w.link(f"sys/bus/pci/devices/{bridge}", bdir)
    d = _pci_dir(bus_id, bridges)
    w.file(f"{d}/class", f"0x{pci_class:06x}")
    w.file(f"{d}/vendor", f"0x{vendor:04x}")
    w.file(f"{d}/device", f"0x{device:04x}")
    w.file(f"{d}/numa_node", str(numa))
    if driver:
        w.dir(f"sys/bus/pci/drivers/{driver}")
        w.link(f"{d}/driver", f"sys/bus/pci/drivers/{driver}")
    w.link(f"sys/bus/pci/devices/{bus_id}", d)
    return d


def _write_gpu(w: _Writer, gpu: GpuSpec) -> None:
    d = _write_pci(
        w,
        gpu.bus_id,
        bridges=gpu.bridges,
        pci_class=gpu.pci_class,
        vendor=gpu.vendor_id,
        device=gpu.device_id,
        numa=gpu.numa_node,
        driver=gpu.driver,
    )
    for name in gpu.drm:
        w.file(f"{d}/drm/{name}/dev", "226:0")
        w.file(f"dev/dri/{name}")
    for name in gpu.accel:
        w.file(f"{d}/accel/{name}/dev", "261:0")
        w.file(f"dev/accel/{name}")
    if gpu.vram_bytes is not None:
        w.file(f"{d}/mem_info_vram_total", str(gpu.vram_bytes))
    nvidia_proc = gpu.vendor_id == 0x10DE if gpu.nvidia_proc is None else gpu.nvidia_proc
    if nvidia_proc:
        lines = [f"Model: \t\t {gpu.product_name or 'Unknown'}", "IRQ:   \t\t 42", "Bus Type: \t PCIe"]
        if gpu.nvidia_minor is not None:
            lines.append(f"Device Minor: \t {gpu.nvidia_minor}")
            w.file(f"dev/nvidia{gpu.nvidia_minor}")
        lines.append(f"Bus Location: \t {gpu.bus_id}")
        w.file(f"proc/driver/nvidia/gpus/{gpu.bus_id}/information", "\n".join(lines))
    elif gpu.product_name is not None:
        w.file(f"{d}/product_name", gpu.product_name)


def _write_netdev(w: _Writer, dev_dir: str, iface: str, mac: str, nic: NicSpec) -> None:
    """A netdev directory under ``dev_dir`` with the link state of ``nic``, and its class link."""
    n = f"{dev_dir}/net/{iface}"
    w.file(f"{n}/address", mac)
    w.file(f"{n}/operstate", nic.operstate)
    w.file(f"{n}/mtu", "1500")
    w.file(f"{n}/type", "1")
    if nic.speed is not None:
        w.file(f"{n}/speed", str(nic.speed))
    if nic.carrier is not None:
        w.file(f"{n}/carrier", str(nic.carrier))
    w.link(f"{n}/device", dev_dir)
    w.link(f"sys/class/net/{iface}", n)


def _write_rdma(w: _Writer, dev_dir: str, name: str, uverbs: int | None) -> None:
    w.file(f"{dev_dir}/infiniband/{name}/node_type", "1: CA")
    w.link(f"{dev_dir}/infiniband/{name}/device", dev_dir)
    w.link(f"sys/class/infiniband/{name}", f"{dev_dir}/infiniband/{name}")
    if uverbs is not None:
        w.file(f"{dev_dir}/infiniband_verbs/uverbs{uverbs}/ibdev", name)
        w.link(f"sys/class/infiniband_verbs/uverbs{uverbs}", f"{dev_dir}/infiniband_verbs/uverbs{uverbs}")
        w.file(f"dev/infiniband/uverbs{uverbs}")


def _write_nic(w: _Writer, nic: NicSpec) -> None:
    pci_driver = "virtio-pci" if nic.virtio else nic.driver
    d = _write_pci(
        w,
        nic.bus_id,
        bridges=nic.bridges,
        pci_class=nic.pci_class,
        vendor=nic.vendor_id,
        device=nic.device_id,
        numa=nic.numa_node,
        driver=pci_driver,
    )
    net_parent = d
    if nic.virtio:
        net_parent = f"{d}/{nic.virtio}"
        driver = nic.net_driver or "virtio_net"
        w.dir(f"sys/bus/virtio/drivers/{driver}")
        w.link(f"{net_parent}/driver", f"sys/bus/virtio/drivers/{driver}")
    for iface in (nic.interface, *nic.extra_interfaces):
        _write_netdev(w, net_parent, iface, nic.mac, nic)
    if nic.rdma:
        _write_rdma(w, d, nic.rdma, nic.uverbs)
    if nic.sriov_total_vfs or nic.vfs:
        w.file(f"{d}/sriov_totalvfs", str(nic.sriov_total_vfs))
        w.file(f"{d}/sriov_numvfs", str(len(nic.vfs)))
    for k, vf in enumerate(nic.vfs):
        vd = _write_pci(
            w,
            vf.bus_id,
            bridges=nic.bridges,
            pci_class=nic.pci_class,
            vendor=nic.vendor_id,
            device=nic.vf_device_id,
            numa=nic.numa_node,
            driver=nic.driver,
        )
        w.link(f"{vd}/physfn", d)
        w.link(f"{d}/virtfn{k}", vd)
        _write_netdev(w, vd, vf.interface, vf.mac, nic)
        if vf.rdma:
            _write_rdma(w, vd, vf.rdma, vf.uverbs)


from driver.testing.topologies import TOPOLOGIES  # noqa: E402 - the ready topologies build on the specs above
