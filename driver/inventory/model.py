"""The immutable inventory of one node: what discovery found, before any Kubernetes shape is given.

Everything here is plain frozen data so that it can be compared (a changed inventory means a
republish), hashed and shared between threads without locks. Device names are derived from PCI
addresses or NUMA ids only, so they are stable across restarts, reboots and interface renames.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Literal

__all__ = [
    "Cpu",
    "DeviceKind",
    "Gpu",
    "Inventory",
    "InventoryDevice",
    "IsolatedCpus",
    "MemoryKind",
    "Nic",
    "NumaNode",
    "PciTopology",
    "SkippedDevice",
    "cpu_device_name",
    "kept_out_cpus",
    "memory_device_name",
    "pci_device_name",
]

_BDF = re.compile(r"^([0-9a-f]{4}):([0-9a-f]{2}):([0-9a-f]{2})\.([0-7])$")


class DeviceKind(StrEnum):
    """The value of the ``type`` attribute; DeviceClasses select on it."""

    GPU = "gpu"
    NIC = "nic"
    CPU = "cpu"
    #: a NUMA node without CPUs: GPU memory (Grace Hopper/Blackwell), a CXL memory expander
    MEMORY = "memory"


class MemoryKind(StrEnum):
    """What the memory of a CPU-less NUMA node is, as far as the host proves it.

    ``gpu``: a GPU's own memory (the NVIDIA driver's ``numa_status`` names the node); ``cxl``: a
    device-DAX range of a CXL region onlined into the node; ``unknown``: nothing says which.
    """

    GPU = "gpu"
    CXL = "cxl"
    UNKNOWN = "unknown"


def pci_device_name(kind: DeviceKind, bus_id: str) -> str:
    """Stable DNS-label device name from a PCI address: ``gpu-0000-3b-00-0``."""
    m = _BDF.match(bus_id.lower())
    if m is None:
        raise ValueError(f"not a PCI bus id (dddd:bb:dd.f): {bus_id!r}")
    return f"{kind.value}-{'-'.join(m.groups())}"


def cpu_device_name(numa_node: int) -> str:
    """Stable device name of the grouped cpu device of a NUMA node: ``cpu-numa0``."""
    return f"cpu-numa{numa_node}"


def memory_device_name(numa_node: int) -> str:
    """Stable device name of the memory device of a NUMA node without CPUs: ``memory-numa1``."""
    return f"memory-numa{numa_node}"


@dataclass(frozen=True, slots=True)
class PciTopology:
    """Where a PCI function sits: the facts behind the standard ``resource.kubernetes.io`` attributes.

    ``numa_node`` is None when the kernel reports -1 (then the attribute is omitted, never faked).
    ``near_nodes`` is the KEP-6072 list of that node (:mod:`driver.inventory.numa`), ``socket``
    the node's socket when proven. ``local_memory`` says whether a claim of the device may have
    its memory pinned to ``numa_node``: False when that node has no CPUs or no memory of its own
    (a generic-initiator or memory-only node) or is not known here, because confining a
    container to such a node is never what its claim asked for.
    """

    bus_id: str  # "0000:3b:00.0", lower case
    pcie_root: str  # "pci0000:3a", the root complex from the sysfs path
    numa_node: int | None
    socket: int | None = None
    near_nodes: tuple[int, ...] = ()
    local_memory: bool = True


@dataclass(frozen=True, slots=True)
class Gpu:
    """One PCI function that can serve compute (see :mod:`driver.inventory.gpus` for the rules).

    ``index`` is the vendor's own number of the GPU, never a position in numadra's list (a BMC
    display chip or a GPU of another vendor must not shift it): the NVIDIA device minor (the N of
    ``/dev/nvidiaN``), for AMD and Intel the DRM render node's number minus 128 (``renderD129`` ->
    1). None when the vendor gives none (an AMD GPU with ``/dev/kfd`` but no render node).
    """

    name: str  # device name, see pci_device_name
    pci: PciTopology
    vendor: str  # "nvidia" | "amd" | "intel"
    vendor_id: int
    device_id: int
    pci_class: int  # 0x030000 style, full 24-bit class
    index: int | None  # vendor-local number, see above
    driver: str | None = None
    product_name: str | None = None
    memory_bytes: int | None = None
    minor: int | None = None  # NVIDIA minor number (/dev/nvidiaN)
    #: host paths of the device nodes a container needs (e.g. /dev/nvidia0, /dev/dri/renderD128)
    device_nodes: tuple[str, ...] = ()
    uuid: str | None = None  # NVIDIA "GPU-..." UUID (proc information file or NVML)
    #: the CPU-less NUMA node that is this GPU's own memory (NVIDIA ``numa_status``), else None
    memory_node: int | None = None


@dataclass(frozen=True, slots=True)
class SkippedDevice:
    """A display or accelerator PCI function that is not published, and why (for ``discover -o table``)."""

    bus_id: str
    vendor_id: int | None
    pci_class: int | None
    driver: str | None
    reason: str


@dataclass(frozen=True, slots=True)
class Nic:
    """One physical NIC function or SR-IOV virtual function with a netdev."""

    name: str
    pci: PciTopology
    interface_name: str
    mac_address: str
    driver: str | None
    speed_mbps: int | None  # None when unknown (link down reports -1)
    sriov_vf: bool
    pf_bus_id: str | None  # the physical function of a VF
    sriov_total_vfs: int  # 0 for VFs and non-SR-IOV NICs
    rdma_devices: tuple[str, ...] = ()  # e.g. ("mlx5_0",)
    #: host paths of RDMA character devices (/dev/infiniband/uverbsN, rdma_cm) when RDMA exists
    device_nodes: tuple[str, ...] = ()
    operstate: str = "unknown"  # /sys/class/net/<if>/operstate
    carrier: bool | None = None  # None when unreadable (interface down)

    @property
    def rdma(self) -> bool:
        """True when the function has an RDMA device."""
        return bool(self.rdma_devices)


@dataclass(frozen=True, slots=True)
class Cpu:
    """One online logical CPU and where it sits."""

    id: int
    core_id: int
    package_id: int
    die_id: int
    numa_node: int
    l3_id: int  # id of the L3 cache shared by this CPU (cache id, or lowest CPU sharing it)
    thread_siblings: tuple[int, ...]  # sorted, includes self
    isolated: bool = False


@dataclass(frozen=True, slots=True)
class NumaNode:
    """One NUMA node (or a synthesized node 0 when the kernel exposes none).

    A node with CPUs is published as a ``cpu`` device (its CPUs and memory); a node without
    CPUs but with memory as a ``memory`` device, whose ``memory_kind`` says what that memory is
    and ``gpu_bus_id`` whose GPU it belongs to when the host proves it. ``socket`` and
    ``near_nodes`` come from :mod:`driver.inventory.numa` (None / () when unproven).
    """

    id: int
    cpus: tuple[int, ...]  # online CPUs, sorted
    memory_bytes: int  # MemTotal of the node
    #: total hugepages per page size in KiB: ((2048, 16), (1048576, 2))
    hugepages: tuple[tuple[int, int], ...] = ()
    #: the SLIT row as the kernel printed it (a column per online node, in id order)
    distances: tuple[int, ...] = ()
    socket: int | None = None
    #: the KEP-6072 list: this node, then its same-socket nodes at the smallest distance
    near_nodes: tuple[int, ...] = ()
    memory_kind: MemoryKind | None = None  # memory devices only
    gpu_bus_id: str | None = None  # memory devices of a GPU's memory only

    @property
    def memory_only(self) -> bool:
        """True for a node without (online) CPUs: published as a ``memory`` device."""
        return not self.cpus

    @property
    def kind(self) -> DeviceKind:
        """``cpu`` for a node with CPUs, ``memory`` for one without."""
        return DeviceKind.MEMORY if self.memory_only else DeviceKind.CPU

    @property
    def name(self) -> str:
        """The device name: ``cpu-numa<N>``, or ``memory-numa<N>`` for a node without CPUs."""
        return memory_device_name(self.id) if self.memory_only else cpu_device_name(self.id)

    @property
    def numa_list(self) -> tuple[int, ...]:
        """The list form of this node's ``numaNode`` attribute (at least the node itself)."""
        return self.near_nodes or (self.id,)

    def hugepages_bytes(self, page_kib: int) -> int:
        """Total bytes of hugepages of one page size on this node (0 when none)."""
        return sum(count for size, count in self.hugepages if size == page_kib) * page_kib * 1024


InventoryDevice = Gpu | Nic | NumaNode


@dataclass(frozen=True, slots=True)
class Inventory:
    """Everything discovery found on one host; ordered deterministically (PCI address, id)."""

    gpus: tuple[Gpu, ...] = ()
    nics: tuple[Nic, ...] = ()
    cpus: tuple[Cpu, ...] = ()
    numa_nodes: tuple[NumaNode, ...] = ()
    #: free-form facts for humans (kernel, product name of the machine), never published
    host_facts: tuple[tuple[str, str], ...] = field(default=())
    #: MemTotal of /proc/meminfo in bytes (None when unreadable): all memory the kernel manages,
    #: which may differ from the sum of the NUMA nodes' MemTotal (some VMs report less per node)
    memory_total_bytes: int | None = None
    #: display/accelerator functions that are not GPUs numadra publishes (BMC chips, no compute driver)
    skipped: tuple[SkippedDevice, ...] = ()
    #: name -> device, built once: ``find`` runs for every device of every prepared claim
    _by_name: dict[str, InventoryDevice] = field(
        init=False, repr=False, compare=False, hash=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        index = {dev.name: dev for _, dev in self.devices()}
        object.__setattr__(self, "_by_name", index)

    def devices(self) -> Iterator[tuple[DeviceKind, InventoryDevice]]:
        """All publishable devices in publishing order: GPUs, NICs, then cpu and memory (NUMA) devices."""
        for gpu in self.gpus:
            yield DeviceKind.GPU, gpu
        for nic in self.nics:
            yield DeviceKind.NIC, nic
        for node in self.numa_nodes:
            yield node.kind, node

    def find(self, device_name: str) -> InventoryDevice | None:
        """The device with this published name, or None."""
        return self._by_name.get(device_name)

    def numa_node(self, node_id: int) -> NumaNode | None:
        """The NUMA node with this id, or None."""
        for node in self.numa_nodes:
            if node.id == node_id:
                return node
        return None

    def cpu(self, cpu_id: int) -> Cpu | None:
        """The online CPU with this id, or None."""
        for cpu in self.cpus:
            if cpu.id == cpu_id:
                return cpu
        return None


#: whether CPUs of the kernel's ``isolcpus=`` (``/sys/devices/system/cpu/isolated``) are handed out
IsolatedCpus = Literal["include", "exclude"]


def kept_out_cpus(inventory: Inventory, reserved: frozenset[int], isolated: IsolatedCpus) -> frozenset[int]:
    """CPUs kept out of the ``cpus`` capacity and of every claim: ``--reserved-cpus``, plus the
    isolated CPUs with ``--isolated-cpus exclude``.

    Why isolated CPUs count by default (``include``): ``isolcpus=`` is set on purpose, mostly on
    nodes whose isolated CPUs are *for* latency-critical pods (the housekeeping CPUs are then the
    kubelet's reserved ones), which is also how the kubelet's CPU manager treats them. The price:
    the kernel does not balance threads across isolated CPUs, so a workload given several of them
    must pin its own threads. ``exclude`` is for nodes whose isolated CPUs belong to something else
    (a DPDK vswitch, real-time host tasks): they are then neither published nor handed out.
    """
    if isolated == "exclude":
        return reserved | frozenset(c.id for c in inventory.cpus if c.isolated)
    return reserved
