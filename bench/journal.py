"""Cost of saving one call to the claim journal: the v2 append-only log against the v1 rewrite.

For 0, 30, 100 and 300 prepared claims of ~6 KB each (3 CDI specs + 2 metadata files, as a real
entry), times one 1-claim save ``--rounds`` times: ``JournalLog.append`` (one O_APPEND write and
one fdatasync; compactions included where they fall) and the v1 whole-file rewrite (the same
document, sha256 and atomic write the v1 ``Journal.save`` did, kept here as the baseline: temp
file, fsync, rename, fsync dir). Each round's claim is removed again untimed (v1) or
by an untimed remove call (v2), so the live count stays put. Also the cold ``read()`` of a 300-claim
log, compacted and at 4x its live size (just before compaction), and a ``read()`` that finds
nothing new (the per-call check). (numadra no longer reads version 1, so there is no v1 load.)

Prints one JSON object; times in ms. ``--base /dev/shm`` takes the disk's flush out of the figures.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from cdi.io import atomic_write_bytes  # noqa: E402 (needs REPO on sys.path)
from driver.plugin import PreparedDevice  # noqa: E402
from driver.state.entry import JournalEntry, StoredFile  # noqa: E402
from driver.state.wal import JournalLog  # noqa: E402

COUNTS = (0, 30, 100, 300)


def entry(i: int) -> JournalEntry:
    """A claim's entry of about 6 KB: one device, three CDI specs, two metadata files."""
    return JournalEntry(
        namespace="bench",
        name=f"claim-{i}",
        uid=f"uid-{i:06d}",
        devices=(PreparedDevice(("nic",), "node", f"vf-{i}", (f"numadra.dev/device=uid-{i:06d}-nic",)),),
        cdi_specs=tuple(StoredFile(f"/var/run/cdi/numadra.dev_{i}-{k}.json", "x" * 1200) for k in range(3)),
        metadata_files=tuple(StoredFile(f"/var/lib/kubelet/m{i}-{k}.json", "y" * 1500) for k in range(2)),
    )


def canonical(e: JournalEntry) -> str:
    return json.dumps(e.to_json(), sort_keys=True, separators=(",", ":"))


def figures(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered), 3),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))], 3),
        "max_ms": round(ordered[-1], 3),
    }


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1000


def bench_append(work: Path, n: int, rounds: int) -> dict[str, Any]:
    path = work / f"v2-{n}" / "journal.log"
    log = JournalLog(path)
    live = {f"uid-{i:06d}": canonical(entry(i)) for i in range(n)}
    _fresh(log, live)
    samples, compactions = [], 0
    for r in range(rounds):
        uid, text = f"uid-{900000 + r:06d}", canonical(entry(900000 + r))
        live[uid] = text
        inode = path.stat().st_ino
        samples.append(timed(lambda: log.append({uid: text}, (), live)))  # noqa: B023 (called at once)
        compactions += path.stat().st_ino != inode
        del live[uid]
        log.append({}, [uid], live)
    log.close()
    return {**figures(samples), "compactions": compactions}


def v1_document(live: Mapping[str, str]) -> bytes:
    """The whole version 1 journal file for ``live`` (uid -> canonical entry), as v1 wrote it."""
    claims = ",".join(f"{json.dumps(uid)}:{live[uid]}" for uid in sorted(live))
    body = f'{{"claims":{{{claims}}}}}'.encode()
    digest = hashlib.sha256(body).hexdigest()
    head = f'{{"kind":"NumadraJournal","version":1,"checksum":"sha256:{digest}","body":'.encode()
    return b"".join((head, body, b"}\n"))


def bench_v1_save(work: Path, n: int, rounds: int) -> dict[str, float]:
    path = work / f"v1-{n}" / "journal.json"
    path.parent.mkdir()
    live = {f"uid-{i:06d}": canonical(entry(i)) for i in range(n)}
    samples = []
    for r in range(rounds):
        live[f"uid-{900000 + r:06d}"] = canonical(entry(900000 + r))
        samples.append(timed(lambda: atomic_write_bytes(path, v1_document(live), mode=0o600)))
        del live[f"uid-{900000 + r:06d}"]
    return figures(samples)


def _fresh(log: JournalLog, live: Mapping[str, str]) -> None:
    """Make a new log hold ``live`` as a compacted log does: the header and one record.

    A log's first call writes exactly that shape, so one public ``append`` of every entry does it.
    With nothing live, the file must still exist (the timed calls then append, not create): one
    placeholder claim put and removed, two short records after the header.
    """
    log.read()
    if live:
        log.append(dict(sorted(live.items())), (), live)
        return
    placeholder = {"uid-placeholder": canonical(entry(0))}
    log.append(placeholder, (), placeholder)
    log.append({}, list(placeholder), {})


def bench_cold_reads(work: Path, repeats: int) -> dict[str, Any]:
    live = {f"uid-{i:06d}": canonical(entry(i)) for i in range(300)}
    compacted = work / "cold" / "journal.log"
    _fresh(JournalLog(compacted), live)
    grown = work / "grown" / "journal.log"
    writer = JournalLog(grown, compact_min=1 << 40)  # never compacts: grow it to 4x live by hand
    _fresh(writer, live)
    target = 4 * compacted.stat().st_size
    uids = sorted(live)
    while grown.stat().st_size < target:
        uid = uids[grown.stat().st_size % len(uids)]
        writer.append({uid: live[uid]}, (), live)
    writer.close()

    def cold(path: Path) -> float:
        log = JournalLog(path)
        spent = timed(log.read)
        log.close()
        return spent

    warm = JournalLog(compacted)
    warm.read()
    unchanged = [timed(warm.read) for _ in range(repeats * 10)]
    warm.close()
    return {
        "compacted_ms": round(statistics.median(cold(compacted) for _ in range(repeats)), 3),
        "compacted_bytes": compacted.stat().st_size,
        "at_4x_live_ms": round(statistics.median(cold(grown) for _ in range(repeats)), 3),
        "at_4x_live_bytes": grown.stat().st_size,
        "unchanged_read_ms": round(statistics.median(unchanged), 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="/tmp", help="directory to work in (default /tmp)")
    parser.add_argument("--rounds", type=int, default=200, help="saves timed per live count")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="numadra-journal-bench-", dir=args.base))
    try:
        out: dict[str, Any] = {
            "base": args.base,
            "rounds": args.rounds,
            "entry_bytes": len(canonical(entry(0))),
            "append": {str(n): bench_append(work, n, args.rounds) for n in COUNTS},
            "v1_save": {str(n): bench_v1_save(work, n, args.rounds) for n in COUNTS},
            "cold_read_300": bench_cold_reads(work, max(5, args.rounds // 20)),
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)
    sys.stdout.write(json.dumps(out, indent=2) + "\n")
    os.sync()


if __name__ == "__main__":
    main()
