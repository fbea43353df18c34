"""Symbolic links planted in the plugin and CDI dirs are never followed (issue 13).

Anyone who can write into the kubelet's plugin dir (a container with a hostPath, a careless
script) could plant a link where numadra is about to write as root. Each test plants one and
checks that the error names the path and that nothing was written where the link points.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from driver.errors import JournalError
from tests.integration.claims._world import GPU0, World, claim, result

pytestmark = pytest.mark.fault

UID = "5f2c8a9e-0d1b-4c3a-9e8f-0000000000aa"


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("precious\n")
    return victim


def _snapshot(directory: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(directory)): p.read_bytes() for p in sorted(directory.rglob("*")) if p.is_file()
    }


def test_a_link_planted_as_the_metadata_dir_is_refused(world: World, tmp_path: Path) -> None:
    """dra-device-metadata is a link to another directory: the claim fails, naming the link."""
    victim = _victim(tmp_path)
    before = _snapshot(victim)
    world.plugin_dir.mkdir(parents=True)
    link = world.plugin_dir / "dra-device-metadata"
    link.symlink_to(victim)
    ref = world.getter.add(claim(UID, "train", "ml", results=[result("gpu", GPU0)]))
    got = world.driver().prepare_claims([ref])[UID]
    assert not got.ok
    assert f"claim ml/train (uid {UID}): cannot write {link}" in got.error
    assert "symbolic link" in got.error
    assert _snapshot(victim) == before
    assert sorted(p.name for p in victim.iterdir()) == ["keep"]
    assert link.is_symlink()  # left for the operator to look at
    assert world.cdi_files() == []  # the failed claim left no spec behind


def test_a_link_planted_as_a_metadata_file_is_replaced_never_written_through(
    world: World, tmp_path: Path
) -> None:
    """<uid>_<request>.json is a link to a file: the prepare puts its own file in the link's
    place (a rename replaces the link itself), and the file it pointed to keeps its content."""
    victim = _victim(tmp_path) / "keep"
    meta_dir = world.plugin_dir / "dra-device-metadata"
    meta_dir.mkdir(parents=True)
    planted = meta_dir / f"{UID}_gpu.json"
    planted.symlink_to(victim)
    ref = world.getter.add(claim(UID, "train", "ml", results=[result("gpu", GPU0)]))
    assert world.driver().prepare_claims([ref])[UID].ok
    assert victim.read_text() == "precious\n"
    assert not planted.is_symlink()
    assert '"uid":"' + UID + '"' in planted.read_text()


def test_a_link_planted_as_the_journal_is_refused(world: World, tmp_path: Path) -> None:
    """state/journal.log is a link: start and every call stop with an error naming it; the file it
    points to is neither read as the journal nor written."""
    victim = _victim(tmp_path) / "keep"
    state = world.plugin_dir / "state"
    state.mkdir(parents=True)
    (state / "journal.log").symlink_to(victim)
    drv = world.driver()
    with pytest.raises(JournalError, match=f"journal {state / 'journal.log'} is a symbolic link; refusing"):
        drv.reconcile()
    ref = world.getter.add(claim(UID, "train", "ml", results=[result("gpu", GPU0)]))
    with pytest.raises(JournalError, match="symbolic link"):
        drv.prepare_claims([ref])
    assert victim.read_text() == "precious\n"
    assert world.cdi_files() == []


def test_a_link_planted_as_the_state_dir_is_refused(world: World, tmp_path: Path) -> None:
    """state/ itself is a link: the journal is never created through it; the claim fails."""
    victim = _victim(tmp_path)
    world.plugin_dir.mkdir(parents=True)
    (world.plugin_dir / "state").symlink_to(victim)
    ref = world.getter.add(claim(UID, "train", "ml", results=[result("gpu", GPU0)]))
    got = world.driver().prepare_claims([ref])[UID]
    assert not got.ok
    assert "cannot write the journal" in got.error and "symbolic link" in got.error
    assert sorted(p.name for p in victim.iterdir()) == ["keep"]


def test_unprepare_never_deletes_through_a_link_planted_after_prepare(world: World, tmp_path: Path) -> None:
    """The metadata dir swapped for a link to a dir holding a file of the same name: unprepare
    fails naming the link and the victim's files stay; once the link is gone, it completes."""
    ref = world.getter.add(claim(UID, "train", "ml", results=[result("gpu", GPU0)]))
    drv = world.driver()
    assert drv.prepare_claims([ref])[UID].ok
    meta_dir = world.plugin_dir / "dra-device-metadata"
    victim = _victim(tmp_path)
    (victim / f"{UID}_gpu.json").write_text("not yours\n")
    before = _snapshot(victim)
    moved = tmp_path / "moved"
    meta_dir.rename(moved)
    meta_dir.symlink_to(victim)
    error = drv.unprepare_claims([ref])[UID]
    assert error.startswith(f"claim ml/train (uid {UID}): cannot remove {meta_dir}")
    assert "symbolic link" in error
    assert _snapshot(victim) == before
    meta_dir.unlink()
    assert drv.unprepare_claims([ref]) == {UID: ""}
    assert world.cdi_files() == []


def test_a_cdi_dir_that_does_not_exist_yet_is_made(world: World) -> None:
    """The walk starts at the CDI dir; a missing one is made on the first prepare, as before."""
    ref = world.getter.add(claim(UID, "train", "ml", results=[result("gpu", GPU0)]))
    drv = world.driver()
    world.cdi_dir.rmdir()
    assert drv.prepare_claims([ref])[UID].ok
    assert world.cdi_files() == [f"numadra.dev_claim_{UID}.json"]
