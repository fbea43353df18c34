"""A small fixture host (1 GPU, 1 RDMA NIC) with the health files, and helpers that flip signals."""

from __future__ import annotations

from pathlib import Path

from harness.hosttree import GpuSpec, NicSpec, Topology

GPU_BDF = "0000:3b:00.0"
NIC_BDF = "0000:1a:00.0"
NIC_IF = "ens1f0"
RDMA = "mlx5_0"
_AER_NAMES = ("Undefined", "DLP", "SDES", "TLP", "FCP", "CmpltTO", "MalfTLP", "ECRC", "UnsupReq")


def aer_text(total: int) -> str:
    """``aer_dev_fatal`` as the kernel prints it: one counter per error, then the total."""
    lines = [f"{name} {total if name == 'TLP' else 0}" for name in _AER_NAMES]
    return "\n".join([*lines, f"TOTAL_ERR_FATAL {total}"]) + "\n"


def health_topology(gpu_count: int = 1) -> Topology:
    """``gpu_count`` GPUs and one RDMA NIC, every PCI function with an AER file, RDMA port ACTIVE."""
    gpus = tuple(GpuSpec(bus_id=f"0000:{0x3B + k:02x}:00.0", nvidia_minor=k) for k in range(gpu_count))
    extra = [(f"sys/bus/pci/devices/{g.bus_id}/aer_dev_fatal", aer_text(0)) for g in gpus]
    extra.append((f"sys/bus/pci/devices/{NIC_BDF}/aer_dev_fatal", aer_text(0)))
    extra.append((f"sys/bus/pci/devices/{NIC_BDF}/infiniband/{RDMA}/ports/1/state", "4: ACTIVE"))
    extra.append((f"sys/class/net/{NIC_IF}/flags", "0x1003"))
    nic = NicSpec(bus_id=NIC_BDF, interface=NIC_IF, mac="0c:42:a1:00:00:01", rdma=RDMA, uverbs=0, numa_node=0)
    return Topology(name="health", cores_per_socket=2, gpus=gpus, nics=(nic,), extra_files=tuple(extra))


def write(root: Path, rel: str, text: str) -> None:
    """Overwrite one file of the host tree (following the sysfs symlinks, like the kernel view)."""
    (root / rel).write_text(text)


def set_carrier(root: Path, up: bool) -> None:
    """Carrier and operstate of the NIC's netdev."""
    write(root, f"sys/class/net/{NIC_IF}/carrier", "1" if up else "0")
    write(root, f"sys/class/net/{NIC_IF}/operstate", "up" if up else "down")


def bump_aer(root: Path, bus_id: str, total: int) -> None:
    """Raise the fatal AER total of a PCI function."""
    write(root, f"sys/bus/pci/devices/{bus_id}/aer_dev_fatal", aer_text(total))


def unplug(root: Path, bus_id: str) -> str:
    """Remove the device from sys/bus/pci/devices; returns the link target to plug it back."""
    link = root / "sys/bus/pci/devices" / bus_id
    target = str(link.readlink())
    link.unlink()
    return target


def replug(root: Path, bus_id: str, target: str) -> None:
    """Put the device back."""
    (root / "sys/bus/pci/devices" / bus_id).symlink_to(target)
