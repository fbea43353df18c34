"""The small parts of the composition root: prepared-claims index, metered plugin, async status writer."""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from driver.app import AsyncStatusWriter, MeteredPlugin, PreparedIndex
from driver.inventory.model import Inventory
from driver.observability import Metrics
from driver.pinning.types import ClaimPinning, CpuAssignment, CpuMode
from driver.plugin import ClaimRef, PreparedDevice
from driver.state.journal import JournalEntry
from driver.testing.fakeplugin import FakePlugin


def _entry(uid: str, device: str, cpus: frozenset[int] = frozenset()) -> JournalEntry:
    pinning = None
    if cpus:
        pinning = ClaimPinning(uid, (CpuAssignment("cpus", CpuMode.EXCLUSIVE, cpus, frozenset({0})),))
    dev = PreparedDevice(("gpu",), "node", device, (f"numadra.dev/claim={uid}-{device}",))
    return JournalEntry(namespace="ns", name=f"c-{uid}", uid=uid, devices=(dev,), pinning=pinning)


class _Journal:
    """A list of entries standing in for ClaimsDriver.prepared_claims, counting reads."""

    def __init__(self, *entries: JournalEntry) -> None:
        self.entries = list(entries)
        self.reads = 0

    def __call__(self) -> list[JournalEntry]:
        self.reads += 1
        return list(self.entries)


def test_index_serves_cdi_ids_and_claimed_cpus_from_the_last_refresh() -> None:
    """Cached lookups do not read the journal; a refresh picks up changes."""
    journal = _Journal(_entry("a", "gpu-1", frozenset({2, 3})), _entry("b", "gpu-1"))
    index = PreparedIndex(journal)
    index.refresh()
    assert index.cdi_ids("gpu-1") == ("numadra.dev/claim=a-gpu-1", "numadra.dev/claim=b-gpu-1")
    assert index.cdi_ids("gpu-9") == ()
    assert index.claimed_cpus() == frozenset({2, 3})
    assert index.count() == 2
    journal.entries.pop(0)
    assert index.count() == 2  # not refreshed yet
    assert journal.reads == 1
    index.invalidate()
    assert index.stale
    index.refresh()
    assert index.count() == 1
    assert index.claimed_cpus() == frozenset()


def test_pinning_lookup_refreshes_on_a_miss() -> None:
    """A container may be created right after its prepare: an unknown claim triggers one refresh."""
    journal = _Journal()
    index = PreparedIndex(journal)
    index.refresh()
    journal.entries.append(_entry("new", "gpu-1", frozenset({7})))
    found = index.pinning("new")
    assert found is not None
    assert found.cpus == frozenset({7})
    reads = journal.reads
    assert index.pinning("new") is found  # known and fresh: no read
    assert journal.reads == reads
    assert index.pinning("never") is None


def test_pinning_lookup_refreshes_when_stale() -> None:
    """After an unprepare (stale), a known claim is looked up again rather than answered from cache."""
    journal = _Journal(_entry("gone", "gpu-1", frozenset({1})))
    index = PreparedIndex(journal)
    index.refresh()
    journal.entries.clear()
    index.invalidate()
    assert index.pinning("gone") is None


@pytest.mark.parametrize(
    ("names", "successes", "errors"),
    [
        pytest.param(("ok-1", "ok-2"), 2, 0, id="all-ok"),
        pytest.param(("ok-1", "fail-2"), 1, 1, id="one-bad"),
    ],
)
def test_metered_plugin_counts_each_claim(names: tuple[str, ...], successes: int, errors: int) -> None:
    """Every claim of a call is one observation with the call's result; the change hook fires."""
    changes: list[int] = []
    plugin = MeteredPlugin(FakePlugin(), lambda: changes.append(1))
    metrics = Metrics()
    plugin.metrics = metrics
    refs = [ClaimRef("ns", name, f"uid-{name}") for name in names]
    results = plugin.prepare_claims(refs)
    assert set(results) == {r.uid for r in refs}
    assert metrics.sample("numadra_prepare_total", {"result": "success"}) == successes
    assert metrics.sample("numadra_prepare_total", {"result": "error"}) == errors
    plugin.unprepare_claims(refs)
    assert metrics.sample("numadra_unprepare_total", {"result": "success"}) == successes
    assert metrics.sample("numadra_unprepare_total", {"result": "error"}) == errors
    assert len(changes) == 2


def test_metered_plugin_counts_errors_when_the_call_raises() -> None:
    """An infrastructure failure (raise) counts every claim as an error and still notes the change."""
    changes: list[int] = []
    plugin = MeteredPlugin(FakePlugin(), lambda: changes.append(1))
    plugin.metrics = Metrics()
    with pytest.raises(RuntimeError):
        plugin.prepare_claims([ClaimRef("ns", "raise-1", "u1"), ClaimRef("ns", "ok", "u2")])
    assert plugin.metrics.sample("numadra_prepare_total", {"result": "error"}) == 2
    assert changes == [1]


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

    def clear(self, namespace: str, name: str) -> None:
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


def test_index_refreshes_never_let_an_older_read_win() -> None:
    """Two overlapping refreshes: the one that read the journal last is what the index keeps."""
    entries = [_entry("a", "gpu-1")]
    first_read = threading.Event()
    release_first = threading.Event()
    calls: list[int] = []

    def source() -> list[JournalEntry]:
        calls.append(1)
        snapshot = list(entries)
        if len(calls) == 1:  # the first refresh read the old journal and is then held up
            first_read.set()
            release_first.wait(5)
        return snapshot

    index = PreparedIndex(source)
    slow = threading.Thread(target=index.refresh)
    slow.start()
    assert first_read.wait(5)
    entries.append(_entry("b", "gpu-2"))  # a prepare landed after the first read
    fast = threading.Thread(target=index.refresh)
    fast.start()
    fast.join(0.5)
    release_first.set()
    slow.join(5)
    fast.join(5)
    assert index.count() == 2
    assert index.cdi_ids("gpu-2") == ("numadra.dev/claim=b-gpu-2",)
