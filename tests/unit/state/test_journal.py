"""Unit tests of the journal: round trip, corruption, unknown versions, cross-process reloads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from driver.errors import JournalError
from driver.pinning.types import ClaimPinning, CpuAssignment, CpuMode
from driver.plugin import PreparedDevice
from driver.state import Journal, JournalEntry, StoredFile, journal_path


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
    assert path == tmp_path / "state" / "journal.json"
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


def _write_saved(tmp_path: Path) -> Path:
    journal = Journal(journal_path(tmp_path))
    journal.put(_entry("u1"))
    journal.save()
    return journal.path


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
    """A damaged or unknown-version journal raises JournalError naming the file and the recovery."""
    path = _write_saved(tmp_path)
    assert callable(damage)
    damage(path)
    journal = Journal(path)
    with pytest.raises(JournalError, match=message) as info:
        journal.load()
    text = str(info.value)
    assert str(path) in text
    assert "move" in text
    assert "aside" in text
    assert "\n" not in text


def test_malformed_entry_with_valid_checksum_raises(tmp_path: Path) -> None:
    """An entry missing a field is reported even when the checksum matches (a buggy writer)."""
    import hashlib

    body = {"claims": {"u1": {"uid": "u1"}}}
    canon = json.dumps(body, sort_keys=True, separators=(",", ":"))
    path = journal_path(tmp_path)
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
        Journal(path).load()
