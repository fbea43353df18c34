"""The driver's own prepare and unprepare, on a warm core and on one another process ran on meanwhile.

Why this exists: in ``bench/prepare.py`` the driver's part of a 1-claim prepare (the kubelet
layer's checks, then ``ClaimsDriver.prepare_claims``) costs about three times the CPU it costs in
a loop of prepares in one process. Between two calls of one plugin the bench runs the other
plugins, the apiserver and etcd on the machine's cores, and they evict what the driver's code and
data had in the caches. This script reproduces that without an apiserver or gRPC, so a change to
the driver's hot path can be judged on the cost that counts on a node, in seconds and in one
process:

* ``warm``: prepare then unprepare of one claim, round after round, nothing else in between;
* ``cold``: the same, but before each prepare a neighbour process, pinned to the same CPU as this
  one, walks ``--evict-mib`` MiB of memory (one write a page, one read a cache line) and runs a
  little unrelated Python: what another plugin's call does to the core.

Each round's claim is read from an in-memory source (no HTTP) through the kubelet layer's
``driver.kubelet.claims.prepare``, as the server calls it, with the same claims, inventory
(a generated DGX-class host tree) and planner as ``bench/prepare.py``'s numadra child. The times
are the thread's CPU time (``time.thread_time_ns``), so a descheduled thread does not count;
the figures are medians, and ``cold_over_warm`` is their ratio.

``--tree PATH`` imports ``driver`` from another source tree (``git archive <rev> | tar -x -C PATH``)
to compare two revisions the same way, run after run (this machine drifts by a third between
runs: compare revisions in one sitting, interleaved).

Prints one JSON object; times in microseconds.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]

#: the neighbour: waits for a byte on fd R, evicts, answers a byte on fd W (argv: R W MiB)
_NEIGHBOUR = r"""
import os, sys
read_fd, write_fd, mib = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
buf = bytearray(mib << 20)
while os.read(read_fd, 1):
    for offset in range(0, len(buf), 4096):
        buf[offset] = (buf[offset] + 1) & 255
    sum(memoryview(buf)[::64][: 1 << 18])
    words = [str(i) * 3 for i in range(20000)]
    sorted({word: i for i, word in enumerate(words)})
    os.write(write_fd, b"x")
"""


class _Neighbour:
    """Another process on this process's CPU that evicts the caches when asked."""

    def __init__(self, cpu: int, mib: int) -> None:
        self._ask_r, self._ask_w = os.pipe()
        self._done_r, self._done_w = os.pipe()
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _NEIGHBOUR, str(self._ask_r), str(self._done_w), str(mib)],
            pass_fds=(self._ask_r, self._done_w),
        )
        os.sched_setaffinity(self._proc.pid, {cpu})

    def evict(self) -> None:
        os.write(self._ask_w, b"x")
        if os.read(self._done_r, 1) != b"x":
            raise SystemExit("the evicting neighbour process died")

    def close(self) -> None:
        os.close(self._ask_w)  # its read returns b"": it exits
        self._proc.wait(timeout=30)
        for fd in (self._ask_r, self._done_r, self._done_w):
            os.close(fd)


def _summary(samples: list[tuple[int, int]]) -> dict[str, float]:
    prepare = sorted(s[0] for s in samples)
    unprepare = sorted(s[1] for s in samples)
    return {
        "prepare_cpu_p50_us": round(statistics.median(prepare) / 1000, 1),
        "prepare_cpu_p90_us": round(prepare[int(len(prepare) * 0.9)] / 1000, 1),
        "unprepare_cpu_p50_us": round(statistics.median(unprepare) / 1000, 1),
        "unprepare_cpu_p90_us": round(unprepare[int(len(unprepare) * 0.9)] / 1000, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rounds", type=int, default=1000, help="rounds per mode and pass")
    parser.add_argument("--passes", type=int, default=2, help="passes of warm then cold (medians over all)")
    parser.add_argument("--evict-mib", type=int, default=64, help="memory the neighbour walks per round")
    parser.add_argument("--base", default="/dev/shm", help="where the plugin and CDI dirs live")
    parser.add_argument("--tree", type=Path, help="import driver from this source tree instead")
    args = parser.parse_args()

    sys.path.insert(0, str(REPO))
    if args.tree is not None:
        sys.path.insert(0, str(args.tree.resolve()))
    import logging

    from bench._common import claimed_vfs, in_memory_driver, nic_cpu_claim
    from driver.heap import freeze_startup_heap
    from driver.inventory.discovery import discover
    from driver.kubelet import claims as claim_layer
    from driver.log import configure_logging
    from driver.plugin import ClaimRef
    from harness.hosttree import write_host_tree
    from harness.topologies import TOPOLOGIES

    cpu = min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    neighbour = _Neighbour(cpu, args.evict_mib)
    root = Path(tempfile.mkdtemp(prefix="cold", dir=args.base))
    # the "prepared" and "unprepared" lines are written, as on a node, to a sink that costs nothing
    stderr = os.dup(2)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 2)
    try:
        configure_logging("json", logging.INFO, cache=True)  # as `numadra run`
        write_host_tree(root / "host", TOPOLOGIES["dgx"])
        inventory = discover(root / "host", use_nvml=False)
        vfs = claimed_vfs(inventory, 32)
        claims: dict[tuple[str, str], Any] = {}
        refs: list[Any] = []
        for i, (vf, numa) in enumerate(vfs):
            uid = str(uuid.uuid5(uuid.NAMESPACE_DNS, f"cold-{i}"))
            claims[("bench", f"claim-{i}")] = nic_cpu_claim(
                uid, f"claim-{i}", vf, numa, driver="numadra.dev", node="bench-node"
            )
            refs.append(ClaimRef("bench", f"claim-{i}", uid))

        driver, fetcher = in_memory_driver(
            inventory,
            claims,
            driver="numadra.dev",
            node="bench-node",
            cdi_dir=root / "cdi",
            plugin_dir=root / "plugin",
        )
        driver.reconcile()

        def cycle(ref: Any) -> tuple[int, int]:
            t0 = time.thread_time_ns()
            results = claim_layer.prepare(driver, fetcher, None, [ref])
            t1 = time.thread_time_ns()
            errors = driver.unprepare_claims([ref])
            t2 = time.thread_time_ns()
            if results[ref.uid].error or errors[ref.uid]:
                raise SystemExit(f"claim {ref.uid}: {results[ref.uid].error or errors[ref.uid]}")
            return t1 - t0, t2 - t1

        for i in range(200):  # imports, caches, the bytecode's specialisation
            cycle(refs[i % len(refs)])
        freeze_startup_heap()  # as `numadra run` does once started
        samples: dict[str, list[tuple[int, int]]] = {"warm": [], "cold": []}
        for _ in range(args.passes):
            for mode, rounds in samples.items():
                for i in range(args.rounds):
                    if mode == "cold":
                        neighbour.evict()
                    rounds.append(cycle(refs[i % len(refs)]))
        driver.close()
        fetcher.close()
    finally:
        os.dup2(stderr, 2)
        os.close(devnull)
        neighbour.close()
        shutil.rmtree(root, ignore_errors=True)
    figures: dict[str, Any] = {mode: _summary(rounds) for mode, rounds in samples.items()}
    figures["cold_over_warm"] = {
        "prepare": round(figures["cold"]["prepare_cpu_p50_us"] / figures["warm"]["prepare_cpu_p50_us"], 2),
        "unprepare": round(
            figures["cold"]["unprepare_cpu_p50_us"] / figures["warm"]["unprepare_cpu_p50_us"], 2
        ),
    }
    figures["tree"] = str(args.tree.resolve()) if args.tree is not None else str(REPO)
    print(json.dumps(figures, indent=1))


if __name__ == "__main__":
    main()
