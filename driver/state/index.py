"""A cached read model of the journal: what other components ask about prepared claims.

The health stream names the CDI IDs of prepared devices, the NRI plugin checks a container's
marker against its claim's pinning, the node shared pool excludes claimed CPUs, and the metrics
count prepared claims. All of that is derived from the journal's entries; this module keeps the
derived copy so that none of those callers reads the journal on its own path.

The pinning backends see a claim as a :class:`~driver.pinning.types.PreparedClaimView`, made
here by :func:`prepared_view`: pinning sits below state and must not know the journal's record.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

from driver.pinning.types import PreparedClaimView

if TYPE_CHECKING:
    from driver.pinning.types import ClaimPinning
    from driver.state.entry import JournalEntry
    from driver.state.journal import ChangeMark

    #: ``ClaimsDriver.journal_changes``: (the new mark, the changed entries or None for "read all")
    ChangeFeed = Callable[[ChangeMark | None], tuple[ChangeMark, Mapping[str, JournalEntry | None] | None]]

__all__ = ["PreparedIndex", "prepared_view"]


def prepared_view(entry: JournalEntry) -> PreparedClaimView:
    """What the pinning backends read about one journaled claim."""
    return PreparedClaimView(
        claim_uid=entry.uid,
        namespace=entry.namespace,
        name=entry.name,
        pods=None if entry.reserved_pods is None else frozenset(entry.reserved_pods),
        pinning=entry.pinning,
        device_names=tuple(d.device_name for d in entry.devices),
        request_devices=tuple(
            (name.split("/")[0], d.device_name) for d in entry.devices for name in d.request_names
        ),
        adopted=entry.adopted,
        pod_groups=entry.reserved_groups,
    )


class PreparedIndex:
    """What other components need to know about prepared claims, read from the journal.

    The health stream names the CDI IDs of prepared devices, the NRI plugin checks a container's
    marker against its claim's pinning, and the node shared pool excludes claimed CPUs. Reading the
    journal on each of those calls would contend with prepares, so this keeps a copy that is
    marked stale after every prepare/unprepare and refreshed off the RPC path; a pinning lookup
    that misses and the claimed CPUs refresh at once, because a container may be created right
    after its prepare.
    """

    def __init__(self, source: Callable[[], Sequence[JournalEntry]], changes: ChangeFeed) -> None:
        """``source``: every journaled entry; ``changes``: the journal's change feed
        (``ClaimsDriver.journal_changes``), so a refresh reads only the claims that changed, and
        ``source`` only when the feed cannot say."""
        self._source = source
        self._changes = changes
        self._mark: ChangeMark | None = None
        self._lock = threading.Lock()
        #: one refresh at a time: otherwise a refresh that read the journal earlier could store
        #: its older copy over a later one's, and the index would stay behind until the next change
        self._refresh_lock = threading.Lock()
        self._stale = True
        self._pinning: dict[str, ClaimPinning | None] = {}
        self._views: dict[str, PreparedClaimView] = {}
        self._claimed: frozenset[int] | None = frozenset()  # the keys of _cpu_holds; None: stale
        # what the last refresh indexed (changed under both locks, read under ``_lock``): each
        # entry as it was (entries are immutable, so "the same object" means "unchanged"), each
        # device's CDI IDs per claim, and how many claims hold each CPU
        self._indexed: dict[str, JournalEntry] = {}
        self._device_uses: dict[str, dict[str, tuple[str, ...]]] = {}
        self._cpu_holds: dict[int, int] = {}

    @property
    def stale(self) -> bool:
        """True when a prepare or unprepare happened since the last refresh."""
        return self._stale

    def invalidate(self) -> None:
        """Note that the journal changed."""
        self._stale = True

    def refresh(self) -> None:
        """Catch up with the journal (through the claims driver, under its lock).

        Only the entries that changed since the last refresh are indexed again: a refresh follows
        every prepare and unprepare, and rebuilding every claim's view each time made a call's
        cost grow with the claims the node holds (bench/fill.py draws it). The journal's change
        feed names the changed claims; when it cannot say (the first refresh, the journal read
        anew, more changes than it keeps), the refresh reads every entry and finds the changed ones
        by identity (the journal hands out the same entry object while it is unchanged).
        """
        with self._refresh_lock:
            self._stale = False
            self._mark, fed = self._changes(self._mark)
            if fed is not None:
                delta = dict(fed)
            else:
                self._mark, delta = self._everything()
            changed = [(uid, entry) for uid, entry in delta.items() if self._indexed.get(uid) is not entry]
            if changed:
                self._apply(changed)

    def _everything(self) -> tuple[ChangeMark, dict[str, JournalEntry | None]]:
        """Every entry as a change (the gone ones as None), and the feed's mark read before them:
        a change made meanwhile is fed again next time, which the identity test makes harmless."""
        mark, _ = self._changes(None)
        current: dict[str, JournalEntry | None] = {entry.uid: entry for entry in self._source()}
        for uid in self._indexed:
            current.setdefault(uid, None)
        return mark, current

    def _apply(self, changed: list[tuple[str, JournalEntry | None]]) -> None:
        """Index the changed entries, in place under the readers' lock: a change costs what its
        claims cost, never a copy of every claim's view (the lock is held for those claims alone)."""
        with self._lock:
            for uid, entry in changed:
                old = self._indexed.pop(uid, None)
                if old is not None:
                    self._views.pop(uid, None)
                    self._pinning.pop(uid, None)
                    self._forget(old)
                if entry is not None:
                    self._indexed[uid] = entry
                    self._views[uid] = prepared_view(entry)
                    self._pinning[uid] = entry.pinning
                    self._learn(entry)
            self._claimed = None

    def _forget(self, old: JournalEntry) -> None:
        """Take ``old``'s devices and CPUs out of the counts."""
        for cpu in old.pinning.cpus if old.pinning is not None else ():
            left = self._cpu_holds.get(cpu, 0) - 1
            if left > 0:
                self._cpu_holds[cpu] = left
            else:
                self._cpu_holds.pop(cpu, None)
        for dev in old.devices:
            uses = self._device_uses.get(dev.device_name)
            if uses is not None:
                uses.pop(old.uid, None)
                if not uses:
                    del self._device_uses[dev.device_name]

    def _learn(self, entry: JournalEntry) -> None:
        """Count ``entry``'s devices and CPUs in."""
        for cpu in entry.pinning.cpus if entry.pinning is not None else ():
            self._cpu_holds[cpu] = self._cpu_holds.get(cpu, 0) + 1
        ids: dict[str, list[str]] = {}
        for dev in entry.devices:
            ids.setdefault(dev.device_name, []).extend(dev.cdi_device_ids)
        for name, found in ids.items():
            self._device_uses.setdefault(name, {})[entry.uid] = tuple(found)

    def cdi_ids(self, device_name: str) -> tuple[str, ...]:
        """CDI IDs of every prepared use of a device (cached; the health stream calls this)."""
        with self._lock:
            uses = self._device_uses.get(device_name)
            return tuple(i for ids in uses.values() for i in ids) if uses else ()

    def pinning(self, claim_uid: str) -> ClaimPinning | None:
        """The pinning of a prepared claim; refreshes once when unknown or stale."""
        with self._lock:
            known = claim_uid in self._pinning
            found = self._pinning.get(claim_uid)
        if known and not self._stale:
            return found
        self.refresh()
        with self._lock:
            return self._pinning.get(claim_uid)

    def view(self, claim_uid: str) -> PreparedClaimView | None:
        """What the pinning backends read about a prepared claim (the NRI plugin's binding check);
        refreshes once when unknown or stale, like :meth:`pinning`."""
        with self._lock:
            found = self._views.get(claim_uid)
        if found is not None and not self._stale:
            return found
        self.refresh()
        with self._lock:
            return self._views.get(claim_uid)

    def views(self) -> list[PreparedClaimView]:
        """Every prepared claim (as of the last refresh), in UID order."""
        with self._lock:
            return [self._views[uid] for uid in sorted(self._views)]

    def claimed_cpus(self) -> frozenset[int]:
        """CPUs held by prepared claims; refreshes first when stale: the node's shared pool is
        made of the CPUs no claim holds, and a container may start right after a prepare."""
        if self._stale:
            self.refresh()
        with self._lock:
            if self._claimed is None:  # made once per change, when asked
                self._claimed = frozenset(self._cpu_holds)
            return self._claimed

    def count(self) -> int:
        """Prepared claims (as of the last refresh)."""
        with self._lock:
            return len(self._pinning)
