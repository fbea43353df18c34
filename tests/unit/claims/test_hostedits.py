"""HostEdits.for_devices on a real host tree: each node's checked path and the group that opens it,
and, between two prepares, an attacker's (or root's) change to the host that the second one sees."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from driver.claims.config import EffectiveConfig
from driver.claims.hostedits import DeviceExtras, HostEdits
from driver.claims.selection import AllocatedDevice
from driver.inventory.model import DeviceKind, Nic, PciTopology
from driver.inventory.nodewatch import WatchedNodes

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


# -- between two prepares, the host changes: the second prepare must see it ------------------------


def _twice(host: Path, change: Callable[[], None], nodes: tuple[str, ...] = NODES) -> DeviceExtras:
    """One HostEdits, a prepare, ``change``, a second prepare: the second prepare's extras."""
    edits = _edits(host)
    first = edits.for_devices([_nic(nodes)])
    assert first.warnings == ()
    change()
    return edits.for_devices([_nic(nodes)])


def test_a_node_chowned_to_a_user_is_refused_next_time(tmp_path: Path) -> None:
    """chown of a node to a user between prepares: the next prepare refuses it."""
    host = _host(tmp_path)
    again = _twice(host, lambda: os.chown(host / "dev/infiniband/uverbs0", 1000, 44))
    assert [p for p, _ in again.nodes[_nic().device_name]] == ["/dev/infiniband/rdma_cm"]
    assert "owned by uid 1000" in again.warnings[0]


def test_a_node_chgrped_gives_its_new_group_next_time(tmp_path: Path) -> None:
    """chgrp of both nodes between prepares: the next prepare hands out the new group."""
    host = _host(tmp_path)

    def chgrp() -> None:
        for path in NODES:
            os.chown(host / path.lstrip("/"), 0, 45)

    assert _twice(host, chgrp).gids == {_nic().device_name: (45,)}


def test_a_parent_opened_to_others_is_refused_next_time(tmp_path: Path) -> None:
    """chmod 0777 of the nodes' directory between prepares: both nodes are refused."""
    host = _host(tmp_path)
    again = _twice(host, lambda: (host / "dev/infiniband").chmod(0o777))
    assert again.nodes[_nic().device_name] == ()
    assert all("writable by others" in w for w in again.warnings)


def test_a_node_replaced_by_a_users_link_is_refused_next_time(tmp_path: Path) -> None:
    """The node renamed away and a user's link planted in its place: refused next time."""
    host = _host(tmp_path)
    node = host / "dev/infiniband/uverbs0"

    def plant() -> None:
        node.rename(node.with_name("old"))
        node.symlink_to("/etc/shadow")
        os.lchown(node, 1000, 1000)

    again = _twice(host, plant)
    assert [p for p, _ in again.nodes[_nic().device_name]] == ["/dev/infiniband/rdma_cm"]
    assert "owned by uid 1000" in again.warnings[0]


def test_a_node_replaced_by_roots_link_resolves_anew(tmp_path: Path) -> None:
    """The node replaced by root's link to another node: the next prepare gives the new target."""
    host = _host(tmp_path)
    node = host / "dev/infiniband/uverbs0"

    def relink() -> None:
        node.unlink()
        node.symlink_to("rdma_cm")

    again = _twice(host, relink)
    assert dict(again.nodes[_nic().device_name])["/dev/infiniband/uverbs0"] == "/dev/infiniband/rdma_cm"


def test_a_parent_replaced_by_a_link_to_a_users_dir_is_refused_next_time(tmp_path: Path) -> None:
    """The nodes' directory moved away and root's link to a user's directory put in its place."""
    host = _host(tmp_path)
    evil = host / "evil"

    def swap() -> None:
        evil.mkdir()
        for path in NODES:
            (evil / Path(path).name).write_text("")
        os.chown(evil, 1000, 1000)
        (host / "dev/infiniband").rename(host / "dev/ib-old")
        (host / "dev/infiniband").symlink_to("/evil")

    again = _twice(host, swap)
    assert again.nodes[_nic().device_name] == ()
    assert all("/evil is owned by uid 1000" in w for w in again.warnings)


def test_the_host_root_retargeted_is_seen_next_time(tmp_path: Path) -> None:
    """The host root is a link; pointed at another tree (a user's) between prepares: refused."""
    real = _host(tmp_path / "a")
    other = _host(tmp_path / "b")
    os.chown(other, 1000, 1000)
    link = tmp_path / "root-link"
    link.symlink_to(real)

    def retarget() -> None:
        (tmp_path / "next").symlink_to(other)
        (tmp_path / "next").rename(link)

    again = _twice(link, retarget)
    assert again.nodes[_nic().device_name] == ()
    assert all("/ is owned by uid 1000" in w for w in again.warnings)


def test_a_mount_over_a_parent_is_seen_next_time(tmp_path: Path) -> None:
    """A world-writable tmpfs mounted over the nodes' directory (no inotify event): refused."""
    host = _host(tmp_path)
    target = host / "dev/infiniband"
    mounted: list[bool] = []

    def mount() -> None:
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", "mode=0777", "numadra-test", str(target)],
            capture_output=True,
            check=False,
        )
        mounted.append(done.returncode == 0)
        if mounted[0]:
            for path in NODES:
                (host / path.lstrip("/")).write_text("")

    try:
        again = _twice(host, mount)
        if not mounted[0]:
            pytest.skip("no permission to mount here")
        assert again.nodes[_nic().device_name] == ()
        assert all("writable by others" in w for w in again.warnings)
    finally:
        if mounted and mounted[0]:
            subprocess.run(["umount", str(target)], check=False)


def test_an_unchanged_host_is_not_walked_again(tmp_path: Path) -> None:
    """With nothing changed, the nodes are walked when first seen and not on later checks; a
    change (a chmod of one node) makes the next check walk again and see it."""
    host = _host(tmp_path)
    watched = WatchedNodes(str(host))
    first = watched.check(NODES)
    walks = watched.walks
    assert walks > 0
    assert watched.check(NODES) == first
    assert watched.check(NODES) == first
    assert watched.walks == walks
    (host / "dev/infiniband/rdma_cm").chmod(0o600)  # no group may open it now
    assert watched.check(NODES) == [first[0], ("/dev/infiniband/rdma_cm", None)]
    assert watched.walks > walks


def test_a_node_chowned_through_a_hard_link_is_refused_next_time(tmp_path: Path) -> None:
    """chown through another name of the node (a hard link in a dir nobody watches): the node's
    own watch reports it, where its directory's does not."""
    host = _host(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    os.link(host / "dev/infiniband/uverbs0", elsewhere / "alias")
    again = _twice(host, lambda: os.chown(elsewhere / "alias", 1000, 44))
    assert [p for p, _ in again.nodes[_nic().device_name]] == ["/dev/infiniband/rdma_cm"]
    assert "owned by uid 1000" in again.warnings[0]
