"""How the table and the picture say a size: the same words in both views of one node."""

from __future__ import annotations

from driver.inventory.model import Inventory

__all__ = ["format_size", "hugepage_size", "memory_summary"]


def format_size(value: int) -> str:
    """Bytes as a short binary size: the largest binary unit that keeps the value at least one."""
    size = float(value)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if size < 1024 or unit == "PiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{value} B"  # pragma: no cover - the loop always returns


def hugepage_size(kib: int) -> str:
    """A hugepage size in KiB as Kubernetes spells it in resource names ("2Mi", "1Gi")."""
    return f"{kib // 1024 // 1024}Gi" if kib >= 1024 * 1024 else f"{kib // 1024}Mi"


def memory_summary(inventory: Inventory) -> str:
    """The NUMA nodes' memory (what the cpu devices publish), and the host's MemTotal when it differs.

    Some VMs report less memory on their nodes than /proc/meminfo holds; printing only the nodes'
    sum there would understate the machine, and printing only MemTotal would overstate what is
    published, so the table says which is which.
    """
    nodes = format_size(sum(n.memory_bytes for n in inventory.numa_nodes))
    text = f"{nodes} NUMA-node memory"
    host = inventory.memory_total_bytes
    if host is not None and format_size(host) != nodes:
        text += f" (host MemTotal {format_size(host)})"
    return text
