"""Pods learned to be a claim's consumers reach its journal entry off the runtime's path.

The NRI plugin calls :meth:`ConsumerRecords.record` while the runtime waits; the write takes the
cross-process lock a prepare may hold, so it happens on the records' own worker thread, under
``hold``, into the real journal of a real claims driver.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

from structlog.testing import capture_logs

from driver.claims import ClaimsDriver
from driver.claims.consumers import ConsumerRecords
from driver.state.journal import Journal, journal_path
from tests.integration.claims._world import World, claim, cpu_result

UID = "7a1c8a9e-0d1b-4c3a-9e8f-0000000000c1"
POD_1 = "0b6f3d52-1111-4c3a-9e8f-000000000001"
POD_2 = "0b6f3d52-2222-4c3a-9e8f-000000000002"


def _prepared(world: World) -> ClaimsDriver:
    """The claims driver of ``world`` with claim UID prepared, reserved for POD_1."""
    obj = claim(UID, "cpus", "ml", results=[cpu_result("main", 2)])
    obj["status"]["reservedFor"] = [{"resource": "pods", "name": "pod-1", "uid": POD_1}]
    served = world.driver()
    assert served.prepare_claims([world.getter.add(obj)])[UID].ok
    return served.inner


def _reserved_pods(world: World) -> tuple[str, ...] | None:
    journal = Journal(journal_path(world.plugin_dir), read_only=True)
    journal.load()
    entry = journal.get(UID)
    assert entry is not None
    return entry.reserved_pods


class Lock:
    """The cross-process lock as the records see it: who held it, and a gate to hold it shut."""

    def __init__(self) -> None:
        self.holders: list[str] = []
        self.fail_next: Exception | None = None
        self.open = threading.Event()
        self.open.set()
        self.waiting = threading.Event()

    @contextmanager
    def hold(self) -> Iterator[None]:
        self.waiting.set()
        assert self.open.wait(30)
        self.holders.append(threading.current_thread().name)
        if self.fail_next is not None:
            error, self.fail_next = self.fail_next, None
            raise error
        yield


def test_records_reach_the_entry_under_the_lock_on_the_records_thread(world: World) -> None:
    claims, lock, changes = _prepared(world), Lock(), []
    records = ConsumerRecords(claims, hold=lock.hold, on_change=lambda: changes.append(1))
    records.record(UID, frozenset({POD_2}))
    records.record(UID, frozenset({POD_2}))  # known by now: the entry is left as it is
    records.record("7a1c8a9e-0d1b-4c3a-9e8f-00000000dead", frozenset({POD_2}))  # unprepared: left alone
    assert records.flush()
    assert _reserved_pods(world) == (POD_1, POD_2)
    assert changes == [1]  # the index went stale once
    assert lock.holders == ["consumer-records"] * 3
    records.close()


def test_a_failed_write_is_logged_and_the_next_record_is_still_written(world: World) -> None:
    claims, lock = _prepared(world), Lock()
    lock.fail_next = OSError("lock file gone")
    records = ConsumerRecords(claims, hold=lock.hold)
    with capture_logs() as logs:
        records.record(UID, frozenset({"0b6f3d52-3333-4c3a-9e8f-000000000003"}))
        records.record(UID, frozenset({POD_2}))
        assert records.flush()
    failed = [e for e in logs if e["event"] == "cannot record the claim's consumers"]
    assert [(e["claim_uid"], e["error"]) for e in failed] == [(UID, "lock file gone")]
    assert _reserved_pods(world) == (POD_1, POD_2)
    records.close()


def test_a_full_queue_drops_the_record_and_never_holds_the_runtime(world: World) -> None:
    """A prepare holds the lock: the records wait behind it, the runtime's calls do not."""
    claims, lock = _prepared(world), Lock()
    lock.open.clear()
    records = ConsumerRecords(claims, hold=lock.hold, max_queued=1)
    with capture_logs() as logs:
        records.record(UID, frozenset({POD_2}))
        assert lock.waiting.wait(10)  # the first record waits for the lock
        records.record(UID, frozenset({POD_2}))  # queued
        records.record(UID, frozenset({"0b6f3d52-3333-4c3a-9e8f-000000000003"}))  # no room
    assert [(e["why"], e["claim_uid"]) for e in logs if e["event"] == "consumer record dropped"] == [
        ("queue full", UID)
    ]
    lock.open.set()
    assert records.flush()
    assert _reserved_pods(world) == (POD_1, POD_2)
    records.close()
    with capture_logs() as logs:
        records.record(UID, frozenset({"0b6f3d52-3333-4c3a-9e8f-000000000003"}))
    assert [e["why"] for e in logs if e["event"] == "consumer record dropped"] == ["closed"]
    assert _reserved_pods(world) == (POD_1, POD_2)


def test_an_unexpected_error_does_not_end_the_records_thread(world: World) -> None:
    """A bug in a callback (here ``on_change``) is logged with the worker's name; the records
    queued after it are still written, not left in a queue nobody serves."""
    claims, lock, calls = _prepared(world), Lock(), []

    def on_change() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("index gone")

    records = ConsumerRecords(claims, hold=lock.hold, on_change=on_change)
    with capture_logs() as logs:
        records.record(UID, frozenset({POD_2}))
        records.record(UID, frozenset({"0b6f3d52-3333-4c3a-9e8f-000000000003"}))
        assert records.flush()
    assert [e["worker"] for e in logs if e["event"] == "queue worker handler failed"] == ["consumer-records"]
    assert _reserved_pods(world) == (POD_1, POD_2, "0b6f3d52-3333-4c3a-9e8f-000000000003")
    assert len(calls) == 2
    records.close()
