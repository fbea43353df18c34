"""The async claim status writer: one worker, call order kept, transient failures tried again."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any, cast

import pytest
from structlog.testing import capture_logs

from driver.claims.statusqueue import AsyncStatusWriter
from driver.errors import KubeError
from driver.inventory.model import Inventory
from driver.plugin import PreparedDevice


class _RecordingWriter:
    def __init__(self, fail_on: str = "") -> None:
        self.calls: list[tuple[str, str]] = []
        self.fail_on = fail_on
        self.done = threading.Event()

    def report_prepared(self, claim: Mapping[str, Any], devices: Sequence[PreparedDevice]) -> None:
        name = claim["metadata"]["name"]
        if name == self.fail_on:
            raise RuntimeError("apiserver said no")
        self.calls.append(("report", name))

    def clear(self, namespace: str, name: str, uid: str = "") -> None:
        if name == self.fail_on:
            raise RuntimeError("apiserver said no")
        self.calls.append(("clear", name))
        self.done.set()

    def set_inventory(self, inventory: Inventory) -> None:
        self.calls.append(("inventory", str(len(inventory.gpus))))


def test_async_status_writer_keeps_order_and_survives_failures() -> None:
    """Writes happen off the caller's thread in call order; one failing write does not stop the rest."""
    writer = _RecordingWriter(fail_on="bad")
    built: list[int] = []

    def factory() -> Any:
        built.append(1)
        return writer

    status = AsyncStatusWriter(factory)
    assert built == []  # nothing queued: the real writer is not built yet
    status.report_prepared({"metadata": {"name": "bad"}}, ())
    status.report_prepared({"metadata": {"name": "a"}}, ())
    status.set_inventory(Inventory())
    status.clear("ns", "a")
    assert writer.done.wait(5)
    status.close()
    assert writer.calls == [("report", "a"), ("inventory", "0"), ("clear", "a")]
    assert built == [1]


def test_async_status_writer_names_the_claim_of_a_failed_write() -> None:
    """A failed write is logged with the claim's UID and name (the log rule for claim lines)."""
    writer = _RecordingWriter(fail_on="bad")
    status = AsyncStatusWriter(lambda: cast(Any, writer))
    with capture_logs() as logs:
        status.report_prepared({"metadata": {"name": "bad", "namespace": "ns", "uid": "uid-bad"}}, ())
        status.clear("ns", "a")
        assert writer.done.wait(5)
        status.close()
    failed = [e for e in logs if e["event"] == "claim status write failed"]
    assert len(failed) == 1
    assert failed[0]["claim_uid"] == "uid-bad"
    assert failed[0]["claim"] == "ns/bad"
    assert failed[0]["error"] == "apiserver said no"


def test_async_status_writer_names_the_claim_of_a_failed_clear() -> None:
    """A failed clear (unprepare) is logged with the claim's UID too, not only its name."""
    writer = _RecordingWriter(fail_on="gone")
    status = AsyncStatusWriter(lambda: cast(Any, writer))
    with capture_logs() as logs:
        status.clear("ns", "gone", "uid-gone")
        status.clear("ns", "a", "uid-a")
        assert writer.done.wait(5)
        status.close()
    failed = [e for e in logs if e["event"] == "claim status write failed"]
    assert [(e["claim_uid"], e["claim"]) for e in failed] == [("uid-gone", "ns/gone")]


class _HeldWriter(_RecordingWriter):
    """Records calls; the report of claim "hold" waits for ``release``, keeping the rest queued."""

    def __init__(self) -> None:
        super().__init__()
        self.holding = threading.Event()
        self.release = threading.Event()

    def report_prepared(self, claim: Mapping[str, Any], devices: Sequence[PreparedDevice]) -> None:
        meta = claim["metadata"]
        if meta["name"] == "hold":
            self.holding.set()
            assert self.release.wait(5)
        generation = f"#{meta['generation']}" if "generation" in meta else ""
        self.calls.append(("report", f"{meta['name']}@{meta['uid']}{generation}"))


def _claim(name: str, uid: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "uid": uid}}


def _held() -> tuple[_HeldWriter, AsyncStatusWriter]:
    writer = _HeldWriter()
    status = AsyncStatusWriter(lambda: cast(Any, writer))
    status.report_prepared(_claim("hold", "u0"), ())
    assert writer.holding.wait(5)  # the worker is busy: whatever comes next stays queued
    return writer, status


def test_clear_drops_the_still_queued_report_of_its_claim() -> None:
    """Prepare then unprepare while the worker is busy: only the clear goes to the apiserver."""
    writer, status = _held()
    status.report_prepared(_claim("a", "u1"), ())
    status.report_prepared(_claim("b", "u2"), ())
    status.clear("ns", "a", "u1")
    writer.release.set()
    status.close()
    assert writer.calls == [("report", "hold@u0"), ("report", "b@u2"), ("clear", "a")]


def test_clear_of_another_claim_of_the_same_name_drops_nothing() -> None:
    """A claim deleted and made again under its name has another UID: its clear is not ours."""
    writer, status = _held()
    status.report_prepared(_claim("a", "u-new"), ())
    status.clear("ns", "a", "u-old")
    writer.release.set()
    status.close()
    assert writer.calls == [("report", "hold@u0"), ("report", "a@u-new"), ("clear", "a")]


def test_a_newer_report_replaces_the_queued_one() -> None:
    """Two reports of one claim queued: the newer is applied, once; a later prepare is kept."""
    writer, status = _held()
    first, second = _claim("a", "u1"), _claim("a", "u1")
    first["metadata"]["generation"], second["metadata"]["generation"] = 1, 2
    status.report_prepared(first, ())
    status.report_prepared(second, ())
    status.clear("ns", "b", "u2")
    writer.release.set()
    assert writer.done.wait(5)
    status.report_prepared(_claim("a", "u1"), ())  # the worker is idle: nothing to drop
    status.close()
    assert writer.calls == [("report", "hold@u0"), ("report", "a@u1#2"), ("clear", "b"), ("report", "a@u1")]


def test_a_report_being_written_is_not_dropped_by_its_clear() -> None:
    """Once the worker started a report, the clear queues behind it: both reach the apiserver."""
    writer, status = _held()
    status.clear("ns", "hold", "u0")
    writer.release.set()
    status.close()
    assert writer.calls == [("report", "hold@u0"), ("clear", "hold")]


class _FlakyWriter(_RecordingWriter):
    """Fails the first ``failures`` reports with ``error``, then records as usual."""

    def __init__(self, failures: int, error: KubeError) -> None:
        super().__init__()
        self.failures, self.error, self.tries = failures, error, 0

    def report_prepared(self, claim: Mapping[str, Any], devices: Sequence[PreparedDevice]) -> None:
        self.tries += 1
        if self.tries <= self.failures:
            raise self.error
        super().report_prepared(claim, devices)


UNREACHABLE = KubeError("apply: apiserver unreachable", status=None, transient=True)


def test_a_transient_failure_is_tried_again_until_the_write_lands() -> None:
    writer = _FlakyWriter(2, UNREACHABLE)
    status = AsyncStatusWriter(lambda: cast(Any, writer), attempts=3)
    status.report_prepared(_claim("a", "u1"), ())
    status.clear("ns", "b", "u2")
    assert writer.done.wait(5)
    status.close()
    assert (writer.tries, writer.calls) == (3, [("report", "a"), ("clear", "b")])


@pytest.mark.parametrize(
    ("error", "tries"),
    [
        pytest.param(UNREACHABLE, 3, id="transient-until-the-attempts-run-out"),
        pytest.param(KubeError("HTTP 422", status=422), 1, id="refused-for-good-once"),
    ],
)
def test_a_write_is_given_up_after_its_attempts_and_logged(error: KubeError, tries: int) -> None:
    """Never more tries than ``attempts``, and one try only for what will never succeed."""
    writer = _FlakyWriter(99, error)
    status = AsyncStatusWriter(lambda: cast(Any, writer), attempts=3)
    with capture_logs() as logs:
        status.report_prepared(_claim("a", "u1"), ())
        status.clear("ns", "b", "u2")
        assert writer.done.wait(5)
        status.close()
    failed = [e for e in logs if e["event"] == "claim status write failed"]
    assert writer.tries == tries
    assert [(e["claim_uid"], e["attempts"]) for e in failed] == [("u1", tries)]


def test_a_hung_apiserver_bounds_the_queue_and_drops_new_writes_naming_their_claim() -> None:
    """The writer is stuck on one write: later calls still return at once, the queue keeps its
    bound, and each write beyond it is logged with its claim, not held in memory."""
    writer = _HeldWriter()
    status = AsyncStatusWriter(lambda: cast(Any, writer), max_queued=3)
    status.report_prepared(_claim("hold", "u0"), ())
    assert writer.holding.wait(5)
    with capture_logs() as logs:
        for i in range(1, 9):
            status.report_prepared(_claim(f"c{i}", f"u{i}"), ())
        status.clear("ns", "c9", "u9")
    dropped = [e for e in logs if e["event"] == "claim status write dropped: queue full"]
    assert [(e["method"], e["claim_uid"]) for e in dropped] == [
        *(("report_prepared", f"u{i}") for i in range(4, 9)),
        ("clear", "u9"),
    ]
    writer.release.set()
    status.close()
    assert writer.calls == [("report", "hold@u0"), *(("report", f"c{i}@u{i}") for i in range(1, 4))]
