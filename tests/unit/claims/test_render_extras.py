"""What the host adds to a claim's spec lands on its own device: toolkit ID first, files, groups."""

from __future__ import annotations

from cdi import Mount
from driver.claims.config import EffectiveConfig
from driver.claims.hostedits import DeviceExtras
from driver.claims.render import claim_spec
from driver.claims.selection import AllocatedDevice, ClaimView
from driver.inventory.model import DeviceKind, Gpu
from driver.inventory.nvidia_source import UserspaceSource
from tests.unit.inventory.trees import inventory

DRIVER = "numadra.dev"


def _view() -> tuple[ClaimView, list[Gpu]]:
    gpus = list(inventory("dgx").gpus)[:2]
    devices = tuple(
        AllocatedDevice("gpus", g.name, "node-a", None, {}, DeviceKind.GPU, g, EffectiveConfig())
        for g in gpus
    )
    return ClaimView("ns", "c", "uid-1", "", devices), gpus


def test_toolkit_id_comes_first_and_only_for_its_gpu() -> None:
    """The toolkit's ID precedes numadra's (its NVIDIA_VISIBLE_DEVICES=void is applied first)."""
    view, gpus = _view()
    extras = DeviceExtras(cdi_ids={gpus[1].name: ("nvidia.com/gpu=GPU-b",)}, source=UserspaceSource.TOOLKIT)
    _, prepared = claim_spec(view, driver_name=DRIVER, pinning=None, extras=extras)
    assert prepared[0].cdi_device_ids == (f"{DRIVER}/claim=uid-1-{gpus[0].name}",)
    assert prepared[1].cdi_device_ids == ("nvidia.com/gpu=GPU-b", f"{DRIVER}/claim=uid-1-{gpus[1].name}")


def test_driver_files_follow_the_metadata_mount_and_groups_raise_the_version() -> None:
    """Driver-root files are mounted with their GPU after the metadata file; a group needs 0.7.0."""
    view, gpus = _view()
    meta = Mount("/plugin/meta.json", "/var/run/kubernetes.io/x.json", ("ro", "bind"))
    lib = Mount("/usr/lib/libcuda.so.1", "/usr/lib/libcuda.so.1", ("ro",))
    extras = DeviceExtras(
        mounts={g.name: (lib,) for g in gpus}, gids={gpus[0].name: (44,)}, source=UserspaceSource.DRIVER_ROOT
    )
    spec, _ = claim_spec(view, driver_name=DRIVER, pinning=None, mounts={"gpus": meta}, extras=extras)
    first, second = spec.devices
    assert first.edits.mounts == (meta, lib)
    assert second.edits.mounts == (lib,)
    assert first.edits.additional_gids == (44,)
    assert second.edits.additional_gids == ()
    assert spec.to_json()["cdiVersion"] == "0.7.0"
