"""Unit tests of the journal: round trip, a version 1 file refused, corruption, cross-process reloads."""

from __future__ import annotations

import hashlib
import json
import tempfile
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driver.errors import JournalError
from driver.pinning.types import ClaimPinning, CpuAssignment, CpuMode
from driver.plugin import PreparedDevice
from driver.state import Journal, JournalEntry, StoredFile, journal_path
from driver.state.wal import JournalLog


def canonical_json(body: Any) -> str:
    """The form entries are stored in (the journal's docstring): sorted keys, compact separators."""
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


def stored_log(*entries: JournalEntry) -> str:
    """The text of a fresh journal log after one save of ``entries``."""
    with tempfile.TemporaryDirectory() as tmp:
        journal = Journal(journal_path(Path(tmp)))
        journal.load()
        for entry in entries:
            journal.put(entry)
        journal.save()
        return journal.path.read_text()


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


_V1 = '{"kind":"NumadraJournal","version":1,"checksum":"sha256:0","body":{"claims":{}}}\n'
_MARKER = '{"kind":"NumadraJournal","version":2,"movedTo":"journal.log"}\n'


@pytest.mark.parametrize("read_only", [False, True], ids=["driver", "numadra-state"])
@pytest.mark.parametrize(
    "content",
    [
        pytest.param(_V1, id="v1-document"),
        pytest.param(_MARKER, id="v2-marker"),
        pytest.param("", id="empty"),
    ],
)
def test_a_v1_journal_at_start_is_a_clear_error(tmp_path: Path, content: str, read_only: bool) -> None:
    """Version 1 (journal.json, never released) is not read: its presence is an error naming it,
    with the recovery, whatever it holds; nothing is written and it is not ignored."""
    v1 = journal_path(tmp_path).with_name("journal.json")
    v1.parent.mkdir(parents=True)
    v1.write_text(content)
    journal = Journal(journal_path(tmp_path), read_only=read_only)
    with pytest.raises(
        JournalError, match="is a version 1 journal, which this numadra does not read"
    ) as info:
        journal.load()
    text = str(info.value)
    assert text.startswith(f"journal {v1} ")
    assert "aside" in text and "\n" not in text
    assert not journal.path.exists()
    assert v1.read_text() == content


def test_a_v1_journal_next_to_the_log_is_an_error_too(tmp_path: Path) -> None:
    """A journal.json beside a version 2 log (left by an unreleased build) is not silently skipped."""
    path = journal_path(tmp_path)
    writer = Journal(path)
    writer.load()
    writer.put(_entry("u1"))
    writer.save()
    path.with_name("journal.json").write_text(_MARKER)
    with pytest.raises(JournalError, match="version 1"):
        Journal(path).load()
    path.with_name("journal.json").unlink()
    journal = Journal(path)
    journal.load()
    assert list(journal.entries()) == [_entry("u1")]


def test_malformed_entry_in_the_log_raises(tmp_path: Path) -> None:
    """The same for an entry of the version 2 log: checksummed but not an entry."""
    path = journal_path(tmp_path)
    JournalLog(path).append({"u1": '{"uid":"u1"}'}, (), {"u1": '{"uid":"u1"}'})
    with pytest.raises(JournalError, match=f"journal {path} is corrupt \\(entry 'u1'"):
        Journal(path).load()


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
    admin_devices=st.lists(_text, max_size=2).map(tuple),
    reserved_pods=st.none() | st.lists(_text, max_size=3).map(tuple),
    adopted=st.booleans(),
)


@settings(max_examples=150, deadline=None)
@given(entry=_entries)
def test_entry_text_is_the_canonical_json(entry: JournalEntry) -> None:
    """A saved entry is stored as exactly the sorted, compact json.dumps of to_json()."""
    assert f'"entry":{canonical_json(entry.to_json())}}}' in stored_log(entry)


@settings(max_examples=60, deadline=None)
@given(entry=_entries)
def test_entries_round_trip_through_their_json(entry: JournalEntry) -> None:
    """The adopted mark and the recorded pods survive a save and a load."""
    with tempfile.TemporaryDirectory() as tmp:
        writer = Journal(journal_path(Path(tmp)))
        writer.load()
        writer.put(entry)
        writer.save()
        reader = Journal(writer.path, read_only=True)
        reader.load()
        back = reader.get(entry.uid)
    assert back is not None and (back.adopted, back.reserved_pods) == (entry.adopted, entry.reserved_pods)


def test_a_prepared_entry_keeps_its_text_without_the_adopted_mark() -> None:
    """Only a rebuilt entry carries "adopted"; an entry that is not one writes no such key."""
    assert "adopted" not in stored_log(_nic("u1"))
    assert '"adopted":true' in stored_log(replace(_nic("u1"), adopted=True))
    bad = _nic("u1").to_json() | {"adopted": "yes"}
    with pytest.raises(TypeError, match="expected a boolean"):
        JournalEntry.from_json(bad)


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
    assert canonical_json(puts["u1"]) in first  # entries are stored as canonical JSON
    assert records[1] == {"ops": [{"remove": "u2"}]}
