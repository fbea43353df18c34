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
from pathlib import Path

from driver.pinning.types import format_cpulist
from harness.hostspec import GiB_KIB, GpuSpec, NicSpec, NodeSpec, Topology, VfSpec
from harness.topologies import TOPOLOGIES

__all__ = [
    "TOPOLOGIES",
    "GiB_KIB",
    "GpuSpec",
    "NicSpec",
    "NodeSpec",
    "Topology",
    "VfSpec",
    "aer_fatal_text",
    "write_host_tree",
]


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
        _write_gpu_numa_status(w, gpu)
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


def aer_fatal_text(total: int) -> str:
    """An ``aer_dev_fatal`` file as the kernel writes it, with ``total`` fatal errors in all."""
    lines = ["Undefined 0", "DLP 0", "SDES 0", "TLP 0", "FCP 0", "CmpltTO 0", "CmpltAbrt 0"]
    lines += ["UnxCmplt 0", "RxOF 0", "MalfTLP 0", "ECRC 0", "UnsupReq 0", "ACSViol 0"]
    lines[1] = f"DLP {total}"
    return "\n".join([*lines, f"TOTAL_ERR_FATAL {total}"])


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
        w.file(f"{d}/topology/core_siblings_list", format_cpulist(package))
        # only the files discovery may read: the trees of big hosts stay small and fast to write
        w.file(f"{d}/cache/index0/level", "1")
        w.file(f"{d}/cache/index3/level", "3")
        w.file(f"{d}/cache/index3/type", "Unified")
        w.file(f"{d}/cache/index3/shared_cpu_list", format_cpulist(node_cpus))
        if topo.l3_ids:
            w.file(f"{d}/cache/index3/id", str(node))
        if topo.numa_dirs:
            w.link(f"{d}/node{node}", f"sys/devices/system/node/node{node}")


def _distance_row(topo: Topology, node: int, ids: list[int]) -> str:
    """One SLIT row: ``topo.distances``, or 10 to itself, 12 within a socket, 21 elsewhere."""
    if topo.distances is not None:
        return " ".join(str(d) for d in topo.distances[ids.index(node)])
    per_socket = topo.nodes_per_socket

    def socket(n: int) -> int | None:
        return n // per_socket if n < topo.node_count else None

    row = []
    for other in ids:
        same = socket(other) is not None and socket(other) == socket(node)
        row.append("10" if other == node else "12" if same else "21")
    return " ".join(row)


def _write_cxl(w: _Writer, node: NodeSpec, index: int) -> None:
    """A CXL RAM region's device-DAX instance onlined into ``node`` (the kernel's layout)."""
    region = f"sys/devices/platform/ACPI0017:00/root0/decoder0.{index}/region{index}"
    dax = f"{region}/dax_region{index}/dax{index}.0"
    w.file(f"{dax}/target_node", str(node.id))
    w.file(f"{dax}/numa_node", str(node.id))
    w.link(f"sys/bus/dax/devices/dax{index}.0", dax)
    w.link(f"sys/bus/cxl/devices/region{index}", region)


def _write_gpu_numa_status(w: _Writer, gpu: GpuSpec) -> None:
    """The NVIDIA driver's ``numa_status`` of a GPU whose memory is a NUMA node (Grace Hopper)."""
    if gpu.memory_node is None:
        return
    w.file(
        f"proc/driver/nvidia/gpus/{gpu.bus_id}/numa_status",
        f"Node:      {gpu.memory_node}\nStatus:    online\nAddress:   40000000000\nSize:      3f0000000",
    )


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
    w.file(f"{base}/has_memory", format_cpulist([n for n, mem, _ in nodes if mem > 0]))
    # memory-only nodes are onlined movable-only, as GPU memory and CXL expanders are
    w.file(
        f"{base}/has_normal_memory",
        format_cpulist([n for n, mem, _ in nodes if mem > 0 and n < topo.node_count]),
    )
    for k, spec in enumerate(m for m in topo.memory_only_nodes if m.cxl):
        _write_cxl(w, spec, k)
    for node, mem, pages in nodes:
        d = f"{base}/node{node}"
        w.file(f"{d}/cpulist", format_cpulist(list(topo.node_cpus(node))))
        w.file(
            f"{d}/meminfo",
            f"Node {node} MemTotal:       {mem} kB\nNode {node} MemFree:        {mem // 2} kB\n",
        )
        w.file(f"{d}/distance", _distance_row(topo, node, ids))
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
    if gpu.aer_fatal is not None:
        w.file(f"{d}/aer_dev_fatal", aer_fatal_text(gpu.aer_fatal))
    nvidia_proc = gpu.vendor_id == 0x10DE if gpu.nvidia_proc is None else gpu.nvidia_proc
    if nvidia_proc:
        lines = [f"Model: \t\t {gpu.product_name or 'Unknown'}", "IRQ:   \t\t 42"]
        if gpu.nvidia_uuid is not None:
            lines.append(f"GPU UUID: \t {gpu.nvidia_uuid}")
        lines.append("Bus Type: \t PCIe")
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
