"""Compact host topology descriptions (dataclasses) for the host-tree generator.

Kept apart from the writer so that :mod:`harness.topologies` can build on them without an
import cycle; import everything from :mod:`harness.hosttree`.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["GiB_KIB", "GpuSpec", "NicSpec", "NodeSpec", "Topology", "VfSpec"]

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
    nvidia_uuid: str | None = None  # with a value, a "GPU UUID:" line in the proc information file
    #: AER fatal counter (``aer_dev_fatal``'s TOTAL_ERR_FATAL); None: the file is absent
    aer_fatal: int | None = None
    #: the CPU-less NUMA node that is this GPU's memory: the NVIDIA ``numa_status`` names it
    memory_node: int | None = None


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
    """A NUMA node with no CPUs (memory only, e.g. CXL or HBM; ``memory_kib`` 0: an empty node)."""

    id: int
    memory_kib: int
    hugepages: tuple[tuple[int, int], ...] = ()
    #: a CXL expander: a device-DAX instance of a CXL region onlines its memory into the node
    cxl: bool = False


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
    #: the SLIT, one row per node in id order (CPU nodes and memory-only nodes together); None:
    #: 10 to itself, 12 to a node of the same socket (sub-NUMA clusters), 21 to any other
    distances: tuple[tuple[int, ...], ...] | None = None
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
