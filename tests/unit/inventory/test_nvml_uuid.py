"""NVML enrichment adds each NVIDIA GPU's UUID, which NVIDIA_VISIBLE_DEVICES then names.

``FakePynvml`` stands in for the ``pynvml`` module (NVML needs an NVIDIA GPU and driver): the
calls ``enrich_with_nvml`` makes, answering for the DGX fixture's GPUs.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from driver.claims.config import EffectiveConfig
from driver.claims.hostedits import HostEdits
from driver.claims.render import claim_spec
from driver.claims.selection import AllocatedDevice, ClaimView
from driver.inventory.model import DeviceKind
from driver.inventory.nvml import enrich_with_nvml
from tests.unit.inventory.trees import host_tree, inventory


@dataclass
class FakePynvml:
    """NVML's view: index order is PCI order; one GPU reports a malformed UUID."""

    bus_ids: list[str]

    def nvmlInit(self) -> None:
        pass

    def nvmlShutdown(self) -> None:
        pass

    def nvmlDeviceGetCount(self) -> int:
        return len(self.bus_ids)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> int:
        return i

    def nvmlDeviceGetPciInfo(self, h: int) -> SimpleNamespace:
        domain, rest = self.bus_ids[h].split(":", 1)
        return SimpleNamespace(busId=f"0000{domain}:{rest}".upper().encode())

    def nvmlDeviceGetName(self, h: int) -> bytes:
        return b"NVIDIA H100 80GB HBM3"

    def nvmlDeviceGetMemoryInfo(self, h: int) -> SimpleNamespace:
        return SimpleNamespace(total=80 * 1024**3)

    def nvmlDeviceGetUUID(self, h: int) -> str:
        return "garbage" if h == 7 else f"GPU-0000000{h}-1111-2222-3333-444444444444"


def test_uuid_from_nvml_is_what_the_runtime_is_told(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each GPU's NVML UUID lands on the GPU with the same PCI address; a malformed one is ignored
    (that GPU is named by its minor)."""
    base = inventory("dgx")
    monkeypatch.setitem(sys.modules, "pynvml", FakePynvml([g.pci.bus_id for g in base.gpus]))
    inv = enrich_with_nvml(base)
    assert [g.uuid for g in inv.gpus][:2] == [
        "GPU-00000000-1111-2222-3333-444444444444",
        "GPU-00000001-1111-2222-3333-444444444444",
    ]
    assert inv.gpus[7].uuid is None and inv.gpus[0].memory_bytes == 80 * 1024**3
    root = host_tree("dgx")
    edits = HostEdits(
        host_root=str(root), driver_root="/", cdi_dir=str(root / "run/cdi"), claim_kind="x/claim"
    )
    for gpu, expected in ((inv.gpus[3], "GPU-00000003-1111-2222-3333-444444444444"), (inv.gpus[7], "7")):
        dev = AllocatedDevice("g", gpu.name, "n", None, {}, DeviceKind.GPU, gpu, EffectiveConfig())
        extras = edits.for_devices([dev])  # the device nodes, checked on the host tree
        view = ClaimView("ns", "c", "u", "", (dev,))
        spec, _ = claim_spec(view, driver_name="numadra.dev", pinning=None, extras=extras)
        env = dict(e.split("=", 1) for e in spec.devices[0].edits.env)
        assert env["NVIDIA_VISIBLE_DEVICES"] == expected
        assert f"/dev/nvidia{gpu.minor}" in [n.path for n in spec.devices[0].edits.device_nodes]
