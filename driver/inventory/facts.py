"""Raw host facts: what :mod:`driver.inventory.probe` read, before any interpretation.

The split keeps the filesystem walk thin and everything that decides (which PCI class is a GPU,
which VF belongs to which PF, which device nodes a container needs, what a missing NUMA directory
means) in the pure :func:`driver.inventory.build.build_inventory`, testable from plain values.
Fields mirror sysfs files; None means "the file was missing or unreadable".
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "CpuFacts",
    "DaxFacts",
    "HostFacts",
    "NetFacts",
    "NodeFacts",
    "NodeMasks",
    "NvidiaFacts",
    "PciFacts",
    "RdmaFacts",
]


@dataclass(frozen=True, slots=True)
class PciFacts:
    """One PCI function under ``sys/bus/pci/devices``."""

    bus_id: str  # lower case dddd:bb:dd.f
    pcie_root: str  # "pci0000:3a" from the resolved path, "" when the path has none
    numa_node: int | None  # raw numa_node (-1 kept as read)
    pci_class: int | None
    vendor_id: int | None
    device_id: int | None
    driver: str | None
    physfn: str | None = None  # bus id of the physical function (VFs only)
    sriov_total_vfs: int | None = None
    drm: tuple[str, ...] = ()  # entries of drm/ ("card0", "renderD128")
    accel: tuple[str, ...] = ()  # entries of accel/ ("accel0")
    verbs: tuple[str, ...] = ()  # entries of infiniband_verbs/ ("uverbs0")
    vram_bytes: int | None = None  # amdgpu mem_info_vram_total
    product_name: str | None = None  # amdgpu product_name


@dataclass(frozen=True, slots=True)
class NetFacts:
    """One network interface whose ``device`` link leads to a PCI function."""

    interface: str
    bus_id: str  # the PCI function that owns the netdev (virtio parents included)
    mac_address: str | None
    speed_mbps: int | None  # raw, -1 kept as read
    operstate: str | None
    carrier: int | None
    driver: str | None = None  # the netdev's driver (virtio_net), which may differ from the PCI one


@dataclass(frozen=True, slots=True)
class RdmaFacts:
    """One ``sys/class/infiniband`` device and its PCI function."""

    name: str
    bus_id: str


@dataclass(frozen=True, slots=True)
class NvidiaFacts:
    """What ``proc/driver/nvidia/gpus/<bdf>/information`` says about one GPU."""

    bus_id: str
    minor: int | None  # "Device Minor:" (the N of /dev/nvidiaN); None when absent or not a number
    model: str | None
    uuid: str | None = None  # "GPU UUID:" when it has the GPU-xxxxxxxx-... shape, else None
    #: "Node:" of ``numa_status``: the NUMA node that is this GPU's own memory (Grace Hopper and
    #: Grace Blackwell, where GPU memory is onlined as a CPU-less node); None when absent
    memory_node: int | None = None
    memory_status: str | None = None  # "Status:" of ``numa_status`` ("online")


@dataclass(frozen=True, slots=True)
class CpuFacts:
    """Topology of one online CPU."""

    id: int
    core_id: int | None
    package_id: int | None
    die_id: int | None
    thread_siblings: frozenset[int] | None
    l3_id: int | None


@dataclass(frozen=True, slots=True)
class NodeFacts:
    """One ``devices/system/node/nodeN`` directory."""

    id: int
    cpus: frozenset[int] | None  # cpulist; None when the file is missing or malformed
    mem_total_kib: int | None
    hugepages: tuple[tuple[int, int], ...] = ()  # (page size KiB, nr_hugepages)
    #: the ``distance`` file as read: one SLIT row, a column per *online* node in id order
    distance: str | None = None


@dataclass(frozen=True, slots=True)
class NodeMasks:
    """The node lists of ``devices/system/node`` (each None when the file is missing or malformed)."""

    online: frozenset[int] | None = None
    possible: frozenset[int] | None = None
    has_cpu: frozenset[int] | None = None
    has_memory: frozenset[int] | None = None
    #: nodes whose memory the kernel may use for its own allocations; GPU and CXL memory is
    #: usually onlined movable-only and is then missing here
    has_normal_memory: frozenset[int] | None = None


@dataclass(frozen=True, slots=True)
class DaxFacts:
    """One ``bus/dax/devices/daxX.Y``: a device-DAX range, onlined as system RAM by ``kmem``."""

    name: str
    target_node: int | None  # the NUMA node its memory goes to
    path: str  # the resolved sysfs path, e.g. ".../ACPI0017:00/root0/decoder0.0/region0/dax_region0/dax0.0"


@dataclass(frozen=True, slots=True)
class HostFacts:
    """Everything probed from one host root."""

    pci: tuple[PciFacts, ...] = ()
    net: tuple[NetFacts, ...] = ()
    rdma: tuple[RdmaFacts, ...] = ()
    nvidia: tuple[NvidiaFacts, ...] = ()
    online_cpus: frozenset[int] = frozenset()
    isolated_cpus: frozenset[int] = frozenset()
    cpus: tuple[CpuFacts, ...] = ()
    nodes: tuple[NodeFacts, ...] = ()
    node_masks: NodeMasks = NodeMasks()
    #: online CPU -> node from its ``cpuN/nodeM`` link, read only for CPUs no node's cpulist names
    cpu_nodes: tuple[tuple[int, int], ...] = ()
    dax: tuple[DaxFacts, ...] = ()
    #: MemTotal of /proc/meminfo in KiB (the synthesized node 0 uses it)
    mem_total_kib: int | None = None
    #: host-wide hugepages (sys/kernel/mm/hugepages), for the synthesized node 0
    hugepages: tuple[tuple[int, int], ...] = ()
    #: host paths of the device nodes that exist under dev/ ("/dev/nvidia0", "/dev/kfd")
    dev_nodes: frozenset[str] = frozenset()
    host_facts: tuple[tuple[str, str], ...] = ()
