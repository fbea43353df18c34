"""A checksummed journal entry whose numbers are out of bounds is corruption, named, not a crash.

The checksum proves a record was written whole, not that numadra wrote it: whoever can write the
plugin dir can append a record with a matching checksum. Its CPU ids, memory nodes and file modes
are bounded when read (a mode of 400 digits raised OverflowError at the chmod of a restore).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from driver.errors import JournalError
from driver.state import Journal, journal_path
from driver.state.wal import JournalLog


def _entry(**changes: Any) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "namespace": "ml",
        "name": "train",
        "uid": "u1",
        "devices": [],
        "cdiSpecs": [{"path": "/var/run/cdi/x.json", "content": "{}", "mode": 0o644}],
        "metadataFiles": [],
        "pinning": [{"request": "cpus", "mode": "exclusive", "cpus": [2, 3], "mems": [0]}],
    }
    entry.update(changes)
    return entry


@pytest.mark.parametrize(
    ("changes", "why"),
    [
        ({"cdiSpecs": [{"path": "/x", "content": "", "mode": 10**400}]}, "file mode: must be between"),
        ({"cdiSpecs": [{"path": "/x", "content": "", "mode": "0644"}]}, "file mode: must be an integer"),
        ({"pinning": [{"request": "c", "mode": "exclusive", "cpus": [10**400], "mems": []}]}, "cpu: must be"),
        ({"pinning": [{"request": "c", "mode": "exclusive", "cpus": [-1], "mems": []}]}, "cpu: must be"),
        ({"pinning": [{"request": "c", "mode": "exclusive", "cpus": [True], "mems": []}]}, "cpu: must be"),
        ({"pinning": [{"request": "c", "mode": "exclusive", "cpus": [], "mems": [4096]}]}, "memory node"),
    ],
    ids=["huge-mode", "string-mode", "huge-cpu", "negative-cpu", "bool-cpu", "node-out-of-range"],
)
def test_an_out_of_bounds_field_is_corruption_naming_the_entry(
    tmp_path: Path, changes: dict[str, Any], why: str
) -> None:
    path = journal_path(tmp_path)
    text = json.dumps(_entry(**changes), sort_keys=True, separators=(",", ":"))
    JournalLog(path).append({"u1": text}, (), {"u1": text})
    with pytest.raises(JournalError, match=f"is corrupt \\(entry 'u1'.*{why}"):
        Journal(path).load()


def test_an_entry_in_bounds_loads(tmp_path: Path) -> None:
    path = journal_path(tmp_path)
    text = json.dumps(_entry(), sort_keys=True, separators=(",", ":"))
    JournalLog(path).append({"u1": text}, (), {"u1": text})
    journal = Journal(path)
    journal.load()
    entry = journal.get("u1")
    assert entry is not None and entry.pinning is not None and entry.pinning.cpus == frozenset({2, 3})
