"""A corrupt journal stops the driver with one clear line; the documented recovery works."""

from __future__ import annotations

import shutil

import pytest

from driver.errors import JournalError
from tests.integration.claims._world import GPU0, World, claim, result


def test_corrupt_journal_fails_loudly_and_recovery_works(world: World) -> None:
    """reconcile/prepare/unprepare raise JournalError; after moving the file aside all works again."""
    ref = world.getter.add(claim("u-1", results=[result("gpu", GPU0)]))
    first = world.driver()
    assert first.prepare_claims([ref])["u-1"].ok
    assert first.unprepare_claims([ref]) == {"u-1": ""}
    path = world.plugin_dir / "state" / "journal.log"
    header, prepared, unprepared, _ = path.read_bytes().split(b"\n")
    damaged = prepared.replace(b'"namespace":"default"', b'"namespace":"defauLt"')  # a bad disk, mid-file
    assert damaged != prepared
    path.write_bytes(b"\n".join((header, damaged, unprepared, b"")))
    drv = world.driver()
    for call in (drv.reconcile, lambda: drv.prepare_claims([ref]), lambda: drv.unprepare_claims([ref])):
        with pytest.raises(JournalError) as info:
            call()
        message = str(info.value)
        assert "\n" not in message  # `numadra run` prints it as its one line and exits 1
        assert f"move {path} aside" in message
    shutil.move(path, path.with_name("journal.log.broken"))
    fresh = world.driver()
    assert fresh.reconcile() == 0
    assert fresh.prepare_claims([ref])["u-1"].ok  # the kubelet's re-prepare rebuilds the entry
    assert [e.uid for e in fresh.prepared_claims()] == ["u-1"]


def test_unknown_version_names_both_versions(world: World) -> None:
    """A journal from a newer numadra says which version it has and which one this one reads."""
    path = world.plugin_dir / "state" / "journal.log"
    path.parent.mkdir(parents=True)
    path.write_text('{"kind":"NumadraJournal","version":3}\n')
    with pytest.raises(JournalError, match=r"unknown schema version 3 \(this numadra reads version 2\)"):
        world.driver().reconcile()


def test_torn_last_call_reads_as_the_state_before_it(world: World) -> None:
    """A crash in the middle of a journal write (a torn last line) is the call never acknowledged."""
    one = world.getter.add(claim("u-1", results=[result("gpu", GPU0)]))
    drv = world.driver()
    assert drv.prepare_claims([one])["u-1"].ok
    path = world.plugin_dir / "state" / "journal.log"
    whole = path.read_bytes()
    assert drv.unprepare_claims([one]) == {"u-1": ""}
    with_unprepare = path.read_bytes()
    path.write_bytes(with_unprepare[: len(whole) + 5])  # the unprepare's record, torn
    fresh = world.driver()
    fresh.reconcile()
    assert [e.uid for e in fresh.prepared_claims()] == ["u-1"]  # still prepared, as acknowledged
    assert fresh.unprepare_claims([one]) == {"u-1": ""}  # the torn tail is cut, the call appended
    assert [e.uid for e in world.driver().prepared_claims()] == []
