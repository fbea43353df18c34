"""The VM of the VM tier: its topology (the one source of truth the tests assert against), the
QEMU command line that builds it, and one boot that runs the guest checks.

Topology (``TOPOLOGY``): q35, 4 vCPUs on 2 sockets, three NUMA nodes of unequal size (so a swapped
node cannot pass): node 0 and node 1 hold the CPUs of socket 0 and socket 1, node 2 is a
memory-only node (a CXL memory expander's shape) nearest to node 1 in the SLIT. Each CPU node
reserves its own number of 2 MiB hugepages at boot (``hugepages=<node>:<count>``, Linux 5.19+). An
e1000e NIC sits behind a PCIe root port on a ``pxb-pcie`` expander bus with ``numa_node=1``: the
firmware's ACPI tables give that host bridge a proximity domain, as a NIC slot of socket 1 has on
a real server. The VM has no network: the NIC has no peer.

The guest reads three 9p shares: the checkout (read-only, ``repo``), the host interpreter's
site-packages (read-only, ``site``: the same Debian bookworm Python 3.11 runs both sides) and an
output directory (``out``, where ``result.json`` lands). The root disk is the cached image in QEMU
snapshot mode, so a boot never changes it.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "TOPOLOGY",
    "Boot",
    "Nic",
    "Node",
    "Topology",
    "boot",
    "find_qemu",
    "kvm_backend_problem",
    "kvm_usable",
    "qemu_argv",
]

KVM_GET_API_VERSION = 0xAE00
KVM_API_VERSION = 12


@dataclass(frozen=True)
class Node:
    """One guest NUMA node as QEMU is told to build it."""

    id: int
    cpus: tuple[int, ...]
    memory_mib: int
    hugepages_2m: int
    socket: int | None


@dataclass(frozen=True)
class Nic:
    """The NIC on the expander bus: where it must show up in the guest."""

    model: str
    numa_node: int
    bus_nr: int  # the pxb-pcie's bus; the root port behind it gives the NIC bus_nr + 1
    mac: str

    @property
    def pci_bus_id(self) -> str:
        return f"0000:{self.bus_nr + 1:02x}:00.0"

    @property
    def pcie_root(self) -> str:
        return f"pci0000:{self.bus_nr:02x}"


@dataclass(frozen=True)
class Topology:
    """The whole VM: nodes, SLIT (pairs; QEMU mirrors them), sockets, the NIC."""

    nodes: tuple[Node, ...]
    distances: dict[tuple[int, int], int]
    sockets: int
    cores_per_socket: int
    nic: Nic
    extra: tuple[str, ...] = field(default=())

    @property
    def cpus(self) -> int:
        return self.sockets * self.cores_per_socket

    def distance(self, a: int, b: int) -> int:
        if a == b:
            return 10
        return self.distances.get((a, b)) or self.distances[(b, a)]

    def hugepages_cmdline(self) -> str:
        per_node = ",".join(f"{n.id}:{n.hugepages_2m}" for n in self.nodes if n.hugepages_2m)
        return f"hugepagesz=2M hugepages={per_node}"


TOPOLOGY = Topology(
    nodes=(
        Node(id=0, cpus=(0, 1), memory_mib=768, hugepages_2m=8, socket=0),
        Node(id=1, cpus=(2, 3), memory_mib=1024, hugepages_2m=16, socket=1),
        Node(id=2, cpus=(), memory_mib=256, hugepages_2m=0, socket=1),
    ),
    distances={(0, 1): 21, (0, 2): 28, (1, 2): 17},
    sockets=2,
    cores_per_socket=2,
    nic=Nic(model="e1000e", numa_node=1, bus_nr=0x80, mac="52:54:00:6e:75:01"),
)


def kvm_usable(sys_module: Path = Path("/sys/module")) -> str | None:
    """None when /dev/kvm can run a stock kernel, else why not.

    /dev/kvm must answer KVM_GET_API_VERSION with 12 and be backed by hardware virtualization
    (``kvm_intel`` or ``kvm_amd``). Some cloud VMs offer /dev/kvm through ``kvm_pvm`` (PVM,
    virtualization without VMX/SVM): it answers the ioctl, but runs only PVM-built guest kernels,
    and a stock kernel hangs in its real-mode setup code, with no output, until the timeout.
    """
    try:
        fd = os.open("/dev/kvm", os.O_RDWR | os.O_CLOEXEC)
    except OSError as exc:
        return f"/dev/kvm: {exc.strerror}"
    try:
        version = fcntl.ioctl(fd, KVM_GET_API_VERSION)
    except OSError as exc:
        return f"/dev/kvm KVM_GET_API_VERSION: {exc.strerror}"
    finally:
        os.close(fd)
    if version != KVM_API_VERSION:
        return f"/dev/kvm API version {version}, not {KVM_API_VERSION}"
    return kvm_backend_problem(sys_module)


def kvm_backend_problem(sys_module: Path) -> str | None:
    """None when a hardware KVM module (``kvm_intel``, ``kvm_amd``) is loaded, else what there is."""
    if any((sys_module / m).is_dir() for m in ("kvm_intel", "kvm_amd")):
        return None
    backends = sorted(p.name for p in sys_module.glob("kvm*"))
    return f"/dev/kvm is not hardware KVM (modules: {', '.join(backends) or 'none'}; no kvm_intel/kvm_amd)"


def qemu_argv(
    qemu: str, topology: Topology, image: Path, repo: Path, site: Path, out: Path, *, kvm: bool
) -> list[str]:
    """The QEMU command line of one boot."""
    total = sum(n.memory_mib for n in topology.nodes)
    argv = [
        qemu,
        "-machine",
        f"q35,accel={'kvm' if kvm else 'tcg'}",
        "-cpu",
        # without arch-capabilities: under nested KVM (a cloud VM's /dev/kvm) QEMU may fail to set
        # MSR 0x10a and abort ("kvm_buf_set_msrs: Assertion ... failed"), measured on the CI host
        "host,-arch-capabilities" if kvm else "max",
        "-smp",
        f"{topology.cpus},sockets={topology.sockets},cores={topology.cores_per_socket},threads=1",
        "-m",
        f"{total}M",
        "-nodefaults",
        "-no-user-config",
        "-display",
        "none",
        "-no-reboot",
        "-serial",
        f"file:{out / 'console.log'}",
    ]
    for n in topology.nodes:
        argv += ["-object", f"memory-backend-ram,id=m{n.id},size={n.memory_mib}M"]
        cpus = f",cpus={n.cpus[0]}-{n.cpus[-1]}" if n.cpus else ""
        argv += ["-numa", f"node,nodeid={n.id}{cpus},memdev=m{n.id}"]
    for (a, b), value in sorted(topology.distances.items()):
        argv += ["-numa", f"dist,src={a},dst={b},val={value}"]
    nic = topology.nic
    argv += [
        "-device",
        f"pxb-pcie,id=pxb1,bus_nr={nic.bus_nr},numa_node={nic.numa_node},bus=pcie.0",
        "-device",
        "pcie-root-port,id=rp1,bus=pxb1,chassis=1",
        "-device",
        f"{nic.model},bus=rp1,mac={nic.mac},romfile=",  # no boot ROM: nothing boots from it
    ]
    cmdline = [
        "root=/dev/vda",
        "ro",
        "console=ttyS0",
        "init=/sbin/numadra-vm-init",
        topology.hugepages_cmdline(),
        "panic=-1",  # a dying init reboots at once, and -no-reboot turns that into QEMU's exit
        "quiet",
    ]
    argv += [
        "-kernel",
        str(image / "vmlinuz"),
        "-initrd",
        str(image / "initrd.img"),
        "-append",
        " ".join(cmdline),
        "-drive",
        f"file={image / 'rootfs.ext4'},if=none,id=root,format=raw,snapshot=on",
        "-device",
        "virtio-blk-pci,drive=root,bus=pcie.0",
    ]
    # every other device names pcie.0: QEMU would otherwise put it on the expander's bus, which
    # takes bridges only
    for tag, path, readonly in (("repo", repo, True), ("site", site, True), ("out", out, False)):
        ro = ",readonly=on" if readonly else ""
        argv += ["-fsdev", f"local,id=fs-{tag},path={path},security_model=none{ro}"]
        argv += ["-device", f"virtio-9p-pci,fsdev=fs-{tag},mount_tag={tag},bus=pcie.0"]
    return [*argv, *topology.extra]


@dataclass(frozen=True)
class Boot:
    """One finished boot: what the guest wrote and how long it took."""

    result: dict[str, Any] | None
    console: str
    guest_log: str
    seconds: float
    returncode: int | None  # None: QEMU ran past the timeout and was killed
    accel: str


def find_qemu() -> str | None:
    return shutil.which("qemu-system-x86_64")


def boot(
    qemu: str,
    topology: Topology,
    image: Path,
    repo: Path,
    site: Path,
    out: Path,
    *,
    kvm: bool,
    timeout: float,
) -> Boot:
    """Boot the VM once; the guest runs tests/vm/guest.py and powers off."""
    out.mkdir(parents=True, exist_ok=True)
    argv = qemu_argv(qemu, topology, image, repo, site, out, kvm=kvm)
    (out / "qemu-argv.json").write_text(json.dumps(argv, indent=1))
    started = time.monotonic()
    returncode: int | None
    with (out / "qemu.log").open("w") as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        try:
            returncode = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=30)
            returncode = None
    seconds = time.monotonic() - started

    def text(name: str) -> str:
        path = out / name
        return path.read_text(errors="replace") if path.exists() else ""

    raw = text("result.json")
    return Boot(
        result=json.loads(raw) if raw else None,
        console=text("console.log") + text("qemu.log"),
        guest_log=text("guest.log"),
        seconds=seconds,
        returncode=returncode,
        accel="kvm" if kvm else "tcg",
    )
