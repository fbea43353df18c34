"""Unit tests of the journal: round trip, v1 adoption, corruption, unknown versions, cross-process reloads."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driver.errors import JournalError
from driver.pinning.types import ClaimPinning, CpuAssignment, CpuMode
from driver.plugin import PreparedDevice
from driver.state import Journal, JournalEntry, StoredFile, journal_path
from driver.state.journal import _canonical, _entry_text
from driver.state.wal import LEGACY_MARKER, JournalLog


def _entry(uid: str = "u1", cpus: frozenset[int] = frozenset({2, 3})) -> JournalEntry:
    return JournalEntry(
        namespace="ns",
        name="claim",
        uid=uid,
        devices=(
            PreparedDevice(("gpu",), "node1", "gpu-0000-3b-00-0", (f"numadra.dev/device={uid}-gpu",)),
            PreparedDevice(("cpu",), "node1", "cpu-numa0", (f"numadra.dev/device={uid}-cpu",), "share-1"),
        ),
        cdi_specs=(StoredFile("/run/cdi/a.json", '{"x": 1}\n'),),
        metadata_files=(StoredFile("/p/m.json", "{}\n{}\n"),),
        pinning=ClaimPinning(uid, (CpuAssignment("cpu", CpuMode.SHARED, cpus, frozenset({0})),)),
        directories=("/p/ns_claim",),
    )


def test_missing_file_is_empty(tmp_path: Path) -> None:
    """No journal file means nothing is prepared."""
    journal = Journal(journal_path(tmp_path))
    journal.load()
    assert len(journal) == 0
    assert journal.get("u1") is None


def test_round_trip(tmp_path: Path) -> None:
    """Entries survive save and load in a fresh Journal object, pinning included."""
    path = journal_path(tmp_path)
    journal = Journal(path)
    journal.put(_entry("u1"))
    journal.put(_entry("u2", frozenset({4})))
    journal.save()
    assert path == tmp_path / "state" / "journal.log"
    assert path.stat().st_mode & 0o777 == 0o600
    other = Journal(path)
    other.load()
    assert other.get("u1") == _entry("u1")
    assert [e.uid for e in other.entries()] == ["u1", "u2"]
    assert other.taken_cpus() == frozenset({2, 3, 4})
    assert other.taken_cpus(except_uid="u1") == frozenset({4})


def test_entry_without_pinning_round_trips(tmp_path: Path) -> None:
    """An entry with no pinning loads back with pinning None."""
    journal = Journal(journal_path(tmp_path))
    plain = JournalEntry("ns", "c", "u3", ())
    journal.put(plain)
    journal.save()
    fresh = Journal(journal.path)
    fresh.load()
    assert fresh.get("u3") == plain
    assert fresh.taken_cpus() == frozenset()


def test_remove(tmp_path: Path) -> None:
    """Removing an entry persists after save; removing an unknown one says False."""
    journal = Journal(journal_path(tmp_path))
    journal.put(_entry("u1"))
    journal.save()
    assert journal.remove("u1") is True
    assert journal.remove("u1") is False
    journal.save()
    fresh = Journal(journal.path)
    fresh.load()
    assert "u1" not in fresh


def test_reload_sees_other_writer(tmp_path: Path) -> None:
    """A second process's write is seen on the next load (rolling update shares the file)."""
    a = Journal(journal_path(tmp_path))
    b = Journal(journal_path(tmp_path))
    a.load()
    b.load()
    a.put(_entry("u1"))
    a.save()
    b.load()
    assert b.get("u1") == _entry("u1")
    b.remove("u1")
    b.save()
    a.load()
    assert a.get("u1") is None


def _v1_document(*entries: JournalEntry) -> str:
    """A journal file as version 1 of numadra wrote it."""
    body = {"claims": {e.uid: e.to_json() for e in entries}}
    canon = _canonical(body)
    digest = hashlib.sha256(canon.encode()).hexdigest()
    return f'{{"kind":"NumadraJournal","version":1,"checksum":"sha256:{digest}","body":{canon}}}\n'


def _write_saved(tmp_path: Path) -> Path:
    """A version 1 journal.json (the one file format a person can damage by hand)."""
    legacy = journal_path(tmp_path).with_name("journal.json")
    legacy.parent.mkdir(parents=True)
    legacy.write_text(_v1_document(_entry("u1")))
    return legacy


def _doc(path: Path) -> dict[str, object]:
    doc = json.loads(path.read_text())
    assert isinstance(doc, dict)
    return doc


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        pytest.param(lambda p: p.write_text('{"kind": "NumadraJournal", "vers'), "not JSON", id="truncated"),
        pytest.param(lambda p: p.write_bytes(b"\xff\xfe\x00"), "not JSON", id="binary-garbage"),
        pytest.param(lambda p: p.write_text("[]"), "not a NumadraJournal", id="not-an-object"),
        pytest.param(
            lambda p: p.write_text(p.read_text().replace('"ns"', '"nz"')), "checksum", id="edited-body"
        ),
        pytest.param(
            lambda p: p.write_text(json.dumps({**_doc(p), "version": 99})),
            "unknown schema version 99",
            id="future-version",
        ),
        pytest.param(
            lambda p: p.write_text(json.dumps({**_doc(p), "version": "1"})),
            "unknown schema version '1'",
            id="version-as-string",
        ),
        pytest.param(
            lambda p: p.write_text(json.dumps({k: v for k, v in _doc(p).items() if k != "body"})),
            "no body",
            id="no-body",
        ),
    ],
)
def test_damaged_journal_raises_with_recovery(tmp_path: Path, damage: object, message: str) -> None:
    """A damaged or unknown-version v1 journal raises JournalError naming the file and the recovery."""
    path = _write_saved(tmp_path)
    assert callable(damage)
    damage(path)
    journal = Journal(journal_path(tmp_path))
    with pytest.raises(JournalError, match=message) as info:
        journal.load()
    assert not journal.path.exists()  # nothing adopted from a damaged file
    text = str(info.value)
    assert str(path) in text
    assert "move" in text
    assert "aside" in text
    assert "\n" not in text


def test_malformed_entry_with_valid_checksum_raises(tmp_path: Path) -> None:
    """An entry missing a field is reported even when the checksum matches (a buggy writer)."""
    body = {"claims": {"u1": {"uid": "u1"}}}
    canon = json.dumps(body, sort_keys=True, separators=(",", ":"))
    path = journal_path(tmp_path).with_name("journal.json")
    path.parent.mkdir(parents=True)
    path.write_text(
        json.dumps(
            {
                "kind": "NumadraJournal",
                "version": 1,
                "checksum": "sha256:" + hashlib.sha256(canon.encode()).hexdigest(),
                "body": body,
            }
        )
    )
    with pytest.raises(JournalError, match="entry 'u1'"):
        Journal(journal_path(tmp_path)).load()


def test_malformed_entry_in_the_log_raises(tmp_path: Path) -> None:
    """The same for an entry of the version 2 log: checksummed but not an entry."""
    path = journal_path(tmp_path)
    JournalLog(path).append({"u1": '{"uid":"u1"}'}, (), {"u1": '{"uid":"u1"}'})
    with pytest.raises(JournalError, match=f"journal {path} is corrupt \\(entry 'u1'"):
        Journal(path).load()


def test_v1_journal_is_adopted_once_then_marked(tmp_path: Path) -> None:
    """A version 1 journal.json: its entries load, the log holds them, journal.json becomes the marker."""
    legacy = journal_path(tmp_path).with_name("journal.json")
    legacy.parent.mkdir(parents=True)
    legacy.write_text(_v1_document(_entry("u1"), _entry("u2", frozenset({4}))))
    journal = Journal(journal_path(tmp_path))
    journal.load()
    assert list(journal.entries()) == [_entry("u1"), _entry("u2", frozenset({4}))]
    assert journal.taken_cpus() == frozenset({2, 3, 4})
    assert legacy.read_bytes() == LEGACY_MARKER
    fresh = Journal(journal_path(tmp_path))
    fresh.load()
    assert list(fresh.entries()) == [_entry("u1"), _entry("u2", frozenset({4}))]
    fresh.remove("u1")
    fresh.save()
    journal.load()
    assert [e.uid for e in journal.entries()] == ["u2"]


def test_read_only_reads_v1_without_writing(tmp_path: Path) -> None:
    """numadra state on a version 1 journal: the entries are shown, no file is written or changed."""
    legacy = _write_saved(tmp_path)
    before = legacy.read_bytes()
    journal = Journal(journal_path(tmp_path), read_only=True)
    journal.load()
    assert list(journal.entries()) == [_entry("u1")]
    assert legacy.read_bytes() == before
    assert not journal.path.exists()
    with pytest.raises(JournalError, match="read-only"):
        journal.save()


def test_marker_without_log_is_a_clear_error(tmp_path: Path) -> None:
    """journal.json says the journal moved, but journal.log is gone: recovery, not an empty journal."""
    legacy = journal_path(tmp_path).with_name("journal.json")
    legacy.parent.mkdir(parents=True)
    legacy.write_bytes(LEGACY_MARKER)
    with pytest.raises(JournalError, match=r"moved to journal\.log, which is missing") as info:
        Journal(journal_path(tmp_path)).load()
    assert "aside" in str(info.value)


def test_an_old_driver_refuses_the_marker(tmp_path: Path) -> None:
    """What a version 1 driver checks (kind, then version 1) fails on the marker: it cannot go on unaware."""
    doc = json.loads(LEGACY_MARKER)
    assert doc["kind"] == "NumadraJournal"
    assert doc["version"] != 1


_text = st.text(max_size=10)
_devices = st.builds(
    PreparedDevice,
    st.lists(_text, max_size=2).map(tuple),
    _text,
    _text,
    st.lists(_text, max_size=3).map(tuple),
    st.none() | _text,
)
_files = st.builds(StoredFile, _text, st.text(max_size=40), st.integers(0, 0o7777))
_assignments = st.builds(
    CpuAssignment,
    _text,
    st.sampled_from(list(CpuMode)),
    st.frozensets(st.integers(0, 300), max_size=6),
    st.frozensets(st.integers(0, 8), max_size=3),
)
_entries = st.builds(
    JournalEntry,
    namespace=_text,
    name=_text,
    uid=_text,
    devices=st.lists(_devices, max_size=3).map(tuple),
    cdi_specs=st.lists(_files, max_size=3).map(tuple),
    metadata_files=st.lists(_files, max_size=2).map(tuple),
    pinning=st.none() | st.builds(ClaimPinning, _text, st.lists(_assignments, max_size=3).map(tuple)),
    directories=st.lists(_text, max_size=2).map(tuple),
    admin_devices=st.lists(_text, max_size=2).map(tuple),
)


@settings(max_examples=150, deadline=None)
@given(entry=_entries)
def test_entry_text_is_the_canonical_json(entry: JournalEntry) -> None:
    """The direct entry encoder writes exactly the sorted, compact json.dumps of to_json()."""
    assert _entry_text(entry) == _canonical(entry.to_json())


def _nic(uid: str, device: str = "nic-1", share: str | None = None) -> JournalEntry:
    dev = PreparedDevice(("nic",), "node1", device, (f"numadra.dev/claim={uid}-{device}",), share)
    return JournalEntry("ns", f"c-{uid}", uid, (dev,))


def test_holder_follows_put_replace_and_remove(tmp_path: Path) -> None:
    """holder() names the entry holding an unshared device, and forgets it when it goes or changes."""
    journal = Journal(journal_path(tmp_path))
    assert journal.holder("node1", "nic-1") is None
    journal.put(_nic("u1"))
    assert journal.holder("node1", "nic-1") == _nic("u1")
    assert journal.holder("node1", "nic-1", except_uid="u1") is None
    assert journal.holder("node2", "nic-1") is None  # another pool
    journal.put(_nic("u2", share="s-1"))  # a shared use is no holder
    assert journal.holder("node1", "nic-1", except_uid="u1") is None
    journal.put(_nic("u1", "nic-2"))  # replaced: now holds another device
    assert journal.holder("node1", "nic-1") is None
    assert journal.holder("node1", "nic-2") == _nic("u1", "nic-2")
    journal.remove("u1")
    assert journal.holder("node1", "nic-2") is None


def test_holder_with_two_holders_is_the_first_in_journal_order(tmp_path: Path) -> None:
    """A device journaled twice (a damaged history) is reported for the first entry, then the other."""
    journal = Journal(journal_path(tmp_path))
    journal.put(_nic("u1"))
    journal.put(_nic("u2"))
    assert journal.holder("node1", "nic-1") == _nic("u1")
    assert journal.holder("node1", "nic-1", except_uid="u1") == _nic("u2")
    assert journal.holder("node1", "nic-1", except_uid="u2") == _nic("u1")


def test_taken_cpus_follow_put_replace_and_remove(tmp_path: Path) -> None:
    """taken_cpus() is every other claim's CPUs after each change, overlaps counted per claim."""
    journal = Journal(journal_path(tmp_path))
    journal.put(_entry("u1", frozenset({1, 2})))
    journal.put(_entry("u2", frozenset({2, 3})))  # overlapping CPU 2 (never planned, but exact)
    assert journal.taken_cpus() == frozenset({1, 2, 3})
    assert journal.taken_cpus(except_uid="u1") == frozenset({2, 3})
    assert journal.taken_cpus(except_uid="u2") == frozenset({1, 2})
    journal.put(_entry("u1", frozenset({5})))
    assert journal.taken_cpus() == frozenset({2, 3, 5})
    journal.remove("u2")
    assert journal.taken_cpus() == frozenset({5})
    assert journal.taken_cpus(except_uid="u1") == frozenset()


def test_indexes_follow_a_reload_of_another_writers_file(tmp_path: Path) -> None:
    """After another process rewrote the file, load() answers holder/taken_cpus from the new content."""
    a = Journal(journal_path(tmp_path))
    b = Journal(journal_path(tmp_path))
    a.put(_nic("u1"))
    a.put(_entry("u2", frozenset({7})))
    a.save()
    b.load()
    assert b.holder("node1", "nic-1") == _nic("u1")
    assert b.taken_cpus() == frozenset({7})
    b.remove("u1")
    b.remove("u2")
    b.put(_entry("u3", frozenset({9})))
    b.save()
    a.load()
    assert a.holder("node1", "nic-1") is None
    assert a.taken_cpus() == frozenset({9})
    journal_path(tmp_path).unlink()
    a.load()
    assert a.taken_cpus() == frozenset()
    assert len(a) == 0


def test_save_appends_one_record_of_canonical_entries(tmp_path: Path) -> None:
    """The log is the v2 header, then per save one line: sha256 of the payload, the changed entries."""
    journal = Journal(journal_path(tmp_path))
    journal.put(_entry("u2", frozenset({4})))
    journal.put(_entry("u1"))
    journal.put(_nic("u\u00e9"))
    journal.save()
    journal.remove("u2")
    journal.save()
    header, first, second, end = journal.path.read_text().split("\n")
    assert json.loads(header) == {"kind": "NumadraJournal", "version": 2}
    assert end == ""
    records = []
    for line in (first, second):
        digest, payload = line.split(" ", 1)
        assert digest == hashlib.sha256(payload.encode()).hexdigest()
        records.append(json.loads(payload))
    puts = {op["put"]: op["entry"] for op in records[0]["ops"]}
    assert puts == {e.uid: e.to_json() for e in (_entry("u1"), _entry("u2", frozenset({4})), _nic("u\u00e9"))}
    assert _canonical(puts["u1"]) in first  # entries are stored as canonical JSON
    assert records[1] == {"ops": [{"remove": "u2"}]}


def test_named_finds_other_claims_of_the_same_name_across_save_and_load(tmp_path: Path) -> None:
    """``named`` answers "is another UID of this namespace/name prepared?" from an index."""
    journal = Journal(journal_path(tmp_path))
    journal.put(_entry("u1"))
    assert journal.named("ns", "claim") is not None
    assert journal.named("ns", "claim", except_uid="u1") is None
    assert journal.named("ns", "other") is None
    journal.put(_entry("u2"))  # the same name, re-created
    other = journal.named("ns", "claim", except_uid="u1")
    assert other is not None and other.uid == "u2"
    journal.save()
    reloaded = Journal(journal_path(tmp_path))
    reloaded.load()
    other = reloaded.named("ns", "claim", except_uid="u2")
    assert other is not None and other.uid == "u1"
    reloaded.remove("u1")
    assert reloaded.named("ns", "claim", except_uid="u2") is None
    assert reloaded.named("ns", "claim") is not None
