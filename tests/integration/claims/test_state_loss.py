"""State that cannot forget: a damaged, emptied, deleted or replaced journal never frees a GPU.

Each test plays one accident on real files, then asks for a second claim on the GPU the first
claim still holds (its CDI spec is on disk, its pod runs). Before the fix every one of them
prepared that second claim: the journal forgot the first one without a word.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from driver.errors import JournalError
from driver.plugin import ClaimRef
from driver.state.journal import read_recoveries
from driver.state.wal import JournalLog, Put
from tests.integration.claims._world import GPU0, ServedDriver, World, claim, cpu_result, result

pytestmark = pytest.mark.fault

FIRST = "5f2c8a9e-0d1b-4c3a-9e8f-00000000000a"
SECOND = "5f2c8a9e-0d1b-4c3a-9e8f-00000000000b"


def _journal(world: World) -> Path:
    return world.plugin_dir / "state" / "journal.log"


def _replace_with_empty_journal(world: World) -> bytes:
    """Put another valid, empty journal (the same header, no records) in the journal's place, as
    a new file renamed over it; returns that header."""
    path = _journal(world)
    header = path.read_bytes().split(b"\n", 1)[0] + b"\n"
    tmp = path.with_name("planted")
    tmp.write_bytes(header)
    tmp.replace(path)
    return header


def _first_prepared(world: World, **extra: Any) -> tuple[ServedDriver, ClaimRef, ClaimRef]:
    """Claim 1 (GPU0 + 2 exclusive CPUs) prepared; claim 2 (GPU0 too) known to the apiserver."""
    first = world.getter.add(
        claim(FIRST, "train", "ml", results=[result("gpu", GPU0), cpu_result("cpu", 2)], **extra)
    )
    second = world.getter.add(claim(SECOND, "other", "ml", results=[result("gpu", GPU0)]))
    drv = world.driver()
    assert drv.reconcile() == 0
    assert drv.prepare_claims([first])[FIRST].ok
    assert (world.cdi_dir / f"numadra.dev_claim_{FIRST}.json").exists()
    return drv, first, second


def _assert_second_refused(drv: ServedDriver, second: ClaimRef) -> None:
    got = drv.prepare_claims([second])[SECOND]
    assert not got.ok
    assert f"device {GPU0!r} is already prepared for claim ml/train (uid {FIRST})" in got.error


def _assert_recovered(world: World, drv: ServedDriver, reason: str) -> None:
    """The first claim is back in the journal, on disk, counted and recorded with its devices."""
    entries = {e.uid: e for e in world.driver().prepared_claims()}  # a fresh reader of the file
    assert FIRST in entries
    rebuilt = entries[FIRST]
    assert (rebuilt.namespace, rebuilt.name) == ("ml", "train")
    assert {d.device_name for d in rebuilt.devices} == {GPU0, "cpu-numa0"}
    assert rebuilt.pinning is not None and len(rebuilt.pinning.cpus) == 2
    assert drv.state_recoveries == {reason: 1}
    (record,) = read_recoveries(world.plugin_dir / "state")
    assert record["uid"] == FIRST and record["reason"] == reason
    assert GPU0 in record["devices"]


def test_complete_last_record_with_a_bad_checksum_stops_the_driver(world: World) -> None:
    """A flipped bit in the last, complete record is corruption: a clear error naming the file
    and the line, at start and on every call, so the second claim is never prepared."""
    drv, _, second = _first_prepared(world)
    path = _journal(world)
    data = bytearray(path.read_bytes())
    data[-10] ^= 1
    path.write_bytes(bytes(data))
    fresh = world.driver()
    with pytest.raises(
        JournalError, match=r"is corrupt \(checksum mismatch in the complete record on line 2"
    ) as info:
        fresh.reconcile()
    assert str(path) in str(info.value)
    with pytest.raises(JournalError):
        fresh.prepare_claims([second])
    _assert_second_refused(drv, second)  # the running driver still holds it in memory
    assert not (world.cdi_dir / f"numadra.dev_claim_{SECOND}.json").exists()


def test_journal_emptied_at_start_is_rebuilt_from_the_cdi_spec(world: World) -> None:
    """A journal truncated to zero bytes while numadra was down: the claim is rebuilt."""
    _, first, second = _first_prepared(world)
    _journal(world).write_bytes(b"")
    drv = world.driver()
    drv.reconcile()
    _assert_second_refused(drv, second)
    _assert_recovered(world, drv, "journal_empty")
    assert drv.prepare_claims([first])[FIRST].ok  # the kubelet's repeat is answered as before


def test_journal_deleted_at_start_is_rebuilt_and_its_cpus_stay_taken(world: World) -> None:
    """A deleted journal: the GPU and the two CPUs of the first claim are not handed out again."""
    _, _, second = _first_prepared(world)
    before = {e.uid: e for e in world.driver().prepared_claims()}[FIRST]
    _journal(world).unlink()
    drv = world.driver()
    drv.reconcile()
    _assert_second_refused(drv, second)
    _assert_recovered(world, drv, "journal_missing")
    after = {e.uid: e for e in drv.prepared_claims()}[FIRST]
    assert after.pinning == before.pinning
    assert after.devices == before.devices  # the same CDI IDs and request names for a repeat
    third = world.getter.add(
        claim("5f2c8a9e-0d1b-4c3a-9e8f-00000000000c", "cpus", "ml", results=[cpu_result("cpu", 6)])
    )
    # NUMA node 0 has 8 CPUs, 2 held by the first claim: 6 fit, none of them the first claim's
    got = drv.prepare_claims([third])[third.uid]
    assert got.ok, got.error
    third_entry = {e.uid: e for e in drv.prepared_claims()}[third.uid]
    assert third_entry.pinning is not None and before.pinning is not None
    assert not third_entry.pinning.cpus & before.pinning.cpus


def test_journal_deleted_while_running_is_detected_before_the_next_write(world: World) -> None:
    """The same driver object: its next call sees the file gone and rebuilds before it plans."""
    drv, first, second = _first_prepared(world)
    _journal(world).unlink()
    _assert_second_refused(drv, second)
    _assert_recovered(world, drv, "journal_deleted")
    # the rebuilt entry is released as usual when the kubelet unprepares the first claim
    assert drv.unprepare_claims([first]) == {FIRST: ""}
    assert drv.prepare_claims([second])[SECOND].ok


def test_journal_replaced_while_running_by_an_empty_one(world: World) -> None:
    """Another (valid, empty) journal put in place: detected by its identity, claim rebuilt."""
    drv, _, second = _first_prepared(world)
    _replace_with_empty_journal(world)
    _assert_second_refused(drv, second)
    _assert_recovered(world, drv, "journal_replaced")


def test_a_replacement_seen_first_by_a_reader_is_rebuilt_by_the_next_call(world: World) -> None:
    """The replaced journal is first read by a caller without the lock (the prepared-claims index,
    which never writes). The next prepare finds nothing new in the file since that read, and
    must still rebuild the lost claim before it plans: an unchanged log is no reason to skip a
    cross-check that is due."""
    drv, _, second = _first_prepared(world)
    path, header = _journal(world), _replace_with_empty_journal(world)
    assert drv.prepared_claims() == []  # read, found the loss, wrote nothing (no lock)
    assert path.read_bytes() == header
    _assert_second_refused(drv, second)
    _assert_recovered(world, drv, "journal_replaced")


def test_metadata_alone_still_holds_the_devices(world: World) -> None:
    """Journal and CDI dir both gone (a reboot empties /var/run/cdi): the metadata stream still
    names the claim and its devices, which stay held until the claim is unprepared."""
    _, first, second = _first_prepared(world)
    _journal(world).unlink()
    for spec in world.cdi_dir.iterdir():
        spec.unlink()
    drv = world.driver()
    drv.reconcile()
    _assert_second_refused(drv, second)
    assert drv.state_recoveries == {"journal_missing": 1}
    # the kubelet's repeat prepare renders the claim anew: the container gets its devices again
    again = drv.prepare_claims([first])[FIRST]
    assert again.ok, again.error
    assert f"numadra.dev/claim={FIRST}-{GPU0}" in {i for d in again.devices for i in d.cdi_device_ids}
    assert (world.cdi_dir / f"numadra.dev_claim_{FIRST}.json").exists()
    _assert_second_refused(drv, second)
    assert drv.unprepare_claims([first]) == {FIRST: ""}
    assert not list((world.plugin_dir / "dra-device-metadata").glob(f"{FIRST}_*"))
    assert drv.prepare_claims([second])[SECOND].ok


def test_an_unreadable_spec_of_a_lost_claim_stops_the_driver(world: World) -> None:
    """Evidence that cannot be read means devices unknown: refuse, naming claim and file."""
    _, _, _ = _first_prepared(world)
    _journal(world).unlink()
    spec = world.cdi_dir / f"numadra.dev_claim_{FIRST}.json"
    spec.write_text("{not json")
    with pytest.raises(JournalError, match=f"state lost: claim {FIRST} .* {spec}"):
        world.driver().reconcile()


def test_an_intact_journal_costs_no_scan(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    """The cross-check runs at start and after a reset only: an unchanged journal reads nothing
    else (the per-call cost stays one stat of the journal)."""
    from driver.state import evidence

    drv, first, _ = _first_prepared(world)
    calls: list[object] = []
    real = evidence.Evidence.unjournaled

    def counting(self: evidence.Evidence, known: Any) -> Any:
        calls.append(known)
        return real(self, known)

    monkeypatch.setattr(evidence.Evidence, "unjournaled", counting)
    for _ in range(3):
        assert drv.prepare_claims([first])[FIRST].ok
    assert calls == []
    _journal(world).unlink()
    drv.prepare_claims([first])
    assert len(calls) == 1


def test_a_peer_compaction_is_not_a_loss(world: World) -> None:
    """A journal replaced by another process's compaction holds every claim: nothing rebuilt."""
    drv, _, _ = _first_prepared(world)
    # the other process: a log without a minimum size, appending the live state again until its
    # compaction replaces the file (a rename: a new inode holding every claim)
    peer = JournalLog(_journal(world), compact_min=0)
    live: dict[str, str] = {}
    for op in peer.read().ops:
        if isinstance(op, Put):
            live[op.uid] = op.text
        else:
            live.pop(op.uid, None)
    uid, text = next(iter(live.items()))
    inode = _journal(world).stat().st_ino
    for _ in range(50):
        peer.append({uid: text}, (), live)
        if _journal(world).stat().st_ino != inode:
            break
    assert _journal(world).stat().st_ino != inode
    peer.close()
    world.getter.add(claim("5f2c8a9e-0d1b-4c3a-9e8f-00000000000d", "x", "ml", results=[cpu_result("cpu", 1)]))
    assert drv.prepare_claims([ClaimRef("ml", "x", "5f2c8a9e-0d1b-4c3a-9e8f-00000000000d")])[
        "5f2c8a9e-0d1b-4c3a-9e8f-00000000000d"
    ].ok
    assert drv.state_recoveries == {}
    assert read_recoveries(world.plugin_dir / "state") == []
    assert json.loads(json.dumps(drv.state_recoveries)) == {}


def test_numadra_state_shows_lost_and_rebuilt_claims(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    """`numadra state` names the claim the journal lost, before and after the driver rebuilt it."""
    from driver.cli import main

    _first_prepared(world)
    _journal(world).unlink()
    argv = [
        "state",
        "--plugin-dir",
        str(world.plugin_dir),
        "--cdi-dir",
        str(world.cdi_dir),
        "--node-name",
        "node-a",
    ]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "STATE LOST: 1 prepared claim(s) have files on disk but no journal entry" in out
    assert f"uid {FIRST}  devices {GPU0},cpu-numa0" in out
    assert not _journal(world).exists()  # the CLI never writes
    world.driver().reconcile()
    capsys.readouterr()  # the driver's log lines
    assert main([*argv, "-o", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["unjournaled"] == []
    assert [r["uid"] for r in doc["recoveries"]] == [FIRST]
    assert doc["recoveries"][0]["reason"] == "journal_missing"
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert f"ml/train  uid {FIRST}  (rebuilt from evidence: journal_missing)" in out
    assert f"uid {FIRST}  ml/train  reason journal_missing  devices {GPU0},cpu-numa0" in out


def test_recoveries_are_counted_in_the_metric(world: World) -> None:
    """numadra_state_recoveries_total{reason} follows the driver's running totals (the exact name
    the Grafana dashboard uses)."""
    from driver.observability import Metrics

    drv, _, second = _first_prepared(world)
    metrics = Metrics("numadra.dev", "node-a")
    metrics.set_state_recoveries(drv.state_recoveries)
    assert metrics.sample("numadra_state_recoveries_total", {"reason": "journal_deleted"}) == 0
    _journal(world).unlink()
    _assert_second_refused(drv, second)
    metrics.set_state_recoveries(drv.state_recoveries)
    metrics.set_state_recoveries(drv.state_recoveries)  # the same totals again add nothing
    assert metrics.sample("numadra_state_recoveries_total", {"reason": "journal_deleted"}) == 1
    assert metrics.sample("numadra_state_recoveries_total", {"reason": "journal_missing"}) == 0


def test_a_journal_deleted_with_nothing_to_rebuild_is_still_logged(
    world: World, capsys: pytest.CaptureFixture[str]
) -> None:
    """No claim had files (all unprepared), yet the deletion is an error in the log, not silence."""
    drv, first, _ = _first_prepared(world)
    assert drv.unprepare_claims([first]) == {FIRST: ""}
    capsys.readouterr()
    _journal(world).unlink()
    assert drv.prepare_claims([first])[FIRST].ok
    out = capsys.readouterr().out
    assert "journal was damaged under numadra" in out and "what=deleted" in out and "rebuilt=0" in out
    assert drv.state_recoveries == {}
