"""``FakeNvml``: the few ``pynvml`` calls :class:`driver.health.xid.NvmlXidSource` makes.

NVML needs an NVIDIA GPU and driver, which CI machines do not have; this fake mirrors pynvml's
names and behaviour for event sets (``nvmlEventSetWait_v2`` raising ``NVMLError_Timeout`` when
nothing is pending, error classes told apart by name).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

__all__ = ["FakeNvml"]

# ruff: noqa: N801, N815, N818 - pynvml's names, kept so that the code under test calls the same


class NVMLError_Timeout(Exception):
    """Nothing pending."""


class NVMLError_NotSupported(Exception):
    """Events not supported on this device."""


@dataclass
class _PciInfo:
    busId: str


@dataclass
class _Event:
    device: str
    eventType: int
    eventData: int


class FakeNvml:
    """Devices are their NVML bus ids ("00000000:3B:00.0"); events queued with :meth:`emit`."""

    nvmlEventTypeXidCriticalError = 0x8
    nvmlEventTypeSingleBitEccError = 0x1

    def __init__(self, unsupported: frozenset[str] = frozenset()) -> None:
        self.events: list[_Event] = []
        self.registered: dict[str, int] = {}
        self.unsupported = unsupported
        self.sets = 0

    def emit(self, nvml_bus_id: str, code: int, event_type: int = 0x8) -> None:
        self.events.append(_Event(nvml_bus_id, event_type, code))

    def nvmlEventSetCreate(self) -> str:
        self.sets += 1
        return f"set-{self.sets}"

    def nvmlDeviceGetHandleByPciBusId(self, bus_id: bytes) -> str:
        text = bus_id.decode().upper()
        domain, _, rest = text.partition(":")
        return f"{int(domain, 16):08X}:{rest}"

    def nvmlDeviceRegisterEvents(self, handle: str, types: int, event_set: Any) -> None:
        if handle in self.unsupported:
            raise NVMLError_NotSupported()
        self.registered[handle] = types

    def nvmlEventSetWait_v2(self, event_set: Any, timeout_ms: int) -> _Event:
        assert timeout_ms == 0  # a health poll must never block
        for i, event in enumerate(self.events):
            if event.device in self.registered:
                return self.events.pop(i)
        raise NVMLError_Timeout()

    def nvmlDeviceGetPciInfo(self, handle: str) -> _PciInfo:
        return _PciInfo(handle)
