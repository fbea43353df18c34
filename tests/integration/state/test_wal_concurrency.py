"""The journal log under real concurrency: a reader thread, a writer process killed mid-call."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from driver.state.wal import JournalLog, Put, Replay

REPO = Path(__file__).resolve().parents[3]

# A writer process: call k puts k-a and k-b and removes the pair of call k-1, then prints k.
WRITER = """
import json, sys
from pathlib import Path
from driver.state.wal import JournalLog
log = JournalLog(Path(sys.argv[1]))
pad = "x" * int(sys.argv[2])
live = {}
for k in range(1, 100000):
    log.read()
    puts = {f"{k:05d}-{s}": json.dumps({"k": k, "pad": pad}, separators=(",", ":")) for s in "ab"}
    removes = [uid for uid in live]
    live = dict(puts)
    log.append(puts, removes, live)
    print(k, flush=True)
"""


def apply(view: dict[str, str], replay: Replay) -> None:
    if replay.reset:
        view.clear()
    for op in replay.ops:
        if isinstance(op, Put):
            view[op.uid] = op.text
        else:
            view.pop(op.uid, None)


def call_of(view: dict[str, str]) -> int:
    """The call whose state ``view`` is; fails on anything a whole number of calls cannot give."""
    if not view:
        return 0
    calls = {uid.split("-")[0] for uid in view}
    assert len(calls) == 1, sorted(view)
    (call,) = calls
    assert sorted(view) == [f"{call}-a", f"{call}-b"]
    return int(call)


def text(k: int, size: int) -> str:
    return json.dumps({"k": k, "pad": "x" * size}, separators=(",", ":"))


def test_reader_thread_never_sees_part_of_a_call(tmp_path: Path) -> None:
    """200 two-op calls, with compactions, read concurrently: every view is a whole call, in order."""
    path = tmp_path / "journal.log"
    writer = JournalLog(path, compact_min=4096)
    done = threading.Event()
    seen: list[int] = []
    errors: list[BaseException] = []
    writer_failed: list[BaseException] = []

    def read_loop() -> None:
        reader = JournalLog(path, compact_min=4096)
        view: dict[str, str] = {}
        try:
            while not seen or seen[-1] != 200:
                if done.is_set() and writer_failed:
                    return
                apply(view, reader.read())
                call = call_of(view)
                assert not seen or call >= seen[-1], (seen[-1], call)
                seen.append(call)
        except BaseException as exc:
            errors.append(exc)
        finally:
            reader.close()

    thread = threading.Thread(target=read_loop, daemon=True)
    thread.start()
    live: dict[str, str] = {}
    try:
        writer.read()
        for k in range(1, 201):
            puts = {f"{k:05d}-{s}": text(k, 200) for s in "ab"}
            writer.append(puts, list(live), puts)
            live = puts
    except BaseException as exc:
        writer_failed.append(exc)
        raise
    finally:
        done.set()
        thread.join(timeout=60)
        writer.close()
    assert not errors, errors
    assert seen[-1] == 200
    assert len(set(seen)) > 2  # it did read while the writer was writing


def test_writer_process_killed_mid_call_leaves_a_whole_number_of_calls(tmp_path: Path) -> None:
    """Another process appends 256 KB calls (compacting) while we read; SIGKILL; the state is the last
    acknowledged call or the one after, and our next append cuts any torn tail and succeeds."""
    path = tmp_path / "state" / "journal.log"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(path), str(128 * 1024)], env=env, stdout=subprocess.PIPE
    )
    reader = JournalLog(path)
    view: dict[str, str] = {}
    resets = 0
    try:
        last = 0
        while last < 25:
            assert proc.poll() is None, "the writer process died"
            replay = reader.read()
            resets += replay.reset
            apply(view, replay)
            call = call_of(view)
            assert call >= last
            last = call
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        assert proc.stdout is not None
        acknowledged = int(proc.stdout.read().split()[-1])
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert resets > 1  # compactions by the other process were followed
    apply(view, reader.read())
    final = call_of(view)
    assert acknowledged <= final <= acknowledged + 1
    after = {"zz-a": text(0, 10), "zz-b": text(0, 10)}
    reader.append(after, list(view), after)
    check: dict[str, str] = {}
    apply(check, JournalLog(path).read())
    assert check == after
    reader.close()
