"""The prepared-claims index: cached lookups, refresh on miss or staleness, serialized refreshes."""

from __future__ import annotations

import tempfile
import threading
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from driver.pinning.types import ClaimPinning, CpuAssignment, CpuMode
from driver.plugin import PreparedDevice
from driver.state.entry import JournalEntry
from driver.state.index import PreparedIndex, prepared_view
from driver.state.journal import MAX_FED_CHANGES, ChangeMark, Journal, journal_path


def _entry(uid: str, device: str, cpus: frozenset[int] = frozenset()) -> JournalEntry:
    pinning = None
    if cpus:
        pinning = ClaimPinning(uid, (CpuAssignment("cpus", CpuMode.EXCLUSIVE, cpus, frozenset({0})),))
    dev = PreparedDevice(("gpu",), "node", device, (f"numadra.dev/claim={uid}-{device}",))
    return JournalEntry(namespace="ns", name=f"c-{uid}", uid=uid, devices=(dev,), pinning=pinning)


def _cannot_say(mark: ChangeMark | None) -> tuple[ChangeMark, None]:
    """A change feed that never knows what changed (as a journal just read anew): every refresh
    reads every entry and finds the changed ones by identity."""
    return (0, 0), None


class _Journal:
    """A list of entries standing in for ClaimsDriver.prepared_claims, counting reads."""

    def __init__(self, *entries: JournalEntry) -> None:
        self.entries = list(entries)
        self.reads = 0

    def __call__(self) -> list[JournalEntry]:
        self.reads += 1
        return list(self.entries)


def _index(source: Callable[[], list[JournalEntry]]) -> PreparedIndex:
    """An index over a list of entries, whose feed cannot say (:func:`_cannot_say`)."""
    return PreparedIndex(source, _cannot_say)


def test_index_serves_cdi_ids_and_claimed_cpus_from_the_last_refresh() -> None:
    """Cached lookups do not read the journal; a refresh picks up changes."""
    journal = _Journal(_entry("a", "gpu-1", frozenset({2, 3})), _entry("b", "gpu-1"))
    index = _index(journal)
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
    index = _index(journal)
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
    index = _index(journal)
    index.refresh()
    journal.entries.clear()
    index.invalidate()
    assert index.pinning("gone") is None


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

    index = _index(source)
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


def test_views_are_what_pinning_reads_of_each_entry() -> None:
    """The read model pinning gets: names, pods (None when unknown), pinning, devices, adopted."""
    plain = _entry("a", "gpu-1", frozenset({2}))
    rebuilt = replace(_entry("b", "gpu-2"), reserved_pods=None, adopted=True)
    shared = replace(_entry("c", "gpu-3"), reserved_pods=("p1", "p2"))
    journal = _Journal(plain, rebuilt, shared)
    index = _index(journal)
    index.refresh()
    view = index.view("b")
    assert view is not None
    assert (view.claim_uid, view.namespace, view.name, view.pods, view.adopted) == (
        "b",
        "ns",
        "c-b",
        None,
        True,
    )
    assert view.device_names == ("gpu-2",)
    assert index.view("c") == prepared_view(shared)
    assert prepared_view(shared).pods == frozenset({"p1", "p2"})
    assert [v.claim_uid for v in index.views()] == ["a", "b", "c"]
    reads = journal.reads
    assert index.view("zz") is None and journal.reads == reads + 1  # a miss refreshes once


def test_claimed_cpus_refresh_a_stale_index() -> None:
    """The node's shared pool is every CPU no claim holds: a container started right after a
    prepare, before the housekeeping round, must not get the CPUs that prepare made exclusive."""
    journal = _Journal()
    index = _index(journal)
    index.refresh()
    journal.entries.append(_entry("new", "gpu-1", frozenset({4, 5})))
    index.invalidate()  # what every prepare does
    assert index.claimed_cpus() == frozenset({4, 5})
    assert not index.stale
    reads = journal.reads
    assert index.claimed_cpus() == frozenset({4, 5})
    assert journal.reads == reads  # fresh: served from the copy


_ops = st.lists(
    st.tuples(
        st.sampled_from(["put", "remove"]),
        st.sampled_from(["a", "b", "c", "d"]),
        st.sampled_from(["gpu-1", "gpu-2", "cpu-numa0"]),
        st.frozensets(st.integers(min_value=0, max_value=7), max_size=3),
    ),
    max_size=30,
)


def _snapshot(index: PreparedIndex) -> tuple[object, ...]:
    devices = {name: index.cdi_ids(name) for name in ("gpu-1", "gpu-2", "cpu-numa0")}
    uids = [v.claim_uid for v in index.views()]
    return (
        sorted((k, sorted(v)) for k, v in devices.items()),
        index.views(),
        index.claimed_cpus(),
        index.count(),
        {u: index.pinning(u) for u in uids},
    )


@settings(max_examples=120, deadline=None)
@given(ops=_ops)
def test_an_index_kept_up_to_date_equals_one_built_afresh(
    ops: list[tuple[str, str, str, frozenset[int]]],
) -> None:
    """Refreshing after each change indexes only what changed; the result is what a new index
    built from the same entries says, whatever the changes were (puts over puts, removes)."""
    journal = _Journal()
    kept = _index(journal)
    for op, uid, device, cpus in ops:
        journal.entries = [e for e in journal.entries if e.uid != uid]
        if op == "put":
            journal.entries.append(_entry(uid, device, cpus))
        kept.invalidate()
        kept.refresh()
        fresh = _index(_Journal(*journal.entries))
        fresh.refresh()
        assert _snapshot(kept) == _snapshot(fresh)


def test_a_refresh_reindexes_only_the_entries_that_changed() -> None:
    """An unchanged entry keeps its view object: a refresh after one prepare does not rebuild the
    other claims' views (what made each call cost more as the node filled)."""
    journal = _Journal(*(_entry(f"u{k}", f"gpu-{k}") for k in range(50)))
    index = _index(journal)
    index.refresh()
    before = {v.claim_uid: v for v in index.views()}
    journal.entries.append(_entry("new", "gpu-new", frozenset({1})))
    index.invalidate()
    index.refresh()
    after = {v.claim_uid: v for v in index.views()}
    assert all(after[uid] is view for uid, view in before.items())
    assert after["new"].claim_uid == "new" and index.claimed_cpus() == frozenset({1})


class _Fed:
    """A real journal behind both of the index's sources, counting whole reads."""

    def __init__(self, tmp: Path) -> None:
        self.journal = Journal(journal_path(tmp))
        self.journal.load()
        self.full_reads = 0

    def entries(self) -> list[JournalEntry]:
        self.full_reads += 1
        return list(self.journal.entries())

    def changes(self, mark: ChangeMark | None) -> tuple[ChangeMark, dict[str, JournalEntry | None] | None]:
        now, uids = self.journal.changes_since(mark)
        return now, None if uids is None else {uid: self.journal.get(uid) for uid in uids}


@settings(max_examples=60, deadline=None)
@given(ops=_ops)
def test_an_index_fed_by_the_journals_changes_equals_one_built_afresh(
    ops: list[tuple[str, str, str, frozenset[int]]],
) -> None:
    """With the journal's change feed a refresh reads only what changed, and still says what a new
    index over the same journal says; it reads every entry only once, at its first refresh."""
    with tempfile.TemporaryDirectory() as tmp:
        fed = _Fed(Path(tmp))
        kept = PreparedIndex(fed.entries, fed.changes)
        kept.refresh()
        for op, uid, device, cpus in ops:
            if op == "put":
                fed.journal.put(_entry(uid, device, cpus))
            else:
                fed.journal.remove(uid)
            kept.invalidate()
            kept.refresh()
            fresh = _index(lambda: list(fed.journal.entries()))
            fresh.refresh()
            assert _snapshot(kept) == _snapshot(fresh)
        assert fed.full_reads == 1


def test_a_reader_the_feed_left_behind_reads_every_entry(tmp_path: Path) -> None:
    """More changes than the feed keeps, or entries replaced wholesale: the index reads them all."""
    fed = _Fed(tmp_path)
    index = PreparedIndex(fed.entries, fed.changes)
    index.refresh()
    for k in range(MAX_FED_CHANGES + 1):
        fed.journal.put(_entry(f"u{k % 7}", "gpu-1", frozenset({k % 5})))
    index.invalidate()
    index.refresh()
    assert fed.full_reads == 2
    fresh = _index(lambda: list(fed.journal.entries()))
    fresh.refresh()
    assert _snapshot(index) == _snapshot(fresh)
    fed.journal.close()  # the next load reads the file from its start: the entries anew
    fed.journal.load()
    index.invalidate()
    index.refresh()
    assert fed.full_reads == 3
