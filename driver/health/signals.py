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
increase" as healthy untainted such a GPU about 6 s later and the scheduler handed it to new pods.
So a fatal fault is kept until there is evidence of a reset:

* the PCI function disappeared and came back (remove/rescan, hot-plug, a secondary bus reset that
  re-enumerates), or
* its ``TOTAL_ERR_FATAL`` is below the value that tripped the fault: the kernel keeps the counters
  per device instance, so a lower value is a new instance;

or until an operator clears it (:mod:`driver.health.clear`, ``numadra health clear``).
"""

from __future__ import annotations

import importlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from driver.health.netinfo import netdev_dir
from driver.health.xid import NvmlXidSource, XidSource
from driver.inventory._sysfs import is_live_host, list_dir, read_text
from driver.inventory.model import Gpu, InventoryDevice, Nic, NumaNode
from driver.log import get_logger
from driver.plugin import HealthState

__all__ = ["FatalFault", "Reading", "SignalReader"]

_log = get_logger("health.signals")

# ruff: noqa: PTH110, PTH112, PTH118 - os.path on purpose: many small reads per poll (see _sysfs)

_IFF_UP = 0x1
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
    ) -> None:
        self.host_root = host_root
        self._aer_fatal: dict[str, int] = {}
        self._fatal: dict[str, FatalFault] = {}
        self._clock = clock
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
        fault = self._fatal.get(bus_id)
        if fault is not None:
            fault.gone = True
        self._aer_fatal.pop(bus_id, None)

    def clear_fatal(self, bus_id: str) -> FatalFault | None:
        """Forget a sticky fault (an operator's explicit clear); returns what was forgotten.

        The AER baseline is re-read at the next reading, so the old count is not a new fault.
        """
        self._aer_fatal.pop(bus_id, None)
        return self._fatal.pop(bus_id, None)

    def _trip(self, bus_id: str, reason: str, total: int | None) -> Reading:
        self._fatal[bus_id] = FatalFault(reason, total, self._clock())
        _log.warning("fatal device fault: kept unhealthy until a reset", device=bus_id, reason=reason)
        return Reading(HealthState.UNHEALTHY, reason, sticky=True)

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
            if fault is not None:
                fault.gone = True
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
        if flags is not None and flags.startswith("0x") and not int(flags, 16) & _IFF_UP:
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


def _aer_total(pci_dir: str) -> int | None:
    """``TOTAL_ERR_FATAL`` of ``aer_dev_fatal``; None when the file is absent or malformed."""
    text = read_text(os.path.join(pci_dir, "aer_dev_fatal"))
    if text is None:
        return None
    total = None
    for line in text.splitlines():
        name, _, value = line.strip().rpartition(" ")
        if name.strip() == "TOTAL_ERR_FATAL" and value.isascii() and value.isdigit():
            total = int(value)
    return total


def _load_nvml() -> Any:
    """pynvml, initialised, or None (not installed, no driver): NVML is an extra signal only."""
    try:
        nvml: Any = importlib.import_module("pynvml")
        nvml.nvmlInit()
    except Exception:
        return None
    return nvml
