"""The crash-safe journal of prepared claims: versioned, checksummed, append-only.

The kubelet calls unprepare with a bare (namespace, name, uid), possibly after the claim was
deleted, possibly in another process (rolling update), possibly after a reboot that emptied
``/var/run/cdi``. So everything needed to answer a repeated prepare, to undo a prepare, and to
re-create the files a reboot wiped lives here, keyed by claim UID: the devices returned to the
kubelet, every file written (path *and* content) and the claim's CPU pinning (the source of truth of
which CPUs are taken).

Storage (version 2, ``<plugin-dir>/state/journal.log``): the append-only log of
:mod:`driver.state.wal`. Each prepare/unprepare call appends one checksummed line holding only the
entries it changed, synced with one ``fdatasync``, so a call costs the same with 1 or 300 claims
prepared on the node, where rewriting one whole file would cost in proportion to them
(``bench/journal.py`` compares the two; bench/README.md). Entries are
stored as canonical JSON (``json.dumps(entry, sort_keys=True, separators=(",", ":"))``).

A version 1 journal (one ``state/journal.json`` rewritten whole, made only by unreleased builds)
is not read: a
``journal.json`` found on the first load is a :class:`JournalError` naming it, with the recovery
(move it aside: the cross-check below rebuilds the prepared claims from their files), never
silently ignored. A corrupt file or an unknown version is never "repaired" silently either:
:class:`JournalError` says what is wrong and how to recover.

State that cannot forget: with an :class:`~driver.state.evidence.Evidence` (the claims driver
passes one), every load that starts the log over (first load, or the file deleted, emptied,
replaced or cut shorter since the last one) cross-checks the entries against the files numadra
wrote for claims. A claim whose files are on disk but which the journal lacks was prepared and
acknowledged, and the journal lost it: its entry is rebuilt from those files and saved at once, so
its devices and CPUs stay taken until the kubelet unprepares it, and the loss is logged as an
error, counted in :attr:`Journal.recoveries` (the metric ``numadra_state_recoveries_total``) and
recorded in ``state/recoveries.log`` for ``numadra state``. An unchanged journal costs no scan.
A rebuilt entry is marked ``adopted`` and knows no pods: the files do not say who the claim is
reserved for, so pinning reads that from the apiserver before it pins any pod for it, and a claim
the apiserver confirms gone is released (``driver.claims.adopted``).
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter, deque
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from driver.errors import JournalError
from driver.log import get_logger
from driver.pinning.types import format_cpulist
from driver.state.entry import JournalEntry
from driver.state.wal import (
    NOTHING_NEW,
    RESET_DELETED,
    RESET_EMPTY,
    RESET_START,
    RESET_TRUNCATED,
    JournalLog,
    Put,
    journal_recovery_error,
)
from driver.untrusted.files import read_file
from driver.untrusted.values import loads_json

if TYPE_CHECKING:
    from driver.state.evidence import Evidence, Found

__all__ = [
    "JOURNAL_FILE",
    "JOURNAL_KIND",
    "JOURNAL_VERSION",
    "MAX_FED_CHANGES",
    "RECOVERIES_FILE",
    "STATE_RECOVERY_REASONS",
    "V1_JOURNAL_FILE",
    "ChangeMark",
    "Journal",
    "journal_path",
    "read_recoveries",
    "recovery_reason",
]

JOURNAL_KIND = "NumadraJournal"
#: the changes :meth:`Journal.changes_since` keeps; a reader further behind reads every entry
MAX_FED_CHANGES = 4096
#: where a reader of the change feed stands: (the entries' epoch, the number of its last change)
ChangeMark = tuple[int, int]
JOURNAL_VERSION = 2
JOURNAL_FILE = "journal.log"
#: the version 1 journal of unreleased builds: refused, not read
V1_JOURNAL_FILE = "journal.json"
#: one JSON line per claim rebuilt from evidence (``numadra state`` shows them)
RECOVERIES_FILE = "recoveries.log"
#: ``numadra state`` reads at most this much of it (a line per claim ever rebuilt)
_RECOVERIES_MAX_BYTES = 16 << 20
#: the ``reason`` label of ``numadra_state_recoveries_total``: why the journal lacked the claim
STATE_RECOVERY_REASONS = (
    "journal_missing",  # no journal at start, but files of prepared claims
    "journal_empty",  # a journal of zero bytes (numadra only ever creates it whole)
    "journal_deleted",  # deleted while the driver ran
    "journal_replaced",  # another file put in its place while the driver ran
    "journal_truncated",  # cut shorter while the driver ran
    "entry_missing",  # a readable journal that lacks the claim (an old copy restored, say)
)
_log = get_logger("state.journal")


def recovery_reason(reset: str) -> str:
    """The metric label for a claim rebuilt after a log reset of this kind (``wal.RESET_*``)."""
    return "entry_missing" if reset == RESET_START else f"journal_{reset}"


def read_recoveries(state_dir: Path) -> list[dict[str, Any]]:
    """The records of ``state/recoveries.log`` (oldest first; unreadable lines skipped)."""
    try:
        lines = read_file(state_dir / RECOVERIES_FILE, max_bytes=_RECOVERIES_MAX_BYTES).splitlines()
    except FileNotFoundError:
        return []
    out: list[dict[str, Any]] = []
    for line in lines:
        try:
            record = loads_json(line, what=RECOVERIES_FILE)
        except ValueError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out


def journal_path(plugin_dir: Path) -> Path:
    """Where the journal of a plugin directory lives: ``<plugin-dir>/state/journal.log``."""
    return plugin_dir / "state" / JOURNAL_FILE


def _canonical(body: Mapping[str, Any]) -> str:
    return json.dumps(body, sort_keys=True, separators=(",", ":"))


class Journal:
    """The journal file of one plugin directory, loaded into memory.

    Not thread safe on its own: the caller (``ClaimsDriver``) serialises prepare and unprepare, and
    holds a ``flock`` across processes around load-change-save. :meth:`load` reads only what other
    processes appended since (one ``stat`` when nothing changed), and :meth:`save` appends only the
    entries changed since the last save. ``read_only`` (``numadra state``): never write.

    The questions a prepare asks per claim (:meth:`holder`, :meth:`taken_cpus`) are answered from
    indexes kept with the entries, so they cost the same with 1 or 300 prepared claims.
    """

    def __init__(self, path: Path, *, read_only: bool = False, evidence: Evidence | None = None) -> None:
        self.path = path
        self.v1_path = path.with_name(V1_JOURNAL_FILE)
        self._v1_checked = False  # the first load looks for a version 1 file, once
        self.read_only = read_only
        self._evidence = evidence
        #: why a cross-check with the evidence is due ("" when none is): set by a log reset, done
        #: by the next load that may write (a reset seen by a read-only load is not forgotten)
        self._check_due = ""
        #: claims rebuilt from evidence since start, by reason (``STATE_RECOVERY_REASONS``)
        self.recoveries: Counter[str] = Counter()
        #: read-only journals: the claims the last cross-check found, not rebuilt (for display)
        self.unjournaled: list[Found] = []
        self._log = JournalLog(path)
        self._entries: dict[str, JournalEntry] = {}
        #: canonical JSON of each entry: what the log stores and compacts from
        self._text: dict[str, str] = {}
        #: changes since the last save: uid -> True (put) or False (removed)
        self._dirty: dict[str, bool] = {}
        #: (pool, device) of every unshared device -> the UIDs of the entries holding it
        self._holders: dict[tuple[str, str], list[str]] = {}
        #: CPU -> how many entries pin it (a multiset, so removing one entry is exact)
        self._cpu_users: dict[int, int] = {}
        self._taken: frozenset[int] | None = frozenset()  # the keys of _cpu_users; None: stale
        #: the change feed (:meth:`changes_since`): the entries' epoch (bumped when they are
        #: replaced wholesale), the number of the last change, and the last changes' claim UIDs
        self._epoch = 0
        self._seq = 0
        self._changes: deque[tuple[int, str]] = deque(maxlen=MAX_FED_CHANGES)

    def changes_since(self, mark: ChangeMark | None) -> tuple[ChangeMark, list[str] | None]:
        """The UIDs whose entries changed (put, replaced or removed) since ``mark``, and the mark
        of now; None for the UIDs when the caller must read every entry instead (no mark yet, the
        entries were replaced wholesale since, or more changed than the feed keeps).

        A reader that keeps a copy of the entries (``driver.state.index``) catches up with the
        claims that changed alone, so its cost does not grow with the claims the node holds.
        """
        now = (self._epoch, self._seq)
        if mark is None or mark[0] != self._epoch or mark[1] > self._seq:
            return now, None
        since = mark[1]
        if since == self._seq:
            return now, []
        if not self._changes or self._changes[0][0] > since + 1:
            return now, None  # the oldest change the caller needs fell off the feed
        uids: list[str] = []
        for seq, uid in reversed(self._changes):
            if seq <= since:
                break
            uids.append(uid)
        return now, list(dict.fromkeys(uids))

    def _changed(self, uid: str) -> None:
        self._seq += 1
        self._changes.append((self._seq, uid))

    def _index(self, entry: JournalEntry) -> None:
        uid = entry.uid
        self._changed(uid)
        for held in entry.devices:
            if held.share_id is None and held.device_name not in entry.admin_devices:
                self._holders.setdefault((held.pool_name, held.device_name), []).append(uid)
        if entry.pinning is not None:
            users = self._cpu_users
            for cpu in entry.pinning.cpus:
                users[cpu] = users.get(cpu, 0) + 1
            self._taken = None

    def _unindex(self, entry: JournalEntry) -> None:
        uid = entry.uid
        self._changed(uid)
        for held in entry.devices:
            if held.share_id is None and held.device_name not in entry.admin_devices:
                key = (held.pool_name, held.device_name)
                uids = self._holders.get(key)
                if uids is not None and uid in uids:
                    uids.remove(uid)
                    if not uids:
                        del self._holders[key]
        if entry.pinning is not None:
            users = self._cpu_users
            for cpu in entry.pinning.cpus:
                left = users.get(cpu, 0) - 1
                if left > 0:
                    users[cpu] = left
                else:
                    users.pop(cpu, None)
            self._taken = None

    def _reset(self, entries: dict[str, JournalEntry], texts: dict[str, str]) -> None:
        self._epoch += 1  # every reader of the change feed reads the entries anew
        self._changes.clear()
        self._entries, self._text, self._dirty = entries, texts, {}
        self._holders, self._cpu_users, self._taken = {}, {}, frozenset()
        for entry in entries.values():
            self._index(entry)

    def _recovery_error(self, problem: str, path: Path | None = None) -> JournalError:
        return journal_recovery_error(path or self.path, problem)

    def load(self, *, persist: bool = True) -> None:
        """Catch up with the file: what other processes appended since (nothing: one ``stat``).

        A missing file is an empty journal; a version 1 ``journal.json`` next to it is an error
        (see the module docstring). When the log started over, the entries are cross-checked with the evidence
        (module docstring); claims rebuilt from it are saved at once unless ``persist`` is False
        (a caller without the cross-process lock: the next load that persists does it). Raises
        :class:`JournalError` (with the recovery in the message) on an unreadable file, a checksum
        mismatch on a complete record, an unknown kind or version, a malformed entry, a symbolic
        link in place of the journal, or evidence of a lost claim that cannot be read.
        """
        try:
            if not self._v1_checked:
                if os.path.lexists(self.v1_path):
                    raise self._recovery_error(
                        f"is a version 1 journal, which this numadra does not read (its journal is "
                        f"{self.path.name}; version 1 was never released)",
                        self.v1_path,
                    )
                self._v1_checked = True
            replay = self._log.read()
        except OSError as exc:
            raise self._recovery_error(f"cannot be read ({exc.strerror or exc})") from exc
        if replay is NOTHING_NEW:  # the common case: no other process wrote since our last call
            if self._check_due:
                self._cross_check(persist)
            return
        if replay.reset:
            self._reset({}, {})
            if not self._check_due or self._check_due == RESET_START:
                self._check_due = replay.reason or RESET_START
        final: dict[str, Put | None] = {}  # a log not yet compacted may name a claim many times
        for op in replay.ops:
            final[op.uid] = op if isinstance(op, Put) else None
        for uid, put in final.items():
            if put is None:
                self._drop(uid)
                continue
            entry = self._parse_entry(uid, put.entry, self.path)
            self._drop(uid)
            self._entries[uid] = entry
            self._text[uid] = put.text
            self._index(entry)
        for uid in final:
            self._dirty.pop(uid, None)
        if self._check_due:
            self._cross_check(persist)

    def _cross_check(self, persist: bool) -> None:
        """Rebuild claims the evidence shows and the journal lacks (see the module docstring)."""
        if self._evidence is None:
            self._check_due = ""
            return
        found = self._evidence.unjournaled(self._entries)
        if self.read_only or not persist:
            self.unjournaled = found
            if self.read_only:
                self._check_due = ""
            return
        reason = recovery_reason(self._check_due)
        if self._check_due in (RESET_DELETED, RESET_TRUNCATED, RESET_EMPTY):
            # never silently: even when no prepared claim was lost (no files of one on disk)
            _log.error(
                "journal was damaged under numadra; cross-checked with the files of prepared claims",
                journal=str(self.path),
                what=self._check_due,
                rebuilt=len(found),
            )
        for item in found:
            self.put(item.entry)
        if found:
            try:
                self.save()
                self._record_recoveries(found, reason)
            except OSError as exc:
                raise self._recovery_error(
                    f"lost {len(found)} prepared claim(s) and cannot record them again ({exc})"
                ) from exc
        for item in found:
            entry = item.entry
            cpus = entry.pinning.cpus if entry.pinning is not None else frozenset()
            _log.error(
                "state lost: a prepared claim was missing from the journal; its entry was rebuilt "
                "from the files numadra wrote, so its devices and CPUs stay taken until it is "
                "unprepared",
                claim_uid=entry.uid,
                claim=f"{entry.namespace or '?'}/{entry.name or '?'}",
                devices=[d.device_name for d in entry.devices],
                cpus=format_cpulist(cpus),
                reason=reason,
                journal=str(self.path),
                evidence=list(item.paths),
            )
            self.recoveries[reason] += 1
        self._check_due = ""
        self.unjournaled = []

    def _record_recoveries(self, found: list[Found], reason: str) -> None:
        """Append one line per rebuilt claim to ``state/recoveries.log`` (0600, no link followed)."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        lines = []
        for item in found:
            entry = item.entry
            record = {
                "time": now,
                "uid": entry.uid,
                "claim": f"{entry.namespace}/{entry.name}" if entry.name else "",
                "reason": reason,
                "devices": [d.device_name for d in entry.devices],
                "cpus": format_cpulist(entry.pinning.cpus) if entry.pinning is not None else "",
                "evidence": list(item.paths),
            }
            lines.append(json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n")
        path = self.path.with_name(RECOVERIES_FILE)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.fchmod(fd, 0o600)
            os.write(fd, "".join(lines).encode())
            os.fsync(fd)
        finally:
            os.close(fd)

    def _parse_entry(self, uid: str, obj: Any, path: Path) -> JournalEntry:
        try:
            entry = JournalEntry.from_json(obj)
        except (KeyError, TypeError, ValueError) as exc:
            raise self._recovery_error(f"is corrupt (entry {uid!r}: {exc!r})", path) from exc
        if entry.uid != uid:
            raise self._recovery_error(f"is corrupt (entry {uid!r} has uid {entry.uid!r})", path)
        return entry

    def save(self) -> None:
        """Append the changes since the last save as one durable record (creating ``state/``).

        On an ``OSError`` the file is left as it was and the changes stay pending.
        """
        if self.read_only:
            raise JournalError(f"journal {self.path} was opened read-only")
        texts, puts, removes = self._text, {}, []
        for uid, put in self._dirty.items():
            if put:
                puts[uid] = texts[uid]
            else:
                removes.append(uid)
        self._log.append(puts, removes, texts)
        self._dirty = {}

    def close(self) -> None:
        """Close the log's file descriptors (the next load reads the file from its start)."""
        self._log.close()
        self._reset({}, {})

    def _drop(self, uid: str) -> bool:
        self._text.pop(uid, None)
        old = self._entries.pop(uid, None)
        if old is None:
            return False
        self._unindex(old)
        return True

    def get(self, uid: str) -> JournalEntry | None:
        """The entry of a claim, or None when it is not prepared."""
        return self._entries.get(uid)

    def put(self, entry: JournalEntry) -> None:
        """Add or replace the entry of ``entry.uid`` (in memory; call :meth:`save`)."""
        old = self._entries.get(entry.uid)
        if old is not None:
            self._unindex(old)
        self._entries[entry.uid] = entry
        self._text[entry.uid] = entry.json_text()
        self._index(entry)
        self._dirty[entry.uid] = True

    def remove(self, uid: str) -> bool:
        """Drop a claim's entry (in memory; call :meth:`save`); True when there was one."""
        if not self._drop(uid):
            return False
        self._dirty[uid] = False
        return True

    def entries(self) -> Iterator[JournalEntry]:
        """Every entry, in UID order."""
        for uid in sorted(self._entries):
            yield self._entries[uid]

    def holder(self, pool: str, device: str, *, except_uid: str = "") -> JournalEntry | None:
        """The claim (other than ``except_uid``) holding the whole, unshared device, if any.

        With several holders (only a damaged history makes that), the first in journal order.
        """
        uids = self._holders.get((pool, device))
        if not uids:
            return None
        if len(uids) == 1:
            return None if uids[0] == except_uid else self._entries[uids[0]]
        for uid in self._entries:
            if uid != except_uid and uid in uids:
                return self._entries[uid]
        return None

    def taken_cpus(self, *, except_uid: str = "") -> frozenset[int]:
        """CPUs pinned by every journaled claim other than ``except_uid``."""
        if self._taken is None:
            self._taken = frozenset(self._cpu_users)
        own = self._entries.get(except_uid)
        if own is None or own.pinning is None:
            return self._taken
        mine = own.pinning.cpus
        return frozenset(cpu for cpu, users in self._cpu_users.items() if users > 1 or cpu not in mine)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, uid: object) -> bool:
        return uid in self._entries
