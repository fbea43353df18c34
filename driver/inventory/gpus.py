"""What is a GPU: which display and accelerator PCI functions numadra publishes as ``gpu`` devices.

A PCI class says "display controller", not "can run a container's compute work". A DGX-class board
carries an ASPEED BMC chip (vendor 1a03, class 0x0300) next to its eight GPUs; publishing it would
make ``nvidia.com/gpu: 1`` land on the BMC and shift every NVIDIA index by one. So a function is a GPU
only when its vendor's compute driver owns it and the device nodes a container needs exist:

* NVIDIA (10de): bound to ``nvidia``, with ``/proc/driver/nvidia/gpus/<bdf>/information`` naming
  its device minor, and ``/dev/nvidia<minor>`` present;
* AMD (1002): bound to ``amdgpu``, with a DRM render node or ``/dev/kfd``;
* Intel (8086): bound to ``i915`` or ``xe``, with a DRM render node.

Classes looked at: VGA 0x0300, 3D 0x0302, other display 0x0380 and processing accelerator 0x1200;
an accelerator is published under the same rules (an AMD Instinct is 0x1200). Everything else of
those classes (ASPEED and Matrox BMC graphics, a GPU left to ``vfio-pci`` or ``nouveau``, an
accelerator of a vendor without a rule here) is skipped with its reason, which ``numadra discover
-o table`` prints. A GPU whose vendor files are missing or odd (no vendor id, an NVIDIA information
file without a device minor) is skipped too, with a warning naming it: a half-described GPU would
get the wrong device node or index in a container.

Pure: facts in, decision out, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from driver.inventory.facts import NvidiaFacts, PciFacts
from driver.inventory.model import DeviceKind, Gpu, PciTopology, SkippedDevice, pci_device_name
from driver.inventory.sysfs import parse_count

__all__ = [
    "CANDIDATE_CLASSES",
    "COMPUTE_DRIVERS",
    "PCI_VENDORS",
    "VENDOR_GPU_CLASSES",
    "Classified",
    "VendorGpuClass",
    "classify_gpu",
    "is_candidate",
]

#: PCI class >> 8 of the functions looked at: VGA, 3D, other display, processing accelerator
CANDIDATE_CLASSES = frozenset({0x0300, 0x0302, 0x0380, 0x1200})
#: vendor attribute values of the vendors with a rule
PCI_VENDORS: Mapping[int, str] = {0x10DE: "nvidia", 0x1002: "amd", 0x8086: "intel"}
#: the kernel drivers that serve compute, per vendor
COMPUTE_DRIVERS: Mapping[str, frozenset[str]] = {
    "nvidia": frozenset({"nvidia"}),
    "amd": frozenset({"amdgpu"}),
    "intel": frozenset({"i915", "xe"}),
}


@dataclass(frozen=True, slots=True)
class VendorGpuClass:
    """A vendor's DeviceClass (deploy/): its GPUs only, under its device plugin's resource name."""

    prefix: str  # the class is ``<prefix>.<driver name>``
    vendor: str  # the ``vendor`` attribute it selects
    kernel_driver: str  # the ``driver`` attribute it also selects ("" for any)
    extended_resource: str  # the device plugin's resource name, served through DRA


#: the vendor classes deploy/ installs; Intel has one resource per kernel driver, as its plugin does
VENDOR_GPU_CLASSES: tuple[VendorGpuClass, ...] = (
    VendorGpuClass("nvidia-gpu", "nvidia", "", "nvidia.com/gpu"),
    VendorGpuClass("amd-gpu", "amd", "", "amd.com/gpu"),
    VendorGpuClass("intel-i915-gpu", "intel", "i915", "gpu.intel.com/i915"),
    VendorGpuClass("intel-xe-gpu", "intel", "xe", "gpu.intel.com/xe"),
)

#: well-known board graphics, named in the skip reason so that an operator recognizes them
_BOARD_GRAPHICS: Mapping[int, str] = {0x1A03: "ASPEED BMC graphics", 0x102B: "Matrox board graphics"}
_NVIDIA_SHARED_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
_RENDER_BASE = 128  # the kernel numbers render nodes from renderD128

#: a published GPU, or a skipped function and whether the skip deserves a warning (odd files)
Classified = tuple[Gpu, None, bool] | tuple[None, SkippedDevice, bool]


def is_candidate(p: PciFacts) -> bool:
    """True when the function's class is one that may be a GPU (the rules then decide)."""
    return p.pci_class is not None and (p.pci_class >> 8) in CANDIDATE_CLASSES


def _skip(p: PciFacts, reason: str, *, odd: bool = False) -> Classified:
    return None, SkippedDevice(p.bus_id, p.vendor_id, p.pci_class, p.driver, reason), odd


def _render_index(drm: tuple[str, ...]) -> int | None:
    found = (parse_count(n.removeprefix("renderD")) for n in drm if n.startswith("renderD"))
    numbers = sorted(n for n in found if n is not None)
    return numbers[0] - _RENDER_BASE if numbers and numbers[0] >= _RENDER_BASE else None


@dataclass(frozen=True, slots=True)
class _Accepted:
    index: int | None
    nodes: list[str]
    uuid: str | None = None


@dataclass(frozen=True, slots=True)
class _Rejected:
    reason: str
    odd: bool = False  # the vendor's files are missing or odd: worth a warning


def _nvidia(p: PciFacts, info: NvidiaFacts | None, dev_nodes: frozenset[str]) -> _Accepted | _Rejected:
    if info is None:
        return _Rejected("no /proc/driver/nvidia/gpus/<bdf>/information for this GPU", odd=True)
    if info.minor is None:
        return _Rejected("NVIDIA information file has no readable Device Minor", odd=True)
    own = f"/dev/nvidia{info.minor}"
    if own not in dev_nodes:
        return _Rejected(f"device node {own} missing", odd=True)
    return _Accepted(info.minor, [own, *_NVIDIA_SHARED_NODES], info.uuid)


def _drm(p: PciFacts, vendor: str, dev_nodes: frozenset[str]) -> _Accepted | _Rejected:
    """AMD and Intel: DRM nodes; AMD also takes /dev/kfd alone (ROCm compute without a render node)."""
    drm_nodes = [f"/dev/dri/{n}" for n in p.drm if n.startswith(("card", "renderD"))]
    render = any("/renderD" in n and n in dev_nodes for n in drm_nodes)
    if vendor == "amd":
        if not render and "/dev/kfd" not in dev_nodes:
            return _Rejected("amdgpu without a render node or /dev/kfd")
        return _Accepted(_render_index(p.drm) if render else None, [*drm_nodes, "/dev/kfd"])
    if not render:
        return _Rejected(f"{p.driver} without a render node")
    return _Accepted(_render_index(p.drm), drm_nodes)


def classify_gpu(
    p: PciFacts, topology: PciTopology, nvidia: NvidiaFacts | None, dev_nodes: frozenset[str]
) -> Classified:
    """Apply the rules of the module docstring to one candidate function."""
    if p.vendor_id is None or p.device_id is None:
        return _skip(p, "vendor or device id unreadable", odd=True)
    vendor = PCI_VENDORS.get(p.vendor_id)
    if vendor is None:
        what = _BOARD_GRAPHICS.get(p.vendor_id, f"vendor {p.vendor_id:04x} has no compute rule")
        return _skip(p, f"not a compute GPU: {what} (driver {p.driver or 'none'})")
    if p.driver not in COMPUTE_DRIVERS[vendor]:
        wanted = "/".join(sorted(COMPUTE_DRIVERS[vendor]))
        return _skip(p, f"{vendor} function not bound to {wanted} (driver {p.driver or 'none'})")
    found = _nvidia(p, nvidia, dev_nodes) if vendor == "nvidia" else _drm(p, vendor, dev_nodes)
    if isinstance(found, _Rejected):
        return _skip(p, found.reason, odd=found.odd)
    nodes = [*found.nodes, *(f"/dev/accel/{n}" for n in p.accel if n.startswith("accel"))]
    gpu = Gpu(
        name=pci_device_name(DeviceKind.GPU, p.bus_id),
        pci=topology,
        vendor=vendor,
        vendor_id=p.vendor_id,
        device_id=p.device_id,
        pci_class=p.pci_class or 0,
        index=found.index,
        driver=p.driver,
        product_name=(nvidia.model if nvidia is not None else None) or p.product_name,
        memory_bytes=p.vram_bytes if p.vram_bytes and p.vram_bytes > 0 else None,
        minor=nvidia.minor if nvidia is not None else None,
        device_nodes=tuple(n for n in nodes if n in dev_nodes),
        uuid=found.uuid,
    )
    return gpu, None, False
