"""Raw host facts: what :mod:`driver.inventory.probe` read, before any interpretation.

The split keeps the filesystem walk thin and everything that decides (which PCI class is a GPU,
which VF belongs to which PF, which device nodes a container needs, what a missing NUMA directory
means) in the pure :func:`driver.inventory.build.build_inventory`, testable from plain values.
Fields mirror sysfs files; None means "the file was missing or unreadable".
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["CpuFacts", "HostFacts", "NetFacts", "NodeFacts", "NvidiaFacts", "PciFacts", "RdmaFacts"]


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
    cpus: frozenset[int]
    mem_total_kib: int | None
    hugepages: tuple[tuple[int, int], ...] = ()  # (page size KiB, nr_hugepages)
    distances: tuple[int, ...] = ()


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
    #: MemTotal of /proc/meminfo in KiB (the synthesized node 0 uses it)
    mem_total_kib: int | None = None
    #: host-wide hugepages (sys/kernel/mm/hugepages), for the synthesized node 0
    hugepages: tuple[tuple[int, int], ...] = ()
    #: host paths of the device nodes that exist under dev/ ("/dev/nvidia0", "/dev/kfd")
    dev_nodes: frozenset[str] = frozenset()
    host_facts: tuple[tuple[str, str], ...] = ()
