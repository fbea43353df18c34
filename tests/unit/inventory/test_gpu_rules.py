"""What is a GPU (driver/inventory/gpus.py): one case per vendor rule and per "not a GPU" reason."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from driver.cli import main
from driver.inventory.build import build_inventory
from driver.inventory.discovery import discover
from driver.inventory.facts import HostFacts, NvidiaFacts, PciFacts
from driver.inventory.model import Gpu, Inventory, SkippedDevice
from driver.inventory.probe import probe_host
from harness.hosttree import GpuSpec, Topology, write_host_tree
from tests.unit.inventory.trees import host_tree, inventory

BDF = "0000:18:00.0"
NVIDIA, AMD, INTEL, ASPEED, MATROX = 0x10DE, 0x1002, 0x8086, 0x1A03, 0x102B
UUID = "GPU-3f1c2a4b-5d6e-7f80-91a2-b3c4d5e6f708"


def _one(
    vendor: int | None,
    driver: str | None,
    *,
    pci_class: int = 0x030200,
    nvidia: NvidiaFacts | None = None,
    drm: tuple[str, ...] = (),
    dev: frozenset[str] = frozenset(),
) -> Inventory:
    pci = PciFacts(BDF, "pci0000:17", 0, pci_class, vendor, 0x1234, driver, drm=drm)
    return build_inventory(HostFacts(pci=(pci,), nvidia=(nvidia,) if nvidia else (), dev_nodes=dev))


def _gpu(inv: Inventory) -> Gpu:
    assert inv.skipped == (), inv.skipped
    (gpu,) = inv.gpus
    return gpu


def _skipped(inv: Inventory) -> SkippedDevice:
    assert inv.gpus == ()
    (skipped,) = inv.skipped
    assert skipped.bus_id == BDF
    return skipped


# -- NVIDIA ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("pci_class", [0x030000, 0x030200, 0x038000, 0x120000])
def test_nvidia_gpu_on_its_driver_is_published_with_its_minor_as_index(pci_class: int) -> None:
    """Bound to nvidia, information file with minor 5, /dev/nvidia5: published, index 5, UUID kept."""
    inv = _one(
        NVIDIA,
        "nvidia",
        pci_class=pci_class,
        nvidia=NvidiaFacts(BDF, 5, "NVIDIA H100", UUID),
        dev=frozenset({"/dev/nvidia5", "/dev/nvidiactl"}),
    )
    gpu = _gpu(inv)
    assert (gpu.vendor, gpu.index, gpu.minor, gpu.uuid) == ("nvidia", 5, 5, UUID)
    assert gpu.device_nodes == ("/dev/nvidia5", "/dev/nvidiactl")


@pytest.mark.parametrize(
    ("driver", "nvidia", "dev", "reason"),
    [
        pytest.param("vfio-pci", NvidiaFacts(BDF, 0, None), {"/dev/nvidia0"}, "not bound", id="vfio"),
        pytest.param("nouveau", None, set(), "not bound to nvidia (driver nouveau)", id="nouveau"),
        pytest.param(None, None, set(), "(driver none)", id="no-driver"),
    ],
)
def test_nvidia_without_its_driver_is_skipped(
    driver: str | None, nvidia: NvidiaFacts | None, dev: set[str], reason: str
) -> None:
    """A GPU left to vfio-pci (VM passthrough) or nouveau cannot serve a container's CUDA work."""
    assert reason in _skipped(_one(NVIDIA, driver, nvidia=nvidia, dev=frozenset(dev))).reason


@pytest.mark.parametrize(
    ("nvidia", "dev", "reason"),
    [
        pytest.param(None, {"/dev/nvidia0"}, "no /proc/driver/nvidia/gpus", id="no-information-file"),
        pytest.param(NvidiaFacts(BDF, None, "H100"), set(), "no readable Device Minor", id="no-minor"),
        pytest.param(NvidiaFacts(BDF, 3, "H100"), {"/dev/nvidia0"}, "/dev/nvidia3 missing", id="no-node"),
    ],
)
def test_half_described_nvidia_gpu_is_skipped_with_a_warning(
    nvidia: NvidiaFacts | None, dev: set[str], reason: str
) -> None:
    """Odd vendor files: skipped (never published without its own device node) with a warning naming it."""
    with capture_logs() as logs:
        skipped = _skipped(_one(NVIDIA, "nvidia", nvidia=nvidia, dev=frozenset(dev)))
    assert reason in skipped.reason
    warnings = [e for e in logs if e["log_level"] == "warning"]
    assert [(e["device"], e["reason"]) for e in warnings] == [(BDF, skipped.reason)]


def test_unreadable_vendor_id_is_skipped_with_a_warning() -> None:
    """No vendor file: which rule applies is unknown, so the function is not published."""
    with capture_logs() as logs:
        skipped = _skipped(_one(None, "nvidia"))
    assert skipped.reason == "vendor or device id unreadable"
    assert any(e["log_level"] == "warning" and e["device"] == BDF for e in logs)


# -- AMD ---------------------------------------------------------------------------------------------


def test_amd_on_amdgpu_with_render_node_is_published_with_render_index() -> None:
    """amdgpu + renderD130: index 2 (render nodes count from renderD128); kfd in the device nodes."""
    dev = frozenset({"/dev/dri/card2", "/dev/dri/renderD130", "/dev/kfd"})
    gpu = _gpu(_one(AMD, "amdgpu", pci_class=0x120000, drm=("card2", "renderD130"), dev=dev))
    assert (gpu.vendor, gpu.index) == ("amd", 2)
    assert gpu.device_nodes == ("/dev/dri/card2", "/dev/dri/renderD130", "/dev/kfd")


def test_amd_with_only_kfd_is_published_without_an_index() -> None:
    """/dev/kfd alone is enough for ROCm compute; without a render node there is no vendor number."""
    gpu = _gpu(_one(AMD, "amdgpu", dev=frozenset({"/dev/kfd"})))
    assert (gpu.index, gpu.device_nodes) == (None, ("/dev/kfd",))


@pytest.mark.parametrize(
    ("driver", "drm", "dev", "reason"),
    [
        pytest.param("radeon", ("card0",), {"/dev/dri/card0"}, "not bound to amdgpu", id="radeon"),
        pytest.param(
            "amdgpu", ("card0",), {"/dev/dri/card0"}, "without a render node or /dev/kfd", id="no-render"
        ),
        pytest.param("amdgpu", ("renderD128",), set(), "without a render node", id="render-node-not-in-dev"),
    ],
)
def test_amd_without_compute_is_skipped(
    driver: str, drm: tuple[str, ...], dev: set[str], reason: str
) -> None:
    """Old radeon driver, or amdgpu with neither a render node in /dev nor /dev/kfd."""
    assert reason in _skipped(_one(AMD, driver, pci_class=0x030000, drm=drm, dev=frozenset(dev))).reason


# -- Intel -------------------------------------------------------------------------------------------


@pytest.mark.parametrize("driver", ["i915", "xe"])
def test_intel_on_i915_or_xe_with_render_node_is_published(driver: str) -> None:
    """Both kernel drivers serve compute; the driver is kept (the Intel extended resources differ)."""
    dev = frozenset({"/dev/dri/card1", "/dev/dri/renderD129"})
    gpu = _gpu(_one(INTEL, driver, pci_class=0x030000, drm=("card1", "renderD129"), dev=dev))
    assert (gpu.vendor, gpu.driver, gpu.index) == ("intel", driver, 1)


@pytest.mark.parametrize(
    ("driver", "drm", "reason"),
    [
        pytest.param("i915", ("card0",), "i915 without a render node", id="no-render"),
        pytest.param("vfio-pci", ("renderD128",), "not bound to i915/xe", id="vfio"),
    ],
)
def test_intel_without_compute_is_skipped(driver: str, drm: tuple[str, ...], reason: str) -> None:
    """An Intel display function without a render node (or on another driver) is not a compute GPU."""
    dev = frozenset(f"/dev/dri/{n}" for n in drm)
    assert reason in _skipped(_one(INTEL, driver, pci_class=0x030000, drm=drm, dev=dev)).reason


# -- not GPUs ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("vendor", "driver", "pci_class", "reason"),
    [
        pytest.param(ASPEED, "ast", 0x030000, "ASPEED BMC graphics (driver ast)", id="aspeed-bmc"),
        pytest.param(MATROX, "mgag200", 0x030000, "Matrox board graphics (driver mgag200)", id="matrox-g200"),
        pytest.param(0x1E52, "tenstorrent", 0x120000, "vendor 1e52 has no compute rule", id="other-accel"),
        pytest.param(0x1AF4, "virtio-pci", 0x030000, "vendor 1af4 has no compute rule", id="virtio-gpu"),
    ],
)
def test_display_devices_without_a_compute_rule_are_skipped(
    vendor: int, driver: str, pci_class: int, reason: str
) -> None:
    """BMC and board graphics, unknown accelerators: skipped with a reason, quietly (no warning)."""
    dev = frozenset({"/dev/dri/card0", "/dev/dri/renderD128"})
    with capture_logs() as logs:
        skipped = _skipped(_one(vendor, driver, pci_class=pci_class, drm=("card0", "renderD128"), dev=dev))
    assert reason in skipped.reason
    assert (skipped.vendor_id, skipped.pci_class, skipped.driver) == (vendor, pci_class, driver)
    assert not [e for e in logs if e["log_level"] == "warning"]


# -- host trees --------------------------------------------------------------------------------------


def test_mixed_node_publishes_each_vendor_with_its_own_numbers() -> None:
    """NVIDIA minors, AMD/Intel render numbers; the ASPEED and Matrox chips (first in PCI order) skipped."""
    inv = inventory("mixed")
    got = [(g.pci.bus_id, g.vendor, g.driver, g.index) for g in inv.gpus]
    assert got == [
        ("0000:18:00.0", "nvidia", "nvidia", 0),
        ("0000:2a:00.0", "nvidia", "nvidia", 1),
        ("0000:3c:00.0", "amd", "amdgpu", 0),
        ("0000:4d:00.0", "intel", "xe", 2),
        ("0000:9a:00.0", "nvidia", "nvidia", 2),
        ("0000:ab:00.0", "nvidia", "nvidia", 3),
        ("0000:bc:00.0", "amd", "amdgpu", 1),
    ]
    assert [(s.bus_id, s.driver) for s in inv.skipped] == [
        ("0000:03:00.0", "ast"),
        ("0000:04:00.0", "mgag200"),
    ]


def test_probe_reads_the_nvidia_uuid_only_in_its_shape(tmp_path: Path) -> None:
    """The "GPU UUID:" line of the information file becomes the GPU's UUID; a malformed one is ignored."""
    topo = Topology(
        name="uuid",
        cores_per_socket=1,
        gpus=(
            GpuSpec(bus_id="0000:18:00.0", nvidia_minor=0, nvidia_uuid=UUID),
            GpuSpec(bus_id="0000:19:00.0", nvidia_minor=1, nvidia_uuid="GPU-; rm -rf /"),
        ),
    )
    root = write_host_tree(tmp_path / "h", topo)
    assert [n.uuid for n in probe_host(root).nvidia] == [UUID, None]
    assert [(g.index, g.uuid) for g in discover(root, use_nvml=False).gpus] == [(0, UUID), (1, None)]


def test_discover_table_lists_what_was_skipped_and_why(capsys: pytest.CaptureFixture[str]) -> None:
    """``numadra discover -o table`` on the mixed node names both board chips with their reasons."""
    assert main(["discover", "--host-root", str(host_tree("mixed")), "-o", "table"]) == 0
    out = capsys.readouterr().out
    _, _, skipped = out.partition("not published (display/accelerator functions that are not compute GPUs)\n")
    assert skipped.splitlines() == [
        "  0000:03:00.0  vendor 1a03 class 030000  not a compute GPU: ASPEED BMC graphics (driver ast)",
        "  0000:04:00.0  vendor 102b class 030000  not a compute GPU: Matrox board graphics (driver mgag200)",
    ]
    assert "7 GPU(s)" in out
    assert (
        "  gpu  gpu-0000-4d-00-0  intel 8086:56c0  index 2  root pci0000:4d  "
        "/dev/dri/card4 /dev/dri/renderD130" in out
    )


def test_discover_json_stays_data_when_a_gpu_is_skipped_with_a_warning(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The warning naming a half-described GPU goes to stderr; stdout stays parseable JSON."""
    assert main(["discover", "--host-root", str(host_tree("hostile")), "--node-name", "h"]) == 0
    out, err = capsys.readouterr()
    assert json.loads(out)["kind"] == "List"
    assert "0000:0b:00.0" in err and "no readable Device Minor" in err
