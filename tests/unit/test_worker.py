"""The queue worker: bounded, never blocking the caller, in order, surviving its handler, closable."""

from __future__ import annotations

import itertools
import threading
from collections.abc import Iterator

import pytest
from structlog.testing import capture_logs

from driver.worker import QueueWorker

_names = itertools.count()


def _name() -> str:
    """A thread name no other test's worker has (the tests look threads up by name)."""
    return f"test-worker-{next(_names)}"


def _threads(name: str) -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == name]


class Gate:
    """A handler that records items and holds each one until :attr:`open` is set."""

    def __init__(self) -> None:
        self.seen: list[int] = []
        self.holding = threading.Event()
        self.open = threading.Event()

    def __call__(self, item: int) -> None:
        self.holding.set()
        assert self.open.wait(30)
        self.seen.append(item)


@pytest.fixture
def gate() -> Iterator[Gate]:
    g = Gate()
    yield g
    g.open.set()  # never leave a worker thread waiting behind a failed test


def test_items_are_handled_in_the_order_put() -> None:
    seen: list[int] = []
    worker: QueueWorker[int] = QueueWorker(_name(), seen.append, max_queued=100)
    assert all(worker.put(i) for i in range(100))
    assert worker.flush(10)
    assert seen == list(range(100))
    assert worker.close(10)


def test_a_full_queue_refuses_at_once_and_holds_no_more_than_its_bound(gate: Gate) -> None:
    """The handler is stuck on item 0: the queue takes its bound, then put() says False."""
    worker: QueueWorker[int] = QueueWorker(_name(), gate, max_queued=3)
    assert worker.put(0)
    assert gate.holding.wait(10)  # 0 is in hand, not queued
    assert [worker.put(i) for i in range(1, 7)] == [True, True, True, False, False, False]
    assert worker.backlog == 3
    gate.open.set()
    assert worker.flush(10)
    assert gate.seen == [0, 1, 2, 3]
    assert worker.put(7)  # room again
    assert worker.flush(10) and gate.seen[-1] == 7
    assert worker.close(10)


def test_close_handles_what_was_queued_and_ends_the_thread(gate: Gate) -> None:
    name = _name()
    worker: QueueWorker[int] = QueueWorker(name, gate, max_queued=10)
    for i in range(5):
        assert worker.put(i)
    assert gate.holding.wait(10)
    gate.open.set()
    assert worker.close(10)
    assert gate.seen == [0, 1, 2, 3, 4]
    assert _threads(name) == []


def test_close_is_idempotent_and_put_after_close_is_refused() -> None:
    seen: list[int] = []
    worker: QueueWorker[int] = QueueWorker(_name(), seen.append, max_queued=4)
    assert worker.put(1)
    assert worker.close(10)
    assert worker.close(10)
    assert worker.closed
    assert not worker.put(2)
    assert worker.flush(10)
    assert seen == [1]


def test_close_at_its_timeout_gives_up_the_rest_and_a_later_close_waits_for_the_end(gate: Gate) -> None:
    """A handler stuck on an item (a hung apiserver) cannot hold a stop longer than asked."""
    name = _name()
    worker: QueueWorker[int] = QueueWorker(name, gate, max_queued=10)
    for i in range(4):
        assert worker.put(i)
    assert gate.holding.wait(10)
    with capture_logs() as logs:
        assert not worker.close(0.05)  # 0 still in hand
    assert worker.given_up == 3
    assert [(e["event"], e["worker"], e["given_up"]) for e in logs] == [
        ("queue worker stopped with items left", name, 3)
    ]
    assert not worker.flush(1)  # what was queued will never be handled
    gate.open.set()
    assert worker.close(10)
    assert gate.seen == [0]
    assert _threads(name) == []


def test_flush_waits_for_what_was_queued_before(gate: Gate) -> None:
    worker: QueueWorker[int] = QueueWorker(_name(), gate, max_queued=10)
    assert worker.flush(0)  # nothing was ever queued
    for i in range(3):
        assert worker.put(i)
    assert gate.holding.wait(10)
    assert not worker.flush(0.05)  # still held
    gate.open.set()
    assert worker.flush(10)
    assert gate.seen == [0, 1, 2]
    assert worker.close(10)


def test_a_raising_handler_is_logged_with_the_workers_name_and_the_worker_goes_on() -> None:
    seen: list[int] = []

    def handler(item: int) -> None:
        if item == 2:
            raise RuntimeError("bad item")
        seen.append(item)

    name = _name()
    worker: QueueWorker[int] = QueueWorker(name, handler, max_queued=10)
    with capture_logs() as logs:
        for i in range(1, 4):
            assert worker.put(i)
        assert worker.flush(10)
    assert seen == [1, 3]
    (failed,) = [e for e in logs if e["event"] == "queue worker handler failed"]
    assert failed["worker"] == name and failed["log_level"] == "error"
    assert failed["exc_info"] is True
    assert worker.close(10)


def test_no_thread_before_the_first_item_and_one_after() -> None:
    """A node that never needs the worker never runs its thread; its name is the caller's."""
    name = _name()
    seen: list[int] = []
    worker: QueueWorker[int] = QueueWorker(name, seen.append, max_queued=2)
    assert _threads(name) == []
    assert worker.close(10)  # closing an idle worker starts nothing either
    assert _threads(name) == []

    started: QueueWorker[int] = QueueWorker(name, seen.append, max_queued=2)
    assert started.put(1)
    (thread,) = _threads(name)
    assert thread.daemon
    assert started.put(2) and len(_threads(name)) == 1
    assert started.close(10)
    assert seen == [1, 2]


def test_a_worker_needs_room_for_one_item() -> None:
    with pytest.raises(ValueError, match="queue worker w: max_queued must be at least 1, not 0"):
        QueueWorker[int]("w", print, max_queued=0)
