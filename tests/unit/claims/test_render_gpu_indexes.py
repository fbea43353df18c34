"""GPU numbering in the CDI spec: the device node and every index env name the same, vendor's own GPU.

The DGX fixture carries an ASPEED BMC chip before every GPU in PCI order. When numadra counted it
as a GPU, the claim for /dev/nvidia0 got ``NVIDIA_VISIBLE_DEVICES=1`` and the eighth GPU got 8,
which does not exist: a container saw a GPU it was not given. The expected values here are read
from the host tree's own files (the driver's information file), not from numadra's inventory.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from driver.claims.config import EffectiveConfig
from driver.claims.hostedits import HostEdits
from driver.claims.render import claim_spec
from driver.claims.selection import AllocatedDevice, ClaimView
from driver.inventory.discovery import discover
from driver.inventory.model import DeviceKind, Gpu, Inventory
from harness.hosttree import TOPOLOGIES, write_host_tree
from tests.unit.inventory.trees import host_tree, inventory

DRIVER = "numadra.dev"


def _proc_fields(root: Path, bus_id: str) -> dict[str, str]:
    """The NVIDIA driver's information file of one GPU, as key -> value."""
    text = (root / "proc/driver/nvidia/gpus" / bus_id / "information").read_text()
    return {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in text.splitlines())}


def _env(root: Path, inv: Inventory, *names: str) -> tuple[dict[str, str], list[str]]:
    """(env, device node paths) of a one-request claim holding ``names``, on host tree ``root``
    (the device nodes are checked there, as a prepare does)."""
    devices = []
    for name in names:
        device = inv.find(name)
        assert device is not None, name
        kind = DeviceKind.GPU if isinstance(device, Gpu) else DeviceKind.CPU
        devices.append(AllocatedDevice("gpus", name, "node-a", None, {}, kind, device, EffectiveConfig()))
    extras = HostEdits(
        host_root=str(root), driver_root="/", cdi_dir=str(root / "run/cdi"), claim_kind=f"{DRIVER}/claim"
    ).for_devices(devices)
    view = ClaimView("ns", "c", "uid-1", "", tuple(devices))
    spec, _ = claim_spec(view, driver_name=DRIVER, pinning=None, extras=extras)
    (first, *_rest) = spec.devices
    env = dict(item.partition("=")[::2] for item in first.edits.env)
    nodes = [n.path for d in spec.devices for n in d.edits.device_nodes]
    return env, nodes


@pytest.mark.parametrize("gpu", range(8))
def test_dgx_with_bmc_device_node_and_visible_devices_name_the_same_gpu(gpu: int) -> None:
    """Per GPU of the DGX (BMC chip first in PCI order): /dev/nvidiaN, NVIDIA_VISIBLE_DEVICES=N and
    NUMADRA_GPU_INDICES=N, with N the minor the driver's own file gives for that PCI address."""
    root = host_tree("dgx")
    inv = inventory("dgx")
    assert [s.vendor_id for s in inv.skipped] == [0x1A03]  # the BMC chip is there, and not a GPU
    target = inv.gpus[gpu]
    minor = _proc_fields(root, target.pci.bus_id)["Device Minor"]
    env, nodes = _env(root, inv, target.name)
    own_nodes = [n for n in nodes if n.removeprefix("/dev/nvidia").isdigit()]
    assert own_nodes == [f"/dev/nvidia{minor}"]
    assert (root / own_nodes[0].lstrip("/")).is_file()
    assert env["NVIDIA_VISIBLE_DEVICES"] == minor
    assert env["NUMADRA_GPU_INDICES"] == minor
    assert env["NUMADRA_GPU_PCI_BUS_IDS"] == target.pci.bus_id


def test_dgx_last_gpu_is_never_named_past_the_end() -> None:
    """The eighth GPU is minor 7: no index may name a ninth GPU (the old off-by-one gave 8)."""
    env, _ = _env(host_tree("dgx"), inventory("dgx"), *(g.name for g in inventory("dgx").gpus))
    assert env["NVIDIA_VISIBLE_DEVICES"] == "0,1,2,3,4,5,6,7"


def test_uuid_is_named_when_known_and_matches_the_device_node(tmp_path: Path) -> None:
    """With the UUID in the driver's file, NVIDIA_VISIBLE_DEVICES names it: the file that gives the
    UUID also gives the minor of the spec's /dev/nvidiaN."""
    dgx = TOPOLOGIES["dgx"]
    gpus = tuple(
        dataclasses.replace(g, nvidia_uuid=f"GPU-{k:08x}-0000-4000-8000-{g.bus_id[5:7]}0000000000")
        if g.vendor_id == 0x10DE
        else g
        for k, g in enumerate(dgx.gpus)
    )
    root = write_host_tree(tmp_path / "dgx-uuid", dataclasses.replace(dgx, gpus=gpus))
    inv = discover(root, use_nvml=False)
    for gpu in inv.gpus:
        env, nodes = _env(root, inv, gpu.name)
        fields = _proc_fields(root, gpu.pci.bus_id)
        assert env["NVIDIA_VISIBLE_DEVICES"] == fields["GPU UUID"]
        assert f"/dev/nvidia{fields['Device Minor']}" in nodes
        assert env["NUMADRA_GPU_INDICES"] == fields["Device Minor"]


def test_mixed_request_gives_the_nvidia_runtime_only_the_nvidia_gpus() -> None:
    """A generic request holding an NVIDIA and an AMD GPU: NVIDIA_VISIBLE_DEVICES names only the
    NVIDIA one (by its minor), the indices list is positional with the bus ids."""
    inv = inventory("mixed")
    env, nodes = _env(host_tree("mixed"), inv, "gpu-0000-3c-00-0", "gpu-0000-9a-00-0")
    assert env["NVIDIA_VISIBLE_DEVICES"] == "2"
    assert env["NUMADRA_GPU_PCI_BUS_IDS"] == "0000:3c:00.0,0000:9a:00.0"
    assert env["NUMADRA_GPU_INDICES"] == "0,2"
    assert "/dev/nvidia2" in nodes and "/dev/dri/renderD128" in nodes


def test_amd_only_request_has_no_nvidia_env() -> None:
    """AMD GPUs are never named to the NVIDIA runtime."""
    env, nodes = _env(host_tree("mixed"), inventory("mixed"), "gpu-0000-bc-00-0")
    assert "NVIDIA_VISIBLE_DEVICES" not in env
    assert env["NUMADRA_GPU_INDICES"] == "1"
    assert nodes == ["/dev/dri/card3", "/dev/dri/renderD129", "/dev/kfd"]
