"""A human view of an :class:`Inventory`: NUMA node -> CPUs, memory, hugepages, GPUs, NICs.

Pure (inventory in, text out) so that ``numadra discover -o table`` is tested without a terminal.
Devices whose firmware reports no NUMA node are listed under their own heading, never guessed.
Display and accelerator functions that are not published (a BMC chip, a GPU without its compute
driver) are listed last with the reason, so that a missing GPU is explained where it is looked for.
With NVIDIA GPUs, one line says where their containers' driver user space comes from (the
toolkit's CDI spec, the driver root, or none) and why, as a claim of all of them would get it
(:func:`driver.inventory.nvidia_source.choose_source`).
"""

from __future__ import annotations

from collections.abc import Sequence

from driver.inventory.cpulist import format_cpulist
from driver.inventory.model import Cpu, Gpu, Inventory, Nic, NumaNode, SkippedDevice
from driver.inventory.nvidia_source import SourceChoice, UserspaceSource

__all__ = ["render_table"]


def _size(value: int) -> str:
    """Bytes as a short binary size: the largest binary unit that keeps the value >= 1."""
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if size < 1024 or unit == "PiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{value} B"  # pragma: no cover - the loop always returns


def _clip(text: str, width: int = 48) -> str:
    """Printable text of at most ``width`` characters, for one table cell."""
    text = "".join(ch for ch in text if ch.isprintable())
    return text if len(text) <= width else text[: width - 1] + "…"


def _page(kib: int) -> str:
    return f"{kib // 1024 // 1024}Gi" if kib >= 1024 * 1024 else f"{kib // 1024}Mi"


def _node_line(node: NumaNode, cpus: Sequence[Cpu], reserved: frozenset[int]) -> list[str]:
    cores = {(c.package_id, c.die_id, c.core_id) for c in cpus}
    threads = max((len(c.thread_siblings) for c in cpus), default=0)
    sockets = sorted({c.package_id for c in cpus})
    lines = [f"NUMA node {node.id}"]
    if cpus:
        lines.append(
            f"  cpus      {len(cpus)} ({format_cpulist([c.id for c in cpus])}): {len(cores)} cores"
            f" x {threads} thread{'s' if threads != 1 else ''}, socket {','.join(map(str, sockets))}"
        )
        extra = [
            f"isolated {format_cpulist([c.id for c in cpus if c.isolated])}"
            if any(c.isolated for c in cpus)
            else "",
            f"reserved {format_cpulist([c.id for c in cpus if c.id in reserved])}"
            if any(c.id in reserved for c in cpus)
            else "",
        ]
        if any(extra):
            lines.append("            " + ", ".join(e for e in extra if e))
    else:
        lines.append("  cpus      none (memory-only node)")
        owner = f" of GPU {node.gpu_bus_id}" if node.gpu_bus_id else ""
        socket = "?" if node.socket is None else str(node.socket)
        lines.append(f"  kind      {(node.memory_kind or 'unknown')} memory{owner}, socket {socket}")
    lines.append(f"  memory    {_size(node.memory_bytes)}")
    pages = ", ".join(f"{_page(size)} x {count}" for size, count in node.hugepages) or "none"
    lines.append(f"  hugepages {pages}")
    if len(node.distances) > 1:
        lines.append(f"  distance  {' '.join(map(str, node.distances))}")
    if len(node.numa_list) > 1:
        lines.append(
            f"  near      {','.join(map(str, node.numa_list))} (numaNode list: same socket, nearest)"
        )
    return lines


def _gpu_line(gpu: Gpu) -> str:
    what = _clip(gpu.product_name or f"{gpu.vendor_id:04x}:{gpu.device_id:04x}")
    nodes = " ".join(gpu.device_nodes) or "-"
    index = f"index {gpu.index}" if gpu.index is not None else "index -"
    return f"  gpu  {gpu.name}  {gpu.vendor} {what}  {index}  root {gpu.pci.pcie_root or '?'}  {nodes}"


def _skipped_line(skipped: SkippedDevice) -> str:
    vendor = f"{skipped.vendor_id:04x}" if skipped.vendor_id is not None else "????"
    klass = f"{skipped.pci_class:06x}" if skipped.pci_class is not None else "??????"
    return f"  {skipped.bus_id}  vendor {vendor} class {klass}  {_clip(skipped.reason, 96)}"


def _nic_line(nic: Nic) -> str:
    speed = f"{nic.speed_mbps} Mb/s" if nic.speed_mbps else "speed ?"
    kind = (
        f"VF of {nic.pf_bus_id}"
        if nic.sriov_vf
        else (f"PF, {nic.sriov_total_vfs} VFs" if nic.sriov_total_vfs else "")
    )
    rdma = f"rdma {','.join(nic.rdma_devices)}" if nic.rdma_devices else ""
    parts = [
        _clip(nic.interface_name),
        nic.driver or "?",
        nic.mac_address or "-",
        speed,
        nic.operstate,
        kind,
        rdma,
    ]
    return f"  nic  {nic.name}  " + "  ".join(p for p in parts if p)


def _memory_total(inventory: Inventory) -> str:
    """The NUMA nodes' memory (what the cpu devices publish), and the host's MemTotal when it differs.

    Some VMs report less memory on their nodes than /proc/meminfo holds; printing only the nodes'
    sum there would understate the machine, and printing only MemTotal would overstate what is
    published, so the table says which is which.
    """
    nodes = _size(sum(n.memory_bytes for n in inventory.numa_nodes))
    text = f"{nodes} NUMA-node memory"
    host = inventory.memory_total_bytes
    if host is not None and _size(host) != nodes:
        text += f" (host MemTotal {_size(host)})"
    return text


def _userspace_lines(choice: SourceChoice) -> list[str]:
    """Where the NVIDIA GPUs' user space comes from, then each warning on its own line."""
    if choice.source is UserspaceSource.TOOLKIT:
        files = ", ".join(choice.toolkit_files)
        what = f"toolkit spec {files} ({len(choice.toolkit_ids)} GPU(s) by UUID)"
    elif choice.source is UserspaceSource.DRIVER_ROOT and choice.driver is not None:
        d = choice.driver
        dirs = ", ".join(d.library_dirs)
        what = (
            f"driver root {d.driver_root} (driver {d.version}: {d.count('library')} libraries,"
            f" {d.count('binary')} tools, {d.count('firmware')} firmware files, in {dirs})"
        )
    else:
        what = "none (CUDA containers get no driver)"
    return [
        f"nvidia    user space: {what}",
        *(f"          warning: {_clip(w, 400)}" for w in choice.warnings),
    ]


def render_table(
    inventory: Inventory,
    *,
    reserved_cpus: frozenset[int] = frozenset(),
    userspace: SourceChoice | None = None,
) -> str:
    """The topology view, one block per NUMA node, then devices of unknown NUMA node.

    ``userspace``: the NVIDIA user-space source of the node's NVIDIA GPUs (shown when there are any).
    """
    lines: list[str] = []
    facts = dict(inventory.host_facts)
    if facts:
        lines.append("host      " + ", ".join(f"{k} {_clip(v, 64)}" for k, v in sorted(facts.items())))
    lines.append(
        f"total     {len(inventory.cpus)} CPUs, {_memory_total(inventory)}, {len(inventory.numa_nodes)} NUMA"
        f" node(s), {len(inventory.gpus)} GPU(s), {len(inventory.nics)} NIC(s)"
    )
    if userspace is not None and any(g.vendor == "nvidia" for g in inventory.gpus):
        lines.extend(_userspace_lines(userspace))
    for node in inventory.numa_nodes:
        lines.append("")
        lines.extend(_node_line(node, [c for c in inventory.cpus if c.numa_node == node.id], reserved_cpus))
        lines.extend(_gpu_line(g) for g in inventory.gpus if g.pci.numa_node == node.id)
        lines.extend(_nic_line(n) for n in inventory.nics if n.pci.numa_node == node.id)
    known = {n.id for n in inventory.numa_nodes}
    unknown_gpus = [g for g in inventory.gpus if g.pci.numa_node not in known]
    unknown_nics = [n for n in inventory.nics if n.pci.numa_node not in known]
    if unknown_gpus or unknown_nics:
        lines.append("")
        lines.append("NUMA node unknown (firmware reports none)")
        lines.extend(_gpu_line(g) for g in unknown_gpus)
        lines.extend(_nic_line(n) for n in unknown_nics)
    if inventory.skipped:
        lines.append("")
        lines.append("not published (display/accelerator functions that are not compute GPUs)")
        lines.extend(_skipped_line(s) for s in inventory.skipped)
    return "\n".join(lines) + "\n"
