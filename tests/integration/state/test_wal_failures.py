"""The journal log when the disk refuses a write: the call fails and leaves no trace."""

from __future__ import annotations

import errno
import json
import resource
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from driver.state import wal
from driver.state.wal import JournalLog, Put


def text(uid: str, size: int) -> str:
    return json.dumps({"uid": uid, "pad": "x" * size}, sort_keys=True, separators=(",", ":"))


def test_a_write_cut_short_by_the_file_size_limit_is_undone(tmp_path: Path) -> None:
    """RLIMIT_FSIZE lets 10 bytes of the record through, then EFBIG: the error reaches the caller,
    the file is cut back to the previous call, and the next append (limit lifted) works."""
    path = tmp_path / "journal.log"
    log = JournalLog(path)
    log.read()
    log.append({"a": text("a", 50)}, (), {"a": text("a", 50)})
    before = path.read_bytes()
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (len(before) + 10, hard))  # SIGXFSZ: Python ignores it
    try:
        with pytest.raises(OSError) as info:
            log.append({"b": text("b", 500)}, (), {"a": text("a", 50), "b": text("b", 500)})
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert info.value.errno == errno.EFBIG
    assert path.read_bytes() == before
    log.append({"c": text("c", 50)}, (), {"a": text("a", 50), "c": text("c", 50)})
    ops = JournalLog(path).read().ops
    assert [op.uid for op in ops] == ["a", "c"]
    assert all(isinstance(op, Put) for op in ops)


def test_a_failed_compaction_keeps_the_acknowledged_call(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compaction on a full disk is logged, not raised: the call is durable already; a later one compacts."""
    path = tmp_path / "journal.log"
    log = JournalLog(path, compact_min=0)
    log.read()
    log.append({"a": text("a", 2000)}, (), {"a": text("a", 2000)})

    def fake_full_disk(*args: object, **kwargs: object) -> None:
        raise OSError(errno.ENOSPC, "No space left on device")  # root ignores permissions: no real way

    monkeypatch.setattr(wal, "atomic_write_bytes", fake_full_disk)
    with capture_logs() as logs:
        log.append({"b": text("b", 10)}, ["a"], {"b": text("b", 10)})
    assert [e["event"] for e in logs] == ["cannot compact journal"]
    assert "No space left" in logs[0]["error"]
    assert [op.uid for op in JournalLog(path).read().ops] == ["a", "b", "a"]
    monkeypatch.undo()
    log.append({"c": text("c", 10)}, (), {"b": text("b", 10), "c": text("c", 10)})
    assert [op.uid for op in JournalLog(path).read().ops] == ["b", "c"]
