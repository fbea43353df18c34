"""A corrupt journal stops the driver with one clear line; the documented recovery works."""

from __future__ import annotations

import shutil

import pytest

from driver.errors import JournalError
from tests.integration.claims._world import GPU0, World, claim, result


def test_corrupt_journal_fails_loudly_and_recovery_works(world: World) -> None:
    """reconcile/prepare/unprepare raise JournalError; after moving the file aside all works again."""
    ref = world.getter.add(claim("u-1", results=[result("gpu", GPU0)]))
    assert world.driver().prepare_claims([ref])["u-1"].ok
    path = world.plugin_dir / "state" / "journal.json"
    path.write_text(path.read_text()[:-20])  # torn by a bad disk
    drv = world.driver()
    for call in (drv.reconcile, lambda: drv.prepare_claims([ref]), lambda: drv.unprepare_claims([ref])):
        with pytest.raises(JournalError) as info:
            call()
        message = str(info.value)
        assert "\n" not in message  # `numadra run` prints it as its one line and exits 1
        assert f"move {path} aside" in message
    shutil.move(path, path.with_name("journal.json.broken"))
    fresh = world.driver()
    assert fresh.reconcile() == 0
    assert fresh.prepare_claims([ref])["u-1"].ok  # the kubelet's re-prepare rebuilds the entry
    assert [e.uid for e in fresh.prepared_claims()] == ["u-1"]


def test_unknown_version_names_both_versions(world: World) -> None:
    """A journal from a newer numadra says which version it has and which one this one reads."""
    import json

    path = world.plugin_dir / "state" / "journal.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"kind": "NumadraJournal", "version": 2, "checksum": "", "body": {}}))
    with pytest.raises(JournalError, match=r"unknown schema version 2 \(this numadra reads version 1\)"):
        world.driver().reconcile()
