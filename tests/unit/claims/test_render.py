"""Unit tests of the pure renderers: the per-claim CDI spec and the KEP-5304 metadata stream."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cdi import CheckedHostPath, spec_bytes
from driver.claims.config import EffectiveConfig
from driver.claims.metadata import container_path, metadata_dir, metadata_files, parse_generation
from driver.claims.render import claim_spec, claim_spec_file_name
from driver.claims.selection import AllocatedDevice, ClaimView
from driver.inventory.model import DeviceKind, Nic
from driver.pinning.types import ClaimPinning, CpuAssignment, CpuMode
from tests.integration.claims._world import CPU0, DRIVER, GPU0, NIC0, NIC1, NODE, make_inventory

INV = make_inventory()


def _dev(request: str, name: str, kind: DeviceKind, share: str | None = None, **env: str) -> AllocatedDevice:
    device = INV.find(name)
    assert device is not None
    return AllocatedDevice(request, name, NODE, share, {}, kind, device, EffectiveConfig(env=env))


def _view(*devices: AllocatedDevice, pod_claim: str = "") -> ClaimView:
    return ClaimView("ns", "claim", "abc-1", pod_claim, devices)


def test_claim_spec_names_and_ids() -> None:
    """CDI device names are <uid>-<device>[-<share>]; IDs use kind <driver>/claim; env is sorted."""
    view = _view(
        _dev("gpu/big", GPU0, DeviceKind.GPU, ZED="1", ALPHA="2"),
        _dev("cpu", CPU0, DeviceKind.CPU, share="s-1"),
    )
    pin = ClaimPinning("abc-1", (CpuAssignment("cpu", CpuMode.EXCLUSIVE, frozenset({2, 3}), frozenset({0})),))
    spec, devices = claim_spec(view, driver_name=DRIVER, pinning=pin)
    assert [d.name for d in spec.devices] == [f"abc-1-{GPU0}", f"abc-1-{CPU0}-s-1"]
    assert devices[0].request_names == ("gpu",)
    assert devices[1].cdi_device_ids == (f"{DRIVER}/claim=abc-1-{CPU0}-s-1",)
    assert devices[1].share_id == "s-1"
    env = list(spec.devices[0].edits.env)
    assert env == sorted(env)
    assert "ALPHA=2" in env
    assert "NUMADRA_CPUS=2-3" in spec.devices[1].edits.env
    assert claim_spec_file_name(DRIVER, "abc-1") == f"{DRIVER}_claim_abc-1.json"
    again, _ = claim_spec(view, driver_name=DRIVER, pinning=pin)
    assert again == spec  # deterministic


def test_metadata_stream_shape_and_generation(tmp_path: Path) -> None:
    """Two newline-terminated objects, v1beta1 first; generation kept when unchanged, +1 when changed."""
    view = _view(_dev("nic", NIC0, DeviceKind.NIC))
    attrs = {NIC0: {"type": {"string": "nic"}}}
    (first,) = metadata_files(view, driver_name=DRIVER, plugin_dir=tmp_path, attributes=attrs)
    assert first.host_path == str(tmp_path / "dra-device-metadata" / "abc-1_nic.json")
    assert first.content.endswith("\n")
    lines = first.content.splitlines()
    assert [list(json.loads(line))[:3] for line in lines] == [["kind", "apiVersion", "metadata"]] * 2
    assert parse_generation(first.content) == 1
    same = metadata_files(
        view,
        driver_name=DRIVER,
        plugin_dir=tmp_path,
        attributes=attrs,
        previous={str(first.host_path): first.content},
    )[0]
    assert same.content == first.content
    changed = metadata_files(
        view,
        driver_name=DRIVER,
        plugin_dir=tmp_path,
        attributes={NIC0: {"type": {"string": "changed"}}},
        previous={str(first.host_path): first.content},
    )[0]
    assert parse_generation(changed.content) == 2
    assert all(json.loads(line)["metadata"]["generation"] == 2 for line in changed.content.splitlines())


def test_parse_generation_of_garbage_is_zero() -> None:
    """An unreadable previous file counts as generation 0 (the next write is generation 1)."""
    assert parse_generation("") == 0
    assert parse_generation("not json\n") == 0
    assert parse_generation('{"metadata": {}}\n') == 0


def test_container_path_for_direct_and_template_claims() -> None:
    """Direct claims mount under resourceclaims/<claim>, template ones under resourceclaimtemplates/."""
    base = "/var/run/kubernetes.io/dra-device-attributes"
    assert container_path(_view(), "gpu", DRIVER) == f"{base}/resourceclaims/claim/gpu/{DRIVER}-metadata.json"
    assert (
        container_path(_view(pod_claim="my-gpu"), "gpu", DRIVER)
        == f"{base}/resourceclaimtemplates/my-gpu/gpu/{DRIVER}-metadata.json"
    )


@pytest.mark.parametrize("uid", ["abc-1", "5f2c8a9e-0d1b-4c3a-9e8f-000000000001"])
@pytest.mark.parametrize("pod_claim", ["", "my-gpu"])
@pytest.mark.parametrize("plugin_dir", ["/var/lib/kubelet/plugins/numadra.dev", '/odd dir/"q"/\u00e9'])
def test_metadata_mounts_ride_on_the_first_device_of_each_request(
    uid: str, pod_claim: str, plugin_dir: str
) -> None:
    """Each request's metadata file is mounted read-only by that request's first CDI device only.

    One spec per claim carries the mounts (no spec file per request), and the spec stays valid
    (``spec_bytes`` validates) for any plugin dir a node may have.
    """
    view = ClaimView(
        "ns",
        "claim",
        uid,
        pod_claim,
        (
            _dev("nic", NIC0, DeviceKind.NIC),
            _dev("gpu", GPU0, DeviceKind.GPU),
            _dev("nic", NIC1, DeviceKind.NIC),
        ),
    )
    files = metadata_files(view, driver_name=DRIVER, plugin_dir=Path(plugin_dir), attributes={})
    directory = CheckedHostPath(metadata_dir(Path(plugin_dir)))  # as if checked: no such dir here
    assert [f.request for f in files] == ["nic", "gpu"]
    assert [f.host_path for f in files] == [
        f"{plugin_dir}/dra-device-metadata/{uid}_{r}.json" for r in ("nic", "gpu")
    ]
    spec, devices = claim_spec(
        view, driver_name=DRIVER, pinning=None, mounts={f.request: f.mount(directory) for f in files}
    )
    spec_bytes(spec)  # raises when the spec is not valid CDI
    mounts = [[(m.host_path, m.container_path, m.options) for m in d.edits.mounts] for d in spec.devices]
    assert mounts == [
        [(files[0].host_path, files[0].container_path, ("ro", "bind"))],
        [(files[1].host_path, files[1].container_path, ("ro", "bind"))],
        [],
    ]
    assert [len(d.cdi_device_ids) for d in devices] == [1, 1, 1]  # no extra CDI ID per request


def test_metadata_follows_a_new_attribute_map_and_inventory_device(tmp_path: Path) -> None:
    """The encoded device object is reused only for the same attribute map and device object."""
    from dataclasses import replace

    def content(view: ClaimView, attrs: dict[str, dict[str, dict[str, str]]]) -> dict[str, object]:
        (meta,) = metadata_files(view, driver_name=DRIVER, plugin_dir=tmp_path, attributes=attrs)
        device = json.loads(meta.content.splitlines()[0])["requests"][0]["devices"][0]
        assert isinstance(device, dict)
        return device

    view = _view(_dev("nic", NIC0, DeviceKind.NIC))
    first = {NIC0: {"type": {"string": "nic"}}}
    second = {NIC0: {"type": {"string": "nic-b"}}}
    assert content(view, first)["attributes"] == first[NIC0]
    assert content(view, second)["attributes"] == second[NIC0]
    assert content(view, first)["attributes"] == first[NIC0]
    nic = view.devices[0].device
    assert isinstance(nic, Nic)
    renamed = replace(view.devices[0], device=replace(nic, interface_name="ens9"))
    moved = _view(renamed)
    assert content(moved, first)["networkData"] == {
        "interfaceName": "ens9",
        "hardwareAddress": "b8:ce:f6:00:00:01",
    }
    assert content(view, first)["networkData"] == {
        "interfaceName": "eth1",
        "hardwareAddress": "b8:ce:f6:00:00:01",
    }
