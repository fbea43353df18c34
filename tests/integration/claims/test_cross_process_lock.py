"""The cross-process lock around the journal sections only: reads overlap, journal writes do not."""

from __future__ import annotations

import fcntl
import multiprocessing
import os
import sys
import threading
from pathlib import Path

from driver.errors import JournalError
from driver.kube.types import JsonObject
from driver.kubelet.serialize import SerializeLock
from driver.plugin import ClaimRef
from driver.state.journal import Journal, journal_path
from tests.integration.claims._world import World, claim, cpu_result

CLAIMS_PER_PROCESS = 6
#: a worker's exit code when its journal refused a write (any other failure exits 1)
JOURNAL_REFUSED = 3


def _share(i: int) -> str:
    return f"66666666-0000-4000-8000-{i:012d}"


def _claims(world: World, first: int) -> list[ClaimRef]:
    """Claims of one exclusive CPU each (node 0 and 1 alternating), numbered from ``first``."""
    return [
        world.getter.add(
            claim(f"u-{i}", f"c-{i}", results=[cpu_result("cpu", 1, node=i % 2, share=_share(i))])
        )
        for i in range(first, first + CLAIMS_PER_PROCESS)
    ]


def _worker(root: str, first: int, locked: bool, start: multiprocessing.synchronize.Event) -> None:
    """One driver process: prepare its claims one call each, as fast as it can."""
    world = World(Path(root))
    world.getter.delay = 0.002  # an apiserver round trip, during which the other process works
    refs = _claims(world, first)
    lock = SerializeLock(world.plugin_dir / "serialize.lock")
    lock.open()
    drv = world.driver(serialize=lock.hold if locked else None)
    start.wait(10)
    try:
        for ref in refs:
            result = drv.prepare_claims([ref])[ref.uid]
            if not result.ok:
                raise SystemExit(f"{ref.uid}: {result.error}")
    except JournalError as exc:
        sys.stderr.write(f"journal: {exc}\n")
        raise SystemExit(JOURNAL_REFUSED) from exc
    finally:
        drv.close()
        lock.close()


def _run_two(root: Path, locked: bool) -> list[int | None]:
    ctx = multiprocessing.get_context("fork")
    start = ctx.Event()
    procs = [ctx.Process(target=_worker, args=(str(root), first, locked, start)) for first in (0, 100)]
    for proc in procs:
        proc.start()
    start.set()
    for proc in procs:
        proc.join(60)
    return [proc.exitcode for proc in procs]


def test_two_processes_prepare_at_once_and_lose_nothing(tmp_path: Path) -> None:
    """Rolling update under load: both processes' claims end up journaled, on distinct CPUs."""
    (tmp_path / "plugin").mkdir()
    assert _run_two(tmp_path, locked=True) == [0, 0]
    journal = Journal(journal_path(tmp_path / "plugin"), read_only=True)
    journal.load()
    entries = list(journal.entries())
    assert len(entries) == 2 * CLAIMS_PER_PROCESS
    cpus = [cpu for e in entries if e.pinning is not None for cpu in e.pinning.cpus]
    assert len(cpus) == len(set(cpus)) == 2 * CLAIMS_PER_PROCESS


def test_without_the_lock_a_racing_writer_is_refused_not_merged(tmp_path: Path) -> None:
    """Proof the test above needs the lock: unlocked, a process finds the journal changed under it."""
    # a race: give it chances to show. Each try starts from an empty plugin dir: in one already
    # holding the claims, the prepares are repeats that append nothing, and cannot race.
    for attempt in range(20):
        root = tmp_path / f"try-{attempt}"
        (root / "plugin").mkdir(parents=True)
        codes = _run_two(root, locked=False)
        if codes != [0, 0]:
            break
    assert JOURNAL_REFUSED in codes, codes  # refused by the journal, not failed otherwise


def test_claim_reads_happen_outside_the_lock(world: World) -> None:
    """While another process holds the flock, a prepare already reads its claim, then waits."""
    ref = _claims(world, 0)[0]
    lock = SerializeLock(world.plugin_dir / "serialize.lock")
    world.plugin_dir.mkdir(parents=True)
    lock.open()
    read = threading.Event()
    getter_get = world.getter.get_resource_claim

    def get(namespace: str, name: str) -> JsonObject:
        read.set()
        return getter_get(namespace, name)

    world.getter.get_resource_claim = get  # type: ignore[method-assign]
    drv = world.driver(serialize=lock.hold)
    other = os.open(world.plugin_dir / "serialize.lock", os.O_RDWR)  # "the other process"
    fcntl.flock(other, fcntl.LOCK_EX)
    results: dict[str, bool] = {}
    caller = threading.Thread(target=lambda: results.update(ok=drv.prepare_claims([ref])[ref.uid].ok))
    try:
        caller.start()
        assert read.wait(5), "the claim was not read while the lock was held elsewhere"
        caller.join(0.3)
        assert caller.is_alive(), "prepared without the lock"
        assert Journal(journal_path(world.plugin_dir), read_only=True).path.exists() is False
    finally:
        fcntl.flock(other, fcntl.LOCK_UN)
        os.close(other)
    caller.join(5)
    assert results == {"ok": True}
    drv.close()
    lock.close()


def test_unprepare_takes_the_lock(world: World) -> None:
    """Unprepare also waits for the other process's flock (the start-up reconcile does too: app.py
    holds it there, see tests/integration/run/test_app.py)."""
    world.plugin_dir.mkdir(parents=True)
    lock = SerializeLock(world.plugin_dir / "serialize.lock")
    lock.open()
    drv = world.driver(serialize=lock.hold)
    other = os.open(world.plugin_dir / "serialize.lock", os.O_RDWR)
    fcntl.flock(other, fcntl.LOCK_EX)
    target = lambda: drv.unprepare_claims([ClaimRef("default", "c-1", "u-1")])  # noqa: E731
    caller = threading.Thread(target=target)
    try:
        caller.start()
        caller.join(0.3)
        assert caller.is_alive()
    finally:
        fcntl.flock(other, fcntl.LOCK_UN)
        os.close(other)
    caller.join(5)
    assert not caller.is_alive()
    drv.close()
    lock.close()
