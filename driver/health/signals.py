"""Raw health readings of one device from the host tree: what sysfs (and NVML, if present) says now.

A reading is one observation; smoothing (hysteresis) is the monitor's job. The reader remembers
only the AER baselines and the *fatal* faults. Signals, strongest first:

* the PCI function is gone from ``sys/bus/pci/devices`` (hot-unplug, fell off the bus): Unhealthy;
* ``aer_dev_fatal``'s ``TOTAL_ERR_FATAL`` went up since the last reading: Unhealthy, **sticky**;
* NVML reports a critical Xid for the GPU (fell off the bus 79, double-bit ECC 48, contained and
  uncontained ECC 94/95): Unhealthy, **sticky** (only with ``pynvml`` and the host root ``/``);
* NVML says the GPU is lost: Unhealthy;
* NIC: no netdev visible in our namespace (moved into a pod) or administratively down: Unknown,
  because nothing can be said about the link; carrier 0 or operstate down: Unhealthy (recoverable:
  a cable or a switch port comes back without anything done to the device); an RDMA port whose
  state is not ACTIVE: Unhealthy;
* cpu (NUMA) devices: the node directory vanished while others exist: Unhealthy.

Why fatal faults stick: a fatal AER error or a critical Xid leaves the device in a state that only
a reset repairs, while the counter that told us simply stays where it is. Reading "no further
increase" as healthy would untaint such a GPU after the monitor's hysteresis, and the scheduler
would hand it to new pods. So a fatal fault is kept until there is evidence of a reset:

* the PCI function disappeared and came back (remove/rescan, hot-plug, a secondary bus reset that
  re-enumerates), or
* its ``TOTAL_ERR_FATAL`` is below the value that tripped the fault: the kernel keeps the counters
  per device instance, so a lower value is a new instance;

or until an operator clears it (:mod:`driver.health.clear`, ``numadra health clear``).

Faults outlive the driver process. With ``faults_path`` (``<plugin-dir>/health-faults.json``,
mode 0600) every trip, reset and clear rewrites that file atomically, and a new process starts
from it: a rolling update or a crash must not untaint a broken GPU, because the first reading of a
fresh process has no earlier counter to compare with and would find the device "healthy". The file
records the host's boot id: after a reboot every device was reset, so the faults of an earlier
boot are dropped (logged). A fault whose function disappeared and came back while no driver ran
cannot be told from one that did not: it stays (fail safe) until the counter says otherwise or an
operator clears it. A damaged file is logged as an error and its valid entries are kept.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cdi.io import atomic_write_bytes
from driver.errors import UntrustedValueError
from driver.health.netinfo import netdev_dir
from driver.health.xid import NvmlXidSource, XidSource
from driver.inventory.model import Gpu, InventoryDevice, Nic, NumaNode
from driver.inventory.sysfs import is_live_host, list_dir, read_text
from driver.log import get_logger
from driver.plugin import HealthState
from driver.untrusted.files import read_file
from driver.untrusted.values import MAX_WALL_CLOCK_S, ascii_int, bounded_int, bounded_number, loads_json

__all__ = ["HEALTH_FAULTS_FILE", "FatalFault", "Reading", "SignalReader"]

#: the file in the plugin dir that keeps fatal faults across driver restarts
HEALTH_FAULTS_FILE = "health-faults.json"

_log = get_logger("health.signals")

# ruff: noqa: PTH110, PTH112, PTH118 - os.path on purpose: many small reads per poll (see inventory/sysfs.py)

_IFF_UP = 0x1
#: what a persisted fault's key and reason must look like (the file can be damaged or planted)
_BUS_ID = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]")
_REASON = re.compile(r"[A-Za-z0-9]{1,64}")
_FAULTS_VERSION = 1
_FAULTS_MAX_BYTES = 1 << 20
#: the AER counters are u64 in the kernel
_MAX_COUNTER = (1 << 64) - 1
_LINK_DOWN_STATES = frozenset({"down", "lowerlayerdown", "notpresent"})


@dataclass(frozen=True, slots=True)
class Reading:
    """One observation: a state and a short CamelCase reason (empty when healthy).

    ``sticky`` marks a fatal fault that stays until a reset or an operator clear.
    """

    state: HealthState
    reason: str = ""
    sticky: bool = False


HEALTHY = Reading(HealthState.HEALTHY)


@dataclass(slots=True)
class FatalFault:
    """A fatal fault of one PCI function, kept until evidence of a reset (see the module docstring)."""

    reason: str  # "PciAerFatal", "GpuXid79"
    #: TOTAL_ERR_FATAL when it tripped (None when unreadable): a lower value is a new instance
    trip_total: int | None
    #: wall-clock time it tripped: an operator clear must be newer than the fault
    since: float
    gone: bool = False  # the function disappeared since it tripped


class SignalReader:
    """Reads the signals of inventory devices under ``host_root``; remembers AER counters and
    fatal faults (keyed by PCI address: a fault belongs to the function, whatever its name).

    ``xid_source`` is the seam to NVML's critical Xid events (:mod:`driver.health.xid`); by
    default the NVML one when NVML is loaded, else none. ``clock`` gives wall-clock seconds.
    """

    def __init__(
        self,
        host_root: str = "/",
        *,
        use_nvml: bool | None = None,
        xid_source: XidSource | None = None,
        clock: Callable[[], float] = time.time,
        faults_path: str | None = None,
    ) -> None:
        self.host_root = host_root
        self._aer_fatal: dict[str, int] = {}
        self._fatal: dict[str, FatalFault] = {}
        self._clock = clock
        self._faults_path = faults_path
        self._boot_id = read_text(self._path("proc/sys/kernel/random/boot_id"))
        if faults_path is not None:
            self._fatal = _load_faults(faults_path, self._boot_id)
        self._nvml: Any = None
        if use_nvml if use_nvml is not None else is_live_host(host_root):
            self._nvml = _load_nvml()
        if xid_source is None and self._nvml is not None:
            xid_source = NvmlXidSource(self._nvml)
        self._xids = xid_source
        self._pending_xids: dict[str, int] = {}

    def _path(self, *parts: str) -> str:
        return os.path.join(self.host_root, *parts)

    # -- fatal faults ---------------------------------------------------------------------------
    def fatal_fault(self, bus_id: str) -> FatalFault | None:
        """The sticky fault of a PCI function, or None."""
        return self._fatal.get(bus_id)

    def note_gone(self, bus_id: str) -> None:
        """The function left the inventory (a rescan after hot-unplug): a later return is a reset."""
        self._mark_gone(bus_id)
        self._aer_fatal.pop(bus_id, None)

    def clear_fatal(self, bus_id: str) -> FatalFault | None:
        """Forget a sticky fault (an operator's explicit clear); returns what was forgotten.

        The AER baseline is re-read at the next reading, so the old count is not a new fault.
        """
        self._aer_fatal.pop(bus_id, None)
        fault = self._fatal.pop(bus_id, None)
        if fault is not None:
            self._save_faults()
        return fault

    def _trip(self, bus_id: str, reason: str, total: int | None) -> Reading:
        self._fatal[bus_id] = FatalFault(reason, total, self._clock())
        _log.warning("fatal device fault: kept unhealthy until a reset", device=bus_id, reason=reason)
        self._save_faults()
        return Reading(HealthState.UNHEALTHY, reason, sticky=True)

    def _mark_gone(self, bus_id: str) -> None:
        fault = self._fatal.get(bus_id)
        if fault is not None and not fault.gone:
            fault.gone = True
            self._save_faults()

    def _save_faults(self) -> None:
        """Rewrite the faults file (see the module docstring); a failure is logged, never raised:
        the fault still holds in this process, and the next change writes again."""
        if self._faults_path is None:
            return
        doc = {
            "version": _FAULTS_VERSION,
            "bootID": self._boot_id,
            "faults": {
                bus_id: {"reason": f.reason, "tripTotal": f.trip_total, "since": f.since, "gone": f.gone}
                for bus_id, f in sorted(self._fatal.items())
            },
        }
        path = self._faults_path
        data = json.dumps(doc, sort_keys=True).encode()
        try:
            atomic_write_bytes(path, data, 0o600, roots=(os.path.dirname(path),))  # noqa: PTH120
        except OSError as exc:
            _log.error(
                "cannot record fatal device faults", path=path, error=str(exc), faults=sorted(self._fatal)
            )

    def _reset_seen(self, bus_id: str, fault: FatalFault, total: int | None) -> bool:
        """True (and the fault forgotten) when the function shows evidence of a reset."""
        if fault.gone:
            evidence = "the PCI function disappeared and came back"
        elif fault.trip_total is not None and total is not None and total < fault.trip_total:
            evidence = f"AER fatal counter {total} is below {fault.trip_total}: a new device instance"
        else:
            return False
        del self._fatal[bus_id]
        _log.info(
            "fatal device fault cleared by a reset", device=bus_id, reason=fault.reason, evidence=evidence
        )
        self._save_faults()
        return True

    # -- readings -------------------------------------------------------------------------------
    def read(self, device: InventoryDevice) -> Reading:
        """The current reading of one device."""
        if isinstance(device, NumaNode):
            return self._numa(device)
        bus_id = device.pci.bus_id
        pci_dir = self._path("sys/bus/pci/devices", bus_id)
        fault = self._fatal.get(bus_id)
        if not os.path.exists(pci_dir):
            self._mark_gone(bus_id)
            self._aer_fatal.pop(bus_id, None)  # a device that comes back is a new instance
            return Reading(HealthState.UNHEALTHY, "DeviceRemoved")
        total = _aer_total(pci_dir)
        if fault is not None and not self._reset_seen(bus_id, fault, total):
            self._note_aer(bus_id, total)
            return Reading(HealthState.UNHEALTHY, fault.reason, sticky=True)
        if self._note_aer(bus_id, total):
            return self._trip(bus_id, "PciAerFatal", total)
        if isinstance(device, Gpu):
            return self._gpu(device, total)
        return self._nic(device, pci_dir)

    def _note_aer(self, bus_id: str, total: int | None) -> bool:
        """Record the AER total; True when it rose since the last reading (a malformed file: no signal)."""
        if total is None:
            return False
        before = self._aer_fatal.get(bus_id)
        self._aer_fatal[bus_id] = total
        return before is not None and total > before

    def _xid(self, gpu: Gpu) -> int | None:
        """A critical Xid reported for this GPU since the last reading, or None."""
        if self._xids is None or gpu.vendor != "nvidia":
            return None
        try:
            for bus_id, code in self._xids.drain([gpu.pci.bus_id]).items():
                self._pending_xids.setdefault(bus_id, code)
        except Exception as exc:  # an event source failure is "no signal", never a crash
            _log.info("xid events unreadable", device=gpu.name, error=str(exc))
        return self._pending_xids.pop(gpu.pci.bus_id, None)

    def _gpu(self, gpu: Gpu, aer_total: int | None) -> Reading:
        xid = self._xid(gpu)
        if xid is not None:
            return self._trip(gpu.pci.bus_id, f"GpuXid{xid}", aer_total)
        if self._nvml is None or gpu.vendor != "nvidia":
            return HEALTHY
        try:
            self._nvml.nvmlDeviceGetHandleByPciBusId(gpu.pci.bus_id.encode())
        except Exception as exc:  # NVML signals through its own error classes
            if type(exc).__name__ == "NVMLError_GpuIsLost":
                return Reading(HealthState.UNHEALTHY, "GpuLost")
        return HEALTHY

    def _nic(self, nic: Nic, pci_dir: str) -> Reading:
        netdev = netdev_dir(pci_dir, nic.interface_name)
        if netdev is None:
            return Reading(HealthState.UNKNOWN, "NetdevNotVisible")
        flags = read_text(os.path.join(netdev, "flags"))
        if flags is not None and not _flag_set(flags, _IFF_UP):
            return Reading(HealthState.UNKNOWN, "AdminDown")
        if read_text(os.path.join(netdev, "carrier")) == "0":
            return Reading(HealthState.UNHEALTHY, "NoCarrier")
        if (read_text(os.path.join(netdev, "operstate")) or "") in _LINK_DOWN_STATES:
            return Reading(HealthState.UNHEALTHY, "LinkDown")
        for rdma in nic.rdma_devices:
            ports = self._path("sys/class/infiniband", rdma, "ports")
            for port in list_dir(ports):
                state = read_text(os.path.join(ports, port, "state"))
                if state is not None and "ACTIVE" not in state.upper():
                    return Reading(HealthState.UNHEALTHY, "RdmaPortDown")
        return HEALTHY

    def _numa(self, node: NumaNode) -> Reading:
        nodes = self._path("sys/devices/system/node")
        if not os.path.isdir(nodes):  # no NUMA directories at all: node 0 was synthesized
            return HEALTHY
        if not os.path.isdir(os.path.join(nodes, f"node{node.id}")):
            return Reading(HealthState.UNHEALTHY, "NumaNodeGone")
        return HEALTHY


def _flag_set(flags: str, bit: int) -> bool:
    """Whether a netdev ``flags`` file ("0x1003") has ``bit``; True when it is not such a number
    (a file we cannot read says nothing against the interface)."""
    if not flags.startswith("0x"):
        return True
    try:
        return bool(ascii_int(flags[2:], what="netdev flags", lo=0, hi=(1 << 64) - 1, base=16) & bit)
    except UntrustedValueError:
        return True


def _aer_total(pci_dir: str) -> int | None:
    """``TOTAL_ERR_FATAL`` of ``aer_dev_fatal``; None when the file is absent or malformed."""
    text = read_text(os.path.join(pci_dir, "aer_dev_fatal"))
    if text is None:
        return None
    total = None
    for line in text.splitlines():
        name, _, value = line.strip().rpartition(" ")
        if name.strip() == "TOTAL_ERR_FATAL":
            with contextlib.suppress(UntrustedValueError):
                total = ascii_int(value, what="TOTAL_ERR_FATAL", lo=0, hi=(1 << 64) - 1)
    return total


def _read_faults_file(path: str) -> bytes | None:
    """The file's bytes, None when absent or refused (logged): see :mod:`driver.untrusted.files`;
    a planted link, FIFO or oversized file must neither redirect, block nor swell the start."""
    try:
        return read_file(path, max_bytes=_FAULTS_MAX_BYTES)
    except FileNotFoundError:
        return None
    except OSError as exc:
        _log.error("cannot read recorded fatal device faults", path=path, error=str(exc))
        return None


def _load_faults(path: str, boot_id: str | None) -> dict[str, FatalFault]:
    """The faults an earlier process recorded (see the module docstring); {} when there are none.

    Every entry is checked; a bad one is logged and skipped, the others kept.
    """
    data = _read_faults_file(path)
    if data is None:
        return {}
    try:
        doc = loads_json(data, what=path)
        if not isinstance(doc, dict) or doc.get("version") != _FAULTS_VERSION:
            raise ValueError(f"not a version {_FAULTS_VERSION} faults document")
        faults = doc.get("faults")
        if not isinstance(faults, dict):
            raise ValueError("'faults' is not an object")
    except ValueError as exc:
        _log.error("recorded fatal device faults are damaged; none restored", path=path, error=str(exc))
        return {}
    recorded_boot = doc.get("bootID")
    if boot_id is not None and isinstance(recorded_boot, str) and recorded_boot != boot_id:
        if faults:
            _log.info(
                "fatal device faults of an earlier boot dropped: a reboot reset every device",
                path=path,
                devices=sorted(str(k) for k in faults),
            )
        return {}
    kept: dict[str, FatalFault] = {}
    for bus_id, item in faults.items():
        try:
            kept[bus_id] = _fault_from(bus_id, item)
        except ValueError as exc:
            _log.error(
                "recorded fatal device fault is malformed; skipped",
                path=path,
                device=str(bus_id)[:64],
                error=str(exc)[:200],
            )
    if kept:
        _log.warning("fatal device faults restored: kept unhealthy until a reset", devices=sorted(kept))
    return kept


def _fault_from(bus_id: object, item: object) -> FatalFault:
    """One recorded fault; UntrustedValueError (a ValueError) names the first field that is off."""
    if not isinstance(bus_id, str) or not _BUS_ID.fullmatch(bus_id):
        raise UntrustedValueError("fault key", "is not a PCI address")
    if not isinstance(item, dict):
        raise UntrustedValueError(bus_id, "is not an object")
    reason, total, since, gone = (
        item.get("reason"),
        item.get("tripTotal"),
        item.get("since"),
        item.get("gone"),
    )
    if not isinstance(reason, str) or not _REASON.fullmatch(reason):
        raise UntrustedValueError(f"{bus_id}.reason", "is not a CamelCase reason")
    if total is not None:
        total = bounded_int(total, what=f"{bus_id}.tripTotal", lo=0, hi=_MAX_COUNTER)
    when = bounded_number(since, what=f"{bus_id}.since", lo=0, hi=MAX_WALL_CLOCK_S)
    if not isinstance(gone, bool):
        raise UntrustedValueError(f"{bus_id}.gone", "is not a boolean")
    return FatalFault(reason, total, when, gone)


def _load_nvml() -> Any:
    """pynvml, initialised, or None (not installed, no driver): NVML is an extra signal only."""
    try:
        nvml: Any = importlib.import_module("pynvml")
        nvml.nvmlInit()
    except Exception:
        return None
    return nvml
