"""``ClaimsDriver``: the :class:`~driver.plugin.DriverPlugin` behind the kubelet layer.

It receives claims the kubelet layer (:mod:`driver.kubelet.claims`) has already read from the
apiserver and checked (references, UID, allocation), and it is called under that layer's
cross-process lock; it reads nothing from the apiserver itself. One prepare call:

1. under this process's thread lock (the journal and the attribute cache are shared by the
   threads of the gRPC server): catch up with the journal, then per claim
   either answer from the journal (a repeat:
   same devices and CDI IDs, missing files re-created) or select devices, resolve config, plan CPU
   pinning (the journal says which CPUs other claims hold), render the CDI spec and metadata;
2. save the journal **once**, then write the files. The journal is the durable record (fsynced);
   specs and metadata are derived from it (written atomically without fsync, re-created by
   :meth:`ClaimsDriver.reconcile` after a crash or a reboot that emptied ``/var/run/cdi``, with
   their host paths checked again: the reboot emptied ``/tmp`` as well).

Every claim gets a result; a bad claim gets an error that names claim, request and device, and
never fails the others. Exceptions escape only for infrastructure failures (journal unreadable,
inventory unavailable), after which the kubelet retries the whole call.
"""

from __future__ import annotations

import contextlib
import threading
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import Any

from cdi import CheckedHostPath, DirsUnder, Mount, ensure_dir, remove_file, spec_from_json, spec_text
from cdi.spec import CdiSpecError
from driver.claims.attributes import PublishedAttributes
from driver.claims.hostedits import DeviceExtras
from driver.claims.metadata import (
    CONTAINER_DIR,
    METADATA_DIR,
    MetadataFile,
    checked_metadata_dir,
    metadata_dir,
    metadata_file_glob,
    metadata_files,
)
from driver.claims.parts import (
    NO_HOST_EDITS,
    NO_PINNING,
    NO_STATUS,
    NO_WARNINGS,
    DeviceHostEdits,
    PinPlanner,
    StatusWriter,
    UserspaceWarner,
)
from driver.claims.paths import dir_prefix
from driver.claims.render import CpuHook, claim_spec, claim_spec_file_name
from driver.claims.reservedfor import reserved_pod_groups, reserved_pods
from driver.claims.selection import (
    SHAREABLE_KINDS,
    ClaimView,
    aux_demand,
    cpu_requests,
    memory_nodes,
    select_devices,
    with_aux_cpus,
)
from driver.errors import ClaimError, CpuExhaustedError, PinningError, is_recoverable
from driver.inventory.model import DeviceKind, Gpu, Inventory
from driver.kube.types import JsonObject
from driver.log import get_logger
from driver.names import check_claim_uid
from driver.pinning.aux import NO_AUX_CPUS, AuxCpus
from driver.pinning.types import ClaimPinning, PodGroupRef
from driver.plugin import Claim, ClaimRef, PreparedDevice, PrepareResult, describe_claim
from driver.slices.ownership import Owner
from driver.state.entry import JournalEntry, StoredFile
from driver.state.journal import ChangeMark, Journal
from driver.untrusted.files import read_file
from driver.untrusted.hostpaths import CheckedDirs
from driver.untrusted.values import loads_json

__all__ = ["ClaimsDriver", "InventoryProvider", "PinPlanner", "StatusWriter"]

#: the kinds of device whose nodes and user space the host adds to a spec (not CPUs, not memory)
_HOST_EDITED = frozenset({DeviceKind.GPU, DeviceKind.NIC})

_log = get_logger("claims")

InventoryProvider = Callable[[], Inventory]


def _no_fatal(err: BaseException, msg: str) -> None:
    """No one to stop: the error was logged by :meth:`ClaimsDriver.handle_error` already."""


def _prepared_keys(entry: JournalEntry) -> dict[str, Any]:
    """What the "prepared" line says: the devices and, when pinned, each request's CPUs and nodes.

    The planner does not log on its own: one line per claim keeps a prepare cheap.
    """
    keys: dict[str, Any] = {"devices": [d.device_name for d in entry.devices]}
    if entry.reserved_pods is not None:
        keys["pods"] = list(entry.reserved_pods)
    if entry.reserved_groups:
        keys["pod_groups"] = [f"{g.name} (uid {g.uid})" for g in entry.reserved_groups]
    if entry.pinning is not None:
        keys["pinning"] = [a.log_fields() for a in entry.pinning.assignments]
    return keys


def _allocated_gpus(claims: Sequence[Claim], inventory: Inventory, driver_name: str) -> list[Gpu]:
    """The node's GPUs named by the claims' allocation results of this driver (unchecked: a
    result that names no GPU of the inventory, or is malformed, names none here; the prepare
    itself judges every result)."""
    gpus: list[Gpu] = []
    for claim in claims:
        status = claim.obj.get("status")
        allocation = status.get("allocation") if isinstance(status, dict) else None
        devices = allocation.get("devices") if isinstance(allocation, dict) else None
        results = devices.get("results") if isinstance(devices, dict) else None
        for result in results if isinstance(results, list) else ():
            if not isinstance(result, dict) or result.get("driver") != driver_name:
                continue
            name = result.get("device")
            found = inventory.find(name) if isinstance(name, str) else None
            if isinstance(found, Gpu):
                gpus.append(found)
    return gpus


def _own_ids(devices: Sequence[PreparedDevice]) -> list[PreparedDevice]:
    """The devices with numadra's own CDI ID only (render puts it last, after the toolkit's)."""
    return [replace(d, cdi_device_ids=d.cdi_device_ids[-1:]) for d in devices]


@dataclass(frozen=True, slots=True)
class _Planned:
    ref: ClaimRef
    claim: JsonObject
    entry: JournalEntry
    extras: DeviceExtras | None = None


class ClaimsDriver:
    """Prepares and unprepares claims of one driver on one node (see the module docstring)."""

    def __init__(
        self,
        *,
        driver_name: str,
        node_name: str,
        inventory: InventoryProvider,
        cdi_dir: Path,
        plugin_dir: Path,
        journal: Journal,
        planner: PinPlanner = NO_PINNING,
        status: StatusWriter = NO_STATUS,
        on_fatal: Callable[[BaseException, str], None] = _no_fatal,
        cpu_hook: CpuHook | None = None,
        numa_node_list: bool = False,
        host_edits: DeviceHostEdits = NO_HOST_EDITS,
        warnings: UserspaceWarner = NO_WARNINGS,
        withheld: Callable[[], Mapping[str, Owner]] = dict,
        aux_cpus: AuxCpus = NO_AUX_CPUS,
    ) -> None:
        """Every part is made by the caller (the builder); the optional ones default to the null
        objects of :mod:`driver.claims.parts`. ``journal``: :func:`~driver.claims.parts.claims_journal`
        of the same dirs; ``cpu_hook``: the CDI hook that applies pinning (``--pinning hook``);
        ``withheld``: the devices another driver or a device plugin owns now
        (:mod:`driver.slices.foreign`), which no new claim gets; ``aux_cpus``: the exclusive CPUs
        each GPU or NIC of a claim brings (``--aux-cpus``, :mod:`driver.pinning.aux`)."""
        self.driver_name = driver_name
        self.node_name = node_name
        self.cdi_dir = cdi_dir
        self.plugin_dir = plugin_dir
        self._inventory = inventory
        self._planner = planner
        self._status = status
        self._on_fatal = on_fatal
        self._cpu_hook = cpu_hook
        self._host_edits = host_edits
        self._warnings = warnings
        #: the metadata dir, checked as a host path for containers at its first use
        self._metadata_dir: CheckedHostPath | None = None
        self._withheld = withheld
        self._aux_cpus = aux_cpus
        #: files and directories are written below these without following symbolic links
        self._dirs = DirsUnder((str(cdi_dir), str(plugin_dir)))
        self._journal = journal
        self._attributes = PublishedAttributes(numa_node_list=numa_node_list)  # as the slices have it
        self._lock = threading.Lock()
        #: what the last :meth:`reconcile` did per journaled claim: "ok" or "recreated" -> count
        self.recovery: Counter[str] = Counter()
        #: claims whose NVIDIA GPUs got a fallback or no user space, by source ("driver_root", "none")
        self.userspace_warnings: Counter[str] = Counter()

    # -- DriverPlugin ---------------------------------------------------------------------------

    def read_ahead(self, claims: Sequence[Claim]) -> None:
        """Before the locks (:class:`~driver.plugin.ReadsAhead`): parse what others changed in the
        CDI dirs, so the lock's holder never pays for a toolkit spec's parse. Only for a call
        with a claim allocated one of this node's GPUs: no other prepare reads the toolkit's specs,
        so a NIC or CPU claim does not pay for a look at the CDI dirs. Best effort: a failure here
        is met again, and reported per claim, by the prepare itself."""
        if not claims:
            return
        try:
            gpus = _allocated_gpus(claims, self._inventory(), self.driver_name)
            if gpus:
                self._host_edits.read_ahead(gpus)
        except Exception:  # the prepare looks again under the lock and reports it per claim
            _log.exception("reading the CDI dirs ahead of a prepare failed")

    def prepare_claims(self, claims: Sequence[Claim]) -> Mapping[str, PrepareResult]:
        """Prepare every fetched claim; one result per claim UID (see the module docstring)."""
        results: dict[str, PrepareResult] = {}
        planned: list[_Planned] = []
        with self._lock, self._dirs.call():
            inventory = self._inventory()
            self._journal.load()
            attrs = self._attributes.get(inventory)
            host_dirs = CheckedDirs()  # the host directories of device nodes, checked once a call
            dirty = False
            for claim in claims:
                ref, got = claim.ref, claim.obj
                try:
                    entry = self._journal.get(ref.uid)
                    if entry is not None and not entry.holds_devices_without_spec():
                        devices, changed = self._repeat(entry, got, ref, inventory, attrs)
                        dirty |= changed
                        results[ref.uid] = PrepareResult(devices=devices)
                        continue
                    planned.append(self._plan(ref, got, inventory, attrs, host_dirs))
                except ClaimError as exc:
                    results[ref.uid] = PrepareResult(error=f"{describe_claim(ref)}: {exc.reason}")
                except (PinningError, CdiSpecError) as exc:
                    text = str(exc).removeprefix(f"claim {ref.uid} ")
                    results[ref.uid] = PrepareResult(error=f"{describe_claim(ref)}: {text}")
                except Exception as exc:  # a bug must not fail the other claims of the batch
                    _log.exception("prepare failed unexpectedly", claim_uid=ref.uid)
                    results[ref.uid] = PrepareResult(error=f"{describe_claim(ref)}: internal error: {exc!r}")
            if planned or dirty:
                planned = self._save_or_fail(planned, results)
            done = self._write_planned(planned, results)
        self._report(done)
        return results

    def unprepare_claims(self, claims: Sequence[ClaimRef]) -> Mapping[str, str]:
        """Undo prepares; unknown or already unprepared claims succeed."""
        results, cleared = self._unprepare(claims)
        for ref in cleared:
            clear = partial(self._status.clear, ref.namespace, ref.name, ref.uid)
            self._best_effort(ref.uid, "clear", clear)
        return results

    def release_adopted(self, ref: ClaimRef) -> str:
        """Unprepare an adopted claim the apiserver confirms gone: "" or the error.

        As :meth:`unprepare_claims`, without clearing ``status.devices``: the claim is gone, and
        its name may hold another claim now, whose status is not this entry's to touch. The
        caller holds the cross-process lock.
        """
        results, _ = self._unprepare([ref])
        return results.get(ref.uid, "")

    def _unprepare(self, claims: Sequence[ClaimRef]) -> tuple[dict[str, str], list[ClaimRef]]:
        """Remove the claims' files and entries: (error per UID, the refs of removed entries)."""
        results: dict[str, str] = {}
        cleared: list[ClaimRef] = []
        log = _log.bind()  # one logger for the batch: the lazy proxy re-binds on every call
        with self._lock, self._dirs.call():
            self._journal.load()
            dirty = False
            for ref in claims:
                if ref.uid in results:
                    continue
                entry = self._journal.get(ref.uid)
                try:
                    self._remove_files(ref, entry)
                except OSError as exc:
                    path = exc.filename or "?"
                    results[ref.uid] = f"{describe_claim(ref)}: cannot remove {path}: {exc.strerror or exc}"
                    _log.error("unprepare failed", claim_uid=ref.uid, path=str(path), error=str(exc))
                    continue
                if entry is not None:
                    self._journal.remove(ref.uid)
                    dirty = True
                    cleared.append(ClaimRef(entry.namespace, entry.name, entry.uid))
                    log.info("unprepared", claim_uid=ref.uid, claim=f"{entry.namespace}/{entry.name}")
                results[ref.uid] = ""
            if dirty:
                self._journal.save()
        return results, cleared

    def handle_error(self, err: BaseException, msg: str) -> None:
        """Log background failures; a non-recoverable one goes to ``on_fatal`` (stop the driver)."""
        if is_recoverable(err):
            _log.warning(msg, error=str(err), recoverable=True)
            return
        _log.error(msg, error=str(err), recoverable=False)
        self._on_fatal(err, msg)

    # -- start-up -------------------------------------------------------------------------------

    def reconcile(self) -> int:
        """Re-create every journaled file missing or different on disk; returns how many.

        Run at start: after a reboot ``/var/run/cdi`` is empty but the journal is not. A spec's
        host paths are checked again first (:meth:`_rechecked`). Raises
        :class:`~driver.errors.JournalError` when the journal is unusable (the caller exits 1).
        The caller holds the cross-process lock (another process may be preparing).
        """
        with self._lock:
            self._journal.load()
            self._remove_stale_temp_files()
            count = 0
            recovery: Counter[str] = Counter()
            for entry in self._journal.entries():
                restored = 0
                specs = tuple(self._rechecked(entry.uid, stored) for stored in entry.cdi_specs)
                for stored in (*specs, *entry.metadata_files):
                    if self._restore(stored):
                        restored += 1
                        _log.info("re-created file", claim_uid=entry.uid, path=stored.path)
                recovery["recreated" if restored else "ok"] += 1
                count += restored
            self.recovery = recovery
            _log.info("reconciled journal", claims=len(self._journal), recreated=count)
            return count

    def _rechecked(self, claim_uid: str, stored: StoredFile) -> StoredFile:
        """A journaled CDI spec with its host paths checked again (:meth:`HostEdits.recheck`):
        after a reboot, what the runtime will resolve is the host as it is now."""
        try:
            spec = spec_from_json(loads_json(stored.content, what=stored.path))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            _log.warning("journaled CDI spec not re-checked", claim_uid=claim_uid, error=str(exc))
            return stored
        fresh, refused = self._host_edits.recheck(spec, own_dir=CONTAINER_DIR)
        if not refused:
            return stored
        _log.warning(
            "host paths left out of a re-created CDI spec",
            claim_uid=claim_uid,
            path=stored.path,
            refused=list(refused),
        )
        return replace(stored, content=spec_text(fresh))

    def _remove_stale_temp_files(self) -> None:
        """Temp files of writes a crash interrupted (``.<name>.<pid>.<tid>.<n>.tmp``)."""
        patterns = (
            (self.cdi_dir, f".{self.driver_name}_*.tmp"),
            (self._journal.path.parent, ".*.tmp"),
            (self.plugin_dir / METADATA_DIR, ".*.tmp"),
        )
        for directory, pattern in patterns:
            with contextlib.suppress(OSError):
                for path in directory.glob(pattern):
                    remove_file(path)
                    _log.info("removed stale temp file", path=str(path))

    def record_consumers(self, claim_uid: str, pods: frozenset[str]) -> bool:
        """Add pods learned to be the claim's consumers to its entry; True when the entry changed.

        Pinning learns them from the claim's ``status.reservedFor`` when a container of a pod the
        entry does not list names the claim (a shared claim's later pods, a rebuilt entry's). An
        unknown claim (unprepared meanwhile) is left alone. The caller holds the cross-process
        lock, as around prepare and unprepare.
        """
        with self._lock:
            self._journal.load()
            entry = self._journal.get(claim_uid)
            if entry is None:
                return False
            known = entry.reserved_pods or ()
            merged = tuple(dict.fromkeys((*known, *sorted(pods))))
            if entry.reserved_pods is not None and len(merged) == len(known):
                return False
            self._journal.put(replace(entry, reserved_pods=merged))
            self._journal.save()
            return True

    def journal_changes(
        self, mark: ChangeMark | None
    ) -> tuple[ChangeMark, Mapping[str, JournalEntry | None] | None]:
        """What changed in the journal since ``mark``: each changed claim's entry (None: gone), or
        None for a reader that must take every entry (:meth:`prepared_claims`); and the new mark.

        The prepared-claims index catches up with this after every call, so its work follows the
        claims a call changed, not the claims the node holds.
        """
        with self._lock:
            self._journal.load(persist=False)  # no cross-process lock here: never write
            now, uids = self._journal.changes_since(mark)
            if uids is None:
                return now, None
            return now, {uid: self._journal.get(uid) for uid in uids}

    def prepared_claims(self) -> list[JournalEntry]:
        """The journal's entries (for inspection and health: CDI IDs of prepared devices)."""
        with self._lock:
            self._journal.load(persist=False)  # no cross-process lock here: never write
            return list(self._journal.entries())

    @property
    def state_recoveries(self) -> Mapping[str, int]:
        """Claims rebuilt from evidence since start, by reason (``numadra_state_recoveries_total``)."""
        return self._journal.recoveries

    def close(self) -> None:
        """Close the journal's and the held directories' file descriptors."""
        with self._lock:
            self._journal.close()
            self._dirs.close()

    # -- internals ------------------------------------------------------------------------------

    def _check_not_in_use(self, view: ClaimView) -> None:
        """Last line of defence: a whole GPU or NIC is never prepared for two claims at once.

        Except with ``adminAccess``: the scheduler gives such a claim (monitoring, in a namespace
        labelled for it) a device beside its other claims, so it neither waits nor blocks.
        """
        for dev in view.devices:
            if dev.share_id is not None or dev.kind in SHAREABLE_KINDS or dev.admin_access:
                continue
            other = self._journal.holder(dev.pool, dev.device_name, except_uid=view.uid)
            if other is not None:
                raise ClaimError(
                    view.uid,
                    f"request {dev.request!r}: device {dev.device_name!r} is already prepared "
                    f"for claim {other.namespace}/{other.name} (uid {other.uid})",
                )

    def _check_not_withheld(self, view: ClaimView) -> None:
        """A new claim never gets a device another party owns now, even one the scheduler
        allocated from our slice before we withdrew it (both drivers starting at once). A claim
        prepared before keeps it: a repeated prepare answers from the journal and is not checked."""
        withheld = self._withheld()
        for dev in view.devices:
            owner = withheld.get(dev.device_name)
            if owner is not None:
                raise ClaimError(
                    view.uid,
                    f"request {dev.request!r}: device {dev.device_name!r} is withheld: {owner.describe()} "
                    "owns it on this node, so numadra no longer hands it out",
                )

    def _render(
        self,
        view: ClaimView,
        pinning: ClaimPinning | None,
        attrs: Mapping[str, Mapping[str, Any]],
        previous: Mapping[str, str] | None,
        pods: tuple[str, ...] | None = None,
        *,
        extras: DeviceExtras | None = None,
        groups: tuple[PodGroupRef, ...] = (),
    ) -> JournalEntry:
        """Everything to write for a claim, as a journal entry (pure apart from reading attrs, and
        making the metadata dir once, to check it: :meth:`_metadata_mounts`);
        ``pods``: the UIDs of the pods the claim is reserved for (:func:`reserved_pods`), ``groups``
        the PodGroups (:func:`reserved_pod_groups`);
        ``extras``: what the host adds to its devices (:meth:`_extras`)."""
        devices: list[PreparedDevice] = []
        specs: list[StoredFile] = []
        metas: list[StoredFile] = []
        if view.devices:
            files = metadata_files(
                view,
                driver_name=self.driver_name,
                plugin_dir=self.plugin_dir,
                attributes=attrs,
                previous=previous,
            )
            spec, devices = claim_spec(
                view,
                driver_name=self.driver_name,
                pinning=pinning,
                cpu_hook=self._cpu_hook,
                mounts=self._metadata_mounts(view, files),
                extras=extras,
            )
            spec_path = dir_prefix(self.cdi_dir) + claim_spec_file_name(self.driver_name, view.uid)
            specs.append(StoredFile(spec_path, spec_text(spec)))
            metas = [StoredFile(meta.host_path, meta.content) for meta in files]
        return JournalEntry(
            namespace=view.namespace,
            name=view.name,
            uid=view.uid,
            devices=tuple(devices),
            cdi_specs=tuple(specs),
            metadata_files=tuple(metas),
            pinning=pinning,
            admin_devices=tuple(dict.fromkeys(d.device_name for d in view.devices if d.admin_access)),
            reserved_pods=pods,
            reserved_groups=groups,
        )

    def _metadata_mounts(self, view: ClaimView, files: Sequence[MetadataFile]) -> dict[str, Mount]:
        """The mounts of a claim's metadata files; none (logged) when the plugin dir fails the
        check of host paths given to containers (:func:`checked_metadata_dir`)."""
        if not files:
            return {}
        if self._metadata_dir is None:  # checked once: changing it takes root from now on
            try:
                ensure_dir(metadata_dir(self.plugin_dir))  # the files are written after this
                self._metadata_dir = checked_metadata_dir(self.plugin_dir)
            except OSError as exc:  # UntrustedHostPathError, SymlinkError, or the kernel's
                _log.warning(
                    "claim prepared without device metadata mounts",
                    claim_uid=view.uid,
                    path=str(self.plugin_dir),
                    reason=str(exc),
                )
                return {}
        return {meta.request: meta.mount(self._metadata_dir) for meta in files}

    def _extras(self, view: ClaimView, dirs: CheckedDirs) -> DeviceExtras | None:
        """What the host adds to the claim's devices (NVIDIA user space, node groups); None for none.
        ``dirs``: the host directories checked for the call's earlier claims."""
        if not any(d.kind in _HOST_EDITED for d in view.devices):
            return None
        return self._host_edits.for_devices(view.devices, dirs=dirs)

    def _plan(
        self,
        ref: ClaimRef,
        claim: JsonObject,
        inventory: Inventory,
        attrs: Mapping[str, Mapping[str, Any]],
        host_dirs: CheckedDirs,
    ) -> _Planned:
        """Decide a new claim and put it into the journal (in memory); ``host_dirs``: the host
        directories checked for the call's earlier claims."""
        view = select_devices(
            claim, ref, driver_name=self.driver_name, node_name=self.node_name, inventory=inventory
        )
        self._check_not_withheld(view)
        self._check_not_in_use(view)
        demand = aux_demand(view, self._aux_cpus, inventory) if self._aux_cpus else None
        requests = with_aux_cpus(cpu_requests(view), demand)
        pinning = None
        if requests:
            taken = self._journal.taken_cpus(except_uid=ref.uid)
            try:
                pinning = self._planner.plan(ref.uid, requests, taken, memory_nodes=memory_nodes(view))
            except CpuExhaustedError as exc:
                if demand is None:
                    raise
                raise CpuExhaustedError(
                    f"{exc}; {demand.count} of the CPUs asked are the auxiliary CPUs of device(s) "
                    f"{demand.devices} (--aux-cpus {self._aux_cpus}, the devices' cpu overhead that "
                    "the scheduler counted against node allocatable)"
                ) from exc
        # the "prepared" line names the pods; none (not from a kubelet) means NRI pins nothing
        extras = self._extras(view, host_dirs)
        entry = self._render(
            view, pinning, attrs, None, reserved_pods(claim), extras=extras, groups=reserved_pod_groups(claim)
        )
        self._journal.put(entry)
        return _Planned(ref, claim, entry, extras)

    def _repeat(
        self,
        entry: JournalEntry,
        claim: JsonObject,
        ref: ClaimRef,
        inventory: Inventory,
        attrs: Mapping[str, Mapping[str, Any]],
    ) -> tuple[tuple[PreparedDevice, ...], bool]:
        """A repeated prepare: same devices and CDI IDs; refresh changed metadata; restore files."""
        changed = False
        try:
            view = select_devices(
                claim, ref, driver_name=self.driver_name, node_name=self.node_name, inventory=inventory
            )
            previous = {f.path: f.content for f in entry.metadata_files}
            fresh = self._render(view, entry.pinning, attrs, previous)  # the host's extras: journaled
            if fresh.metadata_files != entry.metadata_files and _own_ids(fresh.devices) == _own_ids(
                entry.devices
            ):
                entry = replace(entry, metadata_files=fresh.metadata_files)
                self._journal.put(entry)
                changed = True
        except (ClaimError, CdiSpecError) as exc:
            # prepared before and still journaled: answer from the journal, as the kubelet expects
            _log.warning("repeat prepare could not re-read the claim", claim_uid=ref.uid, error=str(exc))
        known = entry.reserved_pods or ()
        pods = tuple(dict.fromkeys((*known, *reserved_pods(claim))))
        groups = tuple(dict.fromkeys((*entry.reserved_groups, *reserved_pod_groups(claim))))
        # a pod (or PodGroup) added to a shared claim, an entry from before pods were recorded, or
        # a rebuilt one: the kubelet read this very claim (its UID checked), so it exists and is
        # not adopted
        if (
            len(pods) > len(known)
            or len(groups) > len(entry.reserved_groups)
            or entry.reserved_pods is None
            or entry.adopted
        ):
            entry = replace(entry, reserved_pods=pods, reserved_groups=groups, adopted=False)
            self._journal.put(entry)
            changed = True
        for stored in entry.files():
            if self._restore(stored):
                _log.info("re-created file", claim_uid=ref.uid, path=stored.path)
        _log.info("prepare repeated from journal", claim_uid=ref.uid, devices=len(entry.devices))
        return entry.devices, changed

    def _save_or_fail(self, planned: list[_Planned], results: dict[str, PrepareResult]) -> list[_Planned]:
        """Save the journal; if that fails, the new claims fail (and leave the journal as it was)."""
        try:
            self._journal.save()
        except OSError as exc:
            for item in planned:
                self._journal.remove(item.ref.uid)
                results[item.ref.uid] = PrepareResult(
                    error=f"{describe_claim(item.ref)}: cannot write the journal {self._journal.path}: {exc}"
                )
            _log.error(
                "cannot write journal",
                path=str(self._journal.path),
                error=str(exc),
                claim_uids=[item.ref.uid for item in planned],
            )
            return []
        return planned

    def _write_planned(self, planned: list[_Planned], results: dict[str, PrepareResult]) -> list[_Planned]:
        """Write the files of newly planned claims; a failure undoes that claim only.

        Serially: the writes are small, unsynced and CPU-bound in Python, so worker threads would
        only add GIL hand-offs.
        """
        done: list[_Planned] = []
        failed: list[str] = []
        log = _log.bind()  # one logger for the batch: the lazy proxy re-binds on every call
        for item in planned:
            uid = item.ref.uid
            try:
                for stored in item.entry.files():
                    self._write(stored)
            except OSError as exc:
                failed.append(uid)
                self._journal.remove(uid)
                self._remove_entry_files(item.entry)
                results[uid] = PrepareResult(
                    error=f"{describe_claim(item.ref)}: cannot write "
                    f"{exc.filename or '?'}: {exc.strerror or exc}"
                )
                _log.error("prepare failed writing files", claim_uid=uid, error=str(exc))
                continue
            results[uid] = PrepareResult(devices=item.entry.devices)
            done.append(item)
            log.info("prepared", claim_uid=uid, **_prepared_keys(item.entry))
        if failed:
            try:
                self._journal.save()
            except OSError as exc:  # the entries stay journaled; unprepare or a repeat cleans up
                _log.error(
                    "cannot write journal", path=str(self._journal.path), error=str(exc), claim_uids=failed
                )
        return done

    def _write(self, stored: StoredFile) -> None:
        """Atomic, unsynced write (the fsynced journal can re-create it); parents made on demand."""
        self._dirs.write(stored.path, stored.content.encode(), stored.mode)

    def _restore(self, stored: StoredFile) -> bool:
        """Write ``stored`` if the file is missing or differs; True when it was written."""
        data = stored.content.encode()
        try:
            if read_file(stored.path, max_bytes=len(data)) == data:  # a link, FIFO, bigger file: rewrite
                return False
        except OSError:
            pass
        self._write(stored)
        return True

    def _remove_entry_files(self, entry: JournalEntry) -> None:
        """Best-effort undo of a failed prepare (the error being reported is the first one)."""
        for stored in entry.files():
            with contextlib.suppress(OSError):
                self._dirs.remove(stored.path)

    def _remove_files(self, ref: ClaimRef, entry: JournalEntry | None) -> None:
        """Remove a claim's files: journaled ones, plus any file named after its UID.

        Every file of a claim carries its UID in its name, so the files of a claim the journal
        lacks (a crash between writing files and saving the journal) are found by name alone,
        and no other claim's file can match.
        """
        removed: set[str] = set()
        if entry is not None:
            for stored in entry.files():
                self._dirs.remove(stored.path)
                removed.add(stored.path)
        if check_claim_uid(ref.uid):
            return  # not a UID we could have written files for
        spec_path = dir_prefix(self.cdi_dir) + claim_spec_file_name(self.driver_name, ref.uid)
        if spec_path not in removed:
            self._dirs.remove(spec_path)
        if entry is None:  # files without a journal entry (a lost journal): look for leftovers
            with contextlib.suppress(OSError):
                for path in Path(metadata_dir(self.plugin_dir)).glob(metadata_file_glob(ref.uid)):
                    self._dirs.remove(str(path))

    def _report(self, done: Sequence[_Planned]) -> None:
        for item in done:  # once per claim: a repeat prepare answers from the journal
            extras = item.extras
            if extras is not None and extras.warnings and extras.source is not None:
                _log.warning(
                    "nvidia user space",
                    claim_uid=item.ref.uid,
                    claim=f"{item.ref.namespace}/{item.ref.name}",
                    source=extras.source.value,
                    warnings=list(extras.warnings),
                )
                self.userspace_warnings[extras.source.name.lower()] += 1
                warn = partial(self._warnings.warn, item.claim, extras.source, extras.warnings)
                self._best_effort(item.ref.uid, "warn", warn)
        status = self._status
        for item in done:
            self._best_effort(
                item.ref.uid,
                "report_prepared",
                partial(status.report_prepared, item.claim, item.entry.devices),
            )

    def _best_effort(self, claim_uid: str, what: str, call: Callable[[], object]) -> None:
        try:
            call()
        except Exception as exc:
            _log.warning("status writer failed", claim_uid=claim_uid, call=what, error=str(exc))
