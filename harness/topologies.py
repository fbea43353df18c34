"""Ready-made host topologies for tests: DGX-class server, workstation, cloud VM, huge node, hostile
host, mixed-vendor GPU node, and NUMA shapes beyond one node per socket: a Grace Hopper node (GPU
memory as a CPU-less node), a two-socket node with sub-NUMA clustering, a node with a CXL memory
expander.

Each is a :class:`~harness.hosttree.Topology`; generate it with
:func:`~harness.hosttree.write_host_tree`. The figures are part of the contract that tests
assert on, so change them only together with those tests.
"""

from __future__ import annotations

from harness.hostspec import GiB_KIB, GpuSpec, NicSpec, NodeSpec, Topology, VfSpec

__all__ = [
    "HOSTILE_PRODUCT_NAME",
    "TOPOLOGIES",
    "cloud_vm",
    "cxl",
    "dgx",
    "grace_hopper",
    "hostile",
    "huge",
    "mixed",
    "snc2",
    "vf_bus_id",
    "workstation",
]


def vf_bus_id(pf_bus_id: str, k: int) -> str:
    """Bus id of the k-th VF of a PF at function 0: the next functions, spilling into the next slots."""
    offset = k + 1
    return f"{pf_bus_id[:8]}{offset // 8:02x}.{offset % 8}"


#: the board's BMC display chip (ASPEED AST2600 as on DGX H100 boards): class 0x0300, never a GPU
ASPEED_BMC = GpuSpec(
    bus_id="0000:03:00.0",
    vendor_id=0x1A03,
    device_id=0x2000,
    pci_class=0x030000,
    driver="ast",
    bridges=("0000:00:1c.4", "0000:02:00.0"),
    drm=("card0",),
)


def _dgx() -> Topology:
    """2 sockets / 2 NUMA nodes, 224 CPUs (SMT), 8 H100s, 8 mlx5 NICs with RDMA and 8 VFs each.

    Every GPU shares a PCIe switch (and root) with one NIC, four pairs per NUMA node, as on
    DGX-class boards: GPU at ``<root+3>:00.0``, NIC at ``<root+2>:00.0``. The board's ASPEED BMC
    chip sits at 0000:03:00.0, before every GPU in PCI order: it is skipped, and no NVIDIA index
    may count it.
    """
    roots = [(0x15, 0), (0x26, 0), (0x37, 0), (0x48, 0), (0x95, 1), (0xA6, 1), (0xB7, 1), (0xC8, 1)]
    gpus: list[GpuSpec] = []
    nics: list[NicSpec] = []
    for k, (root, node) in enumerate(roots):
        bridge = (f"0000:{root:02x}:01.0",)
        nic_bus = root + 2
        pf = f"0000:{nic_bus:02x}:00.0"
        gpus.append(
            GpuSpec(
                bus_id=f"0000:{root + 3:02x}:00.0",
                numa_node=node,
                bridges=bridge,
                product_name="NVIDIA H100 80GB HBM3",
                nvidia_minor=k,
            )
        )
        vfs = tuple(
            VfSpec(
                bus_id=vf_bus_id(pf, j),
                interface=f"enp{nic_bus}s0v{j}",
                mac=f"02:00:00:{k:02x}:{j:02x}:01",
                rdma=f"mlx5_{8 + 8 * k + j}",
                uverbs=8 + 8 * k + j,
            )
            for j in range(8)
        )
        nics.append(
            NicSpec(
                bus_id=pf,
                interface=f"enp{nic_bus}s0np0",
                mac=f"b8:ce:f6:00:{k:02x}:00",
                numa_node=node,
                bridges=bridge,
                speed=400000,
                sriov_total_vfs=16,
                vfs=vfs,
                rdma=f"mlx5_{k}",
                uverbs=k,
            )
        )
    return Topology(
        name="dgx",
        sockets=2,
        cores_per_socket=56,
        threads_per_core=2,
        memory_per_node_kib=1024 * GiB_KIB,
        hugepages_per_node=((2048, 1024), (1048576, 16)),
        gpus=(ASPEED_BMC, *gpus),
        nics=tuple(nics),
        virtual_interfaces=("lo", "docker0"),
        product="DGX H100",
    )


def _workstation() -> Topology:
    """One NUMA node, 16 CPUs (8 cores x 2), an AMD and an Intel GPU, one 2.5G NIC, no hugepages."""
    return Topology(
        name="workstation",
        sockets=1,
        cores_per_socket=8,
        threads_per_core=2,
        memory_per_node_kib=64 * GiB_KIB,
        gpus=(
            GpuSpec(
                bus_id="0000:00:02.0",
                vendor_id=0x8086,
                device_id=0xA780,
                pci_class=0x030000,
                driver="i915",
                drm=("card1", "renderD129"),
            ),
            GpuSpec(
                bus_id="0000:03:00.0",
                vendor_id=0x1002,
                device_id=0x744C,
                pci_class=0x030000,
                driver="amdgpu",
                bridges=("0000:00:01.0", "0000:01:00.0", "0000:02:00.0"),
                product_name="Radeon RX 7900 XTX",
                drm=("card0", "renderD128"),
                vram_bytes=24 * 1024**3,
            ),
        ),
        nics=(
            NicSpec(
                bus_id="0000:05:00.0",
                interface="eno1",
                mac="a8:a1:59:00:00:01",
                driver="igc",
                vendor_id=0x8086,
                device_id=0x125C,
                bridges=("0000:00:1c.0",),
                speed=2500,
            ),
        ),
        virtual_interfaces=("lo", "wlo1-virt", "virbr0"),
        product="Workstation",
    )


def _cloud_vm() -> Topology:
    """4 vCPUs, no NUMA directories at all, every PCI device at numa_node -1: a virtio NIC and a T4."""
    return Topology(
        name="cloud_vm",
        sockets=1,
        cores_per_socket=4,
        threads_per_core=1,
        memory_per_node_kib=16 * GiB_KIB,
        hugepages_per_node=((2048, 512), (1048576, 0)),
        numa_dirs=False,
        gpus=(
            GpuSpec(
                bus_id="0000:00:04.0",
                device_id=0x1EB8,
                numa_node=-1,
                product_name="Tesla T4",
                nvidia_minor=0,
            ),
        ),
        nics=(
            NicSpec(
                bus_id="0000:00:03.0",
                interface="eth0",
                mac="42:01:0a:80:00:02",
                driver="virtio-pci",
                vendor_id=0x1AF4,
                device_id=0x1041,
                numa_node=-1,
                speed=-1,
                virtio="virtio2",
            ),
        ),
        virtual_interfaces=("lo", "ifb0"),
        product="Google Compute Engine",
    )


def _huge() -> Topology:
    """4 NUMA nodes (two PCI domains), 256 CPUs, 8 GPUs, 20 PFs x 15 VFs: 332 devices, 3 slices."""
    gpus: list[GpuSpec] = []
    nics: list[NicSpec] = []
    for k in range(8):
        node = k // 2
        domain = "0000" if node < 2 else "0001"
        gpus.append(
            GpuSpec(
                bus_id=f"{domain}:{0x40 + k:02x}:00.0",
                numa_node=node,
                product_name="NVIDIA B200",
                device_id=0x2901,
                nvidia_minor=k,
            )
        )
    for k in range(20):
        node = k // 5
        domain = "0000" if node < 2 else "0001"
        pf = f"{domain}:{0x10 + k:02x}:00.0"
        vfs = tuple(
            VfSpec(bus_id=vf_bus_id(pf, j), interface=f"p{k}v{j}", mac=f"02:10:00:{k:02x}:{j:02x}:00")
            for j in range(15)
        )
        nics.append(
            NicSpec(
                bus_id=pf,
                interface=f"p{k}",
                mac=f"02:10:00:{k:02x}:ff:00",
                numa_node=node,
                speed=200000,
                sriov_total_vfs=15,
                vfs=vfs,
                rdma=f"mlx5_{k}",
                uverbs=k,
            )
        )
    return Topology(
        name="huge",
        sockets=4,
        cores_per_socket=32,
        threads_per_core=2,
        memory_per_node_kib=512 * GiB_KIB,
        hugepages_per_node=((2048, 0), (1048576, 32)),
        gpus=tuple(gpus),
        nics=tuple(nics),
    )


#: 200 bytes of multi-byte UTF-8 ("Ü" is 2 bytes): must be clipped to 64 bytes on a character boundary
HOSTILE_PRODUCT_NAME = "Ü" * 100


def _hostile() -> Topology:
    """Odd names and values the kernel or firmware can produce; discovery must survive and sanitize.

    2 sockets x 2 cores x 2 threads, CPU 7 offline, CPUs 2-3 isolated, no L3 ``id`` files, a
    memory-only NUMA node 2, die_id missing on CPU 1; a 200-byte product name, an AMD accelerator
    whose ``numa_node`` is garbage and product name 300 bytes long, an NVIDIA GPU without a minor
    (skipped: half-described), an accelerator of a vendor without a rule (skipped); interfaces with
    dots and capitals, an upper-case MAC, a bogus 0xffffffff link speed, two netdevs on one function,
    a NIC under a USB controller (not a PCI function itself) and a non-BDF entry in ``bus/pci``.
    """
    return Topology(
        name="hostile",
        sockets=2,
        cores_per_socket=2,
        threads_per_core=2,
        memory_per_node_kib=8 * GiB_KIB,
        hugepages_per_node=((2048, 7), (1048576, 0)),
        offline_cpus=frozenset({7}),
        isolated="2-3",
        l3_ids=False,
        memory_only_nodes=(NodeSpec(id=2, memory_kib=32 * GiB_KIB, hugepages=((2048, 0), (1048576, 2))),),
        gpus=(
            GpuSpec(
                bus_id="0000:0a:00.0",
                numa_node=0,
                product_name=HOSTILE_PRODUCT_NAME,
                nvidia_minor=3,
            ),
            GpuSpec(bus_id="0000:0b:00.0", numa_node=1, product_name="NVIDIA L4", nvidia_minor=None),
            GpuSpec(
                bus_id="0000:0c:00.0",
                vendor_id=0x1002,
                device_id=0x74A1,
                pci_class=0x120000,
                driver="amdgpu",
                numa_node="garbage",
                drm=("card5", "renderD133"),
                product_name="X" * 300,
            ),
            GpuSpec(
                bus_id="0000:0d:00.0",
                vendor_id=0x1E52,
                device_id=0x401E,
                pci_class=0x120000,
                driver="tenstorrent",
                numa_node=0,
                accel=("accel0",),
            ),
        ),
        nics=(
            NicSpec(
                bus_id="0000:1a:00.0",
                interface="Eth.Uplink.0",
                mac="AA:BB:CC:DD:EE:FF",
                driver="ice",
                vendor_id=0x8086,
                device_id=0x159B,
                numa_node=1,
                speed=4294967295,
                operstate="dormant",
                carrier=None,
                extra_interfaces=("UPPER.CASE",),
            ),
            NicSpec(
                bus_id="0000:1b:00.0",
                interface="MGMT.vlan.7",
                mac="aa:bb:cc:dd:ee:01",
                driver="e1000e",
                vendor_id=0x8086,
                device_id=0x10D3,
                numa_node=-1,
                speed="not a number",
                operstate="down",
                carrier=None,
            ),
        ),
        extra_files=(
            ("sys/devices/pci0000:00/0000:00:14.0/class", "0x0c0330"),
            ("sys/devices/pci0000:00/0000:00:14.0/usb1/1-1/1-1:1.0/net/usb0/address", "00:e0:4c:68:00:01"),
            ("sys/devices/pci0000:00/0000:00:14.0/usb1/1-1/1-1:1.0/net/usb0/operstate", "up"),
            ("sys/bus/pci/devices/not-a-bdf/class", "0x030000"),
            ("sys/devices/system/cpu/cpu0/topology/core_id", "not-a-number"),
        ),
        extra_links=(
            ("sys/bus/pci/devices/0000:00:14.0", "sys/devices/pci0000:00/0000:00:14.0"),
            (
                "sys/devices/pci0000:00/0000:00:14.0/usb1/1-1/1-1:1.0/net/usb0/device",
                "sys/devices/pci0000:00/0000:00:14.0/usb1/1-1/1-1:1.0",
            ),
            ("sys/class/net/usb0", "sys/devices/pci0000:00/0000:00:14.0/usb1/1-1/1-1:1.0/net/usb0"),
        ),
        remove=("sys/devices/system/cpu/cpu1/topology/die_id",),
        product="Hostile \x00 firmware \u2603 string " * 4,
    )


def _mixed() -> Topology:
    """A mixed GPU node: 4 NVIDIA H100, 2 AMD MI300X, 1 Intel (xe) and the BMC and Matrox chips.

    2 sockets x 8 cores x 2 threads, 2 NUMA nodes, one 100G NIC per node. Per node: NVIDIA at
    ``<x>:00.0`` with minors in PCI order, one AMD accelerator (class 0x1200, amdgpu), and on node 0
    an Intel GPU on the xe driver. ASPEED (0000:03:00.0) and Matrox G200 (0000:04:00.0) display
    chips come first in PCI order, so a position in numadra's list would differ from every
    vendor's own number. DRM: ast card0, mgag200 card1, AMD card2/renderD128 and card3/renderD129,
    Intel card4/renderD130.
    """
    nvidia = [("0000:18:00.0", 0, 0), ("0000:2a:00.0", 0, 1), ("0000:9a:00.0", 1, 2), ("0000:ab:00.0", 1, 3)]
    gpus: list[GpuSpec] = [
        ASPEED_BMC,
        GpuSpec(
            bus_id="0000:04:00.0",
            vendor_id=0x102B,
            device_id=0x0536,
            pci_class=0x030000,
            driver="mgag200",
            bridges=("0000:00:1c.5",),
            drm=("card1",),
        ),
    ]
    gpus += [
        GpuSpec(bus_id=bus, numa_node=node, product_name="NVIDIA H100 80GB HBM3", nvidia_minor=minor)
        for bus, node, minor in nvidia
    ]
    gpus += [
        GpuSpec(
            bus_id=bus,
            vendor_id=0x1002,
            device_id=0x74A1,
            pci_class=0x120000,
            driver="amdgpu",
            numa_node=node,
            product_name="AMD Instinct MI300X",
            drm=(f"card{2 + node}", f"renderD{128 + node}"),
            vram_bytes=192 * 1024**3,
        )
        for bus, node in (("0000:3c:00.0", 0), ("0000:bc:00.0", 1))
    ]
    gpus.append(
        GpuSpec(
            bus_id="0000:4d:00.0",
            vendor_id=0x8086,
            device_id=0x56C0,
            pci_class=0x038000,
            driver="xe",
            numa_node=0,
            drm=("card4", "renderD130"),
        )
    )
    nics = tuple(
        NicSpec(
            bus_id=bus,
            interface=f"ens{k}f0",
            mac=f"0c:42:a1:00:00:{k:02x}",
            numa_node=k,
            rdma=f"mlx5_{k}",
            uverbs=k,
        )
        for k, bus in enumerate(("0000:1a:00.0", "0000:9c:00.0"))
    )
    return Topology(
        name="mixed",
        sockets=2,
        cores_per_socket=8,
        threads_per_core=2,
        memory_per_node_kib=256 * GiB_KIB,
        gpus=tuple(gpus),
        nics=nics,
        product="Mixed GPU server",
    )


def _grace_hopper() -> Topology:
    """A GH200 node: one Grace CPU node, the Hopper GPU's HBM as CPU-less node 1, empty nodes 2-8.

    Node 0: 72 Neoverse cores (no SMT) and 480 GiB LPDDR5X. The GPU (0009:01:00.0, PCI numa_node
    0) has its 96 GiB of HBM onlined as node 1, which its ``numa_status`` names. Nodes 2-8 exist
    with neither CPUs nor memory (what the driver reserves for MIG partitions' memory). The SLIT
    puts every other node at 80. A ConnectX-7 sits on node 0.
    """
    nodes = 9
    slit = tuple(tuple(10 if i == j else 80 for j in range(nodes)) for i in range(nodes))
    return Topology(
        name="grace_hopper",
        sockets=1,
        cores_per_socket=72,
        threads_per_core=1,
        memory_per_node_kib=480 * GiB_KIB,
        memory_only_nodes=(
            NodeSpec(id=1, memory_kib=96 * GiB_KIB, hugepages=((2048, 0), (1048576, 0))),
            *(NodeSpec(id=n, memory_kib=0) for n in range(2, nodes)),
        ),
        distances=slit,
        gpus=(
            GpuSpec(
                bus_id="0009:01:00.0",
                device_id=0x2342,
                numa_node=0,
                product_name="NVIDIA GH200 480GB",
                nvidia_minor=0,
                memory_node=1,
            ),
        ),
        nics=(
            NicSpec(
                bus_id="0000:01:00.0",
                interface="enP1p1s0f0np0",
                mac="b8:3f:d2:00:00:01",
                numa_node=0,
                speed=400000,
                rdma="mlx5_0",
                uverbs=0,
            ),
        ),
        product="GH200 Grace Hopper Superchip",
    )


def _snc2() -> Topology:
    """Two sockets with sub-NUMA clustering (SNC-2): 4 NUMA nodes, SLIT 10 / 12 / 21.

    Nodes 0-1 are socket 0, 2-3 socket 1, 16 cores x 2 threads per socket. On each socket the GPU
    sits on the first node and the NIC on the second, so a GPU and its close NIC never share a
    ``numaNode`` value, only a socket.
    """
    gpus = tuple(
        GpuSpec(bus_id=bus, numa_node=node, product_name="NVIDIA H100 80GB HBM3", nvidia_minor=k)
        for k, (bus, node) in enumerate((("0000:18:00.0", 0), ("0000:98:00.0", 2)))
    )
    nics = tuple(
        NicSpec(
            bus_id=bus,
            interface=f"ens{k}np0",
            mac=f"0c:42:a1:10:00:{k:02x}",
            numa_node=node,
            speed=200000,
            rdma=f"mlx5_{k}",
            uverbs=k,
        )
        for k, (bus, node) in enumerate((("0000:38:00.0", 1), ("0000:b8:00.0", 3)))
    )
    return Topology(
        name="snc2",
        sockets=2,
        cores_per_socket=16,
        threads_per_core=2,
        nodes_per_socket=2,
        memory_per_node_kib=128 * GiB_KIB,
        hugepages_per_node=((2048, 256), (1048576, 4)),
        gpus=gpus,
        nics=nics,
        product="SNC-2 server",
    )


def _cxl() -> Topology:
    """Two sockets and a 256 GiB CXL memory expander behind socket 0, onlined as CPU-less node 2.

    The SLIT puts the expander at 14 from node 0 and 24 from node 1; its memory comes from the
    device-DAX instance of a CXL region (``bus/dax/devices/dax0.0``, target_node 2). A NIC sits on
    node 0.
    """
    return Topology(
        name="cxl",
        sockets=2,
        cores_per_socket=8,
        threads_per_core=2,
        memory_per_node_kib=64 * GiB_KIB,
        memory_only_nodes=(NodeSpec(id=2, memory_kib=256 * GiB_KIB, cxl=True),),
        distances=((10, 21, 14), (21, 10, 24), (14, 24, 10)),
        nics=(
            NicSpec(
                bus_id="0000:17:00.0",
                interface="ens1f0",
                mac="0c:42:a1:20:00:00",
                numa_node=0,
            ),
        ),
        product="CXL memory expansion server",
    )


dgx = _dgx()
workstation = _workstation()
cloud_vm = _cloud_vm()
huge = _huge()
hostile = _hostile()
mixed = _mixed()
grace_hopper = _grace_hopper()
snc2 = _snc2()
cxl = _cxl()

#: the ready topologies by name (stable keys: other tests and the e2e suite use them)
TOPOLOGIES: dict[str, Topology] = {
    t.name: t for t in (dgx, workstation, cloud_vm, huge, hostile, mixed, grace_hopper, snc2, cxl)
}
