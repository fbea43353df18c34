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
from collections import Counter
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from driver.pinning.types import PreparedClaimView

if TYPE_CHECKING:
    from driver.pinning.types import ClaimPinning
    from driver.state.entry import JournalEntry

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

    def __init__(self, source: Callable[[], Sequence[JournalEntry]]) -> None:
        self._source = source
        self._lock = threading.Lock()
        #: one refresh at a time: otherwise a refresh that read the journal earlier could store
        #: its older copy over a later one's, and the index would stay behind until the next change
        self._refresh_lock = threading.Lock()
        self._stale = True
        self._by_device: dict[str, tuple[str, ...]] = {}
        self._pinning: dict[str, ClaimPinning | None] = {}
        self._views: dict[str, PreparedClaimView] = {}
        self._claimed: frozenset[int] = frozenset()
        # what the last refresh indexed, kept by the refresh alone (under its lock): each entry as
        # it was (entries are immutable, so "the same object" means "unchanged"), each device's
        # CDI IDs per claim, and how many claims hold each CPU
        self._indexed: dict[str, JournalEntry] = {}
        self._device_uses: dict[str, dict[str, tuple[str, ...]]] = {}
        self._cpu_holds: Counter[int] = Counter()

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
        cost grow with the claims the node holds (bench/fill.py draws it). The journal hands out
        the same entry object while an entry is unchanged, so finding the changed ones is one
        identity test per claim.
        """
        with self._refresh_lock:
            self._stale = False
            current = {entry.uid: entry for entry in self._source()}
            gone = [old for uid, old in self._indexed.items() if current.get(uid) is not old]
            new = [entry for uid, entry in current.items() if self._indexed.get(uid) is not entry]
            if not gone and not new:
                return
            views, pinning = dict(self._views), dict(self._pinning)
            touched: set[str] = set()
            for old in gone:
                views.pop(old.uid, None)
                pinning.pop(old.uid, None)
                for dev in old.devices:
                    self._device_uses.get(dev.device_name, {}).pop(old.uid, None)
                    touched.add(dev.device_name)
                if old.pinning is not None:
                    self._cpu_holds.subtract(old.pinning.cpus)
            for entry in new:
                views[entry.uid] = prepared_view(entry)
                pinning[entry.uid] = entry.pinning
                ids: dict[str, list[str]] = {}
                for dev in entry.devices:
                    ids.setdefault(dev.device_name, []).extend(dev.cdi_device_ids)
                for name, found in ids.items():
                    self._device_uses.setdefault(name, {})[entry.uid] = tuple(found)
                    touched.add(name)
                if entry.pinning is not None:
                    self._cpu_holds.update(entry.pinning.cpus)
            by_device = dict(self._by_device)
            for name in touched:
                uses = self._device_uses.get(name)
                if uses:
                    by_device[name] = tuple(i for ids in uses.values() for i in ids)
                else:
                    by_device.pop(name, None)
                    self._device_uses.pop(name, None)
            self._cpu_holds = +self._cpu_holds  # drop the CPUs no claim holds any more
            claimed = frozenset(self._cpu_holds)
            self._indexed = current
            with self._lock:
                self._by_device = by_device
                self._pinning = pinning
                self._views = views
                self._claimed = claimed

    def cdi_ids(self, device_name: str) -> tuple[str, ...]:
        """CDI IDs of every prepared use of a device (cached; the health stream calls this)."""
        with self._lock:
            return self._by_device.get(device_name, ())

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
            return self._claimed

    def count(self) -> int:
        """Prepared claims (as of the last refresh)."""
        with self._lock:
            return len(self._pinning)
