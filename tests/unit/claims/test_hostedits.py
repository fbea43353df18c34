"""HostEdits.for_devices on a real host tree: each node's checked path and the group that opens it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from driver.claims.config import EffectiveConfig
from driver.claims.hostedits import HostEdits
from driver.claims.selection import AllocatedDevice
from driver.inventory.model import DeviceKind, Nic, PciTopology

NODES = ("/dev/infiniband/uverbs0", "/dev/infiniband/rdma_cm")

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="makes root-owned device trees and chowns them")


def _nic(nodes: tuple[str, ...] = NODES) -> AllocatedDevice:
    nic = Nic(
        name="nic-0000-5e-00-1",
        pci=PciTopology("0000:5e:00.1", "pci0000:5d", 0),
        interface_name="eth1",
        mac_address="00:11:22:33:44:55",
        driver="mlx5_core",
        speed_mbps=None,
        sriov_vf=True,
        pf_bus_id="0000:5e:00.0",
        sriov_total_vfs=0,
        device_nodes=nodes,
    )
    return AllocatedDevice("nic", nic.name, "node-a", None, {}, DeviceKind.NIC, nic, EffectiveConfig())


def _host(tmp_path: Path) -> Path:
    host = tmp_path / "host"
    (host / "dev" / "infiniband").mkdir(parents=True)
    for d in (host, host / "dev", host / "dev" / "infiniband"):
        d.chmod(0o755)
    for path in NODES:
        node = host / path.lstrip("/")
        node.write_text("")
        node.chmod(0o660)
        os.chown(node, 0, 44)
    return host


def _edits(host: Path, *, groups: bool = True) -> HostEdits:
    return HostEdits(
        host_root=str(host),
        driver_root="/",
        cdi_dir=str(host.parent / "cdi"),
        claim_kind="numadra.dev/claim",
        device_groups=groups,
    )


def test_nodes_and_their_group(tmp_path: Path) -> None:
    """A 0660 root:44 node is given at its path, with group 44; without device groups, no group."""
    host = _host(tmp_path)
    extras = _edits(host).for_devices([_nic()])
    name = _nic().device_name
    assert extras.nodes[name] == tuple((p, p) for p in NODES)
    assert extras.gids == {name: (44,)}
    assert extras.warnings == ()
    assert _edits(host, groups=False).for_devices([_nic()]).gids == {}


def test_node_through_a_link_takes_the_links_own_mode(tmp_path: Path) -> None:
    """A node reached through root's link is given resolved; its group is read from the link
    itself, as access_gid reads it (a link's mode opens it to everyone: no group)."""
    host = _host(tmp_path)
    (host / "dev" / "infiniband" / "uverbs-link").symlink_to("uverbs0")
    extras = _edits(host).for_devices([_nic(("/dev/infiniband/uverbs-link",))])
    name = _nic().device_name
    assert extras.nodes[name] == (("/dev/infiniband/uverbs-link", "/dev/infiniband/uverbs0"),)
    assert extras.gids == {}


def test_refused_node_still_names_its_group(tmp_path: Path) -> None:
    """A node in a dir others can write is refused, with a warning; its group is still read."""
    host = _host(tmp_path)
    (host / "dev" / "infiniband").chmod(0o777)
    extras = _edits(host).for_devices([_nic()])
    name = _nic().device_name
    assert extras.nodes[name] == ()
    assert len(extras.warnings) == 2
    assert "writable by others" in extras.warnings[0]
    assert extras.gids == {name: (44,)}
