"""Rendering reuses what belongs to a device alone; the result is the same as rendered afresh.

The request environment of one device and its metadata text are kept per inventory device object,
and cdi remembers env names that passed its check: a claim rendered with those warm must give the
very bytes of one rendered cold, and a device of a new inventory (the host changed) is rendered
anew.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from cdi import CheckedHostPath, Hook, spec_text
from driver.claims.config import EffectiveConfig
from driver.claims.metadata import metadata_files
from driver.claims.render import claim_spec
from driver.claims.selection import AllocatedDevice, ClaimView
from driver.inventory.model import DeviceKind, Inventory
from driver.pinning.types import ClaimPinning, CpuAssignment, CpuMode
from tests.integration.claims._world import CPU0, CPU1, DRIVER, GPU0, GPU1, NIC0, NIC1, NODE, make_inventory

INV = make_inventory()


def _dev(
    request: str,
    name: str,
    kind: DeviceKind,
    share: str | None = None,
    *,
    inventory: Inventory = INV,
    admin: bool = False,
    **env: str,
) -> AllocatedDevice:
    device = inventory.find(name)
    assert device is not None
    return AllocatedDevice(request, name, NODE, share, {}, kind, device, EffectiveConfig(env=env), admin)


def _pin(uid: str, *requests: str) -> ClaimPinning:
    return ClaimPinning(
        uid,
        tuple(CpuAssignment(r, CpuMode.EXCLUSIVE, frozenset({2, 3}), frozenset({0})) for r in requests),
    )


def _claims(inv: Inventory) -> list[tuple[ClaimView, ClaimPinning | None]]:
    """(view, pinning) of claims on the devices of ``inv``: GPUs, NICs, CPU shares, admin access,
    several requests, config env, auxiliary CPUs, memory following the devices."""
    dev = functools.partial(_dev, inventory=inv)
    return [
        (ClaimView("ns", "gpu", "u-1", "", (dev("gpu", GPU0, DeviceKind.GPU),)), None),
        (
            ClaimView(
                "ns",
                "two-gpus",
                "u-2",
                "my-gpus",
                (
                    dev("gpus/a", GPU0, DeviceKind.GPU),
                    dev("gpus/b", GPU1, DeviceKind.GPU, ZED="1"),
                ),
            ),
            None,
        ),
        (
            ClaimView(
                "ns",
                "nic-cpu",
                "u-3",
                "",
                (
                    dev("nic", NIC0, DeviceKind.NIC),
                    dev("cpu", CPU0, DeviceKind.CPU, share="s-3"),
                ),
            ),
            _pin("u-3", "cpu"),
        ),
        (
            ClaimView(
                "ns",
                "many",
                "u-4",
                "",
                (
                    dev("gpu", GPU0, DeviceKind.GPU, admin=True),
                    dev("nic", NIC0, DeviceKind.NIC, A_B="x y"),
                    dev("nic", NIC1, DeviceKind.NIC),
                    dev("cpu", CPU1, DeviceKind.CPU, share="s-4"),
                ),
            ),
            None,
        ),
        (
            ClaimView("ns", "aux", "u-5", "", (dev("nic", NIC1, DeviceKind.NIC),)),
            _pin("u-5", "nic"),
        ),
        (ClaimView("ns", "mems", "u-6", "", (dev("nic", NIC0, DeviceKind.NIC),)), None),
    ]


def _hook(assignment: CpuAssignment) -> Hook:
    return Hook("createRuntime", "/opt/numadra/hook", (assignment.request,))


def _render(view: ClaimView, pinning: ClaimPinning | None, plugin_dir: Path) -> list[str]:
    files = metadata_files(view, driver_name=DRIVER, plugin_dir=plugin_dir, attributes={})
    directory = CheckedHostPath(str(plugin_dir))
    mounts = {f.request: f.mount(directory) for f in files}
    spec, devices = claim_spec(view, driver_name=DRIVER, pinning=pinning, cpu_hook=_hook, mounts=mounts)
    text = spec_text(spec)
    assert text == json.dumps(spec.to_json(), separators=(",", ":")) + "\n"  # the reference encoding
    return [text, repr(devices), *(f.content for f in files)]


def test_warm_renders_are_the_bytes_of_cold_ones(tmp_path: Path) -> None:
    # each claim on a new inventory: its devices are new objects, so nothing is remembered for them
    claims = _claims(INV)
    fresh = [_render(*_claims(make_inventory())[index], tmp_path) for index in range(len(claims))]
    for _ in range(2):  # the same devices again and again, in another order: remembered
        for index in reversed(range(len(claims))):
            assert _render(*claims[index], tmp_path) == fresh[index]


def test_a_device_of_a_new_inventory_is_rendered_anew(tmp_path: Path) -> None:
    cpu = _dev("cpu", CPU0, DeviceKind.CPU)
    old = ClaimView("ns", "c", "u-7", "", (_dev("nic", NIC0, DeviceKind.NIC), cpu))
    assert "NUMADRA_NIC_INTERFACES=eth1" in _render(old, None, tmp_path)[0]
    replaced = make_inventory(nic0_interface="eth7")  # the host renamed the interface
    new = ClaimView(
        "ns",
        "c",
        "u-7",
        "",
        (_dev("nic", NIC0, DeviceKind.NIC, inventory=replaced), cpu),
    )
    text = _render(new, None, tmp_path)[0]
    assert "NUMADRA_NIC_INTERFACES=eth7" in text
    assert "eth1" not in text
