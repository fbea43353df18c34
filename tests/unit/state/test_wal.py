"""Unit tests of the journal log (v2): format, torn tails, corruption, compaction, migration, model."""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from driver.errors import JournalError
from driver.state.wal import JournalLog, Put, Replay

HEADER = b'{"kind":"NumadraJournal","version":2}\n'


def text(uid: str, size: int = 40) -> str:
    """A canonical entry text, as Journal would hand it over."""
    return json.dumps({"uid": uid, "pad": "x" * size}, sort_keys=True, separators=(",", ":"))


def state(replays: list[Replay], start: dict[str, str] | None = None) -> dict[str, str]:
    """Apply replays the way Journal does: uid -> entry text."""
    out = dict(start or {})
    for replay in replays:
        if replay.reset:
            out.clear()
        for op in replay.ops:
            if isinstance(op, Put):
                assert json.loads(op.text) == op.entry
                out[op.uid] = op.text
            else:
                out.pop(op.uid, None)
    return out


def fresh_state(path: Path) -> dict[str, str]:
    log = JournalLog(path)
    try:
        return state([log.read()])
    finally:
        log.close()


def compacted_size(live: dict[str, str]) -> int:
    ops = ",".join(f'{{"put":{json.dumps(uid)},"entry":{live[uid]}}}' for uid in sorted(live))
    return len(HEADER) + len(line(f'{{"ops":[{ops}]}}'.encode()))


def line(payload: bytes) -> bytes:
    return hashlib.sha256(payload).hexdigest().encode() + b" " + payload + b"\n"


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "journal.log"


def test_missing_file_reads_empty_with_reset(path: Path) -> None:
    """No log means nothing is prepared; the caller is told to reset."""
    assert JournalLog(path).read() == Replay(reset=True, ops=[])


def test_first_append_creates_the_file_with_header_and_modes(path: Path) -> None:
    """The file starts with the v2 header, is 0600 in a 0700 dir, and holds the texts as given."""
    log = JournalLog(path)
    log.read()
    log.append({"u1": text("u1")}, (), {"u1": text("u1")})
    data = path.read_bytes()
    assert data.startswith(HEADER)
    assert data.endswith(b'"entry":' + text("u1").encode() + b"}]}\n")
    assert path.stat().st_mode & 0o777 == 0o600
    assert path.parent.stat().st_mode & 0o777 == 0o700
    replay = JournalLog(path).read()
    assert replay.reset
    assert replay.ops == [Put("u1", {"uid": "u1", "pad": "x" * 40}, text("u1"))]


def test_one_call_is_one_line_and_removes_round_trip(path: Path) -> None:
    """Puts and removes of a call share one checksummed line; a fresh reader replays them in order."""
    log = JournalLog(path)
    log.read()
    log.append({"a": text("a"), "b": text("b")}, (), {"a": text("a"), "b": text("b")})
    log.append({"c": text("c")}, ["a"], {"b": text("b"), "c": text("c")})
    lines = path.read_bytes().splitlines(keepends=True)
    assert len(lines) == 3
    assert lines[2] == line(b'{"ops":[{"put":"c","entry":' + text("c").encode() + b'},{"remove":"a"}]}')
    assert fresh_state(path) == {"b": text("b"), "c": text("c")}


def test_empty_call_writes_nothing_and_overlap_is_refused(path: Path) -> None:
    """A call that changed nothing costs no I/O; a uid both put and removed is a caller bug."""
    log = JournalLog(path)
    log.read()
    log.append({}, (), {})
    assert not path.exists()
    with pytest.raises(ValueError, match="both put and removed"):
        log.append({"a": text("a")}, ["a"], {})


def test_every_cut_of_the_last_record_reads_as_the_state_before(path: Path) -> None:
    """A tail torn at any byte drops only that call, and the next append cuts it off and succeeds."""
    log = JournalLog(path)
    log.read()
    log.append({"a": text("a")}, (), {"a": text("a")})
    before = path.read_bytes()
    log.append({"b": text("b")}, ["a"], {"b": text("b")})
    whole = path.read_bytes()
    for cut in range(len(before), len(whole)):
        path.write_bytes(whole[:cut])
        reader = JournalLog(path)
        assert state([reader.read()]) == {"a": text("a")}, cut
        reader.append({"c": text("c")}, (), {"a": text("a"), "c": text("c")})
        assert path.read_bytes() == before + line(
            b'{"ops":[{"put":"c","entry":' + text("c").encode() + b"}]}"
        )
        assert fresh_state(path) == {"a": text("a"), "c": text("c")}
        reader.close()


def test_a_header_cut_short_is_corruption(path: Path) -> None:
    """The log is only ever created whole (temp file + rename), so a cut header is damage: an error."""
    path.parent.mkdir()
    path.write_bytes(HEADER[:10])
    with pytest.raises(JournalError, match=r"is corrupt \(incomplete header\).*aside"):
        JournalLog(path).read()


def test_an_empty_file_is_an_empty_journal(path: Path) -> None:
    """A zero-length log (say, touched by hand) holds nothing; the next append writes it whole."""
    path.parent.mkdir()
    path.write_bytes(b"")
    log = JournalLog(path)
    assert state([log.read()]) == {}
    log.append({"a": text("a")}, (), {"a": text("a")})
    assert path.read_bytes().startswith(HEADER)
    assert fresh_state(path) == {"a": text("a")}


def test_bad_checksum_on_the_complete_last_line_is_corruption(path: Path) -> None:
    """A complete last line (newline and all) with a wrong checksum may be an acknowledged call:
    an error naming file and line, never dropped as a torn tail (it was, before: claim "b" was
    forgotten without a word)."""
    log = JournalLog(path)
    log.read()
    log.append({"a": text("a")}, (), {"a": text("a")})
    log.append({"b": text("b")}, (), {"a": text("a"), "b": text("b")})
    data = bytearray(path.read_bytes())
    data[-5] ^= 1  # a flipped bit inside the last payload
    path.write_bytes(bytes(data))
    with pytest.raises(JournalError, match=r"checksum mismatch in the complete record on line 3") as info:
        JournalLog(path).read()
    assert str(path) in str(info.value)
    assert "\n" not in str(info.value)
    reader = JournalLog(path)
    with pytest.raises(JournalError):
        reader.append({"c": text("c")}, (), {"c": text("c")})  # never appended over
    assert bytes(data) == path.read_bytes()


def test_reads_say_why_they_start_over(path: Path) -> None:
    """Every reset names its cause, so the journal knows when to cross-check with the evidence."""
    log = JournalLog(path)
    assert log.read().reason == "missing"
    log.append({"a": text("a")}, (), {"a": text("a")})
    assert log.read().reset is False
    path.unlink()
    assert log.read().reason == "deleted"
    assert log.read().reason == "missing"
    log.append({"a": text("a")}, (), {"a": text("a")})
    other = path.with_name("other")
    other.write_bytes(path.read_bytes())
    other.replace(path)
    assert log.read().reason == "replaced"
    with path.open("r+b") as fh:
        fh.truncate(len(HEADER))
    assert log.read().reason == "truncated"
    assert JournalLog(path).read().reason == "start"
    path.write_bytes(b"")
    assert JournalLog(path).read().reason == "empty"


def test_corruption_before_the_last_line_is_an_error_with_the_recovery(path: Path) -> None:
    """A bad line followed by another one is never skipped: JournalError names the file and recovery."""
    log = JournalLog(path)
    log.read()
    for uid in "abc":
        log.append({uid: text(uid)}, (), {})
    lines = path.read_bytes().splitlines(keepends=True)
    lines[2] = lines[2].replace(b"xxxx", b"xxxy", 1)
    path.write_bytes(b"".join(lines))
    with pytest.raises(
        JournalError, match="checksum mismatch in the complete record on line 3, byte"
    ) as info:
        JournalLog(path).read()
    message = str(info.value)
    assert "\n" not in message
    assert f"move {path} aside" in message
    assert "numadra rebuilds the entries of prepared claims" in message


def test_corruption_seen_incrementally_is_an_error_too(path: Path) -> None:
    """A reader following the file raises when a bad record is followed by a good one."""
    log = JournalLog(path)
    log.read()
    log.append({"a": text("a")}, (), {})
    reader = JournalLog(path)
    reader.read()
    with path.open("ab") as fh:
        fh.write(b"0" * 64 + b' {"ops":[]}\n' + line(b'{"ops":[]}'))
    with pytest.raises(JournalError, match="checksum mismatch"):
        reader.read()
    with pytest.raises(JournalError, match="checksum mismatch"):
        reader.read()  # still, not "nothing new"


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        pytest.param(b'{"ops":[{"frob":"a"}]}', "unknown op", id="unknown-op"),
        pytest.param(b'{"ops":[{"put":"a"}]}', "without entry", id="put-without-entry"),
        pytest.param(b'{"ops":[{"put":"a","entry":[1]}]}', "not an object", id="entry-not-object"),
        pytest.param(b'{"ops":[{"remove":7}]}', "not a string", id="uid-not-string"),
        pytest.param(b'{"ops":[{"remove":"a"},]}', "no op after", id="trailing-comma"),
        pytest.param(b'{"ops":[{"remove":"a"}{"remove":"b"}]}', "no op after", id="no-comma"),
        pytest.param(b'{"ops":[{"remove":"a"]}', "not closed", id="unclosed-op"),
        pytest.param(b'{"calls":[]}', "ops", id="not-ops"),
        pytest.param(b'{"ops":[{"put":"a","entry":{"x":}}]}', "Expecting value", id="bad-json"),
        pytest.param(b'{"ops":[{"remove":"\xff"}]}', "utf-8", id="not-utf8"),
    ],
)
def test_malformed_op_with_a_good_checksum_is_an_error(path: Path, payload: bytes, problem: str) -> None:
    """A record that checks out but is not our shape is corruption, even on the last line."""
    path.parent.mkdir()
    path.write_bytes(HEADER + line(payload))
    with pytest.raises(JournalError, match=f"malformed record on line 2, byte {len(HEADER)}: .*{problem}"):
        JournalLog(path).read()


@pytest.mark.parametrize(
    ("header", "problem"),
    [
        pytest.param(
            b'{"kind":"NumadraJournal","version":3}',
            r"unknown schema version 3 \(this numadra reads version 2\)",
            id="v3",
        ),
        pytest.param(b'{"kind":"Other","version":2}', "not a NumadraJournal log", id="kind"),
        pytest.param(b"[1,2]", "not a NumadraJournal log", id="not-object"),
        pytest.param(b"{oops", "header is not JSON", id="not-json"),
    ],
)
def test_unknown_header_is_an_error(path: Path, header: bytes, problem: str) -> None:
    """A log of another kind or a newer version is refused with the recovery."""
    path.parent.mkdir()
    path.write_bytes(header + b"\n" + line(b'{"ops":[]}'))
    with pytest.raises(JournalError, match=problem) as info:
        JournalLog(path).read()
    assert f"move {path} aside" in str(info.value)


def test_two_objects_follow_each_other_incrementally_and_through_compaction(path: Path) -> None:
    """Each sees the other's calls without reset; after a compaction the other resets to the live state."""
    one, two = JournalLog(path, compact_min=0), JournalLog(path, compact_min=0)
    one.read()
    one.append({"a": text("a")}, (), {"a": text("a")})
    assert two.read() == Replay(reset=True, ops=[Put("a", {"uid": "a", "pad": "x" * 40}, text("a"))])
    two.append({"b": text("b", 2000)}, (), {"a": text("a"), "b": text("b", 2000)})
    assert one.read() == Replay(reset=False, ops=[Put("b", {"uid": "b", "pad": "x" * 2000}, text("b", 2000))])
    inode = path.stat().st_ino
    one.append({}, ["b"], {"a": text("a")})  # file now far above 4x the live state: compacted
    assert path.stat().st_ino != inode
    replay = two.read()
    assert replay.reset
    assert state([replay]) == {"a": text("a")}
    assert one.read() == Replay(reset=False, ops=[])


def test_compaction_keeps_exactly_the_live_state_and_shrinks_the_file(path: Path) -> None:
    """Past the threshold the log becomes header + one sorted record of the live entries."""
    log = JournalLog(path, compact_min=4000)
    log.read()
    live: dict[str, str] = {}
    sizes = []
    for i in range(40):
        uid = f"u{i:02d}"
        live[uid] = text(uid, 200)
        removes = [f"u{i - 3:02d}"] if i >= 3 else []
        for gone in removes:
            del live[gone]
        log.append({uid: live[uid]}, removes, live)
        sizes.append(path.stat().st_size)
    assert any(b < a for a, b in itertools.pairwise(sizes))  # it did shrink
    assert max(sizes) <= 4000 + 400
    assert fresh_state(path) == live
    log.append({}, ["u39"], {k: v for k, v in live.items() if k != "u39"})
    compacted = JournalLog(path, compact_min=0)
    compacted.read()
    compacted.append({}, ["u38"], {"u37": live["u37"]})  # forces a compaction of one entry
    assert path.read_bytes() == HEADER + line(
        b'{"ops":[{"put":"u37","entry":' + live["u37"].encode() + b"}]}"
    )


def test_append_syncs_data_and_creation_syncs_file_and_dir(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Creating fsyncs the file and the directory; each later call fdatasyncs once and no fsync."""
    calls: list[str] = []
    real_fsync, real_fdatasync = os.fsync, os.fdatasync

    def spy_fsync(fd: int) -> None:
        calls.append("fsync")
        real_fsync(fd)

    def spy_fdatasync(fd: int) -> None:
        calls.append("fdatasync")
        real_fdatasync(fd)

    monkeypatch.setattr(os, "fsync", spy_fsync)
    monkeypatch.setattr(os, "fdatasync", spy_fdatasync)
    log = JournalLog(path)
    log.read()
    log.append({"a": text("a")}, (), {"a": text("a")})
    assert calls == ["fsync", "fsync"]  # temp file, then directory
    calls.clear()
    log.append({"b": text("b")}, (), {"a": text("a"), "b": text("b")})
    assert calls == ["fdatasync"]
    assert fresh_state(path) == {"a": text("a"), "b": text("b")}


def test_append_without_a_fresh_read_is_refused(path: Path) -> None:
    """A writer whose view is stale (no read, or another writer appended since) must read first."""
    one, two = JournalLog(path), JournalLog(path)
    one.read()
    two.read()
    one.append({"a": text("a")}, (), {"a": text("a")})
    with pytest.raises(JournalError, match="appeared since this process last read it"):
        two.append({"b": text("b")}, (), {"b": text("b")})
    two.read()
    two.append({"b": text("b")}, (), {"a": text("a"), "b": text("b")})
    with pytest.raises(
        JournalError, match=r"changed size \(\d+ -> \d+ bytes\) since this process last read it"
    ):
        one.append({"c": text("c")}, (), {})
    assert state([one.read()], {"a": text("a")}) == {"a": text("a"), "b": text("b")}
    one.append({"c": text("c")}, (), {})
    assert fresh_state(path) == {"a": text("a"), "b": text("b"), "c": text("c")}


def test_an_append_right_after_a_read_still_sees_a_lockless_writer(path: Path) -> None:
    """The read and the append of one call are two looks at the file: a writer without the lock
    that appends between them is refused, even though this object read just before (one look
    per call would append after the other writer's record without having read it)."""
    first, rival = JournalLog(path), JournalLog(path)
    first.read()
    first.append({"a": text("a")}, (), {"a": text("a")})
    first.read()
    rival.read()
    rival.append({"b": text("b")}, (), {"a": text("a"), "b": text("b")})
    with pytest.raises(
        JournalError, match=r"changed size \(\d+ -> \d+ bytes\) since this process last read it"
    ):
        first.append({}, ["a"], {})
    assert fresh_state(path) == {"a": text("a"), "b": text("b")}


#: another process that creates the log with one entry: ``python -c _RIVAL <path> <entry text>``
_RIVAL = (
    "import sys; from pathlib import Path; from driver.state.wal import JournalLog; "
    "log = JournalLog(Path(sys.argv[1])); log.read(); log.append({'a': sys.argv[2]}, (), {'a': sys.argv[2]})"
)


def test_creating_the_log_never_replaces_one_made_meanwhile(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two writers past the "no log yet" check at once (no lock): the second create is refused."""
    writer = JournalLog(path)
    writer.read()
    real_link = os.link
    raced: list[str] = []

    def link_after_another_process(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        """This writer found no log; before it links its new file into place, another process
        (a writer that did not take the lock) creates the log."""
        if not raced:
            raced.append(str(dst))
            subprocess.run([sys.executable, "-c", _RIVAL, str(path), text("a")], check=True, timeout=60)
        real_link(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "link", link_after_another_process)
    with pytest.raises(JournalError, match="appeared since this process last read it"):
        writer.append({"b": text("b")}, (), {"b": text("b")})
    assert raced == [str(path)]
    assert fresh_state(path) == {"a": text("a")}
    assert sorted(p.name for p in path.parent.iterdir()) == [path.name]  # no temp file left


# -- model-based property test ------------------------------------------------------------------

UIDS = st.sampled_from(["u1", "u2", "u3", "u4", "u5"])
STEPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), UIDS, st.integers(0, 300)),
        st.tuples(st.just("remove"), UIDS, st.just(0)),
        st.tuples(st.sampled_from(["commit", "read", "reopen", "tear"]), st.just(""), st.just(0)),
    ),
    max_size=40,
)


@settings(max_examples=150, deadline=None)
@given(steps=STEPS)
def test_random_calls_match_a_dict_model(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, str, int]]
) -> None:
    """Random puts/removes/commits/reads/reopens/torn tails: every reader's view equals the model."""
    path = tmp_path_factory.mktemp("wal") / "journal.log"
    model: dict[str, str] = {}
    writer, reader = JournalLog(path, compact_min=600), JournalLog(path, compact_min=600)
    view: dict[str, str] = {}
    puts: dict[str, str] = {}
    removes: set[str] = set()
    try:
        for kind, uid, size in steps:
            if kind == "put":
                puts[uid] = text(uid, size)
                removes.discard(uid)
            elif kind == "remove":
                puts.pop(uid, None)
                removes.add(uid)
            elif kind == "commit":
                assert state([writer.read()], model) == model  # nobody else writes
                model.update(puts)
                for gone in removes:
                    model.pop(gone, None)
                writer.append(puts, removes, model)
                if puts or removes:  # the file never outgrows the compaction bound
                    assert path.stat().st_size <= max(600, 4 * compacted_size(model))
                puts, removes = {}, set()
            elif kind == "read":
                view = state([reader.read()], view)
                assert view == model
            elif kind == "reopen":
                reader.close()
                reader = JournalLog(path, compact_min=600)
                view = state([reader.read()], {"stale": "x"})
                assert view == model
            elif path.exists():  # tear: a call that crashed half way through its write
                with path.open("ab") as fh:
                    fh.write(line(b'{"ops":[{"remove":"u1"}]}')[: size % 50 + 1])
        view = state([reader.read()], view)
        assert view == model
        assert fresh_state(path) == model
    finally:
        writer.close()
        reader.close()
