"""Adopted claims: entries rebuilt from the files on disk, checked against the apiserver.

When the journal loses a claim whose files are still on disk, the journal rebuilds its entry from
them (``driver.state.evidence``) and marks it ``adopted``: its devices and CPUs stay taken, which
is right for a claim a pod still uses. But the files do not say who the claim is reserved for,
and files can outlive their claim, or be planted: a CDI spec under a UID that never existed
would hold its GPU forever, since no kubelet will ever unprepare a claim it never prepared.

:class:`AdoptedClaims` runs a round every ``interval_s`` seconds over the entries whose consumers
are not known or that are adopted, reading each claim by its recorded name:

* the claim exists with the same UID: its ``status.reservedFor`` pods are recorded in the entry,
  so pinning binds them (and only them) without a read of its own;
* the apiserver **confirms** the claim gone (a 404 naming it, or its name holding a claim with
  another UID; see ``driver.claims.consumers``) for an adopted entry: once it has been gone for
  ``grace_s`` seconds, the entry is released as an unprepare would (files removed, devices and
  CPUs freed), logged as an error and counted (``numadra_adopted_claim_releases_total``). The
  grace leaves the kubelet time to unprepare a claim it did prepare (its reconcile loop runs
  every minute) before numadra frees what its pods may still run on;
* an outage, a timeout, a 403: nothing is decided, the next round asks again;
* an entry that records no name (rebuilt without its metadata file) cannot be checked: one error
  line names it, and it stays held, the safe side (``numadra state`` lists it).

Entries journaled by an older numadra (no pods recorded, not adopted) get their pods recorded
the same way, but are never released here: the kubelet prepared them and will unprepare them.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable
from contextlib import AbstractContextManager

from driver.claims.driver import ClaimsDriver
from driver.errors import ConsumersUnknownError, DriverError
from driver.log import get_logger
from driver.pinning.consumers import GONE_REASONS, ConsumerReader
from driver.plugin import ClaimRef
from driver.supervise import supervised, survived

__all__ = ["ADOPTED_RELEASE_REASONS", "AdoptedClaims"]

#: the ``reason`` label of ``numadra_adopted_claim_releases_total``
ADOPTED_RELEASE_REASONS = GONE_REASONS
#: seconds between two rounds
CHECK_INTERVAL_S = 30.0
#: seconds an adopted claim must have been confirmed gone before it is released
RELEASE_GRACE_S = 300.0

_log = get_logger("claims.adopted")


class AdoptedClaims:
    """Checks adopted and pod-less entries against the apiserver (see the module docstring)."""

    def __init__(
        self,
        claims: ClaimsDriver,
        reader: ConsumerReader,
        *,
        hold: Callable[[], AbstractContextManager[object]],
        on_change: Callable[[], None] = lambda: None,
        grace_s: float = RELEASE_GRACE_S,
        interval_s: float = CHECK_INTERVAL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._claims = claims
        self._reader = reader
        self._hold = hold
        self._on_change = on_change
        self._grace = grace_s
        self._interval = interval_s
        self._clock = clock
        #: claim UID -> when the apiserver first confirmed it gone (cleared when it answers it exists)
        self._gone_since: dict[str, float] = {}
        #: entries already named as impossible to check (one error line each)
        self._unverifiable: set[str] = set()
        #: adopted claims released, by reason (``ADOPTED_RELEASE_REASONS``)
        self.releases: Counter[str] = Counter(dict.fromkeys(ADOPTED_RELEASE_REASONS, 0))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle ------------------------------------------------------------------------------

    def start(self) -> None:
        """Run rounds on a thread of its own (``adopted-claims``), the first one at once."""
        thread = supervised("adopted-claims", self._loop)
        self._thread = thread
        thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """End the thread (a round in progress finishes its current claim)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.check()
            except DriverError as exc:
                _log.error("adopted claims check failed", error=str(exc))
            except Exception as exc:  # a bug in one round: logged and counted, the next round runs
                survived("adopted-claims", exc, event="adopted claims check failed")
            self._stop.wait(self._interval)

    # -- one round ------------------------------------------------------------------------------

    def check(self) -> None:
        """One round over the entries that are adopted or know no pods."""
        entries = [e for e in self._claims.prepared_claims() if e.adopted or e.reserved_pods is None]
        present = {e.uid for e in entries}
        for uid in [u for u in self._gone_since if u not in present]:
            del self._gone_since[uid]
        self._unverifiable &= present
        for entry in entries:
            if self._stop.is_set():
                return
            uid = entry.uid
            if not entry.namespace or not entry.name:
                if uid not in self._unverifiable:
                    self._unverifiable.add(uid)
                    _log.error(
                        "adopted claim cannot be checked against the apiserver: its name is not "
                        "recorded (rebuilt without its metadata file); it stays held, and no pod "
                        "is pinned for it. If no pod uses it, remove its files by hand",
                        claim_uid=uid,
                        devices=[d.device_name for d in entry.devices],
                    )
                continue
            try:
                got = self._reader(entry.namespace, entry.name, uid)
            except ConsumersUnknownError as exc:
                _log.warning("cannot check an adopted claim now", claim_uid=uid, error=str(exc))
                continue
            if got.exists:
                self._gone_since.pop(uid, None)
                if entry.reserved_pods is None or not got.pods <= set(entry.reserved_pods):
                    self._record(uid, got.pods)
                continue
            if not entry.adopted:
                continue  # prepared for the kubelet, which unprepares it
            now = self._clock()
            first = self._gone_since.setdefault(uid, now)
            if now - first < self._grace:
                if first == now:
                    _log.warning(
                        "adopted claim is gone from the apiserver; releasing it after the grace "
                        "period unless the kubelet unprepares it first",
                        claim_uid=uid,
                        claim=f"{entry.namespace}/{entry.name}",
                        detail=got.detail,
                        grace_s=self._grace,
                    )
                continue
            self._release(ClaimRef(entry.namespace, entry.name, uid), got.gone, got.detail)

    def _record(self, uid: str, pods: frozenset[str]) -> None:
        with self._hold():
            changed = self._claims.record_consumers(uid, pods)
        if changed:
            _log.info("recorded an adopted claim's consumers", claim_uid=uid, pods=sorted(pods))
            self._on_change()

    def _release(self, ref: ClaimRef, reason: str, detail: str) -> None:
        with self._hold():
            error = self._claims.release_adopted(ref)
        if error:
            _log.error("cannot release an adopted claim", claim_uid=ref.uid, error=error)
            return
        self._gone_since.pop(ref.uid, None)
        self.releases[reason] += 1
        _log.error(
            "released an adopted claim the apiserver confirms gone: its files are removed and its "
            "devices and CPUs free",
            claim_uid=ref.uid,
            claim=f"{ref.namespace}/{ref.name}",
            reason=reason,
            detail=detail,
        )
        self._on_change()
