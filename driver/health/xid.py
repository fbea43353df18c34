"""Critical Xid events of NVIDIA GPUs: the seam (:class:`XidSource`) and its NVML implementation.

An Xid is the NVIDIA driver's error report. Most are about one application (a bad kernel launch);
a few say the GPU itself is broken until it is reset, and those count as fatal (sticky) faults:

* 48: double-bit ECC error;
* 79: the GPU has fallen off the bus;
* 94: contained ECC error, 95: uncontained ECC error (the affected memory is unusable until a
  reset remaps it).

NVML delivers them as ``nvmlEventTypeXidCriticalError`` events on an event set the devices are
registered to; :meth:`NvmlXidSource.drain` waits on it with a zero timeout, so a health poll never
blocks. Nothing here runs without ``pynvml`` and the live host (see ``SignalReader``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from driver.inventory.nvml import normalize_nvml_bus_id
from driver.log import get_logger

__all__ = ["CRITICAL_XIDS", "NvmlXidSource", "XidSource"]

CRITICAL_XIDS = frozenset({48, 79, 94, 95})
_log = get_logger("health.xid")


class XidSource(Protocol):
    """Where critical Xid events come from (NVML here; a named fake in tests)."""

    def drain(self, bus_ids: Sequence[str]) -> Mapping[str, int]:
        """Critical Xids reported since the last call: PCI address -> Xid code (the first one).

        ``bus_ids`` are the GPUs the caller cares about; a source may start watching them now.
        Never blocks.
        """
        ...


def _error_name(exc: BaseException) -> str:
    return type(exc).__name__


class NvmlXidSource:
    """Critical Xid events from NVML (``pynvml``, initialised by the caller)."""

    def __init__(self, nvml: Any) -> None:
        self._nvml = nvml
        self._set: Any = None
        #: PCI address -> registered (False: NVML refused, do not ask again every poll)
        self._watched: dict[str, bool] = {}

    def _watch(self, bus_ids: Sequence[str]) -> None:
        nvml = self._nvml
        for bus_id in bus_ids:
            if bus_id in self._watched:
                continue
            try:
                if self._set is None:
                    self._set = nvml.nvmlEventSetCreate()
                handle = nvml.nvmlDeviceGetHandleByPciBusId(bus_id.encode())
                nvml.nvmlDeviceRegisterEvents(handle, nvml.nvmlEventTypeXidCriticalError, self._set)
                self._watched[bus_id] = True
            except Exception as exc:  # NVML raises its own error classes (NotSupported, GpuIsLost)
                self._watched[bus_id] = False
                _log.info("no xid events for this gpu", device=bus_id, error=_error_name(exc))

    def drain(self, bus_ids: Sequence[str]) -> Mapping[str, int]:
        """See :meth:`XidSource.drain`."""
        self._watch(bus_ids)
        if self._set is None:
            return {}
        nvml = self._nvml
        wait = getattr(nvml, "nvmlEventSetWait_v2", None) or nvml.nvmlEventSetWait
        out: dict[str, int] = {}
        while True:
            try:
                data = wait(self._set, 0)
            except Exception as exc:
                if _error_name(exc) == "NVMLError_Timeout":  # nothing (more) pending
                    return out
                raise
            if not int(data.eventType) & int(nvml.nvmlEventTypeXidCriticalError):
                continue
            code = int(data.eventData)
            if code not in CRITICAL_XIDS:
                continue
            bus_id = normalize_nvml_bus_id(nvml.nvmlDeviceGetPciInfo(data.device).busId)
            out.setdefault(bus_id, code)
